#include "xfrm/firewall_sync.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <sstream>

#include "xfrm/nftables_rule_batch.h"
#include "xfrm/policy_index.h"

namespace espgw::xfrm {
namespace {

constexpr size_t kIn = 0, kFwd = 1, kOut = 2, kFailClosed = 3;

struct ChainLayout {
  const char* name;
  std::vector<std::pair<size_t, size_t>> parts;  // (part, handle slot) in chain order
};
// As firewall_ruleset lays the table out.
const std::array<ChainLayout, 3>& chain_layouts() {
  static const std::array<ChainLayout, 3> layouts = {{
      {"input", {{kIn, 0}}},
      {"forward", {{kFwd, 0}, {kOut, 0}, {kFailClosed, 0}}},
      {"output", {{kOut, 1}, {kFailClosed, 1}}},
  }};
  return layouts;
}

size_t part_of(Direction direction) {
  switch (direction) {
    case Direction::in:
      return kIn;
    case Direction::fwd:
      return kFwd;
    case Direction::out:
      break;
  }
  return kOut;
}

// Sorts as PolicyOrder does: the SPD's lookup order. 15 bytes, which std::string keeps
// without a heap block of its own: the sequence's low 56 bits, which one increment per
// policy added never exhausts.
std::string policy_key(const Policy& policy, uint64_t sequence) {
  const PolicyOrder order = PolicyOrder::of(policy, sequence);
  std::string key(15, '\0');
  for (int i = 0; i < 4; ++i) key[i] = static_cast<char>(order.priority >> (24 - 8 * i));
  for (int i = 0; i < 4; ++i) key[4 + i] = static_cast<char>(order.generality >> (24 - 8 * i));
  for (int i = 0; i < 7; ++i) key[8 + i] = static_cast<char>(order.sequence >> (48 - 8 * i));
  return key;
}

// Sorts as FailClosedRouteSet::fail_closed_prefixes() lists them.
std::string prefix_key(const esp::IpPrefix& prefix) {
  return prefix.to_string();
}

// The rules of a `list table` with handles, in order, with the chain each is in.
std::vector<std::pair<std::string, uint64_t>> listed_rules(const std::string& listing) {
  std::vector<std::pair<std::string, uint64_t>> rules;
  std::istringstream lines(listing);
  std::string line, chain;
  while (std::getline(lines, line)) {
    if (line.rfind("\tchain ", 0) == 0) {
      chain = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.rfind("\t\t", 0) != 0) continue;
    const size_t mark = line.rfind(" # handle ");
    if (mark == std::string::npos) continue;
    rules.emplace_back(chain, std::stoull(line.substr(mark + 10)));
  }
  return rules;
}

}  // namespace

std::optional<uint32_t> nftables_generation() {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) return std::nullopt;
  struct {
    nlmsghdr header;
    nfgenmsg message;
  } request{};
  request.header.nlmsg_len = sizeof request;
  request.header.nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN;
  request.header.nlmsg_flags = NLM_F_REQUEST;
  request.header.nlmsg_seq = 1;
  request.message.nfgen_family = AF_UNSPEC;
  request.message.version = NFNETLINK_V0;
  std::optional<uint32_t> generation;
  alignas(nlmsghdr) char answer[4096];
  if (send(fd, &request, sizeof request, 0) == static_cast<ssize_t>(sizeof request)) {
    const ssize_t length = recv(fd, answer, sizeof answer, 0);
    const auto* header = reinterpret_cast<const nlmsghdr*>(answer);
    if (length >= static_cast<ssize_t>(NLMSG_HDRLEN) && NLMSG_OK(header, length) &&
        header->nlmsg_type == ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN)) {
      const size_t begin = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
      for (size_t at = begin; at + sizeof(nlattr) <= header->nlmsg_len;) {
        nlattr attribute;
        std::memcpy(&attribute, answer + at, sizeof attribute);
        if (attribute.nla_len < sizeof(nlattr) || at + attribute.nla_len > header->nlmsg_len) break;
        if ((attribute.nla_type & NLA_TYPE_MASK) == NFTA_GEN_ID &&
            attribute.nla_len >= sizeof(nlattr) + sizeof(uint32_t)) {
          uint32_t value;
          std::memcpy(&value, answer + at + NLA_HDRLEN, sizeof value);
          generation = ntohl(value);
        }
        at += NLA_ALIGN(attribute.nla_len);
      }
    }
  }
  close(fd);
  return generation;
}

FirewallRule FirewallSync::rule_of(size_t part, const Member& member) const {
  return part == kFailClosed ? firewall_fail_closed_rule(member.prefix, tun_name_)
                             : firewall_policy_rule(member.policy);
}

size_t FirewallSync::index_of(const Part& part) const {
  return static_cast<size_t>(&part - parts_.data());
}

FirewallSync::FirewallSync(KernelFirewall& kernel, std::string tun_name)
    : kernel_(kernel),
      tun_name_(std::move(tun_name)),
      table_name_(firewall_table_name(tun_name_)),
      table_("inet " + table_name_) {}

void FirewallSync::apply(const FirewallChange& change) {
  switch (change.kind) {
    case FirewallChange::Kind::add_policy: {
      if (policy_keys_.count(change.policy.id) != 0)
        erase_member(part_of(change.policy.direction), policy_keys_[change.policy.id]);
      Member member;
      member.policy = change.policy;
      std::string key = policy_key(change.policy, ++sequence_);
      policy_keys_[change.policy.id] = key;
      insert_member(part_of(change.policy.direction), std::move(key), std::move(member));
      break;
    }
    case FirewallChange::Kind::remove_policy: {
      const auto key = policy_keys_.find(change.policy.id);
      if (key == policy_keys_.end()) break;
      erase_member(part_of(change.policy.direction), key->second);
      policy_keys_.erase(key);
      break;
    }
    case FirewallChange::Kind::add_prefix: {
      Member member;
      member.prefix = change.prefix;
      insert_member(kFailClosed, prefix_key(change.prefix), std::move(member));
      break;
    }
    case FirewallChange::Kind::remove_prefix:
      erase_member(kFailClosed, prefix_key(change.prefix));
      break;
  }
}

void FirewallSync::insert_member(size_t part, std::string key, Member member) {
  Part& into = parts_[part];
  if (into.members.count(key) != 0) return;  // a prefix there already
  into.dirty.insert(key);
  into.members.emplace(std::move(key), std::move(member));
}

void FirewallSync::erase_member(size_t part, const std::string& key) {
  Part& from = parts_[part];
  const auto member = from.members.find(key);
  if (member == from.members.end()) return;
  if (member->second.run_start) from.removed.push_back({key, member->second.handle});
  from.dirty.insert(key);
  from.members.erase(member);
}

bool FirewallSync::pending() const {
  if (rebuild_owed_) return true;
  for (const auto& part : parts_)
    if (!part.dirty.empty()) return true;
  return false;
}

void FirewallSync::rebuild_next(std::string reason) {
  if (rebuild_owed_) return;
  rebuild_owed_ = true;
  rebuild_reason_ = std::move(reason);
}

FirewallSpec FirewallSync::spec() const {
  FirewallSpec spec;
  spec.tun_name = tun_name_;
  for (const size_t part : {kOut, kIn, kFwd})  // Spd::list()'s order of directions
    for (const auto& [key, member] : parts_[part].members) spec.policies.push_back(member.policy);
  for (const auto& [key, member] : parts_[kFailClosed].members)
    spec.fail_closed_prefixes.push_back(member.prefix);
  return spec;
}

FirewallSync::Region FirewallSync::redecide(Part& part) {
  Region region;
  if (part.dirty.empty()) return region;
  region.active = true;
  const std::string& last_change = *part.dirty.rbegin();
  // Everything before the first change is as before, so is the run of the member just
  // before it up to that member: re-decide from that run's start.
  auto start = part.members.lower_bound(*part.dirty.begin());
  if (start != part.members.begin()) {
    --start;
    while (start != part.members.begin() && !start->second.run_start) --start;
  }
  region.from_beginning = start == part.members.begin();
  FirewallRunBuilder builder;
  std::deque<FirewallRule> rules;  // of the members walked; the builder points into it
  std::vector<const FirewallRule*> run;
  Member* head = nullptr;
  const auto finish_run = [&] {
    if (!head) return;
    NewRun decided{head, firewall_run_rule(run), Action::insert, run.size() == 1};
    if (head->run_start) {
      const std::string& had = head->run_text.empty() ? run.front()->single : head->run_text;
      decided.action = decided.text == had ? Action::keep : Action::replace;
      if (decided.action == Action::replace) region.deleted.push_back(head->handle);
    }
    region.runs.push_back(std::move(decided));
  };
  auto end = part.members.end();
  for (auto member = start; member != end; ++member) {
    rules.push_back(rule_of(index_of(part), member->second));
    const bool starts = builder.next(rules.back());
    if (starts && member->first > last_change && member->second.run_start) {
      // A run start after the last change that was one before: the same from here on.
      region.stop = &member->second;
      end = member;
      break;
    }
    if (starts) {
      finish_run();
      while (rules.size() > 1) rules.pop_front();  // the new run's stays
      head = &member->second;
      run.clear();
    } else if (member->second.run_start) {
      region.deleted.push_back(member->second.handle);
    }
    run.push_back(&rules.back());
  }
  finish_run();
  for (const auto& removed : part.removed) region.deleted.push_back(removed.handle);
  part.removed.clear();
  part.dirty.clear();
  // The model as the kernel will have it; handles of new rules come with the commit.
  size_t next_run = 0;
  for (auto member = start; member != end; ++member) {
    Member& m = member->second;
    if (next_run < region.runs.size() && region.runs[next_run].head == &m) {
      const NewRun& decided = region.runs[next_run++];
      m.run_start = true;
      m.run_text = decided.single ? std::string() : decided.text;
      if (decided.action != Action::keep) m.handle = {};
    } else {
      m.run_start = false;
      m.run_text.clear();
      m.handle = {};
    }
  }
  return region;
}

uint64_t FirewallSync::anchor_from(const std::vector<Placement>& placements, size_t index,
                                   const std::vector<Region>& regions) const {
  for (; index < placements.size(); ++index) {
    const auto [part, slot] = placements[index];
    const Region& region = regions[part];
    if (region.active && region.from_beginning) {
      for (const auto& run : region.runs)
        if (run.action == Action::keep) return run.head->handle[slot];
      if (region.stop) return region.stop->handle[slot];
      continue;
    }
    if (!parts_[part].members.empty()) return parts_[part].members.begin()->second.handle[slot];
  }
  return 0;
}

Result FirewallSync::sync() {
  if (!pending()) return {};
  if (!events_.valid()) rebuild_next("no nftables notifications to read handles from");
  // Drained always: only this sync's own commit's notifications follow.
  const bool quiet = events_.drain();
  if (!rebuild_owed_ && (!quiet || generation_moved()))
    rebuild_next("the kernel's nftables generation moved: another process changed the ruleset");
  if (rebuild_owed_) return rebuild();
  const Result result = delta();
  if (result) return result;
  rebuild_next("the kernel refused the changed rules: " + result.message);
  return rebuild();
}

Result FirewallSync::delta() {
  std::vector<Region> regions(parts_.size());
  for (size_t part = 0; part < parts_.size(); ++part) regions[part] = redecide(parts_[part]);
  // A rule that changed is deleted and its new text inserted where it stood (nft's replace
  // needs libnftables to read every rule of the ruleset first). New rules go first, then
  // the deletions: a deleted rule's anonymous set then never lends its name to a new one
  // in the same transaction.
  std::string inserts, deletes;
  // The same transaction as netlink messages, as long as every new rule is one policy's
  // rule on its own (xfrm/nftables_rule_batch.h): libnftables would read every rule of the
  // ruleset for an insert's position.
  NftablesRuleBatch batch_inserts(table_name_), batch_deletes(table_name_);
  bool through_netlink = true;
  // The rules the commit gives handles of, in order, and where each handle goes.
  std::vector<std::pair<Member*, size_t>> echoed;
  uint64_t added = 0, replaced = 0, deleted = 0;
  for (const auto& layout : chain_layouts()) {
    std::vector<Placement> placements;
    for (const auto& [part, slot] : layout.parts) placements.push_back({part, slot});
    const std::string chain = table_ + " " + layout.name;
    for (size_t index = 0; index < placements.size(); ++index) {
      const auto [part, slot] = placements[index];
      const Region& region = regions[part];
      if (!region.active) continue;
      for (const auto& handles : region.deleted) {
        if (handles[slot] == 0) continue;
        deletes += "delete rule " + chain + " handle " + std::to_string(handles[slot]) + "\n";
        batch_deletes.remove(layout.name, handles[slot]);
        ++deleted;
      }
      // New rules go before the next rule that stays, in order: several before one anchor
      // end up in the order they were inserted.
      std::vector<uint64_t> anchors(region.runs.size());
      uint64_t next =
          region.stop ? region.stop->handle[slot] : anchor_from(placements, index + 1, regions);
      for (size_t run = region.runs.size(); run-- > 0;) {
        anchors[run] = next;
        if (region.runs[run].action == Action::keep) next = region.runs[run].head->handle[slot];
      }
      for (size_t run = 0; run < region.runs.size(); ++run) {
        if (region.runs[run].action == Action::keep) continue;
        Member& head = *region.runs[run].head;
        inserts += anchors[run] != 0
                       ? "insert rule " + chain + " position " + std::to_string(anchors[run]) + " "
                       : "add rule " + chain + " ";
        inserts += region.runs[run].text + "\n";
        if (part != kFailClosed && region.runs[run].single &&
            NftablesRuleBatch::builds(head.policy))
          batch_inserts.insert(layout.name, head.policy, anchors[run]);
        else
          through_netlink = false;
        echoed.emplace_back(&head, slot);
        if (region.runs[run].action == Action::replace) {
          ++replaced;
          --deleted;  // counted as replaced, not as deleted
        } else {
          ++added;
        }
      }
    }
  }
  const std::string commands = inserts + deletes;
  if (commands.empty()) return {};
  if (through_netlink) {
    // New rules first, then the deletions, as in the text.
    NftablesRuleBatch& batch = batch_inserts;
    batch.append(batch_deletes);
    if (auto result = batch.commit("changing the policies' rules"); !result) return result;
  } else if (auto result = kernel_.run(commands, "changing the policies' rules"); !result) {
    return result;
  }
  const auto commit = events_.own_commit(table_name_);
  if (!commit || commit->rules.size() != echoed.size()) {
    rebuild_next(commit
                     ? "the kernel's notifications gave " + std::to_string(commit->rules.size()) +
                           " rule handles for " + std::to_string(echoed.size()) + " new rules"
                     : "the kernel's notifications of the last change were lost");
    return {};
  }
  generation_ = commit->generation;
  for (size_t i = 0; i < echoed.size(); ++i)
    echoed[i].first->handle[echoed[i].second] = commit->rules[i].second;
  ++stats_.deltas;
  if (through_netlink) ++stats_.netlink_deltas;
  stats_.rules_added += added;
  stats_.rules_replaced += replaced;
  stats_.rules_deleted += deleted;
  return {};
}

Result FirewallSync::rebuild() {
  // Every run from scratch; each chain's rules in order, with where their handles go.
  FirewallChainRules rules;
  std::array<std::vector<std::pair<Member*, size_t>>, 3> heads;
  // Each part's runs in order: the head and the rule's text.
  std::array<std::vector<std::pair<Member*, std::string>>, 4> runs;
  for (size_t index = 0; index < parts_.size(); ++index) {
    Part& part = parts_[index];
    part.dirty.clear();
    part.removed.clear();
    FirewallRunBuilder builder;
    std::deque<FirewallRule> member_rules;  // the current run's; the builder points into it
    std::vector<const FirewallRule*> run;
    Member* head = nullptr;
    const auto finish_run = [&] {
      if (!head) return;
      runs[index].emplace_back(head, firewall_run_rule(run));
      if (run.size() > 1) head->run_text = runs[index].back().second;
    };
    for (auto& [key, member] : part.members) {
      member_rules.push_back(rule_of(index, member));
      member.handle = {};
      member.run_text.clear();
      member.run_start = builder.next(member_rules.back());
      if (member.run_start) {
        finish_run();
        while (member_rules.size() > 1) member_rules.pop_front();  // the new run's stays
        head = &member;
        run.clear();
      }
      run.push_back(&member_rules.back());
    }
    finish_run();
  }
  const auto& layouts = chain_layouts();
  std::array<std::vector<std::string>*, 3> texts = {&rules.input, &rules.forward, &rules.output};
  for (size_t chain = 0; chain < layouts.size(); ++chain)
    for (const auto& [part, slot] : layouts[chain].parts)
      for (const auto& [head, text] : runs[part]) {
        texts[chain]->push_back(text);
        heads[chain].emplace_back(head, slot);
      }
  ++stats_.rebuilds;
  stats_.last_rebuild_reason = rebuild_reason_;
  if (auto result = kernel_.run(firewall_table(tun_name_, rules), "installing the policies' rules");
      !result)
    return result;  // still owed
  // The handles from the table as listed (as costly as writing it, which this is).
  const auto commit = events_.own_commit(table_name_);
  generation_ = commit ? std::optional<uint32_t>(commit->generation) : nftables_generation();
  events_.drain();
  std::string listing;
  if (auto result = kernel_.list("list table " + table_, "listing the table", listing); !result)
    return result;
  if (nftables_generation() != generation_) generation_.reset();  // someone else meanwhile
  std::array<size_t, 3> assigned{};
  size_t unexpected = 0;
  for (const auto& [chain_name, handle] : listed_rules(listing)) {
    size_t chain = 0;
    while (chain < layouts.size() && chain_name != layouts[chain].name) ++chain;
    if (chain == layouts.size()) continue;  // from_tunnel_only, to_tunnel_only
    if (assigned[chain] == heads[chain].size()) {
      ++unexpected;
      continue;
    }
    const auto [member, slot] = heads[chain][assigned[chain]++];
    member->handle[slot] = handle;
  }
  for (size_t chain = 0; chain < layouts.size(); ++chain)
    unexpected += heads[chain].size() - assigned[chain];
  if (unexpected != 0) {
    Result result;
    result.ok = false;
    result.error = EIO;
    result.message =
        "nftables: the table is installed, but its listing did not give every rule's "
        "handle; writing it whole again at the next sync";
    rebuild_reason_ = "handles missing from the listing after the last rebuild";
    return result;
  }
  rebuild_owed_ = false;
  rebuild_reason_.clear();
  return {};
}

bool FirewallSync::generation_moved() {
  const auto now = nftables_generation();
  return !now || !generation_ || *now != *generation_;
}

}  // namespace espgw::xfrm

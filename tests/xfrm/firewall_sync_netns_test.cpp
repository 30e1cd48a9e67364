// The incremental firewall sync (xfrm/firewall_sync.h) against a real kernel, in a private
// network namespace the test process creates for itself (needs root; without it every
// test is skipped with the reason): random sequences of policy and fail-closed prefix
// changes, applied as deltas, leave the kernel's table exactly as the whole table written
// from the same SPD (firewall_ruleset of Spd::list()) does; a table changed behind the
// sync's back is written whole again.
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <regex>
#include <string>

#include "xfrm/fail_closed_routes.h"
#include "xfrm/firewall_sync.h"
#include "xfrm/spd.h"

namespace espgw::xfrm {
namespace {

std::string g_skip_reason;  // empty once the namespaces are entered
// The tests' own namespace, and a second one for the reference tables: loading those does
// not move the first one's nftables generation (which the sync watches).
int g_test_namespace = -1;
int g_reference_namespace = -1;

// unshare() and setns() move the calling thread; gtest runs environments and every test on
// the main thread. Listing tests (ctest's discovery) runs no environment.
class PrivateNetworkNamespaces : public ::testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) == 0) {
      g_reference_namespace = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
      if (unshare(CLONE_NEWNET) == 0) {
        g_test_namespace = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (g_reference_namespace >= 0 && g_test_namespace >= 0) return;
      }
    }
    g_skip_reason = std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(errno) +
                    " -- these tests need root (CAP_SYS_ADMIN) for a private netns";
  }
};

// In the reference namespace for as long as it lives.
class InReferenceNamespace {
 public:
  InReferenceNamespace() { EXPECT_EQ(setns(g_reference_namespace, CLONE_NEWNET), 0); }
  ~InReferenceNamespace() { EXPECT_EQ(setns(g_test_namespace, CLONE_NEWNET), 0); }
  InReferenceNamespace(const InReferenceNamespace&) = delete;
  InReferenceNamespace& operator=(const InReferenceNamespace&) = delete;
};
const auto* const g_environment = ::testing::AddGlobalTestEnvironment(new PrivateNetworkNamespaces);

esp::IpPrefix prefix(const std::string& text) {
  return *esp::IpPrefix::parse(text);
}

// Runs `command` through a libnftables context of the test's own; the output.
std::string nft(const std::string& command, bool* ok = nullptr) {
  nft_ctx* context = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(context);
  nft_ctx_buffer_error(context);
  std::string output;
  const bool done = nft_run_cmd_from_buffer(context, command.c_str()) == 0;
  if (done) output = nft_ctx_get_output_buffer(context);
  if (ok) *ok = done;
  nft_ctx_free(context);
  return output;
}

// `nft list table`, with the TUN name written as "TUN" and counters' values left out, so
// that tables of two TUN names compare.
std::string normalised_table(const std::string& tun_name) {
  std::string listing = nft("list table inet " + firewall_table_name(tun_name));
  listing = std::regex_replace(listing, std::regex(" packets [0-9]+ bytes [0-9]+"), "");
  listing = std::regex_replace(listing, std::regex(firewall_table_name(tun_name)), "espgw_TUN");
  return std::regex_replace(listing, std::regex("\"" + tun_name + "\""), "\"TUN\"");
}

// What the incremental table must equal: the whole table from the SPD, under another name,
// in the other namespace.
std::string reference_table(const Spd& spd, const FailClosedRouteSet& routes) {
  FirewallSpec spec;
  spec.tun_name = "ref0";
  spec.policies = spd.list();
  spec.fail_closed_prefixes = routes.fail_closed_prefixes();
  InReferenceNamespace reference;
  KernelFirewall kernel;
  const Result result = kernel.run(firewall_ruleset(spec), "reference");
  EXPECT_TRUE(result.ok) << result.message;
  return normalised_table("ref0");
}

size_t rules_in(const std::string& listing) {
  size_t rules = 0;
  for (size_t at = 0; (at = listing.find("\n\t\t", at)) != std::string::npos; ++at)
    if (listing.compare(at + 3, 5, "type ") != 0) ++rules;
  return rules;
}

// The SPD and the fail-closed prefixes, changed as the gateway changes them, and the sync
// fed the same changes.
class Model {
 public:
  explicit Model(FirewallSync& sync) : sync_(sync) {}
  void add(const Policy& policy) {
    ASSERT_TRUE(spd_.add(policy));
    sync_.apply({FirewallChange::Kind::add_policy, policy, {}});
    if (policy.direction == Direction::out && policy.action == PolicyAction::protect)
      routes_.use(FailClosedRouteSet::Kind::fail_closed,
                  fail_closed_selector(policy.selector.remote));
  }
  void remove(const Policy& policy) {
    ASSERT_TRUE(spd_.remove(policy.id));
    sync_.apply({FirewallChange::Kind::remove_policy, policy, {}});
    if (policy.direction == Direction::out && policy.action == PolicyAction::protect)
      routes_.release(FailClosedRouteSet::Kind::fail_closed,
                      fail_closed_selector(policy.selector.remote), false);
  }
  void sync_prefixes() {
    for (const auto& [changed, added] : routes_.take_prefix_changes())
      sync_.apply({added ? FirewallChange::Kind::add_prefix : FirewallChange::Kind::remove_prefix,
                   {},
                   changed});
  }
  const Spd& spd() const { return spd_; }
  const FailClosedRouteSet& routes() const { return routes_; }

 private:
  FirewallSync& sync_;
  Spd spd_;
  FailClosedRouteSet routes_;
};

class FirewallSyncNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_skip_reason.empty()) GTEST_SKIP() << g_skip_reason;
  }
  KernelFirewall kernel_;
};

// Selectors from small pools, so that runs form, split on overlaps and join again.
Policy random_policy(std::mt19937& random, uint32_t id) {
  static const std::vector<std::string> local4 = {"10.1.0.0/16", "10.1.5.0/24", "10.9.0.0/16"};
  static const std::vector<std::string> remote4 = {"10.2.0.1/32", "10.2.0.2/32", "10.2.0.3/32",
                                                   "10.2.0.0/31", "10.2.0.0/16", "10.3.0.1/32",
                                                   "10.3.0.2/32", "0.0.0.0/0"};
  static const std::vector<std::string> local6 = {"fd00:1::/64", "::/0"};
  static const std::vector<std::string> remote6 = {"fd00:2::1/128", "fd00:2::2/128", "fd00:2::/64",
                                                   "fd00:3::/64"};
  const auto pick = [&](const std::vector<std::string>& from) {
    return from[random() % from.size()];
  };
  Policy p;
  p.id = id;
  p.direction = static_cast<Direction>(random() % 3);
  const bool v4 = random() % 5 != 0;
  p.selector.local = prefix(v4 ? pick(local4) : pick(local6));
  p.selector.remote = prefix(v4 ? pick(remote4) : pick(remote6));
  const unsigned action = random() % 6;  // mostly protect, so that runs form
  p.action = action < 4    ? PolicyAction::protect
             : action == 4 ? PolicyAction::bypass
                           : PolicyAction::discard;
  p.reqid = p.action == PolicyAction::protect ? 1 : 0;
  p.priority = random() % 4 == 0 ? 10 : 0;
  if (random() % 10 == 0) {
    p.selector.protocol = 17;
    p.selector.remote_ports = {static_cast<uint16_t>(20000 + id),
                               static_cast<uint16_t>(20000 + id)};
  }
  return p;
}

TEST_F(FirewallSyncNetns, RandomChangesLeaveTheTableAsAWholeRebuildWritesIt) {
  for (const unsigned seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 random(seed);
    FirewallSync sync(kernel_, "espgw0");
    Model model(sync);
    std::vector<Policy> installed;
    uint32_t next_id = 1;
    for (int step = 0; step < 120; ++step) {
      const int changes = 1 + static_cast<int>(random() % 6);
      for (int change = 0; change < changes; ++change) {
        const unsigned what = random() % 10;
        if (installed.empty() || what < 5) {  // add
          installed.push_back(random_policy(random, next_id++));
          model.add(installed.back());
        } else if (what < 8) {  // remove
          const size_t victim = random() % installed.size();
          model.remove(installed[victim]);
          installed.erase(installed.begin() + static_cast<long>(victim));
        } else {  // replace, as the gateway does: removed, then added under the same id
          const size_t victim = random() % installed.size();
          model.remove(installed[victim]);
          installed[victim] = random_policy(random, installed[victim].id);
          model.add(installed[victim]);
        }
        if (HasFatalFailure()) return;
      }
      model.sync_prefixes();
      const Result result = sync.sync();
      ASSERT_TRUE(result.ok) << result.message;
      ASSERT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()))
          << "seed " << seed << ", step " << step;
    }
    // Only the first sync wrote the whole table.
    EXPECT_EQ(sync.stats().rebuilds, 1u) << sync.stats().last_rebuild_reason;
    EXPECT_GT(sync.stats().deltas, 100u);
    EXPECT_GT(sync.stats().rules_replaced, 0u);  // shared rules changed
    EXPECT_GT(sync.stats().rules_deleted, 0u);
    EXPECT_GT(rules_in(normalised_table("espgw0")), 0u);
  }
}

TEST_F(FirewallSyncNetns, ThousandsOfRulesChangeOneCommandEach) {
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  // Port selectors, as charon's per-child policies: one rule each, none shared.
  std::vector<Policy> policies;
  for (uint32_t i = 0; i < 3000; ++i) {
    Policy p;
    p.id = i + 1;
    p.direction = static_cast<Direction>(i % 3);
    p.selector.local = prefix("10.1.0.0/16");
    p.selector.remote = prefix("10.2.0.0/16");
    p.selector.protocol = 17;
    p.selector.remote_ports = {static_cast<uint16_t>(20000 + i / 3),
                               static_cast<uint16_t>(20000 + i / 3)};
    p.reqid = i / 3 + 1;
    policies.push_back(p);
    model.add(p);
  }
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  const uint64_t added = sync.stats().rules_added;
  Policy extra = policies[4];
  extra.id = 9999;
  extra.selector.remote_ports = {40000, 40000};
  model.add(extra);
  model.remove(policies[100]);
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  // An out policy is a rule in two chains.
  EXPECT_EQ(sync.stats().rules_added - added, extra.direction == Direction::out ? 2u : 1u);
  EXPECT_EQ(sync.stats().rules_deleted, policies[100].direction == Direction::out ? 2u : 1u);
  EXPECT_EQ(sync.stats().rebuilds, 1u);
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
}

TEST_F(FirewallSyncNetns, ATableChangedBehindItsBackIsWrittenWholeAgain) {
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  std::mt19937 random(7);
  for (uint32_t id = 1; id <= 40; ++id) model.add(random_policy(random, id));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  ASSERT_EQ(sync.stats().rebuilds, 1u);
  // Someone flushes a chain: the next change finds the generation moved.
  bool ok = false;
  nft("flush chain inet " + firewall_table_name("espgw0") + " forward", &ok);
  ASSERT_TRUE(ok);
  model.add(random_policy(random, 41));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().rebuilds, 2u);
  EXPECT_NE(sync.stats().last_rebuild_reason.find("generation"), std::string::npos);
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
  // The table deleted: written whole again, then deltas as before.
  nft("delete table inet " + firewall_table_name("espgw0"), &ok);
  ASSERT_TRUE(ok);
  model.add(random_policy(random, 42));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().rebuilds, 3u);
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
  const uint64_t deltas = sync.stats().deltas;
  model.add(random_policy(random, 43));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().rebuilds, 3u) << sync.stats().last_rebuild_reason;
  EXPECT_EQ(sync.stats().deltas, deltas + 1);
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
}

TEST_F(FirewallSyncNetns, ADeltaTheKernelRefusesFallsBackToTheWholeTable) {
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  std::mt19937 random(11);
  for (uint32_t id = 1; id <= 30; ++id) model.add(random_policy(random, id));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  // The table's rules gone while the generation is what the sync last saw (the test says
  // so: any change moves it): only the kernel refusing the next delta can tell.
  bool ok = false;
  nft("flush chain inet " + firewall_table_name("espgw0") + " forward\nflush chain inet " +
          firewall_table_name("espgw0") + " output\nflush chain inet " +
          firewall_table_name("espgw0") + " input",
      &ok);
  ASSERT_TRUE(ok);
  const auto generation = nftables_generation();
  ASSERT_TRUE(generation.has_value());
  sync.assume_generation(*generation);
  for (uint32_t id = 31; id <= 36; ++id) model.add(random_policy(random, id));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().rebuilds, 2u);
  EXPECT_NE(sync.stats().last_rebuild_reason.find("refused"), std::string::npos)
      << sync.stats().last_rebuild_reason;
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
}

TEST_F(FirewallSyncNetns, AStaleTableOfAnEarlierRunIsReplacedAtTheFirstSync) {
  // An earlier run's table, different policies: left in place until the first sync.
  FirewallSpec stale;
  stale.tun_name = "espgw0";
  stale.fail_closed_prefixes = {prefix("10.7.0.0/16")};
  ASSERT_TRUE(kernel_.run(firewall_ruleset(stale), "stale").ok);
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  std::mt19937 random(5);
  for (uint32_t id = 1; id <= 20; ++id) model.add(random_policy(random, id));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().rebuilds, 1u);
  EXPECT_EQ(sync.stats().last_rebuild_reason, "first sync");
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
}

// A policy of one port, as charon's per-child policies: its rule is never shared.
Policy port_policy(std::mt19937& random, uint32_t id, Direction direction) {
  Policy p = random_policy(random, id);
  p.direction = direction;
  p.selector.protocol = random() % 2 == 0 ? 17 : 6;
  p.selector.remote_ports = {static_cast<uint16_t>(20000 + id), static_cast<uint16_t>(20000 + id)};
  if (random() % 4 == 0) p.selector.local_ports = {1000, static_cast<uint16_t>(1000 + id)};
  return p;
}

TEST_F(FirewallSyncNetns, OnePolicyRulesGoAsNetlinkMessagesAndLeaveTheSameTable) {
  std::mt19937 random(21);
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  std::vector<Policy> installed;
  uint32_t next_id = 1;
  for (int step = 0; step < 80; ++step) {
    const int changes = 1 + static_cast<int>(random() % 8);
    for (int change = 0; change < changes; ++change) {
      if (installed.empty() || random() % 3 != 0) {
        installed.push_back(port_policy(random, next_id++, static_cast<Direction>(random() % 3)));
        model.add(installed.back());
      } else {
        const size_t victim = random() % installed.size();
        model.remove(installed[victim]);
        installed.erase(installed.begin() + static_cast<long>(victim));
      }
      if (HasFatalFailure()) return;
    }
    model.sync_prefixes();
    const Result result = sync.sync();
    ASSERT_TRUE(result.ok) << result.message;
    ASSERT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()))
        << "step " << step;
  }
  EXPECT_EQ(sync.stats().rebuilds, 1u) << sync.stats().last_rebuild_reason;
  // Those that changed a fail-closed prefix too went as text.
  EXPECT_GT(sync.stats().netlink_deltas, 40u);
  EXPECT_LT(sync.stats().netlink_deltas, sync.stats().deltas);
}

TEST_F(FirewallSyncNetns, ANetlinkDeltaTheKernelRefusesFallsBackToTheWholeTable) {
  FirewallSync sync(kernel_, "espgw0");
  Model model(sync);
  std::mt19937 random(12);
  for (uint32_t id = 1; id <= 30; ++id)
    model.add(port_policy(random, id, static_cast<Direction>(id % 3)));
  model.sync_prefixes();
  ASSERT_TRUE(sync.sync().ok);
  bool ok = false;
  nft("flush chain inet " + firewall_table_name("espgw0") + " input", &ok);
  ASSERT_TRUE(ok);
  const auto generation = nftables_generation();
  ASSERT_TRUE(generation.has_value());
  sync.assume_generation(*generation);
  // A new rule before a rule the kernel no longer has.
  Policy early = port_policy(random, 31, Direction::in);
  early.priority = 0;
  Policy late = port_policy(random, 32, Direction::in);
  late.priority = 0;
  model.add(early);
  model.add(late);
  model.sync_prefixes();
  const uint64_t netlink_deltas = sync.stats().netlink_deltas;
  ASSERT_TRUE(sync.sync().ok);
  EXPECT_EQ(sync.stats().netlink_deltas, netlink_deltas);  // refused: not counted
  // The netlink batch's own words for the message the kernel refused.
  EXPECT_NE(sync.stats().last_rebuild_reason.find("adding a rule to chain input"),
            std::string::npos)
      << sync.stats().last_rebuild_reason;
  EXPECT_EQ(sync.stats().rebuilds, 2u);
  EXPECT_NE(sync.stats().last_rebuild_reason.find("refused"), std::string::npos)
      << sync.stats().last_rebuild_reason;
  EXPECT_EQ(normalised_table("espgw0"), reference_table(model.spd(), model.routes()));
}

}  // namespace
}  // namespace espgw::xfrm

// Parser of the static SA/policy file. Each line is checked on its own (the first
// problem on a line is reported and the rest of the line skipped, so one typo gives one
// message), then the file as a whole (duplicates, policies that name missing SAs).
#include "xfrm/static_file.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crypto/aead.h"
#include "packet/ip_format.h"
#include "util/hex.h"
#include "util/secure_wipe.h"
#include "xfrm/key_fingerprint.h"
#include "xfrm/static_file_keywords.h"
#include "xfrm/static_file_values.h"

namespace espgw::xfrm {

namespace {

using namespace static_file_values;

constexpr uint64_t kFirstSpi = 256;           // 0 is invalid, 1-255 reserved (RFC 4303 2.1)
constexpr uint64_t kMaxReplayWindow = 65536;  // the engine's largest window
constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

struct LifetimeField {
  std::string_view keyword;
  uint64_t Lifetimes::*field;
};
constexpr LifetimeField kLifetimeFields[] = {
    {"soft-bytes", &Lifetimes::soft_bytes},     {"hard-bytes", &Lifetimes::hard_bytes},
    {"soft-packets", &Lifetimes::soft_packets}, {"hard-packets", &Lifetimes::hard_packets},
    {"soft-seconds", &Lifetimes::soft_seconds}, {"hard-seconds", &Lifetimes::hard_seconds},
};

void check_soft_below_hard(const Lifetimes& l) {
  const auto check = [](uint64_t soft, uint64_t hard, std::string_view unit) {
    if (soft != 0 && hard != 0 && soft > hard)
      fail("soft-" + std::string(unit) + " is larger than hard-" + std::string(unit));
  };
  check(l.soft_bytes, l.hard_bytes, "bytes");
  check(l.soft_packets, l.hard_packets, "packets");
  check(l.soft_seconds, l.hard_seconds, "seconds");
}

// Wipes a key that a line error leaves behind; disarmed when the SA is returned.
struct KeyGuard {
  std::vector<uint8_t>* key = nullptr;
  ~KeyGuard() {
    if (key) wipe(*key);
  }
};

SadEntry parse_sa(Words& words) {
  SadEntry sa;
  KeyGuard key_guard;
  if (words.done()) fail("sa: missing direction (in or out)");
  const auto direction_word = words.next();
  auto direction = parse_direction(direction_word);
  if (!direction || *direction == Direction::fwd)
    fail("sa: " + describe(direction_word) + " is not a direction (in or out)");
  sa.direction = *direction;

  bool have_spi = false, have_algorithm = false, have_key = false, have_src = false,
       have_dst = false, have_replay_window = false;
  while (!words.done()) {
    const auto word = words.next();
    if (word == "spi") {
      words.once(word);
      sa.config.spi = static_cast<uint32_t>(
          number_in(word, words.value_for(word), kFirstSpi, kMaxU32, "; 0-255 are reserved"));
      have_spi = true;
    } else if (word == "key") {
      words.once(word);
      auto bytes = parse_hex(words.value_for(word));
      if (!bytes) fail("key: not a hex string (the value is not shown)");
      sa.config.key_material = std::move(*bytes);
      have_key = true;
      // A later problem on the line throws past this SA: wipe its key on the way out.
      key_guard.key = &sa.config.key_material;
    } else if (word == "src") {
      words.once(word);
      sa.config.tunnel_source = address_value(word, words.value_for(word));
      have_src = true;
    } else if (word == "dst") {
      words.once(word);
      sa.config.tunnel_destination = address_value(word, words.value_for(word));
      have_dst = true;
    } else if (word == "esn") {
      words.once(word);
      sa.config.esn = true;
    } else if (word == "udp") {
      words.once(word);
      sa.config.udp_encapsulation = udp_value(words.value_for(word));
    } else if (word == "replay-window") {
      words.once(word);
      sa.config.replay_window =
          static_cast<uint32_t>(number_in(word, words.value_for(word), 0, kMaxReplayWindow));
      have_replay_window = true;
    } else if (word == "copy-dscp") {
      words.once(word);
      if (!esp::parse_dscp_copy(words.value_for(word), sa.config.outer_header))
        fail("copy-dscp: must be out, in, yes or no");
    } else if (word == "copy-ecn") {
      words.once(word);
      const std::string_view value = words.value_for(word);
      if (value != "yes" && value != "no") fail("copy-ecn: must be yes or no");
      sa.config.outer_header.copy_ecn = value == "yes";
    } else if (word == "copy-df") {
      words.once(word);
      const std::string_view value = words.value_for(word);
      using DontFragment = esp::OuterHeaderPolicy::DontFragment;
      if (value == "yes")
        sa.config.outer_header.dont_fragment = DontFragment::copy;
      else if (value == "no")
        sa.config.outer_header.dont_fragment = DontFragment::clear;
      else if (value == "set")
        sa.config.outer_header.dont_fragment = DontFragment::set;
      else
        fail("copy-df: must be yes, no or set");
    } else if (word == "reqid") {
      words.once(word);
      sa.reqid = static_cast<uint32_t>(number_in(word, words.value_for(word), 0, kMaxU32));
    } else if (auto algorithm = crypto::parse_algorithm(word)) {
      words.once("algorithm");
      sa.config.algorithm = *algorithm;
      have_algorithm = true;
    } else if (auto integrity = crypto::parse_integrity(word)) {
      words.once("integrity algorithm");
      sa.config.integrity = *integrity;
    } else {
      auto lifetime = std::find_if(std::begin(kLifetimeFields), std::end(kLifetimeFields),
                                   [&](const LifetimeField& f) { return f.keyword == word; });
      if (lifetime == std::end(kLifetimeFields)) unknown_word("sa", word);
      words.once(word);
      sa.lifetimes.*(lifetime->field) = number_in(word, words.value_for(word), 0, kMaxU64);
    }
  }
  require("sa", {{"spi", have_spi},
                 {"algorithm", have_algorithm},
                 {"key", have_key},
                 {"src", have_src},
                 {"dst", have_dst}});
  const crypto::EncryptionAlgorithm algorithm = sa.config.algorithm;
  const crypto::IntegrityAlgorithm integrity = sa.config.integrity;
  if (!crypto::is_aead(algorithm) && integrity == crypto::IntegrityAlgorithm::none)
    fail("sa: " + std::string(crypto::algorithm_name(algorithm)) +
         " needs an integrity algorithm (hmac-sha1-96, hmac-sha2-256-128, hmac-sha2-384-192 or "
         "hmac-sha2-512-256)");
  if (crypto::is_aead(algorithm) && integrity != crypto::IntegrityAlgorithm::none)
    fail("sa: " + std::string(crypto::algorithm_name(algorithm)) +
         " is an AEAD and takes no integrity algorithm");
  const size_t expected = crypto::key_material_length(algorithm, integrity);
  if (sa.config.key_material.size() != expected) {
    const size_t cipher_key = crypto::cipher_key_length(algorithm);
    const std::string layout =
        crypto::is_aead(algorithm)
            ? std::to_string(cipher_key) + "-byte key followed by the 4-byte salt"
            : std::to_string(cipher_key) + "-byte encryption key followed by the " +
                  std::to_string(crypto::integrity_key_length(integrity)) + "-byte " +
                  std::string(crypto::integrity_name(integrity)) + " key";
    const std::string name = crypto::is_aead(algorithm)
                                 ? std::string(crypto::algorithm_name(algorithm))
                                 : std::string(crypto::algorithm_name(algorithm)) + " " +
                                       std::string(crypto::integrity_name(integrity));
    fail("key: " + std::to_string(sa.config.key_material.size()) + " bytes, but " + name +
         " needs " + std::to_string(expected) + " (" + layout + ")");
  }
  if (sa.config.tunnel_source.family != sa.config.tunnel_destination.family)
    fail("sa: src and dst are of different address families");
  if (have_replay_window && sa.direction != Direction::in)
    fail("replay-window: only an 'sa in' has a replay window");
  check_soft_below_hard(sa.lifetimes);
  key_guard.key = nullptr;
  return sa;
}

Policy parse_policy(Words& words) {
  Policy policy;
  if (words.done()) fail("policy: missing direction (out, in or fwd)");
  const auto direction_word = words.next();
  auto direction = parse_direction(direction_word);
  if (!direction)
    fail("policy: " + describe(direction_word) + " is not a direction (out, in or fwd)");
  policy.direction = *direction;

  bool have_local = false, have_remote = false, have_action = false, have_reqid = false;
  while (!words.done()) {
    const auto word = words.next();
    if (word == "local" || word == "remote") {
      words.once(word);
      (word == "local" ? policy.selector.local : policy.selector.remote) =
          prefix_value(word, words.value_for(word));
      (word == "local" ? have_local : have_remote) = true;
    } else if (word == "proto") {
      words.once(word);
      const auto value = words.value_for(word);
      bool overflow = false;
      if (auto named = keywords::protocol_number(value))
        policy.selector.protocol = *named;
      else if (parse_number(value, overflow) || overflow)
        policy.selector.protocol = static_cast<uint8_t>(number_in(word, value, 0, 255));
      else
        fail("proto: " + describe(value) +
             " is not a protocol (tcp, udp, icmp, ... or a number 0-255)");
    } else if (word == "local-port" || word == "remote-port") {
      words.once(word);
      (word == "local-port" ? policy.selector.local_ports : policy.selector.remote_ports) =
          port_range_value(word, words.value_for(word));
    } else if (word == "priority") {
      words.once(word);
      policy.priority = static_cast<uint32_t>(number_in(word, words.value_for(word), 0, kMaxU32));
    } else if (word == "action") {
      words.once(word);
      const auto value = words.value_for(word);
      auto action = parse_action(value);
      if (!action) fail("action: " + describe(value) + " is not protect, bypass or discard");
      policy.action = *action;
      have_action = true;
    } else if (word == "reqid") {
      words.once(word);
      policy.reqid = static_cast<uint32_t>(number_in(word, words.value_for(word), 1, kMaxU32));
      have_reqid = true;
    } else {
      unknown_word("policy", word);
    }
  }
  require("policy", {{"local", have_local}, {"remote", have_remote}, {"action", have_action}});
  const Selector& s = policy.selector;
  if (s.local.address.family != s.remote.address.family)
    fail("policy: local and remote are of different address families");
  if ((!s.local_ports.is_any() || !s.remote_ports.is_any()) && !packet::has_ports(s.protocol))
    fail("policy: ports need proto tcp, udp, sctp or udplite");
  if (policy.action == PolicyAction::protect && !have_reqid)
    fail("policy: action protect needs a reqid (the SAs to use)");
  if (policy.action != PolicyAction::protect && have_reqid)
    fail("reqid: only action protect uses SAs");
  return policy;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

struct Parsed {
  StaticConfig config;
  std::vector<size_t> sa_lines;
  std::vector<size_t> policy_lines;
  std::vector<std::pair<size_t, std::string>> errors;
};

void parse_line(std::string_view line, size_t number, Parsed& out) {
  line = line.substr(0, line.find('#'));
  for (char c : line) {
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\t' && c != '\r') || byte == 0x7F) fail("control character in line");
  }
  Words words(split_words(line));
  if (words.done()) return;
  const auto keyword = words.next();
  if (keyword == "sa") {
    out.config.sas.push_back(parse_sa(words));
    out.sa_lines.push_back(number);
  } else if (keyword == "policy") {
    out.config.policies.push_back(parse_policy(words));
    out.policy_lines.push_back(number);
  } else if (auto shown = showable(keyword)) {
    fail("unknown keyword " + *shown + " (a line starts with sa or policy)");
  } else {
    fail("unexpected value at the start of a line (not shown: it could be key material)");
  }
}

// Problems no single line shows.
void check_file(Parsed& p) {
  using AddressKey = std::pair<uint8_t, std::array<uint8_t, 16>>;
  std::map<std::pair<uint32_t, AddressKey>, size_t> sa_by_key;
  std::map<uint32_t, size_t> inbound_by_spi;
  std::set<std::pair<Direction, uint32_t>> groups;
  for (size_t i = 0; i < p.config.sas.size(); ++i) {
    const SadEntry& sa = p.config.sas[i];
    const size_t line = p.sa_lines[i];
    const auto& dst = sa.config.tunnel_destination;
    auto [it, added] =
        sa_by_key.emplace(std::pair{sa.config.spi, AddressKey{dst.family, dst.bytes}}, line);
    if (!added) {
      p.errors.emplace_back(line, "sa: spi " + spi_text(sa.config.spi) + " dst " + dst.to_string() +
                                      " is already defined on line " + std::to_string(it->second));
      continue;
    }
    if (sa.direction == Direction::in) {
      auto [previous, fresh] = inbound_by_spi.emplace(sa.config.spi, line);
      if (!fresh)
        p.errors.emplace_back(line, "sa: spi " + spi_text(sa.config.spi) +
                                        " is already used by the 'sa in' on line " +
                                        std::to_string(previous->second) +
                                        " (inbound SAs are found by SPI alone)");
    }
    groups.emplace(sa.direction, sa.reqid);
  }

  // Two SAs under one key would reuse nonces: the sequence number is the IV (RFC 4106
  // 3.1), and both start at 1, whatever their SPI or direction. Compared by fingerprint,
  // so that no second copy of a key is kept.
  // One message per line: a line already refused above is not refused again.
  std::set<size_t> refused;
  for (const auto& error : p.errors) refused.insert(error.first);
  std::map<KeyFingerprint, size_t> line_by_key;
  for (size_t i = 0; i < p.config.sas.size(); ++i) {
    const size_t line = p.sa_lines[i];
    if (refused.contains(line)) continue;
    auto [it, added] =
        line_by_key.emplace(key_fingerprint(p.config.sas[i].config.key_material), line);
    if (!added) {
      p.errors.emplace_back(line, "sa: same key as the SA on line " + std::to_string(it->second) +
                                      " (every SA needs its own key: two SAs under one key "
                                      "would reuse nonces)");
      refused.insert(line);
    }
  }

  // An inbound SA checks decrypted packets against the selectors of its reqid's protect
  // policies (RFC 4301 5.2); without any it would accept every inner packet.
  std::set<uint32_t> protected_reqids;
  for (const Policy& policy : p.config.policies)
    if (policy.action == PolicyAction::protect) protected_reqids.insert(policy.reqid);
  for (size_t i = 0; i < p.config.sas.size(); ++i) {
    const SadEntry& sa = p.config.sas[i];
    if (sa.direction == Direction::in && !protected_reqids.contains(sa.reqid) &&
        !refused.contains(p.sa_lines[i]))
      p.errors.emplace_back(p.sa_lines[i],
                            "sa: no protect policy has reqid " + std::to_string(sa.reqid) +
                                ": an 'sa in' takes its traffic selectors from its reqid's "
                                "policies, and one without selectors would accept any packet");
  }

  std::vector<std::pair<Direction, Selector>> seen;
  for (size_t i = 0; i < p.config.policies.size(); ++i) {
    const Policy& policy = p.config.policies[i];
    const size_t line = p.policy_lines[i];
    for (size_t j = 0; j < seen.size(); ++j)
      if (seen[j].first == policy.direction && seen[j].second == policy.selector) {
        p.errors.emplace_back(line, "policy: same direction and selector as the policy on line " +
                                        std::to_string(p.policy_lines[j]));
        break;
      }
    seen.emplace_back(policy.direction, policy.selector);
    if (policy.action != PolicyAction::protect) continue;
    // Outbound traffic is encrypted with out SAs; what in and fwd policies admit was
    // decrypted with in SAs.
    const Direction sa_direction =
        policy.direction == Direction::out ? Direction::out : Direction::in;
    if (!groups.contains({sa_direction, policy.reqid}))
      p.errors.emplace_back(line, "policy: no 'sa " + std::string(direction_name(sa_direction)) +
                                      "' has reqid " + std::to_string(policy.reqid));
  }
}

}  // namespace

StaticFileResult parse_static_file(std::string_view text, std::string_view file_name) {
  Parsed parsed;
  size_t number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    try {
      parse_line(text.substr(start, end - start), number, parsed);
    } catch (const LineError& error) {
      parsed.errors.emplace_back(number, error.message);
    }
    start = end + 1;
  }
  if (parsed.errors.empty()) check_file(parsed);

  StaticFileResult result;
  if (parsed.errors.empty()) {
    for (size_t i = 0; i < parsed.config.policies.size(); ++i)
      parsed.config.policies[i].id = static_cast<uint32_t>(i + 1);
    result.config = std::move(parsed.config);
    return result;
  }
  // Refused: the keys parsed so far go.
  for (auto& sa : parsed.config.sas) wipe(sa.config.key_material);
  std::stable_sort(parsed.errors.begin(), parsed.errors.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [line, message] : parsed.errors)
    result.errors.push_back(std::string(file_name) + ":" + std::to_string(line) + ": " + message);
  return result;
}

std::optional<std::string> static_file_access_problem(uint32_t mode, uint32_t owner,
                                                      uint32_t running_uid) {
  // As ssh refuses a private key others can read: the file holds every SA's key.
  if ((mode & 077) != 0) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", mode & 07777);
    return std::string("mode ") + octal +
           " lets group or others read or write it; it holds keys (chmod 600 it)";
  }
  if (owner != 0 && owner != running_uid)
    return "owned by uid " + std::to_string(owner) +
           ", neither root nor the user espgw runs as; it holds keys (chown it)";
  return std::nullopt;
}

StaticFileResult load_static_file(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {std::nullopt, {path + ": cannot open: " + std::strerror(errno)}};
  struct stat status {};
  if (fstat(fd, &status) != 0) {
    const int error = errno;
    close(fd);
    return {std::nullopt, {path + ": cannot stat: " + std::strerror(error)}};
  }
  // Checked on the file opened (a symlink's target), not on the name.
  if (!S_ISREG(status.st_mode)) {
    close(fd);
    return {std::nullopt, {path + ": not a regular file"}};
  }
  if (auto problem = static_file_access_problem(status.st_mode, status.st_uid, geteuid())) {
    close(fd);
    return {std::nullopt, {path + ": refused: " + *problem}};
  }
  // Read into one buffer of the file's size: a growing buffer would leave copies of the
  // keys behind in the blocks it outgrew. One byte more tells a file that grew meanwhile.
  const size_t size = static_cast<size_t>(status.st_size);
  std::string text(size + 1, '\0');
  size_t have = 0;
  bool failed = false;
  while (have < text.size()) {
    const ssize_t n = read(fd, text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failed = true;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  close(fd);
  StaticFileResult result;
  if (failed)
    result = {std::nullopt, {path + ": read error"}};
  else if (have > size)
    result = {std::nullopt, {path + ": changed while being read"}};
  else
    result = parse_static_file(std::string_view(text).substr(0, have), path);
  // The text held keys; don't leave them behind in freed memory.
  OPENSSL_cleanse(text.data(), text.size());
  return result;
}

}  // namespace espgw::xfrm

#include "daemon/config.h"

#include "crypto/aead.h"

#include <openssl/evp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

namespace espgw::daemon {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

template <typename T>
bool parse_number(std::string_view text, T& out, T min, T max) {
  T value{};
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max)
    return false;
  out = value;
  return true;
}

bool parse_microseconds(std::string_view text, std::chrono::microseconds& out, unsigned min,
                        unsigned max) {
  unsigned us = 0;
  if (!parse_number(text, us, min, max)) return false;
  out = std::chrono::microseconds(us);
  return true;
}

bool parse_bool(std::string_view text, bool& out) {
  if (text == "yes" || text == "true" || text == "1") return out = true, true;
  if (text == "no" || text == "false" || text == "0") return out = false, true;
  return false;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// What a key's parser learned beyond the configuration itself.
struct ParseState {
  GatewayConfig& config;
  const std::string& path;  // the configuration file: relative paths are resolved against it
  bool have_local = false;
  bool have_state_dir = false;
};

// Stores `value` where the key goes, or returns what it expected instead (the error then
// reads "'KEY': expected WHAT, got 'VALUE'").
using KeyParser = const char* (*)(std::string_view value, ParseState& state);

struct ConfigKey {
  std::string_view name;
  KeyParser parse;
};

const char* unless(bool parsed, const char* expected) {
  return parsed ? nullptr : expected;
}

std::string resolve_against_config(std::string_view file, const std::string& config_path) {
  const std::string path(file);
  return path.front() == '/' ? path : directory_of(config_path) + "/" + path;
}

// Every key of espgw.conf: its name, and the parser that stores its value in the config.
constexpr ConfigKey kConfigKeys[] = {
    {"tun-name",
     [](std::string_view value, ParseState& s) -> const char* {
       if (value.size() > 15) return "an interface name of at most 15 characters";
       s.config.tun_name = value;
       return nullptr;
     }},
    {"interface",
     // "IF_ID NAME", repeated for more interfaces.
     [](std::string_view value, ParseState& s) -> const char* {
       const char* expected =
           "'IF_ID NAME': an interface id from 1 to 4294967295 and a TUN device name of at "
           "most 15 letters, digits, '_', '-' or '.', each id and name once";
       const size_t blank = value.find_first_of(" \t");
       if (blank == std::string_view::npos) return expected;
       RouteInterface added;
       const std::string_view name = trim(value.substr(blank));
       if (!parse_number(value.substr(0, blank), added.if_id, 1u, UINT32_MAX)) return expected;
       if (name.empty() || name.size() > 15 || !std::all_of(name.begin(), name.end(), [](char c) {
             return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
           }))
         return expected;
       added.name = name;
       for (const auto& other : s.config.interfaces)
         if (other.if_id == added.if_id || other.name == added.name) return expected;
       s.config.interfaces.push_back(added);
       return nullptr;
     }},
    {"tun-queues",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number(value, s.config.tun_queues, 1u, 64u), "a number from 1 to 64");
     }},
    {"tun-offload",
     [](std::string_view value, ParseState& s) {
       return unless(parse_bool(value, s.config.tun_offload), "yes or no");
     }},
    {"tun-rps",
     [](std::string_view value, ParseState& s) -> const char* {
       bool on = false;
       if (value == "auto")
         s.config.tun_rps.reset();
       else if (parse_bool(value, on))
         s.config.tun_rps = on;
       else
         return "auto, yes or no";
       return nullptr;
     }},
    {"tun-address",
     [](std::string_view value, ParseState& s) -> const char* {
       auto prefix = esp::IpPrefix::parse(value);
       if (!prefix) return "an address with prefix length, like 10.1.255.1/32";
       s.config.tun_address = prefix;
       return nullptr;
     }},
    {"local-address",
     // One address or several (separated by commas or blanks); repeated lines add more.
     [](std::string_view value, ParseState& s) -> const char* {
       std::vector<esp::IpAddress> addresses;
       for (std::string_view rest = value; !rest.empty();) {
         const size_t end = std::min(rest.find_first_of(", \t"), rest.size());
         const std::string_view word = rest.substr(0, end);
         rest = rest.substr(end);
         while (!rest.empty() &&
                (rest.front() == ',' || rest.front() == ' ' || rest.front() == '\t'))
           rest.remove_prefix(1);
         if (word.empty()) continue;
         auto address = esp::IpAddress::parse(word);
         if (!address) return "an IPv4 or IPv6 address";
         // The sockets are bound to each address, and SAs are matched against them: a
         // wildcard would match no SA and receive for every address.
         if (address->bytes == std::array<uint8_t, 16>{})
           return "specific addresses, not 0.0.0.0 or ::";
         if (std::find(s.config.local_addresses.begin(), s.config.local_addresses.end(),
                       *address) != s.config.local_addresses.end() ||
             std::find(addresses.begin(), addresses.end(), *address) != addresses.end())
           return "addresses not given before (each address once)";
         addresses.push_back(*address);
       }
       if (addresses.empty()) return "an IPv4 or IPv6 address";
       s.config.local_addresses.insert(s.config.local_addresses.end(), addresses.begin(),
                                       addresses.end());
       s.have_local = true;
       return nullptr;
     }},
    {"udp-port",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number<uint16_t>(value, s.config.udp_port, 1, 65535), "a port number");
     }},
    {"wan-readers",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number(value, s.config.wan_readers, 0u, 64u),
                     "a number from 0 (one per CPU, at most 4) to 64");
     }},
    {"state-dir",
     [](std::string_view value, ParseState& s) -> const char* {
       s.have_state_dir = true;
       s.config.state_dir = resolve_against_config(value, s.path);
       return nullptr;
     }},
    {"static-sa-file",
     [](std::string_view value, ParseState& s) -> const char* {
       s.config.static_sa_file = resolve_against_config(value, s.path);
       return nullptr;
     }},
    {"control-socket",
     [](std::string_view value, ParseState& s) -> const char* {
       if (value.front() != '/' || value.size() > 107)
         return "an absolute path of at most 107 characters";
       s.config.control_socket = value;
       return nullptr;
     }},
    {"charon-vici",
     [](std::string_view value, ParseState& s) -> const char* {
       s.config.charon_vici = value;
       return nullptr;
     }},
    {"parallel-child",
     // "NAME N": keep N CHILD_SAs of child config NAME up (ECMP)
     [](std::string_view value, ParseState& s) -> const char* {
       const auto space = value.find_last_of(" \t");
       ParallelChild child;
       if (space == std::string_view::npos ||
           !parse_number(trim(value.substr(space + 1)), child.count, 1u, 64u) ||
           trim(value.substr(0, space)).empty())
         return "a child config name and a count from 1 to 64, like 'net 4'";
       s.config.parallel_children.push_back(
           {std::string(trim(value.substr(0, space))), child.count});
       return nullptr;
     }},
    {"min-replay-window",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number(value, s.config.min_replay_window, 0u, 65536u),
                     "0 to 65536 packets");
     }},
    {"ike-port",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number<uint16_t>(value, s.config.ike_port, 0, 65535),
                     "a port number or 0");
     }},
    {"ike-rate-limit",
     [](std::string_view value, ParseState& s) -> const char* {
       const size_t space = value.find_first_of(" \t");
       if (space == std::string_view::npos ||
           !parse_number(trim(value.substr(0, space)), s.config.ike_rate_per_source, 0u,
                         10000000u) ||
           !parse_number(trim(value.substr(space + 1)), s.config.ike_rate_global, 0u, 10000000u))
         return "two rates in packets per second, per source and in all, like '5000 20000' (0: "
                "none)";
       return nullptr;
     }},
    {"workers",
     [](std::string_view value, ParseState& s) -> const char* {
       s.config.workers_auto = value == "auto";
       s.config.run_to_completion = value == "inline";
       s.config.workers = 0;
       if (!s.config.workers_auto && !s.config.run_to_completion &&
           !parse_number(value, s.config.workers, 0u, 1024u))
         return "auto, inline, or a number from 0 (one per CPU) to 1024";
       return nullptr;
     }},
    {"crypto-backend",
     [](std::string_view value, ParseState& s) -> const char* {
       if (!crypto::find_backend(value)) return "ipsec-mb or openssl";
       s.config.crypto_backend = value;
       return nullptr;
     }},
    {"pin-workers",
     [](std::string_view value, ParseState& s) {
       return unless(parse_bool(value, s.config.pin_workers), "yes or no");
     }},
    {"socket-buffer",
     [](std::string_view value, ParseState& s) -> const char* {
       size_t bytes = 0;
       if (value == "auto")
         s.config.socket_buffer_bytes.reset();
       else if (parse_number<size_t>(value, bytes, 65536, size_t{1} << 30))
         s.config.socket_buffer_bytes = bytes;
       else
         return "auto, or a size in bytes from 65536 to 1073741824";
       return nullptr;
     }},
    {"queue-delay-target-us",
     [](std::string_view value, ParseState& s) -> const char* {
       std::chrono::microseconds target{};
       if (value == "auto")
         s.config.queue_delay_target.reset();
       else if (parse_microseconds(value, target, 0, 1000000))
         s.config.queue_delay_target = target;
       else
         return "auto, or microseconds from 0 (off) to 1000000";
       return nullptr;
     }},
    {"queue-delay-interval-us",
     [](std::string_view value, ParseState& s) {
       return unless(parse_microseconds(value, s.config.queue_delay_interval, 100, 10000000),
                     "microseconds from 100 to 10000000");
     }},
    {"reorder-hold-us",
     [](std::string_view value, ParseState& s) {
       return unless(parse_microseconds(value, s.config.reorder_hold, 1, 1000000),
                     "microseconds from 1 to 1000000");
     }},
    {"pool-packets",
     [](std::string_view value, ParseState& s) {
       return unless(parse_number<size_t>(value, s.config.pool_packets, 256, 1 << 20),
                     "a number from 256 to 1048576");
     }},
    {"tunnel-mtu",
     [](std::string_view value, ParseState& s) -> const char* {
       unsigned mtu = 0;
       if (!parse_number(value, mtu, 576u, 65000u)) return "an MTU from 576 to 65000";
       s.config.tunnel_mtu = mtu;
       return nullptr;
     }},
    {"jumbo-segments",
     [](std::string_view value, ParseState& s) {
       return unless(parse_bool(value, s.config.jumbo_segments), "yes or no");
     }},
    {"allow-core-dumps",
     [](std::string_view value, ParseState& s) {
       return unless(parse_bool(value, s.config.allow_core_dumps), "yes or no");
     }},
    {"lan-mtu",
     [](std::string_view value, ParseState& s) -> const char* {
       unsigned mtu = 0;
       if (value == "auto")
         s.config.lan_mtu.reset();
       else if (parse_number(value, mtu, 576u, 65535u))
         s.config.lan_mtu = mtu;
       else
         return "auto, or an MTU from 576 to 65535";
       return nullptr;
     }},
    {"log-level",
     [](std::string_view value, ParseState& s) -> const char* {
       auto level = parse_log_level(value);
       if (!level) return "error, warn, info or debug";
       s.config.log_level = *level;
       return nullptr;
     }},
    {"stats-interval",
     [](std::string_view value, ParseState& s) -> const char* {
       unsigned seconds = 0;
       if (!parse_number(value, seconds, 0u, 86400u)) return "seconds from 0 (off) to 86400";
       s.config.stats_interval = std::chrono::seconds(seconds);
       return nullptr;
     }},
};

const ConfigKey* find_config_key(std::string_view name) {
  for (const ConfigKey& key : kConfigKeys)
    if (key.name == name) return &key;
  return nullptr;
}

// The rules that tie keys together, once every line has been read.
void check_combinations(const ParseState& state, std::vector<std::string>& errors) {
  const GatewayConfig& config = state.config;
  const std::string& path = state.path;
  if (!state.have_local) errors.push_back(path + ": 'local-address' is required");
  if (config.static_sa_file.empty() && config.control_socket.empty())
    errors.push_back(path + ": 'static-sa-file' or 'control-socket' is required");
  if (!config.parallel_children.empty() &&
      (config.charon_vici.empty() || config.control_socket.empty()))
    errors.push_back(path + ": 'parallel-child' needs 'charon-vici' and 'control-socket'");
  if (config.jumbo_segments && !config.tun_offload)
    errors.push_back(path +
                     ": 'jumbo-segments' needs 'tun-offload = yes': only the offloading "
                     "TUN hands over the TCP super-packets it cuts");
  for (const auto& interface : config.interfaces)
    if (interface.name == config.tun_name)
      errors.push_back(path + ": 'interface " + std::to_string(interface.if_id) + " " +
                       interface.name + "': the name is tun-name's, the default device");
  if (!config.interfaces.empty() && config.control_socket.empty())
    errors.push_back(path +
                     ": 'interface' needs 'control-socket' (charon's if_id_in and "
                     "if_id_out name the interfaces)");
  if (!config.control_socket.empty() && config.ike_port == config.udp_port)
    errors.push_back(path + ": 'ike-port' and 'udp-port' must differ");
}

}  // namespace

ConfigResult parse_gateway_config_text(const std::string& text, const std::string& path) {
  ConfigResult result;
  GatewayConfig config;
  config.workers_auto = true;  // unless a workers line says otherwise
  ParseState state{config, path};
  std::istringstream lines(text);
  std::string raw;
  unsigned number = 0;
  auto error = [&](const std::string& message) {
    result.errors.push_back(path + ":" + std::to_string(number) + ": " + message);
  };
  while (std::getline(lines, raw)) {
    ++number;
    std::string_view line = raw;
    if (const auto hash = line.find('#'); hash != std::string_view::npos)
      line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const auto equals = line.find('=');
    if (equals == std::string_view::npos) {
      error("expected 'key = value', got '" + std::string(line) + "'");
      continue;
    }
    const std::string key(trim(line.substr(0, equals)));
    const std::string_view value = trim(line.substr(equals + 1));
    if (value.empty()) {
      error("'" + key + "' has no value");
      continue;
    }
    const ConfigKey* known = find_config_key(key);
    if (known == nullptr) {
      error("unknown key '" + key + "'");
      continue;
    }
    if (const char* expected = known->parse(value, state)) {
      error("'" + key + "': expected " + expected + ", got '" + std::string(value) + "'");
      continue;
    }
    std::string& written = config.written[key];
    written += (written.empty() ? "" : "; ") + std::string(value);
  }
  check_combinations(state, result.errors);
  resolve_auto_workers(config, usable_cpu_count());
  if (!state.have_state_dir) config.state_dir = default_state_dir(path);
  if (result.errors.empty()) result.config = std::move(config);
  return result;
}

std::string default_state_dir(const std::string& config_path) {
  std::string absolute = config_path;
  if (char* resolved = realpath(config_path.c_str(), nullptr)) {
    absolute = resolved;
    free(resolved);
  } else if (!config_path.starts_with("/")) {
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) absolute = std::string(cwd) + "/" + config_path;
  }
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned length = 0;
  EVP_Digest(absolute.data(), absolute.size(), digest, &length, EVP_sha256(), nullptr);
  char hash[9];
  std::snprintf(hash, sizeof hash, "%02x%02x%02x%02x", digest[0], digest[1], digest[2], digest[3]);
  const auto slash = absolute.rfind('/');
  const std::string name = slash == std::string::npos ? absolute : absolute.substr(slash + 1);
  return std::string(kStateRoot) + "/" + name + "-" + hash;
}

size_t wan_socket_buffer_bytes(const GatewayConfig& config) {
  return config.socket_buffer_bytes.value_or(config.run_to_completion ? kInlineSocketBufferBytes
                                                                      : kWorkersSocketBufferBytes);
}

std::chrono::microseconds queue_delay_target_of(const GatewayConfig& config) {
  return config.queue_delay_target.value_or(
      config.run_to_completion ? kAutoQueueDelayTarget : std::chrono::microseconds(0));
}

void resolve_auto_workers(GatewayConfig& config, unsigned cpus) {
  if (!config.workers_auto) return;
  config.run_to_completion = cpus <= kAutoInlineMaxCpus;
  config.workers = 0;
}

unsigned usable_cpu_count() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
    return static_cast<unsigned>(std::max(1, CPU_COUNT(&cpus)));
  return static_cast<unsigned>(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
}

unsigned wan_reader_count(const GatewayConfig& config) {
  if (config.wan_readers != 0) return config.wan_readers;
  // A reader per core up to 4: beyond that the readers only take cores from the crypto
  // workers, which do the per-packet work a reader hands them.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<unsigned>(std::clamp<long>(cpus, 1, 4));
}

bool wants_tun_rps(const GatewayConfig& config, unsigned cpus) {
  if (config.tun_rps) return *config.tun_rps;
  // Without workers each WAN socket's packets are written by its one reader, and one CPU
  // has nothing to steer to.
  return !config.run_to_completion && cpus > 1;
}

ConfigResult parse_gateway_config(const std::string& path) {
  std::ifstream file(path);
  if (!file) return {std::nullopt, {path + ": cannot open the file"}};
  std::stringstream text;
  text << file.rdbuf();
  return parse_gateway_config_text(text.str(), path);
}

}  // namespace espgw::daemon

#include "daemon/config.h"

#include "crypto/aead.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

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

}  // namespace

ConfigResult parse_gateway_config_text(const std::string& text, const std::string& path) {
  ConfigResult result;
  GatewayConfig config;
  bool have_local = false;
  bool have_state_dir = false;
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
    const auto bad = [&](const char* expected) {
      error("'" + key + "': expected " + expected + ", got '" + std::string(value) + "'");
    };
    if (key == "tun-name") {
      if (value.size() > 15)
        bad("an interface name of at most 15 characters");
      else
        config.tun_name = value;
    } else if (key == "tun-queues") {
      if (!parse_number(value, config.tun_queues, 1u, 64u)) bad("a number from 1 to 64");
    } else if (key == "tun-offload") {
      if (!parse_bool(value, config.tun_offload)) bad("yes or no");
    } else if (key == "tun-rps") {
      bool on = false;
      if (value == "auto")
        config.tun_rps.reset();
      else if (parse_bool(value, on))
        config.tun_rps = on;
      else
        bad("auto, yes or no");
    } else if (key == "tun-address") {
      if (auto prefix = esp::IpPrefix::parse(value))
        config.tun_address = prefix;
      else
        bad("an address with prefix length, like 10.1.255.1/32");
    } else if (key == "local-address") {
      if (auto address = esp::IpAddress::parse(value)) {
        config.local_address = *address;
        have_local = true;
      } else {
        bad("an IPv4 or IPv6 address");
      }
    } else if (key == "udp-port") {
      if (!parse_number<uint16_t>(value, config.udp_port, 1, 65535)) bad("a port number");
    } else if (key == "wan-readers") {
      if (!parse_number(value, config.wan_readers, 0u, 64u))
        bad("a number from 0 (one per CPU, at most 4) to 64");
    } else if (key == "state-dir") {
      have_state_dir = true;
      const std::string directory(value);
      config.state_dir =
          directory.front() == '/' ? directory : directory_of(path) + "/" + directory;
    } else if (key == "static-sa-file") {
      const std::string file(value);
      config.static_sa_file = file.front() == '/' ? file : directory_of(path) + "/" + file;
    } else if (key == "control-socket") {
      if (value.front() != '/' || value.size() > 107)
        bad("an absolute path of at most 107 characters");
      else
        config.control_socket = value;
    } else if (key == "charon-vici") {
      config.charon_vici = value;
    } else if (key == "parallel-child") {
      // "NAME N": keep N CHILD_SAs of child config NAME up (ECMP)
      const auto space = value.find_last_of(" \t");
      ParallelChild child;
      if (space == std::string_view::npos ||
          !parse_number(trim(value.substr(space + 1)), child.count, 1u, 64u) ||
          trim(value.substr(0, space)).empty())
        bad("a child config name and a count from 1 to 64, like 'net 4'");
      else
        config.parallel_children.push_back(
            {std::string(trim(value.substr(0, space))), child.count});
    } else if (key == "min-replay-window") {
      if (!parse_number(value, config.min_replay_window, 0u, 65536u)) bad("0 to 65536 packets");
    } else if (key == "ike-port") {
      if (!parse_number<uint16_t>(value, config.ike_port, 0, 65535)) bad("a port number or 0");
    } else if (key == "ike-rate-limit") {
      const size_t space = value.find_first_of(" \t");
      if (space == std::string_view::npos ||
          !parse_number(trim(value.substr(0, space)), config.ike_rate_per_source, 0u, 10000000u) ||
          !parse_number(trim(value.substr(space + 1)), config.ike_rate_global, 0u, 10000000u))
        bad("two rates in packets per second, per source and in all, like '5000 20000' (0: none)");
    } else if (key == "workers") {
      config.run_to_completion = value == "inline";
      if (!config.run_to_completion && !parse_number(value, config.workers, 0u, 1024u))
        bad("a number from 0 (one per CPU) to 1024, or inline");
    } else if (key == "crypto-backend") {
      if (crypto::find_backend(value))
        config.crypto_backend = value;
      else
        bad("ipsec-mb or openssl");
    } else if (key == "pin-workers") {
      if (!parse_bool(value, config.pin_workers)) bad("yes or no");
    } else if (key == "socket-buffer") {
      size_t bytes = 0;
      if (value == "auto")
        config.socket_buffer_bytes.reset();
      else if (parse_number<size_t>(value, bytes, 65536, size_t{1} << 30))
        config.socket_buffer_bytes = bytes;
      else
        bad("auto, or a size in bytes from 65536 to 1073741824");
    } else if (key == "queue-delay-target-us") {
      std::chrono::microseconds target{};
      if (value == "auto")
        config.queue_delay_target.reset();
      else if (parse_microseconds(value, target, 0, 1000000))
        config.queue_delay_target = target;
      else
        bad("auto, or microseconds from 0 (off) to 1000000");
    } else if (key == "queue-delay-interval-us") {
      if (!parse_microseconds(value, config.queue_delay_interval, 100, 10000000))
        bad("microseconds from 100 to 10000000");
    } else if (key == "reorder-hold-us") {
      if (!parse_microseconds(value, config.reorder_hold, 1, 1000000))
        bad("microseconds from 1 to 1000000");
    } else if (key == "pool-packets") {
      if (!parse_number<size_t>(value, config.pool_packets, 256, 1 << 20))
        bad("a number from 256 to 1048576");
    } else if (key == "tunnel-mtu") {
      unsigned mtu = 0;
      if (parse_number(value, mtu, 576u, 65000u))
        config.tunnel_mtu = mtu;
      else
        bad("an MTU from 576 to 65000");
    } else if (key == "jumbo-segments") {
      if (!parse_bool(value, config.jumbo_segments)) bad("yes or no");
    } else if (key == "allow-core-dumps") {
      if (!parse_bool(value, config.allow_core_dumps)) bad("yes or no");
    } else if (key == "lan-mtu") {
      unsigned mtu = 0;
      if (value == "auto")
        config.lan_mtu.reset();
      else if (parse_number(value, mtu, 576u, 65535u))
        config.lan_mtu = mtu;
      else
        bad("auto, or an MTU from 576 to 65535");
    } else if (key == "log-level") {
      if (auto level = parse_log_level(value))
        config.log_level = *level;
      else
        bad("error, warn, info or debug");
    } else if (key == "stats-interval") {
      unsigned seconds = 0;
      if (parse_number(value, seconds, 0u, 86400u))
        config.stats_interval = std::chrono::seconds(seconds);
      else
        bad("seconds from 0 (off) to 86400");
    } else {
      error("unknown key '" + key + "'");
    }
  }
  if (!have_local) result.errors.push_back(path + ": 'local-address' is required");
  if (config.static_sa_file.empty() && config.control_socket.empty())
    result.errors.push_back(path + ": 'static-sa-file' or 'control-socket' is required");
  if (!config.parallel_children.empty() &&
      (config.charon_vici.empty() || config.control_socket.empty()))
    result.errors.push_back(path + ": 'parallel-child' needs 'charon-vici' and 'control-socket'");
  if (config.jumbo_segments && !config.tun_offload)
    result.errors.push_back(path +
                            ": 'jumbo-segments' needs 'tun-offload = yes': only the offloading "
                            "TUN hands over the TCP super-packets it cuts");
  if (!config.control_socket.empty() && config.ike_port == config.udp_port)
    result.errors.push_back(path + ": 'ike-port' and 'udp-port' must differ");
  if (!have_state_dir) config.state_dir = default_state_dir(path);
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

// The static file's writer: the inverse of the parser, for round-trip tests only (it
// prints keys).
#include <cstdio>
#include <string>

#include "crypto/aead.h"
#include "util/hex.h"
#include "xfrm/static_file.h"
#include "xfrm/static_file_keywords.h"

namespace espgw::xfrm {

namespace {

void append_number(std::string& out, std::string_view keyword, uint64_t value) {
  out += ' ';
  out += keyword;
  out += ' ';
  out += std::to_string(value);
}

std::string port_range_text(const PortRange& range) {
  if (range.first == range.last) return std::to_string(range.first);
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

void write_sa(std::string& out, const SadEntry& sa) {
  const esp::SaConfig& c = sa.config;
  char spi[16];
  std::snprintf(spi, sizeof spi, "0x%08x", c.spi);
  out += "sa ";
  out += direction_name(sa.direction);
  out += " spi ";
  out += spi;
  out += ' ';
  out += crypto::algorithm_name(c.algorithm);
  if (c.integrity != crypto::IntegrityAlgorithm::none) {
    out += ' ';
    out += crypto::integrity_name(c.integrity);
  }
  out += " key 0x" + to_hex(c.key_material);
  out += " src " + c.tunnel_source.to_string();
  out += " dst " + c.tunnel_destination.to_string();
  if (c.esn) out += " esn";
  if (c.udp_encapsulation)
    out += " udp " + std::to_string(c.udp_encapsulation->source_port) + ":" +
           std::to_string(c.udp_encapsulation->destination_port);
  if (sa.direction == Direction::in) append_number(out, "replay-window", c.replay_window);
  // The outer-header settings, where they differ from the defaults.
  const esp::OuterHeaderPolicy& outer = c.outer_header;
  const esp::OuterHeaderPolicy defaults;
  if (outer.copy_dscp_out != defaults.copy_dscp_out || outer.copy_dscp_in != defaults.copy_dscp_in)
    out += outer.copy_dscp_out ? (outer.copy_dscp_in ? " copy-dscp yes" : " copy-dscp out")
                               : (outer.copy_dscp_in ? " copy-dscp in" : " copy-dscp no");
  if (!outer.copy_ecn) out += " copy-ecn no";
  if (outer.dont_fragment == esp::OuterHeaderPolicy::DontFragment::clear) out += " copy-df no";
  if (outer.dont_fragment == esp::OuterHeaderPolicy::DontFragment::set) out += " copy-df set";
  append_number(out, "reqid", sa.reqid);
  const Lifetimes& l = sa.lifetimes;
  const std::pair<std::string_view, uint64_t> limits[] = {
      {"soft-bytes", l.soft_bytes},     {"hard-bytes", l.hard_bytes},
      {"soft-packets", l.soft_packets}, {"hard-packets", l.hard_packets},
      {"soft-seconds", l.soft_seconds}, {"hard-seconds", l.hard_seconds},
  };
  for (const auto& [keyword, value] : limits)
    if (value != 0) append_number(out, keyword, value);
  out += '\n';
}

void write_policy(std::string& out, const Policy& policy) {
  const Selector& s = policy.selector;
  out += "policy ";
  out += direction_name(policy.direction);
  out += " local " + s.local.to_string();
  out += " remote " + s.remote.to_string();
  if (s.protocol != 0) {
    const auto name = keywords::protocol_name(s.protocol);
    out += " proto " + (name.empty() ? std::to_string(s.protocol) : std::string(name));
  }
  if (!s.local_ports.is_any()) out += " local-port " + port_range_text(s.local_ports);
  if (!s.remote_ports.is_any()) out += " remote-port " + port_range_text(s.remote_ports);
  append_number(out, "priority", policy.priority);
  out += " action ";
  out += action_name(policy.action);
  if (policy.action == PolicyAction::protect) append_number(out, "reqid", policy.reqid);
  out += '\n';
}

}  // namespace

std::string to_text(const StaticConfig& config) {
  std::string out = "# written by xfrm::to_text; holds keys\n";
  for (const auto& sa : config.sas) write_sa(out, sa);
  for (const auto& policy : config.policies) write_policy(out, policy);
  return out;
}

}  // namespace espgw::xfrm

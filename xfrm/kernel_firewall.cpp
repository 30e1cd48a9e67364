#include "xfrm/kernel_firewall.h"

#include "xfrm/firewall_rules.h"

#include <nftables/libnftables.h>

#include <cstdio>
#include <stdexcept>

namespace espgw::xfrm {
namespace {

bool name_character_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

std::string port_range_text(const PortRange& range) {
  if (range.first == range.last) return std::to_string(range.first);
  return std::to_string(range.first) + "-" + std::to_string(range.last);
}

// Chains a protect rule jumps to: what came through (or leaves through) the TUN device is
// accepted, the rest is counted and dropped.
constexpr std::string_view kFromTunnelOnly = "from_tunnel_only";
constexpr std::string_view kToTunnelOnly = "to_tunnel_only";

// The rules in order, each run of rules that share a rule (FirewallRunBuilder) as one.
void write_rules(std::vector<std::string>& chain, const std::vector<FirewallRule>& rules) {
  FirewallRunBuilder runs;
  std::vector<const FirewallRule*> run;
  for (const auto& rule : rules) {
    if (runs.next(rule) && !run.empty()) {
      chain.push_back(firewall_run_rule(run));
      run.clear();
    }
    run.push_back(&rule);
  }
  if (!run.empty()) chain.push_back(firewall_run_rule(run));
}

void add_rules(std::vector<std::string>& chain, const std::vector<Policy>& policies,
               Direction direction) {
  std::vector<FirewallRule> rules;
  for (const auto& policy : policies)
    if (policy.direction == direction) rules.push_back(firewall_policy_rule(policy));
  write_rules(chain, rules);
}

void add_fail_closed(std::vector<std::string>& chain, const FirewallSpec& spec) {
  std::vector<FirewallRule> rules;
  for (const auto& prefix : spec.fail_closed_prefixes)
    rules.push_back(firewall_fail_closed_rule(prefix, spec.tun_name));
  write_rules(chain, rules);
}

void write_chain(std::string& text, const std::vector<std::string>& rules) {
  for (const auto& rule : rules) text += "    " + rule + "\n";
}

}  // namespace

bool firewall_interface_name_ok(std::string_view tun_name) {
  if (tun_name.empty() || tun_name.size() > 15) return false;
  for (const char c : tun_name)
    if (!name_character_ok(c) && c != '-' && c != '.') return false;
  return true;
}

std::string firewall_table_name(std::string_view tun_name) {
  std::string name = "espgw_";
  for (const char c : tun_name) {
    if (name_character_ok(c)) {
      name += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "_x%02x",
                    static_cast<unsigned>(static_cast<uint8_t>(c)));
      name += escaped;
    }
  }
  return name;
}

std::string firewall_match(const Policy& policy) {
  const Selector& selector = policy.selector;
  const bool outbound = policy.direction == Direction::out;
  // Selectors name local and remote; a packet of `in` or `fwd` comes from the remote side.
  const esp::IpPrefix& source = outbound ? selector.local : selector.remote;
  const esp::IpPrefix& destination = outbound ? selector.remote : selector.local;
  const PortRange& source_ports = outbound ? selector.local_ports : selector.remote_ports;
  const PortRange& destination_ports = outbound ? selector.remote_ports : selector.local_ports;
  const bool v4 = selector.local.address.family == 4;
  const char* ip = v4 ? "ip" : "ip6";
  // The family is matched even when both prefixes are "any": an IPv4 selector never
  // matches an IPv6 packet (Selector::matches).
  std::string match = std::string("meta nfproto ") + (v4 ? "ipv4" : "ipv6");
  if (source.length != 0) match += std::string(" ") + ip + " saddr " + source.to_string();
  if (destination.length != 0) match += std::string(" ") + ip + " daddr " + destination.to_string();
  if (selector.protocol != 0) match += " meta l4proto " + std::to_string(selector.protocol);
  // Like the SPD, a port range never matches a packet whose ports are unknown: nft's
  // transport header match does not match a non-first fragment.
  if (!source_ports.is_any()) match += " th sport " + port_range_text(source_ports);
  if (!destination_ports.is_any()) match += " th dport " + port_range_text(destination_ports);
  return match;
}

std::string firewall_ruleset(const FirewallSpec& spec) {
  FirewallChainRules rules;
  add_rules(rules.input, spec.policies, Direction::in);
  add_rules(rules.forward, spec.policies, Direction::fwd);
  add_rules(rules.forward, spec.policies, Direction::out);
  add_fail_closed(rules.forward, spec);
  add_rules(rules.output, spec.policies, Direction::out);
  add_fail_closed(rules.output, spec);
  return firewall_table(spec.tun_name, rules);
}

std::string firewall_table(std::string_view tun_name, const FirewallChainRules& rules) {
  const std::string table = "table inet " + firewall_table_name(tun_name);
  std::string tun = "\"";
  tun.append(tun_name).append("\"");
  // Declaring the table first makes the delete succeed whether or not it existed; the
  // three commands are one transaction, so no packet sees the table empty.
  std::string text = table + " {}\ndelete " + table + "\n" + table + " {\n";
  text += "  chain " + std::string(kFromTunnelOnly) + " {\n    iifname " + tun +
          " accept\n    counter drop\n  }\n";
  text += "  chain " + std::string(kToTunnelOnly) + " {\n    oifname " + tun +
          " accept\n    counter drop\n  }\n";
  // Before the usual filter chains (priority 0), so that an accept elsewhere does not
  // matter: every base chain of every table sees the packet.
  text += "  chain input {\n    type filter hook input priority filter - 10; policy accept;\n";
  write_chain(text, rules.input);
  text += "  }\n";
  text += "  chain forward {\n    type filter hook forward priority filter - 10; policy accept;\n";
  write_chain(text, rules.forward);
  text += "  }\n";
  text += "  chain output {\n    type filter hook output priority filter - 10; policy accept;\n";
  write_chain(text, rules.output);
  text += "  }\n}\n";
  return text;
}

std::string firewall_removal(std::string_view tun_name) {
  const std::string table = "table inet " + firewall_table_name(tun_name);
  return table + " {}\ndelete " + table + "\n";
}

void KernelFirewall::ContextFree::operator()(nft_ctx* context) const {
  nft_ctx_free(context);
}

KernelFirewall::Context KernelFirewall::open() {
  Context context(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!context) return context;
  // Errors (and any output) into buffers, for our log, not onto stderr.
  nft_ctx_buffer_output(context.get());
  nft_ctx_buffer_error(context.get());
  return context;
}

KernelFirewall::KernelFirewall() {
  if (!open()) throw std::runtime_error("nftables: no libnftables context");
}

KernelFirewall::~KernelFirewall() = default;

Result KernelFirewall::failure(nft_ctx* context, std::string_view what) {
  Result result;
  result.ok = false;
  result.error = EIO;  // nft reports text, not an errno
  std::string detail = context ? nft_ctx_get_error_buffer(context) : "";
  while (!detail.empty() && (detail.back() == '\n' || detail.back() == ' ')) detail.pop_back();
  result.message = "nftables: " + std::string(what) + " failed" +
                   (detail.empty() ? std::string() : ": " + detail);
  return result;
}

Result KernelFirewall::run(const std::string& commands, std::string_view what) {
  const Context context = open();
  if (!context) return failure(nullptr, what);
  if (nft_run_cmd_from_buffer(context.get(), commands.c_str()) == 0) return {};
  return failure(context.get(), what);
}

Result KernelFirewall::list(const std::string& command, std::string_view what,
                            std::string& output) {
  const Context context = open();
  if (!context) return failure(nullptr, what);
  nft_ctx_output_set_flags(context.get(),
                           nft_ctx_output_get_flags(context.get()) | NFT_CTX_OUTPUT_HANDLE);
  const int status = nft_run_cmd_from_buffer(context.get(), command.c_str());
  output = nft_ctx_get_output_buffer(context.get());
  return status == 0 ? Result{} : failure(context.get(), what);
}

}  // namespace espgw::xfrm

// Inbound policy enforcement (and a second fail-closed layer for outbound) in the kernel,
// through nftables (libnftables).
//
// The kernel's own IPsec drops cleartext that arrives from outside the tunnel for a
// protected selector; espgw only sees what reaches its TUN device, so a table of its own,
// `table inet espgw_<tun>`, does that for it:
//   input hook:   the `in` policies, in SPD order
//   forward hook: the `fwd` policies, then the `out` policies, then the fail-closed prefixes
//   output hook:  the `out` policies, then the fail-closed prefixes
// A policy becomes a rule on its selector (oriented as the packet carries it; protocol
// and ports when the selector has them): protect in/fwd accepts only what arrived on the
// TUN device, protect out only what leaves through it, bypass accepts, discard drops. The
// first matching rule decides, as the first matching policy does in the SPD. Consecutive
// policies that match addresses only, with the same verdict and no overlap between them,
// share one rule whose addresses are an anonymous set (one lookup per packet however many
// tunnels there are); consecutive fail-closed prefixes likewise. Last, a
// packet towards a fail-closed prefix (xfrm/fail_closed_routes.h) that would leave through
// another device is dropped. The table outlives espgw (SIGTERM, crash); espgw writes it
// whole at start and then changes only the rules that policy changes touch
// (xfrm/firewall_sync.h); `espgw --release` removes it. docs/security_fail_closed.md,
// "Inbound policy enforcement".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/netlink.h"
#include "xfrm/spd.h"

struct nft_ctx;

namespace espgw::xfrm {

struct FirewallSpec {
  std::string tun_name;
  // Every policy, each direction in SPD lookup order (Spd::list()).
  std::vector<Policy> policies;
  // Destinations that may only leave through the TUN device.
  std::vector<esp::IpPrefix> fail_closed_prefixes;
};

// The command text is built from parsed values only; an interface name is the one string
// that goes in, and it must be made of letters, digits, '_', '-' and '.' (what the daemon
// checks before it builds anything).
bool firewall_interface_name_ok(std::string_view tun_name);
// "espgw_" and the TUN name, characters other than letters, digits and '_' written as
// "_xHH" ("espgw0" -> "espgw_espgw0", "gw-1" -> "espgw_gw_x2d1").
std::string firewall_table_name(std::string_view tun_name);
// The nft match of `policy`'s selector as a packet of its direction carries it, e.g.
// "meta nfproto ipv4 ip saddr 10.2.0.0/16 ip daddr 10.1.0.0/16 meta l4proto 17 th dport 53".
std::string firewall_match(const Policy& policy);
// The whole table, as one nft transaction: created if missing, emptied, filled.
std::string firewall_ruleset(const FirewallSpec& spec);
// The rules of each base chain in order, one nft rule (without the chain) each.
struct FirewallChainRules {
  std::vector<std::string> input, forward, output;
};
// The whole table with these rules, as firewall_ruleset writes it.
std::string firewall_table(std::string_view tun_name, const FirewallChainRules& rules);
// Removes the table if it is there.
std::string firewall_removal(std::string_view tun_name);

// Runs nft commands through libnftables. Each command gets a libnftables context of its
// own, freed when it is done: a context keeps its cache (a parsed copy of every rule of
// the ruleset, read before any command that names a position) until its next command,
// which with thousands of policies is most of espgw's memory (docs/scaling.md, "Memory
// per SA"). The kernel's ruleset generation moves with every commit, so a kept cache was
// read again at the next sync anyway. Not thread-safe: one thread runs its commands.
class KernelFirewall {
 public:
  // Throws std::runtime_error if libnftables gives no context.
  KernelFirewall();
  ~KernelFirewall();
  KernelFirewall(const KernelFirewall&) = delete;
  KernelFirewall& operator=(const KernelFirewall&) = delete;

  // Runs `commands` as one transaction: all of it or nothing. The failure message is
  // nft's own error text, naming the command and what it did not accept.
  Result run(const std::string& commands, std::string_view what);
  // Runs a list `command`; its output, with handles, into `output`.
  Result list(const std::string& command, std::string_view what, std::string& output);

 private:
  struct ContextFree {
    void operator()(nft_ctx* context) const;
  };
  using Context = std::unique_ptr<nft_ctx, ContextFree>;
  // Null if libnftables gives none.
  static Context open();
  static Result failure(nft_ctx* context, std::string_view what);
};

}  // namespace espgw::xfrm

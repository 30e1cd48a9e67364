// A security policy (RFC 4301 4.4.1): which inner packets it covers, which way, and what
// happens to them (protected by an SA group, passed in clear, or dropped).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "xfrm/direction.h"
#include "xfrm/selector.h"

namespace espgw::xfrm {

enum class PolicyAction : uint8_t { protect, bypass, discard };

// The words for actions, as the static file and the control socket write them.
constexpr std::string_view action_name(PolicyAction action) {
  switch (action) {
    case PolicyAction::protect:
      return "protect";
    case PolicyAction::bypass:
      return "bypass";
    case PolicyAction::discard:
      return "discard";
  }
  return "?";
}

constexpr std::optional<PolicyAction> parse_action(std::string_view word) {
  if (word == "protect") return PolicyAction::protect;
  if (word == "bypass") return PolicyAction::bypass;
  if (word == "discard") return PolicyAction::discard;
  return std::nullopt;
}

struct Policy {
  uint32_t id = 0;
  Direction direction = Direction::out;
  Selector selector;
  uint32_t priority = 0;  // lower value wins, as with the kernel's xfrm policy priority
  PolicyAction action = PolicyAction::protect;
  uint32_t reqid = 0;  // protect only: the SA group (all SAs of this reqid and direction)
  // Route-based VPN (charon's if_id_in / if_id_out, as with Linux XFRM interfaces): 0 is
  // the default TUN device; any other value is the TUN device of that interface id, and
  // the policy decides only packets read from (out) or decrypted for (in, fwd) it.
  uint32_t if_id = 0;

  bool operator==(const Policy&) const = default;
};

}  // namespace espgw::xfrm

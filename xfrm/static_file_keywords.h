// The words the static SA/policy file and its writer share (internal to xfrm/): protocol,
// direction and action names. Keeping them in one table keeps parse and print in step.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "xfrm/direction.h"
#include "xfrm/spd.h"

namespace espgw::xfrm::keywords {

struct ProtocolName {
  std::string_view name;
  uint8_t number;
};
// The first name of each number is the one the writer prints.
inline constexpr std::array<ProtocolName, 11> kProtocols{{
    {"any", 0},
    {"icmp", 1},
    {"tcp", 6},
    {"udp", 17},
    {"gre", 47},
    {"esp", 50},
    {"ah", 51},
    {"icmpv6", 58},
    {"ipv6-icmp", 58},
    {"sctp", 132},
    {"udplite", 136},
}};

inline std::optional<uint8_t> protocol_number(std::string_view name) {
  for (const auto& p : kProtocols)
    if (p.name == name) return p.number;
  return std::nullopt;
}

inline std::string_view protocol_name(uint8_t number) {
  for (const auto& p : kProtocols)
    if (p.number == number) return p.name;
  return {};
}

// The protocols whose selectors may name ports (the ones FlowKey reads ports from).
inline bool protocol_has_ports(uint8_t number) {
  return number == 6 || number == 17 || number == 132 || number == 136;
}

inline std::string_view direction_name(Direction direction) {
  switch (direction) {
    case Direction::out:
      return "out";
    case Direction::in:
      return "in";
    case Direction::fwd:
      return "fwd";
  }
  return "?";
}

inline std::optional<Direction> parse_direction(std::string_view word) {
  if (word == "out") return Direction::out;
  if (word == "in") return Direction::in;
  if (word == "fwd") return Direction::fwd;
  return std::nullopt;
}

inline std::string_view action_name(PolicyAction action) {
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

inline std::optional<PolicyAction> parse_action(std::string_view word) {
  if (word == "protect") return PolicyAction::protect;
  if (word == "bypass") return PolicyAction::bypass;
  if (word == "discard") return PolicyAction::discard;
  return std::nullopt;
}

}  // namespace espgw::xfrm::keywords

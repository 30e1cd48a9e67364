// The words the static SA/policy file and its writer share (internal to xfrm/): protocol
// names. Keeping them in one table keeps parse and print in step. Direction and action
// names are public (direction.h, spd.h): the control socket speaks them too.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

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

}  // namespace espgw::xfrm::keywords

// The words the static SA/policy file and its writer share (internal to xfrm/): protocol
// names. Keeping them in one table keeps parse and print in step. Direction and action
// names are public (direction.h, spd.h): the control socket speaks them too.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "packet/ip_format.h"

namespace espgw::xfrm::keywords {

struct ProtocolName {
  std::string_view name;
  uint8_t number;
};
// The first name of each number is the one the writer prints.
inline constexpr std::array<ProtocolName, 11> kProtocols{{
    {"any", 0},
    {"icmp", packet::kProtocolIcmp},
    {"tcp", packet::kProtocolTcp},
    {"udp", packet::kProtocolUdp},
    {"gre", packet::kProtocolGre},
    {"esp", packet::kProtocolEsp},
    {"ah", packet::kProtocolAh},
    {"icmpv6", packet::kProtocolIcmpv6},
    {"ipv6-icmp", packet::kProtocolIcmpv6},
    {"sctp", packet::kProtocolSctp},
    {"udplite", packet::kProtocolUdpLite},
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

}  // namespace espgw::xfrm::keywords

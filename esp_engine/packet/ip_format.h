// IP wire-format constants shared by every part of espgw that reads or writes packets: IP
// protocol numbers (the IANA registry's values) and the fixed header sizes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace espgw::packet {

inline constexpr size_t kIpv4HeaderLength = 20;  // without options
inline constexpr size_t kIpv6HeaderLength = 40;
inline constexpr size_t kUdpHeaderLength = 8;

// Upper-layer protocols.
inline constexpr uint8_t kProtocolIcmp = 1;
inline constexpr uint8_t kProtocolIpv4 = 4;  // IPv4 in IP: ESP's next header in tunnel mode
inline constexpr uint8_t kProtocolTcp = 6;
inline constexpr uint8_t kProtocolUdp = 17;
inline constexpr uint8_t kProtocolIpv6 = 41;  // IPv6 in IP
inline constexpr uint8_t kProtocolGre = 47;
inline constexpr uint8_t kProtocolEsp = 50;
inline constexpr uint8_t kProtocolAh = 51;
inline constexpr uint8_t kProtocolIcmpv6 = 58;
inline constexpr uint8_t kProtocolNoNext = 59;  // nothing follows: ESP's dummy packets (RFC 4303)
inline constexpr uint8_t kProtocolSctp = 132;
inline constexpr uint8_t kProtocolUdpLite = 136;

// IPv6 extension headers (RFC 8200 4). Each is a multiple of 8 bytes long, at least 8.
inline constexpr uint8_t kProtocolIpv6HopByHop = 0;
inline constexpr uint8_t kProtocolIpv6Routing = 43;
inline constexpr uint8_t kProtocolIpv6Fragment = 44;
inline constexpr uint8_t kProtocolIpv6DestinationOptions = 60;
inline constexpr size_t kIpv6ExtensionHeaderMinLength = 8;

// The protocols with ports. Each puts the source and the destination port, 16 bits each,
// in its first 4 bytes.
inline constexpr bool has_ports(uint8_t protocol) {
  return protocol == kProtocolTcp || protocol == kProtocolUdp || protocol == kProtocolSctp ||
         protocol == kProtocolUdpLite;
}
inline constexpr size_t kPortsLength = 4;

}  // namespace espgw::packet

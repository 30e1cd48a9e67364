// ESP wire-format constants (RFC 4303, RFC 4106, RFC 7634, RFC 3948).
#pragma once

#include <cstddef>
#include <cstdint>

#include "crypto/aead.h"

namespace espgw::esp {

inline constexpr size_t kEspHeaderLength = 8;  // SPI + sequence number (low 32 bits)
inline constexpr size_t kExplicitIvLength = 8;
inline constexpr size_t kEspTrailerLength = 2;  // pad length + next header
inline constexpr size_t kIcvLength = crypto::kIcvLength;
inline constexpr size_t kPayloadAlignment = 4;  // AEAD ciphers are stream-like: 4-byte ESP rule
inline constexpr size_t kIpv4HeaderLength = 20;
inline constexpr size_t kIpv6HeaderLength = 40;
inline constexpr size_t kUdpHeaderLength = 8;

inline constexpr uint8_t kProtocolIpv4 = 4;
inline constexpr uint8_t kProtocolIpv6 = 41;
inline constexpr uint8_t kProtocolNoNext = 59;  // RFC 4303 dummy packet
inline constexpr uint8_t kProtocolEsp = 50;
inline constexpr uint8_t kProtocolUdp = 17;
// What the inbound selector check reads past the inner IP header.
inline constexpr uint8_t kProtocolIcmp = 1;
inline constexpr uint8_t kProtocolTcp = 6;
inline constexpr uint8_t kProtocolSctp = 132;
inline constexpr uint8_t kProtocolUdpLite = 136;
inline constexpr uint8_t kProtocolIcmpv6 = 58;
inline constexpr uint8_t kProtocolAh = 51;
inline constexpr uint8_t kProtocolIpv6HopByHop = 0;
inline constexpr uint8_t kProtocolIpv6Routing = 43;
inline constexpr uint8_t kProtocolIpv6Fragment = 44;
inline constexpr uint8_t kProtocolIpv6DestinationOptions = 60;

// Smallest ESP packet that can be valid: header, IV, an empty payload's trailer, ICV.
inline constexpr size_t kMinEspPacketLength =
    kEspHeaderLength + kExplicitIvLength + kEspTrailerLength + kIcvLength;

// Worst-case bytes ESP tunnel mode adds to an inner packet, for MTU calculations.
inline constexpr size_t max_esp_overhead(bool ipv6_outer, bool udp_encapsulated) {
  return (ipv6_outer ? kIpv6HeaderLength : kIpv4HeaderLength) +
         (udp_encapsulated ? kUdpHeaderLength : 0) + kEspHeaderLength + kExplicitIvLength +
         (kPayloadAlignment - 1) + kEspTrailerLength + kIcvLength;
}

}  // namespace espgw::esp

// ESP wire-format constants (RFC 4303, RFC 4106, RFC 7634). IP protocol numbers and IP
// and UDP header sizes are in packet/ip_format.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crypto/aead.h"
#include "packet/ip_format.h"

namespace espgw::esp {

inline constexpr size_t kEspHeaderLength = 8;  // SPI + sequence number (low 32 bits)
inline constexpr size_t kExplicitIvLength = 8;
inline constexpr size_t kEspTrailerLength = 2;  // pad length + next header
inline constexpr size_t kIcvLength = crypto::kIcvLength;
inline constexpr size_t kPayloadAlignment = 4;  // AEAD ciphers are stream-like: 4-byte ESP rule

// Smallest ESP packet that can be valid: header, IV, an empty payload's trailer, ICV.
inline constexpr size_t kMinEspPacketLength =
    kEspHeaderLength + kExplicitIvLength + kEspTrailerLength + kIcvLength;

// Worst-case bytes ESP tunnel mode adds to an inner packet, for MTU calculations.
inline constexpr size_t max_esp_overhead(bool ipv6_outer, bool udp_encapsulated) {
  return (ipv6_outer ? packet::kIpv6HeaderLength : packet::kIpv4HeaderLength) +
         (udp_encapsulated ? packet::kUdpHeaderLength : 0) + kEspHeaderLength + kExplicitIvLength +
         (kPayloadAlignment - 1) + kEspTrailerLength + kIcvLength;
}

}  // namespace espgw::esp

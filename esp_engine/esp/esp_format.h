// ESP wire-format constants (RFC 4303, RFC 4106, RFC 7634, RFC 3602). IP protocol numbers and IP
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

// The sizes an SA's transform gives its packets. An AEAD: the constants above. AES-CBC
// (RFC 3602): a 16-byte IV, the payload padded to the 16-byte block, the truncated HMAC.
struct EspLayout {
  size_t iv_length = kExplicitIvLength;
  size_t icv_length = crypto::kIcvLength;
  size_t alignment = kPayloadAlignment;
};
inline constexpr EspLayout kAeadLayout{};
inline EspLayout esp_layout(crypto::EncryptionAlgorithm algorithm,
                            crypto::IntegrityAlgorithm integrity) {
  if (crypto::is_aead(algorithm)) return kAeadLayout;
  return {crypto::kAesBlockLength, crypto::integrity_icv_length(integrity),
          crypto::kAesBlockLength};
}
// The most any transform appends after the inner packet: a block's padding less one,
// the trailer, HMAC-SHA2-512-256's ICV.
inline constexpr size_t kMaxEspTailLength =
    crypto::kAesBlockLength - 1 + kEspTrailerLength + crypto::kMaxIcvLength;

// Smallest AEAD ESP packet that can be valid: header, IV, an empty payload's trailer, ICV.
inline constexpr size_t kMinEspPacketLength =
    kEspHeaderLength + kExplicitIvLength + kEspTrailerLength + kIcvLength;

// Smallest valid ESP packet of a layout: an AES-CBC payload is at least one block.
inline constexpr size_t min_esp_packet_length(const EspLayout& layout) {
  return layout.alignment == kPayloadAlignment
             ? kMinEspPacketLength
             : kEspHeaderLength + layout.iv_length + layout.alignment + layout.icv_length;
}

// Worst-case bytes ESP tunnel mode adds to an inner packet, for MTU calculations.
inline constexpr size_t max_esp_overhead(bool ipv6_outer, bool udp_encapsulated,
                                         const EspLayout& layout = kAeadLayout) {
  return (ipv6_outer ? packet::kIpv6HeaderLength : packet::kIpv4HeaderLength) +
         (udp_encapsulated ? packet::kUdpHeaderLength : 0) + kEspHeaderLength + layout.iv_length +
         (layout.alignment - 1) + kEspTrailerLength + layout.icv_length;
}

}  // namespace espgw::esp

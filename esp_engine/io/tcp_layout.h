// The IPv4/IPv6 and TCP header facts that TSO segmentation (tso_segmenter.cpp) and TCP
// coalescing (tcp_coalescer.cpp) share. Not part of the offload interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "esp/checksum.h"
#include "io/offload.h"
#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::io::tcp_layout {

using packet::kIpv4HeaderLength;
using packet::kIpv6HeaderLength;
using packet::kProtocolTcp;

inline constexpr size_t kTcpMinHeader = 20;
inline constexpr size_t kTcpChecksumOffset = 16;
inline constexpr size_t kTcpFlagsOffset = 13;
inline constexpr size_t kMaxIpPacket = 65535;  // IPv4 total length; we keep IPv6 to the same bound

inline constexpr uint8_t kTcpFin = 0x01;
inline constexpr uint8_t kTcpSyn = 0x02;
inline constexpr uint8_t kTcpRst = 0x04;
inline constexpr uint8_t kTcpPsh = 0x08;
inline constexpr uint8_t kTcpUrg = 0x20;
inline constexpr uint8_t kTcpCwr = 0x80;
// A segment with any of these ends or changes the stream's state; the receiver must see it
// exactly as sent, so it never joins a super-packet.
inline constexpr uint8_t kTcpNoMerge = kTcpFin | kTcpSyn | kTcpRst | kTcpUrg | kTcpCwr;

// Where the TCP header of an IPv4/IPv6 packet starts and how long it is.
struct TcpLayout {
  bool ipv6 = false;
  size_t ip_header_length = 0;
  size_t tcp_header_length = 0;
  size_t headers() const { return ip_header_length + tcp_header_length; }
};

// Checks the IP and TCP headers of a GSO packet against each other and the frame length.
inline OffloadResult parse_tcp_layout(std::span<const uint8_t> packet, bool expect_ipv6,
                                      TcpLayout& layout) {
  const uint8_t* p = packet.data();
  const size_t size = packet.size();
  if (size < kIpv4HeaderLength) return OffloadResult::too_short;
  const unsigned version = p[0] >> 4;
  if (version != (expect_ipv6 ? 6u : 4u)) return OffloadResult::bad_ip_header;
  layout.ipv6 = expect_ipv6;
  if (expect_ipv6) {
    if (size < kIpv6HeaderLength) return OffloadResult::too_short;
    // Walking extension headers would buy nothing here: Linux TCP does not add them.
    if (p[6] != kProtocolTcp) return OffloadResult::ipv6_extension_header;
    if (kIpv6HeaderLength + load_be16(p + 4) != size) return OffloadResult::bad_length;
    layout.ip_header_length = kIpv6HeaderLength;
  } else {
    layout.ip_header_length = size_t{p[0] & 0x0Fu} * 4;
    if (layout.ip_header_length < kIpv4HeaderLength) return OffloadResult::bad_ip_header;
    if (size < layout.ip_header_length) return OffloadResult::too_short;
    if (p[9] != kProtocolTcp) return OffloadResult::bad_ip_header;
    if ((load_be16(p + 6) & 0x3FFF) != 0) return OffloadResult::bad_ip_header;  // MF/offset
    if (load_be16(p + 2) != size) return OffloadResult::bad_length;
  }
  if (size < layout.ip_header_length + kTcpMinHeader) return OffloadResult::too_short;
  layout.tcp_header_length = size_t{p[layout.ip_header_length + 12]} / 16 * 4;
  if (layout.tcp_header_length < kTcpMinHeader) return OffloadResult::bad_ip_header;
  if (size < layout.headers()) return OffloadResult::too_short;
  return OffloadResult::ok;
}

// Unfolded pseudo-header sum (RFC 793 / RFC 8200 8.1) for a TCP segment of `l4_length`
// bytes; only the addresses differ between IPv4 and IPv6, the rest sums the same way.
inline uint32_t tcp_pseudo_header_sum(const uint8_t* ip, bool ipv6, size_t l4_length) {
  uint32_t sum = ipv6 ? esp::checksum_add(0, ip + 8, 32) : esp::checksum_add(0, ip + 12, 8);
  sum += kProtocolTcp;
  sum += static_cast<uint32_t>(l4_length >> 16) + static_cast<uint32_t>(l4_length & 0xFFFF);
  return sum;
}

inline uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

}  // namespace espgw::io::tcp_layout

// Read side: TSO segmentation of the TCP super-packets the kernel hands over, and
// checksum completion of packets it left with a partial one.
#include <algorithm>
#include <cstring>

#include "esp/checksum.h"
#include "io/offload.h"
#include "io/tcp_layout.h"
#include "util/byte_order.h"

namespace espgw::io {

namespace {

using namespace tcp_layout;
using esp::checksum_add;
using esp::checksum_finish;

// The largest frame the segmenter handles: a 64 KB IPv6 payload plus its header, rounded up.
constexpr size_t kScratchSize = 65536 + 256;

}  // namespace

TsoSegmenter::TsoSegmenter() : scratch_(new uint8_t[kScratchSize]) {}

OffloadResult TsoSegmenter::segment_frame(std::span<const uint8_t> frame, EmitFn emit) {
  VnetHeader header;
  if (!VnetHeader::parse(frame, header)) return OffloadResult::too_short;
  return segment(header, frame.subspan(VnetHeader::kSize), emit, nullptr);
}

OffloadResult TsoSegmenter::segment_frame(std::span<const uint8_t> frame, EmitFn emit,
                                          ClaimFn claim) {
  VnetHeader header;
  if (!VnetHeader::parse(frame, header)) return OffloadResult::too_short;
  return segment(header, frame.subspan(VnetHeader::kSize), emit, &claim);
}

OffloadResult TsoSegmenter::segment(const VnetHeader& header, std::span<const uint8_t> packet,
                                    EmitFn emit) {
  return segment(header, packet, emit, nullptr);
}

uint8_t* TsoSegmenter::place_for(size_t length, const ClaimFn* claim) {
  uint8_t* place = claim ? (*claim)(length) : nullptr;
  return place ? place : scratch_.get();
}

OffloadResult TsoSegmenter::segment(const VnetHeader& header, std::span<const uint8_t> packet,
                                    EmitFn emit, const ClaimFn* claim) {
  if (header.gso_type & VnetHeader::kGsoEcn) return OffloadResult::ecn;
  switch (header.gso_type) {
    case VnetHeader::kGsoNone:
      if (packet.empty()) return OffloadResult::too_short;  // a header and nothing after it
      if (header.flags & VnetHeader::kNeedsCsum)
        return complete_checksum(header, packet, emit, claim);
      return emit(packet) ? OffloadResult::ok : OffloadResult::stopped;
    case VnetHeader::kGsoTcpV4:
    case VnetHeader::kGsoTcpV6:
      if (header.gso_size == 0) return OffloadResult::zero_gso_size;
      return split_tcp(header, packet, emit, claim);
    default:
      return OffloadResult::bad_gso_type;
  }
}

// The kernel left the transport checksum field holding the pseudo-header sum and expects
// the device to sum from csum_start to the end and store the complement there (what
// skb_checksum_help does). That works for TCP and UDP alike, so no protocol parsing.
OffloadResult TsoSegmenter::complete_checksum(const VnetHeader& header,
                                              std::span<const uint8_t> packet, EmitFn emit,
                                              const ClaimFn* claim) {
  const size_t start = header.csum_start;
  const size_t field = start + header.csum_offset;
  if (field + 2 > packet.size()) return OffloadResult::bad_checksum_offsets;
  if (packet.size() > kScratchSize) return OffloadResult::bad_length;
  uint8_t* out = place_for(packet.size(), claim);
  std::memcpy(out, packet.data(), packet.size());
  uint16_t checksum = checksum_finish(checksum_add(0, out + start, packet.size() - start));
  // 0 and 0xFFFF are the same in one's complement; UDP reserves 0 for "no checksum".
  if (checksum == 0) checksum = 0xFFFF;
  store_be16(out + field, checksum);
  return emit({out, packet.size()}) ? OffloadResult::ok : OffloadResult::stopped;
}

OffloadResult TsoSegmenter::split_tcp(const VnetHeader& header, std::span<const uint8_t> packet,
                                      EmitFn emit, const ClaimFn* claim) {
  TcpLayout layout;
  const bool ipv6 = header.gso_type == VnetHeader::kGsoTcpV6;
  if (const OffloadResult r = parse_tcp_layout(packet, ipv6, layout); r != OffloadResult::ok)
    return r;
  // hdr_len is only a hint (the kernel reports the skb's linear length), but the checksum
  // offsets must point at the TCP checksum we are about to rewrite.
  if ((header.flags & VnetHeader::kNeedsCsum) &&
      (header.csum_start != layout.ip_header_length || header.csum_offset != kTcpChecksumOffset))
    return OffloadResult::bad_checksum_offsets;

  const uint8_t* in = packet.data();
  const size_t headers = layout.headers();
  const size_t ip_length = layout.ip_header_length;
  const size_t payload = packet.size() - headers;
  // Jumbo segments: as many whole gso_size payloads as fit max_packet_, at least one.
  const size_t mss =
      header.gso_size *
      std::max<size_t>(1, max_packet_ > headers ? (max_packet_ - headers) / header.gso_size : 1);
  const uint32_t first_sequence = load_be32(in + ip_length + 4);
  const uint16_t first_id = ipv6 ? 0 : load_be16(in + 4);
  const uint8_t flags = in[ip_length + kTcpFlagsOffset];
  // The addresses are the same in every segment: sum them once.
  const uint32_t address_sum = ipv6 ? checksum_add(0, in + 8, 32) : checksum_add(0, in + 12, 8);

  size_t offset = 0;
  for (size_t index = 0; offset < payload || index == 0; ++index) {
    const size_t chunk = std::min(mss, payload - offset);
    const bool last = offset + chunk == payload;
    const size_t total = headers + chunk;
    // Each segment is built in its own place (the caller's packet buffer, so nothing is
    // copied after), from the super-packet's headers with the fields below patched.
    uint8_t* out = place_for(total, claim);
    std::memcpy(out, in, headers);
    uint8_t* tcp = out + ip_length;
    if (ipv6) {
      store_be16(out + 4, static_cast<uint16_t>(total - kIpv6HeaderLength));
    } else {
      store_be16(out + 2, static_cast<uint16_t>(total));
      store_be16(out + 4, static_cast<uint16_t>(first_id + index));
      store_be16(out + 10, 0);
      store_be16(out + 10, esp::ipv4_header_checksum(out, ip_length));
    }
    store_be32(tcp + 4, first_sequence + static_cast<uint32_t>(offset));
    uint8_t segment_flags = flags;
    if (index != 0) segment_flags &= static_cast<uint8_t>(~kTcpCwr);  // cwnd reduced once
    if (!last) segment_flags &= static_cast<uint8_t>(~(kTcpFin | kTcpPsh));
    tcp[kTcpFlagsOffset] = segment_flags;
    std::memcpy(out + headers, in + headers + offset, chunk);

    store_be16(tcp + kTcpChecksumOffset, 0);
    const size_t l4_length = layout.tcp_header_length + chunk;
    uint32_t sum = address_sum + kProtocolTcp + static_cast<uint32_t>(l4_length);
    sum = checksum_add(sum, tcp, l4_length);
    store_be16(tcp + kTcpChecksumOffset, checksum_finish(sum));

    if (!emit({out, total})) return OffloadResult::stopped;
    offset += chunk;
  }
  return OffloadResult::ok;
}

}  // namespace espgw::io

#include "io/offload.h"

#include <algorithm>
#include <cstring>

#include "esp/checksum.h"
#include "util/byte_order.h"

namespace espgw::io {

namespace {

using esp::checksum_add;
using esp::checksum_finish;

constexpr uint8_t kProtocolTcp = 6;
constexpr size_t kIpv4MinHeader = 20;
constexpr size_t kIpv6Header = 40;
constexpr size_t kTcpMinHeader = 20;
constexpr size_t kTcpChecksumOffset = 16;
constexpr size_t kTcpFlagsOffset = 13;
constexpr size_t kMaxIpPacket = 65535;  // IPv4 total length; we keep IPv6 to the same bound

constexpr uint8_t kTcpFin = 0x01;
constexpr uint8_t kTcpSyn = 0x02;
constexpr uint8_t kTcpRst = 0x04;
constexpr uint8_t kTcpPsh = 0x08;
constexpr uint8_t kTcpUrg = 0x20;
constexpr uint8_t kTcpCwr = 0x80;
// A segment with any of these ends or changes the stream's state; the receiver must see it
// exactly as sent, so it never joins a super-packet.
constexpr uint8_t kTcpNoMerge = kTcpFin | kTcpSyn | kTcpRst | kTcpUrg | kTcpCwr;

// The largest frame the segmenter handles: a 64 KB IPv6 payload plus its header, rounded up.
constexpr size_t kScratchSize = 65536 + 256;

// Where the TCP header of an IPv4/IPv6 packet starts and how long it is.
struct TcpLayout {
  bool ipv6 = false;
  size_t ip_header_length = 0;
  size_t tcp_header_length = 0;
  size_t headers() const { return ip_header_length + tcp_header_length; }
};

// Checks the IP and TCP headers of a GSO packet against each other and the frame length.
OffloadResult parse_tcp_layout(std::span<const uint8_t> packet, bool expect_ipv6,
                               TcpLayout& layout) {
  const uint8_t* p = packet.data();
  const size_t size = packet.size();
  if (size < kIpv4MinHeader) return OffloadResult::too_short;
  const unsigned version = p[0] >> 4;
  if (version != (expect_ipv6 ? 6u : 4u)) return OffloadResult::bad_ip_header;
  layout.ipv6 = expect_ipv6;
  if (expect_ipv6) {
    if (size < kIpv6Header) return OffloadResult::too_short;
    // Walking extension headers would buy nothing here: Linux TCP does not add them.
    if (p[6] != kProtocolTcp) return OffloadResult::ipv6_extension_header;
    if (kIpv6Header + load_be16(p + 4) != size) return OffloadResult::bad_length;
    layout.ip_header_length = kIpv6Header;
  } else {
    layout.ip_header_length = size_t{p[0] & 0x0Fu} * 4;
    if (layout.ip_header_length < kIpv4MinHeader) return OffloadResult::bad_ip_header;
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
uint32_t tcp_pseudo_header_sum(const uint8_t* ip, bool ipv6, size_t l4_length) {
  uint32_t sum = ipv6 ? checksum_add(0, ip + 8, 32) : checksum_add(0, ip + 12, 8);
  sum += kProtocolTcp;
  sum += static_cast<uint32_t>(l4_length >> 16) + static_cast<uint32_t>(l4_length & 0xFFFF);
  return sum;
}

uint16_t fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

}  // namespace

// struct virtio_net_hdr: u8 flags, u8 gso_type, then four u16 in host order at 2, 4, 6, 8.
// (linux/virtio_net.h itself cannot be included from C++: a member there is named `class`.)
bool VnetHeader::parse(std::span<const uint8_t> frame, VnetHeader& header) {
  if (frame.size() < kSize) return false;
  const uint8_t* p = frame.data();
  header.flags = p[0];
  header.gso_type = p[1];
  std::memcpy(&header.hdr_len, p + 2, 2);
  std::memcpy(&header.gso_size, p + 4, 2);
  std::memcpy(&header.csum_start, p + 6, 2);
  std::memcpy(&header.csum_offset, p + 8, 2);
  return true;
}

void VnetHeader::write(uint8_t* out) const {
  out[0] = flags;
  out[1] = gso_type;
  std::memcpy(out + 2, &hdr_len, 2);
  std::memcpy(out + 4, &gso_size, 2);
  std::memcpy(out + 6, &csum_start, 2);
  std::memcpy(out + 8, &csum_offset, 2);
}

std::string_view offload_result_name(OffloadResult result) {
  switch (result) {
    case OffloadResult::ok:
      return "ok";
    case OffloadResult::stopped:
      return "stopped";
    case OffloadResult::too_short:
      return "too_short";
    case OffloadResult::bad_gso_type:
      return "bad_gso_type";
    case OffloadResult::ecn:
      return "ecn";
    case OffloadResult::zero_gso_size:
      return "zero_gso_size";
    case OffloadResult::bad_ip_header:
      return "bad_ip_header";
    case OffloadResult::ipv6_extension_header:
      return "ipv6_extension_header";
    case OffloadResult::bad_length:
      return "bad_length";
    case OffloadResult::bad_checksum_offsets:
      return "bad_checksum_offsets";
    case OffloadResult::count_:
      break;
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------
// Read side: segmentation

TsoSegmenter::TsoSegmenter() : scratch_(new uint8_t[kScratchSize]) {}

OffloadResult TsoSegmenter::segment_frame(std::span<const uint8_t> frame, EmitFn emit) {
  VnetHeader header;
  if (!VnetHeader::parse(frame, header)) return OffloadResult::too_short;
  return segment(header, frame.subspan(VnetHeader::kSize), emit);
}

OffloadResult TsoSegmenter::segment(const VnetHeader& header, std::span<const uint8_t> packet,
                                    EmitFn emit) {
  if (header.gso_type & VnetHeader::kGsoEcn) return OffloadResult::ecn;
  switch (header.gso_type) {
    case VnetHeader::kGsoNone:
      if (packet.empty()) return OffloadResult::too_short;  // a header and nothing after it
      if (header.flags & VnetHeader::kNeedsCsum) return complete_checksum(header, packet, emit);
      return emit(packet) ? OffloadResult::ok : OffloadResult::stopped;
    case VnetHeader::kGsoTcpV4:
    case VnetHeader::kGsoTcpV6:
      if (header.gso_size == 0) return OffloadResult::zero_gso_size;
      return split_tcp(header, packet, emit);
    default:
      return OffloadResult::bad_gso_type;
  }
}

// The kernel left the transport checksum field holding the pseudo-header sum and expects
// the device to sum from csum_start to the end and store the complement there (what
// skb_checksum_help does). That works for TCP and UDP alike, so no protocol parsing.
OffloadResult TsoSegmenter::complete_checksum(const VnetHeader& header,
                                              std::span<const uint8_t> packet, EmitFn emit) {
  const size_t start = header.csum_start;
  const size_t field = start + header.csum_offset;
  if (field + 2 > packet.size()) return OffloadResult::bad_checksum_offsets;
  if (packet.size() > kScratchSize) return OffloadResult::bad_length;
  uint8_t* out = scratch_.get();
  std::memcpy(out, packet.data(), packet.size());
  uint16_t checksum = checksum_finish(checksum_add(0, out + start, packet.size() - start));
  // 0 and 0xFFFF are the same in one's complement; UDP reserves 0 for "no checksum".
  if (checksum == 0) checksum = 0xFFFF;
  store_be16(out + field, checksum);
  return emit({out, packet.size()}) ? OffloadResult::ok : OffloadResult::stopped;
}

OffloadResult TsoSegmenter::split_tcp(const VnetHeader& header, std::span<const uint8_t> packet,
                                      EmitFn emit) {
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

  uint8_t* out = scratch_.get();
  std::memcpy(out, in, headers);  // later segments only patch fields of this copy
  uint8_t* tcp = out + ip_length;
  size_t offset = 0;
  for (size_t index = 0; offset < payload || index == 0; ++index) {
    const size_t chunk = std::min(mss, payload - offset);
    const bool last = offset + chunk == payload;
    const size_t total = headers + chunk;
    if (ipv6) {
      store_be16(out + 4, static_cast<uint16_t>(total - kIpv6Header));
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

// ---------------------------------------------------------------------------------------
// Write side: coalescing

namespace {

// Merge candidates: IPv4/IPv6 TCP, not fragmented, lengths consistent with the buffer.
bool parse_tcp_candidate(std::span<const uint8_t> packet, TcpLayout& layout) {
  if (packet.empty() || packet.size() > kMaxIpPacket) return false;
  const unsigned version = packet[0] >> 4;
  if (version != 4 && version != 6) return false;
  return parse_tcp_layout(packet, version == 6, layout) == OffloadResult::ok;
}

bool same_flow(const uint8_t* a, const uint8_t* b, const TcpLayout& layout) {
  const bool addresses_equal =
      layout.ipv6 ? std::memcmp(a + 8, b + 8, 32) == 0 : std::memcmp(a + 12, b + 12, 8) == 0;
  return addresses_equal &&
         std::memcmp(a + layout.ip_header_length, b + layout.ip_header_length, 4) == 0;
}

bool checksums_valid(std::span<const uint8_t> packet, const TcpLayout& layout) {
  const uint8_t* p = packet.data();
  if (!layout.ipv6 && esp::ipv4_header_checksum(p, layout.ip_header_length) != 0) return false;
  const size_t l4_length = packet.size() - layout.ip_header_length;
  uint32_t sum = tcp_pseudo_header_sum(p, layout.ipv6, l4_length);
  sum = checksum_add(sum, p + layout.ip_header_length, l4_length);
  return checksum_finish(sum) == 0;
}

}  // namespace

TcpCoalescer::TcpCoalescer(size_t max_flows) : max_flows_(std::max<size_t>(max_flows, 1)) {
  open_.reserve(max_flows_);
}

TcpCoalescer::Item& TcpCoalescer::next_item() {
  if (used_ == items_.size()) items_.emplace_back();
  Item& item = items_[used_++];
  item.segments = 0;
  return item;
}

void TcpCoalescer::add(std::span<const uint8_t> packet) {
  ++stats_.packets_in;
  TcpLayout layout;
  const bool tcp = parse_tcp_candidate(packet, layout);
  // Only a segment with data, no state-changing flags and intact checksums may merge.
  bool mergeable = false;
  bool can_grow = false;
  // Too large for the LAN: it must leave as a GSO frame, whatever its flags (the kernel's
  // segmentation puts FIN and PSH on the last segment only, CWR on the first only).
  bool oversize = false;
  if (tcp) {
    const uint8_t flags = packet[layout.ip_header_length + kTcpFlagsOffset];
    const bool has_data = packet.size() > layout.headers();
    mergeable = has_data && (flags & kTcpNoMerge) == 0;
    oversize = has_data && max_packet_ != 0 && packet.size() > max_packet_;
    if ((mergeable || oversize) && !checksums_valid(packet, layout)) {
      ++stats_.bad_checksum;
      mergeable = oversize = false;
    }
    can_grow = mergeable && (flags & kTcpPsh) == 0;

    // Any packet of an open flow either joins it or closes it, so nothing of the flow
    // (a pure ACK, a FIN) is delivered ahead of data sent before it.
    for (auto it = open_.begin(); it != open_.end(); ++it) {
      Item& item = items_[*it];
      const uint8_t* first = item.frame.data() + VnetHeader::kSize;
      if (item.ipv6 != layout.ipv6 || !same_flow(first, packet.data(), layout)) continue;
      if (mergeable && try_merge(item, packet, layout.ip_header_length, layout.tcp_header_length)) {
        ++stats_.segments_merged;
        const size_t payload = packet.size() - layout.headers();
        const bool full = item.frame.size() - VnetHeader::kSize + item.gso_size > kMaxIpPacket;
        if (payload < item.gso_size || !can_grow || full) open_.erase(it);
        return;
      }
      open_.erase(it);
      break;
    }
  }

  Item& item = next_item();
  item.frame.assign(VnetHeader::kSize, 0);  // a plain packet unless something merges
  item.frame.insert(item.frame.end(), packet.begin(), packet.end());
  if (!can_grow && !oversize) return;
  item.ipv6 = layout.ipv6;
  item.ip_header_length = static_cast<uint8_t>(layout.ip_header_length);
  item.tcp_header_length = static_cast<uint8_t>(layout.tcp_header_length);
  item.gso_size = static_cast<uint16_t>(packet.size() - layout.headers());
  item.segments = 1;
  item.next_sequence = load_be32(packet.data() + layout.ip_header_length + 4) + item.gso_size;
  if (!can_grow) return;
  if (packet.size() + item.gso_size > kMaxIpPacket) return;    // a second segment would not fit
  if (open_.size() == max_flows_) open_.erase(open_.begin());  // the oldest stops growing
  open_.push_back(used_ - 1);
}

bool TcpCoalescer::try_merge(Item& item, std::span<const uint8_t> packet, size_t ip_header_length,
                             size_t tcp_header_length) const {
  const uint8_t* p = packet.data();
  uint8_t* first = item.frame.data() + VnetHeader::kSize;
  if (ip_header_length != item.ip_header_length || tcp_header_length != item.tcp_header_length)
    return false;
  const size_t payload = packet.size() - ip_header_length - tcp_header_length;
  if (payload > item.gso_size) return false;
  if (item.frame.size() - VnetHeader::kSize + payload > kMaxIpPacket) return false;

  // IP: everything the kernel copies from the super-packet into each segment must match.
  if (item.ipv6) {
    if (std::memcmp(first, p, 4) != 0 || first[7] != p[7]) return false;  // TC, label, hops
  } else {
    if (std::memcmp(first, p, 2) != 0 || std::memcmp(first + 6, p + 6, 3) != 0) return false;
    if (std::memcmp(first + kIpv4MinHeader, p + kIpv4MinHeader,
                    ip_header_length - kIpv4MinHeader) != 0)
      return false;
    // Segmentation numbers ids first_id, first_id + 1, ...: only merge what it recreates.
    if (load_be16(p + 4) != static_cast<uint16_t>(load_be16(first + 4) + item.segments))
      return false;
  }

  // TCP: next in sequence, same ACK, data offset, flags (PSH may end it), window, urgent
  // pointer and options.
  const uint8_t* a = first + ip_header_length;
  const uint8_t* b = p + ip_header_length;
  if (load_be32(b + 4) != item.next_sequence) return false;
  if (std::memcmp(a + 8, b + 8, 5) != 0) return false;  // ACK number and data offset
  if ((a[kTcpFlagsOffset] | kTcpPsh) != (b[kTcpFlagsOffset] | kTcpPsh)) return false;
  if (std::memcmp(a + 14, b + 14, 2) != 0 || std::memcmp(a + 18, b + 18, 2) != 0) return false;
  if (std::memcmp(a + kTcpMinHeader, b + kTcpMinHeader, tcp_header_length - kTcpMinHeader) != 0)
    return false;

  const uint8_t* data = p + ip_header_length + tcp_header_length;
  item.frame.insert(item.frame.end(), data, data + payload);
  first = item.frame.data() + VnetHeader::kSize;  // the insert may have moved it
  first[ip_header_length + kTcpFlagsOffset] |= p[ip_header_length + kTcpFlagsOffset] & kTcpPsh;
  item.next_sequence += static_cast<uint32_t>(payload);
  ++item.segments;
  return true;
}

// Turns a merged item into a GSO frame. The TCP checksum follows the CHECKSUM_PARTIAL
// convention: NEEDS_CSUM with csum_start/csum_offset at the TCP checksum, which holds the
// pseudo-header sum over the whole super-packet's TCP length. virtio_net_hdr_to_skb makes
// that a CHECKSUM_PARTIAL skb: a local socket trusts it without summing 64 KB, and on
// forwarding the GSO code adjusts the pseudo sum per segment and completes each checksum.
void TcpCoalescer::finish(Item& item) {
  const size_t size = item.frame.size() - VnetHeader::kSize;
  const bool oversize = item.segments != 0 && max_packet_ != 0 && size > max_packet_;
  if (item.segments < 2 && !oversize) return;  // unchanged packet, zero vnet header
  uint8_t* p = item.frame.data() + VnetHeader::kSize;
  const size_t ip_length = item.ip_header_length;
  const size_t headers = ip_length + item.tcp_header_length;
  uint16_t gso_size = item.gso_size;
  if (oversize) {
    // Segments that fit the LAN; a limit below the headers plus 8 bytes is no LAN MTU.
    gso_size = static_cast<uint16_t>(
        std::min<size_t>(gso_size, max_packet_ > headers + 8 ? max_packet_ - headers : 8));
    // A run of segments that already fit keeps its size: only a cut that shrinks counts.
    if (gso_size < item.gso_size) ++stats_.resegmented;
  }
  if (item.ipv6) {
    store_be16(p + 4, static_cast<uint16_t>(size - kIpv6Header));
  } else {
    store_be16(p + 2, static_cast<uint16_t>(size));
    store_be16(p + 10, 0);
    store_be16(p + 10, esp::ipv4_header_checksum(p, ip_length));
  }
  store_be16(p + ip_length + kTcpChecksumOffset,
             fold(tcp_pseudo_header_sum(p, item.ipv6, size - ip_length)));

  VnetHeader header;
  header.flags = VnetHeader::kNeedsCsum;
  header.gso_type = item.ipv6 ? VnetHeader::kGsoTcpV6 : VnetHeader::kGsoTcpV4;
  header.hdr_len = static_cast<uint16_t>(headers);
  header.gso_size = gso_size;
  header.csum_start = static_cast<uint16_t>(ip_length);
  header.csum_offset = kTcpChecksumOffset;
  header.write(item.frame.data());
}

bool TcpCoalescer::flush(EmitFn emit) {
  bool completed = true;
  for (size_t i = 0; i < used_ && completed; ++i) {
    finish(items_[i]);
    completed = emit(items_[i].frame);
    if (completed) ++stats_.frames_out;
  }
  used_ = 0;
  open_.clear();
  return completed;
}

}  // namespace espgw::io

// Write side: TCP coalescing (GRO) of decrypted packets into super-packets the kernel
// segments again.
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
  item.pieces.clear();
  return item;
}

std::span<const uint8_t> TcpCoalescer::keep_copy(std::span<const uint8_t> packet) {
  if (copies_used_ == copies_.size()) copies_.emplace_back();
  std::vector<uint8_t>& copy = copies_[copies_used_++];
  copy.assign(packet.begin(), packet.end());
  return copy;
}

void TcpCoalescer::add(std::span<const uint8_t> packet) {
  add_borrowed(keep_copy(packet));
}

void TcpCoalescer::add_borrowed(std::span<const uint8_t> packet) {
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
      if (item.ipv6 != layout.ipv6 || !same_flow(item.first_headers(), packet.data(), layout))
        continue;
      if (mergeable && try_merge(item, packet, layout.ip_header_length, layout.tcp_header_length)) {
        ++stats_.segments_merged;
        const size_t payload = packet.size() - layout.headers();
        const bool full = item.packet_length + item.gso_size > kMaxIpPacket ||
                          item.pieces.size() == kMaxFramePieces;
        if (payload < item.gso_size || !can_grow || full) open_.erase(it);
        return;
      }
      open_.erase(it);
      break;
    }
  }

  // A plain packet (zero vnet header) unless something merges; a frame that may carry
  // several segments keeps its first packet's headers in `head`, where finish() edits them.
  Item& item = next_item();
  std::memset(item.head.data(), 0, VnetHeader::kSize);
  const size_t copied = can_grow || oversize ? layout.headers() : 0;
  std::memcpy(item.head.data() + VnetHeader::kSize, packet.data(), copied);
  item.head_length = static_cast<uint8_t>(VnetHeader::kSize + copied);
  // The head's address is filled in at flush: items_ may still move while the batch grows.
  item.pieces.push_back({nullptr, item.head_length});
  if (packet.size() > copied)
    item.pieces.push_back({const_cast<uint8_t*>(packet.data() + copied), packet.size() - copied});
  item.packet_length = packet.size();
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
  uint8_t* first = item.first_headers();
  if (ip_header_length != item.ip_header_length || tcp_header_length != item.tcp_header_length)
    return false;
  const size_t payload = packet.size() - ip_header_length - tcp_header_length;
  if (payload > item.gso_size) return false;
  if (item.packet_length + payload > kMaxIpPacket) return false;
  if (item.pieces.size() == kMaxFramePieces) return false;

  // IP: everything the kernel copies from the super-packet into each segment must match.
  if (item.ipv6) {
    if (std::memcmp(first, p, 4) != 0 || first[7] != p[7]) return false;  // TC, label, hops
  } else {
    if (std::memcmp(first, p, 2) != 0 || std::memcmp(first + 6, p + 6, 3) != 0) return false;
    if (std::memcmp(first + kIpv4HeaderLength, p + kIpv4HeaderLength,
                    ip_header_length - kIpv4HeaderLength) != 0)
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

  if (payload != 0)
    item.pieces.push_back(
        {const_cast<uint8_t*>(p + ip_header_length + tcp_header_length), payload});
  first[ip_header_length + kTcpFlagsOffset] |= p[ip_header_length + kTcpFlagsOffset] & kTcpPsh;
  item.packet_length += payload;
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
  const size_t size = item.packet_length;
  const bool oversize = item.segments != 0 && max_packet_ != 0 && size > max_packet_;
  if (item.segments < 2 && !oversize) return;  // unchanged packet, zero vnet header
  uint8_t* p = item.first_headers();
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
    store_be16(p + 4, static_cast<uint16_t>(size - kIpv6HeaderLength));
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
  header.write(item.head.data());
}

bool TcpCoalescer::flush_pieces(EmitPiecesFn emit) {
  bool completed = true;
  for (size_t i = 0; i < used_ && completed; ++i) {
    Item& item = items_[i];
    finish(item);
    item.pieces.front().iov_base = item.head.data();
    completed = emit(item.pieces);
    if (completed) ++stats_.frames_out;
  }
  used_ = 0;
  open_.clear();
  copies_used_ = 0;
  return completed;
}

bool TcpCoalescer::flush(EmitFn emit) {
  return flush_pieces([&](std::span<const iovec> pieces) {
    gathered_.clear();
    for (const iovec& piece : pieces) {
      const auto* bytes = static_cast<const uint8_t*>(piece.iov_base);
      gathered_.insert(gathered_.end(), bytes, bytes + piece.iov_len);
    }
    return emit(gathered_);
  });
}

}  // namespace espgw::io

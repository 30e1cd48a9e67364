// The TUN offload code on arbitrary input. TsoSegmenter gets a frame as read from the TUN
// (a vnet header, then a packet whose contents a LAN host chose); TcpCoalescer gets a batch
// of packets as decrypted from a peer. Both run with and without a size limit (jumbo
// segments on the way in, the LAN's MTU on the way out). Beyond not crashing, it checks:
// - every packet the segmenter emits is non-empty and within the 64 KB IP limit;
// - every frame the coalescer writes has a vnet header, and a GSO frame is one the
//   segmenter, standing in for the kernel's GSO, cuts without complaint into segments
//   that each fit the LAN's MTU when one is set.
//
// Input: byte 0 selects the mode (bit 0: a limit, bit 1: segmenter instead of coalescer,
// bit 2: give the coalescer's packets valid IPv4 header and TCP checksums first, so that
// they can merge, which random checksums never allow), bytes 1-2 the limit; then the
// frame, or packets each behind a 2-byte length. tests/fuzz/seeds/fuzz_offload holds a run
// of segments of one flow to start from.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include <vector>

#include "esp/checksum.h"
#include "io/offload.h"
#include "util/byte_order.h"

using namespace espgw;

namespace {

constexpr size_t kMaxIpPacket = 65535;

void segment(std::span<const uint8_t> frame, size_t limit) {
  io::TsoSegmenter segmenter;
  segmenter.set_max_packet(limit);
  segmenter.segment_frame(frame, [](std::span<const uint8_t> packet) {
    if (packet.empty() || packet.size() > kMaxIpPacket) abort();
    return true;
  });
}

// Writes the checksums a sender would have: IPv4 header, and TCP over IPv4 or IPv6 when
// the lengths in the header lie within the packet. Anything else is left as it is.
void fix_checksums(std::vector<uint8_t>& p) {
  if (p.empty()) return;
  size_t ip_length = 0, total = 0;
  uint32_t pseudo = 0;
  if (p[0] >> 4 == 4 && p.size() >= 20) {
    ip_length = (p[0] & 15u) * 4;
    total = load_be16(&p[2]);
    if (ip_length < 20 || ip_length > total || total > p.size()) return;
    store_be16(&p[10], 0);
    store_be16(&p[10], esp::ipv4_header_checksum(p.data(), ip_length));
    if (p[9] != 6) return;
    pseudo = esp::checksum_add(0, &p[12], 8);
  } else if (p[0] >> 4 == 6 && p.size() >= 40) {
    ip_length = 40;
    total = 40 + load_be16(&p[4]);
    if (p[6] != 6 || total > p.size()) return;
    pseudo = esp::checksum_add(0, &p[8], 32);
  } else {
    return;
  }
  const size_t tcp_length = total - ip_length;
  if (tcp_length < 20) return;
  store_be16(&p[ip_length + 16], 0);
  uint32_t sum = pseudo + 6 + static_cast<uint32_t>(tcp_length);
  sum = esp::checksum_add(sum, &p[ip_length], tcp_length);
  store_be16(&p[ip_length + 16], esp::checksum_finish(sum));
}

void coalesce(std::span<const uint8_t> input, size_t limit, bool valid_checksums) {
  std::vector<std::vector<uint8_t>> packets;
  while (input.size() >= 2) {
    const size_t length = std::min<size_t>(load_be16(input.data()) % 9200, input.size() - 2);
    std::vector<uint8_t>& packet =
        packets.emplace_back(input.begin() + 2, input.begin() + 2 + static_cast<long>(length));
    if (valid_checksums) fix_checksums(packet);
    input = input.subspan(2 + length);
  }
  // The TUN writer's path (frames made of pieces of the packets themselves) must give the
  // copying path's frames exactly.
  io::TcpCoalescer coalescer, borrowing;
  coalescer.set_max_packet(limit);
  borrowing.set_max_packet(limit);
  for (const auto& packet : packets) {
    coalescer.add(packet);
    borrowing.add_borrowed(packet);
  }
  std::vector<std::vector<uint8_t>> borrowed_frames;
  borrowing.flush_pieces([&](std::span<const iovec> pieces) {
    if (pieces.size() > io::TcpCoalescer::kMaxFramePieces) abort();
    auto& frame = borrowed_frames.emplace_back();
    for (const iovec& piece : pieces) {
      const auto* bytes = static_cast<const uint8_t*>(piece.iov_base);
      frame.insert(frame.end(), bytes, bytes + piece.iov_len);
    }
    return true;
  });
  size_t frame_index = 0;
  io::TsoSegmenter kernel_gso;
  coalescer.flush([&](std::span<const uint8_t> frame) {
    if (frame_index >= borrowed_frames.size() ||
        !std::equal(frame.begin(), frame.end(), borrowed_frames[frame_index].begin(),
                    borrowed_frames[frame_index].end()))
      abort();
    ++frame_index;
    io::VnetHeader header;
    if (!io::VnetHeader::parse(frame, header)) abort();
    if (header.gso_type == io::VnetHeader::kGsoNone) return true;  // the packet as added
    const io::OffloadResult result =
        kernel_gso.segment_frame(frame, [&](std::span<const uint8_t> packet) {
          if (limit != 0 && packet.size() > limit) abort();
          return true;
        });
    if (result != io::OffloadResult::ok) abort();
    return true;
  });
  if (frame_index != borrowed_frames.size()) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint8_t mode = data[0];
  const size_t limit = (mode & 1) ? 576 + load_be16(data + 1) % 8500 : 0;
  const std::span<const uint8_t> rest(data + 3, size - 3);
  if (mode & 2)
    segment(rest, limit);
  else
    coalesce(rest, limit, mode & 4);
  return 0;
}

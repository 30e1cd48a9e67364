// Jumbo segments: a WAN with a larger MTU than the LANs carries fewer, larger packets, and
// the receiving side segments again what its LAN cannot take.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "io/offload.h"
#include "unit/offload_test_support.h"

namespace espgw::io {
namespace {

TEST(TsoSegmenter, JumboSegmentsCarryWholeMultiplesOfGsoSize) {
  for (bool v6 : {false, true}) {
    TcpSpec s;
    s.ipv6 = v6;
    s.flags = kAck | kPsh | kCwr;
    s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};  // timestamps, as Linux sends
    const Bytes payload = pattern(60000);
    TsoSegmenter segmenter;
    segmenter.set_max_packet(8935);  // a 9000-byte WAN minus ESP in UDP
    const size_t headers = (v6 ? 40 : 20) + 32;
    const size_t per_packet = (8935 - headers) / 1448 * 1448;  // 6 segments' worth
    ASSERT_EQ(per_packet, 8688u);
    OffloadResult result;
    const auto packets = segment_all(segmenter, kernel_frame(s, payload, 1448), &result);
    EXPECT_EQ(result, OffloadResult::ok);
    check_segments(s, payload, per_packet, packets);
    for (const Bytes& p : packets) EXPECT_LE(p.size(), 8935u);
  }
}

TEST(TsoSegmenter, JumboSegmentsNeverGoBelowGsoSize) {
  TcpSpec s;
  const Bytes payload = pattern(5000);
  TsoSegmenter segmenter;
  segmenter.set_max_packet(1000);  // smaller than one segment: cut as the sender would
  check_segments(s, payload, 1448, segment_all(segmenter, kernel_frame(s, payload, 1448)));
}

// The receiving gateway's LAN takes 1500 bytes: a packet or run larger than that must
// leave as a GSO frame whose segments fit, carrying the same bytes in order.
void expect_fits_after_segmentation(const std::vector<Bytes>& frames, size_t max_packet,
                                    const Bytes& payload) {
  TsoSegmenter kernel_gso;  // does what the kernel's GSO does with such a frame
  Bytes joined;
  for (const Bytes& frame : frames) {
    OffloadResult result;
    for (const Bytes& p : segment_all(kernel_gso, frame, &result)) {
      EXPECT_LE(p.size(), max_packet);
      EXPECT_TRUE(l4_checksum_ok(p));
      const Bytes d = payload_of(p);
      joined.insert(joined.end(), d.begin(), d.end());
    }
    EXPECT_EQ(result, OffloadResult::ok);
  }
  EXPECT_EQ(joined, payload);
}

TEST(GroCoalescer, PacketsLargerThanTheLanLeaveAsGsoFramesThatFit) {
  for (bool v6 : {false, true}) {
    TcpSpec s;
    s.ipv6 = v6;
    s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};
    const size_t headers = (v6 ? 40 : 20) + 32;
    // A super-packet cut in jumbo segments by the sending gateway: merged here, then
    // segmented at the LAN's size rather than at the jumbo size.
    const Bytes frame = kernel_frame(s, pattern(50000), 1448);
    TsoSegmenter sending_gateway;
    sending_gateway.set_max_packet(8935);
    const auto jumbo = segment_all(sending_gateway, frame);
    ASSERT_EQ(jumbo.size(), 6u);
    TcpCoalescer coalescer;
    coalescer.set_max_packet(1500);
    const auto frames = coalesce_all(coalescer, jumbo);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(header_of(frames[0]).gso_size, 1500 - headers);
    expect_fits_after_segmentation(frames, 1500, payload_of(packet_of(frame)));

    // One packet alone, with flags that never merge: a GSO frame all the same.
    for (uint8_t flags : {uint8_t(kAck | kPsh), uint8_t(kAck | kFin), uint8_t(kAck | kCwr)}) {
      TcpSpec single = s;
      single.flags = flags;
      const Bytes payload = pattern(8000);
      TcpCoalescer lone;
      lone.set_max_packet(1500);
      const auto out = coalesce_all(lone, {build_tcp(single, payload)});
      ASSERT_EQ(out.size(), 1u);
      const VnetHeader h = header_of(out[0]);
      EXPECT_EQ(h.gso_type, v6 ? VnetHeader::kGsoTcpV6 : VnetHeader::kGsoTcpV4);
      EXPECT_EQ(h.gso_size, 1500 - headers);
      EXPECT_EQ(lone.stats().resegmented, 1u);
      expect_fits_after_segmentation(out, 1500, payload);
    }
  }
}

// Segments that each fit the LAN, merged as always: the frame is larger than the LAN, but
// its segments keep their size, and nothing counts as segmented again.
TEST(GroCoalescer, RunsOfSegmentsThatFitKeepTheirSize) {
  TcpSpec s;
  const auto segments = flow_segments(s, {1448, 1448, 1448, 700}, kAck | kPsh);
  TcpCoalescer coalescer;
  coalescer.set_max_packet(1500);
  const auto frames = coalesce_all(coalescer, segments);
  ASSERT_EQ(frames.size(), 1u);
  check_super_packet(frames[0], segments);
  EXPECT_EQ(coalescer.stats().resegmented, 0u);
}

TEST(GroCoalescer, PacketsThatFitTheLanOrAreCorruptAreLeftAlone) {
  TcpCoalescer coalescer;
  coalescer.set_max_packet(1500);
  const Bytes fits = build_tcp(TcpSpec{}, pattern(1400));
  Bytes corrupt = build_tcp(TcpSpec{}, pattern(8000));
  corrupt.back() ^= 1;  // segmenting it would write a checksum that hides this
  const auto frames = coalesce_all(coalescer, {fits, corrupt});
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(header_of(frames[0]).gso_type, VnetHeader::kGsoNone);
  EXPECT_EQ(packet_of(frames[0]), fits);
  EXPECT_EQ(header_of(frames[1]).gso_type, VnetHeader::kGsoNone);
  EXPECT_EQ(packet_of(frames[1]), corrupt);
  EXPECT_EQ(coalescer.stats().resegmented, 0u);
  EXPECT_EQ(coalescer.stats().bad_checksum, 1u);
}

}  // namespace
}  // namespace espgw::io

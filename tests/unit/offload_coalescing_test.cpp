// TUN offloads, write side (io/offload.h): TCP coalescing (GRO), and its round trip with
// segmentation.
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

TEST(GroCoalescer, MergesInOrderIpv4Segments) {
  TcpSpec s;
  const auto segments = flow_segments(s, {1400, 1400, 1400, 1400, 1400, 500}, kAck | kPsh);
  TcpCoalescer coalescer;
  const auto frames = coalesce_all(coalescer, segments);
  ASSERT_EQ(frames.size(), 1u);
  check_super_packet(frames[0], segments);
  EXPECT_EQ(coalescer.stats().segments_merged, 5u);
  EXPECT_EQ(coalescer.pending_frames(), 0u);
}

TEST(GroCoalescer, MergesInOrderIpv6SegmentsWithOptions) {
  TcpSpec s;
  s.ipv6 = true;
  s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};
  const auto segments = flow_segments(s, {1388, 1388, 1388}, kAck);
  TcpCoalescer coalescer;
  const auto frames = coalesce_all(coalescer, segments);
  ASSERT_EQ(frames.size(), 1u);
  check_super_packet(frames[0], segments);
}

TEST(GroCoalescer, SingleSegmentIsPassedThroughUnchanged) {
  const Bytes p = build_tcp(TcpSpec{}, pattern(1400));
  TcpCoalescer coalescer;
  const auto frames = coalesce_all(coalescer, {p});
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0], [&] {
    Bytes f(VnetHeader::kSize, 0);
    f.insert(f.end(), p.begin(), p.end());
    return f;
  }());
}

// Expects `frames` to be exactly `groups` (each a run of input packets, merged if longer
// than one), in that order.
void expect_groups(const std::vector<Bytes>& frames,
                   const std::vector<std::vector<Bytes>>& groups) {
  ASSERT_EQ(frames.size(), groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    SCOPED_TRACE("frame " + std::to_string(i));
    if (groups[i].size() == 1) {
      EXPECT_EQ(header_of(frames[i]).gso_type, VnetHeader::kGsoNone);
      EXPECT_EQ(header_of(frames[i]).flags, 0);
      EXPECT_EQ(packet_of(frames[i]), groups[i][0]);
    } else {
      check_super_packet(frames[i], groups[i]);
    }
  }
}

TEST(GroCoalescer, DoesNotMergeAcrossASequenceGap) {
  auto seg = flow_segments(TcpSpec{}, {1000, 1000, 1000, 1000}, kAck);
  TcpCoalescer coalescer;
  // 0 1 3 2: 3 does not follow 1 and ends that run; 2 cannot join 3 either.
  const auto frames = coalesce_all(coalescer, {seg[0], seg[1], seg[3], seg[2]});
  expect_groups(frames, {{seg[0], seg[1]}, {seg[3]}, {seg[2]}});
}

TEST(GroCoalescer, InterleavedFlowsMergeSeparately) {
  TcpSpec a, b;
  b.source_port = 40001;
  TcpSpec c = a;
  c.ipv6 = true;
  const auto sa = flow_segments(a, {1200, 1200, 1200}, kAck);
  const auto sb = flow_segments(b, {800, 800}, kAck | kPsh);
  const auto sc = flow_segments(c, {1000, 1000}, kAck);
  const Bytes udp = udp4(pattern(50));
  TcpCoalescer coalescer;
  const auto frames =
      coalesce_all(coalescer, {sa[0], sb[0], udp, sc[0], sa[1], sb[1], sc[1], sa[2]});
  expect_groups(frames, {{sa[0], sa[1], sa[2]}, {sb[0], sb[1]}, {udp}, {sc[0], sc[1]}});
}

TEST(GroCoalescer, FlagsAndHeaderDifferencesPreventMerging) {
  struct Case {
    std::string name;
    void (*change)(TcpSpec&);
  };
  const std::vector<Case> cases = {
      {"fin", [](TcpSpec& s) { s.flags = kAck | kFin; }},
      {"syn", [](TcpSpec& s) { s.flags = kAck | kSyn; }},
      {"rst", [](TcpSpec& s) { s.flags = kAck | kRst; }},
      {"urg", [](TcpSpec& s) { s.flags = kAck | kUrg; }},
      {"cwr", [](TcpSpec& s) { s.flags = kAck | kCwr; }},
      {"ece", [](TcpSpec& s) { s.flags = kAck | kEce; }},
      {"ack number", [](TcpSpec& s) { ++s.ack; }},
      {"window", [](TcpSpec& s) { ++s.window; }},
      {"tos", [](TcpSpec& s) { s.tos = 0x02; }},
      {"ttl", [](TcpSpec& s) { --s.ttl; }},
      {"df", [](TcpSpec& s) { s.dont_fragment = false; }},
      {"ip id", [](TcpSpec& s) { s.id = static_cast<uint16_t>(s.id + 5); }},
      {"ip options",
       [](TcpSpec& s) {
         s.ip_options = {1, 1, 1, 1};
       }},
      {"tcp options",
       [](TcpSpec& s) {
         s.tcp_options = {1, 1, 1, 1};
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TcpSpec s;
    auto seg = flow_segments(s, {1000, 1000}, kAck);
    TcpSpec second = s;
    second.seq += 1000;
    ++second.id;
    c.change(second);
    seg[1] = build_tcp(second, pattern(1000));
    TcpCoalescer coalescer;
    expect_groups(coalesce_all(coalescer, seg), {{seg[0]}, {seg[1]}});
  }
}

TEST(GroCoalescer, BiggerOrLaterSegmentsEndTheRun) {
  // A bigger segment cannot follow; after a short one or a PSH nothing may follow.
  auto seg = flow_segments(TcpSpec{}, {1000, 1200}, kAck);
  TcpCoalescer coalescer;
  expect_groups(coalesce_all(coalescer, seg), {{seg[0]}, {seg[1]}});

  seg = flow_segments(TcpSpec{}, {1000, 600, 600}, kAck);
  expect_groups(coalesce_all(coalescer, seg), {{seg[0], seg[1]}, {seg[2]}});

  TcpSpec s;
  auto pushed = flow_segments(s, {1000, 1000}, kAck | kPsh);
  s.seq += 2000;
  s.id = static_cast<uint16_t>(s.id + 2);
  const Bytes after = build_tcp(s, pattern(1000));
  expect_groups(coalesce_all(coalescer, {pushed[0], pushed[1], after}),
                {{pushed[0], pushed[1]}, {after}});
}

TEST(GroCoalescer, PureAckOfTheFlowKeepsItsPlace) {
  TcpSpec s;
  const auto seg = flow_segments(s, {1000, 1000, 1000}, kAck);
  TcpSpec ack_spec = s;
  ack_spec.seq += 2000;
  const Bytes ack = build_tcp(ack_spec, {});  // no data: must not be overtaken by seg[2]
  TcpCoalescer coalescer;
  expect_groups(coalesce_all(coalescer, {seg[0], seg[1], ack, seg[2]}),
                {{seg[0], seg[1]}, {ack}, {seg[2]}});
}

TEST(GroCoalescer, BadChecksumsAreNotMerged) {
  auto seg = flow_segments(TcpSpec{}, {1000, 1000, 1000}, kAck);
  seg[1][100] ^= 1;  // payload bit flip: TCP checksum now wrong
  TcpCoalescer coalescer;
  expect_groups(coalesce_all(coalescer, seg), {{seg[0]}, {seg[1]}, {seg[2]}});
  EXPECT_EQ(coalescer.stats().bad_checksum, 1u);

  seg = flow_segments(TcpSpec{}, {1000, 1000}, kAck);
  seg[1][11] ^= 1;  // IPv4 header checksum now wrong, nothing else changed
  expect_groups(coalesce_all(coalescer, seg), {{seg[0]}, {seg[1]}});
}

TEST(GroCoalescer, StaysWithin64KB) {
  const std::vector<size_t> sizes(60, 1400);  // 84000 bytes
  const auto seg = flow_segments(TcpSpec{}, sizes, kAck);
  TcpCoalescer coalescer;
  const auto frames = coalesce_all(coalescer, seg);
  ASSERT_EQ(frames.size(), 2u);
  const size_t per = (65535 - 40) / 1400;  // 46 segments fit
  check_super_packet(frames[0], {seg.begin(), seg.begin() + static_cast<long>(per)});
  check_super_packet(frames[1], {seg.begin() + static_cast<long>(per), seg.end()});
  EXPECT_LE(packet_of(frames[0]).size(), 65535u);
}

TEST(GroCoalescer, FlowTableLimitEvictsOldestButKeepsOrder) {
  std::vector<std::vector<Bytes>> flows;
  for (uint16_t f = 0; f < 3; ++f) {
    TcpSpec s;
    s.source_port = static_cast<uint16_t>(41000 + f);
    flows.push_back(flow_segments(s, {500, 500, 500}, kAck));
  }
  TcpCoalescer coalescer(2);
  // a0 b0 c0 (a stops growing) a1 (new run; b stops growing) a2 c1 b1 (new run)
  const auto frames = coalesce_all(coalescer, {flows[0][0], flows[1][0], flows[2][0], flows[0][1],
                                               flows[0][2], flows[2][1], flows[1][1]});
  expect_groups(frames, {{flows[0][0]},
                         {flows[1][0]},
                         {flows[2][0], flows[2][1]},
                         {flows[0][1], flows[0][2]},
                         {flows[1][1]}});
}

TEST(GroCoalescer, NonTcpAndMalformedPassThrough) {
  Bytes truncated = build_tcp(TcpSpec{}, pattern(100));
  truncated.resize(30);
  const std::vector<Bytes> packets = {udp4(pattern(20)), Bytes{0x45}, truncated, Bytes(3, 0x60)};
  TcpCoalescer coalescer;
  const auto frames = coalesce_all(coalescer, packets);
  ASSERT_EQ(frames.size(), packets.size());
  for (size_t i = 0; i < packets.size(); ++i) EXPECT_EQ(packet_of(frames[i]), packets[i]);
  EXPECT_TRUE(coalesce_all(coalescer, {}).empty());
}

TEST(GroCoalescer, FlushStopsWhenEmitRefuses) {
  TcpCoalescer coalescer;
  coalescer.add(udp4(pattern(1)));
  coalescer.add(udp4(pattern(2)));
  int calls = 0;
  EXPECT_FALSE(coalescer.flush([&](std::span<const uint8_t>) { return ++calls > 1; }));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(coalescer.pending_frames(), 0u);
}

// segment(coalesce(x)) == x, per flow and in order, for random flows, MSS and sizes.
TEST(GroCoalescer, RoundTripThroughSegmentation) {
  std::mt19937 rng(2024);
  TcpCoalescer coalescer;
  TsoSegmenter segmenter;
  for (int round = 0; round < 40; ++round) {
    const int flow_count = 1 + static_cast<int>(rng() % 4);
    std::vector<std::vector<Bytes>> flows;
    for (int f = 0; f < flow_count; ++f) {
      TcpSpec s;
      s.ipv6 = rng() % 2;
      s.source_port = static_cast<uint16_t>(42000 + f);
      s.seq = static_cast<uint32_t>(rng());
      s.id = static_cast<uint16_t>(rng());
      if (rng() % 3 == 0) s.tcp_options = {1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8};
      const size_t mss = 1 + rng() % 1460;
      std::vector<size_t> sizes(1 + rng() % 30, mss);
      if (rng() % 2) sizes.back() = 1 + rng() % mss;
      flows.push_back(
          flow_segments(s, sizes, rng() % 2 ? kAck | kPsh : kAck, static_cast<uint32_t>(rng())));
    }
    // Interleave the flows randomly, each in order, with the odd UDP packet.
    std::vector<Bytes> input;
    std::vector<size_t> next(flows.size(), 0);
    for (;;) {
      std::vector<size_t> live;
      for (size_t f = 0; f < flows.size(); ++f)
        if (next[f] < flows[f].size()) live.push_back(f);
      if (live.empty()) break;
      const size_t f = live[rng() % live.size()];
      input.push_back(flows[f][next[f]++]);
      if (rng() % 16 == 0) input.push_back(udp4(pattern(rng() % 100)));
    }
    std::vector<Bytes> output;
    for (const Bytes& frame : coalesce_all(coalescer, input)) {
      OffloadResult result;
      for (Bytes& p : segment_all(segmenter, frame, &result)) output.push_back(std::move(p));
      ASSERT_EQ(result, OffloadResult::ok);
    }
    // Same packets; within each flow (and among non-TCP packets) the same order.
    auto key = [](const Bytes& p) {
      const size_t ip = ip_header_length(p);
      return (p[0] >> 4) == 6 || p[9] == 6 ? std::string(p.begin() + 8, p.begin() + ip + 4)
                                           : std::string("other");
    };
    std::map<std::string, std::vector<Bytes>> in_by_flow, out_by_flow;
    for (const Bytes& p : input) in_by_flow[key(p)].push_back(p);
    for (const Bytes& p : output) out_by_flow[key(p)].push_back(p);
    ASSERT_EQ(output.size(), input.size());
    ASSERT_EQ(in_by_flow, out_by_flow);
  }
  EXPECT_GT(coalescer.stats().segments_merged, coalescer.stats().packets_in / 2);
}

// The TUN writer's path (the frame's pieces point into the packets, no copy) gives exactly
// the frames of the copying path, for random flows, sizes, LAN limits, corrupted checksums
// and non-TCP packets, and leaves the packets it borrowed untouched.
TEST(GroCoalescer, BorrowedPiecesGiveTheFramesOfTheCopyingPath) {
  std::mt19937 rng(33);
  TcpCoalescer copying, borrowing;
  for (int round = 0; round < 60; ++round) {
    const size_t limit = rng() % 3 == 0 ? 600 + rng() % 1000 : 0;
    copying.set_max_packet(limit);
    borrowing.set_max_packet(limit);
    std::vector<Bytes> input;
    for (int f = 0, flows = 1 + static_cast<int>(rng() % 3); f < flows; ++f) {
      TcpSpec s;
      s.ipv6 = rng() % 2;
      s.source_port = static_cast<uint16_t>(43000 + f);
      s.seq = static_cast<uint32_t>(rng());
      s.id = static_cast<uint16_t>(rng());
      if (rng() % 3 == 0) s.tcp_options = {1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8};
      const size_t mss = 1 + rng() % 1460;
      // Up to 300 one-byte segments: more than one frame's pieces.
      std::vector<size_t> sizes(1 + rng() % (mss == 1 ? 300 : 40), mss);
      if (rng() % 2) sizes.back() = 1 + rng() % mss;
      for (Bytes& p :
           flow_segments(s, sizes, rng() % 2 ? kAck | kPsh : kAck, static_cast<uint32_t>(rng())))
        input.push_back(std::move(p));
    }
    if (rng() % 2) std::shuffle(input.begin(), input.end(), rng);  // fewer merges, more frames
    for (Bytes& p : input)
      if (rng() % 20 == 0) p.back() ^= 0x5A;  // a checksum that no longer matches
    input.push_back(udp4(pattern(rng() % 100)));
    const std::vector<Bytes> before = input;
    const auto expected = coalesce_all(copying, input);
    const auto frames = coalesce_all_borrowed(borrowing, input);
    ASSERT_EQ(frames, expected) << "round " << round;
    ASSERT_EQ(input, before) << "the borrowed packets are read, never written";
  }
  EXPECT_EQ(borrowing.stats().segments_merged, copying.stats().segments_merged);
  EXPECT_EQ(borrowing.stats().bad_checksum, copying.stats().bad_checksum);
  EXPECT_GT(borrowing.stats().segments_merged, 0u);
  EXPECT_GT(borrowing.stats().bad_checksum, 0u);
}

// And the other way: coalescing the segments of a kernel super-packet rebuilds it.
TEST(TsoSegmenter, CoalescingItsSegmentsRebuildsTheSuperPacket) {
  for (bool v6 : {false, true}) {
    TcpSpec s;
    s.ipv6 = v6;
    s.flags = kAck | kPsh;
    const Bytes frame = kernel_frame(s, pattern(20000), 1448);
    TsoSegmenter segmenter;
    TcpCoalescer coalescer;
    const auto frames = coalesce_all(coalescer, segment_all(segmenter, frame));
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(packet_of(frames[0]), packet_of(frame));
    const VnetHeader a = header_of(frames[0]), b = header_of(frame);
    EXPECT_EQ(a.gso_type, b.gso_type);
    EXPECT_EQ(a.gso_size, b.gso_size);
    EXPECT_EQ(a.csum_start, b.csum_start);
  }
}

}  // namespace
}  // namespace espgw::io

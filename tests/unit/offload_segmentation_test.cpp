// TUN offloads, read side (io/offload.h): the virtio net header, TSO segmentation of
// super-packets, checksum completion, and rejection of malformed frames.
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

TEST(OffloadVnetHeader, ParseWriteRoundTrip) {
  VnetHeader h;
  h.flags = VnetHeader::kNeedsCsum;
  h.gso_type = VnetHeader::kGsoTcpV6;
  h.hdr_len = 74;
  h.gso_size = 1400;
  h.csum_start = 40;
  h.csum_offset = 16;
  uint8_t raw[VnetHeader::kSize];
  h.write(raw);
  VnetHeader back;
  ASSERT_TRUE(VnetHeader::parse(raw, back));
  EXPECT_EQ(back.flags, h.flags);
  EXPECT_EQ(back.gso_type, h.gso_type);
  EXPECT_EQ(back.hdr_len, 74);
  EXPECT_EQ(back.gso_size, 1400);
  EXPECT_EQ(back.csum_start, 40);
  EXPECT_EQ(back.csum_offset, 16);
  EXPECT_FALSE(VnetHeader::parse(std::span<const uint8_t>(raw, 9), back));
}

TEST(TsoSegmenter, SplitsIpv4SuperPacket) {
  TcpSpec s;
  s.flags = kAck | kPsh | kFin | kCwr | kEce;
  const Bytes payload = pattern(10000);
  TsoSegmenter segmenter;
  OffloadResult result;
  const auto segments = segment_all(segmenter, kernel_frame(s, payload, 1400), &result);
  EXPECT_EQ(result, OffloadResult::ok);
  check_segments(s, payload, 1400, segments);
}

TEST(TsoSegmenter, SplitsIpv6SuperPacketWithTcpOptions) {
  TcpSpec s;
  s.ipv6 = true;
  s.flags = kAck | kPsh | kFin;
  s.tcp_options = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};  // NOP NOP timestamps
  const Bytes payload = pattern(10000, 3);
  TsoSegmenter segmenter;
  OffloadResult result;
  const auto segments = segment_all(segmenter, kernel_frame(s, payload, 1388), &result);
  EXPECT_EQ(result, OffloadResult::ok);
  check_segments(s, payload, 1388, segments);
}

TEST(TsoSegmenter, SplitsIpv4WithOptionsAndExactMultiple) {
  TcpSpec s;
  s.ip_options = {1, 1, 1, 0};  // NOP NOP NOP EOL
  s.flags = kAck | kPsh;
  const Bytes payload = pattern(4200, 5);
  TsoSegmenter segmenter;
  const auto segments = segment_all(segmenter, kernel_frame(s, payload, 1400));
  check_segments(s, payload, 1400, segments);
}

TEST(TsoSegmenter, PayloadWithinMssGivesOnePacketWithFullChecksum) {
  TcpSpec s;
  const Bytes payload = pattern(900);
  TsoSegmenter segmenter;
  const auto segments = segment_all(segmenter, kernel_frame(s, payload, 1400));
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0], build_tcp(s, payload));
}

TEST(TsoSegmenter, PlainFramePassesThroughWithoutCopy) {
  const Bytes p = build_tcp(TcpSpec{}, pattern(100));
  Bytes frame(VnetHeader::kSize, 0);
  frame.insert(frame.end(), p.begin(), p.end());
  TsoSegmenter segmenter;
  int calls = 0;
  EXPECT_EQ(segmenter.segment_frame(frame,
                                    [&](std::span<const uint8_t> out) {
                                      ++calls;
                                      EXPECT_EQ(out.data(), frame.data() + VnetHeader::kSize);
                                      EXPECT_EQ(out.size(), p.size());
                                      return true;
                                    }),
            OffloadResult::ok);
  EXPECT_EQ(calls, 1);
}

// GSO_NONE with NEEDS_CSUM: the field holds the pseudo-header sum and must be completed.
Bytes partial_frame(Bytes p, uint8_t protocol, uint16_t field) {
  const size_t ip = ip_header_length(p);
  put16(&p[ip + field], pseudo_sum(p, protocol));
  VnetHeader h;
  h.flags = VnetHeader::kNeedsCsum;
  h.csum_start = static_cast<uint16_t>(ip);
  h.csum_offset = field;
  Bytes frame(VnetHeader::kSize);
  h.write(frame.data());
  frame.insert(frame.end(), p.begin(), p.end());
  return frame;
}

// The TUN reader's path: each packet the segmenter builds goes where the claim says (a
// pool packet there) and is emitted from there; it must be the packet the scratch path
// builds. A claim that declines (a packet too large for a pool packet) gets the scratch.
TEST(TsoSegmenter, ClaimedPlacesGetThePacketsOfTheScratchPath) {
  std::mt19937 rng(33);
  TsoSegmenter scratch_only, claiming;
  size_t claimed_packets = 0, declined_packets = 0;
  for (int round = 0; round < 200; ++round) {
    TcpSpec s;
    s.ipv6 = rng() % 2;
    s.seq = static_cast<uint32_t>(rng());
    s.id = static_cast<uint16_t>(rng());
    s.flags = rng() % 2 ? kAck | kPsh : kAck | kCwr | kFin;
    if (rng() % 3 == 0) s.tcp_options = {1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8};
    const Bytes payload = pattern(1 + rng() % 30000, static_cast<uint32_t>(round));
    const Bytes frame = round % 5 == 4
                            ? partial_frame(build_tcp(s, payload), 6, 16)
                            : kernel_frame(s, payload, static_cast<uint16_t>(1 + rng() % 1460));
    const size_t limit = rng() % 4 == 0 ? 1500 + rng() % 8000 : 0;  // jumbo segments
    scratch_only.set_max_packet(limit);
    claiming.set_max_packet(limit);
    OffloadResult expected_result;
    const auto expected = segment_all(scratch_only, frame, &expected_result);

    std::vector<Bytes> places;  // what a pool would hand out
    places.reserve(expected.size());
    const uint8_t* last_place = nullptr;
    std::vector<Bytes> built;
    const auto result = claiming.segment_frame(
        frame,
        [&](std::span<const uint8_t> packet) {
          if (last_place) {
            EXPECT_EQ(packet.data(), last_place) << "emitted from where it was built";
            ++claimed_packets;
          } else {
            ++declined_packets;
          }
          last_place = nullptr;
          built.emplace_back(packet.begin(), packet.end());
          return true;
        },
        [&](size_t length) -> uint8_t* {
          if (rng() % 8 == 0) return nullptr;  // declined: the segmenter uses its scratch
          last_place = places.emplace_back(length, 0xEE).data();
          return places.back().data();
        });
    ASSERT_EQ(result, expected_result);
    ASSERT_EQ(built, expected) << "round " << round;
  }
  EXPECT_GT(claimed_packets, 1000u);
  EXPECT_GT(declined_packets, 0u);
}

TEST(OffloadChecksum, CompletesUdpAndTcpChecksums) {
  TsoSegmenter segmenter;
  for (size_t n : {0, 1, 37, 1000}) {
    SCOPED_TRACE(n);
    const Bytes udp = udp4(pattern(n, static_cast<uint32_t>(n)));
    auto out = segment_all(segmenter, partial_frame(udp, 17, 6));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_TRUE(l4_checksum_ok(out[0], 17));
    EXPECT_NE(be16(&out[0][26]), 0) << "UDP checksum 0 means none";

    TcpSpec s;
    s.ipv6 = true;
    const Bytes tcp = build_tcp(s, pattern(n, 9));
    out = segment_all(segmenter, partial_frame(tcp, 6, 16));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], tcp);
  }
}

TEST(OffloadChecksum, UdpChecksumOfZeroIsSentAsAllOnes) {
  // Search for a payload whose checksum comes out as 0 (0xFFFF in one's complement).
  TsoSegmenter segmenter;
  for (uint32_t v = 0; v <= 0xFFFF; ++v) {
    Bytes udp = udp4({static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
    set_l4_checksum(udp, 17, 6);
    if (be16(&udp[26]) != 0) continue;
    const auto out = segment_all(segmenter, partial_frame(udp, 17, 6));
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(be16(&out[0][26]), 0xFFFF);
    EXPECT_TRUE(l4_checksum_ok(out[0], 17));
    return;
  }
  FAIL() << "no payload with a zero checksum found";
}

TEST(OffloadMalformed, RejectedWithReasonAndNothingEmitted) {
  TcpSpec s;
  const Bytes good = kernel_frame(s, pattern(3000), 1400);
  auto mutate = [&](auto change) {
    Bytes f = good;
    VnetHeader h = header_of(f);
    change(f, h);
    h.write(f.data());
    return f;
  };
  auto set_ip = [](Bytes& f, size_t offset, uint8_t value) {
    f[VnetHeader::kSize + offset] = value;
  };
  TcpSpec s6;
  s6.ipv6 = true;
  Bytes ext6 = kernel_frame(s6, pattern(3000), 1400);
  ext6[VnetHeader::kSize + 6] = 0;  // hop-by-hop options header

  const std::vector<std::pair<std::string, std::pair<Bytes, OffloadResult>>> cases = {
      {"short frame", {Bytes(9, 0), OffloadResult::too_short}},
      {"header only", {Bytes(VnetHeader::kSize, 0), OffloadResult::too_short}},
      {"ecn",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_type |= VnetHeader::kGsoEcn; }),
        OffloadResult::ecn}},
      {"ufo",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_type = VnetHeader::kGsoUdp; }),
        OffloadResult::bad_gso_type}},
      {"uso",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_type = VnetHeader::kGsoUdpL4; }),
        OffloadResult::bad_gso_type}},
      {"unknown",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_type = 7; }), OffloadResult::bad_gso_type}},
      {"gso_size 0",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_size = 0; }), OffloadResult::zero_gso_size}},
      {"v6 type on v4",
       {mutate([](Bytes&, VnetHeader& h) { h.gso_type = VnetHeader::kGsoTcpV6; }),
        OffloadResult::bad_ip_header}},
      {"ihl 4",
       {mutate([&](Bytes& f, VnetHeader&) { set_ip(f, 0, 0x44); }), OffloadResult::bad_ip_header}},
      {"udp",
       {mutate([&](Bytes& f, VnetHeader&) { set_ip(f, 9, 17); }), OffloadResult::bad_ip_header}},
      {"fragment",
       {mutate([&](Bytes& f, VnetHeader&) { set_ip(f, 6, 0x20); }), OffloadResult::bad_ip_header}},
      {"length",
       {mutate([&](Bytes& f, VnetHeader&) { set_ip(f, 3, 0); }), OffloadResult::bad_length}},
      {"truncated", {Bytes(good.begin(), good.end() - 1), OffloadResult::bad_length}},
      {"tcp doff 4",
       {mutate([&](Bytes& f, VnetHeader&) { set_ip(f, 32, 0x40); }), OffloadResult::bad_ip_header}},
      {"csum_start",
       {mutate([](Bytes&, VnetHeader& h) { h.csum_start = 24; }),
        OffloadResult::bad_checksum_offsets}},
      {"csum_offset",
       {mutate([](Bytes&, VnetHeader& h) { h.csum_offset = 6; }),
        OffloadResult::bad_checksum_offsets}},
      {"ipv6 extension", {ext6, OffloadResult::ipv6_extension_header}},
  };
  TsoSegmenter segmenter;
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    OffloadResult result;
    const auto out = segment_all(segmenter, c.first, &result);
    EXPECT_EQ(result, c.second) << offload_result_name(result);
    EXPECT_TRUE(out.empty());
  }

  // Headers that do not fit: a 60-byte TCP header in a 40-byte packet, and an IPv4 header
  // whose IHL runs past the end.
  Bytes tiny = kernel_frame(s, {}, 1400);
  tiny[VnetHeader::kSize + 32] = 0xF0;
  OffloadResult result;
  EXPECT_TRUE(segment_all(segmenter, tiny, &result).empty());
  EXPECT_EQ(result, OffloadResult::too_short);
  Bytes ihl = Bytes(good.begin(), good.begin() + VnetHeader::kSize + 24);
  ihl[VnetHeader::kSize + 0] = 0x4F;
  put16(&ihl[VnetHeader::kSize + 2], 24);
  EXPECT_TRUE(segment_all(segmenter, ihl, &result).empty());
  EXPECT_EQ(result, OffloadResult::too_short);

  // GSO_NONE with NEEDS_CSUM offsets past the end.
  Bytes plain = partial_frame(udp4(pattern(10)), 17, 6);
  VnetHeader h = header_of(plain);
  h.csum_offset = 100;
  h.write(plain.data());
  EXPECT_TRUE(segment_all(segmenter, plain, &result).empty());
  EXPECT_EQ(result, OffloadResult::bad_checksum_offsets);
}

TEST(OffloadMalformed, StopsWhenEmitRefuses) {
  TsoSegmenter segmenter;
  int calls = 0;
  const Bytes frame = kernel_frame(TcpSpec{}, pattern(10000), 1400);
  EXPECT_EQ(segmenter.segment_frame(frame, [&](std::span<const uint8_t>) { return ++calls < 3; }),
            OffloadResult::stopped);
  EXPECT_EQ(calls, 3);
}

}  // namespace
}  // namespace espgw::io

// TUN offloads (io/offload.h): TSO segmentation of super-packets, checksum completion,
// rejection of malformed frames, TCP coalescing (GRO), their round trip, and one test
// against the real kernel (a vnet-header TUN in a private network namespace).
#include "io/offload.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

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

#include "io/tun_device.h"

namespace espgw::io {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10, kUrg = 0x20,
                  kEce = 0x40, kCwr = 0x80;

uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t be32(const uint8_t* p) {
  return uint32_t{be16(p)} << 16 | be16(p + 2);
}
void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8), p[1] = v & 0xFF;
}
void put32(uint8_t* p, uint32_t v) {
  put16(p, v >> 16), put16(p + 2, v & 0xFFFF);
}

// The reference checksum, written the textbook way (RFC 1071: 16-bit words, odd byte padded
// with zero, end-around carry), independent of esp::checksum_add.
uint16_t ones_sum(const Bytes& bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 2)
    sum += uint32_t{bytes[i]} << 8 | (i + 1 < bytes.size() ? bytes[i + 1] : 0);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

size_t ip_header_length(const Bytes& p) {
  return (p[0] >> 4) == 6 ? 40 : (p[0] & 0x0F) * 4u;
}

// Pseudo-header followed by the transport segment, as one byte string.
Bytes pseudo_and_segment(const Bytes& p, uint8_t protocol) {
  const bool v6 = (p[0] >> 4) == 6;
  const size_t ip = ip_header_length(p);
  const size_t l4 = p.size() - ip;
  Bytes b;
  if (v6) {
    b.insert(b.end(), p.begin() + 8, p.begin() + 40);
    b.insert(b.end(),
             {0, 0, static_cast<uint8_t>(l4 >> 8), static_cast<uint8_t>(l4), 0, 0, 0, protocol});
  } else {
    b.insert(b.end(), p.begin() + 12, p.begin() + 20);
    b.insert(b.end(), {0, protocol, static_cast<uint8_t>(l4 >> 8), static_cast<uint8_t>(l4)});
  }
  b.insert(b.end(), p.begin() + static_cast<long>(ip), p.end());
  return b;
}

bool l4_checksum_ok(const Bytes& p, uint8_t protocol = 6) {
  return ones_sum(pseudo_and_segment(p, protocol)) == 0xFFFF;
}
bool ipv4_header_ok(const Bytes& p) {
  return ones_sum(Bytes(p.begin(), p.begin() + static_cast<long>(ip_header_length(p)))) == 0xFFFF;
}
// Fills in a full transport checksum at `field` (offset from the transport header).
void set_l4_checksum(Bytes& p, uint8_t protocol, size_t field) {
  const size_t at = ip_header_length(p) + field;
  put16(&p[at], 0);
  put16(&p[at], static_cast<uint16_t>(~ones_sum(pseudo_and_segment(p, protocol))));
}
// The pseudo-header sum alone (what CHECKSUM_PARTIAL leaves in the checksum field).
uint16_t pseudo_sum(const Bytes& p, uint8_t protocol) {
  Bytes b = pseudo_and_segment(p, protocol);
  b.resize(b.size() - (p.size() - ip_header_length(p)));
  return ones_sum(b);
}

struct TcpSpec {
  bool ipv6 = false;
  uint8_t source_last = 1;  // last address byte: 10.1.0.x / fd00:1::x
  uint8_t destination_last = 2;
  uint16_t source_port = 40000;
  uint16_t destination_port = 5201;
  uint32_t seq = 0xFFFFF000;  // wraps inside the 10 KB tests
  uint32_t ack = 777;
  uint8_t flags = kAck;
  uint16_t window = 1024;
  uint16_t id = 0xFFFE;  // wraps too
  uint8_t tos = 0;
  uint8_t ttl = 64;
  bool dont_fragment = true;
  Bytes ip_options;   // IPv4, multiple of 4
  Bytes tcp_options;  // multiple of 4
};

// A TCP/IP packet with valid IPv4 header and TCP checksums.
Bytes build_tcp(const TcpSpec& s, const Bytes& payload) {
  const size_t ip = s.ipv6 ? 40 : 20 + s.ip_options.size();
  const size_t tcp = 20 + s.tcp_options.size();
  Bytes p(ip + tcp + payload.size());
  if (s.ipv6) {
    p[0] = static_cast<uint8_t>(0x60 | s.tos >> 4);
    p[1] = static_cast<uint8_t>(s.tos << 4 | 0x0A);  // flow label 0xA1234
    p[2] = 0x12, p[3] = 0x34;
    put16(&p[4], static_cast<uint16_t>(p.size() - 40));
    p[6] = 6;
    p[7] = s.ttl;
    p[8] = 0xfd, p[9] = 0x00, p[10] = 0x00, p[11] = 0x01, p[23] = s.source_last;
    p[24] = 0xfd, p[25] = 0x00, p[26] = 0x00, p[27] = 0x02, p[39] = s.destination_last;
  } else {
    p[0] = static_cast<uint8_t>(0x40 | ip / 4);
    p[1] = s.tos;
    put16(&p[2], static_cast<uint16_t>(p.size()));
    put16(&p[4], s.id);
    put16(&p[6], s.dont_fragment ? 0x4000 : 0);
    p[8] = s.ttl;
    p[9] = 6;
    p[12] = 10, p[13] = 1, p[14] = 0, p[15] = s.source_last;
    p[16] = 10, p[17] = 2, p[18] = 0, p[19] = s.destination_last;
    std::copy(s.ip_options.begin(), s.ip_options.end(), p.begin() + 20);
    put16(&p[10], static_cast<uint16_t>(~ones_sum(Bytes(p.begin(), p.begin() + ip))));
  }
  uint8_t* t = &p[ip];
  put16(t, s.source_port);
  put16(t + 2, s.destination_port);
  put32(t + 4, s.seq);
  put32(t + 8, s.ack);
  t[12] = static_cast<uint8_t>(tcp / 4 << 4);
  t[13] = s.flags;
  put16(t + 14, s.window);
  std::copy(s.tcp_options.begin(), s.tcp_options.end(), t + 20);
  std::copy(payload.begin(), payload.end(), t + tcp);
  set_l4_checksum(p, 6, 16);
  return p;
}

Bytes pattern(size_t n, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// A super-packet as the kernel hands it over: TCP checksum field holding the pseudo-header
// sum, NEEDS_CSUM, and hdr_len set to something that is not the header length.
Bytes kernel_frame(const TcpSpec& s, const Bytes& payload, uint16_t mss) {
  Bytes p = build_tcp(s, payload);
  const size_t ip = ip_header_length(p);
  put16(&p[ip + 16], pseudo_sum(p, 6));
  VnetHeader h;
  h.flags = VnetHeader::kNeedsCsum;
  h.gso_type = s.ipv6 ? VnetHeader::kGsoTcpV6 : VnetHeader::kGsoTcpV4;
  h.gso_size = mss;
  h.hdr_len = static_cast<uint16_t>(std::min<size_t>(p.size(), 256));  // skb_headlen-like
  h.csum_start = static_cast<uint16_t>(ip);
  h.csum_offset = 16;
  Bytes frame(VnetHeader::kSize);
  h.write(frame.data());
  frame.insert(frame.end(), p.begin(), p.end());
  return frame;
}

std::vector<Bytes> segment_all(TsoSegmenter& segmenter, const Bytes& frame,
                               OffloadResult* result = nullptr) {
  std::vector<Bytes> out;
  const OffloadResult r = segmenter.segment_frame(frame, [&](std::span<const uint8_t> packet) {
    out.emplace_back(packet.begin(), packet.end());
    return true;
  });
  if (result) *result = r;
  return out;
}

std::vector<Bytes> coalesce_all(TcpCoalescer& coalescer, const std::vector<Bytes>& packets) {
  for (const Bytes& p : packets) coalescer.add(p);
  std::vector<Bytes> frames;
  EXPECT_TRUE(coalescer.flush([&](std::span<const uint8_t> frame) {
    frames.emplace_back(frame.begin(), frame.end());
    return true;
  }));
  return frames;
}

VnetHeader header_of(const Bytes& frame) {
  VnetHeader h;
  EXPECT_TRUE(VnetHeader::parse(frame, h));
  return h;
}
Bytes packet_of(const Bytes& frame) {
  return Bytes(frame.begin() + VnetHeader::kSize, frame.end());
}
Bytes payload_of(const Bytes& p) {
  const size_t ip = ip_header_length(p);
  return Bytes(p.begin() + static_cast<long>(ip + (p[ip + 12] >> 4) * 4u), p.end());
}

// Segments of one flow as a sender's TCP would emit them: `sizes` payload bytes each.
std::vector<Bytes> flow_segments(TcpSpec s, const std::vector<size_t>& sizes, uint8_t last_flags,
                                 uint32_t seed = 7) {
  std::vector<Bytes> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TcpSpec si = s;
    if (i + 1 == sizes.size()) si.flags = last_flags;
    out.push_back(build_tcp(si, pattern(sizes[i], seed + static_cast<uint32_t>(i))));
    s.seq += static_cast<uint32_t>(sizes[i]);
    ++s.id;
  }
  return out;
}

// ---------------------------------------------------------------------------------------

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

void check_segments(const TcpSpec& s, const Bytes& payload, size_t mss,
                    const std::vector<Bytes>& segments) {
  const size_t expected = (payload.size() + mss - 1) / mss;
  ASSERT_EQ(segments.size(), expected);
  Bytes joined;
  for (size_t i = 0; i < segments.size(); ++i) {
    SCOPED_TRACE("segment " + std::to_string(i));
    const Bytes& p = segments[i];
    const size_t ip = ip_header_length(p);
    const size_t tcp = 20 + s.tcp_options.size();
    const size_t chunk = std::min(mss, payload.size() - i * mss);
    ASSERT_EQ(p.size(), ip + tcp + chunk);
    if (s.ipv6) {
      EXPECT_EQ(be16(&p[4]), tcp + chunk);
    } else {
      EXPECT_EQ(be16(&p[2]), p.size());
      EXPECT_EQ(be16(&p[4]), static_cast<uint16_t>(s.id + i));
      EXPECT_TRUE(ipv4_header_ok(p));
      EXPECT_TRUE(std::equal(s.ip_options.begin(), s.ip_options.end(), p.begin() + 20));
    }
    EXPECT_EQ(be32(&p[ip + 4]), static_cast<uint32_t>(s.seq + i * mss));
    EXPECT_EQ(be32(&p[ip + 8]), s.ack);
    const bool first = i == 0, last = i + 1 == segments.size();
    uint8_t flags = s.flags;
    if (!first) flags &= static_cast<uint8_t>(~kCwr);
    if (!last) flags &= static_cast<uint8_t>(~(kFin | kPsh));
    EXPECT_EQ(p[ip + 13], flags);
    EXPECT_TRUE(std::equal(s.tcp_options.begin(), s.tcp_options.end(), p.begin() + ip + 20));
    EXPECT_TRUE(l4_checksum_ok(p));
    const Bytes data = payload_of(p);
    joined.insert(joined.end(), data.begin(), data.end());
  }
  EXPECT_EQ(joined, payload);
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

Bytes udp4(const Bytes& payload) {
  Bytes p(28 + payload.size());
  p[0] = 0x45;
  put16(&p[2], static_cast<uint16_t>(p.size()));
  p[8] = 64, p[9] = 17;
  p[12] = 10, p[13] = 1, p[15] = 1, p[16] = 10, p[17] = 2, p[19] = 2;
  put16(&p[10], static_cast<uint16_t>(~ones_sum(Bytes(p.begin(), p.begin() + 20))));
  put16(&p[20], 53), put16(&p[22], 3333), put16(&p[24], static_cast<uint16_t>(8 + payload.size()));
  std::copy(payload.begin(), payload.end(), p.begin() + 28);
  return p;
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

// ---------------------------------------------------------------------------------------
// Coalescing

// Checks a merged frame against the segments it was made of.
void check_super_packet(const Bytes& frame, const std::vector<Bytes>& segments) {
  const VnetHeader h = header_of(frame);
  const Bytes p = packet_of(frame);
  const bool v6 = (p[0] >> 4) == 6;
  const size_t ip = ip_header_length(p);
  const size_t tcp = (p[ip + 12] >> 4) * 4u;
  EXPECT_EQ(h.flags, VnetHeader::kNeedsCsum);
  EXPECT_EQ(h.gso_type, v6 ? VnetHeader::kGsoTcpV6 : VnetHeader::kGsoTcpV4);
  EXPECT_EQ(h.gso_size, payload_of(segments[0]).size());
  EXPECT_EQ(h.hdr_len, ip + tcp);
  EXPECT_EQ(h.csum_start, ip);
  EXPECT_EQ(h.csum_offset, 16);
  if (v6) {
    EXPECT_EQ(be16(&p[4]) + 40u, p.size());
  } else {
    EXPECT_EQ(be16(&p[2]), p.size());
    EXPECT_EQ(be16(&p[4]), be16(&segments[0][4]));
    EXPECT_TRUE(ipv4_header_ok(p));
  }
  EXPECT_EQ(be32(&p[ip + 4]), be32(&segments[0][ip + 4]));
  uint8_t flags = 0;
  for (const Bytes& s : segments) flags |= s[ip + 13];
  EXPECT_EQ(p[ip + 13], flags);
  // CHECKSUM_PARTIAL: the field holds the pseudo-header sum over the whole length, so
  // summing from csum_start and complementing yields a valid checksum.
  EXPECT_EQ(be16(&p[ip + 16]), pseudo_sum(p, 6));
  Bytes completed = p;
  put16(&completed[ip + 16],
        static_cast<uint16_t>(~ones_sum(Bytes(p.begin() + static_cast<long>(ip), p.end()))));
  EXPECT_TRUE(l4_checksum_ok(completed));
  Bytes joined;
  for (const Bytes& s : segments) {
    const Bytes d = payload_of(s);
    joined.insert(joined.end(), d.begin(), d.end());
  }
  EXPECT_EQ(payload_of(p), joined);
}

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

// ---------------------------------------------------------------------------------------
// Jumbo segments: a WAN with a larger MTU than the LANs carries fewer, larger packets, and
// the receiving side segments again what its LAN cannot take.

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

// ---------------------------------------------------------------------------------------
// The real kernel: a vnet-header TUN in a private network namespace. The test plays the
// remote TCP peer by hand. It checks that (1) what the kernel's TCP sends through the TUN
// (TSO super-packets, partial checksums) segments into valid packets carrying the data,
// (2) a coalesced super-packet written back is accepted by the local socket, and (3) one
// forwarded to a second, offload-less TUN comes out segmented by the kernel into exactly
// the packets we merged (TTL one less), which proves the partial-checksum convention.

bool set_address(int sock, const char* name, const char* address) {
  ifreq request{};
  std::strncpy(request.ifr_name, name, IFNAMSIZ - 1);
  auto* in = reinterpret_cast<sockaddr_in*>(&request.ifr_addr);
  in->sin_family = AF_INET;
  inet_pton(AF_INET, address, &in->sin_addr);
  if (ioctl(sock, SIOCSIFADDR, &request) < 0) return false;
  inet_pton(AF_INET, "255.255.255.0", &in->sin_addr);
  if (ioctl(sock, SIOCSIFNETMASK, &request) < 0) return false;
  if (ioctl(sock, SIOCGIFFLAGS, &request) < 0) return false;
  request.ifr_flags |= IFF_UP;
  return ioctl(sock, SIOCSIFFLAGS, &request) == 0;
}

// Next IPv4 TCP packet from `fd` within a second (frames with a vnet header if `vnet`).
bool read_tcp(int fd, bool vnet, Bytes& frame) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return false;
    frame.resize(70000);
    const ssize_t n = ::read(fd, frame.data(), frame.size());
    if (n <= 0) return false;
    frame.resize(static_cast<size_t>(n));
    const size_t at = vnet ? VnetHeader::kSize : 0;
    if (frame.size() > at + 20 && frame[at] >> 4 == 4 && frame[at + 9] == 6) return true;
  }
}

class KernelPeer {
 public:
  void run() {
    if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) != 0) {
      skipped_ = "needs root and /dev/net/tun";
      return;
    }
    if (unshare(CLONE_NEWNET) != 0) {
      skipped_ = std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
      return;
    }
    TunDevice lan("espgwoff0", 1, true);
    ASSERT_TRUE(lan.vnet_header());
    TunDevice out("espgwoff1", 1, false);  // no offloads: the kernel must segment for it
    const int control = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(control, 0);
    ASSERT_TRUE(set_address(control, "espgwoff0", "10.77.0.1"));
    ASSERT_TRUE(set_address(control, "espgwoff1", "10.78.0.1"));
    ::close(control);
    const int forward = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
    ASSERT_GE(forward, 0);
    ASSERT_EQ(write(forward, "1", 1), 1);
    ::close(forward);

    // The local socket connects to 10.77.0.2, which is "us" behind the TUN.
    client_ = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(client_, 0);
    sockaddr_in peer{};
    peer.sin_family = AF_INET;
    peer.sin_port = htons(5201);
    inet_pton(AF_INET, "10.77.0.2", &peer.sin_addr);
    ASSERT_NE(connect(client_, reinterpret_cast<sockaddr*>(&peer), sizeof peer), 0);
    ASSERT_EQ(errno, EINPROGRESS);

    TsoSegmenter segmenter;
    Bytes frame;
    Bytes syn;
    ASSERT_TRUE(read_tcp(lan.fd(0), true, frame));
    ASSERT_EQ(segmenter.segment_frame(frame,
                                      [&](std::span<const uint8_t> p) {
                                        syn.assign(p.begin(), p.end());
                                        return true;
                                      }),
              OffloadResult::ok);
    ASSERT_EQ(syn[33] & (kSyn | kAck), kSyn);
    EXPECT_TRUE(l4_checksum_ok(syn)) << "kernel SYN checksum completed";
    const uint32_t client_isn = be32(&syn[24]);

    TcpSpec from_peer;
    from_peer.source_last = 2;  // 10.1.0.2 in build_tcp: rewritten below
    from_peer.source_port = 5201;
    from_peer.destination_port = be16(&syn[20]);
    from_peer.seq = 1000;
    from_peer.ack = client_isn + 1;
    from_peer.flags = kSyn | kAck;
    from_peer.window = 65535;
    from_peer.id = 1;
    from_peer.tcp_options = {2, 4, 0x05, 0x78};  // MSS 1400, no window scaling
    write_plain(lan, address_packet(build_tcp(from_peer, {}), "10.77.0.2", "10.77.0.1"));

    pollfd p{client_, POLLOUT, 0};
    ASSERT_EQ(poll(&p, 1, 1000), 1);
    int error = 0;
    socklen_t length = sizeof error;
    getsockopt(client_, SOL_SOCKET, SO_ERROR, &error, &length);
    ASSERT_EQ(error, 0);

    // (1) The kernel sends 10 KB: expect TSO super-packets, segment them, check them.
    const Bytes sent = pattern(10000, 11);
    ASSERT_EQ(send(client_, sent.data(), sent.size(), 0), static_cast<ssize_t>(sent.size()));
    Bytes received;
    size_t super_packets = 0;
    size_t window = 0;  // the client's receive window (no scaling: we offered none)
    while (received.size() < sent.size()) {
      ASSERT_TRUE(read_tcp(lan.fd(0), true, frame)) << "got " << received.size() << " bytes";
      if (header_of(frame).gso_type != VnetHeader::kGsoNone) ++super_packets;
      ASSERT_EQ(segmenter.segment_frame(frame,
                                        [&](std::span<const uint8_t> packet) {
                                          const Bytes seg(packet.begin(), packet.end());
                                          EXPECT_TRUE(ipv4_header_ok(seg));
                                          EXPECT_TRUE(l4_checksum_ok(seg));
                                          EXPECT_LE(seg.size(), 1440u);
                                          window = be16(&seg[34]);
                                          const Bytes d = payload_of(seg);
                                          received.insert(received.end(), d.begin(), d.end());
                                          return true;
                                        }),
                OffloadResult::ok);
    }
    EXPECT_EQ(received, sent);
    EXPECT_GE(super_packets, 1u) << "the kernel never used TSO on the TUN";

    // (2) We send up to 20 KB back as one coalesced super-packet (within the window the
    // client offers); the socket must get all of it.
    from_peer.seq = 1001;
    from_peer.ack = client_isn + 1 + static_cast<uint32_t>(sent.size());
    from_peer.flags = kAck;
    from_peer.tcp_options.clear();
    ASSERT_GE(window, 2000u);
    const Bytes reply = pattern(std::min<size_t>(20, window / 1000) * 1000, 12);
    std::vector<Bytes> segments;
    for (size_t off = 0; off < reply.size(); off += 1000) {
      from_peer.id = static_cast<uint16_t>(2 + off / 1000);
      segments.push_back(
          address_packet(build_tcp(from_peer, Bytes(reply.begin() + static_cast<long>(off),
                                                    reply.begin() + static_cast<long>(off + 1000))),
                         "10.77.0.2", "10.77.0.1"));
      from_peer.seq += 1000;
    }
    write_coalesced(lan, segments);
    Bytes got(reply.size());
    size_t have = 0;
    while (have < got.size()) {
      pollfd r{client_, POLLIN, 0};
      ASSERT_EQ(poll(&r, 1, 1000), 1) << "socket got " << have << " bytes";
      const ssize_t n = recv(client_, got.data() + have, got.size() - have, 0);
      ASSERT_GT(n, 0);
      have += static_cast<size_t>(n);
    }
    EXPECT_EQ(got, reply);

    // (3) A super-packet to 10.78.0.2 is forwarded out of the offload-less TUN: the kernel
    // segments it and completes each checksum from our pseudo-header sum.
    std::vector<Bytes> forwarded_in;
    TcpSpec other;
    other.source_port = 6000;
    other.seq = 42;
    other.id = 500;
    for (int i = 0; i < 8; ++i) {
      forwarded_in.push_back(
          address_packet(build_tcp(other, pattern(1300, 20 + i)), "10.77.0.2", "10.78.0.2"));
      other.seq += 1300;
      ++other.id;
    }
    write_coalesced(lan, forwarded_in);
    for (const Bytes& expected : forwarded_in) {
      ASSERT_TRUE(read_tcp(out.fd(0), false, frame));
      EXPECT_TRUE(ipv4_header_ok(frame));
      EXPECT_TRUE(l4_checksum_ok(frame));
      Bytes adjusted = expected;
      --adjusted[8];  // TTL
      put16(&adjusted[10], 0);
      put16(&adjusted[10],
            static_cast<uint16_t>(~ones_sum(Bytes(adjusted.begin(), adjusted.begin() + 20))));
      EXPECT_EQ(frame, adjusted);
    }
  }

  ~KernelPeer() {
    if (client_ >= 0) ::close(client_);
  }
  const std::string& skipped() const { return skipped_; }

 private:
  static Bytes address_packet(Bytes p, const char* source, const char* destination) {
    inet_pton(AF_INET, source, &p[12]);
    inet_pton(AF_INET, destination, &p[16]);
    put16(&p[10], 0);
    put16(&p[10], static_cast<uint16_t>(~ones_sum(Bytes(p.begin(), p.begin() + 20))));
    set_l4_checksum(p, 6, 16);
    return p;
  }
  static void write_plain(const TunDevice& tun, const Bytes& packet) {
    Bytes frame(VnetHeader::kSize, 0);
    frame.insert(frame.end(), packet.begin(), packet.end());
    ASSERT_TRUE(tun.write(0, frame));
  }
  static void write_coalesced(const TunDevice& tun, const std::vector<Bytes>& segments) {
    TcpCoalescer coalescer;
    const auto frames = coalesce_all(coalescer, segments);
    ASSERT_EQ(frames.size(), 1u);
    ASSERT_NE(header_of(frames[0]).gso_type, VnetHeader::kGsoNone);
    ASSERT_TRUE(tun.write(0, frames[0])) << std::strerror(errno);
  }

  int client_ = -1;
  std::string skipped_;
};

TEST(OffloadKernel, TunTsoReadAndGroWrite) {
  // unshare() moves only the calling thread into the new namespace: a thread of its own
  // keeps the rest of the test process where it was.
  KernelPeer peer;
  std::thread([&] {
    try {
      peer.run();
    } catch (const std::exception& e) {  // an exception would end the process in a thread
      ADD_FAILURE() << e.what();
    }
  }).join();
  if (!peer.skipped().empty()) GTEST_SKIP() << peer.skipped();
}

}  // namespace
}  // namespace espgw::io

// Shared by the TUN offload tests (offload_*_test.cpp): TCP/IP packets built and checked
// the textbook way, independently of io/offload's own code, and the frames the kernel hands
// over.
#pragma once

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

namespace espgw::io {

using Bytes = std::vector<uint8_t>;

inline constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10,
                         kUrg = 0x20, kEce = 0x40, kCwr = 0x80;

inline uint16_t be16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint32_t be32(const uint8_t* p) {
  return uint32_t{be16(p)} << 16 | be16(p + 2);
}
inline void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8), p[1] = v & 0xFF;
}
inline void put32(uint8_t* p, uint32_t v) {
  put16(p, v >> 16), put16(p + 2, v & 0xFFFF);
}

// The reference checksum, written the textbook way (RFC 1071: 16-bit words, odd byte padded
// with zero, end-around carry), independent of esp::checksum_add.
inline uint16_t ones_sum(const Bytes& bytes) {
  uint32_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 2)
    sum += uint32_t{bytes[i]} << 8 | (i + 1 < bytes.size() ? bytes[i + 1] : 0);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

inline size_t ip_header_length(const Bytes& p) {
  return (p[0] >> 4) == 6 ? 40 : (p[0] & 0x0F) * 4u;
}

// Pseudo-header followed by the transport segment, as one byte string.
inline Bytes pseudo_and_segment(const Bytes& p, uint8_t protocol) {
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

inline bool l4_checksum_ok(const Bytes& p, uint8_t protocol = 6) {
  return ones_sum(pseudo_and_segment(p, protocol)) == 0xFFFF;
}
inline bool ipv4_header_ok(const Bytes& p) {
  return ones_sum(Bytes(p.begin(), p.begin() + static_cast<long>(ip_header_length(p)))) == 0xFFFF;
}
// Fills in a full transport checksum at `field` (offset from the transport header).
inline void set_l4_checksum(Bytes& p, uint8_t protocol, size_t field) {
  const size_t at = ip_header_length(p) + field;
  put16(&p[at], 0);
  put16(&p[at], static_cast<uint16_t>(~ones_sum(pseudo_and_segment(p, protocol))));
}
// The pseudo-header sum alone (what CHECKSUM_PARTIAL leaves in the checksum field).
inline uint16_t pseudo_sum(const Bytes& p, uint8_t protocol) {
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
inline Bytes build_tcp(const TcpSpec& s, const Bytes& payload) {
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

inline Bytes pattern(size_t n, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// A super-packet as the kernel hands it over: TCP checksum field holding the pseudo-header
// sum, NEEDS_CSUM, and hdr_len set to something that is not the header length.
inline Bytes kernel_frame(const TcpSpec& s, const Bytes& payload, uint16_t mss) {
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

inline std::vector<Bytes> segment_all(TsoSegmenter& segmenter, const Bytes& frame,
                                      OffloadResult* result = nullptr) {
  std::vector<Bytes> out;
  const OffloadResult r = segmenter.segment_frame(frame, [&](std::span<const uint8_t> packet) {
    out.emplace_back(packet.begin(), packet.end());
    return true;
  });
  if (result) *result = r;
  return out;
}

inline std::vector<Bytes> coalesce_all(TcpCoalescer& coalescer, const std::vector<Bytes>& packets) {
  for (const Bytes& p : packets) coalescer.add(p);
  std::vector<Bytes> frames;
  EXPECT_TRUE(coalescer.flush([&](std::span<const uint8_t> frame) {
    frames.emplace_back(frame.begin(), frame.end());
    return true;
  }));
  return frames;
}

// The same through add_borrowed and flush_pieces: each frame is its pieces joined.
inline std::vector<Bytes> coalesce_all_borrowed(TcpCoalescer& coalescer,
                                                const std::vector<Bytes>& packets) {
  for (const Bytes& p : packets) coalescer.add_borrowed(p);
  std::vector<Bytes> frames;
  EXPECT_TRUE(coalescer.flush_pieces([&](std::span<const iovec> pieces) {
    EXPECT_LE(pieces.size(), TcpCoalescer::kMaxFramePieces);
    Bytes& frame = frames.emplace_back();
    for (const iovec& piece : pieces) {
      const auto* bytes = static_cast<const uint8_t*>(piece.iov_base);
      frame.insert(frame.end(), bytes, bytes + piece.iov_len);
    }
    return true;
  }));
  return frames;
}

inline VnetHeader header_of(const Bytes& frame) {
  VnetHeader h;
  EXPECT_TRUE(VnetHeader::parse(frame, h));
  return h;
}
inline Bytes packet_of(const Bytes& frame) {
  return Bytes(frame.begin() + VnetHeader::kSize, frame.end());
}
inline Bytes payload_of(const Bytes& p) {
  const size_t ip = ip_header_length(p);
  return Bytes(p.begin() + static_cast<long>(ip + (p[ip + 12] >> 4) * 4u), p.end());
}

// Segments of one flow as a sender's TCP would emit them: `sizes` payload bytes each.
inline std::vector<Bytes> flow_segments(TcpSpec s, const std::vector<size_t>& sizes,
                                        uint8_t last_flags, uint32_t seed = 7) {
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

inline void check_segments(const TcpSpec& s, const Bytes& payload, size_t mss,
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

inline Bytes udp4(const Bytes& payload) {
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

// Checks a merged frame against the segments it was made of.
inline void check_super_packet(const Bytes& frame, const std::vector<Bytes>& segments) {
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

}  // namespace espgw::io

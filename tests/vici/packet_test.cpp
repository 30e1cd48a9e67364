// VICI packets and stream framing: hand-built frames, every packet type, the 512 KiB
// limit, streams cut anywhere, and broken streams.
#include "vici_bridge/vici_packet.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace espgw::vici {
namespace {

std::vector<uint8_t> frame(const std::vector<uint8_t>& body) {
  const size_t n = body.size();
  std::vector<uint8_t> out;
  out.reserve(4 + n);
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(n >> shift));
  for (uint8_t b : body) out.push_back(b);
  return out;
}

std::vector<Packet> one_of_each() {
  Message args;
  args.set("child", "net").set("timeout", uint64_t{2000});
  Message event;
  event.add_section("ike").set("state", "ESTABLISHED");
  event.set_bool("up", true);
  return {
      {PacketType::cmd_request, "initiate", args},
      {PacketType::cmd_request, "version", {}},
      {PacketType::cmd_response, "", args},
      {PacketType::cmd_unknown, "", {}},
      {PacketType::event_register, "ike-updown", {}},
      {PacketType::event_unregister, "ike-updown", {}},
      {PacketType::event_confirm, "", {}},
      {PacketType::event_unknown, "", {}},
      {PacketType::event, "ike-updown", event},
  };
}

std::vector<uint8_t> stream_of(const std::vector<Packet>& packets) {
  std::vector<uint8_t> stream;
  for (const Packet& p : packets) {
    const auto bytes = encode_packet(p);
    stream.insert(stream.end(), bytes.begin(), bytes.end());
  }
  return stream;
}

// A packet of exactly `size` bytes (without prefix): a request whose one value fills it.
Packet packet_of_size(size_t size) {
  // type 1 + name 1+1 + key-value 1 + name 1+1 + length 2
  const size_t overhead = 8;
  Packet p{PacketType::cmd_request, "x", {}};
  p.message.set("v", std::string_view(std::string(std::min<size_t>(size - overhead, 65535), 'a')));
  size_t left = size - overhead - p.message.value("v")->size();
  for (int i = 0; left > 0; ++i) {
    // Each further key-value "kNN" costs 1 + 1 + 3 + 2 bytes plus its value.
    const size_t value = std::min<size_t>(left - 7, 65535);
    p.message.set("k" + std::to_string(100 + i).substr(1),
                  std::string_view(std::string(value, 'b')));
    left -= 7 + value;
  }
  return p;
}

TEST(ViciPacket, EncodesHandBuiltBytes) {
  EXPECT_EQ(encode_packet({PacketType::cmd_request, "version", {}}),
            frame({0, 7, 'v', 'e', 'r', 's', 'i', 'o', 'n'}));
  EXPECT_EQ(encode_packet({PacketType::event_confirm, "", {}}), frame({5}));
  Message m;
  m.set("a", "b");
  EXPECT_EQ(encode_packet({PacketType::cmd_response, "", m}), frame({1, 3, 1, 'a', 0, 1, 'b'}));
  EXPECT_EQ(encode_packet({PacketType::event, "log", m}),
            frame({7, 3, 'l', 'o', 'g', 3, 1, 'a', 0, 1, 'b'}));
}

TEST(ViciPacket, EveryTypeRoundTrips) {
  for (const Packet& p : one_of_each()) {
    const auto bytes = encode_packet(p);
    const PacketResult result = decode_packet(std::span(bytes).subspan(4));
    ASSERT_TRUE(result.packet) << to_string(p.type) << ": " << result.error;
    EXPECT_EQ(*result.packet, p) << to_string(p.type);
  }
}

TEST(ViciPacket, NamesBelongToNamedTypesOnly) {
  EXPECT_THROW(encode_packet({PacketType::cmd_request, "", {}}), std::length_error);
  EXPECT_THROW(encode_packet({PacketType::event, std::string(256, 'e'), {}}), std::length_error);
  EXPECT_NO_THROW(encode_packet({PacketType::event, std::string(255, 'e'), {}}));
  EXPECT_THROW(encode_packet({PacketType::cmd_response, "name", {}}), std::invalid_argument);
  EXPECT_FALSE(decode_packet(std::vector<uint8_t>{0, 0}).packet);            // empty name
  EXPECT_FALSE(decode_packet(std::vector<uint8_t>{3}).packet);               // no name
  EXPECT_FALSE(decode_packet(std::vector<uint8_t>{7, 5, 'a', 'b'}).packet);  // short name
}

TEST(ViciPacket, BadFramesFail) {
  EXPECT_FALSE(decode_packet({}).packet);
  for (uint8_t type : {8, 9, 0x7f, 0xff}) {
    const PacketResult result = decode_packet(std::vector<uint8_t>{type});
    EXPECT_FALSE(result.packet);
    EXPECT_NE(result.error.find("unknown packet type"), std::string::npos) << result.error;
  }
  // A broken message inside a good packet.
  const PacketResult result = decode_packet(std::vector<uint8_t>{1, 2});
  EXPECT_FALSE(result.packet);
  EXPECT_NE(result.error.find("CMD_RESPONSE"), std::string::npos) << result.error;
}

TEST(ViciPacket, LargestPacketIsAccepted) {
  const Packet p = packet_of_size(kMaxPacketSize);
  const auto bytes = encode_packet(p);
  ASSERT_EQ(bytes.size(), kMaxPacketSize + 4);
  FrameReader reader;
  reader.feed(bytes);
  const auto decoded = reader.next();
  ASSERT_TRUE(decoded) << reader.error();
  EXPECT_EQ(*decoded, p);
  EXPECT_THROW(encode_packet(packet_of_size(kMaxPacketSize + 1)), std::length_error);
}

TEST(ViciFrameReader, OversizeLengthFailsBeforeTheBody) {
  for (uint32_t length : {uint32_t(kMaxPacketSize + 1), 0x7fffffffu, 0xffffffffu}) {
    FrameReader reader;
    reader.feed(std::vector<uint8_t>{uint8_t(length >> 24), uint8_t(length >> 16),
                                     uint8_t(length >> 8), uint8_t(length)});
    EXPECT_FALSE(reader.next());
    EXPECT_TRUE(reader.failed());
    EXPECT_NE(reader.error().find("512 KiB"), std::string::npos) << reader.error();
  }
}

TEST(ViciFrameReader, ZeroLengthFrameFails) {
  FrameReader reader;
  reader.feed(std::vector<uint8_t>{0, 0, 0, 0});
  EXPECT_FALSE(reader.next());
  EXPECT_TRUE(reader.failed());
}

TEST(ViciFrameReader, FailureIsFinal) {
  FrameReader reader;
  reader.feed(frame({9}));
  EXPECT_FALSE(reader.next());
  ASSERT_TRUE(reader.failed());
  reader.feed(encode_packet({PacketType::event_confirm, "", {}}));
  EXPECT_FALSE(reader.next());
  EXPECT_TRUE(reader.failed());
}

TEST(ViciFrameReader, OneByteAtATimeYieldsTheSamePackets) {
  const std::vector<Packet> packets = one_of_each();
  const std::vector<uint8_t> stream = stream_of(packets);
  FrameReader reader;
  std::vector<Packet> got;
  for (uint8_t byte : stream) {
    reader.feed(std::span(&byte, 1));
    while (auto p = reader.next()) got.push_back(std::move(*p));
    ASSERT_FALSE(reader.failed()) << reader.error();
  }
  EXPECT_EQ(got, packets);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(ViciFrameReader, AllAtOnceAndRandomChunks) {
  const std::vector<Packet> packets = one_of_each();
  const std::vector<uint8_t> stream = stream_of(packets);
  std::mt19937 rng(1);
  for (int round = 0; round < 200; ++round) {
    FrameReader reader;
    std::vector<Packet> got;
    size_t pos = 0;
    while (pos < stream.size()) {
      const size_t n = round == 0 ? stream.size()
                                  : std::min(stream.size() - pos,
                                             std::uniform_int_distribution<size_t>(1, 64)(rng));
      reader.feed(std::span(stream).subspan(pos, n));
      pos += n;
      while (auto p = reader.next()) got.push_back(std::move(*p));
    }
    ASSERT_FALSE(reader.failed()) << reader.error();
    ASSERT_EQ(got, packets) << "round " << round;
  }
}

TEST(ViciFrameReader, TruncatedStreamWaitsWithoutFailing) {
  const auto bytes = encode_packet(one_of_each()[0]);
  for (size_t length = 0; length < bytes.size(); ++length) {
    FrameReader reader;
    reader.feed(std::span(bytes).first(length));
    EXPECT_FALSE(reader.next());
    EXPECT_FALSE(reader.failed()) << length;
    EXPECT_EQ(reader.buffered(), length);
  }
}

TEST(ViciFrameReader, EveryTruncatedBodyFails) {
  // A frame whose length prefix says less than the packet needs: the packet layer sees a
  // truncated name or message.
  const auto bytes = encode_packet(one_of_each()[0]);
  const std::span<const uint8_t> body = std::span(bytes).subspan(4);
  size_t valid = 0;
  for (size_t length = 1; length < body.size(); ++length) {
    std::vector<uint8_t> cut(body.begin(), body.begin() + static_cast<ptrdiff_t>(length));
    FrameReader reader;
    reader.feed(frame(cut));
    if (reader.next()) {
      ++valid;
    } else {
      EXPECT_TRUE(reader.failed()) << length;
    }
  }
  // Cut after the name, or after the message's first key-value: those are whole packets.
  EXPECT_EQ(valid, 2u);
}

}  // namespace
}  // namespace espgw::vici

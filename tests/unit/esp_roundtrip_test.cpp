// Encapsulate then decapsulate across the whole configuration matrix, checking the wire
// format on the way: outer headers, checksums, ESP header, IV, padding and counters.
#include <gtest/gtest.h>

#include <tuple>

#include "esp/checksum.h"
#include "esp/decap.h"
#include "esp/encap.h"
#include "esp/esp_format.h"
#include "esp/wire.h"
#include "packet/ip_format.h"
#include "support/sequential_esp.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::esp {
namespace {

using packet::kIpv4HeaderLength;
using packet::kIpv6HeaderLength;
using packet::kProtocolEsp;
using packet::kProtocolUdp;
using packet::kUdpHeaderLength;
using test::decapsulate;
using test::decapsulate_wire;
using test::encapsulate;
using test::InboundSaTable;

using crypto::AeadAlgorithm;

struct Case {
  AeadAlgorithm algorithm;
  bool esn, ipv6_outer, udp, ipv6_inner;
  const char* encrypt_backend;
  const char* decrypt_backend;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name(crypto::algorithm_name(c.algorithm));
  for (auto& ch : name)
    if (ch == '-') ch = '_';
  name += c.esn ? "_esn" : "_noesn";
  name += c.ipv6_outer ? "_out6" : "_out4";
  name += c.udp ? "_udp" : "_raw";
  name += c.ipv6_inner ? "_in6" : "_in4";
  name += std::string("_") + (c.encrypt_backend[0] == 'i' ? "mb" : "ossl") + "_to_" +
          (c.decrypt_backend[0] == 'i' ? "mb" : "ossl");
  return name;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto algorithm :
       {AeadAlgorithm::aes_gcm_128, AeadAlgorithm::aes_gcm_256, AeadAlgorithm::chacha20_poly1305})
    for (bool esn : {false, true})
      for (bool ipv6_outer : {false, true})
        for (bool udp : {false, true})
          for (bool ipv6_inner : {false, true}) {
            cases.push_back({algorithm, esn, ipv6_outer, udp, ipv6_inner, "ipsec-mb", "ipsec-mb"});
            // Across backends: what ipsec-mb seals OpenSSL must open, and back.
            if (!udp && !ipv6_outer) {
              cases.push_back({algorithm, esn, ipv6_outer, udp, ipv6_inner, "ipsec-mb", "openssl"});
              cases.push_back({algorithm, esn, ipv6_outer, udp, ipv6_inner, "openssl", "ipsec-mb"});
            }
          }
  return cases;
}

class EspRoundTrip : public ::testing::TestWithParam<Case> {};

void check_outer_headers(const Case& c, const PacketBuffer& packet, size_t& esp_offset) {
  const uint8_t* p = packet.data();
  size_t offset;
  uint8_t protocol;
  if (c.ipv6_outer) {
    ASSERT_EQ(p[0] >> 4, 6);
    ASSERT_EQ(load_be16(p + 4) + kIpv6HeaderLength, packet.size());
    protocol = p[6];
    offset = kIpv6HeaderLength;
  } else {
    ASSERT_EQ(p[0], 0x45);
    ASSERT_EQ(load_be16(p + 2), packet.size());
    ASSERT_EQ(ipv4_header_checksum(p, kIpv4HeaderLength), 0) << "IPv4 header checksum";
    ASSERT_EQ(p[1], c.ipv6_inner ? 0 : 0x10) << "TOS copied from the inner header";
    protocol = p[9];
    offset = kIpv4HeaderLength;
  }
  if (c.udp) {
    ASSERT_EQ(protocol, kProtocolUdp);
    const uint8_t* u = p + offset;
    EXPECT_EQ(load_be16(u), 4500);
    EXPECT_EQ(load_be16(u + 2), 4500);
    EXPECT_EQ(load_be16(u + 4), packet.size() - offset);
    if (c.ipv6_outer) {
      // Verifying a correct checksum over the pseudo-header gives 0 (or all ones).
      const uint16_t stored = load_be16(u + 6);
      ASSERT_NE(stored, 0) << "UDP over IPv6 must carry a checksum";
      uint8_t copy[4096];
      std::memcpy(copy, u, packet.size() - offset);
      store_be16(copy + 6, 0);
      EXPECT_EQ(udp6_checksum(p + 8, p + 24, copy, packet.size() - offset), stored);
    } else {
      EXPECT_EQ(load_be16(u + 6), 0) << "RFC 3948: UDP checksum 0 over IPv4";
    }
    offset += kUdpHeaderLength;
  } else {
    ASSERT_EQ(protocol, kProtocolEsp);
  }
  esp_offset = offset;
}

TEST_P(EspRoundTrip, DecapsulateReturnsTheInnerPacket) {
  const Case c = GetParam();
  SaConfig config = test::make_sa_config(c.algorithm, c.esn, c.ipv6_outer, c.udp);
  OutboundSa out(config, *crypto::find_backend(c.encrypt_backend));
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, *crypto::find_backend(c.decrypt_backend)));
  EngineCounters engine;
  if (c.esn) {
    // Cross the 2^32 boundary; the receiver has seen the packets before it.
    out.set_next_sequence(0xFFFFFFFEull);
    ASSERT_EQ(table.find(config.spi)->replay_window().commit(0xFFFFFFFDull),
              ReplayWindow::Verdict::accept);
  }

  uint64_t inner_bytes = 0;
  for (size_t length : {0, 1, 2, 3, 4, 5, 100, 1371, 1400}) {
    auto inner = c.ipv6_inner ? test::make_ipv6_packet(length) : test::make_ipv4_packet(length);
    PacketBuffer packet;
    ASSERT_TRUE(packet.assign(inner));
    const uint64_t sequence = out.last_sequence() + 1;
    ASSERT_EQ(encapsulate(out, packet), DropReason::none);

    size_t esp_offset = 0;
    check_outer_headers(c, packet, esp_offset);
    const uint8_t* esp = packet.data() + esp_offset;
    EXPECT_EQ(load_be32(esp), config.spi);
    EXPECT_EQ(load_be32(esp + 4), static_cast<uint32_t>(sequence));
    EXPECT_EQ(load_be64(esp + 8), sequence) << "IV is the 64-bit sequence number";
    const size_t encrypted = packet.size() - esp_offset - 16 - kIcvLength;
    EXPECT_EQ(encrypted % 4, 0u);
    EXPECT_LE(encrypted - inner.size() - 2, 3u) << "minimal padding";

    auto result = decapsulate_wire(table, engine, packet);
    ASSERT_EQ(result.reason, DropReason::none) << drop_reason_name(result.reason);
    ASSERT_EQ(result.kind, WireKind::esp);
    ASSERT_EQ(std::vector<uint8_t>(packet.bytes().begin(), packet.bytes().end()), inner);
    inner_bytes += inner.size();
  }
  auto in = table.find(config.spi);
  EXPECT_EQ(out.counters().packets(), 9u);
  EXPECT_EQ(out.counters().bytes(), inner_bytes);
  EXPECT_EQ(in->counters().packets(), 9u);
  EXPECT_EQ(in->counters().bytes(), inner_bytes);
  EXPECT_EQ(in->counters().total_drops(), 0u);
  EXPECT_EQ(engine.total_drops(), 0u);
}

TEST(EspEncap, BareIpv6HeaderRoundTrips) {
  // Found by fuzz_encap_roundtrip: a 40-byte IPv6 packet (payload length 0) that encap
  // accepted and decap refused.
  SaConfig config = test::make_sa_config(AeadAlgorithm::chacha20_poly1305, false, true, false);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend()));
  EngineCounters engine;
  auto inner = test::make_ipv6_packet(0);
  inner.resize(40);
  store_be16(&inner[4], 0);
  inner[6] = 13;
  PacketBuffer packet;
  ASSERT_TRUE(packet.assign(inner));
  ASSERT_EQ(encapsulate(out, packet), DropReason::none);
  ASSERT_EQ(decapsulate_wire(table, engine, packet).reason, DropReason::none);
  EXPECT_EQ(std::vector<uint8_t>(packet.bytes().begin(), packet.bytes().end()), inner);
}

INSTANTIATE_TEST_SUITE_P(Matrix, EspRoundTrip, ::testing::ValuesIn(all_cases()), case_name);

TEST(EspEncap, OmitOuterHeadersStartsAtTheSpi) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, true);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  PacketBuffer packet;
  auto inner = test::make_ipv4_packet(10);
  ASSERT_TRUE(packet.assign(inner));
  ASSERT_EQ(encapsulate(out, packet, OuterHeaders::omit), DropReason::none);
  EXPECT_EQ(load_be32(packet.data()), config.spi);
  EXPECT_EQ(inner.size() % 4, 2u) << "38 bytes + trailer needs no padding";
  EXPECT_EQ(packet.size(), 16 + inner.size() + 2 + kIcvLength);

  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::openssl_backend()));
  EngineCounters engine;
  ASSERT_EQ(decapsulate(table, engine, packet), DropReason::none);
  EXPECT_EQ(std::vector<uint8_t>(packet.bytes().begin(), packet.bytes().end()), inner);
}

TEST(EspEncap, DfIsCopiedFromTheInnerIpv4Header) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  for (bool df : {false, true}) {
    PacketBuffer packet;
    ASSERT_TRUE(packet.assign(test::make_ipv4_packet(10, 0xAB, df)));
    ASSERT_EQ(encapsulate(out, packet), DropReason::none);
    EXPECT_EQ((packet.data()[6] & 0x40) != 0, df);
  }
}

TEST(EspEncap, SequenceNumbersAreNeverReusedAndExhaustionIsCounted) {
  for (bool esn : {false, true}) {
    SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, esn, false, false);
    OutboundSa out(config, crypto::ipsec_mb_backend());
    const uint64_t last = esn ? ~uint64_t{0} : 0xFFFFFFFFull;
    out.set_next_sequence(last - 1);
    for (int i = 0; i < 2; ++i) {
      PacketBuffer packet;
      ASSERT_TRUE(packet.assign(test::make_ipv4_packet(10)));
      ASSERT_EQ(encapsulate(out, packet), DropReason::none);
    }
    EXPECT_EQ(out.last_sequence(), last);
    for (int i = 0; i < 3; ++i) {
      PacketBuffer packet;
      ASSERT_TRUE(packet.assign(test::make_ipv4_packet(10)));
      EXPECT_EQ(encapsulate(out, packet), DropReason::sequence_exhausted);
    }
    EXPECT_EQ(out.counters().drops(DropReason::sequence_exhausted), 3u);
    EXPECT_EQ(out.counters().packets(), 2u);
  }
}

}  // namespace
}  // namespace espgw::esp

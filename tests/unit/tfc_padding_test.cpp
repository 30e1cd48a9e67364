// TFC padding on send (RFC 4303 2.7): an SA with tfc_pad_to pads smaller inner packets
// with zeros up to it, before the ESP trailer's own padding; our receiver strips it by the
// inner IP length. (scapy's view of the same packets: tests/interop/scapy_esp_interop.py.)
#include <gtest/gtest.h>

#include <set>

#include "esp/encap.h"
#include "esp/esp_format.h"
#include "packet/ip_format.h"
#include "support/sequential_esp.h"
#include "unit/test_packets.h"

namespace espgw::esp {
namespace {

using crypto::AeadAlgorithm;
using test::decapsulate;
using test::encapsulate;
using test::InboundSaTable;

std::vector<uint8_t> bytes_of(const PacketBuffer& packet) {
  return {packet.bytes().begin(), packet.bytes().end()};
}

// Encapsulated without outer headers: the size is the ESP packet's.
size_t esp_size_of(OutboundSa& sa, const std::vector<uint8_t>& inner, PacketBuffer& packet) {
  EXPECT_TRUE(packet.assign(inner));
  EXPECT_EQ(encapsulate(sa, packet, OuterHeaders::omit), DropReason::none);
  return packet.size();
}

TEST(TfcPadding, SmallPacketsOfBothFamiliesLeaveWithOneSizeAndDecryptToThemselves) {
  for (auto algorithm : {AeadAlgorithm::aes_gcm_128, AeadAlgorithm::chacha20_poly1305}) {
    SaConfig config = test::make_sa_config(algorithm, false, false, false);
    config.tfc_pad_to = 1000;
    OutboundSa out(config, crypto::ipsec_mb_backend());
    InboundSaTable table;
    table.add(std::make_shared<InboundSa>(config, crypto::openssl_backend()));
    EngineCounters engine;
    std::set<size_t> sizes;
    for (size_t payload : {0, 1, 2, 3, 56, 500, 952}) {
      for (const auto& inner : {test::make_ipv4_packet(payload), test::make_ipv6_packet(payload)}) {
        ASSERT_LE(inner.size(), 1000u);
        PacketBuffer packet;
        sizes.insert(esp_size_of(out, inner, packet));
        ASSERT_EQ(decapsulate(table, engine, packet), DropReason::none);
        EXPECT_EQ(bytes_of(packet), inner) << inner.size() << " bytes";
      }
    }
    // SPI, sequence number, IV, 1000 bytes, trailer (1000 + 2 rounded up to 4), ICV.
    EXPECT_EQ(sizes, (std::set<size_t>{kEspHeaderLength + kExplicitIvLength + 1004 + kIcvLength}));
  }
}

TEST(TfcPadding, CbcPadsToTheTargetAndTheBlockTogether) {
  SaConfig config =
      test::make_cbc_sa_config(crypto::EncryptionAlgorithm::aes_cbc_128,
                               crypto::IntegrityAlgorithm::hmac_sha256_128, false, true, true);
  config.tfc_pad_to = 1000;
  OutboundSa out(config, crypto::ipsec_mb_backend());
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend()));
  EngineCounters engine;
  for (size_t payload : {0, 13, 900}) {
    const auto inner = test::make_ipv4_packet(payload);
    PacketBuffer packet;
    ASSERT_TRUE(packet.assign(inner));
    ASSERT_EQ(encapsulate(out, packet), DropReason::none);
    // IPv6, UDP, SPI, sequence number, 16-byte IV, 1000 + 2 rounded up to 16, 16-byte ICV.
    EXPECT_EQ(packet.size(), 40u + 8 + 8 + 16 + 1008 + 16);
    ASSERT_EQ(test::decapsulate_wire(table, engine, packet).reason, DropReason::none);
    EXPECT_EQ(bytes_of(packet), inner);
  }
}

TEST(TfcPadding, PacketsAtOrAboveTheTargetAreNotPadded) {
  SaConfig plain = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, true);
  SaConfig padded = plain;
  padded.tfc_pad_to = 200;
  OutboundSa without(plain, crypto::ipsec_mb_backend());
  OutboundSa with(padded, crypto::ipsec_mb_backend());
  for (size_t payload : {200 - 28, 1000}) {
    const auto inner = test::make_ipv4_packet(payload);
    PacketBuffer a, b;
    EXPECT_EQ(esp_size_of(with, inner, a), esp_size_of(without, inner, b)) << inner.size();
  }
}

TEST(TfcPadding, CountersCountTheInnerPacketNotItsPadding) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  config.tfc_pad_to = 1000;
  OutboundSa out(config, crypto::ipsec_mb_backend());
  InboundSaTable table;
  auto in = std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend());
  table.add(in);
  EngineCounters engine;
  const auto inner = test::make_ipv4_packet(10);
  PacketBuffer packet;
  esp_size_of(out, inner, packet);
  ASSERT_EQ(decapsulate(table, engine, packet), DropReason::none);
  EXPECT_EQ(out.counters().bytes(), inner.size());
  EXPECT_EQ(in->counters().bytes(), inner.size());
}

TEST(TfcPadding, ATightBufferPadsLessInsteadOfDropping) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  config.tfc_pad_to = 1000;
  OutboundSa out(config, crypto::ipsec_mb_backend());
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend()));
  EngineCounters engine;
  const auto inner = test::make_ipv4_packet(10);
  // Room for 300 bytes after the inner packet: what the trailer and ICV need is kept free.
  PacketBuffer packet(PacketBuffer::kDefaultHeadroom + inner.size() + 300);
  ASSERT_TRUE(packet.assign(inner));
  ASSERT_EQ(encapsulate(out, packet, OuterHeaders::omit), DropReason::none);
  EXPECT_GT(packet.size(), inner.size() + 250);
  EXPECT_LE(packet.size(), kEspHeaderLength + kExplicitIvLength + inner.size() + 300);
  ASSERT_EQ(decapsulate(table, engine, packet), DropReason::none);
  EXPECT_EQ(bytes_of(packet), inner);
}

TEST(TfcPadding, CappedAtTheSasTunnelMtu) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  config.tfc_pad_to = UINT32_MAX;  // charon's tfc_padding = mtu
  OutboundSa out(config, crypto::ipsec_mb_backend());
  out.cap_tfc_padding(1400);
  EXPECT_EQ(out.config().tfc_pad_to, 1400u);
  PacketBuffer packet;
  EXPECT_EQ(esp_size_of(out, test::make_ipv4_packet(1), packet),
            kEspHeaderLength + kExplicitIvLength + 1404 + kIcvLength);
  out.cap_tfc_padding(1500);  // only ever lowered
  EXPECT_EQ(out.config().tfc_pad_to, 1400u);
}

}  // namespace
}  // namespace espgw::esp

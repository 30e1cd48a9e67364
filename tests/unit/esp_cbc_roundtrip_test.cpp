// ESP with AES-CBC + HMAC through the engine's encapsulation and decapsulation: wire
// layout (16-byte IV, block padding, truncated ICV), every cipher and HMAC pairing with
// and without ESN, across backends, and the drops: forged ICV (nothing decrypted),
// ciphertext off the block size, bad padding.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

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

using crypto::EncryptionAlgorithm;
using crypto::IntegrityAlgorithm;
using test::decapsulate;
using test::decapsulate_wire;
using test::encapsulate;
using test::InboundSaTable;

struct Case {
  EncryptionAlgorithm cipher;
  IntegrityAlgorithm integrity;
  bool esn;
  bool ipv6_outer;
  bool udp;
  const char* encrypt_backend;
  const char* decrypt_backend;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string name = std::string(crypto::algorithm_name(c.cipher)) + "_" +
                     std::string(crypto::integrity_name(c.integrity)) + (c.esn ? "_esn" : "") +
                     (c.ipv6_outer ? "_v6" : "_v4") + (c.udp ? "_udp" : "") + "_" +
                     c.encrypt_backend + "_to_" + c.decrypt_backend;
  for (char& ch : name)
    if (ch == '-') ch = '_';
  return name;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (auto cipher : {EncryptionAlgorithm::aes_cbc_128, EncryptionAlgorithm::aes_cbc_192,
                      EncryptionAlgorithm::aes_cbc_256})
    for (auto integrity :
         {IntegrityAlgorithm::hmac_sha1_96, IntegrityAlgorithm::hmac_sha256_128,
          IntegrityAlgorithm::hmac_sha384_192, IntegrityAlgorithm::hmac_sha512_256})
      for (bool esn : {false, true}) {
        cases.push_back({cipher, integrity, esn, false, false, "ipsec-mb", "ipsec-mb"});
        cases.push_back({cipher, integrity, esn, false, false, "ipsec-mb", "openssl"});
        cases.push_back({cipher, integrity, esn, false, false, "openssl", "ipsec-mb"});
        cases.push_back({cipher, integrity, esn, true, true, "ipsec-mb", "ipsec-mb"});
        cases.push_back({cipher, integrity, esn, false, true, "openssl", "openssl"});
      }
  return cases;
}

size_t outer_length(const Case& c) {
  return (c.ipv6_outer ? packet::kIpv6HeaderLength : packet::kIpv4HeaderLength) +
         (c.udp ? packet::kUdpHeaderLength : 0);
}

class EspCbcRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(EspCbcRoundTrip, DecapsulateReturnsTheInnerPacket) {
  const Case c = GetParam();
  SaConfig config = test::make_cbc_sa_config(c.cipher, c.integrity, c.esn, c.ipv6_outer, c.udp);
  OutboundSa out(config, *crypto::find_backend(c.encrypt_backend));
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, *crypto::find_backend(c.decrypt_backend)));
  EngineCounters engine;
  if (c.esn) {
    out.set_next_sequence(0xFFFFFFFEull);
    ASSERT_EQ(table.find(config.spi)->replay_window().commit(0xFFFFFFFDull),
              ReplayWindow::Verdict::accept);
  }
  const size_t icv_length = crypto::integrity_icv_length(c.integrity);
  const EspLayout layout = esp_layout(c.cipher, c.integrity);
  ASSERT_EQ(layout.iv_length, 16u);
  ASSERT_EQ(layout.icv_length, icv_length);

  uint64_t inner_bytes = 0;
  size_t packets = 0;
  for (size_t length : {0, 1, 2, 13, 14, 15, 16, 100, 1371, 1400}) {
    for (bool ipv6_inner : {false, true}) {
      auto inner = ipv6_inner ? test::make_ipv6_packet(length) : test::make_ipv4_packet(length);
      PacketBuffer packet;
      ASSERT_TRUE(packet.assign(inner));
      const uint64_t sequence = out.last_sequence() + 1;
      ASSERT_EQ(encapsulate(out, packet), DropReason::none);
      const uint8_t* esp = packet.data() + outer_length(c);
      EXPECT_EQ(load_be32(esp), config.spi);
      EXPECT_EQ(load_be32(esp + 4), static_cast<uint32_t>(sequence));
      EXPECT_NE(load_be64(esp + 8), sequence) << "the IV is not the sequence number";
      const size_t encrypted = packet.size() - outer_length(c) - 8 - 16 - icv_length;
      EXPECT_EQ(encrypted % 16, 0u);
      EXPECT_LE(encrypted - inner.size() - 2, 15u) << "minimal padding";
      EXPECT_LE(packet.size() - inner.size(), max_esp_overhead(c.ipv6_outer, c.udp, layout));

      auto result = decapsulate_wire(table, engine, packet);
      ASSERT_EQ(result.reason, DropReason::none) << drop_reason_name(result.reason);
      ASSERT_EQ(std::vector<uint8_t>(packet.bytes().begin(), packet.bytes().end()), inner);
      inner_bytes += inner.size();
      ++packets;
    }
  }
  auto in = table.find(config.spi);
  EXPECT_EQ(out.counters().packets(), packets);
  EXPECT_EQ(in->counters().packets(), packets);
  EXPECT_EQ(in->counters().bytes(), inner_bytes);
  EXPECT_EQ(in->counters().total_drops(), 0u);
  EXPECT_EQ(engine.total_drops(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllTransforms, EspCbcRoundTrip, ::testing::ValuesIn(all_cases()),
                         case_name);

class EspCbcDrops : public ::testing::Test {
 protected:
  EspCbcDrops()
      : config_(test::make_cbc_sa_config(EncryptionAlgorithm::aes_cbc_256,
                                         IntegrityAlgorithm::hmac_sha256_128, false, false, false)),
        out_(config_, crypto::ipsec_mb_backend()) {
    table_.add(std::make_shared<InboundSa>(config_, crypto::ipsec_mb_backend()));
  }
  InboundSa& in() { return *table_.find(config_.spi); }

  // An ESP packet (no outer headers) carrying `payload` as the plaintext payload as is:
  // whatever padding and trailer it holds, with a valid ICV.
  PacketBuffer sealed(const std::vector<uint8_t>& payload, uint64_t sequence) {
    std::vector<uint8_t> esp(8 + 16 + payload.size() + 16);
    store_be32(&esp[0], config_.spi);
    store_be32(&esp[4], static_cast<uint32_t>(sequence));
    std::copy(payload.begin(), payload.end(), esp.begin() + 24);
    in().crypto().seal_packet(sequence, esp.data(), payload.size());
    PacketBuffer packet;
    EXPECT_TRUE(packet.assign(esp));
    return packet;
  }

  SaConfig config_;
  OutboundSa out_;
  InboundSaTable table_;
  EngineCounters engine_;
};

TEST_F(EspCbcDrops, AForgedIcvIsCountedAsAnIcvFailure) {
  auto inner = test::make_ipv4_packet(40);
  PacketBuffer packet;
  ASSERT_TRUE(packet.assign(inner));
  ASSERT_EQ(encapsulate(out_, packet, OuterHeaders::omit), DropReason::none);
  packet.data()[30] ^= 1;  // a ciphertext byte
  EXPECT_EQ(decapsulate(table_, engine_, packet), DropReason::icv_failure);
  EXPECT_EQ(in().counters().drops(DropReason::icv_failure), 1u);
  // The sequence number was not consumed: the genuine packet still gets in.
  packet.data()[30] ^= 1;
  EXPECT_EQ(decapsulate(table_, engine_, packet), DropReason::none);
}

TEST_F(EspCbcDrops, CiphertextOffTheBlockSizeIsMalformed) {
  std::vector<uint8_t> esp(8 + 16 + 20 + 16, 0);
  store_be32(&esp[0], config_.spi);
  store_be32(&esp[4], 1);
  PacketBuffer packet;
  ASSERT_TRUE(packet.assign(esp));
  EXPECT_EQ(decapsulate(table_, engine_, packet), DropReason::malformed);
  std::vector<uint8_t> short_esp(8 + 16 + 16 + 15, 0);
  store_be32(&short_esp[0], config_.spi);
  store_be32(&short_esp[4], 1);
  ASSERT_TRUE(packet.assign(short_esp));
  EXPECT_EQ(decapsulate(table_, engine_, packet), DropReason::too_short);
}

TEST_F(EspCbcDrops, AuthenticPacketWithBadPaddingIsDropped) {
  auto inner = test::make_ipv4_packet(12);  // 40 bytes: 6 bytes of padding to 48
  std::vector<uint8_t> payload = inner;
  for (uint8_t i = 1; i <= 6; ++i) payload.push_back(i);
  payload.push_back(6);
  payload.push_back(packet::kProtocolIpv4);
  ASSERT_EQ(payload.size() % 16, 0u);
  PacketBuffer good = sealed(payload, 1);
  EXPECT_EQ(decapsulate(table_, engine_, good), DropReason::none);
  EXPECT_EQ(std::vector<uint8_t>(good.bytes().begin(), good.bytes().end()), inner);

  payload[inner.size() + 2] = 9;  // padding must run 1, 2, 3, ...
  PacketBuffer bad = sealed(payload, 2);
  EXPECT_EQ(decapsulate(table_, engine_, bad), DropReason::bad_padding);
  payload[inner.size() + 2] = 3;
  payload[payload.size() - 2] = 47;  // pad length beyond the payload
  PacketBuffer beyond = sealed(payload, 3);
  EXPECT_EQ(decapsulate(table_, engine_, beyond), DropReason::bad_padding);
}

TEST(EspCbcLayout, OverheadGrowsWithIvPaddingAndIcv) {
  const EspLayout sha512 =
      esp_layout(EncryptionAlgorithm::aes_cbc_128, IntegrityAlgorithm::hmac_sha512_256);
  // IPv4 20 + ESP 8 + IV 16 + padding 15 + trailer 2 + ICV 32.
  EXPECT_EQ(max_esp_overhead(false, false, sha512), 93u);
  EXPECT_EQ(max_esp_overhead(true, true, sha512), 93u + 20u + 8u);
  EXPECT_EQ(max_esp_overhead(false, false), max_esp_overhead(false, false, kAeadLayout));
  EXPECT_LE(kMaxEspTailLength, encap_tailroom());
}

}  // namespace
}  // namespace espgw::esp

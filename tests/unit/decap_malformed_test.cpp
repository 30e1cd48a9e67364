// Every malformed or hostile packet is dropped with exactly one counted reason, nothing
// else changes, and the SA keeps working afterwards.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "esp/decap.h"
#include "esp/encap.h"
#include "esp/esp_format.h"
#include "esp/wire.h"
#include "support/sequential_esp.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::esp {
namespace {

using test::decapsulate;
using test::encapsulate;
using test::InboundSaTable;

using crypto::AeadAlgorithm;

class DecapDrops : public ::testing::Test {
 protected:
  DecapDrops()
      : config_(test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false)),
        out_(config_, crypto::ipsec_mb_backend()) {
    table_.add(std::make_shared<InboundSa>(config_, crypto::ipsec_mb_backend()));
  }

  InboundSa& in() { return *table_.find(config_.spi); }

  // An ESP packet (SPI..ICV) around an arbitrary plaintext payload, sealed correctly, so
  // that the checks after ICV verification can be reached with any trailer.
  PacketBuffer seal_payload(std::vector<uint8_t> payload, uint64_t sequence) {
    PacketBuffer packet;
    std::vector<uint8_t> esp(16 + payload.size() + kIcvLength);
    store_be32(&esp[0], config_.spi);
    store_be32(&esp[4], static_cast<uint32_t>(sequence));
    store_be64(&esp[8], sequence);
    std::copy(payload.begin(), payload.end(), esp.begin() + 16);
    in().crypto().seal(sequence, &esp[8], &esp[16], payload.size(), &esp[16 + payload.size()]);
    EXPECT_TRUE(packet.assign(esp));
    return packet;
  }

  // Payload = inner + minimal padding + pad length + next header.
  static std::vector<uint8_t> payload_for(std::vector<uint8_t> inner, uint8_t next_header) {
    size_t padding = (4 - (inner.size() + 2) % 4) % 4;
    for (size_t i = 0; i < padding; ++i) inner.push_back(static_cast<uint8_t>(i + 1));
    inner.push_back(static_cast<uint8_t>(padding));
    inner.push_back(next_header);
    return inner;
  }

  // Checks that decap drops with `expected`, that it is the only counter that moved, and
  // that a valid packet still passes afterwards (no state was lost).
  void expect_drop(PacketBuffer packet, DropReason expected, bool counted_on_engine = false) {
    const uint64_t sa_drops = in().counters().total_drops();
    const uint64_t engine_drops = engine_.total_drops();
    const uint64_t reason_before =
        counted_on_engine ? engine_.drops(expected) : in().counters().drops(expected);
    EXPECT_EQ(decapsulate(table_, engine_, packet), expected) << drop_reason_name(expected);
    const uint64_t reason_after =
        counted_on_engine ? engine_.drops(expected) : in().counters().drops(expected);
    EXPECT_EQ(reason_after, reason_before + 1);
    EXPECT_EQ(in().counters().total_drops() + engine_.total_drops(), sa_drops + engine_drops + 1);
    expect_valid_packet_passes();
  }

  void expect_valid_packet_passes() {
    PacketBuffer ok;
    auto inner = test::make_ipv4_packet(33);
    ASSERT_TRUE(ok.assign(inner));
    ASSERT_EQ(encapsulate(out_, ok, OuterHeaders::omit), DropReason::none);
    const uint64_t packets = in().counters().packets();
    ASSERT_EQ(decapsulate(table_, engine_, ok), DropReason::none);
    EXPECT_EQ(in().counters().packets(), packets + 1);
  }

  uint64_t fresh_sequence() { return out_.last_sequence() + 1000 + extra_++; }

  SaConfig config_;
  OutboundSa out_;
  InboundSaTable table_;
  EngineCounters engine_;
  uint64_t extra_ = 0;
};

TEST_F(DecapDrops, TooShortForAnEspHeader) {
  PacketBuffer p;
  const uint8_t bytes[] = {0, 0, 0x10};
  ASSERT_TRUE(p.assign(bytes));
  expect_drop(std::move(p), DropReason::too_short, true);
}

TEST_F(DecapDrops, UnknownSpi) {
  PacketBuffer p = seal_payload(payload_for(test::make_ipv4_packet(5), 4), 1);
  store_be32(p.data(), 0xDEAD);
  expect_drop(std::move(p), DropReason::no_sa, true);
}

TEST_F(DecapDrops, TooShortForIvAndIcv) {
  PacketBuffer p;
  std::vector<uint8_t> bytes(20, 0);
  store_be32(&bytes[0], config_.spi);
  store_be32(&bytes[4], 7);
  ASSERT_TRUE(p.assign(bytes));
  expect_drop(std::move(p), DropReason::too_short);
}

TEST_F(DecapDrops, MisalignedCiphertext) {
  PacketBuffer p = seal_payload(payload_for(test::make_ipv4_packet(5), 4), fresh_sequence());
  p.push_back(1)[0] = 0;
  expect_drop(std::move(p), DropReason::malformed);
}

TEST_F(DecapDrops, IcvFailureForAnyFlippedBit) {
  for (size_t byte : {4u, 8u, 16u, 30u}) {
    const uint64_t sequence = fresh_sequence();
    PacketBuffer p = seal_payload(payload_for(test::make_ipv4_packet(20), 4), sequence);
    p.data()[byte] ^= 0x01;
    // Flipping the sequence number moves it; it must still be refused, by the ICV.
    expect_drop(std::move(p), DropReason::icv_failure);
  }
  PacketBuffer p = seal_payload(payload_for(test::make_ipv4_packet(20), 4), fresh_sequence());
  p.data()[p.size() - 1] ^= 0x80;
  expect_drop(std::move(p), DropReason::icv_failure);
}

TEST_F(DecapDrops, IcvFailureDoesNotMoveTheWindow) {
  const uint64_t sequence = fresh_sequence();
  PacketBuffer forged = seal_payload(payload_for(test::make_ipv4_packet(20), 4), sequence);
  forged.data()[20] ^= 1;
  expect_drop(std::move(forged), DropReason::icv_failure);
  // The genuine packet with that number must still be accepted.
  PacketBuffer genuine = seal_payload(payload_for(test::make_ipv4_packet(20), 4), sequence);
  EXPECT_EQ(decapsulate(table_, engine_, genuine), DropReason::none);
}

TEST_F(DecapDrops, ReplayAndOutsideWindow) {
  const uint64_t sequence = fresh_sequence();
  auto payload = payload_for(test::make_ipv4_packet(20), 4);
  PacketBuffer first = seal_payload(payload, sequence);
  ASSERT_EQ(decapsulate(table_, engine_, first), DropReason::none);
  expect_drop(seal_payload(payload, sequence), DropReason::replayed);
  PacketBuffer far_ahead = seal_payload(payload, sequence + 5000);
  ASSERT_EQ(decapsulate(table_, engine_, far_ahead), DropReason::none);
  out_.set_next_sequence(sequence + 5001);  // the sender's later packets are ahead too
  expect_drop(seal_payload(payload, sequence), DropReason::outside_window);
}

// A worker finishes one SA's packets of a batch together (one replay-lock acquisition):
// each still gets its own verdict, in the same precedence as one at a time.
TEST_F(DecapDrops, PacketsFinishedTogetherGetTheirOwnVerdicts) {
  const uint64_t sequence = fresh_sequence();
  const auto inner = test::make_ipv4_packet(20);
  const auto good = payload_for(inner, 4);
  auto bad_padding = test::make_ipv4_packet(23);
  for (uint8_t b : {1, 2, 4, 3, 4}) bad_padding.push_back(b);
  std::vector<PacketBuffer> packets;
  packets.push_back(seal_payload(good, sequence));
  packets.push_back(seal_payload(good, sequence));  // the same number twice in one batch
  packets.push_back(seal_payload(bad_padding, sequence + 1));
  packets.push_back(seal_payload(good, sequence + 2));
  std::vector<PreparedDecap> prepared(packets.size());
  std::vector<FinishItem> items;
  for (size_t i = 0; i < packets.size(); ++i) {
    ASSERT_EQ(decap_check(in(), packets[i], prepared[i]), DropReason::none);
    ASSERT_EQ(decap_open(prepared[i], packets[i]), DropReason::none);
    items.push_back({&prepared[i], &packets[i], DropReason::none, 0});
  }
  const uint64_t accepted = in().counters().packets();
  const uint64_t replayed = in().counters().drops(DropReason::replayed);
  const uint64_t padding = in().counters().drops(DropReason::bad_padding);
  decap_finish_each(items);
  EXPECT_EQ(items[0].reason, DropReason::none);
  EXPECT_EQ(items[1].reason, DropReason::replayed);
  EXPECT_EQ(items[2].reason, DropReason::bad_padding);
  EXPECT_EQ(items[3].reason, DropReason::none);
  EXPECT_EQ(in().counters().packets(), accepted + 2);
  EXPECT_EQ(in().counters().drops(DropReason::replayed), replayed + 1);
  EXPECT_EQ(in().counters().drops(DropReason::bad_padding), padding + 1);
  for (size_t i : {0u, 3u})
    EXPECT_TRUE(std::equal(inner.begin(), inner.end(), packets[i].bytes().begin(),
                           packets[i].bytes().end()));
  // The authentic packet with bad padding still moved the window: its number is spent.
  expect_drop(seal_payload(good, sequence + 1), DropReason::replayed);
}

TEST_F(DecapDrops, BadPaddingBytes) {
  auto payload = test::make_ipv4_packet(23);  // 51 bytes: 3 padding bytes
  for (uint8_t b : {1, 2, 4}) payload.push_back(b);
  payload.push_back(3);
  payload.push_back(4);
  expect_drop(seal_payload(payload, fresh_sequence()), DropReason::bad_padding);
}

TEST_F(DecapDrops, PadLengthBeyondThePayload) {
  std::vector<uint8_t> payload = {1, 2, 200, 4};
  expect_drop(seal_payload(payload, fresh_sequence()), DropReason::bad_padding);
}

TEST_F(DecapDrops, UnknownNextHeader) {
  expect_drop(seal_payload(payload_for(test::make_ipv4_packet(20), 6), fresh_sequence()),
              DropReason::bad_next_header);
}

TEST_F(DecapDrops, DummyPacketIsDroppedSilentlyAndCounted) {
  std::vector<uint8_t> junk(37, 0x5A);
  expect_drop(seal_payload(payload_for(junk, 59), fresh_sequence()), DropReason::dummy_packet);
}

TEST_F(DecapDrops, InnerVersionDisagreesWithNextHeader) {
  expect_drop(seal_payload(payload_for(test::make_ipv6_packet(20), 4), fresh_sequence()),
              DropReason::inner_malformed);
  expect_drop(seal_payload(payload_for(test::make_ipv4_packet(40), 41), fresh_sequence()),
              DropReason::inner_malformed);
}

TEST_F(DecapDrops, InnerLengthLongerThanThePayload) {
  auto inner = test::make_ipv4_packet(20);
  store_be16(&inner[2], static_cast<uint16_t>(inner.size() + 1));
  expect_drop(seal_payload(payload_for(inner, 4), fresh_sequence()), DropReason::inner_malformed);
  auto inner6 = test::make_ipv6_packet(20);
  store_be16(&inner6[4], 29);
  expect_drop(seal_payload(payload_for(inner6, 41), fresh_sequence()), DropReason::inner_malformed);
  std::vector<uint8_t> stub = {0x45, 0, 0};
  expect_drop(seal_payload(payload_for(stub, 4), fresh_sequence()), DropReason::inner_malformed);
}

TEST_F(DecapDrops, TfcPaddingAfterTheInnerPacketIsRemoved) {
  for (bool ipv6 : {false, true}) {
    auto inner = ipv6 ? test::make_ipv6_packet(30) : test::make_ipv4_packet(30);
    auto with_tfc = inner;
    with_tfc.insert(with_tfc.end(), 123, 0);  // RFC 4303 2.7: TFC padding, any content
    PacketBuffer p = seal_payload(payload_for(with_tfc, ipv6 ? 41 : 4), fresh_sequence());
    const uint64_t bytes_before = in().counters().bytes();
    ASSERT_EQ(decapsulate(table_, engine_, p), DropReason::none);
    EXPECT_EQ(std::vector<uint8_t>(p.bytes().begin(), p.bytes().end()), inner);
    EXPECT_EQ(in().counters().bytes(), bytes_before + inner.size()) << "TFC bytes not counted";
  }
}

TEST(DecapPolicy, InnerAddressesOutsideTheSelectorsAreDropped) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  config.selectors.push_back({*IpPrefix::parse("10.1.0.0/16"), *IpPrefix::parse("10.2.0.0/16")});
  OutboundSa out(config, crypto::ipsec_mb_backend());
  InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend()));
  EngineCounters engine;

  PacketBuffer allowed;
  ASSERT_TRUE(allowed.assign(test::make_ipv4_packet(10)));  // 10.1.0.1 -> 10.2.0.1
  ASSERT_EQ(encapsulate(out, allowed, OuterHeaders::omit), DropReason::none);
  EXPECT_EQ(decapsulate(table, engine, allowed), DropReason::none);

  auto spoofed = test::make_ipv4_packet(10);
  spoofed[14] = 9;  // source 10.1.9.1 is still inside; make it 10.9.0.1 instead
  spoofed[13] = 9;
  PacketBuffer outside;
  ASSERT_TRUE(outside.assign(spoofed));
  ASSERT_EQ(encapsulate(out, outside, OuterHeaders::omit), DropReason::none);
  EXPECT_EQ(decapsulate(table, engine, outside), DropReason::policy_mismatch);
  EXPECT_EQ(table.find(config.spi)->counters().drops(DropReason::policy_mismatch), 1u);
}

TEST(EncapDrops, EachOutboundFailureIsCountedAndUsesNoSequenceNumber) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, true);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  auto expect = [&](std::vector<uint8_t> bytes, DropReason reason, size_t headroom = 128,
                    size_t capacity = 2048) {
    PacketBuffer packet(capacity, headroom);
    ASSERT_TRUE(packet.assign(bytes, headroom));
    const uint64_t before = out.counters().drops(reason);
    EXPECT_EQ(encapsulate(out, packet), reason) << drop_reason_name(reason);
    EXPECT_EQ(out.counters().drops(reason), before + 1);
    EXPECT_EQ(packet.size(), bytes.size()) << "buffer untouched on failure";
  };
  expect({}, DropReason::too_short);
  expect({0x45, 0, 0}, DropReason::too_short);
  expect({0x12, 0, 0, 0}, DropReason::inner_not_ip);
  auto wrong_length = test::make_ipv4_packet(10);
  store_be16(&wrong_length[2], 99);
  expect(wrong_length, DropReason::inner_malformed);
  expect(test::make_ipv4_packet(10), DropReason::no_buffer_space, 20);
  expect(test::make_ipv4_packet(10), DropReason::no_buffer_space, 128, 128 + 38 + 5);
  EXPECT_EQ(out.last_sequence(), 0u) << "no sequence number was consumed";
  EXPECT_EQ(out.counters().packets(), 0u);
}

TEST(EncapDrops, PacketsThatWouldExceedTheIpLengthLimit) {
  SaConfig config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  PacketBuffer packet(70000);
  auto inner = test::make_ipv6_packet(65535 - 8);  // largest IPv6 packet
  ASSERT_TRUE(packet.assign(inner));
  EXPECT_EQ(encapsulate(out, packet), DropReason::too_big);
  EXPECT_EQ(out.counters().drops(DropReason::too_big), 1u);
}

}  // namespace
}  // namespace espgw::esp

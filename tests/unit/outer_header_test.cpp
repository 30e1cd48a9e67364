// What crosses between inner and outer header (esp/outer_header.h): the outer traffic
// class and DF bit on encapsulation under each of charon's copy settings, and RFC 6040's
// decapsulation table, every combination of inner and outer ECN field, both families, with
// IPv4 header checksums checked by the RFC 1071 sum rather than the incremental update.
#include "esp/outer_header.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "esp/checksum.h"
#include "esp/encap.h"
#include "esp/security_association.h"
#include "support/inbound_sa_table.h"
#include "support/sequential_esp.h"
#include "test_packets.h"

namespace espgw::esp {
namespace {

constexpr uint8_t kNotEct = 0, kEct1 = 1, kEct0 = 2, kCe = 3;
constexpr uint8_t kDscpAf41 = 34 << 2, kDscpEf = 46 << 2;

using test::ipv4_checksum_verifies;
using test::ipv4_with_tos;
using test::ipv6_with_traffic_class;

uint8_t ipv6_traffic_class(const std::vector<uint8_t>& p) {
  return static_cast<uint8_t>((p[0] << 4) | (p[1] >> 4));
}

TEST(OuterHeader, CharonDefaultsCopyDscpAndEcnOutAndDfFromTheInnerPacket) {
  const OuterHeaderPolicy policy;  // copy_dscp = out, copy_ecn = yes, copy_df = yes
  EXPECT_EQ(outer_traffic_class(kDscpEf | kEct0, policy), kDscpEf | kEct0);
  EXPECT_EQ(outer_traffic_class(kDscpAf41 | kCe, policy), kDscpAf41 | kCe)
      << "RFC 6040 normal mode copies CE too";
  EXPECT_TRUE(outer_dont_fragment(true, policy));
  EXPECT_FALSE(outer_dont_fragment(false, policy));
}

TEST(OuterHeader, CopyDscpWordsSetEachDirection) {
  struct Row {
    const char* word;
    bool out, in;
  };
  for (const Row& row : {Row{"out", true, false}, Row{"in", false, true}, Row{"yes", true, true},
                         Row{"no", false, false}}) {
    SCOPED_TRACE(row.word);
    OuterHeaderPolicy policy;
    ASSERT_TRUE(parse_dscp_copy(row.word, policy));
    EXPECT_EQ(policy.copy_dscp_out, row.out);
    EXPECT_EQ(policy.copy_dscp_in, row.in);
    EXPECT_EQ(outer_traffic_class(kDscpEf | kEct1, policy), (row.out ? kDscpEf : 0) | kEct1);
  }
  OuterHeaderPolicy policy;
  EXPECT_FALSE(parse_dscp_copy("both", policy));
  EXPECT_EQ(policy, OuterHeaderPolicy{}) << "a refused word leaves the policy alone";
}

TEST(OuterHeader, CompatibilityModeSendsNotEct) {
  OuterHeaderPolicy policy;
  policy.copy_ecn = false;
  for (uint8_t ecn : {kNotEct, kEct1, kEct0, kCe})
    EXPECT_EQ(outer_traffic_class(kDscpAf41 | ecn, policy), kDscpAf41);
}

TEST(OuterHeader, DfSetOrClearWhateverTheInnerPacketSays) {
  OuterHeaderPolicy policy;
  policy.dont_fragment = OuterHeaderPolicy::DontFragment::clear;
  EXPECT_FALSE(outer_dont_fragment(true, policy));
  policy.dont_fragment = OuterHeaderPolicy::DontFragment::set;
  EXPECT_TRUE(outer_dont_fragment(false, policy));
}

// RFC 6040 section 4.2: the inner ECN field after decapsulation, indexed [inner][outer];
// -1 is a drop.
constexpr int kDecapsulated[4][4] = {
    // outer:   Not-ECT  ECT(1)  ECT(0)  CE
    /* Not-ECT */ {kNotEct, kNotEct, kNotEct, -1},
    /* ECT(1)  */ {kEct1, kEct1, kEct1, kCe},
    /* ECT(0)  */ {kEct0, kEct1, kEct0, kCe},
    /* CE      */ {kCe, kCe, kCe, kCe},
};

TEST(OuterHeader, DecapsulationFollowsRfc6040sTableForIpv4) {
  const OuterHeaderPolicy policy;
  for (uint8_t inner = 0; inner < 4; ++inner)
    for (uint8_t outer = 0; outer < 4; ++outer) {
      SCOPED_TRACE("inner " + std::to_string(inner) + " outer " + std::to_string(outer));
      auto p = ipv4_with_tos(kDscpAf41 | inner);
      const auto original = p;
      const DropReason reason = apply_outer_traffic_class(p, kDscpEf | outer, policy);
      if (kDecapsulated[inner][outer] < 0) {
        EXPECT_EQ(reason, DropReason::ecn_not_capable);
        EXPECT_EQ(p, original);
        continue;
      }
      EXPECT_EQ(reason, DropReason::none);
      EXPECT_EQ(p[1], kDscpAf41 | kDecapsulated[inner][outer]) << "the inner DSCP stays";
      EXPECT_TRUE(ipv4_checksum_verifies(p));
    }
}

TEST(OuterHeader, DecapsulationFollowsRfc6040sTableForIpv6) {
  const OuterHeaderPolicy policy;
  for (uint8_t inner = 0; inner < 4; ++inner)
    for (uint8_t outer = 0; outer < 4; ++outer) {
      SCOPED_TRACE("inner " + std::to_string(inner) + " outer " + std::to_string(outer));
      auto p = ipv6_with_traffic_class(kDscpAf41 | inner);
      const DropReason reason = apply_outer_traffic_class(p, outer, policy);
      if (kDecapsulated[inner][outer] < 0) {
        EXPECT_EQ(reason, DropReason::ecn_not_capable);
        continue;
      }
      EXPECT_EQ(reason, DropReason::none);
      EXPECT_EQ(ipv6_traffic_class(p), kDscpAf41 | kDecapsulated[inner][outer]);
      EXPECT_EQ(p[0] >> 4, 6) << "the version is untouched";
    }
}

TEST(OuterHeader, DscpCopiedInOnlyWhenAsked) {
  OuterHeaderPolicy policy;
  ASSERT_TRUE(parse_dscp_copy("in", policy));
  auto p4 = ipv4_with_tos(kDscpAf41 | kEct0);
  EXPECT_EQ(apply_outer_traffic_class(p4, kDscpEf | kEct0, policy), DropReason::none);
  EXPECT_EQ(p4[1], kDscpEf | kEct0);
  EXPECT_TRUE(ipv4_checksum_verifies(p4));
  auto p6 = ipv6_with_traffic_class(kDscpAf41);
  EXPECT_EQ(apply_outer_traffic_class(p6, kDscpEf, policy), DropReason::none);
  EXPECT_EQ(ipv6_traffic_class(p6), kDscpEf);
}

TEST(OuterHeader, CompatibilityModeIgnoresTheOuterEcnField) {
  OuterHeaderPolicy policy;
  policy.copy_ecn = false;
  auto p = ipv4_with_tos(kNotEct);
  const auto original = p;
  EXPECT_EQ(apply_outer_traffic_class(p, kCe, policy), DropReason::none);
  EXPECT_EQ(p, original) << "no drop and no change: the outer field means nothing here";
}

TEST(OuterHeader, ShortOrNonIpInnerPacketsAreLeftAlone) {
  const OuterHeaderPolicy policy;
  std::vector<uint8_t> short_ipv4(10, 0x45);
  EXPECT_EQ(apply_outer_traffic_class(short_ipv4, kCe, policy), DropReason::none);
  std::vector<uint8_t> not_ip(40, 0x00);
  EXPECT_EQ(apply_outer_traffic_class(not_ip, kCe, policy), DropReason::none);
  EXPECT_EQ(apply_outer_traffic_class({}, kCe, policy), DropReason::none);
}

// Encapsulation writes what the policy says into the outer header it builds, and records
// it for a socket that builds the header itself.
TEST(OuterHeader, EncapsulationWritesThePolicysOuterBits) {
  for (const bool clear_df : {false, true}) {
    SCOPED_TRACE(clear_df ? "copy_df = no" : "copy_df = yes");
    SaConfig config =
        test::make_sa_config(crypto::AeadAlgorithm::aes_gcm_128, false, false, false, 0x300);
    ASSERT_TRUE(parse_dscp_copy("no", config.outer_header));
    if (clear_df) config.outer_header.dont_fragment = OuterHeaderPolicy::DontFragment::clear;
    OutboundSa sa(config, crypto::ipsec_mb_backend());
    for (const OuterHeaders outer : {OuterHeaders::include, OuterHeaders::omit}) {
      PacketBuffer packet;
      auto inner = ipv4_with_tos(kDscpEf | kEct1);
      inner[6] |= 0x40;  // DF
      inner[10] = inner[11] = 0;
      const uint16_t checksum = ipv4_header_checksum(inner.data(), 20);
      inner[10] = static_cast<uint8_t>(checksum >> 8);
      inner[11] = static_cast<uint8_t>(checksum);
      ASSERT_TRUE(packet.assign(inner));
      PreparedEncap prepared;
      ASSERT_EQ(encap_prepare(sa, packet, outer, prepared), DropReason::none);
      EXPECT_EQ(prepared.outer_traffic_class, kEct1) << "DSCP not copied, ECN copied";
      EXPECT_EQ(prepared.outer_dont_fragment, !clear_df);
      if (outer == OuterHeaders::include) {
        EXPECT_EQ(packet.data()[1], kEct1);
        EXPECT_EQ((packet.data()[6] & 0x40) != 0, !clear_df);
      }
    }
  }
}

// End to end through the engine: an outer header marked CE on the way reaches an
// ECN-capable inner packet, and a Not-ECT one is dropped as ecn-not-capable, counted on
// the SA, after its number entered the replay window (the packet was authentic).
TEST(OuterHeader, CongestionOnTheWireReachesTheInnerPacketAfterDecryption) {
  SaConfig config =
      test::make_sa_config(crypto::AeadAlgorithm::aes_gcm_128, false, false, false, 0x301);
  OutboundSa out(config, crypto::ipsec_mb_backend());
  test::InboundSaTable table;
  table.add(std::make_shared<InboundSa>(config, crypto::ipsec_mb_backend()));
  EngineCounters engine;
  auto send_marked = [&](uint8_t inner_tos) {
    auto packet = std::make_unique<PacketBuffer>();
    EXPECT_TRUE(packet->assign(ipv4_with_tos(inner_tos)));
    EXPECT_EQ(test::encapsulate(out, *packet, OuterHeaders::include), DropReason::none);
    packet->data()[1] |= kCe;  // a congested router on the way
    return packet;
  };
  auto capable = send_marked(kDscpAf41 | kEct0);
  ASSERT_EQ(test::decapsulate_wire(table, engine, *capable).reason, DropReason::none);
  EXPECT_EQ(capable->data()[1], kDscpAf41 | kCe);
  EXPECT_TRUE(ipv4_checksum_verifies({capable->bytes().begin(), capable->bytes().end()}));

  auto not_capable = send_marked(kDscpAf41 | kNotEct);
  const auto not_capable_copy =
      std::vector<uint8_t>(not_capable->bytes().begin(), not_capable->bytes().end());
  EXPECT_EQ(test::decapsulate_wire(table, engine, *not_capable).reason,
            DropReason::ecn_not_capable);
  const auto in = table.find(config.spi);
  EXPECT_EQ(in->counters().drops(DropReason::ecn_not_capable), 1u);
  PacketBuffer again;
  ASSERT_TRUE(again.assign(not_capable_copy));
  EXPECT_EQ(test::decapsulate_wire(table, engine, again).reason, DropReason::replayed)
      << "the dropped packet's number was committed";
}

}  // namespace
}  // namespace espgw::esp

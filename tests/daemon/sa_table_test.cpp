// The SA table without root or namespaces: a pipeline without workers, the counter keeper
// in memory, route MTUs from a table and sinks that only count.
#include "daemon/sa_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "crypto/aead.h"

namespace espgw::daemon {
namespace {

esp::IpAddress ip(std::string_view text) {
  return esp::IpAddress::parse(text).value();
}

class CountingSink final : public pipeline::PacketSink {
 public:
  void deliver(std::span<pipeline::Packet* const> packets) override {
    delivered.fetch_add(packets.size());
  }
  std::atomic<size_t> delivered{0};
};

class SaTableTest : public ::testing::Test {
 protected:
  SaTableTest()
      : pipeline_(pipeline_config()),
        sa_state_(""),
        mtu_(
            {.tun_name = "test0", .tunnel_mtu = {}, .lan_mtu = {}, .jumbo_segments = false},
            [](const esp::IpAddress&) {
              xfrm::MtuResult result;
              result.mtu = 1500;
              return result;
            },
            [](unsigned) { return xfrm::Result{}; }),
        table_(
            pipeline_, sa_state_, mtu_, "openssl", inbound_sink_, lookup_,
            [this](const esp::SaConfig&) {
              ++outbound_sinks_made_;
              return std::make_shared<CountingSink>();
            },
            [this](const esp::SaConfig&) { ++inbound_sockets_opened_; }) {}

  static pipeline::PipelineConfig pipeline_config() {
    pipeline::PipelineConfig config;
    config.run_to_completion = true;  // no worker threads
    config.pool_packets = 64;
    return config;
  }

  static xfrm::SadEntry sa(uint32_t spi, xfrm::Direction direction, uint32_t reqid = 1,
                           uint64_t slot = 0, uint8_t key_byte = 0) {
    xfrm::SadEntry entry;
    entry.config.spi = spi;
    entry.config.algorithm = crypto::AeadAlgorithm::aes_gcm_128;
    // A key of its own per SA unless asked: SAs that share a key share a counter record.
    entry.config.key_material.assign(20, key_byte != 0 ? key_byte : static_cast<uint8_t>(spi));
    entry.config.tunnel_source = ip(direction == xfrm::Direction::out ? "192.0.2.1" : "192.0.2.2");
    entry.config.tunnel_destination =
        ip(direction == xfrm::Direction::out ? "192.0.2.2" : "192.0.2.1");
    if (direction == xfrm::Direction::in) {
      esp::TrafficSelector selector;
      selector.local = *esp::IpPrefix::parse("10.1.0.0/16");
      selector.remote = *esp::IpPrefix::parse("10.2.0.0/16");
      entry.config.selectors.push_back(selector);
    }
    entry.direction = direction;
    entry.reqid = reqid;
    entry.group_slot = slot;
    return entry;
  }

  // The SPIs of the members of reqid's group, as the TUN readers see them.
  std::vector<uint32_t> members(uint32_t reqid) const {
    const auto lookup = lookup_.load();
    const auto group = lookup->groups.find(reqid);
    if (group == lookup->groups.end()) return {};
    auto spis = group->second->member_spis();
    std::sort(spis.begin(), spis.end());
    return spis;
  }

  pipeline::Pipeline pipeline_;
  SaStateKeeper sa_state_;
  MtuTracker mtu_;
  CountingSink inbound_sink_;
  PublishedOutboundLookup lookup_{std::make_shared<const OutboundLookup>()};
  unsigned outbound_sinks_made_ = 0;
  unsigned inbound_sockets_opened_ = 0;
  SaTable table_;
};

TEST_F(SaTableTest, InstallsAndFindsSasByIdWithoutTheirKeys) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::static_file));
  ASSERT_TRUE(table_.install(sa(0x2001, xfrm::Direction::in), InstallOrigin::charon_new));
  EXPECT_EQ(table_.outbound().size(), 1u);
  EXPECT_EQ(table_.inbound().size(), 1u);
  EXPECT_EQ(outbound_sinks_made_, 1u);
  EXPECT_EQ(inbound_sockets_opened_, 1u);
  const auto* out = table_.find_outbound({0x1001, ip("192.0.2.2")});
  ASSERT_NE(out, nullptr);
  EXPECT_FALSE(out->from_charon);
  EXPECT_TRUE(std::all_of(out->entry.config.key_material.begin(),
                          out->entry.config.key_material.end(), [](uint8_t b) { return b == 0; }))
      << "the table's copy of the key is wiped";
  const auto* in = table_.find_inbound({0x2001, ip("192.0.2.1")});
  ASSERT_NE(in, nullptr);
  EXPECT_TRUE(in->from_charon);
  EXPECT_TRUE(pipeline_.has_inbound(0x2001));
  EXPECT_EQ(table_.find_outbound({0x2001, ip("192.0.2.1")}), nullptr);
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1001}));
}

TEST_F(SaTableTest, AnIdenticalSaKeepsItsStateAChangedOneIsReplaced) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::static_file));
  const auto* first = table_.find_outbound({0x1001, ip("192.0.2.2")});
  const auto engine_sa = first->sa;
  // The same SA again (charon taking over a static one's record): state kept.
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::charon_new));
  EXPECT_EQ(table_.find_outbound({0x1001, ip("192.0.2.2")})->sa, engine_sa);
  EXPECT_TRUE(table_.find_outbound({0x1001, ip("192.0.2.2")})->from_charon);
  // Another key under the same id: a new engine SA.
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out, 1, 0, 2), InstallOrigin::charon_new));
  EXPECT_NE(table_.find_outbound({0x1001, ip("192.0.2.2")})->sa, engine_sa);
  EXPECT_EQ(table_.outbound().size(), 1u);
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1001}));
}

TEST_F(SaTableTest, RefusesAnInboundSaWithoutSelectorsOrWithATakenSpi) {
  auto open = sa(0x2001, xfrm::Direction::in);
  open.config.selectors.clear();
  EXPECT_FALSE(table_.install(open, InstallOrigin::charon_new));
  EXPECT_FALSE(pipeline_.has_inbound(0x2001));
  ASSERT_TRUE(table_.install(sa(0x2001, xfrm::Direction::in), InstallOrigin::charon_new));
  // The pipeline finds inbound SAs by SPI alone: another destination cannot share it.
  auto elsewhere = sa(0x2001, xfrm::Direction::in, 1, 0, 9);
  elsewhere.config.tunnel_destination = ip("192.0.2.9");
  EXPECT_FALSE(table_.install(elsewhere, InstallOrigin::charon_new));
  EXPECT_EQ(table_.inbound().size(), 1u);
}

TEST_F(SaTableTest, RemovesSasAndEmptyGroups) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(sa(0x2001, xfrm::Direction::in), InstallOrigin::charon_new));
  EXPECT_TRUE(table_.remove({0x2001, ip("192.0.2.1")}));
  EXPECT_FALSE(pipeline_.has_inbound(0x2001));
  EXPECT_TRUE(table_.remove({0x1001, ip("192.0.2.2")}));
  EXPECT_FALSE(table_.remove({0x1001, ip("192.0.2.2")}));
  EXPECT_TRUE(table_.outbound().empty());
  EXPECT_TRUE(table_.inbound().empty());
  EXPECT_TRUE(lookup_.load()->groups.empty()) << "an empty group leaves the snapshot";
}

TEST_F(SaTableTest, GroupsSpreadOverSlotsAndARekeyTakesItsPredecessorsSlot) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out, 1, 7), InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(sa(0x1002, xfrm::Direction::out, 1, 8), InstallOrigin::charon_new));
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1001, 0x1002}));
  // The rekey of slot 7: the new SA carries the slot.
  ASSERT_TRUE(table_.install(sa(0x1003, xfrm::Direction::out, 1, 7), InstallOrigin::charon_new));
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1002, 0x1003}));
  // The old SA goes: nothing moves.
  ASSERT_TRUE(table_.remove({0x1001, ip("192.0.2.2")}));
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1002, 0x1003}));
}

TEST_F(SaTableTest, WhenASlotsCarrierGoesTheNewestOtherSaOfTheSlotTakesOver) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out, 1, 7), InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(sa(0x1002, xfrm::Direction::out, 1, 7), InstallOrigin::charon_new));
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1002}));
  ASSERT_TRUE(table_.remove({0x1002, ip("192.0.2.2")}));
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1001}));
}

TEST_F(SaTableTest, HardLifetimeTakesAnSaOutOfServiceAndReportsCharonsSas) {
  auto limited = sa(0x1001, xfrm::Direction::out, 1, 7);
  limited.lifetimes.soft_packets = 1;
  limited.lifetimes.hard_packets = 2;
  ASSERT_TRUE(table_.install(limited, InstallOrigin::charon_new));
  auto static_sa = sa(0x2001, xfrm::Direction::in);
  static_sa.lifetimes.hard_packets = 1;
  ASSERT_TRUE(table_.install(static_sa, InstallOrigin::static_file));
  const auto now = std::chrono::steady_clock::now();
  EXPECT_TRUE(table_.enforce_lifetimes(now).empty());

  auto& engine_sa = *table_.find_outbound({0x1001, ip("192.0.2.2")})->sa;
  uint64_t sequence = 0;
  ASSERT_EQ(engine_sa.take_sequence(100, UINT64_MAX, sequence), esp::DropReason::none);
  auto expiries = table_.enforce_lifetimes(now);
  ASSERT_EQ(expiries.size(), 1u);
  EXPECT_EQ(expiries[0].spi, 0x1001u);
  EXPECT_FALSE(expiries[0].hard);
  EXPECT_EQ(members(1), (std::vector<uint32_t>{0x1001})) << "soft: still in service";
  EXPECT_TRUE(table_.enforce_lifetimes(now).empty()) << "reported once";

  ASSERT_EQ(engine_sa.take_sequence(100, UINT64_MAX, sequence), esp::DropReason::none);
  expiries = table_.enforce_lifetimes(now);
  ASSERT_EQ(expiries.size(), 1u);
  EXPECT_TRUE(expiries[0].hard);
  EXPECT_TRUE(members(1).empty()) << "hard: out of its group";
  EXPECT_EQ(table_.find_outbound({0x1001, ip("192.0.2.2")})->lifetime.reported,
            xfrm::LifetimeState::hard);
  EXPECT_TRUE(pipeline_.has_inbound(0x2001)) << "the static SA carried nothing yet";
}

TEST_F(SaTableTest, IdleTimesFollowThePacketsSeen) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::charon_new));
  const auto* out = table_.find_outbound({0x1001, ip("192.0.2.2")});
  const auto t0 = std::chrono::steady_clock::now();
  table_.enforce_lifetimes(t0);
  EXPECT_EQ(out->lifetime.packets_seen, 0u);
  uint64_t sequence = 0;
  ASSERT_EQ(out->sa->take_sequence(100, UINT64_MAX, sequence), esp::DropReason::none);
  table_.enforce_lifetimes(t0 + std::chrono::seconds(1));
  EXPECT_EQ(out->lifetime.packets_seen, 1u);
  EXPECT_EQ(out->lifetime.last_used, t0 + std::chrono::seconds(1));
}

TEST_F(SaTableTest, CountsEverySaInTheMtuTracker) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::charon_new));
  const unsigned candidate = table_.find_outbound({0x1001, ip("192.0.2.2")})->mtu_candidate;
  EXPECT_GT(candidate, 0u);
  mtu_.update(9000);
  EXPECT_EQ(mtu_.tunnel_mtu(), candidate);
  mtu_.forget_routes_and_sas();
  table_.recount_mtus();
  mtu_.update(9000);
  EXPECT_EQ(mtu_.tunnel_mtu(), candidate);
  ASSERT_TRUE(table_.remove({0x1001, ip("192.0.2.2")}));
  mtu_.update(9000);
  EXPECT_EQ(mtu_.tunnel_mtu(), 1400u) << "no outbound SA left";
}

}  // namespace
}  // namespace espgw::daemon

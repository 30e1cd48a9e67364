// The SA table without root or namespaces: a pipeline without workers, the counter keeper
// in memory, route MTUs from a table and sinks that only count.
#include "daemon/sa_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <random>
#include <thread>
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

TEST_F(SaTableTest, TheTableKeepsNoCopyOfAKeyOnlyItsFingerprint) {
  ASSERT_TRUE(table_.install(sa(0x1001, xfrm::Direction::out), InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(sa(0x2001, xfrm::Direction::in), InstallOrigin::charon_new));
  const auto* out = table_.find_outbound({0x1001, ip("192.0.2.2")});
  const auto* in = table_.find_inbound({0x2001, ip("192.0.2.1")});
  EXPECT_EQ(out->entry.config.key_material.capacity(), 0u);
  EXPECT_EQ(in->entry.config.key_material.capacity(), 0u);
  EXPECT_TRUE(xfrm::same_fingerprint(
      out->key_fingerprint,
      xfrm::key_fingerprint(sa(0x1001, xfrm::Direction::out).config.key_material)));
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

TEST_F(SaTableTest, TfcPaddingIsCappedAtTheSasTunnelMtu) {
  auto mtu = sa(0x1001, xfrm::Direction::out);
  mtu.config.tfc_pad_to = UINT32_MAX;  // charon's tfc_padding = mtu
  auto small = sa(0x1002, xfrm::Direction::out, 2);
  small.config.tfc_pad_to = 300;
  ASSERT_TRUE(table_.install(mtu, InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(small, InstallOrigin::charon_new));
  const auto* padded_to_mtu = table_.find_outbound({0x1001, ip("192.0.2.2")});
  EXPECT_EQ(padded_to_mtu->sa->config().tfc_pad_to, padded_to_mtu->mtu_candidate);
  EXPECT_LT(padded_to_mtu->mtu_candidate, 1500u) << "the path MTU less the ESP overhead";
  EXPECT_EQ(table_.find_outbound({0x1002, ip("192.0.2.2")})->sa->config().tfc_pad_to, 300u);
}

TEST_F(SaTableTest, AnSaMovesToItsPeersNewEndInPlace) {
  auto out = sa(0x1001, xfrm::Direction::out);
  out.config.udp_encapsulation = esp::UdpEncapsulation{4500, 40001};
  auto in = sa(0x2001, xfrm::Direction::in);
  in.config.udp_encapsulation = esp::UdpEncapsulation{40001, 4500};
  ASSERT_TRUE(table_.install(out, InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(in, InstallOrigin::charon_new));
  const auto* engine_sa = table_.find_outbound({0x1001, ip("192.0.2.2")})->sa.get();
  std::vector<std::string> moved_sinks;
  auto move_sink = [&](pipeline::PacketSink&) {
    moved_sinks.push_back("moved");
    return true;
  };
  // The peer's NAT port changes: the SAs stay, with their engine state.
  const esp::UdpEncapsulation new_out{4500, 41007}, new_in{41007, 4500};
  EXPECT_EQ(
      table_.move({0x1001, ip("192.0.2.2")}, ip("192.0.2.1"), ip("192.0.2.2"), new_out, move_sink),
      SaTable::MoveResult::moved);
  EXPECT_EQ(moved_sinks.size(), 1u);
  const auto* moved_out = table_.find_outbound({0x1001, ip("192.0.2.2")});
  ASSERT_NE(moved_out, nullptr);
  EXPECT_EQ(moved_out->sa.get(), engine_sa) << "the same SA: sequence numbers continue";
  EXPECT_EQ(moved_out->entry.config.udp_encapsulation->destination_port, 41007);
  EXPECT_EQ(
      table_.move({0x2001, ip("192.0.2.1")}, ip("192.0.2.2"), ip("192.0.2.1"), new_in, move_sink),
      SaTable::MoveResult::moved);
  EXPECT_EQ(moved_sinks.size(), 1u) << "an inbound SA has no peer sink";
  EXPECT_EQ(
      table_.find_inbound({0x2001, ip("192.0.2.1")})->entry.config.udp_encapsulation->source_port,
      41007);
  // The peer's address changes (MOBIKE): the outbound SA is found by its new destination.
  EXPECT_EQ(
      table_.move({0x1001, ip("192.0.2.2")}, ip("192.0.2.1"), ip("192.0.2.9"), new_out, move_sink),
      SaTable::MoveResult::moved);
  EXPECT_EQ(table_.find_outbound({0x1001, ip("192.0.2.2")}), nullptr);
  ASSERT_NE(table_.find_outbound({0x1001, ip("192.0.2.9")}), nullptr);
  EXPECT_EQ(members(1), std::vector<uint32_t>{0x1001}) << "still its group's member";
  EXPECT_TRUE(table_.remove({0x1001, ip("192.0.2.9")}));
}

TEST_F(SaTableTest, WhatNeedsAnotherSocketOfOursIsNotMovedInPlace) {
  auto out = sa(0x1001, xfrm::Direction::out);
  out.config.udp_encapsulation = esp::UdpEncapsulation{4500, 4500};
  ASSERT_TRUE(table_.install(out, InstallOrigin::charon_new));
  ASSERT_TRUE(table_.install(sa(0x1002, xfrm::Direction::out), InstallOrigin::charon_new));
  auto yes = [](pipeline::PacketSink&) { return true; };
  const xfrm::SaId id{0x1001, ip("192.0.2.2")};
  const esp::UdpEncapsulation udp{4500, 4500};
  using R = SaTable::MoveResult;
  EXPECT_EQ(table_.move(id, ip("192.0.2.5"), ip("192.0.2.2"), udp, yes), R::not_supported)
      << "another local address";
  EXPECT_EQ(table_.move(id, ip("192.0.2.1"), ip("192.0.2.2"), std::nullopt, yes), R::not_supported)
      << "ESP in UDP to raw ESP";
  EXPECT_EQ(
      table_.move(id, ip("192.0.2.1"), ip("192.0.2.2"), esp::UdpEncapsulation{4501, 4500}, yes),
      R::not_supported)
      << "another local port";
  EXPECT_EQ(table_.move(id, ip("192.0.2.1"), ip("192.0.2.2"), udp,
                        [](pipeline::PacketSink&) { return false; }),
            R::not_supported)
      << "a sink that cannot move";
  EXPECT_EQ(
      table_.move({0x1002, ip("192.0.2.2")}, ip("192.0.2.1"), ip("192.0.2.2"), std::nullopt, yes),
      R::moved);
  EXPECT_EQ(table_.move({0x1003, ip("192.0.2.2")}, ip("192.0.2.1"), ip("192.0.2.2"), udp, yes),
            R::not_found);
  EXPECT_EQ(table_.find_outbound(id)->entry.config.tunnel_destination, ip("192.0.2.2"))
      << "a refused move changes nothing";
}

// A key of its own for every install (so that a replacement is a new key, and no two SAs
// share a counter record).
xfrm::SadEntry unique_key(xfrm::SadEntry entry, uint32_t install) {
  for (size_t i = 0; i < 4; ++i) {
    entry.config.key_material[i] = static_cast<uint8_t>(entry.config.spi >> (8 * i));
    entry.config.key_material[4 + i] = static_cast<uint8_t>(install >> (8 * i));
  }
  return entry;
}

// Random installs, replacements and removals over many reqids (spread over the group
// map's shards) and slots, against a model of what the table promises: installing an SA
// makes it its slot's carrier; removing the carrier hands the slot to the newest other SA
// of the slot (install time, then SA id); a group is in the snapshot while its reqid has
// an outbound SA. Inbound SAs with slots come and go alongside (each install looks up its
// slot's predecessors).
TEST_F(SaTableTest, GroupsFollowAModelOverRandomInstallsAndRemovals) {
  std::mt19937 random(4242);
  struct Model {
    std::vector<uint32_t> spis;  // the slot's SAs
    uint32_t carrier = 0;
  };
  std::map<std::pair<uint32_t, uint64_t>, Model> slots;       // (reqid, slot)
  std::map<uint32_t, std::pair<uint32_t, uint64_t>> slot_of;  // outbound SPI -> its slot
  std::vector<uint32_t> inbound_spis;
  uint32_t installs = 0;
  const auto outbound_id = [](uint32_t spi) { return xfrm::SaId{spi, ip("192.0.2.2")}; };
  const auto newer = [&](uint32_t a, uint32_t b) {  // whether a is newer than b
    const auto& at = table_.find_outbound(outbound_id(a))->lifetime.added_at;
    const auto& bt = table_.find_outbound(outbound_id(b))->lifetime.added_at;
    return at != bt ? at > bt : outbound_id(a) > outbound_id(b);
  };
  const auto forget = [&](uint32_t spi) {  // the model of removing an outbound SA
    const auto where = slot_of.at(spi);
    Model& model = slots[where];
    std::erase(model.spis, spi);
    slot_of.erase(spi);
    if (model.carrier != spi) return;
    model.carrier = 0;
    for (const uint32_t other : model.spis)
      if (model.carrier == 0 || newer(other, model.carrier)) model.carrier = other;
  };
  for (int step = 0; step < 3000; ++step) {
    const unsigned action = random() % 10;
    if (action < 5) {  // an outbound SA, new or replacing one (another key) under its id
      const uint32_t spi = 0x1000 + random() % 300;
      const uint32_t reqid = 1 + random() % 60;
      const uint64_t slot = random() % 6 == 0 ? 0 : 1 + random() % 3;
      const auto entry = unique_key(sa(spi, xfrm::Direction::out, reqid, slot), installs++);
      if (slot_of.count(spi)) forget(spi);  // the table retires the SA it replaces first
      ASSERT_TRUE(table_.install(entry, InstallOrigin::charon_new));
      const auto where = std::make_pair(reqid, group_slot(entry));
      slots[where].spis.push_back(spi);
      slots[where].carrier = spi;
      slot_of[spi] = where;
    } else if (action < 8) {  // an outbound SA goes
      if (slot_of.empty()) continue;
      const uint32_t spi =
          std::next(slot_of.begin(), static_cast<long>(random() % slot_of.size()))->first;
      // The model reads install times, so it goes first.
      forget(spi);
      ASSERT_TRUE(table_.remove(outbound_id(spi)));
    } else if (action < 9 || inbound_spis.empty()) {  // an inbound SA of a slot
      const uint32_t spi = 0x8000 + static_cast<uint32_t>(step);
      ASSERT_TRUE(table_.install(
          unique_key(sa(spi, xfrm::Direction::in, 1 + random() % 60, 1 + random() % 3), installs++),
          InstallOrigin::charon_new));
      inbound_spis.push_back(spi);
    } else {
      const size_t which = random() % inbound_spis.size();
      ASSERT_TRUE(table_.remove({inbound_spis[which], ip("192.0.2.1")}));
      inbound_spis.erase(inbound_spis.begin() + static_cast<long>(which));
    }
    if (step % 10 != 0) continue;
    std::map<uint32_t, std::vector<uint32_t>> expected;  // reqid -> carriers
    for (const auto& [where, model] : slots)
      if (model.carrier != 0) expected[where.first].push_back(model.carrier);
    const auto lookup = lookup_.load();
    ASSERT_EQ(lookup->groups.size(), expected.size()) << "step " << step;
    for (uint32_t reqid = 1; reqid <= 60; ++reqid) {
      auto carriers = expected[reqid];
      std::sort(carriers.begin(), carriers.end());
      ASSERT_EQ(members(reqid), carriers) << "reqid " << reqid << ", step " << step;
      ASSERT_EQ(lookup->groups.find(reqid) != lookup->groups.end(), !carriers.empty());
    }
    ASSERT_EQ(table_.outbound().size(), slot_of.size());
    ASSERT_EQ(table_.inbound().size(), inbound_spis.size());
  }
}

// TUN readers load the snapshot and pick SAs from groups while the control thread adds
// and removes CHILD_SAs, making and publishing new snapshots that share shards with the
// ones readers still hold (run under TSan with the threaded tests).
TEST_F(SaTableTest, ConcurrentReadersPickFromGroupsWhileChildSasComeAndGo) {
  constexpr uint32_t kReqids = 300;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> picks{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&, r] {
      packet::FlowKey flow;
      flow.source = ip("10.1.0.1");
      flow.destination = ip("10.2.0.1");
      flow.protocol = 17;
      flow.ports_known = true;
      uint32_t reqid = 1 + static_cast<uint32_t>(r);
      while (!done.load(std::memory_order_acquire)) {
        const auto lookup = lookup_.load(std::memory_order_acquire);
        reqid = reqid % kReqids + 1;
        flow.source_port = static_cast<uint16_t>(reqid);
        if (const auto group = lookup->groups.find(reqid); group != lookup->groups.end())
          if (auto* channel = group->second->pick_for_packet(flow, 1))
            if (channel->sa().config().spi != 0) picks.fetch_add(1, std::memory_order_relaxed);
        size_t groups = 0;
        for (const auto& entry : lookup->groups) groups += entry.second != nullptr;
        EXPECT_EQ(groups, lookup->groups.size());
      }
    });
  std::mt19937 random(7);
  std::vector<uint32_t> installed;
  for (uint32_t step = 0; step < 3000; ++step) {
    if (installed.size() < kReqids && (installed.empty() || random() % 3 != 0)) {
      const uint32_t spi = 0x10000 + step;
      ASSERT_TRUE(table_.install(
          unique_key(sa(spi, xfrm::Direction::out, 1 + random() % kReqids, 1 + random() % 2), step),
          InstallOrigin::charon_new));
      installed.push_back(spi);
    } else {
      const size_t which = random() % installed.size();
      ASSERT_TRUE(table_.remove({installed[which], ip("192.0.2.2")}));
      installed.erase(installed.begin() + static_cast<long>(which));
    }
  }
  for (const uint32_t spi : installed) ASSERT_TRUE(table_.remove({spi, ip("192.0.2.2")}));
  done.store(true, std::memory_order_release);
  for (auto& reader : readers) reader.join();
  EXPECT_TRUE(lookup_.load()->groups.empty());
  EXPECT_GT(picks.load(), 0u) << "the readers found groups with members";
}

}  // namespace
}  // namespace espgw::daemon

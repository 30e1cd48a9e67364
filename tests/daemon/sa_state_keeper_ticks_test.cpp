// What one reservation tick costs: the keeper looks at new SAs, at SAs whose counters noted
// traffic since its last look and at raises that failed, never at idle ones; an SA with
// traffic still gets its raise in time, and one whose state file write failed gets it once
// the disk is back, without waiting for traffic.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "crypto/aead.h"
#include "daemon/sa_state_keeper.h"
#include "support/temporary_directory.h"

namespace espgw::daemon {
namespace {

using esp::DropReason;
using Verdict = esp::ReplayWindow::Verdict;

class SaStateKeeperTicksTest : public ::testing::Test {
 protected:
  static esp::SaConfig config(unsigned seed) {
    esp::SaConfig sa;
    sa.spi = 0x1000 + seed;
    sa.tunnel_source = *esp::IpAddress::parse("192.0.2.1");
    sa.tunnel_destination = *esp::IpAddress::parse("192.0.2.2");
    sa.key_material.assign(20, 1);
    sa.key_material[0] = static_cast<uint8_t>(seed);
    sa.key_material[1] = static_cast<uint8_t>(seed >> 8);
    return sa;
  }
  static xfrm::SaStateKey key(xfrm::Direction direction, unsigned seed) {
    return {direction, xfrm::key_fingerprint(config(seed).key_material)};
  }
  static std::shared_ptr<esp::OutboundSa> outbound(unsigned seed) {
    return std::make_shared<esp::OutboundSa>(config(seed), *crypto::find_backend("openssl"));
  }
  static std::shared_ptr<esp::InboundSa> inbound(unsigned seed) {
    return std::make_shared<esp::InboundSa>(config(seed), *crypto::find_backend("openssl"));
  }
  static Verdict receive(esp::InboundSa& sa, uint64_t sequence) {
    const auto candidate = sa.replay_window().check(static_cast<uint32_t>(sequence));
    if (candidate.verdict != Verdict::accept) return candidate.verdict;
    return sa.replay_window().commit(candidate.sequence,
                                     [&] { sa.counters().count_packet_locked(100); });
  }

  test::TemporaryDirectory root_{"espgw-keeper-ticks-test"};
  std::string directory_ = root_.path() + "/state";
};

TEST_F(SaStateKeeperTicksTest, IdleSasAreNotVisitedAndBusyOnesAre) {
  constexpr unsigned kSas = 200;
  SaStateKeeper keeper(directory_);
  std::vector<std::shared_ptr<esp::OutboundSa>> out;
  std::vector<std::shared_ptr<esp::InboundSa>> in;
  for (unsigned i = 0; i < kSas; ++i) {
    out.push_back(outbound(i));
    in.push_back(inbound(i));
    keeper.adopt(key(xfrm::Direction::out, i), out.back(), InstallOrigin::static_file);
    keeper.adopt(key(xfrm::Direction::in, i), in.back(), InstallOrigin::static_file);
  }
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, 2 * kSas) << "every new SA gets its first reservation";
  for (int tick = 0; tick < 100; ++tick) ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, 2 * kSas) << "idle SAs are not looked at";
  EXPECT_EQ(keeper.status().ticks, 101u);

  // Traffic on one SA of each direction: those two, once per tick with traffic.
  uint64_t sequence = 0;
  ASSERT_EQ(out[7]->take_sequence(100, UINT64_MAX, sequence), DropReason::none);
  ASSERT_EQ(receive(*in[9], 1), Verdict::accept);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, 2 * kSas + 2);
  for (int tick = 0; tick < 10; ++tick) ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, 2 * kSas + 2) << "idle again";
}

TEST_F(SaStateKeeperTicksTest, AnSaWithTrafficAmongIdleOnesGetsItsRaise) {
  SaStateKeeper keeper(directory_);
  std::vector<std::shared_ptr<esp::OutboundSa>> out;
  for (unsigned i = 0; i < 50; ++i) {
    out.push_back(outbound(i));
    keeper.adopt(key(xfrm::Direction::out, i), out.back(), InstallOrigin::static_file);
  }
  ASSERT_TRUE(keeper.reserve());
  for (int tick = 0; tick < 20; ++tick) ASSERT_TRUE(keeper.reserve());
  const uint64_t visits = keeper.status().visits;
  const uint64_t first = out[3]->sequence_ceiling();
  // Sends past the middle of its reservation: the next tick raises it.
  out[3]->set_next_sequence(first - SaStateKeeper::kOutboundBlock / 2 + 10);
  uint64_t sequence = 0;
  ASSERT_EQ(out[3]->take_sequence(100, UINT64_MAX, sequence), DropReason::none);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, visits + 1);
  EXPECT_GE(out[3]->sequence_ceiling(), first + SaStateKeeper::kOutboundBlock / 2);
  EXPECT_EQ(out[4]->sequence_ceiling(), first) << "an idle SA's reservation stays";

  // A packet refused at the ceiling brings its SA to the next tick too: a raise that a
  // note lost in a race did not ask for is then made.
  out[6]->set_sequence_ceiling(0);  // an SA with nothing usable, idle so far
  const uint64_t before_refusal = keeper.status().visits;
  for (int tick = 0; tick < 5; ++tick) ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, before_refusal);
  ASSERT_EQ(out[6]->take_sequence(100, UINT64_MAX, sequence), DropReason::sequence_unreserved);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, before_refusal + 1);
}

TEST_F(SaStateKeeperTicksTest, AnInboundSaIdleForLongGetsAShortStepAgain) {
  SaStateKeeper keeper(directory_);
  auto sa = inbound(1);
  keeper.adopt(key(xfrm::Direction::in, 1), sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  // A burst: its step grows at once.
  uint64_t next = 1;
  for (int tick = 0; tick < 3; ++tick) {
    const uint64_t limit = sa->replay_window().accept_limit();
    while (next <= limit) ASSERT_EQ(receive(*sa, next++), Verdict::accept);
    ASSERT_TRUE(keeper.reserve());
  }
  const uint64_t burst_limit = sa->replay_window().accept_limit();
  EXPECT_GE(burst_limit - next, 1000u);
  // Quiet for longer than a rate window, unvisited; then one packet: the step it gets is
  // the quiet SA's short one, not the burst's (what a crash would make it refuse).
  for (int tick = 0; tick < 200; ++tick) ASSERT_TRUE(keeper.reserve());
  const uint64_t visits = keeper.status().visits;
  ASSERT_EQ(receive(*sa, burst_limit), Verdict::accept);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(keeper.status().visits, visits + 1);
  EXPECT_LE(sa->replay_window().accept_limit(), burst_limit + 2 * SaStateKeeper::kInboundMinBlock);
  EXPECT_GT(sa->replay_window().accept_limit(), burst_limit);
}

TEST_F(SaStateKeeperTicksTest, ARaiseThatFailedIsRetriedWithoutTraffic) {
  SaStateKeeper keeper(directory_);
  const std::string state = directory_ + "/" + xfrm::SaStateStore::kStateFile;
  // A write that fails: a directory where the file belongs (root ignores permissions).
  std::filesystem::create_directories(state + "/x");
  auto sa = outbound(1);
  keeper.adopt(key(xfrm::Direction::out, 1), sa, InstallOrigin::static_file);
  EXPECT_FALSE(keeper.reserve());
  EXPECT_FALSE(keeper.reserve());
  EXPECT_EQ(sa->sequence_ceiling(), 0u) << "nothing usable before it is on disk";
  EXPECT_EQ(keeper.status().write_failures, 2u);
  std::filesystem::remove_all(state);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_GE(sa->sequence_ceiling(), SaStateKeeper::kOutboundBlock);
  uint64_t sequence = 0;
  EXPECT_EQ(sa->take_sequence(100, UINT64_MAX, sequence), DropReason::none);
}

}  // namespace
}  // namespace espgw::daemon

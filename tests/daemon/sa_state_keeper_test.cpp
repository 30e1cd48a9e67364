// The SA counter state across restarts: an outbound key never hands out a sequence number
// twice, an inbound key never accepts again what it accepted, whatever happened between
// two runs (a crash, a clean stop, a lost state file, charon replaying its SAs).
#include "daemon/sa_state_keeper.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "crypto/aead.h"
#include "support/temporary_directory.h"

namespace espgw::daemon {
namespace {

using esp::DropReason;
using Verdict = esp::ReplayWindow::Verdict;
// Within the first inbound reservation.
constexpr uint64_t kAccepted = SaStateKeeper::kInboundMinBlock / 2;

class SaStateKeeperTest : public ::testing::Test {
 protected:
  // What the state file says now.
  std::map<xfrm::SaStateKey, xfrm::SaStateRecord> records_on_disk() const {
    std::ifstream in(directory_ + "/" + xfrm::SaStateStore::kStateFile);
    std::stringstream text;
    text << in.rdbuf();
    auto records = xfrm::SaStateStore::parse(text.str());
    EXPECT_TRUE(records) << "the state file does not parse";
    return records.value_or(std::map<xfrm::SaStateKey, xfrm::SaStateRecord>{});
  }

  static esp::SaConfig config(uint8_t key_byte, uint32_t spi = 0x1001) {
    esp::SaConfig sa;
    sa.spi = spi;
    sa.tunnel_source = *esp::IpAddress::parse("192.0.2.1");
    sa.tunnel_destination = *esp::IpAddress::parse("192.0.2.2");
    sa.key_material.assign(20, key_byte);
    return sa;
  }
  static xfrm::SaStateKey key(xfrm::Direction direction, uint8_t key_byte) {
    const auto material = config(key_byte).key_material;
    return {direction, xfrm::key_fingerprint(material)};
  }
  static std::shared_ptr<esp::OutboundSa> outbound(uint8_t key_byte) {
    return std::make_shared<esp::OutboundSa>(config(key_byte), *crypto::find_backend("openssl"));
  }
  static std::shared_ptr<esp::InboundSa> inbound(uint8_t key_byte) {
    return std::make_shared<esp::InboundSa>(config(key_byte), *crypto::find_backend("openssl"));
  }
  static DropReason take(esp::OutboundSa& sa, uint64_t& sequence) {
    return sa.take_sequence(100, UINT64_MAX, sequence);
  }
  // Sends `count` packets; returns the last sequence number.
  static uint64_t send(esp::OutboundSa& sa, unsigned count) {
    uint64_t sequence = 0;
    for (unsigned i = 0; i < count; ++i) EXPECT_EQ(take(sa, sequence), DropReason::none);
    return sequence;
  }
  static Verdict receive(esp::InboundSa& sa, uint64_t sequence) {
    const auto candidate = sa.replay_window().check(static_cast<uint32_t>(sequence));
    if (candidate.verdict != Verdict::accept) return candidate.verdict;
    // Counted inside the commit, as decapsulation does: the keeper's rate comes from it.
    return sa.replay_window().commit(candidate.sequence,
                                     [&] { sa.counters().count_packet_locked(100); });
  }

  test::TemporaryDirectory root_{"espgw-keeper-test"};
  std::string directory_ = root_.path() + "/state";
  const xfrm::SaStateKey out_key_ = key(xfrm::Direction::out, 7);
  const xfrm::SaStateKey in_key_ = key(xfrm::Direction::in, 7);
};

TEST_F(SaStateKeeperTest, StaticKeyWaitsForItsFirstReservation) {
  SaStateKeeper keeper(directory_);
  auto sa = outbound(7);
  EXPECT_FALSE(keeper.adopt(out_key_, sa, InstallOrigin::static_file));
  uint64_t sequence = 0;
  EXPECT_EQ(take(*sa, sequence), DropReason::sequence_unreserved);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_EQ(take(*sa, sequence), DropReason::none);
  EXPECT_EQ(sequence, 1u);
}

TEST_F(SaStateKeeperTest, AfterACrashTheCounterContinuesPastTheReservation) {
  uint64_t last_before = 0;
  {
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    keeper.adopt(out_key_, sa, InstallOrigin::static_file);
    ASSERT_TRUE(keeper.reserve());
    last_before = send(*sa, 1000);
    // A crash: no write_exact.
  }
  SaStateKeeper keeper(directory_);
  auto sa = outbound(7);
  EXPECT_FALSE(keeper.adopt(out_key_, sa, InstallOrigin::static_file));
  uint64_t sequence = 0;
  EXPECT_EQ(take(*sa, sequence), DropReason::sequence_unreserved) << "nothing is reserved yet";
  ASSERT_TRUE(keeper.reserve());
  ASSERT_EQ(take(*sa, sequence), DropReason::none);
  EXPECT_GT(sequence, last_before);
  EXPECT_GT(sequence, SaStateKeeper::kOutboundBlock) << "past the whole first reservation";
}

TEST_F(SaStateKeeperTest, AfterACleanStopTheCounterContinuesExactly) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    keeper.adopt(out_key_, sa, InstallOrigin::static_file);
    ASSERT_TRUE(keeper.reserve());
    send(*sa, 200);
    ASSERT_TRUE(keeper.write_exact());
  }
  SaStateKeeper keeper(directory_);
  auto sa = outbound(7);
  keeper.adopt(out_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  uint64_t sequence = 0;
  ASSERT_EQ(take(*sa, sequence), DropReason::none);
  EXPECT_EQ(sequence, 201u);
}

TEST_F(SaStateKeeperTest, AReservationIsRaisedBeforeItRunsOut) {
  SaStateKeeper keeper(directory_);
  auto sa = outbound(7);
  keeper.adopt(out_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  const uint64_t first = sa->sequence_ceiling();
  sa->set_next_sequence(first - 10);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_GE(sa->sequence_ceiling(), first + SaStateKeeper::kOutboundBlock / 2);
}

TEST_F(SaStateKeeperTest, LostStateHoldsEveryStaticKey) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    keeper.adopt(out_key_, sa, InstallOrigin::static_file);
    ASSERT_TRUE(keeper.reserve());
    send(*sa, 10);
  }
  std::filesystem::remove(directory_ + "/" + xfrm::SaStateStore::kStateFile);
  for (int start = 0; start < 2; ++start) {  // and it stays held on the start after
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    auto other = outbound(8);  // a key never seen: after a loss, nobody knows
    auto in = inbound(9);
    EXPECT_TRUE(keeper.adopt(out_key_, sa, InstallOrigin::static_file));
    EXPECT_TRUE(keeper.adopt(key(xfrm::Direction::out, 8), other, InstallOrigin::static_file));
    EXPECT_TRUE(keeper.adopt(key(xfrm::Direction::in, 9), in, InstallOrigin::static_file));
    ASSERT_TRUE(keeper.reserve());
    uint64_t sequence = 0;
    EXPECT_EQ(take(*sa, sequence), DropReason::sa_held);
    EXPECT_EQ(take(*other, sequence), DropReason::sa_held);
    EXPECT_EQ(receive(*in, 1), Verdict::held);
    EXPECT_EQ(keeper.status().held, 3u);
  }
  // charon's new keys are not affected by the loss.
  SaStateKeeper keeper(directory_);
  auto fresh = outbound(10);
  EXPECT_FALSE(keeper.adopt(key(xfrm::Direction::out, 10), fresh, InstallOrigin::charon_new));
  uint64_t sequence = 0;
  EXPECT_EQ(take(*fresh, sequence), DropReason::none);
}

TEST_F(SaStateKeeperTest, CorruptStateHoldsStaticKeys) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    keeper.adopt(out_key_, sa, InstallOrigin::static_file);
    ASSERT_TRUE(keeper.reserve());
  }
  std::filesystem::resize_file(directory_ + "/" + xfrm::SaStateStore::kStateFile, 30);
  SaStateKeeper keeper(directory_);
  EXPECT_EQ(keeper.health(), xfrm::SaStateStore::Health::lost);
  auto sa = outbound(7);
  EXPECT_TRUE(keeper.adopt(out_key_, sa, InstallOrigin::static_file));
}

TEST_F(SaStateKeeperTest, CharonKeysStartAtOnceAndReplayedOnesContinueOrAreHeld) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = outbound(7);
    EXPECT_FALSE(keeper.adopt(out_key_, sa, InstallOrigin::charon_new));
    uint64_t sequence = 0;
    EXPECT_EQ(take(*sa, sequence), DropReason::none) << "a rekeyed SA must not wait for disk";
    ASSERT_TRUE(keeper.reserve());
    send(*sa, 50);
  }
  SaStateKeeper keeper(directory_);
  auto again = outbound(7);
  EXPECT_FALSE(keeper.adopt(out_key_, again, InstallOrigin::charon_replayed));
  ASSERT_TRUE(keeper.reserve());
  uint64_t sequence = 0;
  ASSERT_EQ(take(*again, sequence), DropReason::none);
  EXPECT_GT(sequence, SaStateKeeper::kNewKeyAllowance);
  // Replayed, but no record of its key (it died before its first write): held.
  auto unknown = outbound(8);
  EXPECT_TRUE(keeper.adopt(key(xfrm::Direction::out, 8), unknown, InstallOrigin::charon_replayed));
  EXPECT_EQ(take(*unknown, sequence), DropReason::sa_held);
}

TEST_F(SaStateKeeperTest, AReinstalledKeyContinuesWithoutAGapOrAWait) {
  SaStateKeeper keeper(directory_);
  auto old_sa = outbound(7);
  keeper.adopt(out_key_, old_sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  const uint64_t last = send(*old_sa, 300);
  keeper.retire(out_key_, /*forget=*/false);  // a reload that changed a lifetime
  uint64_t sequence = 0;
  EXPECT_EQ(take(*old_sa, sequence), DropReason::sa_held) << "the old SA is sealed";
  auto successor = outbound(7);
  keeper.adopt(out_key_, successor, InstallOrigin::static_file);
  ASSERT_EQ(take(*successor, sequence), DropReason::none);
  EXPECT_EQ(sequence, last + 1);
}

TEST_F(SaStateKeeperTest, TwoLiveSasNeverShareAKeysNumbers) {
  // Refused in a static file, but if two installed SAs ever carried one key, the second
  // takes over after the first's last number and the first is sealed.
  SaStateKeeper keeper(directory_);
  auto first = outbound(7);
  keeper.adopt(out_key_, first, InstallOrigin::charon_new);
  const uint64_t last = send(*first, 10);
  auto second = outbound(7);
  keeper.adopt(out_key_, second, InstallOrigin::charon_new);
  uint64_t sequence = 0;
  EXPECT_EQ(take(*first, sequence), DropReason::sa_held);
  ASSERT_TRUE(keeper.reserve());
  ASSERT_EQ(take(*second, sequence), DropReason::none);
  EXPECT_EQ(sequence, last + 1);
}

TEST_F(SaStateKeeperTest, AForgottenKeyLeavesTheFile) {
  SaStateKeeper keeper(directory_);
  auto sa = outbound(7);
  keeper.adopt(out_key_, sa, InstallOrigin::charon_new);
  ASSERT_TRUE(keeper.reserve());
  ASSERT_TRUE(records_on_disk().contains(out_key_));
  keeper.retire(out_key_, /*forget=*/true);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_TRUE(records_on_disk().empty());
}

TEST_F(SaStateKeeperTest, InboundRefusesAfterACrashWhatItMayHaveAccepted) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = inbound(7);
    keeper.adopt(in_key_, sa, InstallOrigin::static_file);
    EXPECT_EQ(receive(*sa, 1), Verdict::unreserved) << "nothing reserved yet";
    ASSERT_TRUE(keeper.reserve());
    for (uint64_t s = 1; s <= kAccepted; ++s) ASSERT_EQ(receive(*sa, s), Verdict::accept);
  }
  SaStateKeeper keeper(directory_);
  auto sa = inbound(7);
  keeper.adopt(in_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  for (uint64_t s = 1; s <= kAccepted; ++s) EXPECT_NE(receive(*sa, s), Verdict::accept) << s;
  // Everything up to the old reservation may have been accepted before the crash.
  EXPECT_NE(receive(*sa, kAccepted + 1), Verdict::accept);
  EXPECT_EQ(receive(*sa, kAccepted + SaStateKeeper::kInboundMinBlock + 1), Verdict::accept);
}

TEST_F(SaStateKeeperTest, InboundAfterACleanStopRefusesOnlyWhatItAccepted) {
  {
    SaStateKeeper keeper(directory_);
    auto sa = inbound(7);
    keeper.adopt(in_key_, sa, InstallOrigin::static_file);
    ASSERT_TRUE(keeper.reserve());
    for (uint64_t s = 1; s <= kAccepted; ++s) ASSERT_EQ(receive(*sa, s), Verdict::accept);
    ASSERT_TRUE(keeper.write_exact());
  }
  SaStateKeeper keeper(directory_);
  auto sa = inbound(7);
  keeper.adopt(in_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  for (uint64_t s = 1; s <= kAccepted; ++s) EXPECT_EQ(receive(*sa, s), Verdict::replayed) << s;
  EXPECT_EQ(receive(*sa, kAccepted + 1), Verdict::accept);
  EXPECT_EQ(receive(*sa, kAccepted + 3), Verdict::accept);
  EXPECT_EQ(receive(*sa, kAccepted + 2), Verdict::accept) << "below the new top, never seen";
}

TEST_F(SaStateKeeperTest, InboundReservationFollowsTheRate) {
  SaStateKeeper keeper(directory_);
  auto sa = inbound(7);
  keeper.adopt(in_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  const uint64_t first = sa->replay_window().accept_limit();
  EXPECT_GE(first, SaStateKeeper::kInboundMinBlock);
  for (uint64_t s = 1; s <= first; ++s) ASSERT_EQ(receive(*sa, s), Verdict::accept);
  EXPECT_EQ(receive(*sa, first + 1), Verdict::unreserved);
  ASSERT_TRUE(keeper.reserve());
  EXPECT_GE(sa->replay_window().accept_limit(), first * 16)
      << "a burst gets a step of its own size at least 16 times";
  EXPECT_EQ(receive(*sa, first + 1), Verdict::accept);
}

TEST_F(SaStateKeeperTest, AnAuthenticJumpIsReservedOnTheSpot) {
  // A peer that crashed continues past its own last reservation, far above this SA's
  // accept limit. Decapsulation calls the SA's reserver for such an authentic number:
  // the packet waits for the disk instead of being dropped.
  SaStateKeeper keeper(directory_);
  auto sa = inbound(7);
  keeper.adopt(in_key_, sa, InstallOrigin::static_file);
  ASSERT_TRUE(keeper.reserve());
  ASSERT_EQ(receive(*sa, 5), Verdict::accept);
  const uint64_t jumped = 5 + SaStateKeeper::kOutboundBlock + 1;
  EXPECT_EQ(receive(*sa, jumped), Verdict::unreserved) << "without a reservation";
  ASSERT_TRUE(sa->reserve_through(jumped));
  EXPECT_EQ(receive(*sa, jumped), Verdict::accept);
  // The SA's rate sizes the step, not the million-number jump.
  EXPECT_LT(sa->replay_window().accept_limit(), jumped + SaStateKeeper::kInboundMaxBlock / 16);
  const auto on_disk = records_on_disk();
  ASSERT_TRUE(on_disk.contains(in_key_));
  EXPECT_GE(on_disk.at(in_key_).high_water, jumped) << "the reservation is on disk";
}

TEST_F(SaStateKeeperTest, OneDirectoryOneInstance) {
  SaStateKeeper first(directory_);
  EXPECT_THROW(SaStateKeeper second(directory_), std::runtime_error);
}

// The reservation thread raises ceilings while two data-path threads take sequence numbers
// and the control side replaces the SA under the same key: no number is handed out twice,
// and none beyond what was on disk when it was handed out. (Run under TSan in CI.)
TEST_F(SaStateKeeperTest, ConcurrentSendersNeverOutrunTheDiskOrRepeatANumber) {
  SaStateKeeper keeper(directory_);
  keeper.start();
  std::shared_ptr<esp::OutboundSa> current = outbound(7);
  std::mutex current_mutex;
  keeper.adopt(out_key_, current, InstallOrigin::charon_new);
  std::atomic<bool> stop{false};
  std::vector<std::vector<uint64_t>> taken(2);
  std::vector<std::thread> senders;
  for (size_t t = 0; t < taken.size(); ++t)
    senders.emplace_back([&, t] {
      while (!stop.load()) {
        std::shared_ptr<esp::OutboundSa> sa;
        {
          std::lock_guard lock(current_mutex);
          sa = current;
        }
        uint64_t sequence = 0;
        for (int i = 0; i < 1000; ++i)
          if (take(*sa, sequence) == DropReason::none) taken[t].push_back(sequence);
      }
    });
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    // A reload that changed the SA: the old one is sealed, the new one continues.
    std::lock_guard lock(current_mutex);
    keeper.retire(out_key_, /*forget=*/false);
    current = outbound(7);
    keeper.adopt(out_key_, current, InstallOrigin::static_file);
  }
  stop.store(true);
  for (auto& sender : senders) sender.join();
  keeper.stop();
  std::vector<uint64_t> all;
  for (const auto& numbers : taken) all.insert(all.end(), numbers.begin(), numbers.end());
  std::sort(all.begin(), all.end());
  EXPECT_GT(all.size(), 1000u);
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a sequence number twice";
  // Everything handed out is covered by what the file says now.
  ASSERT_TRUE(keeper.write_exact());
  const auto state = keeper.sa_state(out_key_);
  ASSERT_TRUE(state);
  EXPECT_GE(state->reserved, all.back());
}

}  // namespace
}  // namespace espgw::daemon

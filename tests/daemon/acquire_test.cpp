// Acquires of trap policies: the per-policy pacing (AcquireLimiter), what the data path
// does with a packet that finds no SA group (AcquireRaiser), and the event charon's
// plugin reads (acquire_event).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "daemon/acquire_limiter.h"
#include "daemon/acquire_raiser.h"
#include "daemon/charon_messages.h"

namespace espgw::daemon {
namespace {

using Verdict = AcquireLimiter::Verdict;

TEST(AcquireLimiter, OnePerPolicyPerInterval) {
  AcquireLimiter limiter(3000);
  EXPECT_EQ(limiter.claim(7, 10'000), Verdict::raise);
  for (uint64_t t = 10'000; t < 13'000; t += 10) ASSERT_EQ(limiter.claim(7, t), Verdict::paced);
  EXPECT_EQ(limiter.claim(7, 13'000), Verdict::raise);
  EXPECT_EQ(limiter.claim(7, 13'001), Verdict::paced);
}

TEST(AcquireLimiter, OnePolicyStormDoesNotDelayAnother) {
  AcquireLimiter limiter(3000);
  for (int i = 0; i < 100000; ++i) limiter.claim(1, 5'000 + i / 100);
  for (uint32_t reqid = 2; reqid < 1000; ++reqid)
    ASSERT_EQ(limiter.claim(reqid, 5'500), Verdict::raise) << reqid;
  // Each of those has its own pace.
  for (uint32_t reqid = 2; reqid < 1000; ++reqid)
    ASSERT_EQ(limiter.claim(reqid, 5'600), Verdict::paced) << reqid;
}

TEST(AcquireLimiter, AFullTableRefusesUntilItsSlotsAge) {
  AcquireLimiter limiter(3000);
  // More pending policies than slots: some find every slot they may use taken.
  size_t raised = 0, full = 0;
  for (uint32_t reqid = 1; reqid <= 2 * AcquireLimiter::kSlots; ++reqid) {
    const Verdict verdict = limiter.claim(reqid, 1'000);
    raised += verdict == Verdict::raise;
    full += verdict == Verdict::table_full;
  }
  EXPECT_LE(raised, AcquireLimiter::kSlots);
  EXPECT_GT(full, 0u);
  EXPECT_EQ(raised + full, 2 * AcquireLimiter::kSlots);
  // An interval later the slots are free for anyone: every policy gets one again, and
  // the table never holds more than it has.
  raised = 0;
  for (uint32_t reqid = 2 * AcquireLimiter::kSlots + 1; reqid <= 2 * AcquireLimiter::kSlots + 100;
       ++reqid)
    raised += limiter.claim(reqid, 4'000) == Verdict::raise;
  EXPECT_EQ(raised, 100u);
}

TEST(AcquireLimiter, AgesAcrossTheClocksWrap) {
  AcquireLimiter limiter(3000);
  const uint64_t before_wrap = (uint64_t{1} << 31) - 1000;
  EXPECT_EQ(limiter.claim(9, before_wrap), Verdict::raise);
  EXPECT_EQ(limiter.claim(9, before_wrap + 2'000), Verdict::paced);
  EXPECT_EQ(limiter.claim(9, before_wrap + 3'000), Verdict::raise);
}

TEST(AcquireLimiter, ReadersRacingForOnePolicyRaiseOnce) {
  AcquireLimiter limiter(3000);
  std::atomic<int> raised{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r)
    readers.emplace_back([&] {
      for (int i = 0; i < 20000; ++i)
        if (limiter.claim(42, 100'000) == Verdict::raise) raised.fetch_add(1);
    });
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(raised.load(), 1);
}

packet::FlowKey udp_flow() {
  packet::FlowKey key;
  key.source = *esp::IpAddress::parse("10.1.0.2");
  key.destination = *esp::IpAddress::parse("10.2.0.2");
  key.protocol = 17;
  key.ports_known = true;
  key.source_port = 40000;
  key.destination_port = 53;
  return key;
}

TEST(AcquireRaiser, AStormRaisesOneAcquireAndCountsTheRest) {
  GatewayCounters counters;
  AcquireRaiser raiser(counters);
  std::vector<uint32_t> sent;
  raiser.on_acquire([&](uint32_t reqid, const packet::FlowKey& packet) {
    EXPECT_EQ(packet, udp_flow());
    sent.push_back(reqid);
    return true;
  });
  for (int i = 0; i < 1000; ++i) raiser.no_sa_group(5, udp_flow());
  raiser.no_sa_group(6, udp_flow());
  EXPECT_EQ(sent, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(counters.acquires.load(), 2u);
  EXPECT_EQ(counters.acquires_paced.load(), 999u);
  EXPECT_EQ(counters.acquires_no_charon.load(), 0u);
}

TEST(AcquireRaiser, WithoutCharonTheAcquireIsCountedAndPacedAlike) {
  GatewayCounters counters;
  AcquireRaiser raiser(counters);
  int calls = 0;
  raiser.on_acquire([&](uint32_t, const packet::FlowKey&) {
    ++calls;
    return false;
  });
  for (int i = 0; i < 100; ++i) raiser.no_sa_group(5, udp_flow());
  EXPECT_EQ(calls, 1);  // no event built per packet of a storm
  EXPECT_EQ(counters.acquires.load(), 0u);
  EXPECT_EQ(counters.acquires_no_charon.load(), 1u);
  EXPECT_EQ(counters.acquires_paced.load(), 99u);
}

TEST(AcquireRaiser, NothingWithoutAHandlerOrForReqidZero) {
  GatewayCounters counters;
  AcquireRaiser raiser(counters);
  raiser.no_sa_group(5, udp_flow());
  raiser.on_acquire([](uint32_t, const packet::FlowKey&) -> bool { std::abort(); });
  raiser.no_sa_group(0, udp_flow());  // not charon's: it would find no trap
  EXPECT_EQ(counters.acquires.load() + counters.acquires_paced.load() +
                counters.acquires_no_charon.load(),
            0u);
}

TEST(AcquireEvent, CarriesThePacketsSelectors) {
  const vici::Message event = acquire_event(12, udp_flow());
  EXPECT_EQ(event.number("reqid"), 12u);
  ASSERT_NE(event.value("src"), nullptr);
  EXPECT_EQ(*event.value("src"), "10.1.0.2");
  EXPECT_EQ(*event.value("dst"), "10.2.0.2");
  EXPECT_EQ(event.number("proto"), 17u);
  EXPECT_EQ(event.number("src-port"), 40000u);
  EXPECT_EQ(event.number("dst-port"), 53u);
}

TEST(AcquireEvent, APacketWithoutPortsHasNone) {
  packet::FlowKey key;
  key.source = *esp::IpAddress::parse("fd00:1::2");
  key.destination = *esp::IpAddress::parse("fd00:2::2");
  key.protocol = 58;  // ICMPv6
  const vici::Message event = acquire_event(3, key);
  EXPECT_EQ(*event.value("src"), "fd00:1::2");
  EXPECT_EQ(*event.value("dst"), "fd00:2::2");
  EXPECT_EQ(event.number("proto"), 58u);
  EXPECT_EQ(event.value("src-port"), nullptr);
  EXPECT_EQ(event.value("dst-port"), nullptr);
}

}  // namespace
}  // namespace espgw::daemon

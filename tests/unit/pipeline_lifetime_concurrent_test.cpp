// Channels removed or let go while packets are in flight: nothing is lost uncounted, and
// a channel outlives the packets that point at it, and no longer.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>

#include "esp/decap.h"
#include "esp/encap.h"
#include "packet/flow_key.h"
#include "pipeline/flow_hash.h"
#include "pipeline/pipeline.h"
#include "pipeline/sa_group.h"
#include "support/sequential_esp.h"
#include "unit/pipeline_test_support.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::pipeline {
namespace {

using crypto::AeadAlgorithm;

TEST(PipelineConcurrent, RemovingAnSaWhilePacketsAreInFlightLosesNothingUncounted) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 128;
  config.before_crypto = random_delay;
  RecordingSink sink(true);
  auto sa_config = test::make_sa_config(AeadAlgorithm::aes_gcm_256, false, false, false, 0x400);
  esp::OutboundSa sender(sa_config, crypto::ipsec_mb_backend());
  std::vector<std::vector<uint8_t>> wire;
  for (uint32_t i = 1; i <= 2000; ++i) {
    esp::PacketBuffer buffer;
    buffer.assign(tagged_packet(0, i));
    ASSERT_EQ(test::encapsulate(sender, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
    wire.emplace_back(buffer.bytes().begin(), buffer.bytes().end());
  }
  uint64_t rejected = 0;
  std::shared_ptr<InboundChannel> channel;
  {
    Pipeline pipeline(config);
    channel = pipeline.add_inbound(
        std::make_shared<esp::InboundSa>(sa_config, crypto::ipsec_mb_backend()), sink);
    for (size_t i = 0; i < wire.size(); ++i) {
      if (i == wire.size() / 2) {
        ASSERT_TRUE(pipeline.remove_inbound(0x400));
      }
      Packet* p = acquire_blocking(pipeline);
      p->buffer.assign(wire[i]);
      rejected += pipeline.submit_inbound(p) == esp::DropReason::no_sa;
    }
    EXPECT_EQ(pipeline.engine_counters().drops(esp::DropReason::no_sa), rejected);
  }
  EXPECT_EQ(sink.count() + rejected, wire.size());
  EXPECT_EQ(channel->sa().counters().packets(), sink.count());
}

// Holds every worker in before_crypto until opened, so a test can act while packets are
// certainly in flight.
class WorkerGate {
 public:
  void wait(unsigned) {
    while (!open_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  void open() { open_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> open_{false};
};

// Two workers behind `gate`; the submitting thread never runs crypto itself, so it cannot
// end up behind the gate.
PipelineConfig gated_config(WorkerGate& gate) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 512;
  config.before_crypto = [&gate](unsigned worker) { gate.wait(worker); };
  config.submitter_assist_threshold = 0;
  return config;
}

// Packets point at their channel without owning it: when the last owner lets go while
// packets are in flight, the channel (its SA, its key, its sink's keeper) must stay until
// they are delivered, and go after.
TEST(PipelineConcurrent, AnOutboundChannelDroppedWithPacketsInFlightOutlivesThemOnly) {
  constexpr uint32_t kPackets = 200;
  WorkerGate gate;
  const PipelineConfig config = gated_config(gate);
  RecordingSink sink(false);
  Pipeline pipeline(config);
  auto sa = std::make_shared<esp::OutboundSa>(
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x600),
      crypto::ipsec_mb_backend());
  std::weak_ptr<esp::OutboundSa> sa_alive = sa;
  auto sink_keeper = std::make_shared<int>(0);
  std::weak_ptr<int> keeper_alive = sink_keeper;
  auto channel = pipeline.make_outbound(std::move(sa), sink, std::move(sink_keeper));
  for (uint32_t i = 1; i <= kPackets; ++i) {
    Packet* p = acquire_blocking(pipeline);
    ASSERT_TRUE(p->buffer.assign(tagged_packet(0, i)));
    ASSERT_EQ(pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit),
              esp::DropReason::none);
  }
  channel.reset();  // the only owner
  EXPECT_EQ(pipeline.channels_awaiting_deletion(), 1u);
  // Longer than the reclaimer's poll: still there, the packets point at it.
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_FALSE(sa_alive.expired());
  EXPECT_FALSE(keeper_alive.expired());
  gate.open();
  ASSERT_TRUE(wait_for([&] { return sink.count() == kPackets; }, std::chrono::seconds(10)));
  ASSERT_TRUE(wait_for([&] { return sa_alive.expired() && keeper_alive.expired(); },
                       std::chrono::seconds(10)));
  EXPECT_EQ(pipeline.channels_awaiting_deletion(), 0u);
  for (uint32_t i = 0; i < kPackets; ++i) ASSERT_EQ(sink.sequence_[i], i + 1);
  EXPECT_FALSE(sink.overlapped());
}

// A reader's cached view of an ECMP group holds the group's channels. When a member is
// removed, or the whole group deleted, and the reader never picks from that group again,
// the view must not keep the removed SA (and its key schedule) alive: the reader lets go
// of retired views when it goes idle, after their packets left (a fence, as a pick
// after the change would have done).
TEST(PipelineConcurrent, ReadersLetGoOfRemovedEcmpMembersTheyNoLongerPick) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 256;
  RecordingSink sink(false);
  Pipeline pipeline(config);
  // A reader of its own: its cache of group views starts empty.
  std::thread reader([&] {
    auto group = std::make_unique<SaGroup>();
    auto doomed = std::make_unique<SaGroup>();
    std::vector<std::weak_ptr<OutboundChannel>> removed;
    auto channel_a = gcm_outbound(pipeline, sink, 0x700);
    auto channel_b = gcm_outbound(pipeline, sink, 0x701);
    auto channel_c = gcm_outbound(pipeline, sink, 0x702);
    removed.push_back(channel_b);
    removed.push_back(channel_c);
    group->set_member(1, channel_a);
    group->set_member(2, std::move(channel_b));
    doomed->set_member(1, std::move(channel_c));
    // Pick from both groups (the cache now holds their member lists) and send a few
    // packets through what was picked.
    uint32_t sent = 0;
    for (const SaGroup* g : {group.get(), doomed.get()}) {
      for (uint16_t port = 1; port <= 8; ++port) {
        Packet* p = acquire_blocking(pipeline);
        auto bytes = tagged_packet(0, ++sent);
        store_be16(&bytes[20], port);  // another flow each time
        ASSERT_TRUE(p->buffer.assign(bytes));
        OutboundChannel* channel = g->pick_for_packet(packet::flow_key(bytes).value(), 42);
        ASSERT_NE(channel, nullptr);
        ASSERT_EQ(pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit),
                  esp::DropReason::none);
      }
    }
    ASSERT_TRUE(group->remove_member(2));
    doomed.reset();
    // Nothing else holds them now but this thread's cached views.
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    for (const auto& channel : removed) EXPECT_FALSE(channel.expired());

    const uint64_t fences_before = pipeline.fences();
    pipeline.release_retired_group_views();
    EXPECT_EQ(pipeline.fences() - fences_before, 2u) << "one fence per retired view";
    // The fences waited for the packets (up to the fence limit, which a slow sanitizer
    // build may reach: then they still arrive).
    ASSERT_TRUE(wait_for([&] { return sink.count() == sent; }, std::chrono::seconds(10)));
    ASSERT_TRUE(wait_for(
        [&] {
          return std::all_of(removed.begin(), removed.end(),
                             [](const auto& channel) { return channel.expired(); });
        },
        std::chrono::seconds(10)));
    // The live group's current view stays cached: no retired view is left, and the next
    // pick hands nothing over (its fence already happened).
    SaGroup::Superseded superseded;
    size_t looks = SaGroup::full_sweep_looks();
    EXPECT_FALSE(SaGroup::take_retired_view(superseded, looks));
    const auto bytes = tagged_packet(0, 1);
    EXPECT_EQ(group->pick_for_packet(packet::flow_key(bytes).value(), 42, &superseded),
              channel_a.get());
    EXPECT_TRUE(superseded.channels.empty());
  });
  reader.join();
  pipeline.wait_idle();
}

TEST(PipelineConcurrent, AnInboundChannelRemovedWithPacketsInFlightDeliversThemThenGoes) {
  constexpr uint32_t kPackets = 200;
  WorkerGate gate;
  const PipelineConfig config = gated_config(gate);
  RecordingSink sink(true);
  const auto sa_config =
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x601);
  esp::OutboundSa sender(sa_config, crypto::ipsec_mb_backend());
  Pipeline pipeline(config);
  auto sa = std::make_shared<esp::InboundSa>(sa_config, crypto::ipsec_mb_backend());
  std::weak_ptr<esp::InboundSa> sa_alive = sa;
  auto channel = pipeline.add_inbound(std::move(sa), sink);
  ASSERT_TRUE(channel);
  // A reader thread that has ended: its lookup cache no longer holds the channel.
  std::thread reader([&] {
    for (uint32_t i = 1; i <= kPackets; ++i) {
      Packet* p = acquire_blocking(pipeline);
      ASSERT_TRUE(p->buffer.assign(tagged_packet(0, i)));
      ASSERT_EQ(test::encapsulate(sender, p->buffer, esp::OuterHeaders::omit),
                esp::DropReason::none);
      ASSERT_EQ(pipeline.submit_inbound(p), esp::DropReason::none);
    }
  });
  reader.join();
  ASSERT_TRUE(pipeline.remove_inbound(0x601));
  channel.reset();
  EXPECT_EQ(pipeline.channels_awaiting_deletion(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_FALSE(sa_alive.expired());
  gate.open();
  ASSERT_TRUE(wait_for([&] { return sink.count() == kPackets; }, std::chrono::seconds(10)));
  ASSERT_TRUE(wait_for([&] { return sa_alive.expired(); }, std::chrono::seconds(10)));
  EXPECT_EQ(pipeline.channels_awaiting_deletion(), 0u);
  for (uint32_t i = 0; i < kPackets; ++i) ASSERT_EQ(sink.counter_[i], i + 1);
}

// A thread in a section may still follow a pointer to a channel that just became
// unreachable: deletion waits until it leaves. Sections that begin later hold it up at
// most as long as they last, so a stream of overlapping ones never blocks it for good.
TEST(ChannelReclaimer, WaitsForSectionsOpenWhenTheChannelBecameUnreachable) {
  PacketPool pool(1, 64);
  RecordingSink sink(false);
  ChannelReclaimer reclaimer;
  auto keeper = std::make_shared<int>(0);
  std::weak_ptr<int> alive = keeper;
  auto* channel = new OutboundChannel(
      std::make_shared<esp::OutboundSa>(
          test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0x602),
          crypto::ipsec_mb_backend()),
      sink, 16, std::move(keeper));
  const unsigned first = reclaimer.enter();
  reclaimer.retire(channel);
  EXPECT_TRUE(reclaimer.reclaim(pool));
  EXPECT_TRUE(reclaimer.reclaim(pool));
  EXPECT_FALSE(alive.expired());
  const unsigned second = reclaimer.enter();  // overlaps the first
  reclaimer.exit(first);
  EXPECT_TRUE(reclaimer.reclaim(pool));
  EXPECT_FALSE(alive.expired());
  const unsigned third = reclaimer.enter();  // overlaps the second
  reclaimer.exit(second);
  EXPECT_FALSE(reclaimer.reclaim(pool));  // the third began after: it cannot reach it
  EXPECT_TRUE(alive.expired());
  EXPECT_EQ(reclaimer.waiting(), 0u);
  reclaimer.exit(third);
}

}  // namespace
}  // namespace espgw::pipeline

// Each SA's packets leave in order, outbound and inbound, from many producers and workers,
// through sinks of their own or a shared one, despite network reordering and loss.
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

// Stands for the WAN socket that every SA's packets leave through: passes each channel's
// packets to its RecordingSink (which checks that no two threads deliver one channel at
// once) and counts the calls that carried several channels.
class GatheringSink final : public SharedSink {
 public:
  void deliver_together(std::span<const ChannelDelivery> deliveries) override {
    random_delay(0);  // a slow send: other threads stage these channels' next packets meanwhile
    calls.fetch_add(1);
    if (deliveries.size() > 1) calls_with_several_channels.fetch_add(1);
    for (const ChannelDelivery& delivery : deliveries)
      delivery.channel_sink->deliver(delivery.packets);
  }
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> calls_with_several_channels{0};
};

// With worker threads, or with none: the producers run their packets to completion.
// With `shared`, the SAs' sinks share one of two GatheringSinks, as the gateway's WAN sinks
// share their socket's (one for ESP in UDP, one for raw ESP): a batch can span both.
void run_outbound(bool run_to_completion, bool shared = false) {
  constexpr int kSas = 6, kProducers = 3, kPerProducerPerSa = 1500;
  PipelineConfig config;
  config.workers = 4;
  config.run_to_completion = run_to_completion;
  config.pool_packets = 256;
  config.max_in_flight_per_sa = 32;  // small, so queue-full drops happen and are counted
  config.before_crypto = random_delay;
  std::vector<std::unique_ptr<RecordingSink>> sinks;
  std::vector<std::shared_ptr<OutboundChannel>> channels;
  std::atomic<uint64_t> attempts_refused{0};
  std::array<GatheringSink, 2> gathering;
  {
    Pipeline pipeline(config);
    for (int s = 0; s < kSas; ++s) {
      sinks.push_back(std::make_unique<RecordingSink>(false, shared ? &gathering[s % 2] : nullptr));
      auto sa = std::make_shared<esp::OutboundSa>(
          test::make_sa_config(AeadAlgorithm::aes_gcm_128, s % 2, false, false, 0x100 + s),
          crypto::ipsec_mb_backend());
      channels.push_back(pipeline.make_outbound(sa, *sinks.back()));
    }
    std::atomic<uint64_t> accepted{0};
    std::vector<std::thread> producers;
    for (int t = 0; t < kProducers; ++t) {
      producers.emplace_back([&, t] {
        // Each producer gets kPerProducerPerSa packets accepted on every SA; a refusal
        // (queue-full, counted) makes it back off briefly, like a reader that drops.
        // Like the daemon's readers, it hands its packets to the workers in batches.
        pipeline.register_reader();
        std::vector<int> done(kSas, 0);
        for (int remaining = kSas; remaining > 0;) {
          remaining = 0;
          for (int s = 0; s < kSas; ++s) {
            if (done[s] == kPerProducerPerSa) continue;
            ++remaining;
            Packet* p = acquire_blocking(pipeline);
            ASSERT_TRUE(p->buffer.assign(tagged_packet(t, done[s])));
            if (pipeline.submit_outbound(*channels[s], p, esp::OuterHeaders::omit) ==
                esp::DropReason::none) {
              accepted.fetch_add(1);
              ++done[s];
            } else {
              attempts_refused.fetch_add(1);
              // A reader finishes its batch when it has to drop: without workers, the
              // SA's packets in flight leave only when a producer completes them.
              pipeline.end_read_batch();
              std::this_thread::sleep_for(std::chrono::microseconds(20));
            }
          }
          pipeline.end_read_batch();
        }
      });
    }
    for (auto& t : producers) t.join();
    pipeline.wait_idle();
    ASSERT_TRUE(wait_for(
        [&] {
          size_t total = 0;
          for (auto& s : sinks) total += s->count();
          return total == accepted.load();
        },
        std::chrono::seconds(30)));
  }
  // The pipeline is gone: every packet must have come back to the pool, and each SA's
  // sequence numbers are 1, 2, 3, ... with no gap and no repeat.
  uint64_t queue_full = 0;
  for (int s = 0; s < kSas; ++s) {
    SCOPED_TRACE("SA " + std::to_string(s));
    const auto& seen = sinks[s]->sequence_;
    ASSERT_EQ(seen.size(), size_t{kProducers} * kPerProducerPerSa);
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i + 1);
    EXPECT_FALSE(sinks[s]->overlapped());
    auto& counters = channels[s]->sa().counters();
    EXPECT_EQ(counters.packets(), seen.size());
    queue_full += counters.drops(esp::DropReason::queue_full);
  }
  EXPECT_EQ(queue_full, attempts_refused.load()) << "every refusal is a counted queue-full drop";
  std::printf("[ pipeline ] outbound: %llu queue-full drops (counted)\n",
              static_cast<unsigned long long>(queue_full));
  if (shared) {
    // The producers submit to the SAs in turn, so batches span several: each shared sink
    // got its SAs' packets together.
    for (const GatheringSink& g : gathering) {
      EXPECT_GT(g.calls_with_several_channels.load(), 0u);
      std::printf("[ pipeline ] shared sink: %llu calls, %llu with several SAs\n",
                  static_cast<unsigned long long>(g.calls.load()),
                  static_cast<unsigned long long>(g.calls_with_several_channels.load()));
    }
  }
}

TEST(PipelineConcurrent, OutboundLeavesInSequenceOrderFromManyProducers) {
  run_outbound(false);
}

TEST(PipelineConcurrent, OutboundRunToCompletionLeavesInSequenceOrder) {
  run_outbound(true);
}

TEST(PipelineConcurrent, OutboundThroughASharedSinkLeavesInSequenceOrderWithWorkers) {
  run_outbound(false, true);
}

TEST(PipelineConcurrent, OutboundThroughASharedSinkLeavesInSequenceOrderRunToCompletion) {
  run_outbound(true, true);
}

struct InboundScenario {
  double loss = 0, duplicates = 0;
  // Packets whose inner source is outside the receiving SA's selectors: authentic, so
  // they take their number in the replay window, then dropped (policy mismatch), leaving
  // a tombstone in the reorder buffer.
  double off_policy = 0;
  size_t shuffle_window = 32;
  // The reorder buffer reaches further than the pool can hold packets (no overflow while
  // a worker is delayed), and the readers never run far ahead of a gap (no pressure).
  size_t pool = 1024, reorder_capacity = 2048;
  std::chrono::microseconds hold{std::chrono::seconds(2)};
  bool run_to_completion = false;  // no workers: the readers do the crypto
};

// Encrypts kPackets per SA in order, then feeds them to the pipeline's inbound side from
// two threads, reordered, duplicated and thinned as the scenario says.
void run_inbound(const InboundScenario& scenario) {
  constexpr int kSas = 4;
  constexpr uint32_t kPackets = 3000;
  PipelineConfig config;
  config.workers = 4;
  config.pool_packets = scenario.pool;
  config.reorder_capacity = scenario.reorder_capacity;
  config.reorder_hold = scenario.hold;
  config.before_crypto = random_delay;
  config.run_to_completion = scenario.run_to_completion;
  std::mt19937_64 rng(1234);

  std::vector<std::unique_ptr<RecordingSink>> sinks;
  std::vector<std::shared_ptr<InboundChannel>> channels;
  std::vector<std::vector<std::vector<uint8_t>>> wire(kSas);  // per SA, in "network" order
  std::vector<std::set<uint32_t>> sent(kSas), lost(kSas);
  uint64_t off_policy = 0;
  size_t duplicates = 0;
  auto pipeline = std::make_unique<Pipeline>(config);
  for (int s = 0; s < kSas; ++s) {
    auto sa_config =
        test::make_sa_config(AeadAlgorithm::aes_gcm_128, s % 2, false, false, 0x200 + s);
    esp::OutboundSa sender(sa_config, crypto::ipsec_mb_backend());
    sinks.push_back(std::make_unique<RecordingSink>(true));
    // tagged_packet's addresses: 10.1.0.1 -> 10.2.0.1.
    sa_config.selectors.push_back(
        {*esp::IpPrefix::parse("10.1.0.0/16"), *esp::IpPrefix::parse("10.2.0.0/16")});
    channels.push_back(pipeline->add_inbound(
        std::make_shared<esp::InboundSa>(sa_config, crypto::ipsec_mb_backend()), *sinks.back()));
    std::vector<std::vector<uint8_t>> stream;
    for (uint32_t i = 1; i <= kPackets; ++i) {
      esp::PacketBuffer buffer;
      auto inner = tagged_packet(s, i);
      const bool dropped_after_authentication =
          std::uniform_real_distribution<>(0, 1)(rng) < scenario.off_policy;
      if (dropped_after_authentication) inner[12] = 172;  // source 172.1.0.1
      buffer.assign(inner);
      EXPECT_EQ(test::encapsulate(sender, buffer, esp::OuterHeaders::omit), esp::DropReason::none);
      if (std::uniform_real_distribution<>(0, 1)(rng) < scenario.loss) {
        lost[s].insert(i);
        continue;
      }
      if (dropped_after_authentication)
        ++off_policy;
      else
        sent[s].insert(i);
      stream.emplace_back(buffer.bytes().begin(), buffer.bytes().end());
      if (std::uniform_real_distribution<>(0, 1)(rng) < scenario.duplicates) {
        stream.push_back(stream.back());
        ++duplicates;
      }
    }
    for (size_t start = 0; start < stream.size(); start += scenario.shuffle_window)
      std::shuffle(stream.begin() + start,
                   stream.begin() + std::min(stream.size(), start + scenario.shuffle_window), rng);
    wire[s] = std::move(stream);
  }
  // Two readers, like two receive queues with flow steering: each SA's packets arrive on
  // one of them, the SAs interleaved.
  std::atomic<uint64_t> refused{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      pipeline->register_reader();  // completes every read batch below
      std::vector<size_t> position(kSas, 0);
      for (bool more = true; more;) {
        more = false;
        for (int s = r; s < kSas; s += 2) {
          for (int burst = 0; burst < 16 && position[s] < wire[s].size(); ++burst) {
            Packet* p = acquire_blocking(*pipeline);
            ASSERT_TRUE(p->buffer.assign(wire[s][position[s]]));
            // The SA's bound of packets in crypto refuses it (counted queue-full) when
            // the workers fall behind, as on a loaded host: the network did deliver it,
            // so the reader backs off and offers it again rather than open a gap.
            if (pipeline->submit_inbound(p) == esp::DropReason::queue_full) {
              refused.fetch_add(1);
              pipeline->end_read_batch();
              std::this_thread::sleep_for(std::chrono::microseconds(20));
              continue;
            }
            ++position[s];
          }
          pipeline->end_read_batch();  // the end of a read batch
          more |= position[s] < wire[s].size();
        }
      }
    });
  }
  for (auto& t : readers) t.join();
  pipeline->wait_idle();
  const bool all_arrived = wait_for(
      [&] {
        for (int s = 0; s < kSas; ++s)
          if (sinks[s]->count() < sent[s].size()) return false;
        return true;
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(all_arrived);
  const uint64_t pressure_flushes = pipeline->pressure_flushes();
  pipeline.reset();  // flushes anything still held, joins the workers

  uint64_t replayed = 0, late = 0, policy_drops = 0, queue_full = 0;
  for (int s = 0; s < kSas; ++s) {
    SCOPED_TRACE("SA " + std::to_string(s));
    const auto& got = sinks[s]->counter_;
    EXPECT_FALSE(sinks[s]->overlapped());
    std::set<uint32_t> unique(got.begin(), got.end());
    EXPECT_EQ(unique.size(), got.size()) << "a packet was delivered twice";
    EXPECT_EQ(unique, sent[s]) << "delivered set differs from what was sent";
    size_t out_of_order = 0;
    for (size_t i = 1; i < got.size(); ++i) out_of_order += got[i] < got[i - 1];
    const auto stats = channels[s]->release().stats();
    late += stats.late;
    EXPECT_LE(out_of_order, stats.late) << "every out-of-order delivery is a counted late one";
    if (scenario.loss == 0) {
      EXPECT_EQ(pressure_flushes, 0u);
      EXPECT_EQ(out_of_order, 0u);
      EXPECT_EQ(stats.skipped, 0u);
    } else {
      EXPECT_GE(stats.skipped, lost[s].size()) << "each lost number was skipped, not waited on";
    }
    replayed += channels[s]->sa().counters().drops(esp::DropReason::replayed) +
                channels[s]->sa().counters().drops(esp::DropReason::outside_window);
    policy_drops += channels[s]->sa().counters().drops(esp::DropReason::policy_mismatch);
    queue_full += channels[s]->sa().counters().drops(esp::DropReason::queue_full);
  }
  EXPECT_EQ(queue_full, refused.load()) << "every refusal is a counted queue-full drop";
  EXPECT_EQ(replayed, duplicates) << "each duplicate is dropped and counted, nothing else";
  EXPECT_EQ(policy_drops, off_policy) << "each off-policy packet is dropped and counted";
  std::printf(
      "[ pipeline ] inbound: %zu duplicates dropped, %llu late deliveries, %llu pressure "
      "flushes, %llu refused and offered again\n",
      duplicates, static_cast<unsigned long long>(late),
      static_cast<unsigned long long>(pressure_flushes),
      static_cast<unsigned long long>(refused.load()));
}

TEST(PipelineConcurrent, InboundDeliversInSequenceOrderDespiteNetworkReordering) {
  run_inbound({.loss = 0, .duplicates = 0.02, .shuffle_window = 32});
}

TEST(PipelineConcurrent, InboundRunToCompletionDeliversInSequenceOrder) {
  // Each reader completes its own and the other's packets: the SAs' reorder buffers are
  // still what orders them, since the two readers interleave.
  run_inbound({.loss = 0.01,
               .duplicates = 0.02,
               .shuffle_window = 32,
               .hold = std::chrono::microseconds(2000),
               .run_to_completion = true});
}

TEST(PipelineConcurrent, InboundPacketsDroppedAfterAuthenticationHoldNoGapOpen) {
  // Their numbers become tombstones; one behind a gap whose packet is still with a
  // delayed worker must not end the gap's hold (it once did, and the packet came late).
  run_inbound({.duplicates = 0.02, .off_policy = 0.05, .shuffle_window = 32});
}

TEST(PipelineConcurrent, InboundSkipsLostPacketsAfterTheHoldTime) {
  // A small pool and large reorder buffers: pressure flushes happen too, and are counted.
  run_inbound({.loss = 0.01,
               .duplicates = 0.01,
               .shuffle_window = 8,
               .pool = 512,
               .reorder_capacity = 256,
               .hold = std::chrono::microseconds(2000)});
}

}  // namespace
}  // namespace espgw::pipeline

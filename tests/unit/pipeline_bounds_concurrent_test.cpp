// The bounds on packets in flight: per SA inbound, shared by an ECMP group outbound, and
// a reader's wait for room on a full SA.
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

// One SA's packets in crypto are bounded inbound (max_inbound_in_crypto_per_sa): a
// flood of forged packets on one SPI, which only the ICV check can tell from genuine ones,
// is dropped as queue-full once the SA has its bound in the workers, and another SA's
// packets still get in (they would have found the pool empty).
TEST(PipelineConcurrent, InboundPacketsInCryptoAreBoundedPerSa) {
  std::atomic<bool> open{false};
  PipelineConfig config;
  config.workers = 1;
  config.max_inbound_in_crypto_per_sa = 16;
  config.submitter_assist_threshold = 0;  // this thread must not run into the gate itself
  config.before_crypto = [&](unsigned) {
    while (!open.load()) std::this_thread::yield();
  };
  RecordingSink sink_a(true), sink_b(true);
  Pipeline pipeline(config);
  auto sa_a = std::make_shared<esp::InboundSa>(
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0xa),
      crypto::ipsec_mb_backend());
  auto sa_b = std::make_shared<esp::InboundSa>(
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, 0xb),
      crypto::ipsec_mb_backend());
  const auto channel_a = pipeline.add_inbound(sa_a, sink_a);
  ASSERT_TRUE(channel_a);
  ASSERT_TRUE(pipeline.add_inbound(sa_b, sink_b));
  auto forged = [&](uint32_t spi, uint32_t sequence) {
    std::vector<uint8_t> bytes(8 + 8 + 64 + 16, 0x5a);  // SPI, sequence, IV, data, ICV
    store_be32(bytes.data(), spi);
    store_be32(bytes.data() + 4, sequence);
    Packet* p = acquire_blocking(pipeline);
    EXPECT_TRUE(p->buffer.assign(bytes));
    return pipeline.submit_inbound(p);
  };
  size_t accepted = 0, full = 0;
  for (uint32_t i = 1; i <= 100; ++i) {
    const auto reason = forged(0xa, 1000 + i);  // future numbers: the pre-check passes them
    accepted += reason == esp::DropReason::none;
    full += reason == esp::DropReason::queue_full;
  }
  EXPECT_EQ(accepted, 16u);
  EXPECT_EQ(full, 84u);
  EXPECT_EQ(sa_a->counters().drop_counters().drops(esp::DropReason::queue_full), 84u);
  EXPECT_EQ(forged(0xb, 1), esp::DropReason::none);  // the other SA is not affected
  open.store(true);
  pipeline.wait_idle();
  EXPECT_EQ(sa_a->counters().drop_counters().drops(esp::DropReason::icv_failure), 16u);
  // Their numbers took no place in the reorder buffer and skipped nothing.
  EXPECT_EQ(channel_a->release().held(), 0u);
  EXPECT_EQ(channel_a->release().stats().skipped, 0u);
  EXPECT_EQ(channel_a->release().stats().released, 0u);
}

TEST(PipelineConcurrent, AnEcmpGroupSharesOneInFlightBound) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 256;
  config.max_in_flight_per_sa = 64;
  config.submitter_assist_threshold = 0;  // the test thread must not run the held crypto
  std::atomic<bool> open{false};
  // Workers wait before crypto until the test opens the gate: everything accepted stays
  // in flight meanwhile.
  config.before_crypto = [&](unsigned) {
    while (!open.load()) std::this_thread::yield();
  };
  RecordingSink sink_a(false), sink_b(false);
  {
    Pipeline pipeline(config);
    auto make = [&](uint32_t spi, RecordingSink& sink) {
      return pipeline.make_outbound(
          std::make_shared<esp::OutboundSa>(
              test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, spi),
              crypto::ipsec_mb_backend()),
          sink);
    };
    auto a = make(0x501, sink_a);
    auto b = make(0x502, sink_b);
    SaGroup group(config.max_in_flight_per_sa);
    group.set_member(1, a);
    group.set_member(2, b);
    auto submit = [&](uint32_t i) {
      Packet* p = acquire_blocking(pipeline);
      EXPECT_TRUE(p->buffer.assign(tagged_packet(0, i)));
      return pipeline.submit_outbound(i % 2 ? *a : *b, p, esp::OuterHeaders::omit);
    };
    size_t accepted = 0;
    for (uint32_t i = 0; i < 200; ++i)
      if (submit(i) == esp::DropReason::none) ++accepted;
    // Alone, each SA would have taken 64; together they take 64.
    EXPECT_EQ(accepted, 64u);
    const uint64_t refused = a->sa().counters().drops(esp::DropReason::queue_full) +
                             b->sa().counters().drops(esp::DropReason::queue_full);
    EXPECT_EQ(refused, 136u);
    EXPECT_EQ(a->budget()->in_flight.load(), 64u);

    open.store(true);
    ASSERT_TRUE(
        wait_for([&] { return sink_a.count() + sink_b.count() == 64; }, std::chrono::seconds(10)));
    // Every delivery gives its place back, just after the sink returns (so the last one
    // may still be on its way when the count above is reached).
    EXPECT_TRUE(
        wait_for([&] { return a->budget()->in_flight.load() == 0; }, std::chrono::seconds(10)))
        << a->budget()->in_flight.load() << " places still taken";
    for (uint32_t i = 200; i < 210; ++i) EXPECT_EQ(submit(i), esp::DropReason::none);
    pipeline.wait_idle();
  }
  EXPECT_EQ(sink_a.count() + sink_b.count(), 74u);
}

// The workers stall (a host whose CPUs are busy elsewhere, for tens of ms) while a reader
// keeps reading. Once the SA has its bound in flight and has delivered nothing for
// outbound_stall_probe, the reader waits for room (outbound_room_wait) instead of
// dropping what it read as queue-full: a burst of such drops costs TCP a loss per packet,
// and after a rekey the SA that counted them is gone.
TEST(PipelineConcurrent, AReaderWaitsForRoomOnAFullSaInsteadOfDropping) {
  constexpr int kBound = 64, kPackets = 3 * kBound;
  PipelineConfig config;
  config.workers = 2;
  config.max_in_flight_per_sa = kBound;
  config.submitter_assist_threshold = 0;
  config.outbound_room_wait = std::chrono::seconds(30);
  std::atomic<bool> open{false};
  config.before_crypto = [&](unsigned) {
    while (!open.load()) std::this_thread::yield();
  };
  RecordingSink sink(false);
  {
    Pipeline pipeline(config);
    auto channel = gcm_outbound(pipeline, sink, 0x6C0);
    std::thread reader([&] {
      pipeline.register_reader();
      submit_tagged(pipeline, channel, 0, 1, kPackets);
      pipeline.end_read_batch();
    });
    // The reader has filled the SA and waits; nothing is dropped meanwhile.
    ASSERT_TRUE(wait_for([&] { return pipeline.room_waits() != 0; }, std::chrono::seconds(10)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(channel->in_flight(), static_cast<size_t>(kBound));
    EXPECT_EQ(channel->sa().counters().drops(esp::DropReason::queue_full), 0u);
    open.store(true);
    reader.join();
    pipeline.wait_idle();
    EXPECT_EQ(channel->sa().counters().drops(esp::DropReason::queue_full), 0u);
    EXPECT_EQ(pipeline.room_wait_timeouts(), 0u);
  }
  expect_dense_sequence(sink, kPackets);
}

// A channel that does not deliver within outbound_room_wait does not hold the reader for
// good: the packet is dropped as queue-full, as without the wait, and counted.
TEST(PipelineConcurrent, AReaderGivesUpWaitingForRoomAfterTheLimit) {
  constexpr int kBound = 16;
  PipelineConfig config;
  config.workers = 1;
  config.max_in_flight_per_sa = kBound;
  config.submitter_assist_threshold = 0;
  config.outbound_room_wait = std::chrono::milliseconds(30);
  std::atomic<bool> open{false};
  std::atomic<int> held{0};
  config.before_crypto = [&](unsigned) {
    held.fetch_add(1);
    while (!open.load()) std::this_thread::yield();
  };
  RecordingSink sink(false);
  {
    Pipeline pipeline(config);
    auto channel = gcm_outbound(pipeline, sink, 0x6C1);
    std::thread reader([&] {
      pipeline.register_reader();
      submit_tagged(pipeline, channel, 0, 1, kBound);
      // The worker holds them all (one batch): the reader has nothing to help with.
      pipeline.end_read_batch();
      ASSERT_TRUE(wait_for([&] { return held.load() != 0; }, std::chrono::seconds(10)));
      Packet* p = acquire_blocking(pipeline);
      ASSERT_TRUE(p->buffer.assign(tagged_packet(0, kBound + 1)));
      const auto start = std::chrono::steady_clock::now();
      EXPECT_EQ(pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit),
                esp::DropReason::queue_full);
      EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
      pipeline.end_read_batch();
    });
    reader.join();
    EXPECT_EQ(pipeline.room_waits(), 1u);
    EXPECT_EQ(pipeline.room_wait_timeouts(), 1u);
    EXPECT_EQ(channel->sa().counters().drops(esp::DropReason::queue_full), 1u);
    open.store(true);
    pipeline.wait_idle();
  }
  expect_dense_sequence(sink, kBound);
}

// An SA that keeps delivering but gets more than its crypto takes (a standing queue under
// TCP) is not stalled: a reader at its bound drops (the tunnel's AQM) rather than wait,
// which would let the TUN queue fill behind it.
TEST(PipelineConcurrent, AReaderDropsAtTheBoundOfAnSaThatStillDelivers) {
  constexpr int kBound = 32, kPackets = 2000;
  PipelineConfig config;
  config.workers = 1;
  config.max_in_flight_per_sa = kBound;
  config.submitter_assist_threshold = 0;
  config.outbound_room_wait = std::chrono::seconds(30);
  config.outbound_stall_probe = std::chrono::milliseconds(200);  // deliveries come far sooner
  config.before_crypto = [](unsigned) {                          // slow crypto: 5 us a packet
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  RecordingSink sink(false);
  uint64_t dropped = 0, timeouts = 0;
  {
    Pipeline pipeline(config);
    auto channel = gcm_outbound(pipeline, sink, 0x6C2);
    std::thread reader([&] {
      pipeline.register_reader();
      for (uint32_t i = 1; i <= kPackets; ++i) {
        Packet* p = acquire_blocking(pipeline);
        EXPECT_TRUE(p->buffer.assign(tagged_packet(0, i)));
        const auto reason = pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit);
        EXPECT_TRUE(reason == esp::DropReason::none || reason == esp::DropReason::queue_full);
        if (i % 32 == 0) pipeline.end_read_batch();
      }
      pipeline.end_read_batch();
    });
    reader.join();
    pipeline.wait_idle();
    dropped = channel->sa().counters().drops(esp::DropReason::queue_full);
    timeouts = pipeline.room_wait_timeouts();
  }
  EXPECT_GT(dropped, 0u) << "the reader waited at the bound of an SA that delivered";
  EXPECT_EQ(timeouts, 0u);
  // The drops took no sequence number: what left is dense and in order.
  expect_dense_sequence(sink, kPackets - dropped);
}

// Readers of one group submit at the same time. Each round holds the workers, lets two
// readers race to fill the group's bound, counts what got in, then lets it drain. A look
// at the count followed by an increment let both readers past the bound when they looked
// together; the place is now taken before the look, so no round admits more.
TEST(PipelineConcurrent, ReadersSubmittingAtOnceNeverPassAnEcmpGroupsBound) {
  constexpr uint64_t kGroupBound = 6;
  constexpr int kRounds = 150, kReaders = 2, kAttemptsPerReader = 24;
  PipelineConfig config;
  config.workers = 1;
  config.pool_packets = 256;
  config.max_in_flight_per_sa = 64;       // above the group's: the group's bound decides
  config.submitter_assist_threshold = 0;  // readers must not run the held crypto
  std::atomic<bool> open{false};
  config.before_crypto = [&](unsigned) {
    while (!open.load()) std::this_thread::yield();
  };
  RecordingSink sink_a(false), sink_b(false);
  uint64_t most_admitted = 0, total_admitted = 0, refused = 0;
  {
    Pipeline pipeline(config);
    auto a = gcm_outbound(pipeline, sink_a, 0x511);
    auto b = gcm_outbound(pipeline, sink_b, 0x512);
    SaGroup group(kGroupBound);
    group.set_member(1, a);
    group.set_member(2, b);
    for (int round = 0; round < kRounds; ++round) {
      open.store(false);
      std::atomic<uint64_t> admitted{0};
      std::atomic<int> ready{0};
      std::vector<std::thread> readers;
      for (int r = 0; r < kReaders; ++r) {
        readers.emplace_back([&, r] {
          pipeline.register_reader();
          // Both start together, so that they meet at the bound.
          ready.fetch_add(1);
          while (ready.load() < kReaders) {
          }
          for (int i = 0; i < kAttemptsPerReader; ++i) {
            Packet* p = acquire_blocking(pipeline);
            EXPECT_TRUE(p->buffer.assign(tagged_packet(r, i)));
            OutboundChannel& channel = (i + r) % 2 ? *a : *b;
            if (pipeline.submit_outbound(channel, p, esp::OuterHeaders::omit) ==
                esp::DropReason::none)
              admitted.fetch_add(1);
          }
          pipeline.end_read_batch();
        });
      }
      for (auto& reader : readers) reader.join();
      EXPECT_EQ(a->budget()->in_flight.load(), admitted.load()) << "round " << round;
      most_admitted = std::max(most_admitted, admitted.load());
      total_admitted += admitted.load();
      open.store(true);
      ASSERT_TRUE(wait_for([&] { return sink_a.count() + sink_b.count() == total_admitted; },
                           std::chrono::seconds(10)));
      ASSERT_TRUE(
          wait_for([&] { return a->budget()->in_flight.load() == 0; }, std::chrono::seconds(10)));
    }
    pipeline.wait_idle();
    refused = a->sa().counters().drops(esp::DropReason::queue_full) +
              b->sa().counters().drops(esp::DropReason::queue_full);
  }
  EXPECT_LE(most_admitted, kGroupBound) << "packets admitted beyond the group's bound";
  EXPECT_GT(total_admitted, 0u);
  EXPECT_EQ(total_admitted + refused, uint64_t{kRounds} * kReaders * kAttemptsPerReader)
      << "every attempt was admitted or counted as a queue-full drop";
  EXPECT_EQ(sink_a.count() + sink_b.count(), total_admitted);
}

}  // namespace
}  // namespace espgw::pipeline

// How submitting threads hand packets to the workers (a batch at a time) or run them to
// completion (a slot of their own), and that nothing is left behind either way.
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

// A worker that finds another delivering an SA's packets leaves its own packet to it.
// If that packet waits behind a gap, the worker must still report it, so that the gap
// timer comes back for it; otherwise it waits for the SA's next packet, which may never
// come (a lone packet after a quiet spell, like the scapy-built one the namespace test
// sends).
class GatedSink final : public PacketSink {
 public:
  void deliver(std::span<Packet* const> packets) override {
    entered.store(true);
    while (!open.load()) std::this_thread::yield();
    delivered += packets.size();
  }
  std::atomic<bool> entered{false}, open{false};
  std::atomic<size_t> delivered{0};
};

// Run to completion keeps each submitting thread's packets in a slot of its own. Threads
// that stop without completing them leave them to wait_idle(), and threads beyond the
// slots use the shared queue; either way every packet leaves, in sequence order, and
// returns to the pool.
TEST(PipelineConcurrent, RunToCompletionLosesNothingLeftUncompletedOrBeyondTheSlots) {
  constexpr int kThreads = 80;  // more than Pipeline's 64 submitter slots
  constexpr int kPerThread = 5;
  PipelineConfig config;
  config.run_to_completion = true;
  config.pool_packets = 1024;
  config.max_in_flight_per_sa = 1024;
  RecordingSink sink(false);
  {
    Pipeline pipeline(config);
    auto channel = gcm_outbound(pipeline, sink, 0x300);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        submit_tagged(pipeline, channel, static_cast<uint32_t>(t), 0, kPerThread);
        // No end_read_batch(): the packets wait for this thread, which stops.
      });
    for (auto& t : threads) t.join();
    EXPECT_FALSE(pipeline.idle()) << "packets left in a stopped thread's slot count as work";
    pipeline.wait_idle();
    EXPECT_TRUE(pipeline.idle());
    EXPECT_EQ(sink.count(), size_t{kThreads} * kPerThread);
    EXPECT_EQ(pipeline.pool().count_free(), config.pool_packets);
  }
  expect_dense_sequence(sink, size_t{kThreads} * kPerThread);
}

// With workers, a reader's packets reach them a batch at a time: a full batch (32) at
// once, the rest when the reader completes its read batch, and what a stopped reader left
// when someone waits for the pipeline to go idle.
TEST(PipelineConcurrent, WorkersTakeAReadersPacketsABatchAtATime) {
  PipelineConfig config;
  config.workers = 2;
  config.pool_packets = 256;
  config.max_in_flight_per_sa = 256;
  RecordingSink sink(false);
  {
    Pipeline pipeline(config);
    auto channel = gcm_outbound(pipeline, sink, 0x400);
    auto submit = [&](int first, int count) { submit_tagged(pipeline, channel, 0, first, count); };
    std::thread reader([&] {
      pipeline.register_reader();
      submit(0, 40);
      ASSERT_TRUE(wait_for([&] { return sink.count() == 32; }, std::chrono::seconds(10)));
      // Nobody but this thread can hand over the other 8 before it completes its batch.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(sink.count(), 32u);
      EXPECT_FALSE(pipeline.idle());
      pipeline.end_read_batch();
      ASSERT_TRUE(wait_for([&] { return sink.count() == 40; }, std::chrono::seconds(10)));
      submit(40, 5);  // and stops without completing
    });
    reader.join();
    pipeline.wait_idle();
    EXPECT_EQ(sink.count(), 45u);
  }
  expect_dense_sequence(sink, 45);
}

TEST(PipelineConcurrent, APacketLeftBehindAGapWhileAnotherWorkerDeliversIsReported) {
  constexpr uint64_t kHoldNs = 1'000'000'000;  // never expires during the test
  PacketPool pool(4, 64);
  GatedSink sink;
  OrderedRelease release(64, kHoldNs, 0);
  bool first_reported = true;
  std::thread first([&] { first_reported = release.insert(0, pool.acquire(), sink, pool); });
  while (!sink.entered.load()) std::this_thread::yield();  // it holds the delivery now
  // Index 2 waits for index 1; this worker cannot deliver, but must ask for the timer.
  EXPECT_TRUE(release.insert(2, pool.acquire(), sink, pool));
  sink.open.store(true);
  first.join();
  EXPECT_TRUE(first_reported);  // it too saw the held packet before it let go
  EXPECT_EQ(release.held(), 1u);
  EXPECT_EQ(sink.delivered.load(), 1u);
  release.flush(sink, pool);
  EXPECT_EQ(sink.delivered.load(), 2u);
}

}  // namespace
}  // namespace espgw::pipeline

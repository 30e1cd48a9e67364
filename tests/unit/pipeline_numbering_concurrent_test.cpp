// Sequence numbers taken per reader batch and SA (Pipeline::number_slot): readers that
// share one SA get dense, unique numbers, each flow in its reader's order; the bounds of
// the number space (the persisted ceiling, the end of the space, a held SA) are never
// passed; and a channel whose owners let go while a reader's batch holds unnumbered
// packets for it stays until they are numbered and delivered. A reader that is an SA's
// only submitter numbers at submit instead (OutboundChannel::sole_submitter): the tests
// of one reader's unnumbered packets mark their channel shared first.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "support/inbound_sa_table.h"
#include "support/sequential_esp.h"
#include "unit/pipeline_test_support.h"
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::pipeline {
namespace {

using crypto::AeadAlgorithm;

// Keeps a copy of every ESP packet (outer headers omitted) in delivery order.
class WireSink final : public PacketSink {
 public:
  void deliver(std::span<Packet* const> packets) override {
    if (inside_.exchange(true)) overlapped_ = true;
    std::lock_guard guard(mutex_);
    for (Packet* p : packets)
      wire_.emplace_back(p->buffer.data(), p->buffer.data() + p->buffer.size());
    inside_.store(false);
  }
  size_t count() {
    std::lock_guard guard(mutex_);
    return wire_.size();
  }
  bool overlapped() const { return overlapped_.load(); }
  std::vector<std::vector<uint8_t>> wire_;

 private:
  std::mutex mutex_;
  std::atomic<bool> inside_{false};
  std::atomic<bool> overlapped_{false};
};

constexpr uint32_t kSpi = 0x7A0;

std::shared_ptr<esp::OutboundSa> make_outbound_sa() {
  return std::make_shared<esp::OutboundSa>(
      test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, kSpi),
      crypto::ipsec_mb_backend());
}

// What the sink got, decrypted by the peer's SA (which also checks each ICV over the
// number the packet carries): sequence numbers, and each inner packet's (stream, counter).
struct Received {
  std::vector<uint32_t> sequence;
  std::map<uint32_t, std::vector<uint32_t>> counters_by_stream;
};

Received open_all(const WireSink& sink) {
  auto config = test::make_sa_config(AeadAlgorithm::aes_gcm_128, false, false, false, kSpi);
  config.replay_window = 0;  // a test run may start at any number
  test::InboundSaTable table;
  table.add(std::make_shared<esp::InboundSa>(config, crypto::ipsec_mb_backend()));
  esp::EngineCounters engine;
  Received received;
  for (const auto& bytes : sink.wire_) {
    received.sequence.push_back(load_be32(bytes.data() + 4));
    esp::PacketBuffer buffer(2048);
    EXPECT_TRUE(buffer.assign(bytes));
    EXPECT_EQ(test::decapsulate(table, engine, buffer), esp::DropReason::none);
    received.counters_by_stream[load_be32(buffer.data() + 28)].push_back(
        load_be32(buffer.data() + 32));
  }
  return received;
}

// Two workers behind the readers (or none: run to completion), with the pool and the
// SA's in-flight bound a test needs.
PipelineConfig readers_config(bool run_to_completion, size_t pool_packets, size_t max_in_flight) {
  PipelineConfig config;
  config.workers = 2;
  config.run_to_completion = run_to_completion;
  config.pool_packets = pool_packets;
  config.max_in_flight_per_sa = max_in_flight;
  return config;
}

// As if two threads had submitted to the channel: its packets are numbered per batch from
// now on, as when readers share its SA. A single reader's are numbered at submit.
void mark_shared_by_threads(OutboundChannel& channel) {
  const int first = 0, second = 0;
  channel.sole_submitter(&first);
  EXPECT_FALSE(channel.sole_submitter(&second));
}

TEST(PipelineNumbering, TheFirstSubmitterIsSoleUntilASecondOneComesForGood) {
  WireSink sink;
  Pipeline pipeline(PipelineConfig{});
  auto channel = pipeline.make_outbound(make_outbound_sa(), sink);
  const int a = 0, b = 0;
  EXPECT_TRUE(channel->sole_submitter(&a));
  EXPECT_TRUE(channel->sole_submitter(&a));
  EXPECT_FALSE(channel->sole_submitter(&b));
  EXPECT_FALSE(channel->sole_submitter(&a));
  EXPECT_FALSE(channel->sole_submitter(&b));
}

// A reader alone numbers its packets at submit; a second reader that joins makes both
// number per batch. Across the switch the numbers stay dense and unique and each flow in
// its reader's order (the first reader's packets numbered at submit wait in its slot
// beside later ones numbered per batch, with higher numbers).
TEST(PipelineConcurrent, ASecondReaderJoiningASoleSubmittersSaKeepsNumbersDenseAndInOrder) {
  for (bool run_to_completion : {false, true}) {
    SCOPED_TRACE(run_to_completion ? "run to completion" : "workers");
    constexpr int kAlone = 100, kTogether = 2000;
    const PipelineConfig config = readers_config(run_to_completion, 1024, 4096);
    WireSink sink;
    auto sa = make_outbound_sa();
    {
      Pipeline pipeline(config);
      auto channel = pipeline.make_outbound(sa, sink);
      std::atomic<bool> joined{false};
      std::thread first([&] {
        pipeline.register_reader();
        // Alone: numbered at submit, before the batch ends.
        submit_tagged(pipeline, channel, 0, 0, 10);
        EXPECT_EQ(sa->last_sequence(), 10u);
        submit_tagged(pipeline, channel, 0, 10, kAlone - 10);
        joined.store(true);
        for (int i = kAlone; i < kAlone + kTogether; i += 10) {
          submit_tagged(pipeline, channel, 0, i, 10);
          if (i % 40 == 0) pipeline.end_read_batch();
        }
        pipeline.end_read_batch();
      });
      std::thread second([&] {
        pipeline.register_reader();
        while (!joined.load()) std::this_thread::yield();
        for (int i = 0; i < kTogether; i += 10) {
          submit_tagged(pipeline, channel, 1, i, 10);
          if (i % 30 == 0) pipeline.end_read_batch();
        }
        pipeline.end_read_batch();
      });
      first.join();
      second.join();
      EXPECT_FALSE(channel->sole_submitter(&config));
      pipeline.wait_idle();
      ASSERT_TRUE(wait_for([&] { return sink.count() == size_t{kAlone + 2 * kTogether}; },
                           std::chrono::seconds(30)));
      EXPECT_EQ(channel->committed_in_flight(), 0u);
    }
    const Received received = open_all(sink);
    const size_t total = size_t{kAlone + 2 * kTogether};
    ASSERT_EQ(received.sequence.size(), total);
    for (size_t i = 0; i < total; ++i) ASSERT_EQ(received.sequence[i], i + 1) << "at " << i;
    ASSERT_EQ(received.counters_by_stream.size(), 2u);
    for (const auto& [stream, counters] : received.counters_by_stream) {
      ASSERT_EQ(counters.size(), static_cast<size_t>(stream == 0 ? kAlone + kTogether : kTogether));
      for (uint32_t i = 0; i < counters.size(); ++i) ASSERT_EQ(counters[i], i);
    }
    EXPECT_EQ(sa->counters().packets(), total);
  }
}

// Readers submitting to one SA at once, each completing its batches at random points
// (1 to 40 packets: some batches are handed over full, some not), with random delays
// before the workers' crypto. A refusal (the SA's in-flight bound) makes the reader
// complete its batch, back off and retry the same packet, as a reader that drops would
// send the next one.
void run_shared_sa(bool run_to_completion) {
  constexpr int kReaders = 4;
  constexpr uint32_t kPerReader = 3000;
  PipelineConfig config = readers_config(run_to_completion, 512, 128);
  config.before_crypto = random_delay;
  WireSink sink;
  std::atomic<uint64_t> refused{0};
  std::shared_ptr<OutboundChannel> channel;
  {
    Pipeline pipeline(config);
    channel = pipeline.make_outbound(make_outbound_sa(), sink);
    std::vector<std::thread> readers;
    for (int r = 0; r < kReaders; ++r) {
      readers.emplace_back([&, r] {
        pipeline.register_reader();
        std::mt19937 rng(static_cast<unsigned>(r) * 7919u + 1u);
        uint32_t until_batch_end = 1 + rng() % 40;
        for (uint32_t i = 0; i < kPerReader;) {
          Packet* p = acquire_blocking(pipeline);
          ASSERT_TRUE(p->buffer.assign(tagged_packet(static_cast<uint32_t>(r), i)));
          if (pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit) ==
              esp::DropReason::none) {
            ++i;
          } else {
            refused.fetch_add(1);
            pipeline.end_read_batch();
            std::this_thread::sleep_for(std::chrono::microseconds(20));
          }
          if (--until_batch_end == 0) {
            pipeline.end_read_batch();
            until_batch_end = 1 + rng() % 40;
          }
        }
        pipeline.end_read_batch();
      });
    }
    for (auto& reader : readers) reader.join();
    pipeline.wait_idle();
    ASSERT_TRUE(wait_for([&] { return sink.count() == size_t{kReaders} * kPerReader; },
                         std::chrono::seconds(30)));
  }
  const size_t total = size_t{kReaders} * kPerReader;
  EXPECT_FALSE(sink.overlapped());
  const Received received = open_all(sink);
  // Dense and unique: 1, 2, 3, ... in delivery order, no number left unused or used twice.
  ASSERT_EQ(received.sequence.size(), total);
  for (size_t i = 0; i < total; ++i) ASSERT_EQ(received.sequence[i], i + 1) << "at " << i;
  // Each reader's flow in its order, none lost or repeated.
  ASSERT_EQ(received.counters_by_stream.size(), size_t{kReaders});
  for (const auto& [stream, counters] : received.counters_by_stream) {
    ASSERT_EQ(counters.size(), kPerReader) << "stream " << stream;
    for (uint32_t i = 0; i < kPerReader; ++i) ASSERT_EQ(counters[i], i) << "stream " << stream;
  }
  // The counters count what was numbered, once; every refusal was counted at submit.
  const auto& counters = channel->sa().counters();
  EXPECT_EQ(counters.packets(), total);
  EXPECT_EQ(counters.bytes(), total * tagged_packet(0, 0).size());
  EXPECT_EQ(counters.drops(esp::DropReason::queue_full), refused.load());
  EXPECT_EQ(channel->committed_in_flight(), 0u);
}

TEST(PipelineConcurrent, ReadersSharingAnSaGetDenseNumbersInFlowOrderWithWorkers) {
  run_shared_sa(false);
}

TEST(PipelineConcurrent, ReadersSharingAnSaGetDenseNumbersInFlowOrderRunToCompletion) {
  run_shared_sa(true);
}

// Readers racing for the last numbers below a bound of the number space: more packets
// than numbers are submitted (the readers' unnumbered packets each pass the submit's
// check), and numbering hands out exactly the numbers up to the bound, each once, and
// drops and counts the rest. `prepare` sets the bound on the SA before the channel is
// made; `expected_first` and `expected_last` are the numbers that must be used. One
// reader alone is the SA's sole submitter and numbers at submit: the bound then refuses
// at submit, with the same count.
void race_to_a_bound(const std::function<void(esp::OutboundSa&)>& prepare, uint32_t expected_first,
                     uint32_t expected_last, esp::DropReason reason, bool run_to_completion,
                     int reader_count, uint32_t per_reader) {
  const PipelineConfig config = readers_config(run_to_completion, 2048, 2048);
  WireSink sink;
  auto sa = make_outbound_sa();
  prepare(*sa);
  const uint64_t expected = uint64_t{expected_last} - expected_first + 1;
  {
    Pipeline pipeline(config);
    auto channel = pipeline.make_outbound(sa, sink);
    std::atomic<int> ready{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < reader_count; ++r) {
      readers.emplace_back([&, r] {
        pipeline.register_reader();
        ready.fetch_add(1);
        while (ready.load() < reader_count) std::this_thread::yield();
        for (uint32_t i = 0; i < per_reader; ++i) {
          Packet* p = acquire_blocking(pipeline);
          ASSERT_TRUE(p->buffer.assign(tagged_packet(static_cast<uint32_t>(r), i)));
          pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit);
          if (i % 16 == 15) pipeline.end_read_batch();
        }
        pipeline.end_read_batch();
      });
    }
    for (auto& reader : readers) reader.join();
    pipeline.wait_idle();
    EXPECT_EQ(pipeline.pool().count_free(), config.pool_packets);
    EXPECT_EQ(channel->committed_in_flight(), 0u);
  }
  const Received received = open_all(sink);
  ASSERT_EQ(received.sequence.size(), expected);
  for (size_t i = 0; i < expected; ++i)
    ASSERT_EQ(received.sequence[i], expected_first + i) << "at " << i;
  for (const auto& [stream, counters] : received.counters_by_stream)
    for (size_t i = 1; i < counters.size(); ++i)
      ASSERT_LT(counters[i - 1], counters[i]) << "stream " << stream;
  EXPECT_EQ(sa->counters().packets(), expected);
  EXPECT_EQ(sa->counters().drops(reason), uint64_t{per_reader} * reader_count - expected);
  EXPECT_EQ(sa->last_sequence(), expected_last);
}

TEST(PipelineConcurrent, ReadersSharingAnSaNeverPassTheReservedCeiling) {
  for (bool run_to_completion : {false, true}) {
    SCOPED_TRACE(run_to_completion ? "run to completion" : "workers");
    for (const auto& [readers, per_reader] : {std::pair{4, 300u}, std::pair{1, 1200u}}) {
      SCOPED_TRACE(readers);
      race_to_a_bound([](esp::OutboundSa& sa) { sa.set_sequence_ceiling(777); }, 1, 777,
                      esp::DropReason::sequence_unreserved, run_to_completion, readers, per_reader);
    }
  }
}

TEST(PipelineConcurrent, ReadersSharingAnSaStopAtTheEndOfTheNumberSpace) {
  for (bool run_to_completion : {false, true}) {
    SCOPED_TRACE(run_to_completion ? "run to completion" : "workers");
    // Without ESN the last number is 2^32 - 1: 501 numbers left, never one more, no wrap.
    for (const auto& [readers, per_reader] : {std::pair{4, 300u}, std::pair{1, 1200u}}) {
      SCOPED_TRACE(readers);
      race_to_a_bound([](esp::OutboundSa& sa) { sa.set_next_sequence(0xFFFFFFFFull - 500); },
                      0xFFFFFFFFu - 500, 0xFFFFFFFFu, esp::DropReason::sequence_exhausted,
                      run_to_completion, readers, per_reader);
    }
  }
}

// A rekey holds the old SA for good (seal) and continues after the last number it
// handed out: packets a reader's batch holds unnumbered then take no number of the old
// SA; they are dropped as sa-held and counted.
TEST(PipelineConcurrent, UnnumberedPacketsOfASealedSaTakeNoNumber) {
  for (bool run_to_completion : {false, true}) {
    SCOPED_TRACE(run_to_completion ? "run to completion" : "workers");
    PipelineConfig config;
    config.workers = 1;
    config.run_to_completion = run_to_completion;
    WireSink sink;
    auto sa = make_outbound_sa();
    {
      Pipeline pipeline(config);
      auto channel = pipeline.make_outbound(sa, sink);
      mark_shared_by_threads(*channel);
      std::thread reader([&] {
        pipeline.register_reader();
        submit_tagged(pipeline, channel, 0, 0, 5);
        pipeline.end_read_batch();
        submit_tagged(pipeline, channel, 0, 5, 3);  // accepted, waiting unnumbered
        EXPECT_EQ(sa->seal(), 5u);                  // the successor continues at 6
        pipeline.end_read_batch();
      });
      reader.join();
      pipeline.wait_idle();
      EXPECT_EQ(channel->committed_in_flight(), 0u);
    }
    EXPECT_EQ(sink.count(), 5u);
    EXPECT_EQ(sa->last_sequence(), 5u);
    EXPECT_EQ(sa->counters().packets(), 5u);
    EXPECT_EQ(sa->counters().drops(esp::DropReason::sa_held), 3u);
  }
}

// The channel's only owner lets go while a reader's batch holds unnumbered packets that
// point at it (they are not in flight yet: no number is taken). The reclaimer must not
// delete it meanwhile; the reader then numbers and delivers them, and the channel goes.
TEST(PipelineConcurrent, AChannelDroppedWhileAReadersBatchHoldsUnnumberedPacketsOutlivesThem) {
  for (bool run_to_completion : {false, true}) {
    SCOPED_TRACE(run_to_completion ? "run to completion" : "workers");
    PipelineConfig config;
    config.workers = 1;
    config.run_to_completion = run_to_completion;
    WireSink sink;
    Pipeline pipeline(config);
    auto sa = make_outbound_sa();
    std::weak_ptr<esp::OutboundSa> sa_alive = sa;
    auto keeper = std::make_shared<int>(0);
    std::weak_ptr<int> keeper_alive = keeper;
    auto channel = pipeline.make_outbound(std::move(sa), sink, std::move(keeper));
    mark_shared_by_threads(*channel);
    std::atomic<bool> submitted{false}, dropped{false};
    std::thread reader([&] {
      pipeline.register_reader();
      submit_tagged(pipeline, channel, 0, 0, 5);
      submitted.store(true);
      while (!dropped.load()) std::this_thread::yield();
      // Longer than the reclaimer's poll.
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
      EXPECT_FALSE(sa_alive.expired());
      EXPECT_FALSE(keeper_alive.expired());
      pipeline.end_read_batch();  // numbers them: reads the channel and its SA
    });
    while (!submitted.load()) std::this_thread::yield();
    channel.reset();  // the only owner
    EXPECT_EQ(pipeline.channels_awaiting_deletion(), 1u);
    dropped.store(true);
    reader.join();
    ASSERT_TRUE(wait_for([&] { return sink.count() == 5; }, std::chrono::seconds(10)));
    ASSERT_TRUE(wait_for([&] { return sa_alive.expired() && keeper_alive.expired(); },
                         std::chrono::seconds(10)));
    EXPECT_EQ(pipeline.channels_awaiting_deletion(), 0u);
    const Received received = open_all(sink);
    ASSERT_EQ(received.sequence, (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  }
}

}  // namespace
}  // namespace espgw::pipeline

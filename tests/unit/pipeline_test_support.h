// Shared by the pipeline's concurrency tests (pipeline_*_concurrent_test.cpp), which run
// the pipeline under many threads and random worker delays. What must hold:
//  - outbound, every SA's packets leave in sequence-number order, numbers without holes;
//  - inbound, every SA's packets are delivered in sequence-number order, exactly once;
//  - nothing is lost except what a counter accounts for, and every packet returns to
//    the pool;
//  - a sink is never entered by two threads at once for one SA.
// Test names contain "Concurrent" so that the TSan build runs them.
#pragma once

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
#include "unit/test_packets.h"
#include "util/byte_order.h"

namespace espgw::pipeline {

// Inner packets carry (stream, counter) in their UDP payload so the receiver can check
// order without trusting the pipeline's own bookkeeping.
inline std::vector<uint8_t> tagged_packet(uint32_t stream, uint32_t counter, size_t payload = 64) {
  auto p = test::make_ipv4_packet(payload);
  store_be16(&p[20], static_cast<uint16_t>(1000 + stream));  // one flow per stream
  store_be32(&p[28], stream);
  store_be32(&p[32], counter);
  return p;
}

inline void random_delay(unsigned) {
  thread_local std::mt19937 rng(std::random_device{}());
  switch (rng() % 16) {
    case 0:
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      break;
    case 1:
    case 2:
      std::this_thread::yield();
      break;
    default:
      break;
  }
}

// Records what one SA's sink sees and catches concurrent entry.
class RecordingSink final : public PacketSink {
 public:
  explicit RecordingSink(bool inner, SharedSink* shared = nullptr)
      : inner_(inner), shared_(shared) {}
  void deliver(std::span<Packet* const> packets) override {
    if (inside_.exchange(true)) overlapped_ = true;
    std::lock_guard guard(mutex_);
    for (Packet* p : packets) {
      const uint8_t* d = p->buffer.data();
      if (inner_) {
        stream_.push_back(load_be32(d + 28));
        counter_.push_back(load_be32(d + 32));
      } else {
        sequence_.push_back(load_be32(d + 4));  // ESP sequence number (outer omitted)
      }
    }
    inside_.store(false);
  }
  size_t count() {
    std::lock_guard guard(mutex_);
    return inner_ ? counter_.size() : sequence_.size();
  }
  bool overlapped() const { return overlapped_.load(); }
  SharedSink* shared() override { return shared_; }
  std::vector<uint32_t> sequence_, stream_, counter_;

 private:
  bool inner_;
  SharedSink* shared_;
  std::mutex mutex_;
  std::atomic<bool> inside_{false};
  std::atomic<bool> overlapped_{false};
};

inline Packet* acquire_blocking(Pipeline& pipeline) {
  for (;;) {
    if (Packet* p = pipeline.acquire()) return p;
    std::this_thread::yield();  // backpressure: wait for the workers to return packets
  }
}

inline bool wait_for(const std::function<bool()>& done, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// One outbound AES-GCM SA on `pipeline`, delivering to `sink`.
inline std::shared_ptr<OutboundChannel> gcm_outbound(Pipeline& pipeline, PacketSink& sink,
                                                     uint32_t spi) {
  auto sa = std::make_shared<esp::OutboundSa>(
      test::make_sa_config(crypto::AeadAlgorithm::aes_gcm_128, 0, false, false, spi),
      crypto::ipsec_mb_backend());
  return pipeline.make_outbound(sa, sink);
}

// Submits tagged packets (stream, first .. first + count - 1); each must be accepted.
inline void submit_tagged(Pipeline& pipeline, const std::shared_ptr<OutboundChannel>& channel,
                          uint32_t stream, int first, int count) {
  for (int i = first; i < first + count; ++i) {
    Packet* p = acquire_blocking(pipeline);
    ASSERT_TRUE(p->buffer.assign(tagged_packet(stream, static_cast<uint32_t>(i))));
    ASSERT_EQ(pipeline.submit_outbound(*channel, p, esp::OuterHeaders::omit),
              esp::DropReason::none);
  }
}

// The sink saw sequence numbers 1 .. expected, in order, one thread at a time.
inline void expect_dense_sequence(const RecordingSink& sink, size_t expected) {
  const auto& seen = sink.sequence_;
  ASSERT_EQ(seen.size(), expected);
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i + 1);
  EXPECT_FALSE(sink.overlapped());
}

// Two 32-bit fields of every packet that any of several channels delivers, in delivery
// order, under one lock (a sink serving many channels is called concurrently): the SPI
// and ESP sequence number of what reaches the wire, or the (stream, counter) tag of an
// inner packet.
class OrderSink final : public PacketSink {
 public:
  static constexpr size_t kSpi = 0, kEspSequence = 4, kStream = 28, kCounter = 32;
  OrderSink(size_t first, size_t second) : first_(first), second_(second) {}
  void deliver(std::span<Packet* const> packets) override {
    std::lock_guard guard(mutex_);
    for (Packet* p : packets)
      order_.emplace_back(load_be32(p->buffer.data() + first_),
                          load_be32(p->buffer.data() + second_));
  }
  std::vector<std::pair<uint32_t, uint32_t>> order() {
    std::lock_guard guard(mutex_);
    return order_;
  }

 private:
  const size_t first_, second_;
  std::mutex mutex_;
  std::vector<std::pair<uint32_t, uint32_t>> order_;
};

}  // namespace espgw::pipeline

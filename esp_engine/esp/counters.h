// Per-SA and engine-wide packet, byte and drop counters. Relaxed atomics: each counter is
// independent, and readers (status, query_sa) only need eventually consistent totals.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "esp/activity_signal.h"
#include "esp/drop_reason.h"

namespace espgw::esp {

class DropCounters {
 public:
  void count(DropReason reason) {
    drops_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t drops(DropReason reason) const {
    return drops_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }
  uint64_t total_drops() const {
    uint64_t sum = 0;
    for (size_t i = 1; i < kDropReasonCount; ++i) sum += drops_[i].load(std::memory_order_relaxed);
    return sum;
  }

 private:
  std::array<std::atomic<uint64_t>, kDropReasonCount> drops_{};
};

// Bytes count the inner (plaintext) packets, as the kernel's XFRM byte lifetimes do.
// Packet and byte totals have a single writer at a time: the thread holding the SA's own
// lock (the outbound sequence lock, the inbound replay-window commit lock), which counts
// inside that critical section. A plain load + store then suffices, saving two locked
// instructions per packet; readers still see whole values because the fields are atomic.
// The packet and byte totals come first: an SA places its counters right after the fields
// its lock guards, so that the one cache line a packet's commit writes holds them too (the
// drop counters behind them are written only for drops).
class SaCounters {
 public:
  // Only while holding the SA's lock.
  void count_packet_locked(uint64_t inner_bytes) {
    packets_.store(packets_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes_.store(bytes_.load(std::memory_order_relaxed) + inner_bytes, std::memory_order_relaxed);
    activity_.note();
  }
  // A batch of packets numbered under one acquisition of the lock.
  void count_packets_locked(uint64_t packets, uint64_t inner_bytes) {
    packets_.store(packets_.load(std::memory_order_relaxed) + packets, std::memory_order_relaxed);
    bytes_.store(bytes_.load(std::memory_order_relaxed) + inner_bytes, std::memory_order_relaxed);
    activity_.note();
  }
  uint64_t packets() const { return packets_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

  void count(DropReason reason) { drops_.count(reason); }
  uint64_t drops(DropReason reason) const { return drops_.drops(reason); }
  uint64_t total_drops() const { return drops_.total_drops(); }
  const DropCounters& drop_counters() const { return drops_; }

  // Raised by every counted packet (the state keeper visits only SAs with traffic).
  ActivitySignal& activity() { return activity_; }

 private:
  std::atomic<uint64_t> packets_{0};
  std::atomic<uint64_t> bytes_{0};
  ActivitySignal activity_;
  DropCounters drops_;
};

// Drops that happen before an SA is known (unparseable outer header, unknown SPI).
using EngineCounters = DropCounters;

}  // namespace espgw::esp

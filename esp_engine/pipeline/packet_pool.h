// A fixed set of preallocated packets. acquire() returning nullptr is the pipeline's
// backpressure: the reader stops reading until packets come back, instead of any queue
// growing.
//
// The free list is a stack, not a queue: the packet released last is handed out first,
// while its buffer is still in a cache (a FIFO cycles through every buffer of the pool,
// megabytes, so each packet would start with cache misses on all its lines). It is a
// lock-free Treiber stack over packet indexes; the head carries a 32-bit tag that changes
// on every update, so a pop that raced a pop-and-push of the same packet (ABA) fails its
// compare-exchange instead of corrupting the list. Every SA's packets pass through here,
// so it must not take a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipeline/packet.h"

namespace espgw::pipeline {

class PacketPool {
 public:
  PacketPool(size_t count, size_t buffer_capacity)
      : next_(std::make_unique<std::atomic<uint32_t>[]>(count)) {
    packets_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      packets_.push_back(std::make_unique<Packet>(buffer_capacity));
      packets_.back()->pool_index = static_cast<uint32_t>(i);
      next_[i].store(i + 1 < count ? static_cast<uint32_t>(i + 1) : kEmpty,
                     std::memory_order_relaxed);
    }
    head_.store(pack(count > 0 ? 0 : kEmpty, 0), std::memory_order_release);
    available_.store(count, std::memory_order_relaxed);
  }

  Packet* acquire() {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t index = index_of(head);
      if (index == kEmpty) return nullptr;
      const uint32_t next = next_[index].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(next, tag_of(head) + 1), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        available_.fetch_sub(1, std::memory_order_relaxed);
        return packets_[index].get();
      }
    }
  }

  void release(Packet* packet) {
    packet->clear_references();
    const uint32_t index = packet->pool_index;
    available_.fetch_add(1, std::memory_order_relaxed);
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[index].store(index_of(head), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(index, tag_of(head) + 1),
                                      std::memory_order_release, std::memory_order_relaxed))
        return;
    }
  }

  size_t size() const { return packets_.size(); }
  // Approximate while packets move.
  size_t available() const { return available_.load(std::memory_order_relaxed); }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  static uint64_t pack(uint32_t index, uint32_t tag) { return uint64_t{tag} << 32 | index; }
  static uint32_t index_of(uint64_t head) { return static_cast<uint32_t>(head); }
  static uint32_t tag_of(uint64_t head) { return static_cast<uint32_t>(head >> 32); }

  std::vector<std::unique_ptr<Packet>> packets_;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;
  alignas(64) std::atomic<uint64_t> head_{0};
  std::atomic<size_t> available_{0};
};

}  // namespace espgw::pipeline

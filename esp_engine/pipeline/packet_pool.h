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
// so it must not take a lock, and it keeps no shared count of free packets either: each
// packet goes through acquire and release twice per round trip, and a second locked
// instruction on each cost 4% of the in-memory pipeline's throughput (measured with
// bench/pipeline_bench.cpp). Whoever needs a count keeps its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
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
  }

  Packet* acquire() {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t index = index_of(head);
      if (index == kEmpty) return nullptr;
      const uint32_t next = next_[index].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(next, tag_of(head) + 1), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        return packets_[index].get();
      }
    }
  }

  // Up to out.size() packets with one compare-exchange (the top of the stack); returns how
  // many. A walk that raced with a pop or push is thrown away: every change moves the tag.
  size_t acquire(std::span<Packet*> out) {
    uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      size_t count = 0;
      uint32_t index = index_of(head);
      while (index != kEmpty && count < out.size()) {
        out[count++] = packets_[index].get();
        index = next_[index].load(std::memory_order_relaxed);
      }
      if (count == 0) return 0;
      if (head_.compare_exchange_weak(head, pack(index, tag_of(head) + 1),
                                      std::memory_order_acq_rel, std::memory_order_acquire))
        return count;
    }
  }

  void release(Packet* packet) {
    packet->clear_references();
    const uint32_t index = packet->pool_index;
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[index].store(index_of(head), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(index, tag_of(head) + 1),
                                      std::memory_order_release, std::memory_order_relaxed))
        return;
    }
  }

  // Returns a delivered batch with one compare-exchange: the packets are linked into a
  // chain first, and the chain goes onto the stack at once (the last one released is the
  // first handed out again, as with single releases).
  void release(std::span<Packet* const> batch) {
    if (batch.empty()) return;
    for (size_t i = 0; i < batch.size(); ++i) {
      batch[i]->clear_references();
      if (i + 1 < batch.size())
        next_[batch[i + 1]->pool_index].store(batch[i]->pool_index, std::memory_order_relaxed);
    }
    const uint32_t bottom = batch.front()->pool_index;
    const uint32_t top = batch.back()->pool_index;
    uint64_t head = head_.load(std::memory_order_relaxed);
    for (;;) {
      next_[bottom].store(index_of(head), std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(top, tag_of(head) + 1), std::memory_order_release,
                                      std::memory_order_relaxed))
        return;
    }
  }

  size_t size() const { return packets_.size(); }
  // Walks the free list: only for a quiescent pool (tests, after the threads stopped).
  size_t count_free() const {
    size_t count = 0;
    for (uint32_t index = index_of(head_.load(std::memory_order_acquire)); index != kEmpty;
         index = next_[index].load(std::memory_order_relaxed))
      ++count;
    return count;
  }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  static uint64_t pack(uint32_t index, uint32_t tag) { return uint64_t{tag} << 32 | index; }
  static uint32_t index_of(uint64_t head) { return static_cast<uint32_t>(head); }
  static uint32_t tag_of(uint64_t head) { return static_cast<uint32_t>(head >> 32); }

  std::vector<std::unique_ptr<Packet>> packets_;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;
  alignas(64) std::atomic<uint64_t> head_{0};
};

}  // namespace espgw::pipeline

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
//
// Threads that move many packets (readers, workers, run-to-completion submitters) can
// keep a small cache of free packets of their own (use_thread_cache()): what such a thread
// releases goes there first and what it acquires comes from there, so a thread that
// frees and reuses its own packets touches no shared line, and one that only acquires
// takes them from the stack half a cache at a time. A cache holds at most 1/128 of the
// pool and there are at most 32 (only submitting threads claim one: readers, one per TUN
// queue and WAN socket), so no more than a quarter of the pool can wait in caches (those
// of stopped threads included) while another thread finds the stack empty. The default
// pool of 8192 gives caches of 64 packets: what a reader running to completion holds at
// once (a batch of 32 and, inbound or through a loopback, as many again). With caches of
// 32 (1/256 of the pool) every batch spilled onto the stack and refilled from it, so with
// two readers each took packets the other had just written, whose lines then crossed
// between the CPUs: two readers on SAs of their own reached 1.0x one reader instead of
// 1.6x (docs/performance.md, "Parallel pipeline in memory").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pipeline/packet.h"

namespace espgw::pipeline {

class PacketPool {
 public:
  PacketPool(size_t count, size_t buffer_capacity);
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  // A free packet, or nullptr when none is left (on the stack or in this thread's cache).
  Packet* acquire();
  // Up to out.size() packets from the shared stack with one compare-exchange (its top);
  // returns how many.
  size_t acquire(std::span<Packet*> out);
  void release(Packet* packet);
  // Returns a delivered batch: into this thread's cache as far as it has room (the end of
  // the batch, which is handed out first), the rest onto the stack with one
  // compare-exchange (the last one released is the first handed out again).
  void release(std::span<Packet* const> batch);

  // Gives the calling thread a cache of free packets, if the pool is large enough and a
  // cache is left. For threads that acquire or release packets all the time; call once.
  void use_thread_cache();

  size_t size() const { return packets_.size(); }
  // Free packets, on the stack and in the caches: only for a quiescent pool (tests, after
  // the threads stopped).
  size_t count_free() const;

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  static constexpr size_t kThreadCaches = 32;  // see above: 1/128 of the pool each
  static constexpr size_t kThreadCacheMax = 64;
  static uint64_t pack(uint32_t index, uint32_t tag) { return uint64_t{tag} << 32 | index; }
  static uint32_t index_of(uint64_t head) { return static_cast<uint32_t>(head); }
  static uint32_t tag_of(uint64_t head) { return static_cast<uint32_t>(head >> 32); }

  struct alignas(64) ThreadCache {
    std::atomic<uint64_t> owner{0};  // the claiming thread's token; 0: free
    // Written by the owner only; atomic so that count_free() may read it (relaxed, free).
    std::atomic<uint32_t> count{0};
    std::array<Packet*, kThreadCacheMax> packets{};
  };
  // The calling thread's cache in this pool, or nullptr.
  ThreadCache* thread_cache() const;
  // Links `batch` (one packet or more) into a chain, its last packet on top, and pushes it
  // with one compare-exchange.
  void push_chain(std::span<Packet* const> batch);

  const uint64_t id_;            // tells pools apart in each thread's lookup of its cache
  const size_t cache_capacity_;  // 0: no thread caches (a small pool)
  std::vector<std::unique_ptr<Packet>> packets_;
  std::unique_ptr<std::atomic<uint32_t>[]> next_;
  std::unique_ptr<ThreadCache[]> caches_;
  alignas(64) std::atomic<uint64_t> head_{0};
};

}  // namespace espgw::pipeline

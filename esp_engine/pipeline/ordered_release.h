// Delivers one channel's packets in order while many workers complete them out of order.
//
// Workers insert completed packets under a short per-channel lock. Delivery (the sink's
// write to TUN or socket) happens outside that lock, by whichever worker wins the
// channel's `draining` flag; the others leave their packet behind and go back to crypto
// instead of waiting. This is the padata / WireGuard serial-queue idea, with the serial
// step done by a combining worker rather than a dedicated thread.
#pragma once

#include <atomic>
#include <span>
#include <vector>

#include "pipeline/packet_pool.h"
#include "pipeline/reorder_buffer.h"
#include "util/spin_lock.h"

namespace espgw::pipeline {

// Receives one channel's packets in order, from one thread at a time per channel. A sink
// shared by several channels (the TUN writer) is called concurrently for different
// channels and must be thread-safe. The packets return to the pool when deliver()
// returns.
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void deliver(std::span<Packet* const> packets) = 0;
};

class OrderedRelease {
 public:
  // `in_crypto`, if given, counts this channel's packets still in the workers: while it
  // is non-zero a gap may be one of them, and is held longer (ReorderBuffer's busy hold).
  OrderedRelease(size_t capacity, uint64_t hold_ns, uint64_t first_index,
                 const std::atomic<uint64_t>* in_crypto = nullptr);

  // Inserts `packet` (nullptr: a tombstone) at `index`, then delivers what is ready.
  // Returns true if packets stay held behind a gap, so the caller must come back later.
  bool insert(uint64_t index, Packet* packet, PacketSink& sink, PacketPool& pool);
  // Inserts without delivering: a worker stages a whole batch, then drains once.
  void stage(uint64_t index, Packet* packet);
  struct Staged {
    uint64_t index;
    Packet* packet;  // nullptr: a tombstone
  };
  // Several at once, under one lock acquisition (workers sharing an SA would otherwise
  // pass its lock back and forth for every packet).
  void stage(std::span<const Staged> batch);
  // Delivers what is ready (including gaps whose hold time expired).
  bool drain(PacketSink& sink, PacketPool& pool);
  // Delivers everything held, skipping every gap.
  void flush(PacketSink& sink, PacketPool& pool);

  ReorderStats stats() const;
  size_t held() const;
  // Packets delivered so far (the in-flight accounting of outbound channels uses it).
  uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }
  // Each delivered packet also decrements `in_flight` (an SA group's shared count). Set
  // before the first packet is staged.
  void also_count_delivered(std::atomic<uint64_t>* in_flight) { shared_in_flight_ = in_flight; }

 private:
  bool workers_busy() const {
    return in_crypto_ && in_crypto_->load(std::memory_order_acquire) != 0;
  }

  const std::atomic<uint64_t>* in_crypto_;
  mutable SpinLock lock_;
  ReorderBuffer buffer_;          // under lock_
  std::vector<Packet*> pending_;  // under lock_: released in order, not yet delivered
  std::atomic<bool> draining_{false};
  std::vector<Packet*> delivering_;  // owned by the thread holding `draining_`
  std::atomic<uint64_t> delivered_{0};
  std::atomic<uint64_t>* shared_in_flight_ = nullptr;
};

}  // namespace espgw::pipeline

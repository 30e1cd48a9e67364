// A fixed set of preallocated packets. acquire() returning nullptr is the pipeline's
// backpressure: the reader stops reading until packets come back, instead of any queue
// growing.
//
// The free list is a stack, not a queue: the packet released last is handed out first,
// while its buffer is still in a cache. A FIFO cycles through every buffer of the pool
// (megabytes), so each packet would start with cache misses on all its lines.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "pipeline/packet.h"
#include "util/spin_lock.h"

namespace espgw::pipeline {

class PacketPool {
 public:
  PacketPool(size_t count, size_t buffer_capacity) {
    packets_.reserve(count);
    free_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      packets_.push_back(std::make_unique<Packet>(buffer_capacity));
      free_.push_back(packets_.back().get());
    }
  }

  Packet* acquire() {
    std::lock_guard guard(lock_);
    if (free_.empty()) return nullptr;
    Packet* packet = free_.back();
    free_.pop_back();
    return packet;
  }

  void release(Packet* packet) {
    packet->clear_references();
    std::lock_guard guard(lock_);
    free_.push_back(packet);  // never reallocates: capacity is the pool's size
  }

  size_t size() const { return packets_.size(); }
  size_t available() const {
    std::lock_guard guard(lock_);
    return free_.size();
  }

 private:
  std::vector<std::unique_ptr<Packet>> packets_;
  mutable SpinLock lock_;
  std::vector<Packet*> free_;  // under lock_
};

}  // namespace espgw::pipeline

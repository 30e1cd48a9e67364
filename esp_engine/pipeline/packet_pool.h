// A fixed set of preallocated packets. acquire() returning nullptr is the pipeline's
// backpressure: the reader stops reading until packets come back, instead of any queue
// growing.
#pragma once

#include <memory>
#include <vector>

#include "pipeline/mpmc_queue.h"
#include "pipeline/packet.h"

namespace espgw::pipeline {

class PacketPool {
 public:
  PacketPool(size_t count, size_t buffer_capacity) : free_(count) {
    packets_.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      packets_.push_back(std::make_unique<Packet>(buffer_capacity));
      free_.try_push(packets_.back().get());
    }
  }

  Packet* acquire() {
    Packet* packet = nullptr;
    return free_.try_pop(packet) ? packet : nullptr;
  }

  void release(Packet* packet) {
    packet->clear_references();
    free_.try_push(packet);  // cannot fail: the queue holds every packet the pool owns
  }

  size_t size() const { return packets_.size(); }
  size_t available_approx() const { return free_.size_approx(); }

 private:
  std::vector<std::unique_ptr<Packet>> packets_;
  MpmcQueue<Packet*> free_;
};

}  // namespace espgw::pipeline

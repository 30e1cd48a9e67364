// An empty packet pool: packets this thread has not handed over or completed come back
// first, and only then do reorder buffers that hoard the pool give up their gaps.
#include <vector>

#include "pipeline/pipeline.h"

namespace espgw::pipeline {

Packet* Pipeline::acquire() {
  if (Packet* packet = pool_.acquire()) return packet;
  // Run to completion: the packets this thread (or another) submitted come back to the
  // pool once this thread has processed them.
  if (config_.run_to_completion && process_queued(true))
    if (Packet* packet = pool_.acquire()) return packet;
  // With workers: a batch this thread has not handed over yet would never come back.
  if (!config_.run_to_completion)
    if (SubmitterSlot* slot = own_slot(false); slot && hand_over(*slot))
      if (Packet* packet = pool_.acquire()) return packet;
  relieve_pressure();
  return pool_.acquire();
}

void Pipeline::relieve_pressure() {
  std::vector<std::shared_ptr<InboundChannel>> stalled;
  {
    std::lock_guard guard(timer_mutex_);
    stalled = stalled_;
  }
  // An empty pool is normally plain backpressure (the workers are behind). Waiting for a
  // gap only becomes the problem when no worker holds a packet, reorder buffers hoard at
  // least half the pool, and so the missing packets can only arrive through a reader
  // that has nothing to read them into. A pool larger than twice the sum of the reorder
  // capacities never gets here.
  if (!idle()) return;  // workers still hold packets: they come back without giving up gaps
  size_t held = 0;
  for (auto& channel : stalled) held += channel->release().held();
  if (held * 2 < pool_.size()) return;
  bool flushed = false;
  for (auto& channel : stalled) {
    if (channel->in_crypto_.load(std::memory_order_acquire) != 0) continue;
    channel->release().flush(channel->sink(), pool_);
    flushed = true;
  }
  if (flushed) pressure_flushes_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace espgw::pipeline

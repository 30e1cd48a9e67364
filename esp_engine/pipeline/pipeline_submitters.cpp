// The submitting threads' side of the pipeline: each reader's slot of packets not yet
// handed over (with workers) or completed (run to completion), and processing in the
// submitting thread itself.
#include <algorithm>
#include <array>

#include "pipeline/pipeline.h"
#include "pipeline/processing_thread.h"

namespace espgw::pipeline {

constinit thread_local bool processing_here = false;

namespace {

std::atomic<uint64_t> next_thread_token{1};

// Which slot this thread last used, in which pipeline (ids are never reused, so a new
// pipeline at a freed one's address is not mistaken for it).
struct SlotCache {
  uint64_t pipeline = 0;
  void* slot = nullptr;  // nullptr: this thread has no slot in that pipeline
  bool settled = false;  // with nullptr: a claim failed (every slot was taken)
};

uint64_t this_thread_token() {
  thread_local const uint64_t token = next_thread_token.fetch_add(1, std::memory_order_relaxed);
  return token;
}

}  // namespace

Pipeline::SubmitterSlot* Pipeline::own_slot(bool claim) {
  thread_local SlotCache cache;
  if (cache.pipeline == id_ && (cache.slot != nullptr || cache.settled || !claim))
    return static_cast<SubmitterSlot*>(cache.slot);
  const uint64_t token = this_thread_token();
  SubmitterSlot* found = nullptr;
  for (size_t i = 0; i < kSubmitterSlots && !found; ++i)
    if (slots_[i].owner.load(std::memory_order_relaxed) == token) found = &slots_[i];
  for (size_t i = 0; claim && i < kSubmitterSlots && !found; ++i) {
    uint64_t free = 0;
    if (slots_[i].owner.compare_exchange_strong(free, token, std::memory_order_acq_rel))
      found = &slots_[i];
  }
  // A submitting thread acquires (and, running to completion, releases) packets all the
  // time: it keeps free ones at hand.
  if (claim && found) pool_.use_thread_cache();
  cache = {id_, found, claim && !found};
  return found;
}

void Pipeline::register_reader() {
  if (!config_.run_to_completion) own_slot(true);  // without workers every submitter has one
}

bool Pipeline::hand_over(SubmitterSlot& slot) {
  number_slot(slot);
  const uint32_t count = slot.count.load(std::memory_order_acquire);
  if (count == 0) return false;
  push_batch(slot.packets.data(), count);
  // Only now: idle() that sees the slot empty sees the batch in the queue.
  slot.count.store(0, std::memory_order_release);
  after_push();
  return true;
}

size_t Pipeline::take_slot(SubmitterSlot& slot, std::array<Packet*, kWorkerBatch>& batch) {
  number_slot(slot);
  const uint32_t count = slot.count.load(std::memory_order_acquire);
  std::copy_n(slot.packets.begin(), count, batch.begin());
  // After the caller announced itself in assisting_: idle() that sees the slot empty also
  // sees the packets being processed.
  if (count != 0) slot.count.store(0, std::memory_order_release);
  return count;
}

void Pipeline::enqueue(Packet* packet) {
  if (config_.run_to_completion) {
    // The packet waits in this thread's own batch: no shared queue, no locked instruction.
    // A full batch is processed right away, so the batch bounds the latency, not the pool.
    SubmitterSlot* slot = own_slot(true);
    if (slot != nullptr) {
      uint32_t count = slot->count.load(std::memory_order_relaxed);
      // Full with what a sink submitted while this thread processed the last batch.
      if (count == kWorkerBatch && process_queued(false))
        count = slot->count.load(std::memory_order_relaxed);
      // Still full: this thread is inside processing (a sink that submits: delivering one
      // SA's packets, which other threads keep staging, can take a while). The full batch
      // goes to the shared queue, where any thread takes it; kept in the slot, its packets
      // would wait for this delivery to end while other threads' later ones pass them,
      // until the reorder window gives up on them.
      if (count == kWorkerBatch && hand_over(*slot)) count = 0;
      if (count < kWorkerBatch) {
        slot->packets[count] = packet;
        slot->channel_of[count] = kNumbered;
        slot->count.store(count + 1, std::memory_order_release);
        if (count + 1 == kWorkerBatch) process_queued(false);
        return;
      }
    }
    push_batch(&packet, 1);  // no slot (every one taken)
    if (work_.size_approx() >= kWorkerBatch) process_queued(false);
    return;
  }
  // With workers, a reader (register_reader) collects its packets and hands them
  // over as one queue entry when it completes its read batch or has a full one: one
  // compare-exchange and one cache line moving to a worker per batch, not per packet.
  if (SubmitterSlot* slot = own_slot(false)) {
    const uint32_t count = slot->count.load(std::memory_order_relaxed);
    slot->packets[count] = packet;
    slot->channel_of[count] = kNumbered;
    slot->count.store(count + 1, std::memory_order_release);
    if (count + 1 == kWorkerBatch) hand_over(*slot);
    return;
  }
  push_batch(&packet, 1);
  after_push();
}

void Pipeline::assist() {
  process_queued(false);
}

void Pipeline::end_read_batch() {
  if (config_.run_to_completion)
    process_queued(true);
  else if (SubmitterSlot* slot = own_slot(false))
    hand_over(*slot);
}

bool Pipeline::process_queued(bool until_empty, bool every_slot) {
  // A sink may submit (a loopback, a forwarder): never nest. The outer call, looping
  // until the queue is empty, takes what the sink submitted.
  if (processing_here) return false;
  processing_here = true;
  assisting_.fetch_add(1, std::memory_order_seq_cst);
  // The packets taken below point at channels they do not own.
  const ChannelReclaimer::Section section(*reclaimer_);
  // With workers, a reader's own batch goes to them (hand_over); here only the queue.
  SubmitterSlot* own = config_.run_to_completion ? own_slot(false) : nullptr;
  std::array<Packet*, kWorkerBatch> batch;
  bool any = false;
  for (;;) {
    size_t count = own ? take_slot(*own, batch) : 0;
    const bool was_own = count != 0;
    for (size_t i = 0; every_slot && count == 0 && i < kSubmitterSlots; ++i)
      count = take_slot(slots_[i], batch);
    if (count == 0) count = pop_batch(batch);
    if (count == 0) break;
    process_batch(batch.data(), count, static_cast<unsigned>(workers_.size()));
    any = true;
    if (until_empty) continue;
    // After its own batch, a thread also takes one from the shared queue: there another
    // thread's delivery leaves what its sink submitted (a loopback's or forwarder's
    // packets, handed over while it keeps delivering an SA that others keep staging).
    // Left for that thread alone, they would fall behind the reorder window.
    if (was_own && (count = pop_batch(batch)) != 0)
      process_batch(batch.data(), count, static_cast<unsigned>(workers_.size()));
    break;
  }
  assisting_.fetch_sub(1, std::memory_order_seq_cst);
  processing_here = false;
  return any;
}

bool Pipeline::idle() const {
  for (size_t i = 0; i < kSubmitterSlots; ++i)
    if (slots_[i].count.load(std::memory_order_acquire) != 0) return false;
  if (work_.size_approx() != 0 || assisting_.load(std::memory_order_seq_cst) != 0) return false;
  for (size_t i = 0; i < workers_.size(); ++i)
    if (worker_state_[i].busy.load(std::memory_order_seq_cst)) return false;
  return work_.size_approx() == 0;
}

void Pipeline::wait_idle() {
  // Run to completion has no worker to wait for: whoever waits does the work, including
  // what stopped submitters left in their slots (they no longer touch them).
  while (!idle()) {
    if (config_.run_to_completion) {
      if (!process_queued(true, true)) std::this_thread::yield();
      continue;
    }
    bool handed = false;
    for (size_t i = 0; i < kSubmitterSlots; ++i) handed = hand_over(slots_[i]) || handed;
    if (!handed) std::this_thread::yield();
  }
}

}  // namespace espgw::pipeline

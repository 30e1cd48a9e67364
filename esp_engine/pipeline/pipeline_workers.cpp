// The worker pool: the shared work queue, and the threads that drain it and sleep on a
// futex when it runs dry.
#include <array>
#include <string>
#include <thread>

#include "pipeline/pipeline.h"
#include "util/futex.h"
#include "util/thread_name.h"

namespace espgw::pipeline {

namespace {

// How long an idle worker polls before it sleeps (a pause is ~40-140 cycles): long enough
// to bridge the gap between two bursts from the reader, short enough not to take the
// core from a reader sharing it.
constexpr int kSpinsBeforeSleep = 64;

}  // namespace

void Pipeline::push_batch(Packet* const* packets, size_t count) {
  for (size_t i = 0; i + 1 < count; ++i) packets[i]->batch_next = packets[i + 1];
  packets[count - 1]->batch_next = nullptr;
  packets[0]->batch_length = static_cast<uint32_t>(count);
  // Cannot fail: the queue's capacity is at least the pool's size.
  while (!work_.try_push(packets[0])) std::this_thread::yield();
}

size_t Pipeline::pop_batch(std::array<Packet*, kWorkerBatch>& batch) {
  size_t count = 0;
  Packet* head = nullptr;
  while (count < kWorkerBatch && work_.try_pop(head)) {
    const uint32_t length = head->batch_length;
    uint32_t taken = 0;
    Packet* packet = head;
    for (; packet != nullptr && count < kWorkerBatch; packet = packet->batch_next, ++taken)
      batch[count++] = packet;
    if (packet != nullptr) {  // more than fits: the rest goes back as a batch of its own
      packet->batch_length = length - taken;
      while (!work_.try_push(packet)) std::this_thread::yield();
      break;
    }
  }
  return count;
}

void Pipeline::after_push() {
  // Pairs with the sleeper's increment of sleepers_ before its last look at the queue
  // (all seq_cst, see MpmcQueue::try_push): either it sees this packet or we see it.
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_one_worker();
  // Counted in queue entries: a reader's batch or a single packet.
  if (config_.submitter_assist_threshold != 0 &&
      work_.size_approx() > config_.submitter_assist_threshold)
    assist();
}

void Pipeline::wake_one_worker() {
  if (wake_pending_.exchange(true, std::memory_order_seq_cst)) return;
  wake_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(wake_, 1);
}

void Pipeline::worker_loop(unsigned index) {
  name_this_thread("crypto-" + std::to_string(index));
  WorkerState& state = worker_state_[index];
  std::array<Packet*, kWorkerBatch> batch;
  int idle_spins = 0;
  uint64_t packets = 0;
  for (;;) {
    state.busy.store(true, std::memory_order_seq_cst);
    for (;;) {
      const size_t count = pop_batch(batch);
      if (count == 0) break;
      // The popped packets point at channels they do not own. Entering after the pop is
      // soon enough: until these packets are delivered or staged, their channels are not
      // quiescent, so the reclaimer cannot have started waiting for them yet. (Before
      // it, an idle worker's spinning would write the sections' counter every round.)
      const ChannelReclaimer::Section section(*reclaimer_);
      process_batch(batch.data(), count, index);
      packets += count;
      state.packets.store(packets, std::memory_order_relaxed);
    }
    state.busy.store(false, std::memory_order_seq_cst);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (++idle_spins < kSpinsBeforeSleep) {
      __builtin_ia32_pause();
      continue;
    }
    idle_spins = 0;
    // Going to sleep: announce it, then clear any wake-up left pending by a producer that
    // saw an earlier sleeper (otherwise a stale flag would suppress the wake-up meant for
    // us), then look at the queue one last time. A producer either finds the packet seen
    // here or finds us counted in sleepers_ with the flag clear, and bumps wake_ past
    // `ticket`, so futex_wait returns.
    const uint32_t ticket = wake_.load(std::memory_order_seq_cst);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_pending_.exchange(false, std::memory_order_seq_cst);
    if (work_.size_approx() == 0 && !stopping_.load(std::memory_order_seq_cst)) {
      futex_wait(wake_, ticket);
      state.wakeups.fetch_add(1, std::memory_order_relaxed);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    // Consume the wake-up and pass it on if others sleep and work is left.
    wake_pending_.exchange(false, std::memory_order_seq_cst);
    if (work_.size_approx() > 1 && sleepers_.load(std::memory_order_seq_cst) > 0) wake_one_worker();
  }
}

}  // namespace espgw::pipeline

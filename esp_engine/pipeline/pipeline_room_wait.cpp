// A reader that finds an SA (or its ECMP group) with its bound of packets in flight waits
// for room if the SA has stalled, and drops at the bound if it still delivers.
#include <chrono>
#include <thread>

#include "pipeline/pipeline.h"
#include "pipeline/processing_thread.h"

namespace espgw::pipeline {

bool Pipeline::wait_for_room(OutboundChannel& c) {
  // Readers only: a thread inside processing (a sink that submits) may be what the SA
  // waits for, and a worker (no submitter slot) must not leave its batch for it.
  if (processing_here || own_slot(false) == nullptr) return true;
  room_waits_.fetch_add(1, std::memory_order_relaxed);
  // This thread's own packets first: until completed they wait for it, and they may be
  // what fills the SA.
  end_read_batch();
  InFlightBudget* budget = c.budget();
  const auto full = [&] {
    return c.committed_in_flight() >= c.max_in_flight() ||
           (budget && budget->in_flight.load(std::memory_order_relaxed) >= budget->limit);
  };
  // The SA this thread last found stalled, and when: right after a stall the workers
  // catch up with what piled up, the SA fills again while it delivers, and that is still
  // the stall's backlog, not a standing queue.
  thread_local const OutboundChannel* stalled_channel = nullptr;
  thread_local std::chrono::steady_clock::time_point stalled_at;
  const auto start = std::chrono::steady_clock::now();
  const bool known_stall = stalled_channel == &c && start - stalled_at < kStallMemory;
  const auto probe_end = start + config_.outbound_stall_probe;
  const auto deadline = start + config_.outbound_room_wait;
  const uint64_t delivered = c.release().delivered();
  for (unsigned idle = 0;;) {
    const bool room = !full();
    const auto now = std::chrono::steady_clock::now();
    if (!known_stall && now < probe_end) {
      // Delivering: the SA is full because more comes than the crypto takes (a standing
      // queue under TCP), and the drop at the bound is the tunnel's AQM.
      if (room || c.release().delivered() != delivered) return false;
    } else {
      stalled_channel = &c;
      stalled_at = now;
      if (room) return true;
      if (now >= deadline) {
        room_wait_timeouts_.fetch_add(1, std::memory_order_relaxed);
        return true;  // and the submit drops the packet: the SA is still full
      }
    }
    if (process_queued(false)) continue;
    // Nothing to help with: the packets in flight are in other threads' hands. When the
    // host's CPUs are busy elsewhere (the usual cause of the wait), spinning would take
    // time from the very worker that holds them.
    if (++idle < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace espgw::pipeline

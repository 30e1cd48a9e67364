// The reorder timer: inbound channels that hold packets behind a gap are drained again a
// few times per hold period, and retired channels are deleted once nothing can reach them.
#include <algorithm>
#include <chrono>

#include "pipeline/pipeline.h"
#include "util/thread_name.h"

namespace espgw::pipeline {

void Pipeline::schedule_gap_timer(InboundChannel& channel) {
  if (channel.timer_scheduled_.exchange(true, std::memory_order_acq_rel)) return;
  // The timer owns what it waits on. A channel whose owners all let go is the reclaimer's:
  // it flushes what the channel holds before deleting it.
  std::shared_ptr<InboundChannel> owned = channel.weak_from_this().lock();
  if (!owned) return;
  {
    std::lock_guard guard(timer_mutex_);
    stalled_.push_back(std::move(owned));
  }
  timer_wake_.notify_one();
}

void Pipeline::timer_loop() {
  // Re-checks stalled channels a few times per hold period, and sleeps when none is.
  // Also deletes retired channels, looking for them every kReclaimPoll while no channel
  // is stalled (a deleter may run on any thread, under locks of its own: it does not
  // wake the timer).
  const auto tick = std::max(config_.reorder_hold / 4, std::chrono::microseconds(50));
  constexpr auto kReclaimPoll = std::chrono::milliseconds(20);
  std::vector<std::shared_ptr<InboundChannel>> due;
  name_this_thread("reorder-timer");
  std::unique_lock lock(timer_mutex_);
  for (;;) {
    if (reclaimer_->waiting() != 0) {
      lock.unlock();
      reclaimer_->reclaim(pool_);
      lock.lock();
    }
    timer_wake_.wait_for(lock, kReclaimPoll, [&] { return timer_stop_ || !stalled_.empty(); });
    if (timer_stop_) return;
    if (stalled_.empty()) continue;
    timer_wake_.wait_for(lock, tick, [&] { return timer_stop_; });
    if (timer_stop_) return;
    due.swap(stalled_);
    lock.unlock();
    for (auto& channel : due) {
      channel->timer_scheduled_.store(false, std::memory_order_release);
      if (channel->release().drain(channel->sink(), pool_)) schedule_gap_timer(*channel);
    }
    due.clear();
    lock.lock();
  }
}

}  // namespace espgw::pipeline

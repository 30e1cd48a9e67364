// Tells an observer (the daemon's SA state keeper) which SAs carried traffic since it last
// looked, so that its periodic work grows with the SAs that are busy, not with all of them.
// The data path pays one relaxed load per packet; the observer is called once per clear().
#pragma once

#include <atomic>
#include <cstdint>

namespace espgw::esp {

class ActivityObserver {
 public:
  virtual ~ActivityObserver() = default;
  // On a worker, possibly under the SA's lock: must be short and must not block on the
  // observer's own long-held locks.
  virtual void on_activity(uint64_t cookie) = 0;
};

class ActivitySignal {
 public:
  // Before the SA carries traffic (or at any time: a note before it is lost, which the
  // observer must cover by looking at a new SA once anyway).
  void set_observer(ActivityObserver* observer, uint64_t cookie) {
    cookie_.store(cookie, std::memory_order_relaxed);
    observer_.store(observer, std::memory_order_release);
    raised_.store(false, std::memory_order_release);
  }
  void note() {
    if (raised_.load(std::memory_order_relaxed)) return;
    if (raised_.exchange(true, std::memory_order_acq_rel)) return;
    if (ActivityObserver* observer = observer_.load(std::memory_order_acquire))
      observer->on_activity(cookie_.load(std::memory_order_relaxed));
  }
  // The observer, before it reads the SA's counters: traffic after this is noted again.
  void clear() { raised_.store(false, std::memory_order_seq_cst); }

 private:
  std::atomic<bool> raised_{false};
  std::atomic<ActivityObserver*> observer_{nullptr};
  std::atomic<uint64_t> cookie_{0};
};

}  // namespace espgw::esp

#include "io/queue_delay_gate.h"

#include <cmath>
#include <cstdint>

namespace espgw::io {

bool QueueDelayGate::above_target_for_interval(uint64_t sojourn_ns, uint64_t now_ns) {
  if (sojourn_ns < target_ns_) {
    first_above_ns_ = 0;
    return false;
  }
  if (first_above_ns_ == 0) {
    // A burst that drains within an interval is what queues are for: no drop yet.
    first_above_ns_ = now_ns + interval_ns_;
    return false;
  }
  return now_ns >= first_above_ns_;
}

uint64_t QueueDelayGate::next_drop(uint64_t from) const {
  return from + static_cast<uint64_t>(static_cast<double>(interval_ns_) /
                                      std::sqrt(static_cast<double>(count_)));
}

bool QueueDelayGate::should_drop(uint64_t sojourn_ns, uint64_t now_ns, bool left_empty) {
  if (target_ns_ == 0) return false;
  if (last_left_empty_ && now_ns - last_dequeue_ns_ >= interval_ns_) {
    // Left empty, and nothing left the queue for an interval since: no delay carries over.
    first_above_ns_ = 0;
    dropping_ = false;
  }
  last_left_empty_ = left_empty;
  last_dequeue_ns_ = now_ns;
  const bool persistent = above_target_for_interval(sojourn_ns, now_ns);
  if (dropping_) {
    if (!persistent) {
      dropping_ = false;  // the queue drained below the target
      return false;
    }
    if (now_ns < drop_next_ns_) return false;
    ++count_;
    drop_next_ns_ = next_drop(drop_next_ns_);
    return true;
  }
  if (!persistent) return false;
  // Entering the dropping state. If it was left only recently, the queue came back
  // quickly: resume near the drop rate that had been reached (RFC 8289 5.5) rather than
  // starting over at one drop per interval.
  dropping_ = true;
  const uint32_t delta = count_ - last_count_;
  const bool recent =
      static_cast<int64_t>(now_ns - drop_next_ns_) < static_cast<int64_t>(16 * interval_ns_);
  count_ = delta > 1 && recent ? delta : 1;
  last_count_ = count_;
  drop_next_ns_ = next_drop(now_ns);
  return true;
}

}  // namespace espgw::io

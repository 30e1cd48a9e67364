// SA expiries (soft and hard lifetimes of charon's SAs) that found no charon to tell: the
// plugin was detached (charon restarting its event connection, or espgw's control socket
// dropped it). They wait here and go out when charon says hello again; lost, a soft
// expiry means no rekey and the SA runs into its hard limit, and a lost hard one leaves
// charon believing in an SA that no longer carries traffic. Bounded and deduplicated, so
// that a charon that stays away costs a fixed amount of memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "esp/ip_address.h"

namespace espgw::daemon {

struct Expiry {
  uint32_t spi = 0;
  esp::IpAddress destination;
  bool hard = false;
  bool operator==(const Expiry&) const = default;
};

// Not thread-safe: the control service holds its lock around it.
class PendingExpiries {
 public:
  // Each SA has two expiries at most, so this covers 2,048 SAs expiring while charon is away.
  static constexpr size_t kMaxPending = 4096;

  // Queues `expiry` unless the same one already waits. A full queue lets its oldest go
  // (counted in dropped()): newer expiries are the ones still worth acting on. False if
  // it was already queued.
  bool add(const Expiry& expiry) {
    for (const Expiry& queued : queue_)
      if (queued == expiry) return false;
    if (queue_.size() == kMaxPending) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back(expiry);
    return true;
  }
  // Everything queued, oldest first; the queue is empty afterwards.
  std::vector<Expiry> take() {
    std::vector<Expiry> all(queue_.begin(), queue_.end());
    queue_.clear();
    return all;
  }
  void clear() { queue_.clear(); }
  size_t size() const { return queue_.size(); }
  uint64_t dropped() const { return dropped_; }

 private:
  std::deque<Expiry> queue_;
  uint64_t dropped_ = 0;
};

}  // namespace espgw::daemon

// What a TUN reader looks an outbound packet up in: the SPD (which policy, which reqid)
// and the SA groups by reqid (which SA of the group carries the flow). Published as one
// immutable snapshot that readers load per packet, never under a lock.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "daemon/sa_groups_by_reqid.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

// The SPD changes in place (it has its own lock) and every snapshot shares it; when a
// group appears or goes, SaTable makes a new snapshot whose group map shares every shard
// but the one that changed, and swaps the whole snapshot, so a reader never sees a map
// being changed. A group's members change inside the group (pipeline::SaGroup).
struct OutboundLookup {
  std::shared_ptr<xfrm::Spd> spd = std::make_shared<xfrm::Spd>();
  SaGroupsByReqid groups;
};

#if defined(__SANITIZE_THREAD__)
#define ESPGW_THREAD_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ESPGW_THREAD_SANITIZER 1
#endif
#endif

// The snapshot readers load. std::atomic<std::shared_ptr> in libstdc++ 12 reads the
// pointer under an internal spin lock that a load releases with relaxed order, so nothing
// orders a reader's read of the pointer before the next store's write in the C++ model,
// and ThreadSanitizer reports it as a race (on x86 a load is never reordered after a
// later store, so the read completes first). Under ThreadSanitizer a mutex takes its
// place, so that the threaded tests check what the snapshots hold.
class PublishedOutboundLookup {
 public:
  explicit PublishedOutboundLookup(std::shared_ptr<const OutboundLookup> initial)
      : current_(std::move(initial)) {}
  PublishedOutboundLookup(const PublishedOutboundLookup&) = delete;
  PublishedOutboundLookup& operator=(const PublishedOutboundLookup&) = delete;

#ifdef ESPGW_THREAD_SANITIZER
  std::shared_ptr<const OutboundLookup> load(std::memory_order = std::memory_order_seq_cst) const {
    std::lock_guard guard(mutex_);
    return current_;
  }
  void store(std::shared_ptr<const OutboundLookup> next) {
    std::lock_guard guard(mutex_);
    current_.swap(next);
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const OutboundLookup> current_;
#else
  std::shared_ptr<const OutboundLookup> load(
      std::memory_order order = std::memory_order_seq_cst) const {
    return current_.load(order);
  }
  void store(std::shared_ptr<const OutboundLookup> next) {
    current_.store(std::move(next));
  }

 private:
  std::atomic<std::shared_ptr<const OutboundLookup> > current_;
#endif
};

}  // namespace espgw::daemon

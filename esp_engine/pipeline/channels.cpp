#include "pipeline/channels.h"

#include <algorithm>
#include <mutex>

namespace espgw::pipeline {

OutboundChannel::OutboundChannel(std::shared_ptr<esp::OutboundSa> sa, PacketSink& sink,
                                 size_t max_in_flight, std::shared_ptr<void> keep_alive)
    : sa_(std::move(sa)),
      sink_(sink),
      shared_sink_(sink.shared()),
      max_in_flight_(max_in_flight),
      first_sequence_(sa_->last_sequence() + 1),
      keep_alive_(std::move(keep_alive)),
      // Every number in flight is sure to complete (sealing cannot fail), so gaps are
      // never given up on.
      release_(max_in_flight, /*hold_ns=*/0, first_sequence_) {}

void OutboundChannel::share_budget(std::shared_ptr<InFlightBudget> budget) {
  if (budget_) return;  // already in a group
  budget_ = std::move(budget);
  release_.also_count_delivered(&budget_->in_flight);
}

uint64_t OutboundChannel::reserve_room(uint64_t want) {
  // A stale delivered() only understates the room: the bound holds without a lock.
  const uint64_t limit = release_.delivered() + max_in_flight_;
  uint64_t committed = committed_.load(std::memory_order_relaxed);
  for (;;) {
    if (committed >= limit) return 0;
    const uint64_t take = std::min(want, limit - committed);
    if (committed_.compare_exchange_weak(committed, committed + take, std::memory_order_acq_rel,
                                         std::memory_order_relaxed))
      return take;
  }
}

size_t OutboundChannel::in_flight() const {
  // delivered() is read first: the SA's counter only grows, so this never underflows.
  const uint64_t delivered = release_.delivered();
  return static_cast<size_t>(sa_->last_sequence() + 1 - first_sequence_ - delivered);
}

InboundChannel::InboundChannel(std::shared_ptr<esp::InboundSa> sa, PacketSink& sink,
                               size_t reorder_capacity, uint64_t hold_ns,
                               std::vector<std::weak_ptr<InboundChannel>> predecessors)
    : sa_(std::move(sa)),
      sink_(sink),
      // Read before predecessors_ takes the list over (declared after it).
      predecessor_arrivals_(predecessors.empty() ? 0 : 1),
      predecessors_(std::move(predecessors)),
      // ESP sequence numbers start at 1 (RFC 4303 3.3.3).
      release_(reorder_capacity, hold_ns, /*first_index=*/1, &in_crypto_) {}

void InboundChannel::add_successor(const std::shared_ptr<InboundChannel>& successor) {
  std::lock_guard guard(successors_lock_);
  successors_.emplace_back(successor);
  superseded_.store(true, std::memory_order_relaxed);
}

void InboundChannel::count_arrival_for_successors() {
  // Only for packets that come after a successor's first one, while a peer switches its
  // flows over: a lock and a reference per packet are fine there.
  std::lock_guard guard(successors_lock_);
  std::erase_if(successors_, [](const std::weak_ptr<InboundChannel>& weak) {
    const std::shared_ptr<InboundChannel> successor = weak.lock();
    if (successor) successor->predecessor_arrivals_.fetch_add(1, std::memory_order_relaxed);
    return !successor;
  });
  // Every successor went (a rekey that failed, a redundant SA deleted): this SA's packets
  // need not come here any more.
  if (successors_.empty()) superseded_.store(false, std::memory_order_relaxed);
}

}  // namespace espgw::pipeline

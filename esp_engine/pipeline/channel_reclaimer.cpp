#include "pipeline/channel_reclaimer.h"

#include <algorithm>

#include "pipeline/channels.h"

namespace espgw::pipeline {

ChannelReclaimer::~ChannelReclaimer() {
  for (const Retired& retired : retired_) destroy(retired);
}

void ChannelReclaimer::retire(OutboundChannel* channel) {
  std::lock_guard guard(mutex_);
  retired_.push_back({channel, nullptr, 0});
  waiting_.store(retired_.size(), std::memory_order_relaxed);
}

void ChannelReclaimer::retire(InboundChannel* channel) {
  std::lock_guard guard(mutex_);
  retired_.push_back({nullptr, channel, 0});
  waiting_.store(retired_.size(), std::memory_order_relaxed);
}

void ChannelReclaimer::destroy(const Retired& retired) {
  delete retired.outbound;
  delete retired.inbound;
}

bool ChannelReclaimer::advance_to(uint64_t target) {
  while (flips_completed_ < target) {
    if (flips_started_ == flips_completed_) {
      // New sections count in the other counter from here on.
      phase_.fetch_add(1, std::memory_order_seq_cst);
      ++flips_started_;
    }
    const unsigned old_phase = static_cast<unsigned>((flips_started_ - 1) & 1);
    if (sections_[old_phase].count.load(std::memory_order_acquire) != 0) return false;
    ++flips_completed_;
  }
  return true;
}

bool ChannelReclaimer::reclaim(PacketPool& pool) {
  std::vector<Retired> work;
  {
    std::lock_guard guard(mutex_);
    work.swap(retired_);
  }
  uint64_t target = 0;
  for (Retired& retired : work) {
    if (retired.safe_after_flips != 0) {
      target = std::max(target, retired.safe_after_flips);
      continue;
    }
    bool quiescent = false;
    if (retired.outbound != nullptr) {
      // Every number it handed out is delivered, and no reader holds a packet for it
      // unnumbered (or room for one): no packet points at it any more.
      quiescent = retired.outbound->committed_in_flight() == 0;
    } else if (retired.inbound->packets_in_crypto() == 0) {
      // Its packets are all staged in the reorder buffer (the count drops under the
      // buffer's lock), and nobody will bring the gaps' packets now: deliver them.
      retired.inbound->release().flush(retired.inbound->sink(), pool);
      quiescent = true;
    }
    if (!quiescent) continue;
    // A thread may still be inside a section that reached the channel through a packet
    // (the one that delivered its last packet, for one): two flips from now, every
    // section running now has ended.
    retired.safe_after_flips = flips_started_ + 2;
    target = std::max(target, retired.safe_after_flips);
  }
  advance_to(target);
  std::vector<Retired> keep, done;
  for (const Retired& retired : work)
    (retired.safe_after_flips != 0 && retired.safe_after_flips <= flips_completed_ ? done : keep)
        .push_back(retired);
  bool more;
  {
    std::lock_guard guard(mutex_);
    retired_.insert(retired_.end(), keep.begin(), keep.end());
    waiting_.store(retired_.size(), std::memory_order_relaxed);
    more = !retired_.empty();
  }
  // After the count: whoever sees a channel's SA gone then no longer sees it waiting.
  for (const Retired& retired : done) destroy(retired);
  return more;
}

}  // namespace espgw::pipeline

// Fences: a reader waits until the packets of the channels a flow leaves (an ECMP group's
// old view, a rekeyed SA's predecessors) have been delivered, so that the flow cannot
// overtake itself on its new channel.
#include <algorithm>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline/sa_group.h"

namespace espgw::pipeline {

bool Pipeline::fence(const std::function<bool()>& done) {
  fences_.fetch_add(1, std::memory_order_relaxed);
  // This thread's own packets first: until completed they wait for it.
  end_read_batch();
  const auto deadline = std::chrono::steady_clock::now() + config_.fence_limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      fence_timeouts_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    // Without workers, or with workers on a busy core, the packets may be waiting for
    // someone to process them: do it rather than spin.
    if (!process_queued(false)) std::this_thread::yield();
  }
  return true;
}

void Pipeline::fence_outbound(std::span<OutboundChannel* const> channels) {
  if (channels.empty()) return;
  // The numbers taken so far, this thread's packets among them. Other threads may take
  // more meanwhile; their flows are not this thread's, so their packets need no wait.
  // (A membership change is rare: the allocation does not matter.)
  // This thread's packets waiting unnumbered in its slot are among them: numbered first.
  if (SubmitterSlot* slot = own_slot(false)) number_slot(*slot);
  std::vector<uint64_t> targets(channels.size());
  for (size_t i = 0; i < channels.size(); ++i) targets[i] = channels[i]->last_sequence();
  fence([&] {
    for (size_t i = 0; i < channels.size(); ++i)
      if (!channels[i]->delivered_through(targets[i])) return false;
    return true;
  });
}

void Pipeline::release_retired_group_views(size_t max_looks) {
  SaGroup::Superseded view;
  size_t looks = std::min(max_looks, SaGroup::full_sweep_looks());
  while (SaGroup::take_retired_view(view, looks)) {
    // A pick of the group would have fenced on this view; it will not find it now.
    fence_outbound(view.channels);
    view = {};  // the last reference to a removed SA may go here
  }
}

void Pipeline::fence_inbound(const std::shared_ptr<InboundChannel>& channel) {
  // Every predecessor, not only the newest: when both peers rekeyed at once, both new SAs
  // are installed, and the newest SA before the one that carries on may be the redundant
  // one, which never carries a packet; the old SA is the one with packets in flight.
  std::vector<std::shared_ptr<InboundChannel>> predecessors;
  for (const auto& weak : channel->predecessors_)
    if (auto predecessor = weak.lock()) predecessors.push_back(std::move(predecessor));
  // At the first wait, the predecessors start counting their packets for this channel:
  // those submitted before it are what this wait covers. Not earlier: until the peer sends
  // on this SA (a redundant one of a collision never), counting would cost the old SA's
  // traffic a lock per packet for nothing.
  if (!channel->counted_by_predecessors_.exchange(true, std::memory_order_relaxed))
    for (const auto& predecessor : predecessors) predecessor->add_successor(channel);
  // The predecessor packets this wait covers: those submitted before it began (this
  // reader submits no other meanwhile). One submitted later makes the next packet wait
  // again.
  const uint32_t arrivals = channel->predecessor_arrivals_.load(std::memory_order_relaxed);
  if (!predecessors.empty()) {
    // What an old SA holds then waits behind numbers that were lost: the peer sends an
    // SA's packets in sequence order and one reader reads them, so every old packet sent
    // before this new one has been read, and those sent after it have higher numbers.
    // Their hold time would make the new SA's packets wait as long. Not after a timeout:
    // then the numbers may still be in crypto.
    bool flushed = false;
    fence([&] {
      if (!flushed) {
        for (const auto& predecessor : predecessors)
          if (predecessor->packets_in_crypto() != 0) return false;
        for (const auto& predecessor : predecessors)  // oldest first, as the peer sent them
          predecessor->release().flush(predecessor->sink(), pool_);
        flushed = true;
      }
      // Out of crypto means staged, not delivered: a worker may still be handing an old
      // SA's last packets to the sink (and flush() leaves what it released to that
      // worker). Until it is done, the new SA's packets could overtake them.
      for (const auto& predecessor : predecessors)
        if (predecessor->release().delivering()) return false;
      return true;
    });
  }
  channel->fenced_arrivals_.store(arrivals, std::memory_order_relaxed);
}

}  // namespace espgw::pipeline

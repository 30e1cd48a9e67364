// Per-SA pipeline state. Both channels release their SA's packets by ESP sequence number:
// outbound the numbers are dense (the SA hands them out in order), inbound they may have
// gaps (loss) and arrive in any order. Workers reach a channel through the Packet, never
// through a shared table. The Packet's pointer does not own the channel: the Pipeline
// creates channels whose last owner hands them to its ChannelReclaimer, which deletes
// them once no packet and no worker can reach them (channel_reclaimer.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "esp/security_association.h"
#include "pipeline/ordered_release.h"
#include "pipeline/sa_group.h"
#include "util/spin_lock.h"

namespace espgw::pipeline {

class OutboundChannel {
 public:
  // `keep_alive` (optional) lives as long as the channel: the sink's owner, typically,
  // since packets still in flight after the SA is gone are delivered through it.
  OutboundChannel(std::shared_ptr<esp::OutboundSa> sa, PacketSink& sink, size_t max_in_flight,
                  std::shared_ptr<void> keep_alive = {});

  esp::OutboundSa& sa() { return *sa_; }
  PacketSink& sink() { return sink_; }
  // The sink's shared sink, asked once: process_batch looks at it per channel and batch.
  SharedSink* shared_sink() const { return shared_sink_; }
  // Packets numbered and not yet delivered.
  size_t in_flight() const;
  size_t max_in_flight() const { return max_in_flight_; }
  // Room in the in-flight bound that submitters took: packets in flight, packets a
  // reader's slot holds unnumbered (Pipeline::number_slot) and room reserved there for
  // more. Never above max_in_flight, and the numbers taken never pass it, so numbering
  // a reader's batch is never refused for the bound. 0: no packet points at the channel.
  uint64_t committed_in_flight() const {
    // delivered() first: it only grows and never passes committed_.
    const uint64_t delivered = release_.delivered();
    return committed_.load(std::memory_order_acquire) - delivered;
  }
  // Takes up to `want` places in the bound (at least 1): how many it took, 0 if full.
  uint64_t reserve_room(uint64_t want);
  // Gives back places reserved and not used (or used by packets that were then refused
  // a number). After this a caller that holds no reference must not touch the channel:
  // with nothing in flight, the reclaimer may delete it.
  void return_room(uint64_t places) {
    if (places != 0) committed_.fetch_sub(places, std::memory_order_release);
  }
  // The highest sequence number taken so far; every packet up to it has been delivered
  // once delivered_through() says so (numbers are dense: sealing cannot fail).
  uint64_t last_sequence() const { return sa_->last_sequence(); }
  bool delivered_through(uint64_t sequence) const {
    return first_sequence_ + release_.delivered() > sequence;
  }
  OrderedRelease& release() { return release_; }
  // Makes the channel count its packets in flight against `budget` too (its SA group's,
  // sa_group.h). Call before the channel carries packets, and at most once.
  void share_budget(std::shared_ptr<InFlightBudget> budget);
  InFlightBudget* budget() const { return budget_.get(); }
  // Whether the thread that owns `submitter` (its submitter slot's address) is the only
  // one that has submitted to this channel with a slot so far. The first thread becomes
  // the channel's sole submitter; a second one makes it shared, for good. A sole
  // submitter numbers each packet at submit, on an SA lock and lines no other thread
  // touches; with several, numbers are taken per batch (Pipeline::number_slot), so that
  // they trade the SA's lock once per batch. Only a choice of cost: any mix of the two
  // keeps each thread's packets numbered in the order it submitted them.
  bool sole_submitter(const void* submitter) {
    const auto mine = reinterpret_cast<uintptr_t>(submitter);
    uintptr_t seen = submitter_.load(std::memory_order_relaxed);
    if (seen == mine) return true;
    if (seen == 0 && submitter_.compare_exchange_strong(seen, mine, std::memory_order_relaxed))
      return true;
    if (seen != kSharedBySubmitters)
      submitter_.store(kSharedBySubmitters, std::memory_order_relaxed);
    return false;
  }

 private:
  friend class Pipeline;
  // Slot addresses are 64-byte aligned: never 1.
  static constexpr uintptr_t kSharedBySubmitters = 1;
  // What every packet reads first (one cache line), the release state on the next ones.
  std::shared_ptr<esp::OutboundSa> sa_;
  PacketSink& sink_;
  SharedSink* const shared_sink_;
  const size_t max_in_flight_;
  // Packets are released by sequence number, which the SA hands out in order under its
  // own lock, so the channel needs no lock of its own. The first number is fixed here.
  const uint64_t first_sequence_;
  std::shared_ptr<InFlightBudget> budget_;
  std::shared_ptr<void> keep_alive_;
  // sole_submitter's: 0 (none yet), the sole submitter's slot, or kSharedBySubmitters.
  // Read per packet, written by each thread at most once: next to fields only read.
  std::atomic<uintptr_t> submitter_{0};
  // Places taken in the bound, ever, less those given back (committed_in_flight). On a
  // line of its own: readers write it once per batch, workers never.
  alignas(64) std::atomic<uint64_t> committed_{0};
  OrderedRelease release_;
};

// shared_from_this: a worker that leaves packets held behind a gap hands the gap timer an
// owning reference, from the packet's plain pointer.
class InboundChannel : public std::enable_shared_from_this<InboundChannel> {
 public:
  // `predecessors`: the channels of the SAs this one replaces (the same CHILD_SA, rekeyed),
  // oldest first; usually one, more when a rekey collided and both sides' new SAs were
  // installed. The peer sends a flow's packets on an old SA, then on the new one; the
  // first reader to submit a packet of this channel first lets what every predecessor has
  // in flight leave (Pipeline::submit_inbound), so that the new SA's packets do not
  // overtake the old ones'. So does the reader of the next packet after any predecessor
  // took another one: a peer whose senders switch one after another (several TUN readers,
  // a kernel's CPUs) keeps sending some flows on the old SA after others moved.
  InboundChannel(std::shared_ptr<esp::InboundSa> sa, PacketSink& sink, size_t reorder_capacity,
                 uint64_t hold_ns, std::vector<std::weak_ptr<InboundChannel>> predecessors = {});

  esp::InboundSa& sa() { return *sa_; }
  uint32_t spi() const { return sa_->config().spi; }
  PacketSink& sink() { return sink_; }
  OrderedRelease& release() { return release_; }
  // Packets submitted and not yet staged in the reorder buffer (or dropped).
  uint64_t packets_in_crypto() const { return in_crypto_.load(std::memory_order_acquire); }

 private:
  friend class Pipeline;
  // Whether this channel's next packet must first wait for its predecessors' packets in
  // flight: its first packet, and the first after a predecessor took another packet.
  bool predecessors_moved() const {
    return predecessor_arrivals_.load(std::memory_order_relaxed) !=
           fenced_arrivals_.load(std::memory_order_relaxed);
  }
  // `successor`, which names this channel as a predecessor, got its first packet: from
  // now on this channel's packets count on it.
  void add_successor(const std::shared_ptr<InboundChannel>& successor);
  // A packet of this channel, once superseded: its successors' next packets wait for it.
  void count_arrival_for_successors();

  // What every packet reads first (one cache line), the release state on the next ones.
  std::shared_ptr<esp::InboundSa> sa_;
  PacketSink& sink_;
  std::atomic<uint64_t> in_crypto_{0};  // submitted, not yet back from a worker
  std::atomic<bool> timer_scheduled_{false};
  // Set while a successor that got its first packet counts this channel's packets.
  std::atomic<bool> superseded_{false};
  // Set at this channel's first wait for its predecessors, when they start counting.
  std::atomic<bool> counted_by_predecessors_{false};
  SpinLock successors_lock_;
  // Counts that only grow: predecessor packets that may be in flight (1 from the start if
  // there are predecessors, plus one per predecessor packet submitted since), and how
  // many of them the last completed wait covered (its count when it began).
  std::atomic<uint32_t> predecessor_arrivals_;
  std::atomic<uint32_t> fenced_arrivals_{0};
  const std::vector<std::weak_ptr<InboundChannel>> predecessors_;
  std::vector<std::weak_ptr<InboundChannel>> successors_;  // under successors_lock_
  OrderedRelease release_;
};

}  // namespace espgw::pipeline

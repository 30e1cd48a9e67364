// The pipeline's construction and shutdown, its channels and the submit paths. The other
// concerns each have a file of their own, pipeline_*.cpp (docs/pipeline.md lists them).
#include "pipeline/pipeline.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <stdexcept>

#include "util/futex.h"

namespace espgw::pipeline {

namespace {

void pin_to_cpu(std::thread& thread, unsigned index) {
  const unsigned cpus = std::thread::hardware_concurrency();
  if (cpus == 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(index % cpus, &set);
  pthread_setaffinity_np(thread.native_handle(), sizeof set, &set);
}

unsigned resolve_worker_count(unsigned requested) {
  if (requested > 0) return requested;
  const unsigned cpus = std::thread::hardware_concurrency();
  return cpus > 0 ? cpus : 1;
}

std::atomic<uint64_t> next_pipeline_id{1};

// The deleter of every channel the pipeline makes: the reclaimer deletes it once packets
// in flight cannot reach it; without a pipeline nothing is in flight.
template <typename Channel>
std::shared_ptr<Channel> reclaimed_by(std::weak_ptr<ChannelReclaimer> reclaimer, Channel* channel) {
  return std::shared_ptr<Channel>(channel, [reclaimer = std::move(reclaimer)](Channel* retired) {
    if (auto alive = reclaimer.lock())
      alive->retire(retired);
    else
      delete retired;
  });
}

}  // namespace

Pipeline::Pipeline(PipelineConfig config)
    : config_(std::move(config)),
      inbound_in_crypto_limit_(
          config_.max_inbound_in_crypto_per_sa != 0
              ? config_.max_inbound_in_crypto_per_sa
              : std::max(config_.pool_packets / 4, config_.max_in_flight_per_sa)),
      id_(next_pipeline_id.fetch_add(1, std::memory_order_relaxed)),
      pool_(config_.pool_packets, config_.packet_capacity),
      work_(config_.pool_packets) {
  if (config_.pool_packets == 0 || config_.max_in_flight_per_sa == 0 ||
      config_.reorder_capacity == 0)
    throw std::invalid_argument("pipeline: pool, in-flight and reorder sizes must be positive");
  const unsigned count = config_.run_to_completion ? 0 : resolve_worker_count(config_.workers);
  worker_state_ = std::make_unique<WorkerState[]>(count);
  slots_ = std::make_unique<SubmitterSlot[]>(kSubmitterSlots);
  workers_.reserve(count);
  for (unsigned i = 0; i < count; ++i) {
    workers_.emplace_back([this, i] { worker_loop(i); });
    if (config_.pin_workers) pin_to_cpu(workers_.back(), i);
  }
  timer_ = std::thread([this] { timer_loop(); });
}

Pipeline::~Pipeline() {
  wait_idle();
  stopping_.store(true, std::memory_order_seq_cst);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(wake_, static_cast<int>(workers_.size()));
  for (auto& worker : workers_) worker.join();
  {
    std::lock_guard guard(timer_mutex_);
    timer_stop_ = true;
  }
  timer_wake_.notify_all();
  timer_.join();
  // Deliver what is still held behind gaps; every packet goes back to the pool.
  for (auto& channel : stalled_) channel->release().flush(channel->sink(), pool_);
  stalled_.clear();
  inbound_.for_each([this](const std::shared_ptr<InboundChannel>& channel) {
    channel->release().flush(channel->sink(), pool_);
  });
  // Nothing is in flight and no thread is in a section: every retired channel goes now.
  reclaimer_->reclaim(pool_);
}

std::shared_ptr<OutboundChannel> Pipeline::make_outbound(std::shared_ptr<esp::OutboundSa> sa,
                                                         PacketSink& sink,
                                                         std::shared_ptr<void> keep_alive) {
  return reclaimed_by(std::weak_ptr(reclaimer_),
                      new OutboundChannel(std::move(sa), sink, config_.max_in_flight_per_sa,
                                          std::move(keep_alive)));
}

std::shared_ptr<InboundChannel> Pipeline::add_inbound(
    std::shared_ptr<esp::InboundSa> sa, PacketSink& sink,
    std::span<const std::shared_ptr<InboundChannel>> predecessors) {
  const uint64_t hold_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(config_.reorder_hold).count());
  std::vector<std::weak_ptr<InboundChannel>> weak;
  for (const auto& predecessor : predecessors)
    if (predecessor) weak.emplace_back(predecessor);
  auto channel = reclaimed_by(
      std::weak_ptr(reclaimer_),
      new InboundChannel(std::move(sa), sink, config_.reorder_capacity, hold_ns, std::move(weak)));
  return inbound_.add(channel) ? channel : nullptr;
}

bool Pipeline::remove_inbound(uint32_t spi) {
  auto channel = inbound_.remove(spi);
  if (!channel) return false;
  channel->release().flush(channel->sink(), pool_);
  return true;
}

esp::DropReason Pipeline::submit_outbound(OutboundChannel& c, Packet* packet,
                                          esp::OuterHeaders outer) {
  InFlightBudget* budget = c.budget();
  // A reader's packet waits in its slot framed but unnumbered; the batch is numbered when
  // it leaves the slot, with one acquisition of the SA's lock per SA (number_slot). Its
  // place in the SA's in-flight bound is taken here, so that numbering is never refused
  // for the bound once the submit accepted the packet; the slot reserves places a few at
  // a time (share.spare) rather than one per packet. Without a slot (a worker's sink
  // that submits), and for an SA no other thread submits to (its lock and lines stay in
  // this core's cache: the batch's bookkeeping would cost more than it saves), the
  // number is taken here and the packet waits in the slot numbered.
  SubmitterSlot* slot = numbering_slot();
  if (slot != nullptr && c.sole_submitter(slot)) slot = nullptr;
  SlotShare share = slot ? share_of(*slot, c) : SlotShare{};
  // The SA or its group has its bound in flight, all of it sure to leave: if the SA has
  // stopped delivering (its workers got no CPU), a reader waits for room rather than drop
  // (outbound_room_wait). Two loads of lines the submit reads anyway; the rest only at the
  // bound.
  if (config_.outbound_room_wait.count() != 0 &&
      ((share.spare == 0 && c.committed_in_flight() >= c.max_in_flight()) ||
       (budget && budget->in_flight.load(std::memory_order_relaxed) >= budget->limit))) {
    if (!wait_for_room(c)) {
      c.sa().counters().count(esp::DropReason::queue_full);
      pool_.release(packet);
      return esp::DropReason::queue_full;
    }
    share = slot ? share_of(*slot, c) : SlotShare{};  // the wait completed this thread's batch
  }
  // The place is taken before the check: readers of one group submit at once, and a
  // look followed by an increment let each of them past the bound together (the group
  // then held up to one packet per reader more than its limit). A refused reader's
  // increment, undone at once, may make another reader see the group full for that
  // instant: a drop at the bound, never a packet beyond it.
  if (budget && budget->in_flight.fetch_add(1, std::memory_order_relaxed) >= budget->limit) {
    budget->in_flight.fetch_sub(1, std::memory_order_relaxed);
    // The SA's group has its bound in flight: the same drop as the SA's own bound.
    c.sa().counters().count(esp::DropReason::queue_full);
    pool_.release(packet);
    return esp::DropReason::queue_full;
  }
  esp::DropReason reason = esp::DropReason::none;
  uint64_t reserved = 0;
  if (slot) {
    // The checks take_sequence makes, in its order, as if this thread's unnumbered
    // packets had their numbers: alone, the submit's answer is what numbering at once
    // gave. Numbering decides; what it refuses (a bound another thread reached first) it
    // drops and counts.
    reason = esp::encap_frame(c.sa(), packet->buffer, outer, packet->encap);  // counts its own
    if (reason == esp::DropReason::none) {
      reason = c.sa().sequence_refusal(share.unnumbered, ~uint64_t{0});
      if (reason == esp::DropReason::none && share.spare == 0 &&
          (reserved = c.reserve_room(room_to_reserve(*slot, c, share))) == 0)
        reason = esp::DropReason::queue_full;
      if (reason != esp::DropReason::none) c.sa().counters().count(reason);
    }
  } else {
    // The place reserved is the bound (a limit read now could be stale, as in
    // number_slot). Without one: every other check first, then queue_full, in
    // take_sequence's order.
    const uint64_t place = c.reserve_room(1);
    reason = esp::encap_prepare(c.sa(), packet->buffer, outer, packet->encap,
                                place != 0 ? ~uint64_t{0} : 0);
    if (reason != esp::DropReason::none) c.return_room(place);
  }
  if (reason != esp::DropReason::none) {
    if (budget) budget->in_flight.fetch_sub(1, std::memory_order_relaxed);
    pool_.release(packet);
    return reason;
  }
  // The places stay taken until the packet's delivery gives them back.
  packet->direction = Direction::outbound;
  packet->outer = outer;
  packet->outbound = &c;
  if (slot)
    add_unnumbered(*slot, packet, c, share, static_cast<uint32_t>(reserved));
  else
    enqueue(packet);
  return esp::DropReason::none;
}

esp::DropReason Pipeline::submit_inbound(Packet* packet) {
  esp::DropReason reason = esp::DropReason::none;
  const auto spi = esp::esp_spi(packet->buffer);
  // Valid until this thread's next lookup: the packet then points at it without owning it.
  InboundChannel* channel = nullptr;
  if (!spi) {
    reason = esp::DropReason::too_short;
    engine_counters_.count(reason);
  } else if (!(channel = inbound_.find_cached(*spi))) {
    reason = esp::DropReason::no_sa;
    engine_counters_.count(reason);
  } else {
    reason = esp::decap_check(channel->sa(), packet->buffer, packet->decap);
  }
  if (reason != esp::DropReason::none) {
    pool_.release(packet);
    return reason;
  }
  // One SA may hold no more than its share of the pool in crypto: a flood of forged
  // packets on one SPI (which only the ICV check tells apart) would otherwise take the
  // whole pool, and every other SA's reader would find it empty. The place is taken
  // before the check, as in submit_outbound, so readers sharing the SA cannot pass the
  // bound together.
  if (channel->in_crypto_.fetch_add(1, std::memory_order_relaxed) >= inbound_in_crypto_limit_) {
    channel->in_crypto_.fetch_sub(1, std::memory_order_relaxed);
    channel->sa().counters().count(esp::DropReason::queue_full);
    pool_.release(packet);
    return esp::DropReason::queue_full;
  }
  // A packet of an SA that a rekey replaced, after the new SA's first packet: the new
  // SA's next packet waits for it (the peer still sends this flow on the old SA; the next
  // on the new one must not overtake it). Only while a peer switches its flows over.
  if (channel->superseded_.load(std::memory_order_relaxed)) channel->count_arrival_for_successors();
  // A rekeyed SA's first packet, and its first after a predecessor took another one. The
  // reference keeps the channel alive through the wait, in which this thread may look up
  // others.
  std::shared_ptr<InboundChannel> fenced;
  if (channel->predecessors_moved() && (fenced = channel->weak_from_this().lock()))
    fence_inbound(fenced);
  packet->direction = Direction::inbound;
  packet->inbound = channel;
  enqueue(packet);
  return esp::DropReason::none;
}

std::vector<WorkerLoad> Pipeline::worker_load() const {
  std::vector<WorkerLoad> load(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i)
    load[i] = {worker_state_[i].packets.load(std::memory_order_relaxed),
               worker_state_[i].wakeups.load(std::memory_order_relaxed)};
  return load;
}

}  // namespace espgw::pipeline

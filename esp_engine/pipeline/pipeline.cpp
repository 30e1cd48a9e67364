#include "pipeline/pipeline.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

#include "util/futex.h"
#include "util/thread_name.h"

namespace espgw::pipeline {

namespace {

// How long an idle worker polls before it sleeps (a pause is ~40-140 cycles): long enough
// to bridge the gap between two bursts from the reader, short enough not to take the
// core from a reader sharing it.
constexpr int kSpinsBeforeSleep = 64;

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

bool authenticated_drop(esp::DropReason reason) {
  // After these the sequence number is known to be genuine and will never be delivered,
  // so the reorder buffer must not wait for it. An ICV failure proves nothing (anyone
  // can forge the number), and a replay's number was already handled.
  return reason != esp::DropReason::icv_failure && reason != esp::DropReason::replayed &&
         reason != esp::DropReason::outside_window;
}

std::atomic<uint64_t> next_pipeline_id{1};
std::atomic<uint64_t> next_thread_token{1};

// Which slot this thread last used, in which pipeline (ids are never reused, so a new
// pipeline at a freed one's address is not mistaken for it).
struct SlotCache {
  uint64_t pipeline = 0;
  void* slot = nullptr;  // nullptr: this thread has no slot in that pipeline
  bool settled = false;  // with nullptr: a claim failed (every slot was taken)
};

uint64_t this_thread_token() {
  thread_local const uint64_t token = next_thread_token.fetch_add(1, std::memory_order_relaxed);
  return token;
}

// Set while this thread is inside Pipeline::process_queued: a sink that submits must
// neither process nor wait for a delivery (it may be its own).
thread_local bool processing_here = false;

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

Packet* Pipeline::acquire() {
  if (Packet* packet = pool_.acquire()) return packet;
  // Run to completion: the packets this thread (or another) submitted come back to the
  // pool once this thread has processed them.
  if (config_.run_to_completion && process_queued(true))
    if (Packet* packet = pool_.acquire()) return packet;
  // With workers: a batch this thread has not handed over yet would never come back.
  if (!config_.run_to_completion)
    if (SubmitterSlot* slot = own_slot(false); slot && hand_over(*slot))
      if (Packet* packet = pool_.acquire()) return packet;
  relieve_pressure();
  return pool_.acquire();
}

void Pipeline::relieve_pressure() {
  std::vector<std::shared_ptr<InboundChannel>> stalled;
  {
    std::lock_guard guard(timer_mutex_);
    stalled = stalled_;
  }
  // An empty pool is normally plain backpressure (the workers are behind). Waiting for a
  // gap only becomes the problem when no worker holds a packet, reorder buffers hoard at
  // least half the pool, and so the missing packets can only arrive through a reader
  // that has nothing to read them into. A pool larger than twice the sum of the reorder
  // capacities never gets here.
  if (!idle()) return;  // workers still hold packets: they come back without giving up gaps
  size_t held = 0;
  for (auto& channel : stalled) held += channel->release().held();
  if (held * 2 < pool_.size()) return;
  bool flushed = false;
  for (auto& channel : stalled) {
    if (channel->in_crypto_.load(std::memory_order_acquire) != 0) continue;
    channel->release().flush(channel->sink(), pool_);
    flushed = true;
  }
  if (flushed) pressure_flushes_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

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

Pipeline::SubmitterSlot* Pipeline::own_slot(bool claim) {
  thread_local SlotCache cache;
  if (cache.pipeline == id_ && (cache.slot != nullptr || cache.settled || !claim))
    return static_cast<SubmitterSlot*>(cache.slot);
  const uint64_t token = this_thread_token();
  SubmitterSlot* found = nullptr;
  for (size_t i = 0; i < kSubmitterSlots && !found; ++i)
    if (slots_[i].owner.load(std::memory_order_relaxed) == token) found = &slots_[i];
  for (size_t i = 0; claim && i < kSubmitterSlots && !found; ++i) {
    uint64_t free = 0;
    if (slots_[i].owner.compare_exchange_strong(free, token, std::memory_order_acq_rel))
      found = &slots_[i];
  }
  // A submitting thread acquires (and, running to completion, releases) packets all the
  // time: it keeps free ones at hand.
  if (claim && found) pool_.use_thread_cache();
  cache = {id_, found, claim && !found};
  return found;
}

void Pipeline::hand_over_in_batches() {
  if (!config_.run_to_completion) own_slot(true);  // without workers every submitter has one
}

void Pipeline::push_batch(Packet* const* packets, size_t count) {
  for (size_t i = 0; i + 1 < count; ++i) packets[i]->batch_next = packets[i + 1];
  packets[count - 1]->batch_next = nullptr;
  packets[0]->batch_length = static_cast<uint32_t>(count);
  // Cannot fail: the queue's capacity is at least the pool's size.
  while (!work_.try_push(packets[0])) std::this_thread::yield();
}

size_t Pipeline::pop_batch(std::array<Packet*, kWorkerBatch>& batch) {
  size_t count = 0;
  Packet* head = nullptr;
  while (count < kWorkerBatch && work_.try_pop(head)) {
    const uint32_t length = head->batch_length;
    uint32_t taken = 0;
    Packet* packet = head;
    for (; packet != nullptr && count < kWorkerBatch; packet = packet->batch_next, ++taken)
      batch[count++] = packet;
    if (packet != nullptr) {  // more than fits: the rest goes back as a batch of its own
      packet->batch_length = length - taken;
      while (!work_.try_push(packet)) std::this_thread::yield();
      break;
    }
  }
  return count;
}

bool Pipeline::hand_over(SubmitterSlot& slot) {
  const uint32_t count = slot.count.load(std::memory_order_acquire);
  if (count == 0) return false;
  push_batch(slot.packets.data(), count);
  // Only now: idle() that sees the slot empty sees the batch in the queue.
  slot.count.store(0, std::memory_order_release);
  after_push();
  return true;
}

void Pipeline::after_push() {
  // Pairs with the sleeper's increment of sleepers_ before its last look at the queue
  // (all seq_cst, see MpmcQueue::try_push): either it sees this packet or we see it.
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_one_worker();
  // Counted in queue entries: a reader's batch or a single packet.
  if (config_.submitter_assist_threshold != 0 &&
      work_.size_approx() > config_.submitter_assist_threshold)
    assist();
}

size_t Pipeline::take_slot(SubmitterSlot& slot, std::array<Packet*, kWorkerBatch>& batch) {
  const uint32_t count = slot.count.load(std::memory_order_acquire);
  std::copy_n(slot.packets.begin(), count, batch.begin());
  // After the caller announced itself in assisting_: idle() that sees the slot empty also
  // sees the packets being processed.
  if (count != 0) slot.count.store(0, std::memory_order_release);
  return count;
}

void Pipeline::enqueue(Packet* packet) {
  if (config_.run_to_completion) {
    // The packet waits in this thread's own batch: no shared queue, no locked instruction.
    // A full batch is processed right away, so the batch bounds the latency, not the pool.
    SubmitterSlot* slot = own_slot(true);
    if (slot != nullptr) {
      uint32_t count = slot->count.load(std::memory_order_relaxed);
      // Full with what a sink submitted while this thread processed the last batch.
      if (count == kWorkerBatch && process_queued(false))
        count = slot->count.load(std::memory_order_relaxed);
      // Still full: this thread is inside processing (a sink that submits: delivering one
      // SA's packets, which other threads keep staging, can take a while). The full batch
      // goes to the shared queue, where any thread takes it; kept in the slot, its packets
      // waited for this delivery to end while other threads' later ones passed them, and
      // the reorder window gave up on them (late deliveries with two readers on one SA).
      if (count == kWorkerBatch && hand_over(*slot)) count = 0;
      if (count < kWorkerBatch) {
        slot->packets[count] = packet;
        slot->count.store(count + 1, std::memory_order_release);
        if (count + 1 == kWorkerBatch) process_queued(false);
        return;
      }
    }
    push_batch(&packet, 1);  // no slot (every one taken)
    if (work_.size_approx() >= kWorkerBatch) process_queued(false);
    return;
  }
  // With workers, a reader (hand_over_in_batches) collects its packets and hands them
  // over as one queue entry when it completes its read batch or has a full one: one
  // compare-exchange and one cache line moving to a worker per batch, not per packet.
  if (SubmitterSlot* slot = own_slot(false)) {
    const uint32_t count = slot->count.load(std::memory_order_relaxed);
    slot->packets[count] = packet;
    slot->count.store(count + 1, std::memory_order_release);
    if (count + 1 == kWorkerBatch) hand_over(*slot);
    return;
  }
  push_batch(&packet, 1);
  after_push();
}

void Pipeline::assist() {
  process_queued(false);
}

void Pipeline::complete_submitted() {
  if (config_.run_to_completion)
    process_queued(true);
  else if (SubmitterSlot* slot = own_slot(false))
    hand_over(*slot);
}

bool Pipeline::fence(const std::function<bool()>& done) {
  fences_.fetch_add(1, std::memory_order_relaxed);
  // This thread's own packets first: until completed they wait for it.
  complete_submitted();
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

bool Pipeline::process_queued(bool until_empty, bool every_slot) {
  // A sink may submit (a loopback, a forwarder): never nest. The outer call, looping
  // until the queue is empty, takes what the sink submitted.
  if (processing_here) return false;
  processing_here = true;
  assisting_.fetch_add(1, std::memory_order_seq_cst);
  // The packets taken below point at channels they do not own.
  const ChannelReclaimer::Section section(*reclaimer_);
  // With workers, a reader's own batch goes to them (hand_over); here only the queue.
  SubmitterSlot* own = config_.run_to_completion ? own_slot(false) : nullptr;
  std::array<Packet*, kWorkerBatch> batch;
  bool any = false;
  for (;;) {
    size_t count = own ? take_slot(*own, batch) : 0;
    const bool was_own = count != 0;
    for (size_t i = 0; every_slot && count == 0 && i < kSubmitterSlots; ++i)
      count = take_slot(slots_[i], batch);
    if (count == 0) count = pop_batch(batch);
    if (count == 0) break;
    process_batch(batch.data(), count, static_cast<unsigned>(workers_.size()));
    any = true;
    if (until_empty) continue;
    // After its own batch, a thread also takes one from the shared queue: there another
    // thread's delivery leaves what its sink submitted (a loopback's or forwarder's
    // packets, handed over while it keeps delivering an SA that others keep staging).
    // Left for that thread alone, they fell behind the reorder window.
    if (was_own && (count = pop_batch(batch)) != 0)
      process_batch(batch.data(), count, static_cast<unsigned>(workers_.size()));
    break;
  }
  assisting_.fetch_sub(1, std::memory_order_seq_cst);
  processing_here = false;
  return any;
}

void Pipeline::wake_one_worker() {
  if (wake_pending_.exchange(true, std::memory_order_seq_cst)) return;
  wake_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(wake_, 1);
}

bool Pipeline::wait_for_room(OutboundChannel& c) {
  // Readers only: a thread inside processing (a sink that submits) may be what the SA
  // waits for, and a worker (no submitter slot) must not leave its batch for it.
  if (processing_here || own_slot(false) == nullptr) return true;
  room_waits_.fetch_add(1, std::memory_order_relaxed);
  // This thread's own packets first: until completed they wait for it, and they may be
  // what fills the SA.
  complete_submitted();
  InFlightBudget* budget = c.budget();
  const auto full = [&] {
    return c.in_flight() >= c.max_in_flight() ||
           (budget && budget->in_flight.load(std::memory_order_relaxed) >= budget->limit);
  };
  // The SA this thread last found stalled, and when: right after a stall the workers
  // catch up with what piled up, the SA fills again while it delivers, and that is still
  // the stall's backlog, not a standing queue.
  thread_local const OutboundChannel* stalled_channel = nullptr;
  thread_local std::chrono::steady_clock::time_point stalled_at;
  const auto start = std::chrono::steady_clock::now();
  const bool known_stall = stalled_channel == &c && start - stalled_at < kStallMemory;
  const auto probe_end = start + config_.outbound_stall_probe;
  const auto deadline = start + config_.outbound_room_wait;
  const uint64_t delivered = c.release().delivered();
  for (unsigned idle = 0;;) {
    const bool room = !full();
    const auto now = std::chrono::steady_clock::now();
    if (!known_stall && now < probe_end) {
      // Delivering: the SA is full because more comes than the crypto takes (a standing
      // queue under TCP), and the drop at the bound is the tunnel's AQM.
      if (room || c.release().delivered() != delivered) return false;
    } else {
      stalled_channel = &c;
      stalled_at = now;
      if (room) return true;
      if (now >= deadline) {
        room_wait_timeouts_.fetch_add(1, std::memory_order_relaxed);
        return true;  // and the submit drops the packet: the SA is still full
      }
    }
    if (process_queued(false)) continue;
    // Nothing to help with: the packets in flight are in other threads' hands. When the
    // host's CPUs are busy elsewhere (the usual cause of the wait), spinning would take
    // time from the very worker that holds them.
    if (++idle < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

esp::DropReason Pipeline::submit_outbound(OutboundChannel& c, Packet* packet,
                                          esp::OuterHeaders outer) {
  InFlightBudget* budget = c.budget();
  uint64_t limit = c.sequence_limit();
  // The SA or its group has its bound in flight, all of it sure to leave: if the SA has
  // stopped delivering (its workers got no CPU), a reader waits for room rather than drop
  // (outbound_room_wait). Two loads of lines the submit reads anyway; the rest only at the
  // bound.
  if (config_.outbound_room_wait.count() != 0 &&
      (c.last_sequence() >= limit ||
       (budget && budget->in_flight.load(std::memory_order_relaxed) >= budget->limit))) {
    if (!wait_for_room(c)) {
      c.sa().counters().count(esp::DropReason::queue_full);
      pool_.release(packet);
      return esp::DropReason::queue_full;
    }
    limit = c.sequence_limit();
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
  const esp::DropReason reason =
      esp::encap_prepare(c.sa(), packet->buffer, outer, packet->encap, limit);
  if (reason != esp::DropReason::none) {
    if (budget) budget->in_flight.fetch_sub(1, std::memory_order_relaxed);
    pool_.release(packet);  // counted on the SA by encap_prepare
    return reason;
  }
  // The place stays taken until the packet's delivery gives it back.
  packet->direction = Direction::outbound;
  packet->outer = outer;
  packet->outbound = &c;
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

void Pipeline::process_batch(Packet* const* batch, size_t count, unsigned worker) {
  // Crypto for the whole batch first; then, per channel touched, the shared and serial
  // part once: one replay-window commit, one acquisition of the release lock to stage
  // them all, one drain (outbound, one send for all the channels whose sinks share one:
  // SharedSink, the WAN socket). Doing these once per batch and channel keeps workers that
  // share an SA from trading its locks for every packet. A batch can span as many channels as
  // it has packets (64 SAs in an ECMP group), so the per-batch state is kept compact:
  // channels are found through a 64-entry table indexed by a hash of their address and
  // packets grouped by a counting sort, a few cache lines in all (an array of per-channel
  // staging areas was 58 KiB, and finding a channel walked one cache line per channel
  // already seen; comparing with every channel seen cost ~120 instructions a packet when
  // each packet of a batch had a channel of its own).
  struct Group {
    OutboundChannel* outbound;
    InboundChannel* inbound;
    uint32_t packets;   // through crypto and kept: in `grouped`, from `first`
    uint32_t finished;  // inbound: through crypto, kept or dropped
    uint32_t forged;    // inbound: of those, failed authentication
    uint32_t first;
  };
  constexpr uint8_t kDropped = 0xFF;
  std::array<const void*, kWorkerBatch> keys;
  std::array<Group, kWorkerBatch> groups;
  std::array<uint8_t, kWorkerBatch> group_of;
  size_t group_count = 0;
  // Twice as many entries as a batch has packets: open addressing at most half full.
  constexpr size_t kGroupTable = 2 * kWorkerBatch;
  constexpr uint8_t kNoGroup = 0xFF;
  std::array<uint8_t, kGroupTable> table;
  table.fill(kNoGroup);
  uint8_t last_group = kNoGroup;  // consecutive packets of one channel skip the table
  auto group_for = [&](const void* key, OutboundChannel* outbound, InboundChannel* inbound) {
    if (last_group != kNoGroup && keys[last_group] == key) return last_group;
    // Fibonacci hashing of the address: its top bits index the table.
    size_t slot = (reinterpret_cast<uintptr_t>(key) * 0x9E3779B97F4A7C15ull) >> 58;
    static_assert(kGroupTable == 64, "the shift above takes 6 bits");
    for (;; slot = (slot + 1) % kGroupTable) {
      const uint8_t g = table[slot];
      if (g == kNoGroup) break;
      if (keys[g] == key) return last_group = g;
    }
    table[slot] = static_cast<uint8_t>(group_count);
    keys[group_count] = key;
    groups[group_count] = {outbound, inbound, 0, 0, 0, 0};
    return last_group = static_cast<uint8_t>(group_count++);
  };
  for (size_t i = 0; i < count; ++i) {
    Packet* packet = batch[i];
    if (config_.before_crypto) config_.before_crypto(worker);
    uint8_t g;
    if (packet->direction == Direction::outbound) {
      OutboundChannel* channel = packet->outbound;
      packet->outbound = nullptr;
      esp::encap_seal(channel->sa(), packet->buffer, packet->encap);
      g = group_for(channel, channel, nullptr);
    } else {
      InboundChannel* channel = packet->inbound;
      packet->inbound = nullptr;
      g = group_for(channel, nullptr, channel);
      ++groups[g].finished;
      if (esp::decap_open(packet->decap, packet->buffer) != esp::DropReason::none) {
        pool_.release(packet);  // counted on the SA; no tombstone: the number is unproven
        ++groups[g].forged;
        group_of[i] = kDropped;
        continue;
      }
    }
    group_of[i] = g;
    ++groups[g].packets;
  }
  // Each channel's packets together, in batch order.
  std::array<Packet*, kWorkerBatch> grouped;
  std::array<uint32_t, kWorkerBatch> cursor;
  for (uint32_t g = 0, next = 0; g < group_count; ++g) {
    groups[g].first = next;
    cursor[g] = next;
    next += groups[g].packets;
  }
  for (size_t i = 0; i < count; ++i)
    if (group_of[i] != kDropped) grouped[cursor[group_of[i]]++] = batch[i];

  static_assert(OrderedRelease::kInOrderMax >= kWorkerBatch, "a batch's channel group in order");
  std::array<OrderedRelease::Staged, kWorkerBatch> staged;
  std::array<esp::FinishItem, kWorkerBatch> opened;
  // Outbound channels whose sinks share one (the WAN socket): the packets each goes to
  // send directly are gathered, and sent with one call per shared sink after the loop.
  std::array<ChannelDelivery, kWorkerBatch> taken;
  std::array<OrderedRelease*, kWorkerBatch> taken_release;
  std::array<SharedSink*, kWorkerBatch> taken_shared;
  std::array<Packet*, kWorkerBatch> taken_packets;
  size_t taken_count = 0, taken_packet_count = 0;
  for (size_t g = 0; g < group_count; ++g) {
    const Group& group = groups[g];
    Packet* const* packets = grouped.data() + group.first;
    if (group.outbound) {
      // Outbound packets are released by their sequence number, dense per SA.
      for (uint32_t j = 0; j < group.packets; ++j)
        staged[j] = {packets[j]->encap.sequence, packets[j]};
      OrderedRelease& release = group.outbound->release();
      PacketSink& sink = group.outbound->sink();
      const std::span batch_of_channel(staged.data(), group.packets);
      SharedSink* const shared = group.outbound->shared_sink();
      if (shared == nullptr) {
        release.stage_and_drain(batch_of_channel, 0, sink, pool_);
        continue;
      }
      const std::span out(taken_packets.data() + taken_packet_count, group.packets);
      bool held = false;  // outbound numbers are dense: nothing waits for a timer
      if (const size_t direct =
              release.stage_or_take(batch_of_channel, 0, out, sink, pool_, held)) {
        taken[taken_count] = {&sink, out.first(direct)};
        taken_release[taken_count] = &release;
        taken_shared[taken_count++] = shared;
        taken_packet_count += direct;
      }
      continue;
    }
    // Inbound packets whose ICV verified: finished together, with one acquisition of the
    // SA's replay-window lock.
    for (uint32_t j = 0; j < group.packets; ++j)
      opened[j] = {&packets[j]->decap, &packets[j]->buffer, esp::DropReason::none, 0};
    if (group.packets != 0) esp::decap_finish_each(std::span(opened.data(), group.packets));
    size_t staged_count = 0;
    for (uint32_t j = 0; j < group.packets; ++j) {
      Packet* packet = packets[j];
      const uint64_t sequence = packet->decap.sequence;
      if (opened[j].reason == esp::DropReason::none) {
        staged[staged_count++] = {sequence, packet};
      } else {
        pool_.release(packet);  // the drop is already counted on the SA
        if (authenticated_drop(opened[j].reason)) staged[staged_count++] = {sequence, nullptr};
      }
    }
    // Only once staged are these packets where the reorder buffer sees them: until then
    // they count as in crypto, so that a gap they fill is not given up on meanwhile.
    if (group.inbound->release().stage_and_drain(std::span(staged.data(), staged_count),
                                                 group.finished, group.inbound->sink(), pool_,
                                                 group.forged))
      schedule_gap_timer(*group.inbound);
  }
  // One call per shared sink, then each channel's delivery ends, delivering what other
  // threads staged meanwhile. Usually every channel has the same one (the UDP socket; raw
  // ESP SAs have another), and the loop below runs once, moving nothing.
  for (size_t done = 0; done < taken_count;) {
    SharedSink* const shared = taken_shared[done];
    size_t end = done;
    for (size_t i = done; i < taken_count; ++i) {
      if (taken_shared[i] != shared) continue;
      if (i != end) {
        std::swap(taken[i], taken[end]);
        std::swap(taken_release[i], taken_release[end]);
        std::swap(taken_shared[i], taken_shared[end]);
      }
      ++end;
    }
    shared->deliver_together(std::span(taken.data() + done, end - done));
    // Back to the pool before the deliveries end, as deliver_from does: with one shared
    // sink (the usual case) in one call, not one per SA.
    if (done == 0 && end == taken_count)
      pool_.release(std::span<Packet* const>(taken_packets.data(), taken_packet_count));
    else
      for (size_t i = done; i < end; ++i) pool_.release(taken[i].packets);
    for (; done < end; ++done)
      taken_release[done]->finish_delivery(taken[done].packets.size(), *taken[done].channel_sink,
                                           pool_);
  }
}

void Pipeline::worker_loop(unsigned index) {
  name_this_thread("crypto-" + std::to_string(index));
  WorkerState& state = worker_state_[index];
  std::array<Packet*, kWorkerBatch> batch;
  int idle_spins = 0;
  uint64_t packets = 0;
  for (;;) {
    state.busy.store(true, std::memory_order_seq_cst);
    for (;;) {
      const size_t count = pop_batch(batch);
      if (count == 0) break;
      // The popped packets point at channels they do not own. Entering after the pop is
      // soon enough: until these packets are delivered or staged, their channels are not
      // quiescent, so the reclaimer cannot have started waiting for them yet. (Before
      // it, an idle worker's spinning would write the sections' counter every round.)
      const ChannelReclaimer::Section section(*reclaimer_);
      process_batch(batch.data(), count, index);
      packets += count;
      state.packets.store(packets, std::memory_order_relaxed);
    }
    state.busy.store(false, std::memory_order_seq_cst);
    if (stopping_.load(std::memory_order_acquire)) return;
    if (++idle_spins < kSpinsBeforeSleep) {
      __builtin_ia32_pause();
      continue;
    }
    idle_spins = 0;
    // Going to sleep: announce it, then clear any wake-up left pending by a producer that
    // saw an earlier sleeper (otherwise a stale flag would suppress the wake-up meant for
    // us), then look at the queue one last time. A producer either finds the packet seen
    // here or finds us counted in sleepers_ with the flag clear, and bumps wake_ past
    // `ticket`, so futex_wait returns.
    const uint32_t ticket = wake_.load(std::memory_order_seq_cst);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_pending_.exchange(false, std::memory_order_seq_cst);
    if (work_.size_approx() == 0 && !stopping_.load(std::memory_order_seq_cst)) {
      futex_wait(wake_, ticket);
      state.wakeups.fetch_add(1, std::memory_order_relaxed);
    }
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    // Consume the wake-up and pass it on if others sleep and work is left.
    wake_pending_.exchange(false, std::memory_order_seq_cst);
    if (work_.size_approx() > 1 && sleepers_.load(std::memory_order_seq_cst) > 0) wake_one_worker();
  }
}

bool Pipeline::idle() const {
  for (size_t i = 0; i < kSubmitterSlots; ++i)
    if (slots_[i].count.load(std::memory_order_acquire) != 0) return false;
  if (work_.size_approx() != 0 || assisting_.load(std::memory_order_seq_cst) != 0) return false;
  for (size_t i = 0; i < workers_.size(); ++i)
    if (worker_state_[i].busy.load(std::memory_order_seq_cst)) return false;
  return work_.size_approx() == 0;
}

void Pipeline::wait_idle() {
  // Run to completion has no worker to wait for: whoever waits does the work, including
  // what stopped submitters left in their slots (they no longer touch them).
  while (!idle()) {
    if (config_.run_to_completion) {
      if (!process_queued(true, true)) std::this_thread::yield();
      continue;
    }
    bool handed = false;
    for (size_t i = 0; i < kSubmitterSlots; ++i) handed = hand_over(slots_[i]) || handed;
    if (!handed) std::this_thread::yield();
  }
}

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

std::vector<WorkerLoad> Pipeline::worker_load() const {
  std::vector<WorkerLoad> load(workers_.size());
  for (size_t i = 0; i < workers_.size(); ++i)
    load[i] = {worker_state_[i].packets.load(std::memory_order_relaxed),
               worker_state_[i].wakeups.load(std::memory_order_relaxed)};
  return load;
}

}  // namespace espgw::pipeline

// The parallel ESP pipeline: any SA's packets on any worker, each SA's packets released
// in order.
//
//   submit_outbound: checks + headers; a reader's packets are numbered per batch and SA
//                    (one acquisition of the SA's lock) when the batch leaves its slot
//                    -> shared lock-free work queue -> any worker seals
//                    -> the SA's OrderedRelease hands packets to its sink in order
//   submit_inbound:  SPI lookup + anti-replay pre-check -> shared work queue
//                    -> any worker verifies and decrypts, commits the replay window
//                    -> the SA's reorder buffer releases by sequence number
//
// A reader's packets enter the queue as one entry per read batch (register_reader);
// without workers they never enter it (run_to_completion: each submitter's own batch).
// Memory is bounded by the packet pool: the work queue can hold every packet, so a push
// never fails, and when the pool is empty acquire() returns nullptr and the reader stops.
// Per-SA bounds: max_in_flight packets outbound (more are dropped as queue-full before
// they take a sequence number), max_inbound_in_crypto_per_sa packets in crypto and
// reorder_capacity sequence numbers held inbound.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "esp/counters.h"
#include "esp/encap.h"
#include "esp/spi_table.h"
#include "pipeline/channel_reclaimer.h"
#include "pipeline/channels.h"
#include "pipeline/mpmc_queue.h"
#include "pipeline/packet_pool.h"

namespace espgw::pipeline {

struct PipelineConfig {
  unsigned workers = 0;  // 0: one per online CPU
  bool pin_workers = false;
  size_t pool_packets = 4096;         // packets in existence: bounds every queue
  size_t packet_capacity = 2048;      // bytes per packet buffer (headroom included)
  size_t max_in_flight_per_sa = 512;  // outbound packets between submit and delivery
  // Inbound packets of one SA in crypto (submitted, not yet staged); more are dropped as
  // queue-full on the SA. 0: a quarter of the pool, at least max_in_flight_per_sa. Not the
  // outbound bound: a reader cannot hold back one SA's packets (they share its socket),
  // so what the pool absorbed before (a worker preempted for a few ms) would now be
  // dropped; a quarter still leaves the other SAs three quarters of the pool when a flood
  // of forged packets on one SPI fills its share.
  size_t max_inbound_in_crypto_per_sa = 0;
  size_t reorder_capacity = 512;                 // inbound sequence numbers held per SA
  std::chrono::microseconds reorder_hold{1000};  // longest wait for a missing packet
  // When more entries than this (a reader's batch or one packet) wait in the work queue, the
  // submitting thread processes a batch itself before returning. On a machine with fewer free cores
  // than workers (a small VM, or a reader sharing a core), handing every packet to another thread
  // costs a context switch; helping keeps the queue short and the latency low. 0 disables it.
  size_t submitter_assist_threshold = 64;
  // No worker threads: each submitting thread does the crypto of what it submitted when it
  // calls end_read_batch() (and whenever a batch's worth waits), run to completion as
  // VPP does. Where a gateway has about one free core, handing every packet to a worker
  // only adds wake-ups and context switches; ordering is unchanged (sequence numbers
  // are taken in submit order when the batch is processed, and the reorder buffers still
  // release in order).
  // A submitting thread's packets wait in a batch of its own, not in the shared queue.
  bool run_to_completion = false;
  // The longest a reader waits in fence_outbound() for a channel's packets in flight.
  std::chrono::microseconds fence_limit{5000};
  // The longest a reader waits in submit_outbound() for room when the SA, or its ECMP
  // group, has its bound of packets in flight (max_in_flight_per_sa) and has stopped
  // delivering: it completes its batch and helps with the work meanwhile, and the packet
  // is dropped as queue-full only after this. Those packets are sure to leave (sealing
  // cannot fail), so a stall of the workers (a host whose CPUs are busy elsewhere for a
  // few tens of ms) is waited out, and the TUN device holds what comes meanwhile, instead
  // of costing packets that TCP counts as lost. An SA that delivers within
  // outbound_stall_probe of the wait's start is not stalled but full (more comes than the
  // crypto takes): its packet is dropped at the bound as before, the tunnel's AQM (a
  // reader waiting there let the TUN queue fill behind it, ping under load 8 ms). Readers only (a
  // thread with a submitter slot: register_reader, or any submitter running to completion); a
  // sink's or a worker's submits are dropped at once (they could be what the SA waits for). 0:
  // dropped at once.
  std::chrono::microseconds outbound_room_wait{0};
  std::chrono::microseconds outbound_stall_probe{2000};
  // Test hook: runs on the worker before each packet's crypto (random delays).
  std::function<void(unsigned worker)> before_crypto;
};

struct WorkerLoad {
  uint64_t packets = 0;
  uint64_t wakeups = 0;
};

class Pipeline {
 public:
  // Packets a worker takes from the queue at once.
  static constexpr size_t kWorkerBatch = 32;

  explicit Pipeline(PipelineConfig config);
  // Finishes every packet already submitted, delivers what is held, stops the workers.
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  const PipelineConfig& config() const { return config_; }
  unsigned worker_count() const { return static_cast<unsigned>(workers_.size()); }

  // A free packet, or nullptr when all are in flight (backpressure: stop reading).
  // When the pool runs dry while reorder buffers hold packets behind gaps, those gaps are
  // given up first: packets waiting for a predecessor must not starve the reader that
  // would bring it.
  Packet* acquire();
  void release(Packet* packet) { pool_.release(packet); }
  PacketPool& pool() { return pool_; }

  // Channels must come from here: when their last owner lets go, the pipeline deletes them
  // once no packet in flight points at them (ChannelReclaimer). `keep_alive` lives as long
  // as the channel (the sink's owner: late packets are delivered through it).
  std::shared_ptr<OutboundChannel> make_outbound(std::shared_ptr<esp::OutboundSa> sa,
                                                 PacketSink& sink,
                                                 std::shared_ptr<void> keep_alive = {});
  // Registers an inbound SA; its packets are found by SPI. Null if the SPI is taken.
  // `predecessors`: the channels of the SAs it replaces (rekeys of the same CHILD_SA),
  // oldest first; the first reader to submit a packet of the new SA waits until their
  // packets in flight have left, and so does the next one after a predecessor took
  // another packet (see InboundChannel).
  std::shared_ptr<InboundChannel> add_inbound(
      std::shared_ptr<esp::InboundSa> sa, PacketSink& sink,
      std::span<const std::shared_ptr<InboundChannel>> predecessors = {});
  // Unregisters an SA and delivers what it holds. Packets still in flight finish normally.
  bool remove_inbound(uint32_t spi);
  bool has_inbound(uint32_t spi) const { return inbound_.find(spi) != nullptr; }

  // Takes ownership of `packet` (an inner IPv4/IPv6 packet) in every case. On a drop the
  // reason has been counted on the SA and the packet is back in the pool. The caller
  // holds a reference to `channel` for the call (its own, or its SaGroup snapshot's);
  // the packet then points at it without one.
  esp::DropReason submit_outbound(OutboundChannel& channel, Packet* packet,
                                  esp::OuterHeaders outer = esp::OuterHeaders::include);
  // Takes ownership of `packet` (an ESP packet starting at the SPI) in every case.
  esp::DropReason submit_inbound(Packet* packet);

  // The end of a read batch. Run to completion: processes, in this thread, every packet
  // this thread submitted so far and whatever waits in the shared queue. With workers:
  // hands this thread's batch to them, if it collects one (it called register_reader). A
  // submitting thread must call it after each batch it read and before it waits for
  // anything: until then its packets wait for it.
  void end_read_batch();
  // Makes the calling thread a reader whose packets reach the workers in batches (at
  // end_read_batch(), or 32 at a time) instead of one queue entry each. Only for a
  // thread that keeps end_read_batch()'s contract; a sink that submits must not.
  // Without workers every submitting thread already batches.
  void register_reader();

  // Waits until every packet submitted so far through `channels` has been delivered, so
  // that a flow which moves to another channel cannot overtake its own packets: the
  // packets of one channel leave in order, but two channels' packets do not wait for
  // each other. A reader calls it when an ECMP group it picks from changed membership
  // (SaGroup::Superseded: a member added, removed or rekeyed) before it submits through
  // the new view. Completes this thread's batch first and helps with the work while it
  // waits; gives up after the config's fence_limit (counted: fence_timeouts()), so a
  // channel that stopped delivering cannot stall the reader. Inbound, the same wait for a
  // rekeyed SA's predecessor happens inside submit_inbound (fence_inbound), counted in
  // the same fences() and fence_timeouts().
  void fence_outbound(std::span<OutboundChannel* const> channels);
  // Lets go of the calling thread's cached ECMP group views that a membership change or a
  // deleted group retired (SaGroup::take_retired_view), each after fence_outbound() on its
  // channels, so that a removed SA (and its key schedule) does not stay alive in a reader
  // that stopped using its group. A reader calls it when it goes idle (every view), and
  // now and then under load with `max_looks` bounding the views it examines (a thread
  // holds one view per group it picked from), the next call going on where that one
  // stopped. While no group retired a list since the thread last looked at all its
  // views, a call costs one atomic load.
  void release_retired_group_views(size_t max_looks = SIZE_MAX);
  uint64_t fences() const { return fences_.load(std::memory_order_relaxed); }
  uint64_t fence_timeouts() const { return fence_timeouts_.load(std::memory_order_relaxed); }
  // Times a reader found an SA at its bound and looked whether it still delivers
  // (outbound_room_wait), and the waits for a stalled SA that ended in a queue-full drop.
  uint64_t room_waits() const { return room_waits_.load(std::memory_order_relaxed); }
  uint64_t room_wait_timeouts() const {
    return room_wait_timeouts_.load(std::memory_order_relaxed);
  }

  // Blocks until every submitted packet has been processed (tests, shutdown). Only
  // meaningful once the submitting threads have stopped; without workers it processes
  // what they left uncompleted.
  void wait_idle();
  // No packet queued and no worker processing one.
  bool idle() const;

  esp::EngineCounters& engine_counters() { return engine_counters_; }
  // Times an empty pool made stalled reorder buffers give up their gaps early.
  uint64_t pressure_flushes() const { return pressure_flushes_.load(std::memory_order_relaxed); }
  // Channels whose owners let go and that packets in flight may still reach.
  size_t channels_awaiting_deletion() const { return reclaimer_->waiting(); }
  std::vector<WorkerLoad> worker_load() const;

 private:
  // Each worker writes only its own cache line: no counter is shared by all workers.
  struct alignas(64) WorkerState {
    std::atomic<bool> busy{false};  // set before a pop, cleared once the queue ran dry
    std::atomic<uint64_t> packets{0};
    std::atomic<uint64_t> wakeups{0};
  };

  // The packets one submitting thread has not completed (run to completion) or handed over
  // (a reader, with workers) yet. Only the owner writes `packets` and `count` (a plain
  // store, no locked instruction per packet); idle() and wait_idle() read `count`. A
  // thread that finds every slot taken uses the shared queue instead.
  //
  // Outbound packets wait there without a sequence number: the batch is numbered when it
  // leaves the slot (number_slot), per channel with one acquisition of its SA's lock for
  // exactly as many numbers as the batch holds for it. The rest is bookkeeping for that,
  // written by whoever holds the slot's packets (the owner, or wait_idle once the owner
  // stopped), published with `count`.
  struct alignas(64) SubmitterSlot {
    std::atomic<uint64_t> owner{0};  // the claiming thread's token; 0: free
    std::atomic<uint32_t> count{0};
    std::array<Packet*, kWorkerBatch> packets{};
    // Each packet's unnumbered channel (an index into `channels`), or kNumbered.
    std::array<uint8_t, kWorkerBatch> channel_of{};
    // The channels of unnumbered packets, in order of first sight, how many each has, and
    // how many places in its in-flight bound the slot reserved for it (at least as many:
    // OutboundChannel::reserve_room). The reservation also keeps the channel alive.
    std::array<OutboundChannel*, kWorkerBatch> channels{};
    std::array<uint8_t, kWorkerBatch> unnumbered{};
    std::array<uint8_t, kWorkerBatch> reserved{};
    uint32_t channel_count = 0;
  };
  static constexpr uint8_t kNumbered = 0xFF;
  static constexpr size_t kSubmitterSlots = 64;

  void enqueue(Packet* packet);
  // The first packet of a rekeyed SA's channel, or its first after a predecessor took
  // another packet: completes this thread's batch, waits until its predecessors have
  // nothing in crypto (bounded by fence_limit), then delivers what they hold behind gaps,
  // and waits until no worker is still delivering theirs: the new SA's packets come after
  // all of those.
  void fence_inbound(const std::shared_ptr<InboundChannel>& channel);
  // Both fences: completes this thread's batch, then helps process (or yields) until
  // `done` holds or fence_limit passes. Counts the fence, and a timeout (then false).
  bool fence(const std::function<bool()>& done);
  // submit_outbound() found `channel` (or its group) with its bound in flight: completes
  // this thread's batch, then helps process (or yields). False (drop the packet) if the
  // channel delivers within outbound_stall_probe; otherwise it is stalled, and true once
  // there is room or outbound_room_wait passed. Right after this thread found the channel
  // stalled (kStallMemory), it counts as stalled at once. Readers only: true at once inside
  // processing (a sink that submits) and on a worker.
  bool wait_for_room(OutboundChannel& channel);
  static constexpr std::chrono::milliseconds kStallMemory{50};
  // This thread's slot, claimed on first use when `claim`; nullptr if it has none.
  SubmitterSlot* own_slot(bool claim);
  // Moves a slot's packets into `batch` (numbered), returns how many.
  size_t take_slot(SubmitterSlot& slot, std::array<Packet*, kWorkerBatch>& batch);
  // Numbers the slot's unnumbered outbound packets in place: per channel, one
  // take_sequences for all of its packets, in the order they were submitted, and gives
  // back the places it reserved and did not use. Packets the SA refuses a number (held,
  // ceiling or end of the number space, reached since their submit through another
  // thread's packets) are dropped, counted on the SA, and leave the slot; no number is
  // left unused.
  void number_slot(SubmitterSlot& slot);
  // The slot an outbound packet of this thread waits in unnumbered, or nullptr (numbered
  // at submit): a reader's with workers, every submitter's running to completion. The
  // slot has room for one more packet.
  SubmitterSlot* numbering_slot();
  // This thread's unnumbered packets of `channel` in `slot`, and the places reserved for
  // it there that they do not use yet.
  struct SlotShare {
    uint32_t unnumbered = 0;
    uint32_t spare = 0;
    uint32_t index = 0;  // the channel's entry in the slot; channel_count when it has none
  };
  static SlotShare share_of(const SubmitterSlot& slot, const OutboundChannel& channel);
  // Places to reserve at once in a channel's bound: one for the batch's first packet of
  // the channel (with many SAs a batch holds one packet per SA: nothing to give back),
  // then what the slot can still take, at most kRoomChunk and a sixteenth of the bound.
  // A reservation a reader does not use is room other readers are refused until its
  // batch is numbered: small chunks keep that waste small (64 readers' slots hold at
  // most 64 * 7 unused places), and a 32-packet batch of one SA still costs 5
  // reservations where it took 32 numbers one by one.
  static constexpr uint64_t kRoomChunk = 8;
  static uint64_t room_to_reserve(const SubmitterSlot& slot, const OutboundChannel& channel,
                                  const SlotShare& share);
  // An unnumbered packet of `channel` that submit_outbound accepted joins the slot, with
  // `reserved` more places the submit reserved for the channel; a full batch then goes.
  // `share` is share_of's answer for the slot as it still is (its index saves a search).
  void add_unnumbered(SubmitterSlot& slot, Packet* packet, OutboundChannel& channel,
                      const SlotShare& share, uint32_t reserved);
  // Pushes a slot's packets to the workers as one queue entry; false if it was empty.
  bool hand_over(SubmitterSlot& slot);
  // Links packets into one queue entry and pushes it.
  void push_batch(Packet* const* packets, size_t count);
  // Pops queue entries into `batch`, up to kWorkerBatch packets (the rest of an entry
  // that does not fit goes back to the queue).
  size_t pop_batch(std::array<Packet*, kWorkerBatch>& batch);
  // After a push with workers: wake one if any sleeps, help if the queue is long.
  void after_push();
  void worker_loop(unsigned index);
  void process_batch(Packet* const* batch, size_t count, unsigned worker);
  void schedule_gap_timer(InboundChannel& channel);
  void relieve_pressure();
  void timer_loop();

  PipelineConfig config_;
  const size_t inbound_in_crypto_limit_;  // max_inbound_in_crypto_per_sa, resolved
  const uint64_t id_;  // distinguishes pipelines in each thread's cache of its slot
  // Shared with the channels' deleters, which may run after the pipeline is gone (then
  // they delete at once: nothing is in flight any more).
  std::shared_ptr<ChannelReclaimer> reclaimer_ = std::make_shared<ChannelReclaimer>();
  PacketPool pool_;
  MpmcQueue<Packet*> work_;
  esp::EngineCounters engine_counters_;
  SpiTable<InboundChannel> inbound_;

  void wake_one_worker();
  void assist();
  // Processes batches in the calling thread, from its own slot and the shared queue (and,
  // with `every_slot`, from every thread's slot: only once submitters have stopped); at
  // most one batch unless `until_empty`. Returns whether there was anything to do.
  bool process_queued(bool until_empty, bool every_slot = false);

  // Idle workers sleep on `wake_`. Producers touch it only when someone sleeps, and only
  // one wake-up is in flight at a time (`wake_pending_`): a burst of packets costs one
  // system call, not one per packet. A woken worker passes the wake-up on if work remains.
  alignas(64) std::atomic<uint32_t> wake_{0};
  std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> wake_pending_{false};
  std::atomic<uint64_t> pressure_flushes_{0};
  std::atomic<uint64_t> fences_{0};
  std::atomic<uint64_t> fence_timeouts_{0};
  std::atomic<uint64_t> room_waits_{0};
  std::atomic<uint64_t> room_wait_timeouts_{0};
  std::atomic<uint32_t> assisting_{0};  // submitting threads processing a batch right now
  std::atomic<bool> stopping_{false};
  std::unique_ptr<WorkerState[]> worker_state_;
  std::unique_ptr<SubmitterSlot[]> slots_;
  std::vector<std::thread> workers_;

  std::mutex timer_mutex_;
  std::condition_variable timer_wake_;
  std::vector<std::shared_ptr<InboundChannel>> stalled_;
  bool timer_stop_ = false;
  std::thread timer_;
};

}  // namespace espgw::pipeline

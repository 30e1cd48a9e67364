// Delivers one channel's packets in order while many workers complete them out of order.
//
// Workers insert completed packets under a short per-channel lock. Delivery (the sink's
// write to TUN or socket) happens outside that lock, by whichever worker wins the
// channel's `draining` flag; the others leave their packet behind and go back to crypto
// instead of waiting. This is the padata / WireGuard serial-queue idea, with the serial
// step done by a combining worker rather than a dedicated thread.
#pragma once

#include <atomic>
#include <optional>
#include <span>
#include <vector>

#include "pipeline/packet_pool.h"
#include "pipeline/reorder_buffer.h"
#include "util/spin_lock.h"

namespace espgw::pipeline {

// Receives one channel's packets in order, from one thread at a time per channel. A sink
// shared by several channels (the TUN writer) is called concurrently for different
// channels and must be thread-safe. The packets return to the pool when deliver()
// returns.
class SharedSink;
class PacketSink {
 public:
  virtual ~PacketSink() = default;
  virtual void deliver(std::span<Packet* const> packets) = 0;
  // The sink this channel's packets may also reach together with other channels', in one
  // call (SharedSink); nullptr when deliver() is the only way. Asked once, when an
  // outbound channel is made, so the answer must not change.
  virtual SharedSink* shared() { return nullptr; }
};

// One channel's packets in order, within a delivery of several channels.
struct ChannelDelivery {
  PacketSink* channel_sink;  // the channel's own sink (whose shared() is the SharedSink)
  std::span<Packet* const> packets;
};

// A destination that many channels share, such as the socket that carries every SA's ESP
// packets to its peers. A worker's batch can hold one packet each of many SAs (flows
// hashed over an ECMP group, many tunnels): passed to the channels' sinks one by one it
// would cost a system call per SA, passed here the whole batch costs one. Each channel's
// packets arrive in order and, while this runs, no other thread delivers that channel's.
// Called by several threads at once (for different channels); the packets return to the
// pool when it returns.
class SharedSink {
 public:
  virtual ~SharedSink() = default;
  virtual void deliver_together(std::span<const ChannelDelivery> deliveries) = 0;
};

// Aligned to a cache line and laid out so that a packet released in order touches two
// lines of it: the lock, the delivery flag, the two lists and the delivered count on the
// first; the pointers to the in-crypto and shared in-flight counts and the reorder
// buffer's release point on the second. The buffer's hold time and gap counters sit on
// a third. With many SAs every channel's state is cold in L1 when its next packet comes,
// so each line is a miss.
class alignas(64) OrderedRelease {
 public:
  // A staged batch up to this size that continues the release point, with nothing held,
  // pending or being delivered, goes to the sink without passing through the reorder
  // buffer and the pending list (one thread's packets in order: the common case, and with
  // many SAs one such batch per packet). At least Pipeline::kWorkerBatch.
  static constexpr size_t kInOrderMax = 32;

  // `in_crypto`, if given, counts this channel's packets still in the workers: while it
  // is non-zero a gap may be one of them, and is held longer (ReorderBuffer's busy hold).
  OrderedRelease(size_t capacity, uint64_t hold_ns, uint64_t first_index,
                 std::atomic<uint64_t>* in_crypto = nullptr);

  // Inserts `packet` (nullptr: a tombstone) at `index`, then delivers what is ready.
  // Returns true if packets stay held behind a gap, so the caller must come back later
  // (ReorderBuffer::packets_waiting: tombstones alone do not count).
  bool insert(uint64_t index, Packet* packet, PacketSink& sink, PacketPool& pool);
  struct Staged {
    uint64_t index;
    Packet* packet;  // nullptr: a tombstone
  };
  // A worker's whole batch for this channel under one lock acquisition (workers sharing
  // an SA would otherwise pass its lock back and forth for every packet), then delivery of
  // what is ready. `left_crypto` of the channel's `in_crypto` count are these packets: it
  // is counted down under the same lock, so no thread sees them neither in crypto nor in
  // the buffer and gives up on a gap they fill. `unauthenticated` of `left_crypto` failed
  // their ICV check (see forged_until_ns_). Returns as insert() does.
  bool stage_and_drain(std::span<const Staged> batch, uint64_t left_crypto, PacketSink& sink,
                       PacketPool& pool, uint64_t unauthenticated = 0);
  // stage_and_drain() without delivering the direct way: a batch that continues the
  // release point, with nothing held, pending or being delivered, has its packets put in
  // `out` and their number returned (never more than kInOrderMax), and this thread then
  // holds the channel's delivery (other threads leave theirs pending) until it delivers
  // them: stage_and_drain() at once through the channel's sink, process_batch through a
  // shared sink (SharedSink) followed by finish_delivery(). Any other batch is staged and
  // delivered as far as it can be, and 0 returned. `held`: as stage_and_drain() returns.
  size_t stage_or_take(std::span<const Staged> batch, uint64_t left_crypto, std::span<Packet*> out,
                       PacketSink& sink, PacketPool& pool, bool& held);
  // After the shared sink took the `delivered` packets stage_or_take() put in `out`, and
  // the caller returned them to the pool (all channels' at once: one pool call a batch,
  // not one per SA): counts them delivered, then delivers (through `sink`) what other
  // threads staged meanwhile. Returns as stage_and_drain() does.
  bool finish_delivery(size_t delivered, PacketSink& sink, PacketPool& pool);
  // Delivers what is ready (including gaps whose hold time expired).
  bool drain(PacketSink& sink, PacketPool& pool);
  // Delivers everything held, skipping every gap. While another thread delivers, what
  // was held is left to it (it delivers what became ready before it stops): then the
  // packets are still on their way when this returns (see delivering()).
  void flush(PacketSink& sink, PacketPool& pool);
  // Whether a thread is delivering, or released packets wait for it: staged packets that
  // are not held behind a gap have not all reached the sink yet.
  bool delivering() const;

  ReorderStats stats() const;
  size_t held() const;
  // Packets delivered so far (the in-flight accounting of outbound channels uses it).
  uint64_t delivered() const { return delivered_.load(std::memory_order_acquire); }
  // Each delivered packet also decrements `in_flight` (an SA group's shared count). Set
  // before the first packet is staged.
  void also_count_delivered(std::atomic<uint64_t>* in_flight) { shared_in_flight_ = in_flight; }

 private:
  bool workers_busy() const {
    return in_crypto_ && in_crypto_->load(std::memory_order_acquire) != 0;
  }

  // Under lock_: moves what the buffer holds and may release now to pending_.
  void release_held(LazyNow& now);
  // Under lock_: if no other thread delivers, takes what is ready and becomes the one that
  // delivers. False if there is nothing to take or someone else delivers (and will look
  // again under lock_ before it stops, so nothing left in pending_ is stranded).
  bool take_ready(LazyNow& now);
  // Delivers `packets` (the caller set draining_), then whatever became ready meanwhile,
  // until nothing is. Returns whether packets stay held behind a gap.
  bool deliver_from(std::span<Packet* const> packets, PacketSink& sink, PacketPool& pool);
  // The delivering thread, once the sink has had `delivered` packets and they are back in
  // the pool: counts them, and under lock_ either takes what became ready meanwhile into
  // delivering_ (true: deliver that next) or ends the delivery (false; `held`: packets
  // wait behind a gap).
  bool after_delivery(size_t delivered, bool& held);
  // The body of stage_or_take() and stage_and_drain().
  size_t stage(std::span<const Staged> batch, uint64_t left_crypto, std::span<Packet*> out,
               PacketSink& sink, PacketPool& pool, bool& held, uint64_t unauthenticated = 0);
  // Under lock_: if `batch` continues the release point with nothing held, pending or being
  // delivered (one thread's packets in order, the common case), takes its packets into
  // `out` for delivery, marks their indexes released and sets draining_; returns how many
  // packets it took, or nullopt when the batch must go through the reorder buffer.
  std::optional<size_t> take_in_order(std::span<const Staged> batch, std::span<Packet*> out);

  mutable SpinLock lock_;
  // Under lock_, like the buffer, so one lock acquisition both stages and claims the
  // delivery: a separate atomic flag cost 4 more locked instructions per drain, which
  // with many SAs (a few packets each per batch) was the pipeline's largest own cost.
  bool draining_ = false;
  std::vector<Packet*> pending_;        // under lock_: released in order, not yet delivered
  std::vector<Packet*> delivering_;     // owned by the thread that set `draining_`
  std::atomic<uint64_t> delivered_{0};  // written only by the thread that delivers
  std::atomic<uint64_t>* in_crypto_;
  std::atomic<uint64_t>* shared_in_flight_ = nullptr;
  ReorderBuffer buffer_;  // under lock_
  // Under lock_. Until then, packets in crypto do not lengthen the hold of a gap (the busy
  // hold): packets of this channel failed authentication lately, and forged packets that
  // keep the workers busy on the SA's SPI (anyone can send them) would otherwise hold
  // every gap kBusyHoldFactor times longer for as long as the flood lasts. Set for one
  // busy hold after each batch with such a packet.
  uint64_t forged_until_ns_ = 0;
};

}  // namespace espgw::pipeline

// Puts packets back in order by a 64-bit index (the ESP sequence number inbound, the
// submission order outbound) before they are released.
//
// Bounded two ways: at most `capacity` indexes ahead of the release point are held (a
// packet further ahead forces the release point forward, skipping what is missing), and
// a gap is waited for at most `hold` after the first packet behind it arrived, so a lost
// packet never stalls an SA. While the caller says workers still hold packets of this
// SA (`busy`), the missing one may be among them rather than lost, and the wait is
// kBusyHoldFactor times longer: a worker the scheduler preempted for a few ms must not
// turn a whole batch into late, out-of-order deliveries. A packet that arrives after its index was
// skipped is released at once ("late"): anti-replay already guarantees it is not a duplicate.
//
// Not thread-safe; OrderedRelease wraps it with a lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace espgw::pipeline {

struct Packet;

// The current time in nanoseconds, read at most once and only if asked: packets that
// arrive in order never need it, and a clock read costs as much as the rest of the
// reorder step.
class LazyNow {
 public:
  // Reads CLOCK_MONOTONIC on first use.
  LazyNow() = default;
  // A fixed time (tests, and callers that already hold one).
  static LazyNow at(uint64_t now_ns) {
    LazyNow now;
    now.value_ = now_ns;
    now.known_ = true;
    return now;
  }
  uint64_t get();

 private:
  uint64_t value_ = 0;
  bool known_ = false;
};

struct ReorderStats {
  uint64_t released = 0;       // packets released in order
  uint64_t late = 0;           // packets released after their index had been skipped
  uint64_t skipped = 0;        // indexes given up on (lost, or dropped after a number)
  uint64_t hold_timeouts = 0;  // times a gap was given up because it was held too long
  uint64_t overflows = 0;      // times a packet too far ahead forced the release point
};

class ReorderBuffer {
 public:
  static constexpr uint64_t kBusyHoldFactor = 8;

  // `hold_ns` = 0 never gives up on a gap (outbound: every index is sure to arrive).
  ReorderBuffer(size_t capacity, uint64_t hold_ns, uint64_t first_index);

  // `packet` nullptr marks the index as done with nothing to release (a tombstone).
  // Released packets are appended to `out`.
  void insert(uint64_t index, Packet* packet, LazyNow& now, std::vector<Packet*>& out);
  void insert(uint64_t index, Packet* packet, uint64_t now_ns, std::vector<Packet*>& out) {
    LazyNow now = LazyNow::at(now_ns);
    insert(index, packet, now, out);
  }
  // Releases everything in order from the release point, skipping a gap whose hold time
  // has expired. Returns packets_waiting(): whether the caller must come back.
  bool release(LazyNow& now, std::vector<Packet*>& out, bool busy = false);
  bool release(uint64_t now_ns, std::vector<Packet*>& out, bool busy = false) {
    LazyNow now = LazyNow::at(now_ns);
    return release(now, out, busy);
  }
  // Releases everything held, skipping every gap (shutdown, SA removal).
  void flush(std::vector<Packet*>& out);
  // Records `count` indexes from next_index() on as released in order, `packets` of them
  // packets and the rest tombstones, for a caller that hands them on itself (what
  // insert() would do for each, without the output list). Only when nothing is held.
  void pass_in_order(size_t count, size_t packets) {
    next_ += count;
    released_ += packets;
  }

  // Sequence numbers held behind a gap: packets and tombstones.
  size_t held() const { return held_; }
  // True if a packet (not only tombstones) waits behind a gap: then its hold runs, and the
  // caller must come back to give the gap up when it expires. Tombstones alone need no
  // visit: nothing waits on them, and the next packet to arrive starts the hold.
  bool packets_waiting() const;
  uint64_t next_index() const { return next_; }
  size_t capacity() const { return mask_ + 1; }
  uint64_t hold_ns() const { return hold_ns_; }
  size_t ring_size() const { return slots_ ? slot_mask_ + 1 : 0; }  // slots allocated now
  ReorderStats stats() const {
    ReorderStats stats = rare_;
    stats.released = released_;
    return stats;
  }

 private:
  // One pointer per slot keeps a buffer at 8 bytes per sequence number: nullptr is an
  // empty slot, tombstone() a number that is done with nothing to release. The arrival
  // time of a held packet lives in the packet; tombstones never start a hold.
  using Slot = Packet*;
  // The ring is allocated when a packet first has to wait and grows (doubling, up to the
  // capacity) as far as packets arrive ahead: an idle SA or one whose packets come in
  // order holds no ring at all, so thousands of SAs cost little, while a busy SA grows
  // the ring its reordering needs.
  static constexpr size_t kInitialSlots = 16;
  // Makes the ring reach `distance` indexes past the release point.
  void make_room(uint64_t distance);
  static Packet* tombstone();
  // The arrival time of the first packet (not tombstone) held from `index` on, if any.
  std::optional<uint64_t> first_waiting_packet_from(uint64_t index) const;
  void pop_in_order(std::vector<Packet*>& out);
  void advance_to(uint64_t index, std::vector<Packet*>& out);
  std::optional<uint64_t> first_held_after_gap() const;

  // The fields an in-order packet touches come first (OrderedRelease places them on one
  // cache line with its own); the hold time and the counters of gaps and late packets
  // follow, read only when packets wait.
  uint64_t next_;
  size_t held_ = 0;  // slots_ exists whenever this is non-zero
  size_t mask_;      // capacity - 1: how far ahead of the release point an index may be held
  uint64_t released_ = 0;
  size_t slot_mask_ = 0;  // ring size - 1
  std::unique_ptr<Slot[]> slots_;
  uint64_t hold_ns_;
  ReorderStats rare_;  // all but `released`, which is released_
};

}  // namespace espgw::pipeline

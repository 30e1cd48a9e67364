// Active queue management for a receive queue whose depth this process cannot set in
// time, only in bytes: the WAN socket's. Running to completion, the queue that builds
// under TCP is the receiving gateway's socket buffer, and a buffer of N bytes holds N
// bytes' worth of delay: sized for 0.8 ms at 7 Gbit/s, it held 1.5-2.2 ms on a host whose
// crypto ran at half that rate. The kernel stamps each datagram on arrival
// (SO_TIMESTAMPNS), so the reader knows how long each one waited, and this gate applies
// CoDel (RFC 8289) to that sojourn time: once the queue has stayed above `target` for a
// whole `interval`, it drops one packet, then more often (interval / sqrt(drops)) until
// the delay falls below the target. TCP senders back off on those drops, so the standing
// queue settles near the target whatever the throughput.
//
// One gate per receiving thread (each socket is its own queue); not thread-safe.
#pragma once

#include <cstdint>

namespace espgw::io {

class QueueDelayGate {
 public:
  // target_ns == 0: the gate never drops.
  QueueDelayGate(uint64_t target_ns, uint64_t interval_ns)
      : target_ns_(target_ns), interval_ns_(interval_ns) {}

  // A packet leaves the queue at `now_ns` (a monotonic clock) after waiting `sojourn_ns`:
  // true if it should be dropped. `left_empty`: no packet was left behind it.
  //
  // A queue that stood empty for an interval before this packet has no standing delay,
  // however long the packet waited (a reader the host held back delays a lone packet
  // too): the time above target starts again with it, as CoDel's does when its queue
  // empties (RFC 8289). Without that, two lone late packets seconds apart (pings, with the
  // reader descheduled each time) read as a delay that stood all along, and the second
  // was dropped. Only an interval's emptiness counts: under load an inline reader
  // empties the socket with most reads and it refills at once, and resetting on every
  // empty read left the gate nearly idle (the socket overflowed instead; docs/gateway_wan.md).
  bool should_drop(uint64_t sojourn_ns, uint64_t now_ns, bool left_empty);

  bool dropping() const { return dropping_; }

 private:
  // Whether the delay has stayed above the target for an interval.
  bool above_target_for_interval(uint64_t sojourn_ns, uint64_t now_ns);
  // The next drop, `interval / sqrt(count)` after `from`.
  uint64_t next_drop(uint64_t from) const;

  const uint64_t target_ns_;
  const uint64_t interval_ns_;
  uint64_t first_above_ns_ = 0;  // when the interval above target ends; 0: below target
  uint64_t drop_next_ns_ = 0;
  uint32_t count_ = 0;       // drops in this dropping state (the control law's input)
  uint32_t last_count_ = 0;  // count_ when the last dropping state began
  bool dropping_ = false;
  uint64_t last_dequeue_ns_ = 0;
  bool last_left_empty_ = false;
};

}  // namespace espgw::io

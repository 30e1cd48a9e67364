// Trap policies (charon's `start_action = trap`): an outbound packet that matches a
// protect policy whose reqid has no SA group asks charon to negotiate one, as the kernel's
// XFRM acquire does. The packet itself is dropped (counted as no-sa), like XFRM with
// xfrm_larval_drop: holding packets would need memory per policy that a storm towards
// trapped subnets could fill, and the senders retransmit (TCP) or repeat (ping) once the
// SA is there (docs/strongswan_trap.md).
#pragma once

#include <cstdint>
#include <functional>

#include "daemon/acquire_limiter.h"
#include "daemon/gateway_counters.h"
#include "packet/flow_key.h"

namespace espgw::daemon {

class AcquireRaiser {
 public:
  // Acquires of one policy at most this often: charon ignores a second acquire for a
  // reqid while it negotiates, so more would only load the event connection; this also
  // paces the retries of a negotiation that failed.
  static constexpr uint32_t kIntervalMs = 3000;

  // Publishes an acquire for `reqid`, triggered by a packet with flow `packet`. False when
  // nobody took it (no charon registered for acquires).
  using Handler = std::function<bool(uint32_t reqid, const packet::FlowKey& packet)>;

  explicit AcquireRaiser(GatewayCounters& counters) : counters_(counters) {}

  // Set before the TUN readers start; without one, no acquire is raised.
  void on_acquire(Handler handler) { handler_ = std::move(handler); }

  // From a TUN reader: `packet` matched a protect policy of `reqid` that has no SA group.
  void no_sa_group(uint32_t reqid, const packet::FlowKey& packet);

 private:
  GatewayCounters& counters_;
  AcquireLimiter limiter_{kIntervalMs};
  Handler handler_;
};

}  // namespace espgw::daemon

#include "daemon/acquire_raiser.h"

#include <chrono>

namespace espgw::daemon {

void AcquireRaiser::no_sa_group(uint32_t reqid, const packet::FlowKey& packet) {
  if (!handler_ || reqid == 0) return;  // charon numbers its reqids from 1
  const uint64_t now_ms =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count());
  switch (limiter_.claim(reqid, now_ms)) {
    case AcquireLimiter::Verdict::paced:
      counters_.acquires_paced.fetch_add(1, std::memory_order_relaxed);
      return;
    case AcquireLimiter::Verdict::table_full:
      counters_.acquires_table_full.fetch_add(1, std::memory_order_relaxed);
      return;
    case AcquireLimiter::Verdict::raise:
      break;
  }
  if (handler_(reqid, packet)) {
    counters_.acquires.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // No charon to tell. The claim stands, so that a storm without charon builds no event
  // per packet: the first packet an interval later asks again, by when charon may be
  // attached.
  counters_.acquires_no_charon.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace espgw::daemon

#include "daemon/acquire_limiter.h"

namespace espgw::daemon {

size_t AcquireLimiter::home_of(uint32_t reqid) {
  // charon numbers reqids from 1 upwards: a multiplicative hash spreads neighbours apart.
  return static_cast<size_t>((uint64_t{reqid} * 0x9e3779b97f4a7c15ull) >> 52) % kSlots;
}

AcquireLimiter::Verdict AcquireLimiter::claim(uint32_t reqid, uint64_t now_ms) {
  const size_t home = home_of(reqid);
  // Two rounds: a slot taken by another reader between the scan and the exchange is
  // looked at again once.
  for (int round = 0; round < 2; ++round) {
    std::atomic<uint64_t>* candidate = nullptr;
    uint64_t candidate_value = 0;
    bool own_slot = false;
    for (size_t i = 0; i < kProbe; ++i) {
      std::atomic<uint64_t>& slot = slots_[(home + i) % kSlots];
      const uint64_t value = slot.load(std::memory_order_acquire);
      if ((value & kUsed) != 0 && reqid_of(value) == reqid) {
        if (fresh(value, now_ms)) return Verdict::paced;
        candidate = &slot;  // its own stale slot: renewed in place
        candidate_value = value;
        own_slot = true;
        break;
      }
      if (!candidate && !fresh(value, now_ms)) {
        candidate = &slot;
        candidate_value = value;
      }
    }
    if (!candidate) return Verdict::table_full;
    uint64_t expected = candidate_value;
    if (candidate->compare_exchange_strong(expected, pack(reqid, now_ms),
                                           std::memory_order_acq_rel))
      return Verdict::raise;
    // Another reader renewed this reqid's slot first: its acquire is the one.
    if (own_slot || ((expected & kUsed) != 0 && reqid_of(expected) == reqid)) return Verdict::paced;
  }
  return Verdict::table_full;
}

}  // namespace espgw::daemon

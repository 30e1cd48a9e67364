#include "xfrm/lifetime.h"

namespace espgw::xfrm {

namespace {
bool reached(uint64_t limit, uint64_t value) {
  return limit != 0 && value >= limit;
}
}  // namespace

LifetimeState check(const Lifetimes& limits, uint64_t bytes, uint64_t packets,
                    uint64_t seconds_since_add) {
  if (reached(limits.hard_bytes, bytes) || reached(limits.hard_packets, packets) ||
      reached(limits.hard_seconds, seconds_since_add))
    return LifetimeState::hard;
  if (reached(limits.soft_bytes, bytes) || reached(limits.soft_packets, packets) ||
      reached(limits.soft_seconds, seconds_since_add))
    return LifetimeState::soft;
  return LifetimeState::none;
}

LifetimeState check_sequence(uint64_t last_used, bool esn) {
  const uint64_t last = esn ? ~uint64_t{0} : 0xFFFFFFFFull;
  if (last_used >= last) return LifetimeState::hard;
  if (last_used >= (esn ? kSoftSequenceWithEsn : kSoftSequenceWithoutEsn))
    return LifetimeState::soft;
  return LifetimeState::none;
}

}  // namespace espgw::xfrm

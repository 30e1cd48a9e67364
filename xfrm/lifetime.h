// SA lifetimes (RFC 4301 4.4.2.1): soft limits ask for a rekey, hard limits end the SA.
#pragma once

#include <cstdint>

namespace espgw::xfrm {

// Limits on what an SA may carry; 0 means no limit. Bytes count inner (plaintext)
// bytes, like the engine's counters and the kernel's XFRM lifetimes.
struct Lifetimes {
  uint64_t soft_bytes = 0;
  uint64_t hard_bytes = 0;
  uint64_t soft_packets = 0;
  uint64_t hard_packets = 0;
  uint64_t soft_seconds = 0;  // since the SA was added
  uint64_t hard_seconds = 0;

  bool operator==(const Lifetimes&) const = default;
};

enum class LifetimeState : uint8_t { none, soft, hard };

// A limit counts as reached once the value is equal to it, as in the kernel. Any hard
// limit reached makes the state hard, whatever the soft limits say.
LifetimeState check(const Lifetimes& limits, uint64_t bytes, uint64_t packets,
                    uint64_t seconds_since_add);

}  // namespace espgw::xfrm

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

// The outbound sequence number as a lifetime of its own: the counter is the IV and must
// never wrap under one key. Soft (ask for a rekey) with 2^28 numbers left without ESN (at a
// million packets per second, four minutes for charon to rekey), at 2^63 with ESN; hard
// once the last number is used (the SA then refuses to send: sequence-exhausted).
inline constexpr uint64_t kSoftSequenceWithoutEsn = 0xFFFFFFFFull - (uint64_t{1} << 28);
inline constexpr uint64_t kSoftSequenceWithEsn = uint64_t{1} << 63;
LifetimeState check_sequence(uint64_t last_used, bool esn);

}  // namespace espgw::xfrm

// Paces the acquires espgw raises for charon's trap policies: at most one per policy
// (reqid) per interval, however many packets hit the policy while it has no SA. A packet
// storm towards a trapped subnet therefore costs charon one event per interval, and the
// event connection, which also carries the SA expiries, stays quiet.
//
// The data path asks for every packet that finds no SA, on every TUN reader at once, so
// the table is a fixed array of atomic slots (no lock, no allocation): a slot holds a
// reqid and when its last acquire went out. A reqid probes kProbe slots from its hash; a
// slot whose acquire is older than the interval is free for any reqid. Only when all of
// a reqid's kProbe slots hold other reqids' acquires of the last interval (thousands of
// policies trapped at once) is its acquire refused (table_full, counted): the fixed
// table bounds the memory, and the refusal ends when those slots age.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace espgw::daemon {

class AcquireLimiter {
 public:
  static constexpr size_t kSlots = 4096;
  static constexpr size_t kProbe = 8;

  enum class Verdict {
    raise,       // no acquire for this reqid within the interval: send one now
    paced,       // one went out less than an interval ago
    table_full,  // every slot the reqid may use is taken by a fresher acquire
  };

  explicit AcquireLimiter(uint32_t interval_ms) : interval_ms_(interval_ms) {}

  // `now_ms`: a monotonic clock in milliseconds. Thread-safe, lock-free. Two readers
  // racing for the same reqid's first slot raise one acquire between them.
  Verdict claim(uint32_t reqid, uint64_t now_ms);

 private:
  // A slot: bits 63..32 the reqid, bit 31 set when used, bits 30..0 the time of the last
  // acquire in milliseconds (modulo 2^31, about 24 days; ages are taken modulo that too).
  static constexpr uint64_t kUsed = uint64_t{1} << 31;
  static constexpr uint64_t kTimeMask = kUsed - 1;
  static uint64_t pack(uint32_t reqid, uint64_t now_ms) {
    return (uint64_t{reqid} << 32) | kUsed | (now_ms & kTimeMask);
  }
  static uint32_t reqid_of(uint64_t slot) { return static_cast<uint32_t>(slot >> 32); }
  bool fresh(uint64_t slot, uint64_t now_ms) const {
    return (slot & kUsed) != 0 && ((now_ms - slot) & kTimeMask) < interval_ms_;
  }
  static size_t home_of(uint32_t reqid);

  const uint32_t interval_ms_;
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace espgw::daemon

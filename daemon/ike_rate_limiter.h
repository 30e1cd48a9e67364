// Token buckets for the IKE datagrams espgw passes to charon over the control socket: one
// per source address and one for all of them. A flood of IKE (or of anything with the
// non-ESP marker on port 4500) would otherwise go to charon at the rate the WAN readers
// can read it, filling the event connection that also carries the SA expiries charon
// must see to rekey (docs/security_control_events.md).
//
// The per-source buckets live in a fixed table indexed by a keyed hash of the address, so
// a flood from spoofed sources costs no memory; two sources that share a bucket share its
// rate. The key is random per process, so a sender cannot aim at another's bucket.
#pragma once

#include <array>
#include <cstdint>

#include "esp/ip_address.h"
#include "util/spin_lock.h"

namespace espgw::daemon {

struct IkeRateLimits {
  // Packets per second; each bucket holds one second's worth, so that a burst (an IKE_SA
  // and its CHILD_SAs coming up at once) passes whole. 0: no limit.
  uint32_t per_source = 5000;
  uint32_t global = 20000;
};

class IkeRateLimiter {
 public:
  static constexpr size_t kSourceBuckets = 4096;

  IkeRateLimiter(IkeRateLimits limits, uint64_t key);
  // Whether a datagram from `source` at `now_ns` (a monotonic clock) may go to charon; it
  // takes a token from its source's bucket and from the global one. Thread-safe.
  bool admit(const esp::IpAddress& source, uint64_t now_ns);

 private:
  struct Bucket {
    double tokens = -1;  // < 0: never used, full
    uint64_t updated_ns = 0;
  };
  // Refills `bucket` to `now_ns` at `rate` per second, up to `rate`; true if it held a token.
  static bool has_token(Bucket& bucket, uint32_t rate, uint64_t now_ns);
  size_t bucket_of(const esp::IpAddress& source) const;

  const IkeRateLimits limits_;
  const uint64_t key_;
  SpinLock lock_;  // a few instructions per IKE datagram; IKE is rare outside a flood
  Bucket global_;
  std::array<Bucket, kSourceBuckets> sources_{};
};

}  // namespace espgw::daemon

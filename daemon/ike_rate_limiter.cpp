#include "daemon/ike_rate_limiter.h"

#include <algorithm>
#include <mutex>

namespace espgw::daemon {

IkeRateLimiter::IkeRateLimiter(IkeRateLimits limits, uint64_t key) : limits_(limits), key_(key) {}

bool IkeRateLimiter::has_token(Bucket& bucket, uint32_t rate, uint64_t now_ns) {
  if (rate == 0) return true;
  const double capacity = rate;
  if (bucket.tokens < 0) {
    bucket.tokens = capacity;
  } else if (now_ns > bucket.updated_ns) {
    const double refill = static_cast<double>(now_ns - bucket.updated_ns) * 1e-9 * capacity;
    bucket.tokens = std::min(capacity, bucket.tokens + refill);
  }
  bucket.updated_ns = std::max(bucket.updated_ns, now_ns);
  return bucket.tokens >= 1;
}

size_t IkeRateLimiter::bucket_of(const esp::IpAddress& source) const {
  // FNV-1a over the key and the address: cheap, and with a random key an outsider cannot
  // tell which addresses share a bucket.
  uint64_t hash = 0xcbf29ce484222325ull ^ key_;
  auto mix = [&hash](uint8_t byte) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  };
  mix(source.family);
  for (size_t i = 0; i < source.length(); ++i) mix(source.bytes[i]);
  hash ^= hash >> 29;
  return static_cast<size_t>(hash % kSourceBuckets);
}

bool IkeRateLimiter::admit(const esp::IpAddress& source, uint64_t now_ns) {
  if (limits_.per_source == 0 && limits_.global == 0) return true;
  Bucket& own = sources_[bucket_of(source)];
  std::lock_guard guard(lock_);
  // Both must have a token before either is taken: a source over its own rate must not
  // use up the global budget of the others.
  if (!has_token(own, limits_.per_source, now_ns) || !has_token(global_, limits_.global, now_ns))
    return false;
  if (limits_.per_source != 0) own.tokens -= 1;
  if (limits_.global != 0) global_.tokens -= 1;
  return true;
}

}  // namespace espgw::daemon

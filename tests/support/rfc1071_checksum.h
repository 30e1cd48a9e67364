// RFC 1071's Internet checksum written the way the RFC defines it (big-endian 16-bit words,
// one at a time): the independent reference that esp/checksum.cpp is tested against
// (tests/unit/checksum_test.cpp) and timed against (bench/checksum_bench.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace espgw::test {

// The folded 16-bit one's-complement sum of `data`, added to `sum`.
inline uint32_t rfc1071_sum(uint32_t sum, const uint8_t* data, size_t length) {
  uint64_t total = sum;
  for (size_t i = 0; i + 1 < length; i += 2) total += (uint32_t{data[i]} << 8) | data[i + 1];
  if (length % 2) total += uint32_t{data[length - 1]} << 8;
  while (total >> 16) total = (total & 0xFFFF) + (total >> 16);
  return static_cast<uint32_t>(total);
}

}  // namespace espgw::test

// Tag comparison whose running time does not depend on where the first difference is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace espgw::crypto {

// The 16-byte ICV case, as two 64-bit words: no branch and no early exit, and a fraction
// of the byte loop's cost on the per-packet path.
inline bool equal_constant_time_16(const uint8_t* a, const uint8_t* b) {
  uint64_t a0, a1, b0, b1;
  std::memcpy(&a0, a, 8);
  std::memcpy(&a1, a + 8, 8);
  std::memcpy(&b0, b, 8);
  std::memcpy(&b1, b + 8, 8);
  volatile uint64_t difference = (a0 ^ b0) | (a1 ^ b1);
  return difference == 0;
}

inline bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t length) {
  uint8_t difference = 0;
  for (size_t i = 0; i < length; ++i) difference |= static_cast<uint8_t>(a[i] ^ b[i]);
  // The volatile read stops the compiler from turning the loop into an early-exit memcmp.
  volatile uint8_t result = difference;
  return result == 0;
}

}  // namespace espgw::crypto

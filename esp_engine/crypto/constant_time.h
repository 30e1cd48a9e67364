// Tag comparison whose running time does not depend on where the first difference is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace espgw::crypto {

inline bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t length) {
  uint8_t difference = 0;
  for (size_t i = 0; i < length; ++i) difference |= static_cast<uint8_t>(a[i] ^ b[i]);
  // The volatile read stops the compiler from turning the loop into an early-exit memcmp.
  volatile uint8_t result = difference;
  return result == 0;
}

}  // namespace espgw::crypto

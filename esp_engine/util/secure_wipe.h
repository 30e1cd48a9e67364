// Wiping secrets (SA keys, the text or messages that carried them) when they are no
// longer needed, so that they do not linger in freed memory for a core dump, a swap
// page or a later heap bug to reveal. OPENSSL_cleanse, unlike memset, is never
// optimized away.
#pragma once

#include <openssl/crypto.h>

#include <cstdint>
#include <string>
#include <vector>

namespace espgw {

// Overwrites the bytes and releases the allocation (empty, capacity 0).
inline void wipe(std::vector<uint8_t>& bytes) {
  OPENSSL_cleanse(bytes.data(), bytes.size());
  bytes.clear();
  bytes.shrink_to_fit();
}
inline void wipe(std::string& text) {
  OPENSSL_cleanse(text.data(), text.size());
  text.clear();
  text.shrink_to_fit();
}

}  // namespace espgw

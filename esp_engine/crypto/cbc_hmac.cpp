#include "crypto/cbc_hmac.h"

#include <cstring>

#include "crypto/constant_time.h"

namespace espgw::crypto {

bool CbcHmacKey::open(uint8_t* esp, size_t length, const uint8_t* esn_high) const {
  uint8_t* icv = esp + kCbcCiphertextOffset + length;
  uint8_t received[kMaxIcvLength];
  std::memcpy(received, icv, icv_length());
  size_t authenticated = kCbcCiphertextOffset + length;
  if (esn_high != nullptr) {
    // The ESN high half follows the packet in the ICV's place (RFC 4303 2.2.1).
    std::memcpy(icv, esn_high, kEsnHighLength);
    authenticated += kEsnHighLength;
  }
  uint8_t computed[kMaxIcvLength];
  compute_icv(esp, authenticated, computed);
  if (!equal_constant_time(computed, received, icv_length())) return false;
  return decrypt(esp, length);
}

}  // namespace espgw::crypto

#include "crypto/cbc_hmac.h"

#include <cstring>
#include <stdexcept>

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

CbcHmacSealBurst::~CbcHmacSealBurst() {
  if (outstanding_ == 0) return;
  // Only reached while an exception unwinds past an unflushed burst: the jobs must still
  // finish before the slots go; their packets are abandoned with the exception.
  if (drain_ != nullptr) drain_();
}

CbcHmacSealBurst::Slot& CbcHmacSealBurst::take_slot(void (*drain)()) {
  if (used_ == kCapacity) flush();
  drain_ = drain;
  Slot& slot = slots_[used_++];
  slot.burst = this;
  ++outstanding_;
  return slot;
}

void CbcHmacSealBurst::complete(Slot& slot, bool succeeded) {
  if (succeeded) {
    std::memcpy(slot.icv, slot.tag, slot.icv_length);
  } else {
    slot.burst->failed_ = true;
  }
  --slot.burst->outstanding_;
}

void CbcHmacSealBurst::flush() {
  if (outstanding_ != 0 && drain_ != nullptr) drain_();
  used_ = 0;
  if (outstanding_ != 0) {
    outstanding_ = 0;
    throw std::runtime_error("AES-CBC + HMAC burst: a queued seal never completed");
  }
  if (failed_) {
    failed_ = false;
    throw std::runtime_error("AES-CBC + HMAC burst: a seal failed");
  }
}

}  // namespace espgw::crypto

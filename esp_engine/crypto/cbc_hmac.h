// AES-CBC (RFC 3602) with a truncated HMAC (RFC 2404, RFC 4868): the non-AEAD ESP
// transforms, encrypt-then-MAC as RFC 4303 3.3.2 orders it.
//
// Unlike an AEAD, the HMAC covers the ESP header and the IV as well as the ciphertext, so
// a key works on the ESP packet itself: `esp` points at the SPI, the IV follows the 8-byte
// header and the ciphertext the IV; the ICV follows the ciphertext.
#pragma once

#include <cstddef>
#include <cstdint>

#include "crypto/algorithms.h"

namespace espgw::crypto {

// Byte offset of the ciphertext in an AES-CBC ESP packet: SPI, sequence number, IV.
inline constexpr size_t kCbcCiphertextOffset = 8 + kAesBlockLength;
// Largest ICV any transform writes (HMAC-SHA2-512-256).
inline constexpr size_t kMaxIcvLength = 32;
// Bytes of the ESN high half appended to the ICV input (RFC 4303 2.2.1).
inline constexpr size_t kEsnHighLength = 4;

// A per-SA pair of expanded keys plus the SA's IV key. Const and thread-safe like AeadKey.
class CbcHmacKey {
 public:
  virtual ~CbcHmacKey() = default;

  size_t icv_length() const { return icv_length_; }

  // The IV for the packet with `sequence`: AES-128 of the sequence number under a random
  // per-SA key that nothing else uses. Sequence numbers never repeat within an SA, so
  // neither do the IVs, and without that key they cannot be predicted (RFC 3602 2.4
  // asks for unpredictable IVs; a counter or the last ciphertext block would not be).
  virtual void make_iv(uint64_t sequence, uint8_t* iv) const = 0;

  // The truncated HMAC of `length` bytes at `data`, written to `icv` (icv_length() bytes).
  // seal and open use it on the ESP packet; on its own it serves the published HMAC
  // vectors.
  virtual void compute_icv(const uint8_t* data, size_t length, uint8_t* icv) const = 0;

  // Encrypts `length` bytes (a multiple of 16) at esp + kCbcCiphertextOffset in place with
  // the IV at esp + 8, then writes the ICV over esp[0, kCbcCiphertextOffset + length),
  // followed by `esn_high` (4 bytes, or null without ESN), at esp + offset + length. The
  // ICV's place may be used as scratch before the ICV lands there.
  virtual void seal(uint8_t* esp, size_t length, const uint8_t* esn_high) const = 0;

  // Checks the ICV after the ciphertext in constant time and only if it matches decrypts
  // the ciphertext in place. False: nothing was decrypted (the ICV's place may have been
  // used as scratch). The order is the same for every backend, so it lives here.
  [[nodiscard]] bool open(uint8_t* esp, size_t length, const uint8_t* esn_high) const;

 protected:
  explicit CbcHmacKey(size_t icv_length) : icv_length_(icv_length) {}
  // Decrypts `length` bytes at esp + kCbcCiphertextOffset in place with the IV at esp + 8;
  // open() calls it only for a packet whose ICV verified.
  [[nodiscard]] virtual bool decrypt(uint8_t* esp, size_t length) const = 0;

 private:
  size_t icv_length_;
};

}  // namespace espgw::crypto

// AES-CBC (RFC 3602) with a truncated HMAC (RFC 2404, RFC 4868): the non-AEAD ESP
// transforms, encrypt-then-MAC as RFC 4303 3.3.2 orders it.
//
// Unlike an AEAD, the HMAC covers the ESP header and the IV as well as the ciphertext, so
// a key works on the ESP packet itself: `esp` points at the SPI, the IV follows the 8-byte
// header and the ciphertext the IV; the ICV follows the ciphertext.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "crypto/algorithms.h"

namespace espgw::crypto {

class CbcHmacSealBurst;

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

  // seal(), but the work may wait in `burst` until burst.flush(): until then the packet
  // holds neither its ciphertext nor its ICV. A backend without multi-buffer lanes seals
  // at once.
  virtual void seal_in_burst(CbcHmacSealBurst& burst, uint8_t* esp, size_t length,
                             const uint8_t* esn_high) const {
    (void)burst;
    seal(esp, length, esn_high);
  }

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

// Packets sealed one by one leave ipsec-mb's multi-buffer lanes nearly empty: each job is
// submitted and flushed alone, and AES-CBC encryption chains every block on the one before
// it. A burst lets several packets' jobs share the lanes, and so run side by side on one
// core. Its owner seals packets into it (CbcHmacKey::seal_in_burst) and calls flush()
// before it reads any of them; a burst belongs to one thread, the one whose ipsec-mb
// manager holds its jobs.
class CbcHmacSealBurst {
 public:
  // A full burst flushes itself before it takes another packet.
  static constexpr size_t kCapacity = 64;

  // Where one queued job's tag goes once the job is done.
  struct Slot {
    uint8_t tag[kMaxIcvLength];
    uint8_t* icv;
    size_t icv_length;
    CbcHmacSealBurst* burst;
  };

  CbcHmacSealBurst() = default;
  CbcHmacSealBurst(const CbcHmacSealBurst&) = delete;
  CbcHmacSealBurst& operator=(const CbcHmacSealBurst&) = delete;
  // Completes what is queued: no job may outlive the slots it writes to.
  ~CbcHmacSealBurst();

  // Completes every queued seal. Throws std::runtime_error if a backend failed to seal one
  // of them; that packet's ICV is then not valid and it must not be sent (the same as
  // CbcHmacKey::seal throwing).
  void flush();

  bool empty() const { return outstanding_ == 0; }

  // For backends. A free slot, flushing first when all are taken. `drain` is what
  // flush() calls to complete the backend's queued jobs.
  Slot& take_slot(void (*drain)());
  // A queued job is done: its tag goes to its ICV's place.
  static void complete(Slot& slot, bool succeeded);

 private:
  std::array<Slot, kCapacity> slots_{};
  size_t used_ = 0;
  size_t outstanding_ = 0;
  bool failed_ = false;
  void (*drain_)() = nullptr;
};

}  // namespace espgw::crypto

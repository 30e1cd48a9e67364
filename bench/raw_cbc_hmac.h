// The raw ipsec-mb baseline for AES-CBC + HMAC ESP: the fewest job-API calls that do the
// transform's work on one packet, with no ESP around them. Sealing is one chained job
// (CBC encrypt, then HMAC over SPI, sequence number, IV and ciphertext); opening is an
// HMAC job, a compare of the truncated tag, then a CBC decrypt job, the order RFC 4303
// 3.4.4 asks for (no decryption before the ICV is checked). Each job is submitted and
// flushed on its own, as one packet at a time needs; seal_burst() submits a burst's jobs
// before it flushes any. The IV is fixed: the baseline is
// the crypto alone (espgw also derives a fresh IV per packet, one AES block). Like
// espgw's backend it runs on ipsec-mb's SSE manager when the CPU has SHA-NI (see
// esp_engine/crypto/ipsec_mb_manager.h), the fastest way one packet at a time.
#pragma once

#include <intel-ipsec-mb.h>

#include <cstring>
#include <new>
#include <stdexcept>

#include "raw_ipsec_mb.h"

namespace espgw::bench {

struct RawCbcHmacTransform {
  IMB_KEY_SIZE_BYTES key_length;
  IMB_HASH_ALG hash;
  size_t block_length;  // HMAC block: 64, or 128 for SHA-384 and SHA-512
  size_t icv_length;
};

inline IMB_MGR* raw_hmac_manager() {
  static IMB_MGR* const manager = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) throw std::bad_alloc();
    init_mb_mgr_sse(m);
    if (imb_get_errno(m) != 0) throw std::runtime_error("ipsec-mb: init_mb_mgr_sse failed");
    if ((m->features & IMB_FEATURE_SHANI) != 0) return m;
    free_mb_mgr(m);
    return raw_manager();
  }();
  return manager;
}

class RawCbcHmac {
 public:
  // `encryption_key` and `integrity_key` as the SA holds them.
  RawCbcHmac(const RawCbcHmacTransform& t, const uint8_t* encryption_key,
             const uint8_t* integrity_key, size_t integrity_key_length)
      : m_(raw_hmac_manager()), t_(t) {
    switch (t.key_length) {
      case IMB_KEY_128_BYTES:
        IMB_AES_KEYEXP_128(m_, encryption_key, encrypt_keys_, decrypt_keys_);
        break;
      case IMB_KEY_192_BYTES:
        IMB_AES_KEYEXP_192(m_, encryption_key, encrypt_keys_, decrypt_keys_);
        break;
      default:
        IMB_AES_KEYEXP_256(m_, encryption_key, encrypt_keys_, decrypt_keys_);
        break;
    }
    uint8_t block[128];
    for (const auto& [pad, state] :
         {std::pair{uint8_t{0x36}, ipad_}, std::pair{uint8_t{0x5c}, opad_}}) {
      std::memset(block, pad, t.block_length);
      for (size_t i = 0; i < integrity_key_length; ++i) block[i] ^= integrity_key[i];
      switch (t.hash) {
        case IMB_AUTH_HMAC_SHA_1:
          IMB_SHA1_ONE_BLOCK(m_, block, state);
          break;
        case IMB_AUTH_HMAC_SHA_256:
          IMB_SHA256_ONE_BLOCK(m_, block, state);
          break;
        case IMB_AUTH_HMAC_SHA_384:
          IMB_SHA384_ONE_BLOCK(m_, block, state);
          break;
        default:
          IMB_SHA512_ONE_BLOCK(m_, block, state);
          break;
      }
    }
  }

  // `esp` is SPI, sequence number, 16-byte IV, then `length` bytes of payload.
  void seal(uint8_t* esp, size_t length, uint8_t* tag) {
    IMB_JOB* job = IMB_GET_NEXT_JOB(m_);
    cipher(job, esp, length, IMB_DIR_ENCRYPT);
    hash(job, esp, 24 + length, tag);
    job->chain_order = IMB_ORDER_CIPHER_HASH;
    run();
  }

  // seal() for `count` packets of `length` bytes each: every job is submitted before any
  // is flushed, so that ipsec-mb's multi-buffer lanes fill (jobs come back in order).
  void seal_burst(uint8_t* const* esps, size_t count, size_t length, uint8_t* const* tags) {
    for (size_t i = 0; i < count; ++i) {
      IMB_JOB* job = IMB_GET_NEXT_JOB(m_);
      cipher(job, esps[i], length, IMB_DIR_ENCRYPT);
      hash(job, esps[i], 24 + length, tags[i]);
      job->chain_order = IMB_ORDER_CIPHER_HASH;
      for (IMB_JOB* done = IMB_SUBMIT_JOB(m_); done != nullptr; done = IMB_GET_COMPLETED_JOB(m_))
        check(done);
    }
    while (IMB_JOB* done = IMB_FLUSH_JOB(m_)) check(done);
  }

  // True when the tag matched; then the payload is decrypted to `out` (esp + 24 decrypts
  // in place).
  bool open(uint8_t* esp, size_t length, const uint8_t* tag, uint8_t* out) {
    uint8_t computed[32];
    IMB_JOB* job = IMB_GET_NEXT_JOB(m_);
    hash(job, esp, 24 + length, computed);
    job->cipher_mode = IMB_CIPHER_NULL;
    job->cipher_direction = IMB_DIR_ENCRYPT;
    job->chain_order = IMB_ORDER_HASH_CIPHER;
    job->dst = esp;
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = 0;
    run();
    if (std::memcmp(computed, tag, t_.icv_length) != 0) return false;
    job = IMB_GET_NEXT_JOB(m_);
    cipher(job, esp, length, IMB_DIR_DECRYPT);
    job->dst = out;
    job->hash_alg = IMB_AUTH_NULL;
    job->chain_order = IMB_ORDER_HASH_CIPHER;
    run();
    return true;
  }

 private:
  void cipher(IMB_JOB* job, uint8_t* esp, size_t length, IMB_CIPHER_DIRECTION direction) {
    job->cipher_mode = IMB_CIPHER_CBC;
    job->cipher_direction = direction;
    job->key_len_in_bytes = t_.key_length;
    job->enc_keys = encrypt_keys_;
    job->dec_keys = decrypt_keys_;
    job->src = esp;
    job->dst = esp + 24;
    job->cipher_start_src_offset_in_bytes = 24;
    job->msg_len_to_cipher_in_bytes = length;
    job->iv = esp + 8;
    job->iv_len_in_bytes = 16;
  }
  void hash(IMB_JOB* job, const uint8_t* data, size_t length, uint8_t* tag) {
    job->hash_alg = t_.hash;
    job->src = data;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = length;
    job->auth_tag_output = tag;
    job->auth_tag_output_len_in_bytes = t_.icv_length;
    job->u.HMAC._hashed_auth_key_xor_ipad = ipad_;
    job->u.HMAC._hashed_auth_key_xor_opad = opad_;
  }
  static void check(const IMB_JOB* done) {
    if (done->status != IMB_STATUS_COMPLETED) throw std::runtime_error("ipsec-mb job failed");
  }
  void run() {
    IMB_JOB* done = IMB_SUBMIT_JOB(m_);
    while (done == nullptr) done = IMB_FLUSH_JOB(m_);
    if (done->status != IMB_STATUS_COMPLETED) throw std::runtime_error("ipsec-mb job failed");
  }

  IMB_MGR* m_;
  RawCbcHmacTransform t_;
  alignas(16) uint32_t encrypt_keys_[60];
  alignas(16) uint32_t decrypt_keys_[60];
  alignas(16) uint8_t ipad_[64];
  alignas(16) uint8_t opad_[64];
};

}  // namespace espgw::bench

// AES-CBC + HMAC on ipsec-mb's job API (1.3 has no direct CBC or HMAC calls). A packet
// is sealed by one chained job (cipher, then hash), as ipsec-mb is built for; it is
// opened by two, hash then cipher, so that nothing is decrypted before the ICV has been
// compared (in constant time, here, not inside ipsec-mb). A call that needs its result
// submits its job and flushes the thread's manager until it comes back; seals queued in
// a CbcHmacSealBurst stay in the manager's lanes until the burst is flushed, and a job of
// theirs that comes back meanwhile is completed on the spot (its slot says where the tag
// goes). The key object stays free of per-thread state. Which manager: see
// ipsec_mb_thread_hmac_manager().
#include <string.h>
#include <sys/random.h>

#include <stdexcept>
#include <string>

#include "crypto/ipsec_mb_manager.h"
#include "crypto/make_cbc_hmac_key.h"

namespace espgw::crypto {

namespace {

struct HashShape {
  IMB_HASH_ALG algorithm;
  size_t block_length;  // HMAC's B: 64, or 128 for SHA-384 and SHA-512
};

HashShape hash_shape(IntegrityAlgorithm integrity) {
  switch (integrity) {
    case IntegrityAlgorithm::hmac_sha1_96:
      return {IMB_AUTH_HMAC_SHA_1, 64};
    case IntegrityAlgorithm::hmac_sha256_128:
      return {IMB_AUTH_HMAC_SHA_256, 64};
    case IntegrityAlgorithm::hmac_sha384_192:
      return {IMB_AUTH_HMAC_SHA_384, 128};
    case IntegrityAlgorithm::hmac_sha512_256:
      return {IMB_AUTH_HMAC_SHA_512, 128};
    case IntegrityAlgorithm::none:
      break;
  }
  throw std::invalid_argument("ipsec-mb: no HMAC for this integrity algorithm");
}

// The hash state after one block of key XOR pad: what ipsec-mb's HMAC jobs start from.
void hash_one_block(IMB_MGR* m, IntegrityAlgorithm integrity, const uint8_t* block,
                    uint8_t* state) {
  switch (integrity) {
    case IntegrityAlgorithm::hmac_sha1_96:
      IMB_SHA1_ONE_BLOCK(m, block, state);
      return;
    case IntegrityAlgorithm::hmac_sha256_128:
      IMB_SHA256_ONE_BLOCK(m, block, state);
      return;
    case IntegrityAlgorithm::hmac_sha384_192:
      IMB_SHA384_ONE_BLOCK(m, block, state);
      return;
    case IntegrityAlgorithm::hmac_sha512_256:
      IMB_SHA512_ONE_BLOCK(m, block, state);
      return;
    case IntegrityAlgorithm::none:
      return;
  }
}

// A queued seal's job came back: its slot (user_data) takes the tag.
void complete_queued(IMB_JOB* job) {
  auto* slot = static_cast<CbcHmacSealBurst::Slot*>(job->user_data);
  if (slot != nullptr) CbcHmacSealBurst::complete(*slot, job->status == IMB_STATUS_COMPLETED);
}

// Completes every job the manager hands back, starting with `done`, until it returns
// `mine` (whose status it returns) or nothing more (IMB_STATUS_INVALID_ARGS, with `mine`
// null: a drain). Jobs come back in the order they were submitted.
IMB_STATUS complete_until(IMB_MGR* m, IMB_JOB* done, const IMB_JOB* mine) {
  for (;;) {
    while (done != nullptr) {
      if (done == mine) return done->status;
      complete_queued(done);
      done = IMB_GET_COMPLETED_JOB(m);
    }
    done = IMB_FLUSH_JOB(m);
    if (done == nullptr && mine == nullptr) return IMB_STATUS_INVALID_ARGS;
  }
}

// Submits the job the caller filled and flushes until it is back; its status. Queued
// seals that come back first are completed on the way.
IMB_STATUS run_job(IMB_MGR* m, IMB_JOB* job) {
  job->user_data = nullptr;
  return complete_until(m, IMB_SUBMIT_JOB(m), job);
}

// CbcHmacSealBurst::flush() for this backend: every queued job of this thread completes.
void drain_thread_manager() {
  complete_until(ipsec_mb_thread_hmac_manager(), nullptr, nullptr);
}

// Laid out for the per-packet path: everything a job reads sits in the object, expanded
// keys first (16-byte aligned as ipsec-mb requires).
class alignas(64) IpsecMbCbcHmacKey final : public CbcHmacKey {
 public:
  IpsecMbCbcHmacKey(EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
                    std::span<const uint8_t> encryption_key, std::span<const uint8_t> integrity_key)
      : CbcHmacKey(integrity_icv_length(integrity)),
        hash_(hash_shape(integrity).algorithm),
        key_length_(static_cast<IMB_KEY_SIZE_BYTES>(encryption_key.size())) {
    IMB_MGR* m = ipsec_mb_thread_hmac_manager();
    switch (cipher) {
      case EncryptionAlgorithm::aes_cbc_128:
        IMB_AES_KEYEXP_128(m, encryption_key.data(), encrypt_keys_, decrypt_keys_);
        break;
      case EncryptionAlgorithm::aes_cbc_192:
        IMB_AES_KEYEXP_192(m, encryption_key.data(), encrypt_keys_, decrypt_keys_);
        break;
      case EncryptionAlgorithm::aes_cbc_256:
        IMB_AES_KEYEXP_256(m, encryption_key.data(), encrypt_keys_, decrypt_keys_);
        break;
      default:
        throw std::invalid_argument("ipsec-mb: not an AES-CBC cipher");
    }
    // RFC 2104: H(K XOR opad, H(K XOR ipad, text)); the keys are never longer than B.
    const size_t block_length = hash_shape(integrity).block_length;
    uint8_t block[128];
    for (const auto& [pad, state] :
         {std::pair{uint8_t{0x36}, ipad_state_}, std::pair{uint8_t{0x5c}, opad_state_}}) {
      memset(block, pad, block_length);
      for (size_t i = 0; i < integrity_key.size(); ++i) block[i] ^= integrity_key[i];
      hash_one_block(m, integrity, block, state);
    }
    explicit_bzero(block, sizeof block);

    uint8_t iv_key[16];
    if (getrandom(iv_key, sizeof iv_key, 0) != sizeof iv_key)
      throw std::runtime_error("getrandom failed: no IV key for the SA");
    uint32_t unused_decrypt_keys[4 * 15] __attribute__((aligned(16)));
    IMB_AES_KEYEXP_128(m, iv_key, iv_keys_, unused_decrypt_keys);
    explicit_bzero(iv_key, sizeof iv_key);
    explicit_bzero(unused_decrypt_keys, sizeof unused_decrypt_keys);
  }

  ~IpsecMbCbcHmacKey() override {
    explicit_bzero(encrypt_keys_, sizeof encrypt_keys_);
    explicit_bzero(decrypt_keys_, sizeof decrypt_keys_);
    explicit_bzero(ipad_state_, sizeof ipad_state_);
    explicit_bzero(opad_state_, sizeof opad_state_);
    explicit_bzero(iv_keys_, sizeof iv_keys_);
  }

  void make_iv(uint64_t sequence, uint8_t* iv) const override {
    // CFB over a zero block with the sequence number as "IV" yields AES_K(sequence).
    alignas(16) uint8_t counter[16] = {};
    memcpy(counter, &sequence, sizeof sequence);
    alignas(16) static constexpr uint8_t kZero[16] = {};
    IMB_AES128_CFB_ONE(ipsec_mb_thread_hmac_manager(), iv, kZero, counter, iv_keys_, 16);
  }

  void compute_icv(const uint8_t* data, size_t length, uint8_t* icv) const override {
    IMB_MGR* m = ipsec_mb_thread_hmac_manager();
    uint8_t tag[kMaxIcvLength];
    IMB_JOB* job = IMB_GET_NEXT_JOB(m);
    fill_hash(job, data, length, tag);
    job->cipher_mode = IMB_CIPHER_NULL;
    job->cipher_direction = IMB_DIR_ENCRYPT;
    job->chain_order = IMB_ORDER_HASH_CIPHER;
    job->src = data;
    job->dst = const_cast<uint8_t*>(data);
    job->cipher_start_src_offset_in_bytes = 0;
    job->msg_len_to_cipher_in_bytes = 0;
    job->iv = nullptr;
    job->iv_len_in_bytes = 0;
    if (run_job(m, job) != IMB_STATUS_COMPLETED)
      throw std::runtime_error("ipsec-mb: HMAC job failed");
    memcpy(icv, tag, icv_length());
  }

  void seal(uint8_t* esp, size_t length, const uint8_t* esn_high) const override {
    IMB_MGR* m = ipsec_mb_thread_hmac_manager();
    uint8_t tag[kMaxIcvLength];
    IMB_JOB* job = IMB_GET_NEXT_JOB(m);
    fill_seal(job, esp, length, esn_high, tag);
    // A packet must never leave with an ICV that was not computed.
    if (run_job(m, job) != IMB_STATUS_COMPLETED)
      throw std::runtime_error("ipsec-mb: AES-CBC + HMAC seal failed");
    memcpy(esp + kCbcCiphertextOffset + length, tag, icv_length());
  }

  void seal_in_burst(CbcHmacSealBurst& burst, uint8_t* esp, size_t length,
                     const uint8_t* esn_high) const override {
    CbcHmacSealBurst::Slot& slot = burst.take_slot(&drain_thread_manager);
    slot.icv = esp + kCbcCiphertextOffset + length;
    slot.icv_length = icv_length();
    IMB_MGR* m = ipsec_mb_thread_hmac_manager();
    IMB_JOB* job = IMB_GET_NEXT_JOB(m);
    fill_seal(job, esp, length, esn_high, slot.tag);
    job->user_data = &slot;
    // Whatever comes back now is a queued seal, maybe this one: completed on the spot.
    IMB_JOB* done = IMB_SUBMIT_JOB(m);
    while (done != nullptr) {
      complete_queued(done);
      done = IMB_GET_COMPLETED_JOB(m);
    }
  }

  bool decrypt(uint8_t* esp, size_t length) const override {
    IMB_MGR* m = ipsec_mb_thread_hmac_manager();
    IMB_JOB* job = IMB_GET_NEXT_JOB(m);
    fill_cipher(job, esp, length, IMB_DIR_DECRYPT);
    job->hash_alg = IMB_AUTH_NULL;
    job->chain_order = IMB_ORDER_HASH_CIPHER;
    job->auth_tag_output = nullptr;
    job->auth_tag_output_len_in_bytes = 0;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = 0;
    return run_job(m, job) == IMB_STATUS_COMPLETED;
  }

 private:
  // One chained job: CBC over the payload, then the HMAC over header, IV, ciphertext and
  // the ESN's high half, which waits in the ICV's place (RFC 4303 2.2.1: appended for the
  // ICV only). The tag goes to `tag`, never straight over the bytes the hash reads.
  void fill_seal(IMB_JOB* job, uint8_t* esp, size_t length, const uint8_t* esn_high,
                 uint8_t* tag) const {
    size_t authenticated = kCbcCiphertextOffset + length;
    if (esn_high != nullptr) {
      memcpy(esp + authenticated, esn_high, kEsnHighLength);
      authenticated += kEsnHighLength;
    }
    fill_hash(job, esp, authenticated, tag);
    fill_cipher(job, esp, length, IMB_DIR_ENCRYPT);
    job->chain_order = IMB_ORDER_CIPHER_HASH;
  }

  void fill_hash(IMB_JOB* job, const uint8_t* data, size_t length, uint8_t* tag) const {
    job->hash_alg = hash_;
    job->src = data;
    job->hash_start_src_offset_in_bytes = 0;
    job->msg_len_to_hash_in_bytes = length;
    job->auth_tag_output = tag;
    job->auth_tag_output_len_in_bytes = icv_length();
    job->u.HMAC._hashed_auth_key_xor_ipad = ipad_state_;
    job->u.HMAC._hashed_auth_key_xor_opad = opad_state_;
  }

  void fill_cipher(IMB_JOB* job, uint8_t* esp, size_t length,
                   IMB_CIPHER_DIRECTION direction) const {
    job->cipher_mode = IMB_CIPHER_CBC;
    job->cipher_direction = direction;
    job->key_len_in_bytes = key_length_;
    job->enc_keys = encrypt_keys_;
    job->dec_keys = decrypt_keys_;
    job->src = esp;
    job->dst = esp + kCbcCiphertextOffset;
    job->cipher_start_src_offset_in_bytes = kCbcCiphertextOffset;
    job->msg_len_to_cipher_in_bytes = length;
    job->iv = esp + 8;
    job->iv_len_in_bytes = kAesBlockLength;
  }

  // AES-256 has 15 round keys of 16 bytes.
  alignas(16) uint32_t encrypt_keys_[4 * 15];
  alignas(16) uint32_t decrypt_keys_[4 * 15];
  alignas(16) uint32_t iv_keys_[4 * 11];
  // The hash state after the padded key block: up to SHA-512's 64 bytes.
  alignas(16) uint8_t ipad_state_[64];
  alignas(16) uint8_t opad_state_[64];
  IMB_HASH_ALG hash_;
  IMB_KEY_SIZE_BYTES key_length_;
};

}  // namespace

void check_cbc_hmac_lengths(EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
                            size_t encryption_key_length, size_t integrity_key_length_given) {
  if (is_aead(cipher) || integrity == IntegrityAlgorithm::none)
    throw std::invalid_argument("AES-CBC needs an integrity algorithm and a CBC cipher");
  if (encryption_key_length != cipher_key_length(cipher))
    throw std::invalid_argument("wrong key length for " + std::string(algorithm_name(cipher)));
  if (integrity_key_length_given != integrity_key_length(integrity))
    throw std::invalid_argument("wrong key length for " + std::string(integrity_name(integrity)));
}

std::unique_ptr<CbcHmacKey> make_ipsec_mb_cbc_hmac_key(EncryptionAlgorithm cipher,
                                                       IntegrityAlgorithm integrity,
                                                       std::span<const uint8_t> encryption_key,
                                                       std::span<const uint8_t> integrity_key) {
  check_cbc_hmac_lengths(cipher, integrity, encryption_key.size(), integrity_key.size());
  return std::make_unique<IpsecMbCbcHmacKey>(cipher, integrity, encryption_key, integrity_key);
}

}  // namespace espgw::crypto

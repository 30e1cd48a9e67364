// ipsec-mb backend. One IMB_MGR per thread (the manager holds per-thread scratch state);
// expanded keys are shared by all threads. AES-GCM uses the direct IMB_AESxxx_GCM_ENC/DEC
// calls and ChaCha20-Poly1305 the direct init/update/finalize calls: in ipsec-mb 1.3
// neither has a multi-buffer path, so the job API would only add overhead.
#include <intel-ipsec-mb.h>
#include <string.h>

#include <new>
#include <stdexcept>

#include "crypto/aead.h"
#include "crypto/constant_time.h"
#include "crypto/ipsec_mb_manager.h"
#include "crypto/make_cbc_hmac_key.h"

namespace espgw::crypto {

namespace {

class ThreadManager {
 public:
  // `sse`: the SSE code path (init_mb_mgr_sse) instead of the best one for the CPU.
  explicit ThreadManager(bool sse = false) : manager_(alloc_mb_mgr(0)) {
    if (manager_ == nullptr) throw std::bad_alloc();
    if (sse)
      init_mb_mgr_sse(manager_);
    else
      init_mb_mgr_auto(manager_, nullptr);
    if (imb_get_errno(manager_) != 0) {
      free_mb_mgr(manager_);
      throw std::runtime_error("ipsec-mb: manager initialisation failed");
    }
  }
  ~ThreadManager() { free_mb_mgr(manager_); }
  ThreadManager(const ThreadManager&) = delete;
  ThreadManager& operator=(const ThreadManager&) = delete;
  IMB_MGR* get() const { return manager_; }

 private:
  IMB_MGR* manager_;
};

IMB_MGR* thread_manager() {
  return ipsec_mb_thread_manager();
}

}  // namespace

IMB_MGR* ipsec_mb_thread_manager() {
  thread_local ThreadManager manager;
  return manager.get();
}

IMB_MGR* ipsec_mb_thread_hmac_manager() {
  // Whether the CPU has SHA-NI, as ipsec-mb's SSE manager detects it (once per process).
  static const bool sha_ni = [] {
    ThreadManager probe(true);
    return (probe.get()->features & IMB_FEATURE_SHANI) != 0;
  }();
  if (!sha_ni) return ipsec_mb_thread_manager();
  thread_local ThreadManager manager(true);
  return manager.get();
}

namespace {

// gcm_key_data must be 16-byte aligned; the header only guarantees that with -DLINUX, so
// we align it ourselves.
struct alignas(16) AlignedGcmKey {
  gcm_key_data data;
};

// The expanded key lives inside the key object, right after its vtable pointer, rather than
// behind a pointer of its own: with many SAs each packet's key is cold, and the object
// (aligned to a cache line) then shares its first line with the first round keys instead
// of costing one more miss per packet and direction.
template <bool kAes256>
class alignas(64) GcmKey final : public AeadKey {
 public:
  explicit GcmKey(std::span<const uint8_t> key) {
    IMB_MGR* m = thread_manager();
    if constexpr (kAes256) {
      IMB_AES256_GCM_PRE(m, key.data(), &key_.data);
    } else {
      IMB_AES128_GCM_PRE(m, key.data(), &key_.data);
    }
  }
  ~GcmKey() override { explicit_bzero(&key_, sizeof key_); }

  void seal(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, uint8_t* tag) const override {
    gcm_context_data context;
    IMB_MGR* m = thread_manager();
    if constexpr (kAes256) {
      IMB_AES256_GCM_ENC(m, &key_.data, &context, out, in, length, nonce, aad, aad_length, tag,
                         kIcvLength);
    } else {
      IMB_AES128_GCM_ENC(m, &key_.data, &context, out, in, length, nonce, aad, aad_length, tag,
                         kIcvLength);
    }
  }

  bool open(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, const uint8_t* tag) const override {
    gcm_context_data context;
    uint8_t computed[kIcvLength];
    IMB_MGR* m = thread_manager();
    if constexpr (kAes256) {
      IMB_AES256_GCM_DEC(m, &key_.data, &context, out, in, length, nonce, aad, aad_length, computed,
                         kIcvLength);
    } else {
      IMB_AES128_GCM_DEC(m, &key_.data, &context, out, in, length, nonce, aad, aad_length, computed,
                         kIcvLength);
    }
    return equal_constant_time_16(computed, tag);
  }

 private:
  AlignedGcmKey key_;
};

class ChaChaPolyKey final : public AeadKey {
 public:
  explicit ChaChaPolyKey(std::span<const uint8_t> key) { memcpy(key_, key.data(), kKeyLength); }
  ~ChaChaPolyKey() override { explicit_bzero(key_, sizeof key_); }

  void seal(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, uint8_t* tag) const override {
    chacha20_poly1305_context_data context;
    IMB_MGR* m = thread_manager();
    IMB_CHACHA20_POLY1305_INIT(m, key_, &context, nonce, aad, aad_length);
    IMB_CHACHA20_POLY1305_ENC_UPDATE(m, key_, &context, out, in, length);
    IMB_CHACHA20_POLY1305_ENC_FINALIZE(m, &context, tag, kIcvLength);
  }

  bool open(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, const uint8_t* tag) const override {
    chacha20_poly1305_context_data context;
    uint8_t computed[kIcvLength];
    IMB_MGR* m = thread_manager();
    IMB_CHACHA20_POLY1305_INIT(m, key_, &context, nonce, aad, aad_length);
    IMB_CHACHA20_POLY1305_DEC_UPDATE(m, key_, &context, out, in, length);
    IMB_CHACHA20_POLY1305_DEC_FINALIZE(m, &context, computed, kIcvLength);
    return equal_constant_time_16(computed, tag);
  }

 private:
  static constexpr size_t kKeyLength = 32;
  // ipsec-mb 1.3's AVX2 ChaCha20 code (what it picks on a CPU without AVX-512) loads the
  // 32-byte key as two 32-byte loads at offsets 0 and 16: it reads 16 bytes past the key.
  // Measured with the key against a guard page: it faults with up to 15 bytes after the
  // key, for every length up to about 1200 bytes. A key at the end of a heap object could
  // read into an unmapped page (ASan's allocator put one there: fuzz_decrypted_payload
  // crashed within a second on such a host). So the key keeps 16 bytes of slack.
  static constexpr size_t kKeyOverread = 16;
  alignas(16) uint8_t key_[kKeyLength + kKeyOverread] = {};
};

class IpsecMbBackend final : public CryptoBackend {
 public:
  std::string_view name() const override { return "ipsec-mb"; }
  std::unique_ptr<AeadKey> make_key(AeadAlgorithm algorithm,
                                    std::span<const uint8_t> cipher_key) const override {
    if (!is_aead(algorithm)) throw std::invalid_argument("ipsec-mb: not an AEAD");
    if (cipher_key.size() != cipher_key_length(algorithm))
      throw std::invalid_argument("ipsec-mb: wrong key length for " +
                                  std::string(algorithm_name(algorithm)));
    switch (algorithm) {
      case AeadAlgorithm::aes_gcm_128:
        return std::make_unique<GcmKey<false>>(cipher_key);
      case AeadAlgorithm::aes_gcm_256:
        return std::make_unique<GcmKey<true>>(cipher_key);
      case AeadAlgorithm::chacha20_poly1305:
        return std::make_unique<ChaChaPolyKey>(cipher_key);
      default:
        break;
    }
    throw std::invalid_argument("ipsec-mb: unknown algorithm");
  }
  std::unique_ptr<CbcHmacKey> make_cbc_hmac_key(
      EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
      std::span<const uint8_t> encryption_key,
      std::span<const uint8_t> integrity_key) const override {
    return make_ipsec_mb_cbc_hmac_key(cipher, integrity, encryption_key, integrity_key);
  }
};

}  // namespace

const CryptoBackend& ipsec_mb_backend() {
  static const IpsecMbBackend backend;
  return backend;
}

}  // namespace espgw::crypto

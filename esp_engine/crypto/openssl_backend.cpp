// OpenSSL EVP backend: the reference implementation we cross-check ipsec-mb against, and
// a fallback that can be chosen at run time. One EVP_CIPHER_CTX per thread per algorithm;
// the key is set on every call, which costs a key schedule per packet but keeps the
// AeadKey free of mutable state, so it stays safe to share across threads.
#include <openssl/evp.h>
#include <string.h>

#include <climits>
#include <new>
#include <stdexcept>
#include <string>

#include "crypto/aead.h"
#include "crypto/make_cbc_hmac_key.h"

namespace espgw::crypto {

namespace {

const EVP_CIPHER* fetch_cipher(AeadAlgorithm algorithm) {
  // EVP_get_cipherbyname returns static objects, so nothing needs freeing.
  switch (algorithm) {
    case AeadAlgorithm::aes_gcm_128:
      return EVP_aes_128_gcm();
    case AeadAlgorithm::aes_gcm_256:
      return EVP_aes_256_gcm();
    case AeadAlgorithm::chacha20_poly1305:
      return EVP_chacha20_poly1305();
    default:
      break;
  }
  return nullptr;
}

struct ContextDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};

EVP_CIPHER_CTX* thread_context() {
  thread_local std::unique_ptr<EVP_CIPHER_CTX, ContextDeleter> context(EVP_CIPHER_CTX_new());
  if (!context) throw std::bad_alloc();
  return context.get();
}

class EvpKey final : public AeadKey {
 public:
  EvpKey(AeadAlgorithm algorithm, std::span<const uint8_t> key)
      : cipher_(fetch_cipher(algorithm)), key_length_(key.size()) {
    memcpy(key_, key.data(), key.size());
  }
  ~EvpKey() override { explicit_bzero(key_, sizeof key_); }

  void seal(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, uint8_t* tag) const override {
    EVP_CIPHER_CTX* c = thread_context();
    int n = 0;
    bool ok = length <= INT_MAX && aad_length <= INT_MAX &&
              EVP_EncryptInit_ex2(c, cipher_, key_, nonce, nullptr) == 1 &&
              EVP_EncryptUpdate(c, nullptr, &n, aad, static_cast<int>(aad_length)) == 1 &&
              EVP_EncryptUpdate(c, out, &n, in, static_cast<int>(length)) == 1 &&
              EVP_EncryptFinal_ex(c, out + n, &n) == 1 &&
              EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, kIcvLength, tag) == 1;
    // Encryption with a valid key cannot fail short of memory corruption; never emit a
    // packet with an unset tag.
    if (!ok) throw std::runtime_error("openssl: AEAD seal failed");
  }

  bool open(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, const uint8_t* tag) const override {
    EVP_CIPHER_CTX* c = thread_context();
    int n = 0;
    uint8_t expected[kIcvLength];
    memcpy(expected, tag, kIcvLength);  // ctrl takes a non-const pointer
    // EVP_DecryptFinal_ex compares the tag with CRYPTO_memcmp (constant time).
    return length <= INT_MAX && aad_length <= INT_MAX &&
           EVP_DecryptInit_ex2(c, cipher_, key_, nonce, nullptr) == 1 &&
           EVP_DecryptUpdate(c, nullptr, &n, aad, static_cast<int>(aad_length)) == 1 &&
           EVP_DecryptUpdate(c, out, &n, in, static_cast<int>(length)) == 1 &&
           EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, kIcvLength, expected) == 1 &&
           EVP_DecryptFinal_ex(c, out + n, &n) == 1;
  }

 private:
  const EVP_CIPHER* cipher_;
  size_t key_length_;
  uint8_t key_[32];
};

class OpenSslBackend final : public CryptoBackend {
 public:
  std::string_view name() const override { return "openssl"; }
  std::unique_ptr<AeadKey> make_key(AeadAlgorithm algorithm,
                                    std::span<const uint8_t> cipher_key) const override {
    if (!is_aead(algorithm)) throw std::invalid_argument("openssl: not an AEAD");
    if (cipher_key.size() != cipher_key_length(algorithm))
      throw std::invalid_argument("openssl: wrong key length for " +
                                  std::string(algorithm_name(algorithm)));
    return std::make_unique<EvpKey>(algorithm, cipher_key);
  }
  std::unique_ptr<CbcHmacKey> make_cbc_hmac_key(
      EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
      std::span<const uint8_t> encryption_key,
      std::span<const uint8_t> integrity_key) const override {
    return make_openssl_cbc_hmac_key(cipher, integrity, encryption_key, integrity_key);
  }
};

}  // namespace

const CryptoBackend& openssl_backend() {
  static const OpenSslBackend backend;
  return backend;
}

}  // namespace espgw::crypto

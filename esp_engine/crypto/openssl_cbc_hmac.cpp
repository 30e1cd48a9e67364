// AES-CBC + HMAC on OpenSSL: the reference the ipsec-mb keys are checked against. Like
// the AEAD keys of this backend, the key objects hold raw keys only and set them on every
// call (a key schedule and HMAC setup per packet), so they stay free of mutable state.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <string.h>
#include <sys/random.h>

#include <climits>
#include <memory>
#include <new>
#include <stdexcept>

#include "crypto/make_cbc_hmac_key.h"

namespace espgw::crypto {

namespace {

const EVP_CIPHER* cbc_cipher(EncryptionAlgorithm cipher) {
  switch (cipher) {
    case EncryptionAlgorithm::aes_cbc_128:
      return EVP_aes_128_cbc();
    case EncryptionAlgorithm::aes_cbc_192:
      return EVP_aes_192_cbc();
    case EncryptionAlgorithm::aes_cbc_256:
      return EVP_aes_256_cbc();
    default:
      throw std::invalid_argument("openssl: not an AES-CBC cipher");
  }
}

const char* digest_name(IntegrityAlgorithm integrity) {
  switch (integrity) {
    case IntegrityAlgorithm::hmac_sha1_96:
      return "SHA1";
    case IntegrityAlgorithm::hmac_sha256_128:
      return "SHA256";
    case IntegrityAlgorithm::hmac_sha384_192:
      return "SHA384";
    case IntegrityAlgorithm::hmac_sha512_256:
      return "SHA512";
    case IntegrityAlgorithm::none:
      break;
  }
  throw std::invalid_argument("openssl: no HMAC for this integrity algorithm");
}

struct CipherContextDeleter {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
struct MacDeleter {
  void operator()(EVP_MAC* mac) const { EVP_MAC_free(mac); }
};
struct MacContextDeleter {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

EVP_CIPHER_CTX* thread_cipher_context() {
  thread_local std::unique_ptr<EVP_CIPHER_CTX, CipherContextDeleter> context(EVP_CIPHER_CTX_new());
  if (!context) throw std::bad_alloc();
  return context.get();
}

EVP_MAC_CTX* thread_mac_context() {
  static const std::unique_ptr<EVP_MAC, MacDeleter> hmac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!hmac) throw std::runtime_error("openssl: no HMAC");
  thread_local std::unique_ptr<EVP_MAC_CTX, MacContextDeleter> context(EVP_MAC_CTX_new(hmac.get()));
  if (!context) throw std::bad_alloc();
  return context.get();
}

class OpenSslCbcHmacKey final : public CbcHmacKey {
 public:
  OpenSslCbcHmacKey(EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
                    std::span<const uint8_t> encryption_key, std::span<const uint8_t> integrity_key)
      : CbcHmacKey(integrity_icv_length(integrity)),
        cipher_(cbc_cipher(cipher)),
        digest_(digest_name(integrity)),
        integrity_key_length_(integrity_key.size()) {
    memcpy(encryption_key_, encryption_key.data(), encryption_key.size());
    memcpy(integrity_key_, integrity_key.data(), integrity_key.size());
    if (getrandom(iv_key_, sizeof iv_key_, 0) != sizeof iv_key_)
      throw std::runtime_error("getrandom failed: no IV key for the SA");
  }
  ~OpenSslCbcHmacKey() override {
    explicit_bzero(encryption_key_, sizeof encryption_key_);
    explicit_bzero(integrity_key_, sizeof integrity_key_);
    explicit_bzero(iv_key_, sizeof iv_key_);
  }

  void make_iv(uint64_t sequence, uint8_t* iv) const override {
    uint8_t block[16] = {};
    memcpy(block, &sequence, sizeof sequence);
    EVP_CIPHER_CTX* c = thread_cipher_context();
    int n = 0;
    const bool ok = EVP_EncryptInit_ex2(c, EVP_aes_128_ecb(), iv_key_, nullptr, nullptr) == 1 &&
                    EVP_CIPHER_CTX_set_padding(c, 0) == 1 &&
                    EVP_EncryptUpdate(c, iv, &n, block, sizeof block) == 1 && n == 16;
    if (!ok) throw std::runtime_error("openssl: IV encryption failed");
  }

  void compute_icv(const uint8_t* data, size_t length, uint8_t* icv) const override {
    uint8_t tag[EVP_MAX_MD_SIZE];
    size_t tag_length = 0;
    EVP_MAC_CTX* c = thread_mac_context();
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(digest_), 0),
        OSSL_PARAM_construct_end()};
    const bool ok = EVP_MAC_init(c, integrity_key_, integrity_key_length_, params) == 1 &&
                    EVP_MAC_update(c, data, length) == 1 &&
                    EVP_MAC_final(c, tag, &tag_length, sizeof tag) == 1 &&
                    tag_length >= icv_length();
    if (!ok) throw std::runtime_error("openssl: HMAC failed");
    memcpy(icv, tag, icv_length());
    explicit_bzero(tag, sizeof tag);
  }

  void seal(uint8_t* esp, size_t length, const uint8_t* esn_high) const override {
    uint8_t* data = esp + kCbcCiphertextOffset;
    if (!crypt(esp + 8, data, length, true))
      throw std::runtime_error("openssl: AES-CBC encryption failed");
    uint8_t* icv = data + length;
    size_t authenticated = kCbcCiphertextOffset + length;
    if (esn_high != nullptr) {
      memcpy(icv, esn_high, kEsnHighLength);  // RFC 4303 2.2.1: appended for the ICV only
      authenticated += kEsnHighLength;
    }
    compute_icv(esp, authenticated, icv);
  }

  bool decrypt(uint8_t* esp, size_t length) const override {
    return crypt(esp + 8, esp + kCbcCiphertextOffset, length, false);
  }

 private:
  bool crypt(const uint8_t* iv, uint8_t* data, size_t length, bool encrypt) const {
    EVP_CIPHER_CTX* c = thread_cipher_context();
    int n = 0;
    return length <= INT_MAX && length % kAesBlockLength == 0 &&
           EVP_CipherInit_ex2(c, cipher_, encryption_key_, iv, encrypt ? 1 : 0, nullptr) == 1 &&
           EVP_CIPHER_CTX_set_padding(c, 0) == 1 &&
           EVP_CipherUpdate(c, data, &n, data, static_cast<int>(length)) == 1 &&
           static_cast<size_t>(n) == length;
  }

  const EVP_CIPHER* cipher_;
  const char* digest_;
  size_t integrity_key_length_;
  uint8_t encryption_key_[32];
  uint8_t integrity_key_[64];
  uint8_t iv_key_[16];
};

}  // namespace

std::unique_ptr<CbcHmacKey> make_openssl_cbc_hmac_key(EncryptionAlgorithm cipher,
                                                      IntegrityAlgorithm integrity,
                                                      std::span<const uint8_t> encryption_key,
                                                      std::span<const uint8_t> integrity_key) {
  check_cbc_hmac_lengths(cipher, integrity, encryption_key.size(), integrity_key.size());
  return std::make_unique<OpenSslCbcHmacKey>(cipher, integrity, encryption_key, integrity_key);
}

}  // namespace espgw::crypto

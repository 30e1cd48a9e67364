// The AEAD interface the ESP layer encrypts through, and the registry of backends (which
// also make the AES-CBC + HMAC keys of crypto/cbc_hmac.h).
//
// crypto/ owns algorithms, keys and backends; it knows nothing about ESP framing. A
// backend turns raw key bytes into an AeadKey once per SA; the AeadKey is then used
// concurrently by every worker thread, so all per-thread state (ipsec-mb managers,
// OpenSSL contexts) lives inside the backend, never in the key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "crypto/algorithms.h"
#include "crypto/cbc_hmac.h"

namespace espgw::crypto {

// A per-SA expanded key. seal/open are const and safe to call from many threads at once.
class AeadKey {
 public:
  virtual ~AeadKey() = default;

  // Encrypts `length` bytes from `in` to `out` (which may be the same pointer) and writes
  // the 16-byte tag.
  virtual void seal(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
                    uint8_t* out, size_t length, uint8_t* tag) const = 0;

  // Decrypts `length` bytes from `in` to `out` (which may be the same pointer) and returns
  // whether `tag` matched, compared in constant time. On false the output is garbage and
  // must not be used.
  [[nodiscard]] virtual bool open(const uint8_t* nonce, const uint8_t* aad, size_t aad_length,
                                  const uint8_t* in, uint8_t* out, size_t length,
                                  const uint8_t* tag) const = 0;
};

class CryptoBackend {
 public:
  virtual ~CryptoBackend() = default;
  virtual std::string_view name() const = 0;
  // `cipher_key` excludes the salt. Throws std::invalid_argument on a wrong length.
  virtual std::unique_ptr<AeadKey> make_key(AeadAlgorithm algorithm,
                                            std::span<const uint8_t> cipher_key) const = 0;
  // AES-CBC with an HMAC. Throws std::invalid_argument on a wrong length or an AEAD.
  virtual std::unique_ptr<CbcHmacKey> make_cbc_hmac_key(
      EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
      std::span<const uint8_t> encryption_key, std::span<const uint8_t> integrity_key) const = 0;
};

// Intel ipsec-mb: the default, fast backend.
const CryptoBackend& ipsec_mb_backend();
// OpenSSL EVP: the reference backend, selectable at run time.
const CryptoBackend& openssl_backend();
// "ipsec-mb" or "openssl"; nullptr for anything else.
const CryptoBackend* find_backend(std::string_view name);

}  // namespace espgw::crypto

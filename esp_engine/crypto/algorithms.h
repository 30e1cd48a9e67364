// The ESP transforms espgw speaks: encryption algorithms (AEAD or AES-CBC) and the HMAC
// integrity algorithms that go with AES-CBC, with their names and key lengths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace espgw::crypto {

enum class EncryptionAlgorithm : uint8_t {
  aes_gcm_128,        // RFC 4106, 16-byte ICV
  aes_gcm_256,        // RFC 4106, 16-byte ICV
  chacha20_poly1305,  // RFC 7634
  aes_cbc_128,        // RFC 3602, with an IntegrityAlgorithm
  aes_cbc_192,
  aes_cbc_256,
};
// Most of the engine only ever meets the AEAD values; the older name stays for them.
using AeadAlgorithm = EncryptionAlgorithm;

// RFC 2404 and RFC 4868: HMAC truncated to half the digest (SHA-1: 96 bits).
enum class IntegrityAlgorithm : uint8_t {
  none,  // an AEAD: the cipher authenticates
  hmac_sha1_96,
  hmac_sha256_128,
  hmac_sha384_192,
  hmac_sha512_256,
};

inline constexpr size_t kSaltLength = 4;    // AEAD: implicit nonce part, from the key material
inline constexpr size_t kNonceLength = 12;  // AEAD: salt || 8-byte explicit IV
inline constexpr size_t kIcvLength = 16;    // AEAD ICV
inline constexpr size_t kAesBlockLength = 16;

constexpr bool is_aead(EncryptionAlgorithm algorithm) {
  return algorithm == EncryptionAlgorithm::aes_gcm_128 ||
         algorithm == EncryptionAlgorithm::aes_gcm_256 ||
         algorithm == EncryptionAlgorithm::chacha20_poly1305;
}

size_t cipher_key_length(EncryptionAlgorithm algorithm);
// HMAC key length: the digest length (RFC 2404 2, RFC 4868 2.1.1); 0 for none.
size_t integrity_key_length(IntegrityAlgorithm algorithm);
// Truncated ICV length: half the digest, 12 bytes for SHA-1; 16 for none (the AEAD tag).
size_t integrity_icv_length(IntegrityAlgorithm algorithm);

// Length of the key material an SA takes, laid out as charon hands it over: an AEAD's
// cipher key followed by its 4-byte salt; for AES-CBC the encryption key followed by the
// integrity key.
size_t key_material_length(EncryptionAlgorithm algorithm,
                           IntegrityAlgorithm integrity = IntegrityAlgorithm::none);
// True for a pairing espgw runs: an AEAD without integrity, AES-CBC with one.
bool valid_transform(EncryptionAlgorithm algorithm, IntegrityAlgorithm integrity);

std::string_view algorithm_name(EncryptionAlgorithm algorithm);
std::string_view integrity_name(IntegrityAlgorithm algorithm);
// "aes-gcm-128", or "aes-cbc-256/hmac-sha2-256-128" with an integrity algorithm.
std::string transform_name(EncryptionAlgorithm algorithm, IntegrityAlgorithm integrity);
// Accepts our names and strongSwan's AEAD proposal keywords (aes128gcm16,
// chacha20poly1305). AES-CBC only by our names (aes-cbc-256): strongSwan's "aes256"
// names a cipher without saying which integrity algorithm goes with it.
std::optional<EncryptionAlgorithm> parse_algorithm(std::string_view name);
// Accepts our names (hmac-sha2-256-128) and strongSwan's (sha256); never "none".
std::optional<IntegrityAlgorithm> parse_integrity(std::string_view name);

}  // namespace espgw::crypto

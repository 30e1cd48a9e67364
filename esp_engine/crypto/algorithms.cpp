#include "crypto/algorithms.h"

#include <stdexcept>

namespace espgw::crypto {

size_t cipher_key_length(EncryptionAlgorithm algorithm) {
  switch (algorithm) {
    case EncryptionAlgorithm::aes_gcm_128:
    case EncryptionAlgorithm::aes_cbc_128:
      return 16;
    case EncryptionAlgorithm::aes_cbc_192:
      return 24;
    case EncryptionAlgorithm::aes_gcm_256:
    case EncryptionAlgorithm::chacha20_poly1305:
    case EncryptionAlgorithm::aes_cbc_256:
      return 32;
  }
  throw std::invalid_argument("unknown encryption algorithm");
}

size_t integrity_key_length(IntegrityAlgorithm algorithm) {
  switch (algorithm) {
    case IntegrityAlgorithm::none:
      return 0;
    case IntegrityAlgorithm::hmac_sha1_96:
      return 20;
    case IntegrityAlgorithm::hmac_sha256_128:
      return 32;
    case IntegrityAlgorithm::hmac_sha384_192:
      return 48;
    case IntegrityAlgorithm::hmac_sha512_256:
      return 64;
  }
  throw std::invalid_argument("unknown integrity algorithm");
}

size_t integrity_icv_length(IntegrityAlgorithm algorithm) {
  switch (algorithm) {
    case IntegrityAlgorithm::none:
      return kIcvLength;
    case IntegrityAlgorithm::hmac_sha1_96:
      return 12;
    case IntegrityAlgorithm::hmac_sha256_128:
      return 16;
    case IntegrityAlgorithm::hmac_sha384_192:
      return 24;
    case IntegrityAlgorithm::hmac_sha512_256:
      return 32;
  }
  throw std::invalid_argument("unknown integrity algorithm");
}

size_t key_material_length(EncryptionAlgorithm algorithm, IntegrityAlgorithm integrity) {
  if (is_aead(algorithm)) return cipher_key_length(algorithm) + kSaltLength;
  return cipher_key_length(algorithm) + integrity_key_length(integrity);
}

bool valid_transform(EncryptionAlgorithm algorithm, IntegrityAlgorithm integrity) {
  return is_aead(algorithm) == (integrity == IntegrityAlgorithm::none);
}

std::string_view algorithm_name(EncryptionAlgorithm algorithm) {
  switch (algorithm) {
    case EncryptionAlgorithm::aes_gcm_128:
      return "aes-gcm-128";
    case EncryptionAlgorithm::aes_gcm_256:
      return "aes-gcm-256";
    case EncryptionAlgorithm::chacha20_poly1305:
      return "chacha20-poly1305";
    case EncryptionAlgorithm::aes_cbc_128:
      return "aes-cbc-128";
    case EncryptionAlgorithm::aes_cbc_192:
      return "aes-cbc-192";
    case EncryptionAlgorithm::aes_cbc_256:
      return "aes-cbc-256";
  }
  return "unknown";
}

std::string_view integrity_name(IntegrityAlgorithm algorithm) {
  switch (algorithm) {
    case IntegrityAlgorithm::none:
      return "none";
    case IntegrityAlgorithm::hmac_sha1_96:
      return "hmac-sha1-96";
    case IntegrityAlgorithm::hmac_sha256_128:
      return "hmac-sha2-256-128";
    case IntegrityAlgorithm::hmac_sha384_192:
      return "hmac-sha2-384-192";
    case IntegrityAlgorithm::hmac_sha512_256:
      return "hmac-sha2-512-256";
  }
  return "unknown";
}

std::string transform_name(EncryptionAlgorithm algorithm, IntegrityAlgorithm integrity) {
  std::string name(algorithm_name(algorithm));
  if (integrity != IntegrityAlgorithm::none) {
    name += '/';
    name += integrity_name(integrity);
  }
  return name;
}

std::optional<EncryptionAlgorithm> parse_algorithm(std::string_view name) {
  if (name == "aes-gcm-128" || name == "aes128gcm16" || name == "aes128gcm128")
    return EncryptionAlgorithm::aes_gcm_128;
  if (name == "aes-gcm-256" || name == "aes256gcm16" || name == "aes256gcm128")
    return EncryptionAlgorithm::aes_gcm_256;
  if (name == "chacha20-poly1305" || name == "chacha20poly1305")
    return EncryptionAlgorithm::chacha20_poly1305;
  if (name == "aes-cbc-128") return EncryptionAlgorithm::aes_cbc_128;
  if (name == "aes-cbc-192") return EncryptionAlgorithm::aes_cbc_192;
  if (name == "aes-cbc-256") return EncryptionAlgorithm::aes_cbc_256;
  return std::nullopt;
}

std::optional<IntegrityAlgorithm> parse_integrity(std::string_view name) {
  if (name == "hmac-sha1-96" || name == "sha1") return IntegrityAlgorithm::hmac_sha1_96;
  if (name == "hmac-sha2-256-128" || name == "sha256") return IntegrityAlgorithm::hmac_sha256_128;
  if (name == "hmac-sha2-384-192" || name == "sha384") return IntegrityAlgorithm::hmac_sha384_192;
  if (name == "hmac-sha2-512-256" || name == "sha512") return IntegrityAlgorithm::hmac_sha512_256;
  return std::nullopt;
}

}  // namespace espgw::crypto

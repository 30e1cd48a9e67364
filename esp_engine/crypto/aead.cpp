#include "crypto/aead.h"

#include <stdexcept>

namespace espgw::crypto {

size_t cipher_key_length(AeadAlgorithm algorithm) {
  switch (algorithm) {
    case AeadAlgorithm::aes_gcm_128:
      return 16;
    case AeadAlgorithm::aes_gcm_256:
    case AeadAlgorithm::chacha20_poly1305:
      return 32;
  }
  throw std::invalid_argument("unknown AEAD algorithm");
}

std::string_view algorithm_name(AeadAlgorithm algorithm) {
  switch (algorithm) {
    case AeadAlgorithm::aes_gcm_128:
      return "aes-gcm-128";
    case AeadAlgorithm::aes_gcm_256:
      return "aes-gcm-256";
    case AeadAlgorithm::chacha20_poly1305:
      return "chacha20-poly1305";
  }
  return "unknown";
}

std::optional<AeadAlgorithm> parse_algorithm(std::string_view name) {
  if (name == "aes-gcm-128" || name == "aes128gcm16" || name == "aes128gcm128")
    return AeadAlgorithm::aes_gcm_128;
  if (name == "aes-gcm-256" || name == "aes256gcm16" || name == "aes256gcm128")
    return AeadAlgorithm::aes_gcm_256;
  if (name == "chacha20-poly1305" || name == "chacha20poly1305")
    return AeadAlgorithm::chacha20_poly1305;
  return std::nullopt;
}

const CryptoBackend* find_backend(std::string_view name) {
  if (name == "ipsec-mb" || name == "ipsecmb") return &ipsec_mb_backend();
  if (name == "openssl") return &openssl_backend();
  return nullptr;
}

}  // namespace espgw::crypto

#include "crypto/aead.h"

namespace espgw::crypto {

const CryptoBackend* find_backend(std::string_view name) {
  if (name == "ipsec-mb" || name == "ipsecmb") return &ipsec_mb_backend();
  if (name == "openssl") return &openssl_backend();
  return nullptr;
}

}  // namespace espgw::crypto

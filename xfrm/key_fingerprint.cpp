#include "xfrm/key_fingerprint.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <stdexcept>
#include <string_view>

namespace espgw::xfrm {

namespace {
constexpr std::string_view kDomainLabel = "espgw sa key v1";
}

KeyFingerprint key_fingerprint(std::span<const uint8_t> key) {
  KeyFingerprint out{};
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  unsigned length = 0;
  const bool ok = context != nullptr && EVP_DigestInit_ex(context, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(context, kDomainLabel.data(), kDomainLabel.size()) == 1 &&
                  EVP_DigestUpdate(context, key.data(), key.size()) == 1 &&
                  EVP_DigestFinal_ex(context, out.data(), &length) == 1 && length == out.size();
  // EVP_MD_CTX_free cleanses the digest state, which has seen the key.
  EVP_MD_CTX_free(context);
  if (!ok) throw std::runtime_error("SHA-256 of key material failed");
  return out;
}

bool same_fingerprint(const KeyFingerprint& a, const KeyFingerprint& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace espgw::xfrm

// The SA state file (xfrm/sa_state_store.h): whatever is on disk, the parser either
// returns records or refuses, and what it returns writes back to the same records. The
// input is tried twice: as it is (mostly refused by the checksum line) and as a body
// given a correct checksum, so that the record parser itself is reached.
#include <openssl/evp.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "xfrm/sa_state_store.h"

using espgw::xfrm::SaStateStore;

namespace {

std::string with_checksum(const std::string& body) {
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned length = 0;
  EVP_Digest(body.data(), body.size(), digest, &length, EVP_sha256(), nullptr);
  std::string text = body + "sha256 ";
  for (unsigned i = 0; i < length; ++i) {
    char byte[3];
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    text += byte;
  }
  return text + "\n";
}

void check(const std::string& text) {
  const auto records = SaStateStore::parse(text);
  if (!records) return;
  const auto again = SaStateStore::parse(SaStateStore::serialize(*records));
  if (!again || *again != *records) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  check(input);
  check(with_checksum("espgw-sa-state 1\n" + input));
  return 0;
}

// The SA state file (xfrm/sa_state_store.h): whatever is on disk, the parser either
// returns records or refuses, and what it returns writes back to the same records. The
// input is tried twice: as it is (mostly refused by the checksum line) and as a body
// given a correct checksum, so that the record parser itself is reached.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "xfrm/sa_state_store.h"

using espgw::xfrm::SaStateStore;

namespace {

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
  check(SaStateStore::file_text(input));
  return 0;
}

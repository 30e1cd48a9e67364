// The text parsers configuration and tools feed: hex keys, addresses, prefixes and
// algorithm names. Each must either parse or refuse, and what parses must print back
// to something that parses to the same value.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "crypto/aead.h"
#include "esp/ip_address.h"
#include "util/hex.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto bytes = parse_hex(text)) {
    auto again = parse_hex(to_hex(*bytes));
    if (!again || *again != *bytes) abort();
  }
  if (auto prefix = esp::IpPrefix::parse(text)) {
    auto again = esp::IpPrefix::parse(prefix->to_string());
    if (!again || again->length != prefix->length || !(again->address == prefix->address)) abort();
    if (!prefix->contains(prefix->address)) abort();
  }
  if (auto algorithm = crypto::parse_algorithm(text)) {
    if (crypto::parse_algorithm(crypto::algorithm_name(*algorithm)) != algorithm) abort();
  }
  return 0;
}

// The SA state file (xfrm/sa_state_store.h): whatever is on disk, the parser either
// returns records or refuses, and what it returns writes back to the same records. The
// input is tried three ways: as it is (mostly refused by its checksums), as the record
// lines of a version 1 file with a correct checksum (the record parser), and as journal
// operations appended, numbered and checked, after an empty snapshot (the journal's
// parser). A file that reads with a journal line last also reads, as the file without
// that line, when the line is cut short by its last byte (a torn write).
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
  if (!text.ends_with('\n')) return;
  const size_t last_line = text.rfind('\n', text.size() - 2) + 1;
  const std::string_view last(text.data() + last_line, text.size() - last_line);
  if (!last.starts_with("put ") && !last.starts_with("erase ")) return;
  const auto torn = SaStateStore::parse(text.substr(0, text.size() - 1));
  const auto without = SaStateStore::parse(text.substr(0, last_line));
  if (!torn || !without || *torn != *without) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  check(input);
  check(SaStateStore::file_text(input));
  check(SaStateStore::append_journal(SaStateStore::serialize({}), input));
  return 0;
}

// The static SA and policy file: manual keying without charon, for tests, benchmarks and
// fixed tunnels, written the way `ip xfrm state` / `ip xfrm policy` describe them. The
// grammar is documented in configs/static/README.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xfrm/sad_entry.h"
#include "xfrm/spd.h"

namespace espgw::xfrm {

struct StaticConfig {
  std::vector<SadEntry> sas;     // in file order
  std::vector<Policy> policies;  // in file order; ids are 1, 2, ... in that order

  bool operator==(const StaticConfig&) const = default;
};

struct StaticFileResult {
  std::optional<StaticConfig> config;  // present exactly when `errors` is empty
  // "FILE:LINE: message", ordered by line. Messages never contain key material: a key is
  // never echoed, nor is any other word that could be (part of) one.
  std::vector<std::string> errors;
};

// `file_name` is only used to prefix error messages.
StaticFileResult parse_static_file(std::string_view text, std::string_view file_name);
// Reads and parses `path`; a file that can't be read is one error, "PATH: ...". A file
// that group or others may read or write, or that belongs to neither root nor the
// running user, is refused unread (static_file_access_problem), as ssh refuses such a
// private key.
StaticFileResult load_static_file(const std::string& path);
// Why a file of this mode and owner may not hold keys, or nullopt if it may.
std::optional<std::string> static_file_access_problem(uint32_t mode, uint32_t owner,
                                                      uint32_t running_uid);

// Writes `config` back in the file's grammar, keys included. It exists for round-trip
// tests (parse(to_text(x)) == x) and the fuzzer; nothing else may use it, since the
// output holds secrets.
std::string to_text(const StaticConfig& config);

}  // namespace espgw::xfrm

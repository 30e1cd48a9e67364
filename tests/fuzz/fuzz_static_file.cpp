// The static SA/policy file parser on arbitrary text. It must never crash; it must
// return a config or errors, never both; every error must name the file and a line; and
// a config that parses must hold SAs the daemon's SA table can install (SPI not 0, in or
// out, one per (SPI, destination)), load into the SPD as it stands and survive the
// writer: parse(to_text(x)) == x.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string_view>

#include "crypto/algorithms.h"
#include "xfrm/sad_entry.h"
#include "xfrm/spd.h"
#include "xfrm/static_file.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto result = xfrm::parse_static_file(text, "fuzz");
  if (result.config.has_value() == !result.errors.empty()) abort();
  for (const auto& error : result.errors)
    if (!error.starts_with("fuzz:") || error.size() < 8 || error[5] < '1' || error[5] > '9')
      abort();
  if (!result.config) return 0;

  const xfrm::StaticConfig& config = *result.config;
  // Whatever the parser accepts, the models accept too: it checks the same invariants.
  std::set<xfrm::SaId> ids;
  for (const auto& sa : config.sas)
    if (sa.config.spi == 0 || !crypto::valid_transform(sa.config.algorithm, sa.config.integrity) ||
        sa.config.key_material.size() !=
            crypto::key_material_length(sa.config.algorithm, sa.config.integrity) ||
        (sa.direction != xfrm::Direction::out && sa.direction != xfrm::Direction::in) ||
        !ids.insert(xfrm::sa_id_of(sa)).second)
      abort();
  xfrm::Spd spd;
  for (const auto& policy : config.policies)
    if (!spd.add(policy)) abort();

  const auto again = xfrm::parse_static_file(xfrm::to_text(config), "again");
  if (!again.config || !(*again.config == config)) abort();
  return 0;
}

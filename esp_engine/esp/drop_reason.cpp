#include "esp/drop_reason.h"

#include <array>

namespace espgw::esp {

namespace {

#define ESPGW_DROP_REASON_NAME(symbol, name, help) name,
constexpr std::array<std::string_view, kDropReasonCount> kNames = {
    "none", ESPGW_DROP_REASONS(ESPGW_DROP_REASON_NAME)};
#undef ESPGW_DROP_REASON_NAME

#define ESPGW_DROP_REASON_HELP(symbol, name, help) help,
constexpr std::array<std::string_view, kDropReasonCount> kHelp = {
    "not dropped", ESPGW_DROP_REASONS(ESPGW_DROP_REASON_HELP)};
#undef ESPGW_DROP_REASON_HELP

}  // namespace

std::string_view drop_reason_name(DropReason reason) {
  const auto index = static_cast<size_t>(reason);
  return index < kNames.size() ? kNames[index] : "unknown";
}

std::string_view drop_reason_help(DropReason reason) {
  const auto index = static_cast<size_t>(reason);
  return index < kHelp.size() ? kHelp[index] : "";
}

}  // namespace espgw::esp

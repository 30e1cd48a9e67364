#include "daemon/control_schema.h"

#include <algorithm>

#include "daemon/counter_registry.h"

namespace espgw::daemon {

namespace {

template <typename Table>
bool named_in(const Table& table, std::string_view name) {
  return std::any_of(std::begin(table), std::end(table),
                     [&](const auto& entry) { return entry.name == name; });
}

bool listed(const auto& names, std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool stats_number(const std::vector<std::string>& path) {
  if (path.size() == 1) {
    if (listed(kStatsNumbers, path[0])) return true;
    return std::any_of(
        std::begin(kGatewayCounters), std::end(kGatewayCounters),
        [&](const GatewayCounter& c) { return c.place == StatusPlace::top && c.name == path[0]; });
  }
  return path.size() == 2 &&
         std::any_of(std::begin(kStatsCounterSections), std::end(kStatsCounterSections),
                     [&](const CounterSection& s) { return s.key == path[0]; });
}

bool sa_number(const std::vector<std::string>& path) {
  if (path.size() == 3)
    return listed(kSaNumbers, path[2]) || named_in(kOutboundSaCounters, path[2]) ||
           named_in(kInboundSaCounters, path[2]);
  return path.size() == 4 && path[2] == kSaDropsSection;
}

}  // namespace

bool is_number(std::string_view command, const std::vector<std::string>& path) {
  if (path.size() == 1 && path[0] == kStreamed) return true;
  if (command == "stats") return stats_number(path);
  if (command == "list-sas") return !path.empty() && path[0] == "sas" && sa_number(path);
  if (command == "list-policies")
    return path.size() == 3 && path[0] == "policies" && listed(kPolicyNumbers, path[2]);
  return false;
}

}  // namespace espgw::daemon

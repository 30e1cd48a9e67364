#include "daemon/counter_registry.h"

#include <algorithm>

namespace espgw::daemon {

NamedCounters nonzero_drops(const esp::DropCounters& counters) {
  NamedCounters out;
  for (size_t i = 1; i < esp::kDropReasonCount; ++i) {
    const auto reason = static_cast<esp::DropReason>(i);
    if (const uint64_t n = counters.drops(reason))
      out.emplace_back(std::string(esp::drop_reason_name(reason)), n);
  }
  return out;
}

void read_wan_counters(const std::string& prefix, bool udp, const io::WanReceiveStats& stats,
                       NamedCounters& out) {
  for (const auto& counter : kWanCounters)
    if (udp || !counter.udp_only)
      out.emplace_back(prefix + "-" + std::string(counter.name), counter.read(stats));
}

std::string format_counters(const NamedCounters& counters, std::string_view empty) {
  if (counters.empty()) return std::string(empty);
  std::string text;
  for (const auto& [name, value] : counters) text += " " + name + "=" + std::to_string(value);
  return text;
}

std::vector<CounterDoc> all_counters() {
  std::vector<CounterDoc> rows;
  for (const auto& c : kGatewayCounters)
    rows.push_back({c.place == StatusPlace::gateway_drops ? "gateway-drops"
                    : c.place == StatusPlace::wan         ? "wan"
                                                          : "stats",
                    c.name, c.help});
  for (size_t i = 1; i < esp::kDropReasonCount; ++i) {
    const auto reason = static_cast<esp::DropReason>(i);
    rows.push_back({"drop-reason", esp::drop_reason_name(reason), esp::drop_reason_help(reason)});
  }
  for (const auto& c : kWanCounters) rows.push_back({"wan-socket", c.name, c.help});
  for (const auto& c : kPipelineCounters) rows.push_back({"pipeline", c.name, c.help});
  for (const auto& c : kOutboundSaCounters) rows.push_back({"sa", c.name, c.help});
  for (const auto& c : kInboundSaCounters)
    if (std::none_of(std::begin(kOutboundSaCounters), std::end(kOutboundSaCounters),
                     [&](const auto& out) { return out.name == c.name; }))
      rows.push_back({"sa", c.name, c.help});
  for (const auto& c : kControlSocketCounters) rows.push_back({"control-socket", c.name, c.help});
  rows.push_back({"workers", "N", "packets the worker with index N handled"});
  return rows;
}

}  // namespace espgw::daemon

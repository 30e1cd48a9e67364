#include "daemon/counter_baseline.h"

#include <algorithm>

#include "daemon/counter_registry.h"

namespace espgw::daemon {

namespace {

bool is_gauge(const std::string& name) {
  // Per WAN socket the name carries a prefix ("udp0-receive-buffer").
  return std::any_of(std::begin(kGaugeCounters), std::end(kGaugeCounters), [&](auto gauge) {
    return name == gauge || (name.size() > gauge.size() && name.ends_with(gauge) &&
                             name[name.size() - gauge.size() - 1] == '-');
  });
}

std::map<std::string, uint64_t> values_of(const NamedCounters& counters) {
  std::map<std::string, uint64_t> values;
  for (const auto& [name, value] : counters) values[name] = value;
  return values;
}

// The value since the zero point; unchanged below it (a counter that started again).
uint64_t since(uint64_t value, uint64_t base) {
  return value >= base ? value - base : value;
}

void subtract(NamedCounters& counters, const std::map<std::string, uint64_t>& base) {
  for (auto& [name, value] : counters) {
    if (is_gauge(name)) continue;
    if (const auto found = base.find(name); found != base.end())
      value = since(value, found->second);
  }
}

}  // namespace

void CounterBaseline::reset(const GatewayStatus& now, const NamedCounters& control_socket) {
  std::lock_guard lock(mutex_);
  set_ = true;
  gateway_ = values_of(now.gateway);
  gateway_drops_ = values_of(now.gateway_drops);
  engine_drops_ = values_of(now.engine_drops);
  wan_ = values_of(now.wan);
  pipeline_ = values_of(now.pipeline);
  control_socket_ = values_of(control_socket);
  workers_ = now.worker_packets;
  sas_.clear();
  for (const auto& sa : now.sas)
    sas_[{sa.spi, static_cast<int>(sa.direction), sa.destination.to_string()}] =
        SaValues{sa.packets, sa.bytes, sa.late, sa.skipped, values_of(sa.drops)};
}

void CounterBaseline::apply(GatewayStatus& status) const {
  std::lock_guard lock(mutex_);
  if (!set_) return;
  subtract(status.gateway, gateway_);
  subtract(status.gateway_drops, gateway_drops_);
  subtract(status.wan, wan_);
  subtract(status.pipeline, pipeline_);
  // Engine drops and an SA's drops list only non-zero reasons: those back at zero go.
  auto drops_since = [](NamedCounters& drops, const std::map<std::string, uint64_t>& base) {
    subtract(drops, base);
    std::erase_if(drops, [](const auto& drop) { return drop.second == 0; });
  };
  drops_since(status.engine_drops, engine_drops_);
  for (size_t i = 0; i < status.worker_packets.size() && i < workers_.size(); ++i)
    status.worker_packets[i] = since(status.worker_packets[i], workers_[i]);
  for (auto& sa : status.sas) {
    const auto found =
        sas_.find({sa.spi, static_cast<int>(sa.direction), sa.destination.to_string()});
    if (found == sas_.end()) continue;
    const SaValues& base = found->second;
    if (sa.packets < base.packets) continue;  // another SA under the same SPI
    sa.packets -= base.packets;
    sa.bytes = since(sa.bytes, base.bytes);
    sa.late = since(sa.late, base.late);
    sa.skipped = since(sa.skipped, base.skipped);
    drops_since(sa.drops, base.drops);
  }
}

void CounterBaseline::apply_control_socket(NamedCounters& counters) const {
  std::lock_guard lock(mutex_);
  if (set_) subtract(counters, control_socket_);
}

}  // namespace espgw::daemon

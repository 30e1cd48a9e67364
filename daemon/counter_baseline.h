// `espgwctl reset-counters`: a zero point for what the control socket answers. The
// counters themselves are never reset: charon's byte and packet lifetimes, its query-sa
// (swanctl --list-sas) and the counter log read them from the SA's start, and a counter
// that went back to 0 would let an SA outlive its lifetime. Instead the control socket's
// `stats` and `list-sas` (so espgwctl's tables, JSON and metrics) show each counter minus
// its value at the last reset. Gauges (kGaugeCounters) are shown as they are. An SA
// installed after the reset counts from 0; one whose counter is below its baseline (a
// new SA that reused an SPI) is shown unchanged.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "daemon/gateway_status.h"

namespace espgw::daemon {

class CounterBaseline {
 public:
  // Makes `now` (a status with its SA entries) and `control_socket` the zero point.
  void reset(const GatewayStatus& now, const NamedCounters& control_socket);
  // Subtracts the zero point, if any.
  void apply(GatewayStatus& status) const;
  void apply_control_socket(NamedCounters& counters) const;

 private:
  using Values = std::map<std::string, uint64_t>;
  struct SaValues {
    uint64_t packets = 0, bytes = 0, late = 0, skipped = 0;
    Values drops;
  };
  using SaKey = std::tuple<uint32_t, int, std::string>;  // SPI, direction, destination

  mutable std::mutex mutex_;
  bool set_ = false;
  Values gateway_, gateway_drops_, engine_drops_, wan_, pipeline_, control_socket_;
  std::vector<uint64_t> workers_;
  std::map<SaKey, SaValues> sas_;
};

}  // namespace espgw::daemon

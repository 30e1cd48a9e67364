// The periodic counter dump (SIGUSR1, stats-interval): a status snapshot as log lines, with
// the names the status and espgwctl use (daemon/counter_registry.h).
#pragma once

#include "daemon/gateway_status.h"

namespace espgw::daemon {

// Needs the status with its entries (the per-SA lines come from status.sas).
void log_status_counters(const GatewayStatus& status);

}  // namespace espgw::daemon

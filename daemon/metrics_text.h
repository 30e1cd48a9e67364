// Every counter of the registry (daemon/counter_registry.h) as OpenMetrics text, or as
// Prometheus's older text format, which node_exporter's textfile collector reads: what
// `espgwctl metrics` prints. Made from the control socket's `stats` and `list-sas`
// answers, so that a scrape costs one pass over the SAs the daemon already streams.
// Metric names are "espgw_" and the counter's name with '-' as '_' (docs/metrics.md).
#pragma once

#include <string>

#include "vici_bridge/vici_message.h"

namespace espgw::daemon {

enum class MetricsFormat {
  openmetrics,      // application/openmetrics-text 1.0.0, ends with "# EOF"
  prometheus_text,  // text/plain 0.0.4: counters typed under their _total name, no EOF
};

// `stats`: the `stats` answer. `sas`: the `list-sas` answer gathered into its "sas"
// section, or null for no per-SA series.
std::string metrics_text(const vici::Message& stats, const vici::Message* sas,
                         MetricsFormat format);

}  // namespace espgw::daemon

#include "daemon/counter_log.h"

#include "daemon/counter_registry.h"
#include "daemon/log.h"

namespace espgw::daemon {

namespace {

// One line per reason ("  in drop replayed=3"), so that a reason is found with a plain grep.
void log_drops(const char* what, const NamedCounters& drops) {
  for (const auto& [reason, n] : drops)
    log(LogLevel::info, "  %s drop %s=%llu", what, reason.c_str(),
        static_cast<unsigned long long>(n));
}

template <typename Table>
NamedCounters sa_counters(const Table& table, const SaStatus& sa) {
  NamedCounters out;
  read_counters(table, sa, out);
  return out;
}

}  // namespace

void log_status_counters(const GatewayStatus& status) {
  for (const auto& sa : status.sas) {
    if (sa.direction == xfrm::Direction::out) {
      log(LogLevel::info, "sa out spi=0x%08x dst=%s%s", sa.spi, sa.destination.to_string().c_str(),
          format_counters(sa_counters(kOutboundSaCounters, sa)).c_str());
      log_drops("out", sa.drops);
    } else {
      log(LogLevel::info, "sa in spi=0x%08x src=%s%s", sa.spi, sa.source.to_string().c_str(),
          format_counters(sa_counters(kInboundSaCounters, sa)).c_str());
      log_drops("in", sa.drops);
    }
  }
  log_drops("engine", status.engine_drops);
  log(LogLevel::info, "gateway drops:%s", format_counters(status.gateway_drops, " none").c_str());
  log(LogLevel::info, "gateway (not drops):%s lan-mtu=%u", format_counters(status.gateway).c_str(),
      status.lan_mtu);
  log(LogLevel::info, "wan:%s", format_counters(status.wan, " none").c_str());
  log(LogLevel::info, "pipeline:%s", format_counters(status.pipeline, " none").c_str());
  for (size_t i = 0; i < status.worker_packets.size(); ++i)
    log(LogLevel::info, "worker %zu packets=%llu", i,
        static_cast<unsigned long long>(status.worker_packets[i]));
}

}  // namespace espgw::daemon

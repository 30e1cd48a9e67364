// espgw: the userspace ESP gateway daemon.
//   espgw -c /etc/espgw/espgw.conf       (options: daemon_options.h, espgw(8))
// Signals: SIGTERM/SIGINT stop (the TUN device and its routes are removed; the fail-closed
// routes and the nftables table stay, see --release), SIGHUP reloads espgw.conf's run-time
// settings and the static SA file (config_reload.h), SIGUSR1 logs every counter.
#include <net/if.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "daemon/config.h"
#include "daemon/config_reload.h"
#include "daemon/control_service.h"
#include "daemon/daemon_options.h"
#include "daemon/gateway.h"
#include "daemon/heap_trimmer.h"
#include "daemon/log.h"
#include "daemon/service_manager.h"
#include "xfrm/fail_closed_routes.h"
#include "xfrm/kernel_firewall.h"

using namespace espgw::daemon;

namespace {

// --release: opens the protected destinations again after espgw stopped for good. espgw
// leaves its fail-closed routes and its nftables table behind on purpose (SIGTERM, crash),
// so that nothing leaves in clear while it is not running; this removes them, for the
// instance of CONFIG_FILE's tun-name (docs/security_fail_closed.md).
int release_fail_closed(const GatewayConfig& config) {
  if (if_nametoindex(config.tun_name.c_str()) != 0) {
    std::fprintf(stderr, "espgw --release: %s exists, so espgw is running; stop it first\n",
                 config.tun_name.c_str());
    return 1;
  }
  if (!espgw::xfrm::firewall_interface_name_ok(config.tun_name)) {
    std::fprintf(stderr, "espgw --release: tun-name '%s' is not one espgw runs with\n",
                 config.tun_name.c_str());
    return 1;
  }
  int status = 0;
  espgw::xfrm::RtNetlink netlink;
  const auto routing = espgw::xfrm::routing_ids_for(config.tun_name);
  size_t removed = 0;
  if (auto r = espgw::xfrm::release_routing(netlink, routing, removed); !r) {
    std::fprintf(stderr, "espgw --release: %s\n", r.message.c_str());
    status = 1;
  }
  espgw::xfrm::KernelFirewall firewall;
  if (auto r = firewall.run(espgw::xfrm::firewall_removal(config.tun_name), "removing the table");
      !r) {
    std::fprintf(stderr, "espgw --release: %s\n", r.message.c_str());
    status = 1;
  }
  std::fprintf(stderr,
               "espgw --release: %zu route(s) of table %u and bypass rule(s) removed, the "
               "table's rules too; nftables table inet %s removed\n",
               removed, routing.table, espgw::xfrm::firewall_table_name(config.tun_name).c_str());
  return status;
}

// A core dump (or a debugger attached by another user) would show every SA's key: espgw
// is not dumpable unless espgw.conf says `allow-core-dumps = yes`. Non-dumpable from
// the first instruction on; the config may turn it back on before any key is read.
void forbid_core_dumps() {
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

void apply_core_dump_setting(bool allow) {
  if (allow) {
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    log(LogLevel::warn, "allow-core-dumps = yes: a core dump of espgw will hold SA keys");
    return;
  }
  // Also for a core from a kernel that ignores the dumpable flag (a core_pattern pipe
  // helper may still be called; with the limit at 0 it gets nothing to write).
  const rlimit none{0, 0};
  if (setrlimit(RLIMIT_CORE, &none) != 0)
    log(LogLevel::warn, "setrlimit(RLIMIT_CORE, 0): %s", std::strerror(errno));
}

}  // namespace

int main(int argc, char** argv) {
  forbid_core_dumps();
  DaemonOptions options;
  if (const auto exit_status = parse_daemon_options(argc, argv, options)) return *exit_status;
  const std::string& config_path = options.config_path;
  auto parsed = parse_gateway_config(config_path);
  if (!parsed.config) {
    for (const auto& error : parsed.errors)
      std::fprintf(stderr, "%s%s\n", journal_prefix(LogLevel::error), error.c_str());
    return kExitConfigError;
  }
  if (options.release) return release_fail_closed(*parsed.config);
  if (options.check_only) {
    // What auto chose depends on this machine: say it, so that a check is not read as
    // the same answer on a gateway with another CPU count.
    const GatewayConfig& config = *parsed.config;
    const std::string workers =
        config.workers_auto
            ? std::string(config.run_to_completion ? " (workers = auto: inline"
                                                   : " (workers = auto: one per CPU") +
                  " for " + std::to_string(usable_cpu_count()) + " CPUs)"
            : std::string();
    std::fprintf(stderr, "%s: OK%s\n", config_path.c_str(), workers.c_str());
    return 0;
  }
  apply_core_dump_setting(parsed.config->allow_core_dumps);

  // Every thread inherits this mask; only the main thread waits for the signals.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    ServiceManager service_manager;
    Gateway gateway(*parsed.config);
    // charon's plugin and espgwctl connect here; it must hook into the gateway before the
    // readers start.
    std::unique_ptr<ControlService> control;
    ConfigReloader reloader(gateway, config_path, *parsed.config);
    if (!parsed.config->control_socket.empty()) {
      control = std::make_unique<ControlService>(gateway, parsed.config->control_socket);
      control->on_reload([&reloader] { return reloader.reload(); });
    }
    gateway.start();
    if (control) control->start();
    std::unique_ptr<ParallelChildren> parallel;
    if (!parsed.config->parallel_children.empty()) {
      parallel = std::make_unique<ParallelChildren>(parsed.config->charon_vici,
                                                    parsed.config->parallel_children);
      parallel->start();
    }
    service_manager.ready(control ? "forwarding; control socket " + parsed.config->control_socket
                                  : "forwarding; static SAs");
    auto interval = gateway.stats_interval();
    auto next_stats = std::chrono::steady_clock::now() + interval;
    // After charon removed or installed many SAs, what glibc kept of the memory freed on the
    // way goes back.
    HeapTrimmer heap_trimmer({});
    for (;;) {
      // Lifetimes are checked on every wake-up: at most 100 ms of traffic passes an SA's
      // hard limit before it goes out of service.
      timespec timeout{0, 100'000'000};
      const int signal = sigtimedwait(&signals, nullptr, &timeout);
      if (signal == SIGTERM || signal == SIGINT) {
        log(LogLevel::info, "%s: stopping", strsignal(signal));
        service_manager.stopping();
        break;
      }
      if (signal == SIGHUP) reloader.reload();
      if (signal == SIGUSR1) gateway.log_counters();
      gateway.enforce_lifetimes();
      gateway.sync_kernel_firewall();  // the policies' nft rules, when they changed
      heap_trimmer.poll(gateway.sas_retired(), gateway.sas_installed(),
                        std::chrono::steady_clock::now());
      if (const auto now_interval = gateway.stats_interval(); now_interval != interval) {
        interval = now_interval;  // a reload changed it: the next log is one interval away
        next_stats = std::chrono::steady_clock::now() + interval;
      }
      service_manager.poll(std::chrono::steady_clock::now());
      if (interval.count() > 0 && std::chrono::steady_clock::now() >= next_stats) {
        gateway.log_counters();
        next_stats += interval;
      }
    }
    if (parallel) parallel->stop();
    if (control) control->stop();
    gateway.stop();
    gateway.log_counters();
  } catch (const ConfigError& error) {
    log(LogLevel::error, "%s", error.what());
    return kExitConfigError;
  } catch (const std::exception& error) {
    log(LogLevel::error, "%s", error.what());
    return 1;
  }
  return 0;
}

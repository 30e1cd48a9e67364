// espgw: the userspace ESP gateway daemon.
//   espgw -c /etc/espgw/espgw.conf
// Signals: SIGTERM/SIGINT stop (routes and the TUN device are removed), SIGHUP re-reads
// the static SA file, SIGUSR1 logs every counter.
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
#include "daemon/control_service.h"
#include "daemon/gateway.h"
#include "daemon/log.h"

using namespace espgw::daemon;

namespace {

void usage() {
  std::fprintf(stderr, "usage: espgw -c CONFIG_FILE\n       espgw --check -c CONFIG_FILE\n");
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
  std::string config_path;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "-c" || arg == "--config") && i + 1 < argc) {
      config_path = argv[++i];
    } else if (arg == "--check") {
      check_only = true;
    } else {
      usage();
      return 2;
    }
  }
  if (config_path.empty()) {
    usage();
    return 2;
  }
  auto parsed = parse_gateway_config(config_path);
  if (!parsed.config) {
    for (const auto& error : parsed.errors) std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  if (check_only) {
    std::fprintf(stderr, "%s: OK\n", config_path.c_str());
    return 0;
  }
  apply_core_dump_setting(parsed.config->allow_core_dumps);

  // Every thread inherits this mask; only the main thread waits for the signals.
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    Gateway gateway(*parsed.config);
    // charon's plugin and espgwctl connect here; it must hook into the gateway before the
    // readers start.
    std::unique_ptr<ControlService> control;
    if (!parsed.config->control_socket.empty())
      control = std::make_unique<ControlService>(gateway, parsed.config->control_socket);
    gateway.start();
    if (control) control->start();
    std::unique_ptr<ParallelChildren> parallel;
    if (!parsed.config->parallel_children.empty()) {
      parallel = std::make_unique<ParallelChildren>(parsed.config->charon_vici,
                                                    parsed.config->parallel_children);
      parallel->start();
    }
    const auto interval = parsed.config->stats_interval;
    auto next_stats = std::chrono::steady_clock::now() + interval;
    for (;;) {
      // Lifetimes are checked on every wake-up: at most 100 ms of traffic passes an SA's
      // hard limit before it goes out of service.
      timespec timeout{0, 100'000'000};
      const int signal = sigtimedwait(&signals, nullptr, &timeout);
      if (signal == SIGTERM || signal == SIGINT) {
        log(LogLevel::info, "%s: stopping", strsignal(signal));
        break;
      }
      if (signal == SIGHUP) gateway.reload();
      if (signal == SIGUSR1) gateway.log_counters();
      gateway.enforce_lifetimes();
      if (interval.count() > 0 && std::chrono::steady_clock::now() >= next_stats) {
        gateway.log_counters();
        next_stats += interval;
      }
    }
    if (parallel) parallel->stop();
    if (control) control->stop();
    gateway.stop();
    gateway.log_counters();
  } catch (const std::exception& error) {
    log(LogLevel::error, "%s", error.what());
    return 1;
  }
  return 0;
}

#include "daemon/daemon_options.h"

#include <getopt.h>

#include <cstdio>

namespace espgw::daemon {

namespace {

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "Usage: espgw [OPTION]...\n"
               "The espgw userspace IPsec ESP gateway daemon.\n\n"
               "  -c, --config FILE  configuration file (default /etc/espgw/espgw.conf)\n"
               "      --check        validate the configuration file and exit\n"
               "      --release      remove the fail-closed routes and nftables table a\n"
               "                     stopped espgw left for FILE's tun-name, and exit\n"
               "  -h, --help         show this help and exit\n"
               "  -V, --version      show the version and exit\n\n"
               "Signals: SIGTERM/SIGINT stop, SIGHUP reloads espgw.conf's run-time settings\n"
               "and the static SA file, SIGUSR1 logs every counter.\n"
               "Exit status: 0 stopped normally (or --check passed), 1 run-time error,\n"
               "2 bad command line, 78 configuration error. See espgw(8), espgw.conf(5).\n");
}

}  // namespace

std::optional<int> parse_daemon_options(int argc, char** argv, DaemonOptions& options) {
  enum { kCheck = 256, kRelease };
  static const option kLong[] = {
      {"config", required_argument, nullptr, 'c'}, {"check", no_argument, nullptr, kCheck},
      {"release", no_argument, nullptr, kRelease}, {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'V'},      {nullptr, 0, nullptr, 0}};
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, "c:hV", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'c':
        options.config_path = optarg;
        break;
      case kCheck:
        options.check_only = true;
        break;
      case kRelease:
        options.release = true;
        break;
      case 'h':
        print_usage(stdout);
        return kExitOk;
      case 'V':
        std::printf("espgw %s\n", ESPGW_VERSION);
        return kExitOk;
      default:  // getopt_long said what was wrong
        std::fprintf(stderr, "Try 'espgw --help' for more information.\n");
        return kExitUsage;
    }
  }
  if (optind < argc) {
    std::fprintf(stderr, "espgw: unexpected argument '%s'\nTry 'espgw --help'.\n", argv[optind]);
    return kExitUsage;
  }
  return std::nullopt;
}

}  // namespace espgw::daemon

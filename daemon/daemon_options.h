// espgw's command line (getopt_long): what `espgw --help` prints and the options' meaning.
// docs/man/espgw.8 describes the same options; keep them together.
#pragma once

#include <optional>
#include <string>

namespace espgw::daemon {

struct DaemonOptions {
  std::string config_path = "/etc/espgw/espgw.conf";
  bool check_only = false;  // --check: validate the configuration, start nothing
  bool release = false;     // --release: remove the fail-closed routes and nftables table
};

// The exit statuses of espgw (docs/man/espgw.8, EXIT STATUS).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a bad configuration, or a failure while running
inline constexpr int kExitUsage = 2;    // a bad command line

// Parses argv. Returns the exit status when the command line asks for none of the
// daemon's work (--help, --version) or is wrong, after printing what it has to say.
std::optional<int> parse_daemon_options(int argc, char** argv, DaemonOptions& options);

}  // namespace espgw::daemon

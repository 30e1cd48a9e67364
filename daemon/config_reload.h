// Reloading espgw.conf without a restart (SIGHUP, `espgwctl reload`). A restart would
// take every CHILD_SA down and make charon rekey them all, so the settings that can
// change while SAs run do: the log level, the counter log's interval and the WAN readers'
// queue-delay gate; the static SA file is re-read (Gateway::reload keeps the state of the
// SAs that did not change). Every other changed key is logged as needing a restart, and
// espgw keeps running with its old value. A file with errors changes nothing.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.h"

namespace espgw::daemon {

class Gateway;

// The keys of espgw.conf that a reload applies.
inline constexpr std::string_view kRuntimeKeys[] = {
    "log-level", "stats-interval", "queue-delay-target-us", "queue-delay-interval-us"};

// The keys whose value differs between `running` and `next` (as written; a key set in
// one file only counts as changed), in name order.
std::vector<std::string> changed_keys(const GatewayConfig& running, const GatewayConfig& next);

struct ReloadOutcome {
  bool ok = true;                         // false: the file had errors, nothing changed
  std::vector<std::string> errors;        // "FILE:LINE: message", or the static file's
  std::vector<std::string> applied;       // runtime keys that changed
  std::vector<std::string> need_restart;  // other keys that changed, not applied
  bool static_file_reloaded = false;
};

class ConfigReloader {
 public:
  // `running`: the configuration `gateway` was built from, read from `config_path`.
  ConfigReloader(Gateway& gateway, std::string config_path, GatewayConfig running);

  // Re-reads the file and applies it as above, logging what it did. Thread-safe: a
  // signal and a control socket request may come together.
  ReloadOutcome reload();

 private:
  Gateway& gateway_;
  const std::string config_path_;
  std::mutex mutex_;
  GatewayConfig running_;  // its runtime keys follow the reloads
};

}  // namespace espgw::daemon

// The control socket's administration commands, for espgwctl: `reload` re-reads
// espgw.conf (what SIGHUP does) and answers what it applied and what needs a restart;
// `log-level` reads the log level, or sets it until the next reload or restart;
// `reset-counters` makes now the zero point of stats and list-sas (counter_baseline.h).
#include "daemon/control_service.h"
#include "daemon/log.h"

namespace espgw::daemon {

namespace {

constexpr const char* kLevelNames[] = {"error", "warn", "info", "debug"};

}  // namespace

vici::Message ControlService::reload() {
  Message response;
  if (!reload_) {
    response.set_bool("success", false);
    response.set("errmsg", "this espgw has no configuration file to reload");
    return response;
  }
  const ReloadOutcome outcome = reload_();
  response.set_bool("success", outcome.ok);
  if (!outcome.ok) response.set("errmsg", "reload refused or incomplete: see errors");
  response.set_list("applied", outcome.applied);
  response.set_list("need-restart", outcome.need_restart);
  response.set_list("errors", outcome.errors);
  return response;
}

vici::Message ControlService::log_level(const Message& request) {
  Message response;
  if (const std::string* level = request.value("level")) {
    const auto parsed = parse_log_level(*level);
    if (!parsed) {
      response.set_bool("success", false);
      response.set("errmsg", "level must be error, warn, info or debug");
      return response;
    }
    set_log_level(*parsed);
    log(LogLevel::warn, "log level set to %s through the control socket", level->c_str());
  }
  response.set_bool("success", true);
  response.set("level", kLevelNames[static_cast<int>(daemon::log_level())]);
  return response;
}

vici::Message ControlService::reset_counters() {
  baseline_.reset(gateway_.status(), control_socket_counters());
  log(LogLevel::info, "counters reset for the control socket's answers (espgwctl)");
  Message response;
  response.set_bool("success", true);
  return response;
}

}  // namespace espgw::daemon

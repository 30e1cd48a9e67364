#include "daemon/config_reload.h"

#include <algorithm>
#include <set>

#include "daemon/gateway.h"
#include "daemon/log.h"

namespace espgw::daemon {

namespace {

bool is_runtime_key(std::string_view key) {
  return std::find(std::begin(kRuntimeKeys), std::end(kRuntimeKeys), key) != std::end(kRuntimeKeys);
}

std::string written_or_default(const GatewayConfig& config, const std::string& key) {
  const auto found = config.written.find(key);
  return found == config.written.end() ? "(default)" : found->second;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& key : keys) text += (text.empty() ? "" : ", ") + key;
  return text;
}

}  // namespace

std::vector<std::string> changed_keys(const GatewayConfig& running, const GatewayConfig& next) {
  std::set<std::string> keys;
  for (const auto& [key, value] : running.written) keys.insert(key);
  for (const auto& [key, value] : next.written) keys.insert(key);
  std::vector<std::string> changed;
  for (const auto& key : keys) {
    const auto a = running.written.find(key);
    const auto b = next.written.find(key);
    if (a == running.written.end() || b == next.written.end() || a->second != b->second)
      changed.push_back(key);
  }
  return changed;
}

void Gateway::apply_runtime_settings(const GatewayConfig& next) {
  std::lock_guard lock(control_mutex_);
  config_.log_level = next.log_level;
  config_.stats_interval = next.stats_interval;
  config_.queue_delay_target = next.queue_delay_target;
  config_.queue_delay_interval = next.queue_delay_interval;
  set_log_level(next.log_level);
  stats_interval_s_.store(next.stats_interval.count(), std::memory_order_relaxed);
  inbound_path_->set_queue_delay(queue_delay_target_of(config_), config_.queue_delay_interval);
}

ConfigReloader::ConfigReloader(Gateway& gateway, std::string config_path, GatewayConfig running)
    : gateway_(gateway), config_path_(std::move(config_path)), running_(std::move(running)) {}

ReloadOutcome ConfigReloader::reload() {
  std::lock_guard lock(mutex_);
  ReloadOutcome outcome;
  auto parsed = parse_gateway_config(config_path_);
  if (!parsed.config) {
    outcome.ok = false;
    outcome.errors = parsed.errors;
    for (const auto& error : parsed.errors) log(LogLevel::error, "%s", error.c_str());
    log(LogLevel::error, "reload of %s refused: keeping the running configuration",
        config_path_.c_str());
    return outcome;
  }
  GatewayConfig& next = *parsed.config;
  for (const auto& key : changed_keys(running_, next)) {
    if (is_runtime_key(key)) {
      outcome.applied.push_back(key);
      continue;
    }
    outcome.need_restart.push_back(key);
    log(LogLevel::warn,
        "reload: '%s' changed to '%s'; it takes effect at the next restart, espgw keeps '%s'",
        key.c_str(), written_or_default(next, key).c_str(),
        written_or_default(running_, key).c_str());
  }
  gateway_.apply_runtime_settings(next);
  for (const auto& key : outcome.applied) {
    running_.written.erase(key);
    if (const auto value = next.written.find(key); value != next.written.end())
      running_.written[key] = value->second;
  }
  running_.log_level = next.log_level;
  running_.stats_interval = next.stats_interval;
  running_.queue_delay_target = next.queue_delay_target;
  running_.queue_delay_interval = next.queue_delay_interval;
  log(LogLevel::info, "reloaded %s: applied %s", config_path_.c_str(),
      outcome.applied.empty() ? "no changed setting" : joined(outcome.applied).c_str());
  outcome.static_file_reloaded = gateway_.reload();
  if (!outcome.static_file_reloaded) {
    outcome.ok = false;
    outcome.errors.push_back("the static SA file was refused (see the log); its SAs are unchanged");
  }
  return outcome;
}

}  // namespace espgw::daemon

#include "daemon/service_manager.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstring>

#include "daemon/log.h"

namespace espgw::daemon {

ServiceManager::ServiceManager() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) {
    watchdog_interval_ = std::chrono::microseconds(usec);
    log(LogLevel::info, "systemd watchdog: pinging every %llu ms",
        static_cast<unsigned long long>(usec / 2000));
  }
}

void ServiceManager::ready(const std::string& status) {
  const std::string message = "READY=1\nSTATUS=" + status;
  const int sent = sd_notify(0, message.c_str());
  if (sent < 0) log(LogLevel::warn, "sd_notify(READY=1): %s", std::strerror(-sent));
}

void ServiceManager::stopping() {
  sd_notify(0, "STOPPING=1");
}

void ServiceManager::poll(std::chrono::steady_clock::time_point now) {
  if (watchdog_interval_.count() == 0 || now < next_ping_) return;
  sd_notify(0, "WATCHDOG=1");
  next_ping_ = now + watchdog_interval_ / 2;
}

}  // namespace espgw::daemon

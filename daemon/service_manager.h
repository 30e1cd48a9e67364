// What espgw tells systemd when the unit runs it (Type=notify): that the data path is
// ready, that it is alive (the watchdog), and that it is stopping. Every call is a no-op
// when espgw was not started by systemd (no NOTIFY_SOCKET), so the daemon behaves the
// same from a shell or a test.
#pragma once

#include <chrono>
#include <string>

namespace espgw::daemon {

// The exit status for a configuration that espgw refuses (EX_CONFIG of sysexits.h). The
// unit names it in RestartPreventExitStatus=: restarting cannot fix the file.
inline constexpr int kExitConfigError = 78;

class ServiceManager {
 public:
  // Reads WATCHDOG_USEC/WATCHDOG_PID (sd_watchdog_enabled) once.
  ServiceManager();

  // READY=1 once the TUN device, the WAN sockets and the control socket are up: charon
  // (ordered after espgw) then finds the control socket, and `systemctl start` returns.
  void ready(const std::string& status);
  void stopping();

  // Called from the main loop on every wake-up (at least every 100 ms): pings the
  // watchdog at half its interval. The main loop checks SA lifetimes and the kernel
  // firewall, which take the SA table's lock that the control path and the data path's
  // SA changes take too, so a wedged gateway stops the pings and systemd restarts it.
  void poll(std::chrono::steady_clock::time_point now);

 private:
  std::chrono::microseconds watchdog_interval_{0};
  std::chrono::steady_clock::time_point next_ping_{};
};

}  // namespace espgw::daemon

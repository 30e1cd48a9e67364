// espgw.conf's parser (daemon/config.cpp), `local-address` lists above all: any text must
// parse or be refused with errors, and what parses holds at least one local address, each
// specific (not 0.0.0.0 or ::) and listed once.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "daemon/config.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Always a control socket, so that local-address is what decides.
  const std::string text = std::string(reinterpret_cast<const char*>(data), size) +
                           "\ncontrol-socket = /run/espgw/fuzz.sock\n";
  const auto result = daemon::parse_gateway_config_text(text, "/nonexistent/fuzz.conf");
  if (result.config.has_value() == !result.errors.empty()) abort();
  if (!result.config) return 0;
  const auto& addresses = result.config->local_addresses;
  if (addresses.empty()) abort();
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].family != 4 && addresses[i].family != 6) abort();
    if (addresses[i].bytes == std::array<uint8_t, 16>{}) abort();
    if (std::count(addresses.begin(), addresses.end(), addresses[i]) != 1) abort();
  }
  // Route-based interfaces: ids from 1 and names each once, none the default device's.
  const auto& interfaces = result.config->interfaces;
  for (const auto& interface : interfaces) {
    if (interface.if_id == 0 || interface.name.empty() || interface.name.size() > 15) abort();
    if (interface.name == result.config->tun_name) abort();
    if (std::count_if(interfaces.begin(), interfaces.end(), [&](const auto& other) {
          return other.if_id == interface.if_id || other.name == interface.name;
        }) != 1)
      abort();
  }
  return 0;
}

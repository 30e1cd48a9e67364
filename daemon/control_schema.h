// Which values of the control socket's answers are numbers. VICI carries every value as
// bytes, so espgwctl --json asks this description of the answers rather than guessing from
// the bytes (an SPI, a slot or a name may look like digits and stay strings). Counters
// take their names from daemon/counter_registry.h; the other numbers are listed here, and
// control_service.cpp sets them under these names. A test checks that every value an
// answer sets as digits is described as a number.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace espgw::daemon {

// Numbers at the top of `stats`, besides the gateway's counters shown there.
inline constexpr std::string_view kStatsNumbers[] = {"tunnel-mtu", "lan-mtu", "sas", "charon-sas"};
// Numbers of an SA in `list-sas`, besides its counters.
inline constexpr std::string_view kSaNumbers[] = {"reqid", "idle-ms", "age-seconds", "src-port",
                                                  "dst-port"};
// Numbers of a policy in `list-policies`.
inline constexpr std::string_view kPolicyNumbers[] = {"protocol", "priority", "reqid"};
// How many entries of a listing went out as events (list-sas, list-policies).
inline constexpr std::string_view kStreamed = "streamed";

// `command`: the request ("stats", "list-sas", "list-policies"); `path`: the names from
// its answer's root to the value.
bool is_number(std::string_view command, const std::vector<std::string>& path);

}  // namespace espgw::daemon

// The SAs' lifetimes (RFC 4301 4.4.2.1): bytes, packets and seconds against each SA's soft
// and hard limits, and an outbound SA's sequence numbers. Soft: logged once (charon is
// asked for a rekey). Hard: the SA is taken out of service but stays installed until
// charon (or a reload) removes it.
#include <type_traits>

#include "daemon/log.h"
#include "daemon/sa_table.h"

namespace espgw::daemon {

std::vector<SaTable::Expiry> SaTable::enforce_lifetimes(std::chrono::steady_clock::time_point now) {
  std::vector<Expiry> expiries;
  auto check = [&](const char* direction, auto& installed, auto&& take_out_of_service) {
    const xfrm::SadEntry& entry = installed.entry;
    LifetimeTracking& tracking = installed.lifetime;
    const esp::SaCounters& counters = installed.sa->counters();
    const uint64_t packets = counters.packets();
    if (packets != tracking.packets_seen) {
      tracking.packets_seen = packets;
      tracking.last_used = now;
    }
    const uint64_t seconds = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(now - tracking.added_at).count());
    auto state = xfrm::check(entry.lifetimes, counters.bytes(), packets, seconds);
    // An outbound SA also expires with its sequence numbers, whatever its lifetimes say.
    if constexpr (std::is_same_v<std::decay_t<decltype(installed)>, OutboundEntry>)
      state =
          std::max(state, xfrm::check_sequence(installed.sa->last_sequence(), entry.config.esn));
    if (state <= tracking.reported) return;
    tracking.reported = state;
    // charon rekeys its own SAs; a static SA's expiry is only logged.
    if (installed.from_charon)
      expiries.push_back(
          {entry.config.spi, entry.config.tunnel_destination, state == xfrm::LifetimeState::hard});
    const bool hard = state == xfrm::LifetimeState::hard;
    log(LogLevel::warn,
        "SA %s spi 0x%08x: %s lifetime reached (%llu bytes, %llu packets, %llu s); %s", direction,
        entry.config.spi, hard ? "hard" : "soft", static_cast<unsigned long long>(counters.bytes()),
        static_cast<unsigned long long>(counters.packets()),
        static_cast<unsigned long long>(seconds), hard ? "out of service" : "a rekey is due");
    if (hard) take_out_of_service();
  };
  const auto lookup = lookup_.load();
  for (auto& [key, e] : outbound_) {
    check("out", *e, [&, &entry = e] {
      if (auto group = lookup->groups.find(entry->entry.reqid); group != lookup->groups.end())
        group->second->remove_member(group_slot(entry->entry), entry->channel.get());
    });
  }
  for (auto& [key, e] : inbound_) {
    check("in", *e, [&, &entry = e] { pipeline_.remove_inbound(entry->entry.config.spi); });
  }
  return expiries;
}

}  // namespace espgw::daemon

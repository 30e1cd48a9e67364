// The record of one Security Association (RFC 4301 4.4.2): what the static SA file and
// charon's requests describe, and what the daemon's SA table (daemon/sa_table.h, the one
// SAD) installs. Found by (SPI, destination address) as in the kernel, with its direction,
// its SA group (reqid) and its lifetimes. The engine's run-time SA state (sequence
// numbers, replay windows, counters) is not here.
#pragma once

#include <cstdint>

#include "esp/ip_address.h"
#include "esp/security_association.h"
#include "xfrm/direction.h"
#include "xfrm/lifetime.h"

namespace espgw::xfrm {

struct SadEntry {
  esp::SaConfig config;                  // its spi and tunnel_destination are the SAD key
  Direction direction = Direction::out;  // out or in
  uint32_t reqid = 0;                    // the SA group policies name; 0 = in no group
  Lifetimes lifetimes;
  // Outbound: which slot of its SA group the SA fills. A CHILD_SA's rekeyed SA takes its
  // predecessor's slot, so no flow moves; charon's SAs use their IKE_SA's unique id,
  // 0 means the SPI (static SAs, which are never rekeyed).
  uint64_t group_slot = 0;
  // Route-based VPN: the interface id (charon's if_id_in for an inbound SA, if_id_out for
  // an outbound one). An inbound SA delivers into that interface's TUN device; 0 is the
  // default device.
  uint32_t if_id = 0;
};

// What names an SA, in the kernel as with charon: its SPI (host order) and destination.
struct SaId {
  uint32_t spi = 0;
  esp::IpAddress destination;
  auto operator<=>(const SaId&) const = default;
};
inline SaId sa_id_of(const SadEntry& entry) {
  return {entry.config.spi, entry.config.tunnel_destination};
}

// Field by field, key material included (the config types have no comparison of their
// own). For tests and change detection, not for anything secret-dependent.
bool operator==(const SadEntry& a, const SadEntry& b);
// Every field but the key material: for a copy whose key has been wiped, compared with
// key fingerprints (xfrm/key_fingerprint.h) for the rest.
bool same_except_key(const SadEntry& a, const SadEntry& b);

}  // namespace espgw::xfrm

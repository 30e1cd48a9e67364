// A snapshot of the gateway's state for espgwctl and the control socket: SAs with their
// counters and drop reasons, ECMP groups, policies, gateway-level drops and per-worker
// load. Plain data, no key material.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/direction.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

using NamedCounters = std::vector<std::pair<std::string, uint64_t>>;

struct SaStatus {
  uint32_t spi = 0;
  xfrm::Direction direction = xfrm::Direction::out;
  bool from_charon = false;  // else from the static SA file
  esp::IpAddress source;
  esp::IpAddress destination;
  std::string algorithm;
  bool udp_encapsulation = false;
  uint16_t udp_source_port = 0;  // with UDP encapsulation: the SA's ports (NAT-T)
  uint16_t udp_destination_port = 0;
  bool esn = false;
  uint32_t reqid = 0;
  std::string interface;  // the TUN device: tun-name, or a route-based interface's
  uint64_t packets = 0;
  uint64_t bytes = 0;
  NamedCounters drops;              // reasons with a non-zero count
  std::optional<uint64_t> idle_ms;  // since the SA last carried a packet; none yet if empty
  std::string lifetime;             // none, soft or hard (hard: out of service)
  uint64_t age_seconds = 0;
  size_t in_flight = 0;  // outbound: packets between sequence number and send
  uint64_t late = 0;     // inbound: released after their gap was skipped
  uint64_t skipped = 0;  // inbound: gaps the reorder buffer gave up on
};

struct GroupStatus {
  uint32_t reqid = 0;
  std::vector<uint32_t> member_spis;  // outbound SAs that flows are hashed over
  // The members' slots (rendezvous keys, sorted): flows map to slots, so a set that stays
  // the same across a rekey means no flow moved.
  std::vector<uint64_t> member_slots;
};

struct GatewayStatus {
  std::string tun_name;
  unsigned tunnel_mtu = 0;
  unsigned lan_mtu = 0;         // larger TCP packets from the tunnel are cut to fit it
  bool jumbo_segments = false;  // TSO super-packets cut at the tunnel MTU
  std::string tun_rps;          // receive steering: "off", "CPUs MASK" or "not set: why"
  std::string crypto_backend;
  // The WAN addresses, each with the prefix its sockets' counters carry ("192.0.2.1",
  // "a1-2001:db8::1").
  std::vector<std::string> local_addresses;
  // Filled in even without the lists.
  size_t sa_count = 0;         // outbound and inbound
  size_t charon_sa_count = 0;  // of which charon installed
  std::vector<SaStatus> sas;
  std::vector<GroupStatus> groups;
  std::vector<xfrm::Policy> policies;
  // Counters by name (daemon/counter_registry.h). `gateway`: the gateway's counters shown
  // at the top of `stats` (tun-resegmented).
  NamedCounters gateway;
  NamedCounters gateway_drops;
  NamedCounters engine_drops;
  NamedCounters wan;  // socket-level counters (kernel drops, GRO), queue-delay-ecn-marked
  // Not drops: waits that keep flows in order across SAs (fences), and reorder gaps given
  // up because the packet pool ran dry.
  NamedCounters pipeline;
  std::vector<uint64_t> worker_packets;
};

}  // namespace espgw::daemon

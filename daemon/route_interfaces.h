// Route-based VPN: charon's if_id_in / if_id_out, as with Linux XFRM interfaces. Each
// interface id of espgw.conf (`interface = IF_ID NAME`) has a TUN device of its own with
// its own SPD, TUN readers and TUN writer:
//   - a packet read from interface X is looked up only in X's policies (those whose
//     if_id is X's), so several peers' 0.0.0.0/0 and ::/0 policies coexist and the
//     routing table (static routes, a routing daemon) chooses the tunnel;
//   - an inbound SA whose if_id is X delivers its decrypted packets into X's device.
// espgw adds no route and no nftables rule for these policies: what goes into an
// interface is the operator's routing, as with XFRM interfaces (docs/route_based_vpn.md).
// Interface id 0 is the default device (tun-name), with its SPD in the OutboundLookup.
//
// The interfaces are fixed at start: their SPDs change in place (each has its own lock),
// the map from ids to interfaces never changes, so any thread may look one up.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/acquire_raiser.h"
#include "daemon/config.h"
#include "daemon/gateway_counters.h"
#include "daemon/inbound_path.h"
#include "daemon/outbound_lookup.h"
#include "daemon/outbound_path.h"
#include "io/tun_device.h"
#include "pipeline/pipeline.h"
#include "xfrm/netlink.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

struct RouteInterfaceDevice {
  uint32_t if_id = 0;
  std::unique_ptr<io::TunDevice> tun;
  std::shared_ptr<xfrm::Spd> spd = std::make_shared<xfrm::Spd>();
  std::unique_ptr<TunWriter> writer;       // its inbound SAs' sink
  std::unique_ptr<OutboundPath> outbound;  // its TUN readers, looking up in `spd`
};

class RouteInterfaces {
 public:
  // What every interface's readers and writer share with the default device's.
  struct Shared {
    pipeline::Pipeline& pipeline;
    const PublishedOutboundLookup& lookup;  // for the SA groups by reqid
    const std::atomic<unsigned>& segment_limit;
    const std::atomic<unsigned>& lan_mtu;
    GatewayCounters& counters;
    AcquireRaiser& acquires;
    uint64_t flow_seed;
    const std::atomic<bool>& running;
  };
  // Opens a TUN device per interface (non-blocking queues, like the default device's).
  // Throws std::runtime_error naming the device that could not be made.
  RouteInterfaces(const std::vector<RouteInterface>& interfaces, unsigned queues, bool offload,
                  const Shared& shared);
  RouteInterfaces(const RouteInterfaces&) = delete;
  RouteInterfaces& operator=(const RouteInterfaces&) = delete;

  // Sets each device's MTU (the tunnel MTU) and brings it up; throws std::runtime_error.
  void bring_up(xfrm::RtNetlink& netlink, unsigned mtu);
  // The tunnel MTU changed: every device's; the last failure, if any.
  xfrm::Result set_mtu(xfrm::RtNetlink& netlink, unsigned mtu);
  // One reader thread per queue of each device, added to `threads`.
  void start_readers(std::vector<std::thread>& threads);

  // A policy of an interface id into (out of) that interface's SPD. add_policy is false
  // (logged) for an id no interface has; the control service refuses those first.
  bool add_policy(const xfrm::Policy& policy);
  void remove_policy(const xfrm::Policy& policy);
  // The policy of that id in the SPD of interface `if_id`; nullopt if none.
  std::optional<xfrm::Policy> find_policy(uint32_t if_id, uint32_t id) const;

  // The interface of `if_id`; nullptr for 0 and for an id espgw.conf does not name.
  RouteInterfaceDevice* find(uint32_t if_id);
  const RouteInterfaceDevice* find(uint32_t if_id) const;
  std::vector<RouteInterfaceDevice*> all();
  // "interface id N has no TUN device ..." for an id that is neither 0 nor configured.
  std::string refusal(uint32_t if_id) const;
  // The device's name by id; "" for 0 and unknown ids.
  std::string name_of(uint32_t if_id) const;

 private:
  std::map<uint32_t, RouteInterfaceDevice> devices_;
};

}  // namespace espgw::daemon

// The gateway's WAN side per local address (`local-address`, one or several, IPv4 and
// IPv6): each address has sockets of its own, opened when something needs them, and an
// SA uses the ones of its local end: an outbound SA sends from its outer source address,
// an inbound SA receives on its outer destination. An SA whose local end is none of the
// addresses is refused (refusal()), never sent from another address. docs/gateway_wan.md.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/outbound_path.h"
#include "esp/ip_address.h"
#include "io/wan_socket.h"
#include "xfrm/sad_entry.h"

namespace espgw::daemon {

// One local address's sockets. Each is opened on first use and kept until the gateway goes.
struct WanEndpoint {
  esp::IpAddress address;
  // What its sockets are called in the stats and reader threads: "" for the first address
  // (so a gateway of one address names them as before: udp0, raw), "a1-", "a2-"... after.
  std::string prefix;
  // `wan-readers` sockets on address:udp-port (SO_REUSEPORT), a reader thread each; the
  // first also sends.
  std::vector<std::unique_ptr<io::WanSocket>> udp;
  // Raw ESP bound to the address: the kernel hands a raw socket only the packets sent to
  // its address, so one per address sees each packet once.
  std::unique_ptr<io::WanSocket> raw;
  std::unique_ptr<io::WanSocket> ike;  // UDP ike-port (500) when charon is attached
  // What sends through udp.front() and raw: the PeerSinks of the SAs leaving from here.
  std::unique_ptr<WanBatchSender> udp_sender;
  std::unique_ptr<WanBatchSender> raw_sender;
};

class WanEndpoints {
 public:
  explicit WanEndpoints(const std::vector<esp::IpAddress>& addresses);

  // The endpoint of a local address; null when it is not one of them.
  WanEndpoint* find(const esp::IpAddress& address);
  // Where IKE to `peer` leaves when charon names `source`: that address's endpoint; an
  // unset or unspecified source (0.0.0.0, ::) takes the first address of the peer's
  // family. Null when there is none.
  WanEndpoint* for_ike(const std::optional<esp::IpAddress>& source, const esp::IpAddress& peer);
  // Why an SA cannot be installed on this gateway's addresses; nullopt when it can.
  std::optional<std::string> refusal(const xfrm::SadEntry& entry) const;
  // "192.0.2.1, 2001:db8::1"
  std::string list() const;

  std::vector<std::unique_ptr<WanEndpoint>>& all() { return endpoints_; }
  const std::vector<std::unique_ptr<WanEndpoint>>& all() const { return endpoints_; }

 private:
  // unique_ptr: senders and readers keep references to an endpoint's sockets.
  std::vector<std::unique_ptr<WanEndpoint>> endpoints_;
};

// The local end of an SA: its outer source when outbound, its outer destination when inbound.
const esp::IpAddress& local_end(const xfrm::SadEntry& entry);

}  // namespace espgw::daemon

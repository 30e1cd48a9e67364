// RtNetlink: espgw's rtnetlink client (libmnl, NETLINK_ROUTE). It owns one netlink socket
// and configures what the gateway needs around its TUN device: link up/down, MTU, addresses,
// the routes for remote subnets, and the path MTU the kernel would use towards a destination.
// No shelling out to `ip`.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "esp/ip_address.h"

struct mnl_socket;
struct nlmsghdr;

namespace espgw::xfrm {

// Outcome of one netlink operation. Every operation reports through a Result rather than
// throwing: callers (the daemon reacting to policies coming and going) routinely treat some
// failures as fine, e.g. a route that already exists, and branching on `error` is simpler
// than catching. `error` is a positive errno (the kernel's own code where it answered);
// `message` names the operation and the interface/prefix and, when the kernel gave one, its
// extended-ack text, e.g. "add route 10.1.0.0/16 dev espgw0: route already exists (EEXIST)".
struct Result {
  bool ok = true;
  int error = 0;
  std::string message;

  explicit operator bool() const { return ok; }
  // Adding a route or address that is already there: idempotent callers accept this.
  bool already_exists() const { return error == EEXIST; }
};

// An MTU read from the kernel, with the interface it belongs to.
struct MtuResult : Result {
  uint32_t mtu = 0;
  std::string interface;  // for route_mtu: the output interface the kernel chose
};

// Not thread-safe: one object serves one thread, and its requests run strictly one after the
// other (each waits for the kernel's acknowledgement before returning).
class RtNetlink {
 public:
  // Routes we install carry this rtm_protocol, so `ip route show proto 245` lists exactly
  // espgw's routes and remove_route never deletes a route somebody else installed. 245 is
  // not assigned in the kernel's uapi or iproute2's rt_protos.
  static constexpr uint8_t kRouteProtocol = 245;
  static constexpr uint32_t kMainTable = 254;  // RT_TABLE_MAIN

  // Opens and binds the NETLINK_ROUTE socket. Throws std::system_error if that fails: the
  // object is useless without it, and it happens once at daemon start.
  RtNetlink();
  ~RtNetlink();
  RtNetlink(RtNetlink&&) noexcept;
  RtNetlink& operator=(RtNetlink&&) noexcept;
  RtNetlink(const RtNetlink&) = delete;
  RtNetlink& operator=(const RtNetlink&) = delete;

  // Links, by interface name.
  Result set_link_up(std::string_view interface);
  Result set_link_down(std::string_view interface);
  Result set_mtu(std::string_view interface, uint32_t mtu);
  MtuResult link_mtu(std::string_view interface);

  // Interface addresses, IPv4 or IPv6 ("10.0.0.1/24": the address with its on-link prefix).
  // IPv6 addresses skip duplicate address detection (IFA_F_NODAD): a TUN peer is the other
  // end of a point-to-point link and waiting for DAD would only delay start-up.
  // Adding an address that is already there fails with EEXIST (see Result::already_exists).
  Result add_address(std::string_view interface, const esp::IpPrefix& address);
  Result remove_address(std::string_view interface, const esp::IpPrefix& address);

  // Routes for remote subnets through the TUN device, in the main table, IPv4 or IPv6,
  // with protocol kRouteProtocol. `destination` must be a network prefix (no host bits).
  // `metric` is the route priority; `mtu` sets the route's MTU metric (RTAX_MTU). The
  // device must be up (the kernel refuses IPv4 routes through a down device). An identical
  // route (same prefix and metric) fails with EEXIST; remove_route of a route that is not
  // there (or not ours) fails with ESRCH.
  // `table`: the routing table (espgw's own, xfrm/fail_closed_routes.h, or the main one).
  Result add_route(const esp::IpPrefix& destination, std::string_view interface,
                   std::optional<uint32_t> metric = std::nullopt,
                   std::optional<uint32_t> mtu = std::nullopt, uint32_t table = kMainTable);
  Result remove_route(const esp::IpPrefix& destination, std::string_view interface,
                      std::optional<uint32_t> metric = std::nullopt, uint32_t table = kMainTable);

  // Routes without a device, also protocol kRouteProtocol: `prohibit` (the kernel refuses
  // to send, the sender gets EACCES / ICMP administratively prohibited) and `throw` (the
  // lookup leaves this table and goes on with the next rule). They outlive any device,
  // which is what fail-closed routes need (xfrm/fail_closed_routes.h).
  enum class RouteType : uint8_t { unicast, prohibit, throw_ };
  Result add_typed_route(RouteType type, const esp::IpPrefix& destination, uint32_t table,
                         uint32_t metric);
  Result remove_typed_route(RouteType type, const esp::IpPrefix& destination, uint32_t table,
                            uint32_t metric);
  struct TableRoute {
    esp::IpPrefix destination;
    RouteType type = RouteType::unicast;
    uint32_t metric = 0;
    uint32_t output_interface = 0;  // 0: none (prohibit, throw)
  };
  // espgw's routes (protocol kRouteProtocol) in `table`, IPv4 and IPv6; other types than
  // the three above are left out.
  Result list_routes(uint32_t table, std::vector<TableRoute>& routes);

  // Policy routing rules, with protocol kRouteProtocol: "priority P [from S] [to D]
  // [ipproto N] [sport A-B] [dport C-D] lookup TABLE". Adding one that exists fails with
  // EEXIST; removing one that is not there with ENOENT.
  struct Rule {
    int family = 4;  // 4 or 6
    uint32_t priority = 0;
    uint32_t table = kMainTable;
    esp::IpPrefix source;       // length 0: any
    esp::IpPrefix destination;  // length 0: any
    uint8_t protocol = 0;       // 0: any
    std::optional<std::pair<uint16_t, uint16_t>> source_ports;
    std::optional<std::pair<uint16_t, uint16_t>> destination_ports;
  };
  Result add_rule(const Rule& rule);
  Result remove_rule(const Rule& rule);
  // espgw's rules (protocol kRouteProtocol) of both families.
  Result list_rules(std::vector<Rule>& rules);

  // Asks the kernel which route it would use towards `destination` (RTM_GETROUTE) and
  // returns the MTU of that path: the route's MTU metric when it has one, bounded by the
  // output interface's MTU (a packet larger than the link can't leave through it). The
  // daemon derives the TUN MTU from this. ENETUNREACH when there is no route.
  MtuResult route_mtu(const esp::IpAddress& destination);

 private:
  using ReplyHandler = void (*)(const nlmsghdr* reply, void* context);

  // Sends `request` (NLM_F_REQUEST | NLM_F_ACK are added) and reads until the kernel's
  // acknowledgement, passing every other reply of this request to `on_reply`. On failure
  // the Result's message is "<what>: <reason>".
  Result transact(nlmsghdr* request, const std::string& what, ReplyHandler on_reply = nullptr,
                  void* context = nullptr);
  Result set_link_flags(std::string_view interface, bool up);
  Result change_address(uint16_t type, std::string_view interface, const esp::IpPrefix& address);
  struct RouteRequest {
    RouteType type = RouteType::unicast;
    uint32_t table = kMainTable;
    uint32_t output_interface = 0;  // unicast only
    std::optional<uint32_t> metric;
    std::optional<uint32_t> mtu;
  };
  Result change_route(uint16_t message_type, const esp::IpPrefix& destination,
                      const RouteRequest& route, std::string what);
  Result change_rule(uint16_t message_type, const Rule& rule);
  MtuResult link_mtu_by_index(uint32_t index, const std::string& what);

  struct SocketCloser {
    void operator()(mnl_socket* socket) const;
  };
  std::unique_ptr<mnl_socket, SocketCloser> socket_;
  uint32_t port_id_ = 0;
  uint32_t sequence_ = 0;
  std::vector<char> buffer_;  // one receive buffer, reused: requests are strictly sequential
};

}  // namespace espgw::xfrm

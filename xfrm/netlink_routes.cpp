// RtNetlink on routes: adding, removing and listing them, and the route MTU towards a
// destination.
#include "xfrm/netlink.h"

#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "xfrm/netlink_request.h"

namespace espgw::xfrm {

using namespace netlink_detail;

namespace {

struct RouteReply {
  bool seen = false;
  uint32_t output_interface = 0;  // 0: the reply named none
  uint32_t mtu = 0;               // RTAX_MTU; 0: the route has no MTU metric
};

void parse_route_reply(const nlmsghdr* reply, void* context) {
  if (reply->nlmsg_type != RTM_NEWROUTE) return;
  if (mnl_nlmsg_get_payload_len(reply) < sizeof(rtmsg)) return;
  auto* route = static_cast<RouteReply*>(context);
  route->seen = true;
  mnl_attr_parse(
      reply, sizeof(rtmsg),
      [](const nlattr* attribute, void* data) {
        auto* out = static_cast<RouteReply*>(data);
        switch (mnl_attr_get_type(attribute)) {
          case RTA_OIF:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->output_interface = mnl_attr_get_u32(attribute);
            break;
          case RTA_METRICS:
            if (mnl_attr_validate(attribute, MNL_TYPE_NESTED) < 0) break;
            mnl_attr_parse_nested(
                attribute,
                [](const nlattr* metric, void* metric_data) {
                  if (mnl_attr_get_type(metric) == RTAX_MTU &&
                      mnl_attr_validate(metric, MNL_TYPE_U32) >= 0)
                    static_cast<RouteReply*>(metric_data)->mtu = mnl_attr_get_u32(metric);
                  return MNL_CB_OK;
                },
                data);
            break;
        }
        return MNL_CB_OK;
      },
      route);
}

const char* route_type_name(RtNetlink::RouteType type) {
  switch (type) {
    case RtNetlink::RouteType::unicast:
      return "unicast";
    case RtNetlink::RouteType::prohibit:
      return "prohibit";
    case RtNetlink::RouteType::throw_:
      return "throw";
  }
  return "?";
}

uint8_t rtm_type_of(RtNetlink::RouteType type) {
  switch (type) {
    case RtNetlink::RouteType::prohibit:
      return RTN_PROHIBIT;
    case RtNetlink::RouteType::throw_:
      return RTN_THROW;
    case RtNetlink::RouteType::unicast:
      break;
  }
  return RTN_UNICAST;
}

struct DumpedRoutes {
  uint32_t table;
  std::vector<RtNetlink::TableRoute>* routes;
};

// One route of an RTM_GETROUTE dump: kept when it is ours (protocol 245) and in the table.
void parse_dumped_route(const nlmsghdr* reply, void* context) {
  if (reply->nlmsg_type != RTM_NEWROUTE) return;
  if (mnl_nlmsg_get_payload_len(reply) < sizeof(rtmsg)) return;
  const auto* message = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(reply));
  if (message->rtm_protocol != RtNetlink::kRouteProtocol) return;
  if (message->rtm_family != AF_INET && message->rtm_family != AF_INET6) return;
  RtNetlink::TableRoute route;
  switch (message->rtm_type) {
    case RTN_UNICAST:
      route.type = RtNetlink::RouteType::unicast;
      break;
    case RTN_PROHIBIT:
      route.type = RtNetlink::RouteType::prohibit;
      break;
    case RTN_THROW:
      route.type = RtNetlink::RouteType::throw_;
      break;
    default:
      return;
  }
  struct Attributes {
    uint32_t table = 0;
    const nlattr* destination = nullptr;
    uint32_t metric = 0;
    uint32_t output_interface = 0;
  } attributes;
  attributes.table = message->rtm_table;
  mnl_attr_parse(
      reply, sizeof(rtmsg),
      [](const nlattr* attribute, void* data) {
        auto* out = static_cast<Attributes*>(data);
        switch (mnl_attr_get_type(attribute)) {
          case RTA_TABLE:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->table = mnl_attr_get_u32(attribute);
            break;
          case RTA_DST:
            out->destination = attribute;
            break;
          case RTA_PRIORITY:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->metric = mnl_attr_get_u32(attribute);
            break;
          case RTA_OIF:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->output_interface = mnl_attr_get_u32(attribute);
            break;
        }
        return MNL_CB_OK;
      },
      &attributes);
  auto* dumped = static_cast<DumpedRoutes*>(context);
  if (attributes.table != dumped->table) return;
  const size_t length = message->rtm_family == AF_INET ? 4 : 16;
  route.destination.address.family = message->rtm_family == AF_INET ? 4 : 6;
  route.destination.length = message->rtm_dst_len;
  if (attributes.destination) {
    if (mnl_attr_get_payload_len(attributes.destination) != length) return;
    std::memcpy(route.destination.address.bytes.data(),
                mnl_attr_get_payload(attributes.destination), length);
  }
  route.metric = attributes.metric;
  route.output_interface = attributes.output_interface;
  dumped->routes->push_back(route);
}

}  // namespace

Result RtNetlink::add_route(const esp::IpPrefix& destination, std::string_view interface,
                            std::optional<uint32_t> metric, std::optional<uint32_t> mtu,
                            uint32_t table) {
  std::string what = "add route " + destination.to_string() + " dev " + std::string(interface);
  const uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);
  return change_route(RTM_NEWROUTE, destination, {RouteType::unicast, table, index, metric, mtu},
                      std::move(what));
}

Result RtNetlink::remove_route(const esp::IpPrefix& destination, std::string_view interface,
                               std::optional<uint32_t> metric, uint32_t table) {
  std::string what = "remove route " + destination.to_string() + " dev " + std::string(interface);
  const uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);
  return change_route(RTM_DELROUTE, destination,
                      {RouteType::unicast, table, index, metric, std::nullopt}, std::move(what));
}

Result RtNetlink::add_typed_route(RouteType type, const esp::IpPrefix& destination, uint32_t table,
                                  uint32_t metric) {
  std::string what = std::string("add ") + route_type_name(type) + " route " +
                     destination.to_string() + " table " + std::to_string(table);
  return change_route(RTM_NEWROUTE, destination, {type, table, 0, metric, std::nullopt},
                      std::move(what));
}

Result RtNetlink::remove_typed_route(RouteType type, const esp::IpPrefix& destination,
                                     uint32_t table, uint32_t metric) {
  std::string what = std::string("remove ") + route_type_name(type) + " route " +
                     destination.to_string() + " table " + std::to_string(table);
  return change_route(RTM_DELROUTE, destination, {type, table, 0, metric, std::nullopt},
                      std::move(what));
}

Result RtNetlink::change_route(uint16_t message_type, const esp::IpPrefix& destination,
                               const RouteRequest& route, std::string what) {
  const bool adding = message_type == RTM_NEWROUTE;
  if (route.metric) what += " metric " + std::to_string(*route.metric);
  if (auto invalid = check_prefix(destination, what)) return *invalid;

  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, message_type, adding ? NLM_F_CREATE | NLM_F_EXCL : 0);
  auto* message = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(rtmsg)));
  message->rtm_family = static_cast<uint8_t>(family_of(destination.address));
  message->rtm_dst_len = destination.length;
  // Tables above 255 only fit RTA_TABLE; rtm_table then says RT_TABLE_UNSPEC.
  message->rtm_table =
      route.table < 256 ? static_cast<uint8_t>(route.table) : uint8_t{RT_TABLE_UNSPEC};
  message->rtm_protocol = kRouteProtocol;  // also on delete: only our own routes match
  message->rtm_type = rtm_type_of(route.type);
  // A route straight out of the device, no gateway: scope link for IPv4. IPv6 has no route
  // scopes (the kernel reports universe), so ask for that; routes without a device are
  // universe too. On delete, RT_SCOPE_NOWHERE matches any scope, as iproute2 does.
  if (!adding)
    message->rtm_scope = RT_SCOPE_NOWHERE;
  else if (route.type == RouteType::unicast && destination.address.family == 4)
    message->rtm_scope = RT_SCOPE_LINK;
  else
    message->rtm_scope = RT_SCOPE_UNIVERSE;

  mnl_attr_put_u32(request, RTA_TABLE, route.table);
  mnl_attr_put(request, RTA_DST, static_cast<uint16_t>(destination.address.length()),
               destination.address.bytes.data());
  if (route.output_interface != 0) mnl_attr_put_u32(request, RTA_OIF, route.output_interface);
  if (route.metric) mnl_attr_put_u32(request, RTA_PRIORITY, *route.metric);
  if (route.mtu) {
    nlattr* metrics = mnl_attr_nest_start(request, RTA_METRICS);
    mnl_attr_put_u32(request, RTAX_MTU, *route.mtu);
    mnl_attr_nest_end(request, metrics);
  }
  return transact(request, what);
}

Result RtNetlink::list_routes(uint32_t table, std::vector<TableRoute>& routes) {
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_GETROUTE, NLM_F_DUMP);
  auto* message = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(rtmsg)));
  message->rtm_family = AF_UNSPEC;  // both families
  DumpedRoutes dumped{table, &routes};
  return transact(request, "list routes of table " + std::to_string(table), parse_dumped_route,
                  &dumped);
}

MtuResult RtNetlink::route_mtu(const esp::IpAddress& destination) {
  std::string what = "route mtu towards " + destination.to_string();
  if (auto invalid = check_prefix(esp::IpPrefix{destination, 0}, what))
    return mtu_failure(*invalid);

  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_GETROUTE, 0);
  auto* route = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(rtmsg)));
  route->rtm_family = static_cast<uint8_t>(family_of(destination));
  route->rtm_dst_len = static_cast<uint8_t>(destination.length() * 8);
  mnl_attr_put(request, RTA_DST, static_cast<uint16_t>(destination.length()),
               destination.bytes.data());

  RouteReply reply;
  Result looked_up = transact(request, what, parse_route_reply, &reply);
  if (!looked_up) return mtu_failure(looked_up);
  if (!reply.seen || reply.output_interface == 0)
    return mtu_failure(failure(ENETUNREACH, what, "the route names no output interface"));

  MtuResult link = link_mtu_by_index(reply.output_interface, what);
  if (!link) return link;
  // A route MTU above the link's can't be honoured: the packet still has to fit the link.
  if (reply.mtu != 0) link.mtu = std::min(link.mtu, reply.mtu);
  return link;
}

}  // namespace espgw::xfrm

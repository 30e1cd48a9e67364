// RtNetlink: builds rtnetlink requests with libmnl, sends each with NLM_F_ACK and turns the
// kernel's answer (acknowledgement, error with extended-ack text, or reply data) into a Result.
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

namespace espgw::xfrm {
namespace {

// Requests are a header, one fixed struct and a few small attributes; 1 KiB is ample.
constexpr size_t kRequestSize = 1024;
// Replies to RTM_GETLINK can be several KiB (per-family attributes), and a reply that does not
// fit the buffer is lost (MSG_TRUNC), so leave generous room.
constexpr size_t kReceiveSize = 32 * 1024;

// The kernel's errno values read oddly out of context ("No such process" for a missing
// route), so the common ones get words that fit rtnetlink; the errno name stays alongside.
std::string describe(int error) {
  std::string reason;
  switch (error) {
    case EEXIST:
      reason = "already exists";
      break;
    case ESRCH:
      reason = "not found";
      break;
    case ENODEV:
      reason = "no such interface";
      break;
    case EADDRNOTAVAIL:  // what RTM_DELADDR answers for an address that is not there
      reason = "address not found";
      break;
    default:
      reason = std::strerror(error);
  }
  if (const char* name = strerrorname_np(error)) reason += std::string(" (") + name + ")";
  return reason;
}

// "<what>: <reason> (<ERRNO>)[: <detail>]"; the detail is our own note or the kernel's text.
Result failure(int error, const std::string& what, std::string_view detail = {}) {
  Result result;
  result.ok = false;
  result.error = error;
  result.message = what + ": " + describe(error);
  if (!detail.empty()) result.message += std::string(": ") + std::string(detail);
  return result;
}

MtuResult mtu_failure(const Result& cause) {
  MtuResult result;
  static_cast<Result&>(result) = cause;
  return result;
}

// if_nametoindex needs a NUL-terminated name; 0 means no such interface in this namespace.
uint32_t interface_index(std::string_view interface) {
  return if_nametoindex(std::string(interface).c_str());
}

int family_of(const esp::IpAddress& address) {
  return address.family == 4 ? AF_INET : AF_INET6;
}

// Rejects what the kernel would misread rather than reject: an unset family, or a prefix
// length beyond the address size.
std::optional<Result> check_prefix(const esp::IpPrefix& prefix, const std::string& what) {
  if (prefix.address.family != 4 && prefix.address.family != 6)
    return failure(EAFNOSUPPORT, what, "address family not set");
  if (prefix.length > prefix.address.length() * 8)
    return failure(EINVAL, what, "prefix length too long");
  return std::nullopt;
}

struct alignas(nlmsghdr) RequestBuffer {
  char bytes[kRequestSize];
};

nlmsghdr* start_request(RequestBuffer& buffer, uint16_t type, uint16_t flags) {
  std::memset(buffer.bytes, 0, sizeof buffer.bytes);
  nlmsghdr* request = mnl_nlmsg_put_header(buffer.bytes);
  request->nlmsg_type = type;
  request->nlmsg_flags = flags;
  return request;
}

// Collects NLMSGERR_ATTR_MSG, the kernel's human-readable reason ("Nexthop device is not up").
int extack_attribute(const nlattr* attribute, void* context) {
  if (mnl_attr_get_type(attribute) == NLMSGERR_ATTR_MSG &&
      mnl_attr_validate(attribute, MNL_TYPE_NUL_STRING) >= 0)
    *static_cast<std::string*>(context) = mnl_attr_get_str(attribute);
  return MNL_CB_OK;
}

struct LinkReply {
  bool seen = false;
  uint32_t mtu = 0;
  std::string name;
};

void parse_link_reply(const nlmsghdr* reply, void* context) {
  if (reply->nlmsg_type != RTM_NEWLINK) return;
  if (mnl_nlmsg_get_payload_len(reply) < sizeof(ifinfomsg)) return;
  auto* link = static_cast<LinkReply*>(context);
  link->seen = true;
  mnl_attr_parse(
      reply, sizeof(ifinfomsg),
      [](const nlattr* attribute, void* data) {
        auto* out = static_cast<LinkReply*>(data);
        switch (mnl_attr_get_type(attribute)) {
          case IFLA_MTU:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->mtu = mnl_attr_get_u32(attribute);
            break;
          case IFLA_IFNAME:
            if (mnl_attr_validate(attribute, MNL_TYPE_NUL_STRING) >= 0)
              out->name = mnl_attr_get_str(attribute);
            break;
        }
        return MNL_CB_OK;
      },
      link);
}

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

// One rule of an RTM_GETRULE dump: kept when it is ours (protocol 245).
void parse_dumped_rule(const nlmsghdr* reply, void* context) {
  if (reply->nlmsg_type != RTM_NEWRULE) return;
  if (mnl_nlmsg_get_payload_len(reply) < sizeof(fib_rule_hdr)) return;
  const auto* header = static_cast<const fib_rule_hdr*>(mnl_nlmsg_get_payload(reply));
  if (header->family != AF_INET && header->family != AF_INET6) return;
  if (header->action != FR_ACT_TO_TBL) return;
  struct Attributes {
    RtNetlink::Rule rule;
    uint8_t protocol = 0;
    const nlattr* source = nullptr;
    const nlattr* destination = nullptr;
  } attributes;
  RtNetlink::Rule& rule = attributes.rule;
  rule.family = header->family == AF_INET ? 4 : 6;
  rule.table = header->table;
  mnl_attr_parse(
      reply, sizeof(fib_rule_hdr),
      [](const nlattr* attribute, void* data) {
        auto* out = static_cast<Attributes*>(data);
        auto port_range = [&]() -> std::optional<std::pair<uint16_t, uint16_t>> {
          if (mnl_attr_get_payload_len(attribute) != sizeof(fib_rule_port_range))
            return std::nullopt;
          fib_rule_port_range range;
          std::memcpy(&range, mnl_attr_get_payload(attribute), sizeof range);
          return std::pair<uint16_t, uint16_t>{range.start, range.end};
        };
        switch (mnl_attr_get_type(attribute)) {
          case FRA_TABLE:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->rule.table = mnl_attr_get_u32(attribute);
            break;
          case FRA_PRIORITY:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->rule.priority = mnl_attr_get_u32(attribute);
            break;
          case FRA_PROTOCOL:
            if (mnl_attr_validate(attribute, MNL_TYPE_U8) >= 0)
              out->protocol = mnl_attr_get_u8(attribute);
            break;
          case FRA_IP_PROTO:
            if (mnl_attr_validate(attribute, MNL_TYPE_U8) >= 0)
              out->rule.protocol = mnl_attr_get_u8(attribute);
            break;
          case FRA_SRC:
            out->source = attribute;
            break;
          case FRA_DST:
            out->destination = attribute;
            break;
          case FRA_SPORT_RANGE:
            out->rule.source_ports = port_range();
            break;
          case FRA_DPORT_RANGE:
            out->rule.destination_ports = port_range();
            break;
        }
        return MNL_CB_OK;
      },
      &attributes);
  if (attributes.protocol != RtNetlink::kRouteProtocol) return;
  const uint8_t family = header->family == AF_INET ? 4 : 6;
  const size_t length = family == 4 ? 4 : 16;
  auto prefix_of = [&](const nlattr* attribute, uint8_t bits, esp::IpPrefix& prefix) {
    prefix.address.family = family;
    prefix.length = bits;
    if (!attribute) return true;
    if (mnl_attr_get_payload_len(attribute) != length) return false;
    std::memcpy(prefix.address.bytes.data(), mnl_attr_get_payload(attribute), length);
    return true;
  };
  if (!prefix_of(attributes.source, header->src_len, rule.source) ||
      !prefix_of(attributes.destination, header->dst_len, rule.destination))
    return;
  static_cast<std::vector<RtNetlink::Rule>*>(context)->push_back(rule);
}

}  // namespace

void RtNetlink::SocketCloser::operator()(mnl_socket* socket) const {
  mnl_socket_close(socket);
}

RtNetlink::RtNetlink() : buffer_(kReceiveSize) {
  socket_.reset(mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC));
  if (!socket_) throw std::system_error(errno, std::generic_category(), "rtnetlink: open socket");
  // Extended acks carry the kernel's reason as text; capped acks leave out the echo of our
  // request. Both are optional comforts, so kernels without them are not an error.
  int on = 1;
  mnl_socket_setsockopt(socket_.get(), NETLINK_EXT_ACK, &on, sizeof on);
  mnl_socket_setsockopt(socket_.get(), NETLINK_CAP_ACK, &on, sizeof on);
  if (mnl_socket_bind(socket_.get(), 0, MNL_SOCKET_AUTOPID) < 0)
    throw std::system_error(errno, std::generic_category(), "rtnetlink: bind socket");
  port_id_ = mnl_socket_get_portid(socket_.get());
}

RtNetlink::~RtNetlink() = default;
RtNetlink::RtNetlink(RtNetlink&&) noexcept = default;
RtNetlink& RtNetlink::operator=(RtNetlink&&) noexcept = default;

Result RtNetlink::transact(nlmsghdr* request, const std::string& what, ReplyHandler on_reply,
                           void* context) {
  if (!socket_) return failure(EBADF, what, "netlink socket moved away");
  request->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
  request->nlmsg_seq = ++sequence_;
  request->nlmsg_pid = 0;  // addressed to the kernel

  ssize_t sent;
  do {
    sent = mnl_socket_sendto(socket_.get(), request, request->nlmsg_len);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return failure(errno, what, "sending the request");

  // Every request ends with exactly one NLMSG_ERROR: error 0 is the acknowledgement, any other
  // value the kernel's refusal. Replies carrying data (RTM_GETLINK, RTM_GETROUTE) come before it.
  for (;;) {
    ssize_t received = mnl_socket_recvfrom(socket_.get(), buffer_.data(), buffer_.size());
    if (received < 0) {
      if (errno == EINTR) continue;
      return failure(errno, what, "reading the reply");
    }
    int remaining = static_cast<int>(received);
    for (auto* reply = reinterpret_cast<const nlmsghdr*>(buffer_.data());
         mnl_nlmsg_ok(reply, remaining); reply = mnl_nlmsg_next(reply, &remaining)) {
      // A reply left over from an earlier request that gave up part-way is not ours.
      if (reply->nlmsg_seq != request->nlmsg_seq || reply->nlmsg_pid != port_id_) continue;
      if (reply->nlmsg_type == NLMSG_ERROR) {
        if (mnl_nlmsg_get_payload_len(reply) < sizeof(nlmsgerr))
          return failure(EBADMSG, what, "truncated acknowledgement");
        const auto* error = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(reply));
        if (error->error == 0) return Result{};
        std::string kernel_text;
        if (reply->nlmsg_flags & NLM_F_ACK_TLVS) {
          // The TLVs follow the echoed request: just its header if the ack is capped.
          size_t offset = (reply->nlmsg_flags & NLM_F_CAPPED)
                              ? sizeof(nlmsgerr)
                              : sizeof(error->error) + error->msg.nlmsg_len;
          if (offset < mnl_nlmsg_get_payload_len(reply))
            mnl_attr_parse(reply, static_cast<unsigned>(offset), extack_attribute, &kernel_text);
        }
        return failure(-error->error, what,
                       kernel_text.empty() ? std::string() : "kernel says: " + kernel_text);
      }
      if (reply->nlmsg_type == NLMSG_DONE) return Result{};
      if (reply->nlmsg_type < NLMSG_MIN_TYPE) continue;  // NOOP, OVERRUN
      if (on_reply) on_reply(reply, context);
    }
  }
}

Result RtNetlink::set_link_up(std::string_view interface) {
  return set_link_flags(interface, true);
}

Result RtNetlink::set_link_down(std::string_view interface) {
  return set_link_flags(interface, false);
}

Result RtNetlink::set_link_flags(std::string_view interface, bool up) {
  std::string what = std::string(up ? "set link up " : "set link down ") + std::string(interface);
  uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);

  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_NEWLINK, 0);
  auto* link = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(request, sizeof(ifinfomsg)));
  link->ifi_family = AF_UNSPEC;
  link->ifi_index = static_cast<int>(index);
  link->ifi_change = IFF_UP;  // touch only IFF_UP, leave every other flag as it is
  link->ifi_flags = up ? IFF_UP : 0;
  return transact(request, what);
}

Result RtNetlink::set_mtu(std::string_view interface, uint32_t mtu) {
  std::string what = "set mtu " + std::to_string(mtu) + " on " + std::string(interface);
  uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);

  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_NEWLINK, 0);
  auto* link = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(request, sizeof(ifinfomsg)));
  link->ifi_family = AF_UNSPEC;
  link->ifi_index = static_cast<int>(index);
  mnl_attr_put_u32(request, IFLA_MTU, mtu);
  return transact(request, what);
}

MtuResult RtNetlink::link_mtu(std::string_view interface) {
  std::string what = "read mtu of " + std::string(interface);
  uint32_t index = interface_index(interface);
  if (index == 0) return mtu_failure(failure(ENODEV, what));
  return link_mtu_by_index(index, what);
}

MtuResult RtNetlink::link_mtu_by_index(uint32_t index, const std::string& what) {
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_GETLINK, 0);
  auto* link = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(request, sizeof(ifinfomsg)));
  link->ifi_family = AF_UNSPEC;
  link->ifi_index = static_cast<int>(index);
  // Statistics are most of an RTM_GETLINK reply and we only want the MTU.
  mnl_attr_put_u32(request, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);

  LinkReply reply;
  Result sent = transact(request, what, parse_link_reply, &reply);
  if (!sent) return mtu_failure(sent);
  if (!reply.seen || reply.mtu == 0)
    return mtu_failure(failure(EBADMSG, what, "reply without IFLA_MTU"));
  MtuResult result;
  result.mtu = reply.mtu;
  result.interface = reply.name;
  return result;
}

Result RtNetlink::add_address(std::string_view interface, const esp::IpPrefix& address) {
  return change_address(RTM_NEWADDR, interface, address);
}

Result RtNetlink::remove_address(std::string_view interface, const esp::IpPrefix& address) {
  return change_address(RTM_DELADDR, interface, address);
}

Result RtNetlink::change_address(uint16_t type, std::string_view interface,
                                 const esp::IpPrefix& address) {
  std::string what = std::string(type == RTM_NEWADDR ? "add address " : "remove address ") +
                     address.to_string() + " dev " + std::string(interface);
  if (auto invalid = check_prefix(address, what)) return *invalid;
  uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);

  RequestBuffer buffer;
  // NLM_F_EXCL: an address that is already there is reported (EEXIST), not silently replaced.
  nlmsghdr* request =
      start_request(buffer, type, type == RTM_NEWADDR ? NLM_F_CREATE | NLM_F_EXCL : 0);
  auto* message = static_cast<ifaddrmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(ifaddrmsg)));
  message->ifa_family = static_cast<uint8_t>(family_of(address.address));
  message->ifa_prefixlen = address.length;
  message->ifa_scope = RT_SCOPE_UNIVERSE;
  message->ifa_index = index;
  if (type == RTM_NEWADDR && address.address.family == 6) message->ifa_flags = IFA_F_NODAD;
  // IFA_LOCAL and IFA_ADDRESS equal: the interface's own address, no point-to-point peer.
  auto length = static_cast<uint16_t>(address.address.length());
  mnl_attr_put(request, IFA_LOCAL, length, address.address.bytes.data());
  mnl_attr_put(request, IFA_ADDRESS, length, address.address.bytes.data());
  return transact(request, what);
}

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

Result RtNetlink::add_rule(const Rule& rule) {
  return change_rule(RTM_NEWRULE, rule);
}

Result RtNetlink::remove_rule(const Rule& rule) {
  return change_rule(RTM_DELRULE, rule);
}

Result RtNetlink::change_rule(uint16_t message_type, const Rule& rule) {
  const bool adding = message_type == RTM_NEWRULE;
  std::string what = std::string(adding ? "add" : "remove") + " IPv" + std::to_string(rule.family) +
                     " rule priority " + std::to_string(rule.priority);
  if (rule.source.length != 0) what += " from " + rule.source.to_string();
  if (rule.destination.length != 0) what += " to " + rule.destination.to_string();
  what += " lookup " + std::to_string(rule.table);
  for (const auto* prefix : {&rule.source, &rule.destination})
    if (prefix->length != 0)
      if (auto invalid = check_prefix(*prefix, what)) return *invalid;
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, message_type, adding ? NLM_F_CREATE | NLM_F_EXCL : 0);
  auto* header =
      static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(request, sizeof(fib_rule_hdr)));
  header->family = static_cast<uint8_t>(rule.family == 4 ? AF_INET : AF_INET6);
  header->table = rule.table < 256 ? static_cast<uint8_t>(rule.table) : uint8_t{RT_TABLE_UNSPEC};
  header->action = FR_ACT_TO_TBL;
  header->src_len = rule.source.length;
  header->dst_len = rule.destination.length;
  mnl_attr_put_u32(request, FRA_TABLE, rule.table);
  mnl_attr_put_u32(request, FRA_PRIORITY, rule.priority);
  mnl_attr_put_u8(request, FRA_PROTOCOL, kRouteProtocol);
  if (rule.source.length != 0)
    mnl_attr_put(request, FRA_SRC, static_cast<uint16_t>(rule.source.address.length()),
                 rule.source.address.bytes.data());
  if (rule.destination.length != 0)
    mnl_attr_put(request, FRA_DST, static_cast<uint16_t>(rule.destination.address.length()),
                 rule.destination.address.bytes.data());
  if (rule.protocol != 0) mnl_attr_put_u8(request, FRA_IP_PROTO, rule.protocol);
  if (rule.source_ports) {
    const fib_rule_port_range range{rule.source_ports->first, rule.source_ports->second};
    mnl_attr_put(request, FRA_SPORT_RANGE, sizeof range, &range);
  }
  if (rule.destination_ports) {
    const fib_rule_port_range range{rule.destination_ports->first, rule.destination_ports->second};
    mnl_attr_put(request, FRA_DPORT_RANGE, sizeof range, &range);
  }
  return transact(request, what);
}

Result RtNetlink::list_rules(std::vector<Rule>& rules) {
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_GETRULE, NLM_F_DUMP);
  auto* header =
      static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(request, sizeof(fib_rule_hdr)));
  header->family = AF_UNSPEC;  // both families
  return transact(request, "list rules", parse_dumped_rule, &rules);
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

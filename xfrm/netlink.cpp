// RtNetlink: builds rtnetlink requests with libmnl, sends each with NLM_F_ACK and turns the
// kernel's answer (acknowledgement, error with extended-ack text, or reply data) into a Result.
#include "xfrm/netlink.h"

#include <libmnl/libmnl.h>
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
                            std::optional<uint32_t> metric, std::optional<uint32_t> mtu) {
  return change_route(RTM_NEWROUTE, destination, interface, metric, mtu);
}

Result RtNetlink::remove_route(const esp::IpPrefix& destination, std::string_view interface,
                               std::optional<uint32_t> metric) {
  return change_route(RTM_DELROUTE, destination, interface, metric, std::nullopt);
}

Result RtNetlink::change_route(uint16_t type, const esp::IpPrefix& destination,
                               std::string_view interface, std::optional<uint32_t> metric,
                               std::optional<uint32_t> mtu) {
  bool adding = type == RTM_NEWROUTE;
  std::string what = std::string(adding ? "add route " : "remove route ") +
                     destination.to_string() + " dev " + std::string(interface);
  if (metric) what += " metric " + std::to_string(*metric);
  if (auto invalid = check_prefix(destination, what)) return *invalid;
  uint32_t index = interface_index(interface);
  if (index == 0) return failure(ENODEV, what);

  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, type, adding ? NLM_F_CREATE | NLM_F_EXCL : 0);
  auto* route = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(rtmsg)));
  route->rtm_family = static_cast<uint8_t>(family_of(destination.address));
  route->rtm_dst_len = destination.length;
  route->rtm_table = RT_TABLE_MAIN;
  route->rtm_protocol = kRouteProtocol;  // also on delete: only our own routes match
  route->rtm_type = RTN_UNICAST;
  // A route straight out of the device, no gateway: scope link for IPv4. IPv6 has no route
  // scopes (the kernel reports universe), so ask for that. On delete, RT_SCOPE_NOWHERE
  // matches any scope, as iproute2 does.
  if (!adding)
    route->rtm_scope = RT_SCOPE_NOWHERE;
  else
    route->rtm_scope = destination.address.family == 4 ? RT_SCOPE_LINK : RT_SCOPE_UNIVERSE;

  mnl_attr_put_u32(request, RTA_TABLE, RT_TABLE_MAIN);
  mnl_attr_put(request, RTA_DST, static_cast<uint16_t>(destination.address.length()),
               destination.address.bytes.data());
  mnl_attr_put_u32(request, RTA_OIF, index);
  if (metric) mnl_attr_put_u32(request, RTA_PRIORITY, *metric);
  if (mtu) {
    nlattr* metrics = mnl_attr_nest_start(request, RTA_METRICS);
    mnl_attr_put_u32(request, RTAX_MTU, *mtu);
    mnl_attr_nest_end(request, metrics);
  }
  return transact(request, what);
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

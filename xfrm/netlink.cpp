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

#include "xfrm/netlink_request.h"

namespace espgw::xfrm {

namespace {

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

// Collects NLMSGERR_ATTR_MSG, the kernel's human-readable reason ("Nexthop device is not up").
int extack_attribute(const nlattr* attribute, void* context) {
  if (mnl_attr_get_type(attribute) == NLMSGERR_ATTR_MSG &&
      mnl_attr_validate(attribute, MNL_TYPE_NUL_STRING) >= 0)
    *static_cast<std::string*>(context) = mnl_attr_get_str(attribute);
  return MNL_CB_OK;
}

}  // namespace

namespace netlink_detail {

Result failure(int error, const std::string& what, std::string_view detail) {
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

uint32_t interface_index(std::string_view interface) {
  return if_nametoindex(std::string(interface).c_str());
}

int family_of(const esp::IpAddress& address) {
  return address.family == 4 ? AF_INET : AF_INET6;
}

std::optional<Result> check_prefix(const esp::IpPrefix& prefix, const std::string& what) {
  if (prefix.address.family != 4 && prefix.address.family != 6)
    return failure(EAFNOSUPPORT, what, "address family not set");
  if (prefix.length > prefix.address.length() * 8)
    return failure(EINVAL, what, "prefix length too long");
  return std::nullopt;
}

nlmsghdr* start_request(RequestBuffer& buffer, uint16_t type, uint16_t flags) {
  std::memset(buffer.bytes, 0, sizeof buffer.bytes);
  nlmsghdr* request = mnl_nlmsg_put_header(buffer.bytes);
  request->nlmsg_type = type;
  request->nlmsg_flags = flags;
  return request;
}

}  // namespace netlink_detail

using namespace netlink_detail;

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

}  // namespace espgw::xfrm

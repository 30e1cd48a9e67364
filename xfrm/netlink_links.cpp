// RtNetlink on links and addresses: up and down, MTU, addresses.
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

// The ifinfomsg every link request starts with, naming the link by index.
ifinfomsg* put_link_header(nlmsghdr* request, uint32_t index) {
  auto* link = static_cast<ifinfomsg*>(mnl_nlmsg_put_extra_header(request, sizeof(ifinfomsg)));
  link->ifi_family = AF_UNSPEC;
  link->ifi_index = static_cast<int>(index);
  return link;
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

}  // namespace

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
  ifinfomsg* link = put_link_header(request, index);
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
  put_link_header(request, index);
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
  put_link_header(request, index);
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

}  // namespace espgw::xfrm

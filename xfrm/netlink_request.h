// Shared by the parts of RtNetlink (netlink*.cpp): request buffers and how failures are
// reported. Not part of its interface.
#pragma once

#include <libmnl/libmnl.h>
#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "esp/ip_address.h"
#include "xfrm/netlink.h"

namespace espgw::xfrm::netlink_detail {

// Requests are a header, one fixed struct and a few small attributes; 1 KiB is ample.
inline constexpr size_t kRequestSize = 1024;
// Replies to RTM_GETLINK can be several KiB (per-family attributes), and a reply that does not
// fit the buffer is lost (MSG_TRUNC), so leave generous room.
inline constexpr size_t kReceiveSize = 32 * 1024;

// "<what>: <reason> (<ERRNO>)[: <detail>]"; the detail is our own note or the kernel's text.
Result failure(int error, const std::string& what, std::string_view detail = {});
MtuResult mtu_failure(const Result& cause);
// if_nametoindex needs a NUL-terminated name; 0 means no such interface in this namespace.
uint32_t interface_index(std::string_view interface);
int family_of(const esp::IpAddress& address);
// Rejects what the kernel would misread rather than reject: an unset family, or a prefix
// length beyond the address size.
std::optional<Result> check_prefix(const esp::IpPrefix& prefix, const std::string& what);

struct alignas(nlmsghdr) RequestBuffer {
  char bytes[kRequestSize];
};

nlmsghdr* start_request(RequestBuffer& buffer, uint16_t type, uint16_t flags);

}  // namespace espgw::xfrm::netlink_detail

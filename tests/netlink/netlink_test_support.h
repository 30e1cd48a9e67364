// Shared by the RtNetlink tests (netlink_*_test.cpp): the private network namespace the
// test process moves into, independent views of the kernel's state, and the fixture.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <libmnl/libmnl.h>
#include <linux/if_tun.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "xfrm/netlink.h"

namespace espgw::xfrm {

using ::testing::HasSubstr;

// --- The private namespace -------------------------------------------------------------

struct Namespace {
  bool entered = false;
  std::string problem;  // why we could not enter one
};
inline Namespace g_namespace;

// unshare() moves the calling thread; gtest runs environments and every test on the main
// thread, so that is the one that must move (a sanitizer's helper thread may stay behind
// harmlessly). Listing tests (ctest's discovery) runs no environment and needs no privilege.
class PrivateNetworkNamespace : public ::testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) == 0) {
      g_namespace.entered = true;
      return;
    }
    int error = errno;
    g_namespace.problem = std::string("unshare(CLONE_NEWNET) failed: ") + std::strerror(error);
    if (error == EPERM)
      g_namespace.problem += " -- these tests need root (CAP_SYS_ADMIN) for a private netns";
  }
};

// --- Independent views of kernel state --------------------------------------------------

// A TUN device like the daemon's; the kernel deletes it (with its addresses and routes) when
// the descriptor closes.
class TunDevice {
 public:
  explicit TunDevice(const std::string& name) : name_(name) {
    fd_ = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd_ < 0) return;
    ifreq request{};
    request.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
    if (ioctl(fd_, TUNSETIFF, &request) < 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~TunDevice() {
    if (fd_ >= 0) close(fd_);
  }
  TunDevice(const TunDevice&) = delete;
  TunDevice& operator=(const TunDevice&) = delete;
  bool ok() const { return fd_ >= 0; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int fd_ = -1;
};

// SIOCGIF* ioctls: the classic interface API, independent of rtnetlink.
inline std::optional<ifreq> interface_ioctl(const std::string& name, unsigned long request_code) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  ifreq request{};
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  int rc = ioctl(fd, request_code, &request);
  close(fd);
  if (rc < 0) return std::nullopt;
  return request;
}

inline int kernel_mtu(const std::string& name) {
  auto reply = interface_ioctl(name, SIOCGIFMTU);
  return reply ? reply->ifr_mtu : -1;
}

inline bool kernel_is_up(const std::string& name) {
  auto reply = interface_ioctl(name, SIOCGIFFLAGS);
  return reply && (reply->ifr_flags & IFF_UP);
}

// IPv4 addresses of `name` as "a.b.c.d/len", via getifaddrs.
inline std::vector<std::string> ipv4_addresses(const std::string& name) {
  std::vector<std::string> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr || entry->ifa_addr->sa_family != AF_INET || name != entry->ifa_name)
      continue;
    auto* address = reinterpret_cast<sockaddr_in*>(entry->ifa_addr);
    auto* mask = reinterpret_cast<sockaddr_in*>(entry->ifa_netmask);
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &address->sin_addr, text, sizeof text);
    found.push_back(std::string(text) + "/" +
                    std::to_string(std::popcount(static_cast<uint32_t>(mask->sin_addr.s_addr))));
  }
  freeifaddrs(list);
  return found;
}

// "32 hex digits" as written in /proc/net/{if_inet6,ipv6_route}, to an address string.
inline std::string ipv6_from_hex(const std::string& hex) {
  in6_addr address{};
  for (int i = 0; i < 16; ++i)
    address.s6_addr[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &address, text, sizeof text);
  return text;
}

struct Ipv6Address {
  std::string prefix;  // "2001:db8::1/64"
  unsigned flags = 0;  // IFA_F_*
};

// /proc/net/if_inet6: address, ifindex, prefix length, scope, flags, name (hex fields).
inline std::vector<Ipv6Address> ipv6_addresses(const std::string& name) {
  std::vector<Ipv6Address> found;
  std::ifstream file("/proc/net/if_inet6");
  std::string hex, index, length, scope, flags, device;
  while (file >> hex >> index >> length >> scope >> flags >> device) {
    if (device != name) continue;
    found.push_back({ipv6_from_hex(hex) + "/" + std::to_string(std::stoul(length, nullptr, 16)),
                     static_cast<unsigned>(std::stoul(flags, nullptr, 16))});
  }
  return found;
}

// Routes as "<prefix> dev <name> metric <n>", from /proc/net/route (main table, IPv4).
inline std::vector<std::string> ipv4_routes() {
  std::vector<std::string> found;
  std::ifstream file("/proc/net/route");
  std::string line;
  std::getline(file, line);  // column titles
  while (std::getline(file, line)) {
    std::istringstream fields(line);
    std::string device, destination, gateway, flags, refcount, use, metric, mask;
    fields >> device >> destination >> gateway >> flags >> refcount >> use >> metric >> mask;
    // Destination and mask are the in-memory (network order) words printed as host integers.
    in_addr address{static_cast<in_addr_t>(std::stoul(destination, nullptr, 16))};
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &address, text, sizeof text);
    int length = std::popcount(static_cast<uint32_t>(std::stoul(mask, nullptr, 16)));
    found.push_back(std::string(text) + "/" + std::to_string(length) + " dev " + device +
                    " metric " + metric);
  }
  return found;
}

// /proc/net/ipv6_route: dst, dst_len, src, src_len, next hop, metric, refs, use, flags, dev.
inline std::vector<std::string> ipv6_routes() {
  std::vector<std::string> found;
  std::ifstream file("/proc/net/ipv6_route");
  std::string destination, length, source, source_length, next_hop, metric, refs, use, flags,
      device;
  while (file >> destination >> length >> source >> source_length >> next_hop >> metric >> refs >>
         use >> flags >> device) {
    found.push_back(ipv6_from_hex(destination) + "/" +
                    std::to_string(std::stoul(length, nullptr, 16)) + " dev " + device +
                    " metric " + std::to_string(std::stoul(metric, nullptr, 16)));
  }
  return found;
}

inline bool contains(const std::vector<std::string>& list, const std::string& item) {
  for (const auto& entry : list)
    if (entry == item) return true;
  return false;
}

// A route as a netlink dump reports it: the fields /proc does not show.
struct DumpedRoute {
  std::string prefix;
  uint8_t protocol = 0;
  uint8_t scope = 0;
  uint32_t table = 0;
  uint32_t mtu = 0;  // RTAX_MTU, 0 when unset
};

// Dumps the routes of one family with a netlink socket of its own (not RtNetlink's code).
inline std::vector<DumpedRoute> dump_routes(int family) {
  std::vector<DumpedRoute> routes;
  mnl_socket* socket = mnl_socket_open(NETLINK_ROUTE);
  if (!socket) return routes;
  if (mnl_socket_bind(socket, 0, MNL_SOCKET_AUTOPID) < 0) {
    mnl_socket_close(socket);
    return routes;
  }
  std::vector<char> buffer(32 * 1024);
  nlmsghdr* request = mnl_nlmsg_put_header(buffer.data());
  request->nlmsg_type = RTM_GETROUTE;
  request->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  request->nlmsg_seq = 1;
  auto* header = static_cast<rtmsg*>(mnl_nlmsg_put_extra_header(request, sizeof(rtmsg)));
  header->rtm_family = static_cast<uint8_t>(family);
  unsigned port = mnl_socket_get_portid(socket);
  if (mnl_socket_sendto(socket, request, request->nlmsg_len) < 0) {
    mnl_socket_close(socket);
    return routes;
  }

  auto on_route = [](const nlmsghdr* reply, void* data) -> int {
    auto* out = static_cast<std::vector<DumpedRoute>*>(data);
    const auto* message = static_cast<const rtmsg*>(mnl_nlmsg_get_payload(reply));
    DumpedRoute route;
    route.protocol = message->rtm_protocol;
    route.scope = message->rtm_scope;
    route.table = message->rtm_table;
    struct Parse {
      DumpedRoute* route;
      int family;
      uint8_t length;
    } parse{&route, message->rtm_family, message->rtm_dst_len};
    mnl_attr_parse(
        reply, sizeof(rtmsg),
        [](const nlattr* attribute, void* context) -> int {
          auto* p = static_cast<Parse*>(context);
          switch (mnl_attr_get_type(attribute)) {
            case RTA_DST: {
              char text[INET6_ADDRSTRLEN];
              inet_ntop(p->family, mnl_attr_get_payload(attribute), text, sizeof text);
              p->route->prefix = std::string(text) + "/" + std::to_string(p->length);
              break;
            }
            case RTA_TABLE:
              p->route->table = mnl_attr_get_u32(attribute);
              break;
            case RTA_METRICS:
              mnl_attr_parse_nested(
                  attribute,
                  [](const nlattr* metric, void* inner) -> int {
                    if (mnl_attr_get_type(metric) == RTAX_MTU)
                      static_cast<DumpedRoute*>(inner)->mtu = mnl_attr_get_u32(metric);
                    return MNL_CB_OK;
                  },
                  p->route);
              break;
          }
          return MNL_CB_OK;
        },
        &parse);
    out->push_back(route);
    return MNL_CB_OK;
  };

  for (;;) {
    ssize_t received = mnl_socket_recvfrom(socket, buffer.data(), buffer.size());
    if (received <= 0) break;
    if (mnl_cb_run(buffer.data(), static_cast<size_t>(received), 1, port, on_route, &routes) <=
        MNL_CB_STOP)
      break;
  }
  mnl_socket_close(socket);
  return routes;
}

inline std::optional<DumpedRoute> find_route(int family, const std::string& prefix) {
  for (const auto& route : dump_routes(family))
    if (route.prefix == prefix) return route;
  return std::nullopt;
}

inline esp::IpPrefix prefix(const char* text) {
  auto parsed = esp::IpPrefix::parse(text);
  EXPECT_TRUE(parsed) << text;
  return parsed.value_or(esp::IpPrefix{});
}

inline esp::IpAddress address(const char* text) {
  auto parsed = esp::IpAddress::parse(text);
  EXPECT_TRUE(parsed) << text;
  return parsed.value_or(esp::IpAddress{});
}

// --- Fixture ------------------------------------------------------------------------------

// Every test gets two fresh TUN devices (down, MTU 1500) and an RtNetlink opened inside the
// private namespace.
class RtNetlinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_namespace.entered) GTEST_SKIP() << g_namespace.problem;
    tun0_.emplace("espgw0");
    tun1_.emplace("espgw1");
    ASSERT_TRUE(tun0_->ok() && tun1_->ok())
        << "cannot create TUN devices: " << std::strerror(errno);
    netlink_.emplace();
  }

  void bring_up(const std::string& name) {
    auto result = netlink_->set_link_up(name);
    ASSERT_TRUE(result.ok) << result.message;
  }

  std::optional<TunDevice> tun0_, tun1_;
  std::optional<RtNetlink> netlink_;
};

}  // namespace espgw::xfrm

// Tests of RtNetlink against the real kernel. The whole test process first moves into a
// private network namespace of its own (unshare(CLONE_NEWNET)), so nothing here touches the
// host's interfaces or routes, and whatever a test leaves behind vanishes with the process.
// Test interfaces are TUN devices, as the daemon uses; each test opens fresh ones and closing
// them deletes them. What RtNetlink did is read back through other channels than RtNetlink
// itself: ioctl (flags, MTU), getifaddrs, /proc/net/{route,ipv6_route,if_inet6} (which follow
// the process's namespace, unlike /sys/class/net) and a route dump written here with libmnl.
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
namespace {

using ::testing::HasSubstr;

// --- The private namespace -------------------------------------------------------------

struct Namespace {
  bool entered = false;
  std::string problem;  // why we could not enter one
};
Namespace g_namespace;

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
std::optional<ifreq> interface_ioctl(const std::string& name, unsigned long request_code) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  ifreq request{};
  std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
  int rc = ioctl(fd, request_code, &request);
  close(fd);
  if (rc < 0) return std::nullopt;
  return request;
}

int kernel_mtu(const std::string& name) {
  auto reply = interface_ioctl(name, SIOCGIFMTU);
  return reply ? reply->ifr_mtu : -1;
}

bool kernel_is_up(const std::string& name) {
  auto reply = interface_ioctl(name, SIOCGIFFLAGS);
  return reply && (reply->ifr_flags & IFF_UP);
}

// IPv4 addresses of `name` as "a.b.c.d/len", via getifaddrs.
std::vector<std::string> ipv4_addresses(const std::string& name) {
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
std::string ipv6_from_hex(const std::string& hex) {
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
std::vector<Ipv6Address> ipv6_addresses(const std::string& name) {
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
std::vector<std::string> ipv4_routes() {
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
std::vector<std::string> ipv6_routes() {
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

bool contains(const std::vector<std::string>& list, const std::string& item) {
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
std::vector<DumpedRoute> dump_routes(int family) {
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

std::optional<DumpedRoute> find_route(int family, const std::string& prefix) {
  for (const auto& route : dump_routes(family))
    if (route.prefix == prefix) return route;
  return std::nullopt;
}

esp::IpPrefix prefix(const char* text) {
  auto parsed = esp::IpPrefix::parse(text);
  EXPECT_TRUE(parsed) << text;
  return parsed.value_or(esp::IpPrefix{});
}

esp::IpAddress address(const char* text) {
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

// --- Links ----------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, LinkUpAndDown) {
  ASSERT_FALSE(kernel_is_up("espgw0"));
  auto up = netlink_->set_link_up("espgw0");
  ASSERT_TRUE(up.ok) << up.message;
  EXPECT_TRUE(kernel_is_up("espgw0"));
  EXPECT_FALSE(kernel_is_up("espgw1")) << "only the named link changes";

  auto down = netlink_->set_link_down("espgw0");
  ASSERT_TRUE(down.ok) << down.message;
  EXPECT_FALSE(kernel_is_up("espgw0"));
}

TEST_F(RtNetlinkTest, MtuIsSetAndReadBack) {
  auto set = netlink_->set_mtu("espgw0", 1380);
  ASSERT_TRUE(set.ok) << set.message;
  EXPECT_EQ(kernel_mtu("espgw0"), 1380);

  auto read = netlink_->link_mtu("espgw0");
  ASSERT_TRUE(read.ok) << read.message;
  EXPECT_EQ(read.mtu, 1380u);
  EXPECT_EQ(read.interface, "espgw0");
  EXPECT_EQ(netlink_->link_mtu("espgw1").mtu, 1500u);
}

TEST_F(RtNetlinkTest, MtuAboveDeviceMaximumCarriesKernelReason) {
  auto result = netlink_->set_mtu("espgw0", 70000);  // TUN allows at most 65535
  ASSERT_FALSE(result.ok);
  EXPECT_EQ(result.error, EINVAL);
  EXPECT_THAT(result.message, HasSubstr("set mtu 70000 on espgw0"));
  EXPECT_THAT(result.message, HasSubstr("kernel says"));  // the extended ack's text
  EXPECT_EQ(kernel_mtu("espgw0"), 1500);
}

TEST_F(RtNetlinkTest, UnknownInterfaceIsNamed) {
  auto up = netlink_->set_link_up("nosuch0");
  EXPECT_FALSE(up.ok);
  EXPECT_EQ(up.error, ENODEV);
  EXPECT_EQ(up.message, "set link up nosuch0: no such interface (ENODEV)");

  auto mtu = netlink_->link_mtu("nosuch0");
  EXPECT_FALSE(mtu.ok);
  EXPECT_THAT(mtu.message, HasSubstr("nosuch0"));

  auto route = netlink_->add_route(prefix("10.1.0.0/16"), "nosuch0");
  EXPECT_EQ(route.error, ENODEV);
  EXPECT_THAT(route.message, HasSubstr("add route 10.1.0.0/16 dev nosuch0"));

  auto added = netlink_->add_address("nosuch0", prefix("10.0.0.1/24"));
  EXPECT_EQ(added.error, ENODEV);
  EXPECT_THAT(added.message, HasSubstr("add address 10.0.0.1/24 dev nosuch0"));
}

// --- Addresses ------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, Ipv4AddressAddRemove) {
  auto added = netlink_->add_address("espgw0", prefix("10.0.0.1/24"));
  ASSERT_TRUE(added.ok) << added.message;
  EXPECT_TRUE(contains(ipv4_addresses("espgw0"), "10.0.0.1/24"));

  auto again = netlink_->add_address("espgw0", prefix("10.0.0.1/24"));
  EXPECT_FALSE(again.ok);
  EXPECT_TRUE(again.already_exists()) << again.message;

  auto removed = netlink_->remove_address("espgw0", prefix("10.0.0.1/24"));
  ASSERT_TRUE(removed.ok) << removed.message;
  EXPECT_TRUE(ipv4_addresses("espgw0").empty());

  auto missing = netlink_->remove_address("espgw0", prefix("10.0.0.1/24"));
  EXPECT_FALSE(missing.ok);
  EXPECT_EQ(missing.error, EADDRNOTAVAIL);
  EXPECT_THAT(missing.message,
              HasSubstr("remove address 10.0.0.1/24 dev espgw0: address not found"));
}

TEST_F(RtNetlinkTest, Ipv6AddressAddRemoveWithoutDad) {
  bring_up("espgw0");
  auto added = netlink_->add_address("espgw0", prefix("2001:db8::1/64"));
  ASSERT_TRUE(added.ok) << added.message;
  bool found = false;
  for (const auto& entry : ipv6_addresses("espgw0")) {
    if (entry.prefix != "2001:db8::1/64") continue;
    found = true;
    // A TUN device is NOARP, where the kernel skips DAD anyway, so check the flag itself;
    // the daemon may also add addresses to devices where DAD would run.
    EXPECT_TRUE(entry.flags & IFA_F_NODAD);
    EXPECT_FALSE(entry.flags & IFA_F_TENTATIVE) << "usable at once";
  }
  EXPECT_TRUE(found);

  EXPECT_TRUE(netlink_->add_address("espgw0", prefix("2001:db8::1/64")).already_exists());

  auto removed = netlink_->remove_address("espgw0", prefix("2001:db8::1/64"));
  ASSERT_TRUE(removed.ok) << removed.message;
  for (const auto& entry : ipv6_addresses("espgw0")) EXPECT_NE(entry.prefix, "2001:db8::1/64");
}

TEST_F(RtNetlinkTest, AddressWithoutFamilyIsRefused) {
  auto result = netlink_->add_address("espgw0", esp::IpPrefix{});
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, EAFNOSUPPORT);
}

// --- Routes ---------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, Ipv4RouteAddRemove) {
  bring_up("espgw0");
  auto added = netlink_->add_route(prefix("10.1.0.0/16"), "espgw0", 50);
  ASSERT_TRUE(added.ok) << added.message;
  EXPECT_TRUE(contains(ipv4_routes(), "10.1.0.0/16 dev espgw0 metric 50"));
  auto dumped = find_route(AF_INET, "10.1.0.0/16");
  ASSERT_TRUE(dumped);
  EXPECT_EQ(dumped->protocol, RtNetlink::kRouteProtocol);
  EXPECT_EQ(dumped->scope, RT_SCOPE_LINK);
  EXPECT_EQ(dumped->table, static_cast<uint32_t>(RT_TABLE_MAIN));

  auto removed = netlink_->remove_route(prefix("10.1.0.0/16"), "espgw0", 50);
  ASSERT_TRUE(removed.ok) << removed.message;
  EXPECT_FALSE(contains(ipv4_routes(), "10.1.0.0/16 dev espgw0 metric 50"));
}

TEST_F(RtNetlinkTest, Ipv6RouteAddRemove) {
  bring_up("espgw0");
  auto added = netlink_->add_route(prefix("2001:db8:5::/48"), "espgw0");
  ASSERT_TRUE(added.ok) << added.message;
  // Without a metric the kernel gives IPv6 user routes 1024.
  EXPECT_TRUE(contains(ipv6_routes(), "2001:db8:5::/48 dev espgw0 metric 1024"));
  auto dumped = find_route(AF_INET6, "2001:db8:5::/48");
  ASSERT_TRUE(dumped);
  EXPECT_EQ(dumped->protocol, RtNetlink::kRouteProtocol);

  auto removed = netlink_->remove_route(prefix("2001:db8:5::/48"), "espgw0");
  ASSERT_TRUE(removed.ok) << removed.message;
  EXPECT_FALSE(contains(ipv6_routes(), "2001:db8:5::/48 dev espgw0 metric 1024"));
}

// Fail-closed routing (xfrm/fail_closed_routes.h): a table of espgw's own, prohibit routes
// that need no device, rules with selectors, and the dumps that find them again.
TEST_F(RtNetlinkTest, OwnTableProhibitRoutesAndRules) {
  bring_up("espgw0");
  constexpr uint32_t kTable = 0x45001234;
  ASSERT_TRUE(
      netlink_->add_route(prefix("10.2.0.0/16"), "espgw0", std::nullopt, std::nullopt, kTable).ok);
  auto prohibit = netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"),
                                            kTable, 4096);
  ASSERT_TRUE(prohibit.ok) << prohibit.message;
  ASSERT_TRUE(
      netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("fd00:2::/64"), kTable, 4096)
          .ok);
  EXPECT_TRUE(
      netlink_->add_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"), kTable, 4096)
          .already_exists());
  std::vector<RtNetlink::TableRoute> routes;
  ASSERT_TRUE(netlink_->list_routes(kTable, routes).ok);
  ASSERT_EQ(routes.size(), 3u);
  size_t prohibits = 0;
  for (const auto& route : routes)
    if (route.type == RtNetlink::RouteType::prohibit) {
      ++prohibits;
      EXPECT_EQ(route.metric, 4096u);
    }
  EXPECT_EQ(prohibits, 2u);
  // The main table knows nothing of them.
  std::vector<RtNetlink::TableRoute> main_routes;
  ASSERT_TRUE(netlink_->list_routes(RtNetlink::kMainTable, main_routes).ok);
  EXPECT_TRUE(main_routes.empty());

  RtNetlink::Rule rule;
  rule.family = 4;
  rule.priority = 31000;
  rule.source = prefix("10.1.0.0/16");
  rule.destination = prefix("10.2.99.0/24");
  rule.protocol = 17;
  rule.destination_ports = std::pair<uint16_t, uint16_t>{53, 53};
  auto added = netlink_->add_rule(rule);
  ASSERT_TRUE(added.ok) << added.message;
  EXPECT_TRUE(netlink_->add_rule(rule).already_exists());
  std::vector<RtNetlink::Rule> rules;
  ASSERT_TRUE(netlink_->list_rules(rules).ok);
  ASSERT_EQ(rules.size(), 1u);  // only ours (protocol 245), not the kernel's three
  EXPECT_EQ(rules[0].priority, 31000u);
  EXPECT_EQ(rules[0].table, RtNetlink::kMainTable);
  EXPECT_EQ(rules[0].source.to_string(), "10.1.0.0/16");
  EXPECT_EQ(rules[0].destination.to_string(), "10.2.99.0/24");
  EXPECT_EQ(rules[0].protocol, 17);
  EXPECT_FALSE(rules[0].source_ports);
  ASSERT_TRUE(rules[0].destination_ports);
  EXPECT_EQ(rules[0].destination_ports->first, 53);
  ASSERT_TRUE(netlink_->remove_rule(rule).ok);
  EXPECT_EQ(netlink_->remove_rule(rule).error, ENOENT);

  ASSERT_TRUE(
      netlink_
          ->remove_typed_route(RtNetlink::RouteType::prohibit, prefix("10.2.0.0/16"), kTable, 4096)
          .ok);
  routes.clear();
  ASSERT_TRUE(netlink_->list_routes(kTable, routes).ok);
  EXPECT_EQ(routes.size(), 2u);
}

TEST_F(RtNetlinkTest, RouteMtuMetricIsInstalled) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->add_route(prefix("10.14.0.0/16"), "espgw0", std::nullopt, 1400).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:14::/48"), "espgw0", std::nullopt, 1400).ok);
  auto v4 = find_route(AF_INET, "10.14.0.0/16");
  auto v6 = find_route(AF_INET6, "2001:db8:14::/48");
  ASSERT_TRUE(v4 && v6);
  EXPECT_EQ(v4->mtu, 1400u);
  EXPECT_EQ(v6->mtu, 1400u);
}

TEST_F(RtNetlinkTest, AddingAnExistingRouteReportsEexist) {
  bring_up("espgw0");
  for (const char* text : {"10.1.0.0/16", "2001:db8:5::/48"}) {
    ASSERT_TRUE(netlink_->add_route(prefix(text), "espgw0").ok) << text;
    auto again = netlink_->add_route(prefix(text), "espgw0");
    EXPECT_FALSE(again.ok);
    EXPECT_TRUE(again.already_exists()) << again.message;
    EXPECT_THAT(again.message, HasSubstr(std::string("add route ") + text + " dev espgw0"));
    EXPECT_THAT(again.message, HasSubstr("already exists"));
    // A different metric is a different route, not a duplicate.
    EXPECT_TRUE(netlink_->add_route(prefix(text), "espgw0", 7).ok) << text;
  }
}

TEST_F(RtNetlinkTest, RemovingAMissingRouteNamesThePrefix) {
  bring_up("espgw0");
  auto v4 = netlink_->remove_route(prefix("10.9.0.0/16"), "espgw0");
  EXPECT_FALSE(v4.ok);
  EXPECT_EQ(v4.error, ESRCH);
  EXPECT_EQ(v4.message.substr(0, v4.message.find(" (")),
            "remove route 10.9.0.0/16 dev espgw0: not found");

  auto v6 = netlink_->remove_route(prefix("2001:db8:9::/48"), "espgw0", 5);
  EXPECT_FALSE(v6.ok);
  EXPECT_EQ(v6.error, ESRCH);
  EXPECT_THAT(v6.message, HasSubstr("remove route 2001:db8:9::/48 dev espgw0 metric 5: not found"));
}

TEST_F(RtNetlinkTest, RouteThroughADownLinkCarriesKernelReason) {
  auto result = netlink_->add_route(prefix("10.1.0.0/16"), "espgw0");  // espgw0 is down
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, ENETDOWN);
  EXPECT_THAT(result.message, HasSubstr("add route 10.1.0.0/16 dev espgw0"));
  EXPECT_THAT(result.message, HasSubstr("kernel says"));
}

TEST_F(RtNetlinkTest, RoutePrefixWithHostBitsIsRefused) {
  bring_up("espgw0");
  auto result = netlink_->add_route(prefix("10.1.2.3/16"), "espgw0");
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, EINVAL);
  EXPECT_THAT(result.message, HasSubstr("add route 10.1.2.3/16 dev espgw0"));
}

// --- Path MTU -------------------------------------------------------------------------------

TEST_F(RtNetlinkTest, RouteMtuIsTheLinkMtuWithoutARouteMetric) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 9000).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.90.0.0/16"), "espgw0").ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:90::/48"), "espgw0").ok);

  for (const char* destination : {"10.90.1.1", "2001:db8:90::1"}) {
    auto result = netlink_->route_mtu(address(destination));
    ASSERT_TRUE(result.ok) << result.message;
    EXPECT_EQ(result.mtu, 9000u) << destination;
    EXPECT_EQ(result.interface, "espgw0") << destination;
  }
}

TEST_F(RtNetlinkTest, RouteMtuPrefersTheRouteMetric) {
  bring_up("espgw0");
  bring_up("espgw1");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 9000).ok);
  ASSERT_TRUE(netlink_->set_mtu("espgw1", 9000).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.90.0.0/16"), "espgw0").ok);
  ASSERT_TRUE(netlink_->add_route(prefix("10.14.0.0/16"), "espgw1", std::nullopt, 1400).ok);
  ASSERT_TRUE(netlink_->add_route(prefix("2001:db8:14::/48"), "espgw1", std::nullopt, 1400).ok);

  auto wide = netlink_->route_mtu(address("10.90.7.7"));
  ASSERT_TRUE(wide.ok) << wide.message;
  EXPECT_EQ(wide.mtu, 9000u);
  EXPECT_EQ(wide.interface, "espgw0");

  for (const char* destination : {"10.14.1.1", "2001:db8:14::1"}) {
    auto narrow = netlink_->route_mtu(address(destination));
    ASSERT_TRUE(narrow.ok) << narrow.message;
    EXPECT_EQ(narrow.mtu, 1400u) << destination;
    EXPECT_EQ(narrow.interface, "espgw1") << destination;
  }
}

TEST_F(RtNetlinkTest, RouteMtuIsBoundedByTheLinkMtu) {
  bring_up("espgw0");
  ASSERT_TRUE(netlink_->set_mtu("espgw0", 1400).ok);
  auto added = netlink_->add_route(prefix("10.15.0.0/16"), "espgw0", std::nullopt, 9000);
  ASSERT_TRUE(added.ok) << added.message;
  auto result = netlink_->route_mtu(address("10.15.0.1"));
  ASSERT_TRUE(result.ok) << result.message;
  EXPECT_EQ(result.mtu, 1400u);
}

TEST_F(RtNetlinkTest, RouteMtuWithoutARouteIsUnreachable) {
  auto result = netlink_->route_mtu(address("192.0.2.1"));  // the new namespace has no routes
  EXPECT_FALSE(result.ok);
  EXPECT_EQ(result.error, ENETUNREACH);
  EXPECT_THAT(result.message, HasSubstr("route mtu towards 192.0.2.1"));
}

}  // namespace
}  // namespace espgw::xfrm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new espgw::xfrm::PrivateNetworkNamespace);
  return RUN_ALL_TESTS();
}

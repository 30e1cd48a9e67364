// Tests of RtNetlink against the real kernel. The whole test process first moves into a
// private network namespace of its own (unshare(CLONE_NEWNET)), so nothing here touches the
// host's interfaces or routes, and whatever a test leaves behind vanishes with the process.
// Test interfaces are TUN devices, as the daemon uses; each test opens fresh ones and closing
// them deletes them. What RtNetlink did is read back through other channels than RtNetlink
// itself: ioctl (flags, MTU), getifaddrs, /proc/net/{route,ipv6_route,if_inet6} (which follow
// the process's namespace, unlike /sys/class/net) and a route dump written here with libmnl.
// The tests are in netlink_*_test.cpp; this file runs them from inside that namespace.
#include "netlink_test_support.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new espgw::xfrm::PrivateNetworkNamespace);
  return RUN_ALL_TESTS();
}

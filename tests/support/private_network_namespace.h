// The private network namespace a daemon test process moves into before its first test
// (unshare() moves the calling thread; gtest runs environments and tests on the main
// thread), with its loopback up. Without root the tests skip, saying why.
#pragma once

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "xfrm/netlink.h"

namespace espgw::test {

// Empty once the namespace is ready; otherwise why the tests must skip.
inline std::string g_private_namespace_problem;

class PrivateNetworkNamespace : public ::testing::Environment {
 public:
  void SetUp() override {
    if (unshare(CLONE_NEWNET) != 0) {
      g_private_namespace_problem = std::string("unshare(CLONE_NEWNET) failed: ") +
                                    std::strerror(errno) +
                                    " -- these tests need root for a private network namespace";
      return;
    }
    xfrm::RtNetlink netlink;
    if (auto r = netlink.set_link_up("lo"); !r) g_private_namespace_problem = "lo: " + r.message;
  }
};

}  // namespace espgw::test

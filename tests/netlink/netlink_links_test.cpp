// RtNetlink on links and addresses, read back through ioctl, getifaddrs and /proc.
#include "netlink_test_support.h"

namespace espgw::xfrm {
namespace {

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

}  // namespace
}  // namespace espgw::xfrm

// The two pieces that keep charon's events flowing under attack or while charon is away
// (docs/security_control_events.md): the IKE rate limiter in front of the event
// connection, and the queue of SA expiries that found no charon.
#include <gtest/gtest.h>

#include "daemon/config.h"
#include "daemon/ike_rate_limiter.h"
#include "daemon/pending_expiries.h"

namespace espgw::daemon {
namespace {

constexpr uint64_t kSecond = 1'000'000'000;

esp::IpAddress address(const char* text) {
  return *esp::IpAddress::parse(text);
}

TEST(IkeRateLimiter, OneSourceGetsItsRateAndOthersStillGetTheirs) {
  IkeRateLimiter limiter({.per_source = 100, .global = 1000}, 42);
  const auto flood = address("192.0.2.66");
  size_t admitted = 0;
  for (int i = 0; i < 10000; ++i) admitted += limiter.admit(flood, kSecond);
  EXPECT_EQ(admitted, 100u);  // one second's worth at once, no more
  // Another peer is not affected by the flood (unless it shares the bucket; these don't).
  EXPECT_TRUE(limiter.admit(address("198.51.100.7"), kSecond));
  // Refilled at the rate: 10 ms later, one more token.
  admitted = 0;
  for (int i = 0; i < 100; ++i) admitted += limiter.admit(flood, kSecond + 10'000'000);
  EXPECT_EQ(admitted, 1u);
}

TEST(IkeRateLimiter, SpoofedSourcesMeetTheGlobalCap) {
  IkeRateLimiter limiter({.per_source = 100, .global = 1000}, 7);
  size_t admitted = 0;
  for (uint32_t i = 0; i < 50000; ++i) {
    esp::IpAddress source = address("10.0.0.0");
    source.bytes[1] = static_cast<uint8_t>(i >> 16);
    source.bytes[2] = static_cast<uint8_t>(i >> 8);
    source.bytes[3] = static_cast<uint8_t>(i);
    admitted += limiter.admit(source, kSecond);
  }
  EXPECT_EQ(admitted, 1000u);
  // A source over its own rate takes nothing from the global budget.
  IkeRateLimiter fresh({.per_source = 10, .global = 20}, 7);
  for (int i = 0; i < 1000; ++i) fresh.admit(address("192.0.2.66"), kSecond);
  admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += fresh.admit(address("198.51.100.7"), kSecond);
  EXPECT_EQ(admitted, 10u);
}

TEST(IkeRateLimiter, ZeroMeansNoLimit) {
  IkeRateLimiter limiter({.per_source = 0, .global = 0}, 1);
  for (int i = 0; i < 100000; ++i) ASSERT_TRUE(limiter.admit(address("192.0.2.66"), kSecond));
}

TEST(IkeRateLimiter, ConfiguredByIkeRateLimit) {
  const auto parse = [](const std::string& line) {
    return parse_gateway_config_text("local-address = 192.0.2.1\nstatic-sa-file = s.conf\n" + line,
                                     "gw.conf");
  };
  const auto defaults = parse("");
  ASSERT_TRUE(defaults.config);
  EXPECT_EQ(defaults.config->ike_rate_per_source, 5000u);
  EXPECT_EQ(defaults.config->ike_rate_global, 20000u);
  const auto set = parse("ike-rate-limit = 100   0\n");
  ASSERT_TRUE(set.config) << set.errors.front();
  EXPECT_EQ(set.config->ike_rate_per_source, 100u);
  EXPECT_EQ(set.config->ike_rate_global, 0u);
  const auto bad = parse("ike-rate-limit = 100\n");
  EXPECT_FALSE(bad.config);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_NE(bad.errors[0].find("gw.conf:3: 'ike-rate-limit'"), std::string::npos) << bad.errors[0];
}

TEST(PendingExpiries, DeduplicatedBoundedOldestFirst) {
  PendingExpiries pending;
  const auto dst = address("192.0.2.1");
  EXPECT_TRUE(pending.add({0xc0000001, dst, false}));
  EXPECT_FALSE(pending.add({0xc0000001, dst, false}));  // the same one again
  EXPECT_TRUE(pending.add({0xc0000001, dst, true}));    // its hard limit is news
  EXPECT_TRUE(pending.add({0xc0000001, address("192.0.2.2"), false}));
  EXPECT_EQ(pending.size(), 3u);
  const auto all = pending.take();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], (Expiry{0xc0000001, dst, false}));
  EXPECT_EQ(all[1], (Expiry{0xc0000001, dst, true}));
  EXPECT_EQ(pending.size(), 0u);

  for (uint32_t spi = 0; spi < PendingExpiries::kMaxPending + 10; ++spi)
    pending.add({spi, dst, false});
  EXPECT_EQ(pending.size(), PendingExpiries::kMaxPending);
  EXPECT_EQ(pending.dropped(), 10u);
  EXPECT_EQ(pending.take().front().spi, 10u);  // the oldest went
}

}  // namespace
}  // namespace espgw::daemon

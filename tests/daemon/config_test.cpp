// espgw.conf parsing: every key, and every bad line reported as FILE:LINE.
#include "daemon/config.h"
#include "daemon/config_reload.h"

#include <gtest/gtest.h>

namespace espgw::daemon {
namespace {

TEST(GatewayConfig, ParsesEveryKey) {
  const auto result = parse_gateway_config_text(R"(# comment
tun-name = gw7
tun-queues = 4
tun-offload = no
tun-rps = no
tun-address = 10.1.255.1/32
local-address = 2001:db8::1   # trailing comment
udp-port = 4501
static-sa-file = static/a.conf
workers = 3
crypto-backend = openssl
pin-workers = yes
socket-buffer = 1048576
queue-delay-target-us = 0
queue-delay-interval-us = 20000
reorder-hold-us = 500
pool-packets = 1024
tunnel-mtu = 1400
jumbo-segments = no
lan-mtu = 9000
log-level = debug
stats-interval = 10
)",
                                                "/etc/espgw/espgw.conf");
  ASSERT_TRUE(result.config) << (result.errors.empty() ? "" : result.errors.front());
  const GatewayConfig& c = *result.config;
  EXPECT_EQ(c.tun_name, "gw7");
  EXPECT_EQ(c.tun_queues, 4u);
  EXPECT_FALSE(c.tun_offload);
  EXPECT_EQ(c.tun_rps, std::optional<bool>(false));
  EXPECT_EQ(c.tun_address->to_string(), "10.1.255.1/32");
  ASSERT_EQ(c.local_addresses.size(), 1u);
  EXPECT_EQ(c.local_addresses[0].to_string(), "2001:db8::1");
  EXPECT_EQ(c.udp_port, 4501);
  EXPECT_EQ(c.static_sa_file, "/etc/espgw/static/a.conf") << "relative to the config file";
  EXPECT_EQ(c.workers, 3u);
  EXPECT_EQ(c.crypto_backend, "openssl");
  EXPECT_TRUE(c.pin_workers);
  EXPECT_EQ(c.socket_buffer_bytes, 1048576u);
  EXPECT_EQ(wan_socket_buffer_bytes(c), 1048576u) << "set: whatever the workers mode";
  EXPECT_EQ(c.queue_delay_target->count(), 0) << "0 turns the gate off";
  EXPECT_EQ(c.queue_delay_interval.count(), 20000);
  EXPECT_EQ(c.reorder_hold.count(), 500);
  EXPECT_EQ(c.pool_packets, 1024u);
  EXPECT_EQ(*c.tunnel_mtu, 1400u);
  EXPECT_FALSE(c.jumbo_segments);  // "yes" needs tun-offload, which this file turns off
  EXPECT_EQ(*c.lan_mtu, 9000u);
  EXPECT_EQ(c.log_level, LogLevel::debug);
  EXPECT_EQ(c.stats_interval.count(), 10);
}

TEST(GatewayConfig, TunRpsIsOnWithWorkersOnSeveralCpusUnlessSetOtherwise) {
  const auto with = [](const std::string& lines) {
    auto result = parse_gateway_config_text(
        "local-address = 192.0.2.1\nstatic-sa-file = s.conf\n" + lines, "gw.conf");
    EXPECT_TRUE(result.config) << (result.errors.empty() ? "" : result.errors.front());
    return result.config.value_or(GatewayConfig{});
  };
  EXPECT_TRUE(wants_tun_rps(with("workers = 0\n"), 2)) << "auto: workers write an SA's packets";
  EXPECT_TRUE(wants_tun_rps(with("tun-rps = auto\nworkers = 1\n"), 16));
  EXPECT_FALSE(wants_tun_rps(with("workers = 0\n"), 1)) << "one CPU: nothing to steer to";
  EXPECT_FALSE(wants_tun_rps(with("workers = inline\n"), 2)) << "one reader writes a socket's";
  EXPECT_TRUE(wants_tun_rps(with("workers = inline\ntun-rps = yes\n"), 2));
  EXPECT_FALSE(wants_tun_rps(with("tun-rps = no\n"), 16));
  const auto bad = parse_gateway_config_text(
      "local-address = 192.0.2.1\nstatic-sa-file = s.conf\ntun-rps = sometimes\n", "gw.conf");
  EXPECT_FALSE(bad.config);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_EQ(bad.errors[0], "gw.conf:3: 'tun-rps': expected auto, yes or no, got 'sometimes'");
}

// Core dumps would hold SA keys: off unless asked for.
TEST(GatewayConfig, CoreDumpsAreOffUnlessAllowed) {
  const auto with = [](const std::string& lines) {
    return parse_gateway_config_text("local-address = 192.0.2.1\nstatic-sa-file = s.conf\n" + lines,
                                     "gw.conf");
  };
  ASSERT_TRUE(with("").config);
  EXPECT_FALSE(with("").config->allow_core_dumps);
  EXPECT_TRUE(with("allow-core-dumps = yes\n").config->allow_core_dumps);
  EXPECT_FALSE(with("allow-core-dumps = no\n").config->allow_core_dumps);
  const auto bad = with("allow-core-dumps = maybe\n");
  EXPECT_FALSE(bad.config);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_EQ(bad.errors[0], "gw.conf:3: 'allow-core-dumps': expected yes or no, got 'maybe'");
}

TEST(GatewayConfig, EachConfigurationFileHasAStateDirectoryOfItsOwn) {
  // Two instances on one host, each with its own file and no state-dir: their SA state
  // must not share a directory (the second would refuse to start).
  const std::string minimal = "local-address = 192.0.2.1\nstatic-sa-file = s.conf\n";
  const auto a = parse_gateway_config_text(minimal, "/tmp/one/espgw.conf");
  const auto b = parse_gateway_config_text(minimal, "/tmp/two/espgw.conf");
  ASSERT_TRUE(a.config && b.config);
  EXPECT_TRUE(a.config->state_dir.starts_with("/var/lib/espgw/espgw.conf-"));
  EXPECT_NE(a.config->state_dir, b.config->state_dir);
  EXPECT_EQ(a.config->state_dir, default_state_dir("/tmp/one/espgw.conf")) << "stable";
  // Set, it is taken as it is (relative to the file's directory).
  const auto set =
      parse_gateway_config_text(minimal + "state-dir = state\n", "/tmp/one/espgw.conf");
  ASSERT_TRUE(set.config);
  EXPECT_EQ(set.config->state_dir, "/tmp/one/state");
}

TEST(GatewayConfig, EveryBadLineIsNamedByFileAndLine) {
  const auto result = parse_gateway_config_text(R"(local-address = 192.0.2.1
static-sa-file = s.conf
tun-queues = 0
colour = blue
udp-port = 70000
crypto-backend = rot13
just some words
log-level =
local-address = 300.1.1.1
)",
                                                "gw.conf");
  EXPECT_FALSE(result.config);
  const std::vector<std::string> expected = {
      "gw.conf:3: 'tun-queues': expected a number from 1 to 64, got '0'",
      "gw.conf:4: unknown key 'colour'",
      "gw.conf:5: 'udp-port': expected a port number, got '70000'",
      "gw.conf:6: 'crypto-backend': expected ipsec-mb or openssl, got 'rot13'",
      "gw.conf:7: expected 'key = value', got 'just some words'",
      "gw.conf:8: 'log-level' has no value",
      "gw.conf:9: 'local-address': expected an IPv4 or IPv6 address, got '300.1.1.1'",
  };
  EXPECT_EQ(result.errors, expected);
}

// gw.conf with the two required keys (lines 1 and 2), then `lines`.
ConfigResult parse_with(const std::string& lines) {
  return parse_gateway_config_text("local-address = 192.0.2.1\nstatic-sa-file = s.conf\n" + lines,
                                   "gw.conf");
}

TEST(GatewayConfig, InterfacesNameOneTunDevicePerInterfaceId) {
  const auto parsed = parse_with(
      "control-socket = /run/espgw.sock\ninterface = 1 vpn-peer1\ninterface = 4294967295 "
      "vpn.peer2\n");
  ASSERT_TRUE(parsed.config) << parsed.errors.front();
  EXPECT_EQ(parsed.config->interfaces,
            (std::vector<RouteInterface>{{1, "vpn-peer1"}, {4294967295u, "vpn.peer2"}}));
  EXPECT_TRUE(parse_with("control-socket = /run/espgw.sock\n").config->interfaces.empty());
  const std::string expected =
      "'IF_ID NAME': an interface id from 1 to 4294967295 and a TUN device name of at most 15 "
      "letters, digits, '_', '-' or '.', each id and name once";
  for (const char* bad : {"0 vpn0", "1", "x vpn1", "4294967296 vpn1", "1 a/b", "1 a-name-of-16-chr",
                          "1 vpn1\ninterface = 1 vpn2", "1 vpn1\ninterface = 2 vpn1"}) {
    const auto result =
        parse_with("control-socket = /run/espgw.sock\ninterface = " + std::string(bad) + "\n");
    EXPECT_FALSE(result.config) << bad;
    ASSERT_FALSE(result.errors.empty()) << bad;
    EXPECT_NE(result.errors.back().find(expected), std::string::npos) << result.errors.back();
  }
  const auto default_name = parse_with("control-socket = /s\ninterface = 3 espgw0\n");
  ASSERT_FALSE(default_name.errors.empty());
  EXPECT_EQ(default_name.errors[0],
            "gw.conf: 'interface 3 espgw0': the name is tun-name's, the default device");
  const auto static_only = parse_with("interface = 3 vpn3\n");
  ASSERT_FALSE(static_only.errors.empty());
  EXPECT_EQ(static_only.errors[0],
            "gw.conf: 'interface' needs 'control-socket' (charon's if_id_in and if_id_out "
            "name the interfaces)");
}

TEST(GatewayConfig, WorkersInlineRunsToCompletion) {
  const auto inline_mode = parse_with("workers = inline\n");
  ASSERT_TRUE(inline_mode.config);
  EXPECT_TRUE(inline_mode.config->run_to_completion);
  // The last line wins, as for every key.
  const auto counted = parse_with("workers = inline\nworkers = 2\n");
  ASSERT_TRUE(counted.config);
  EXPECT_FALSE(counted.config->run_to_completion);
  EXPECT_EQ(counted.config->workers, 2u);
  const auto bad = parse_with("workers = lots\n");
  EXPECT_FALSE(bad.config);
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_EQ(bad.errors[0],
            "gw.conf:3: 'workers': expected auto, inline, or a number from 0 (one per CPU) to "
            "1024, got 'lots'");
}

TEST(GatewayConfig, WorkersAutoIsTheDefaultAndRunsInlineOnTwoCpusOrFewer) {
  const auto by_default = parse_with("");
  ASSERT_TRUE(by_default.config);
  EXPECT_TRUE(by_default.config->workers_auto);
  // Resolved against the CPUs this test may use, as the daemon resolves it.
  EXPECT_EQ(by_default.config->run_to_completion, usable_cpu_count() <= kAutoInlineMaxCpus);
  const auto written = parse_with("workers = 4\nworkers = auto\n");
  ASSERT_TRUE(written.config);
  EXPECT_TRUE(written.config->workers_auto) << "the last line wins";

  for (const unsigned cpus : {1u, 2u}) {
    GatewayConfig config = *by_default.config;
    resolve_auto_workers(config, cpus);
    EXPECT_TRUE(config.run_to_completion) << cpus << " CPUs: a worker has no core of its own";
  }
  for (const unsigned cpus : {3u, 16u}) {
    GatewayConfig config = *by_default.config;
    resolve_auto_workers(config, cpus);
    EXPECT_FALSE(config.run_to_completion) << cpus << " CPUs";
    EXPECT_EQ(config.workers, 0u) << "one worker per CPU";
  }
  // An explicit choice is never overridden.
  auto inline_mode = parse_with("workers = inline\n");
  ASSERT_TRUE(inline_mode.config);
  EXPECT_FALSE(inline_mode.config->workers_auto);
  resolve_auto_workers(*inline_mode.config, 16);
  EXPECT_TRUE(inline_mode.config->run_to_completion);
  auto counted = parse_with("workers = 3\n");
  ASSERT_TRUE(counted.config);
  resolve_auto_workers(*counted.config, 1);
  EXPECT_FALSE(counted.config->run_to_completion);
  EXPECT_EQ(counted.config->workers, 3u);
  EXPECT_GE(usable_cpu_count(), 1u);
}

TEST(GatewayConfig, QueueDelayTargetIsAutoUnlessSet) {
  const auto by_default = parse_with("");
  ASSERT_TRUE(by_default.config);
  EXPECT_FALSE(by_default.config->queue_delay_target) << "auto: decided by the workers mode";
  const auto set = parse_with("queue-delay-target-us = 750\n");
  ASSERT_TRUE(set.config);
  EXPECT_EQ(set.config->queue_delay_target->count(), 750);
  const auto back_to_auto =
      parse_with("queue-delay-target-us = 750\nqueue-delay-target-us = auto\n");
  ASSERT_TRUE(back_to_auto.config);
  EXPECT_FALSE(back_to_auto.config->queue_delay_target);
  EXPECT_FALSE(parse_with("queue-delay-target-us = soon\n").config);
}

TEST(GatewayConfig, SocketBufferIsAutoUnlessSetAndAutoFollowsTheWorkersMode) {
  const auto by_default = parse_with("workers = 0\n");
  ASSERT_TRUE(by_default.config);
  EXPECT_FALSE(by_default.config->socket_buffer_bytes);
  EXPECT_EQ(wan_socket_buffer_bytes(*by_default.config), kWorkersSocketBufferBytes)
      << "with workers the buffer only has to outlast a descheduled reader";
  const auto inline_readers = parse_with("workers = inline\n");
  ASSERT_TRUE(inline_readers.config);
  EXPECT_EQ(wan_socket_buffer_bytes(*inline_readers.config), kInlineSocketBufferBytes)
      << "inline, the receive queue is the latency under load";
  EXPECT_GE(kInlineSocketBufferBytes, size_t{2} << 20)
      << "inline, the buffer absorbs what arrives while the reader is preempted";
  const auto set = parse_with("workers = inline\nsocket-buffer = 65536\n");
  ASSERT_TRUE(set.config);
  EXPECT_EQ(wan_socket_buffer_bytes(*set.config), 65536u);
  const auto back_to_auto = parse_with("socket-buffer = 65536\nsocket-buffer = auto\n");
  ASSERT_TRUE(back_to_auto.config);
  EXPECT_FALSE(back_to_auto.config->socket_buffer_bytes);
  EXPECT_FALSE(parse_with("socket-buffer = 65535\n").config) << "below the minimum";
  EXPECT_FALSE(parse_with("socket-buffer = big\n").config);
}

TEST(GatewayConfig, JumboSegmentsAreOffAndTheLanMtuDerivedByDefault) {
  const auto defaults = parse_with("");
  ASSERT_TRUE(defaults.config);
  EXPECT_FALSE(defaults.config->jumbo_segments);
  EXPECT_FALSE(defaults.config->lan_mtu);
  const auto jumbo = parse_with("jumbo-segments = yes\n");
  ASSERT_TRUE(jumbo.config);
  EXPECT_TRUE(jumbo.config->jumbo_segments);
  const auto back_to_auto = parse_with("lan-mtu = 1500\nlan-mtu = auto\n");
  ASSERT_TRUE(back_to_auto.config);
  EXPECT_FALSE(back_to_auto.config->lan_mtu);
  const auto bad = parse_with("lan-mtu = 100\njumbo-segments = maybe\nlan-mtu = 70000\n");
  const std::vector<std::string> expected = {
      "gw.conf:3: 'lan-mtu': expected auto, or an MTU from 576 to 65535, got '100'",
      "gw.conf:4: 'jumbo-segments': expected yes or no, got 'maybe'",
      "gw.conf:5: 'lan-mtu': expected auto, or an MTU from 576 to 65535, got '70000'",
  };
  EXPECT_EQ(bad.errors, expected);
  const auto without_offload = parse_with("jumbo-segments = yes\ntun-offload = no\n");
  ASSERT_EQ(without_offload.errors.size(), 1u);
  EXPECT_EQ(without_offload.errors[0],
            "gw.conf: 'jumbo-segments' needs 'tun-offload = yes': only the offloading TUN hands "
            "over the TCP super-packets it cuts");
}

TEST(GatewayConfig, RequiredKeysAndMissingFile) {
  const auto empty = parse_gateway_config_text("", "x.conf");
  ASSERT_EQ(empty.errors.size(), 2u);
  EXPECT_EQ(empty.errors[0], "x.conf: 'local-address' is required");
  EXPECT_EQ(empty.errors[1], "x.conf: 'static-sa-file' or 'control-socket' is required");
  const auto missing = parse_gateway_config("/nonexistent/espgw.conf");
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_EQ(missing.errors[0], "/nonexistent/espgw.conf: cannot open the file");
}

}  // namespace
}  // namespace espgw::daemon

namespace espgw::daemon {
namespace {

TEST(GatewayConfig, ParallelChildrenForEcmp) {
  const auto result = parse_gateway_config_text(R"(local-address = 192.0.2.1
control-socket = /run/espgw/control.sock
charon-vici = unix:///run/charon.vici
parallel-child = net 4
parallel-child = other net  2
)",
                                                "e.conf");
  ASSERT_TRUE(result.config) << (result.errors.empty() ? "" : result.errors.front());
  const auto& children = result.config->parallel_children;
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].name, "net");
  EXPECT_EQ(children[0].count, 4u);
  EXPECT_EQ(children[1].name, "other net");
  EXPECT_EQ(children[1].count, 2u);
  EXPECT_EQ(result.config->charon_vici, "unix:///run/charon.vici");

  const auto bad = parse_gateway_config_text(R"(local-address = 192.0.2.1
control-socket = /run/espgw/control.sock
parallel-child = net
parallel-child = net 65
parallel-child = net 2
)",
                                             "e.conf");
  ASSERT_EQ(bad.errors.size(), 3u);
  EXPECT_NE(bad.errors[0].find("e.conf:3:"), std::string::npos) << bad.errors[0];
  EXPECT_NE(bad.errors[1].find("e.conf:4:"), std::string::npos) << bad.errors[1];
  EXPECT_NE(bad.errors[2].find("needs 'charon-vici'"), std::string::npos) << bad.errors[2];
}

// Several WAN addresses, IPv4 and IPv6: a list on one line, more on repeated lines, in the
// order written; a single address reads as it always did.
TEST(GatewayConfig, LocalAddressesListAndRepeated) {
  auto parse = [](const std::string& lines) {
    return parse_gateway_config_text(lines + "static-sa-file = s.conf\n", "gw.conf");
  };
  const auto listed = parse(
      "local-address = 192.0.2.1, 2001:db8::1 198.51.100.7\n"
      "local-address = 2001:db8:1::9\n");
  ASSERT_TRUE(listed.config) << listed.errors.front();
  std::vector<std::string> texts;
  for (const auto& address : listed.config->local_addresses) texts.push_back(address.to_string());
  EXPECT_EQ(texts, (std::vector<std::string>{"192.0.2.1", "2001:db8::1", "198.51.100.7",
                                             "2001:db8:1::9"}));

  const auto duplicate =
      parse("local-address = 192.0.2.1\nlocal-address = 2001:db8::1,192.0.2.1\n");
  ASSERT_EQ(duplicate.errors.size(), 1u);
  EXPECT_EQ(duplicate.errors[0],
            "gw.conf:2: 'local-address': expected addresses not given before (each address "
            "once), got '2001:db8::1,192.0.2.1'");
  const auto twice_on_a_line = parse("local-address = 2001:db8::1 2001:db8::1\n");
  ASSERT_FALSE(twice_on_a_line.errors.empty());

  const auto wildcard = parse("local-address = 192.0.2.1 ::\n");
  ASSERT_FALSE(wildcard.errors.empty());
  EXPECT_EQ(wildcard.errors[0],
            "gw.conf:1: 'local-address': expected specific addresses, not 0.0.0.0 or ::, got "
            "'192.0.2.1 ::'");
  EXPECT_FALSE(parse("local-address = 0.0.0.0\n").config);

  const auto bad = parse("local-address = 192.0.2.1, 300.1.1.1\n");
  ASSERT_FALSE(bad.errors.empty());
  EXPECT_EQ(bad.errors[0],
            "gw.conf:1: 'local-address': expected an IPv4 or IPv6 address, got "
            "'192.0.2.1, 300.1.1.1'");
  const auto only_commas = parse("local-address = , ,\n");
  ASSERT_EQ(only_commas.errors.size(), 2u) << "no address, so also none at all";
  EXPECT_EQ(only_commas.errors[1], "gw.conf: 'local-address' is required");
}

}  // namespace
}  // namespace espgw::daemon

namespace {

// What a reload compares: the keys as written, a key set in one file only counting as changed.
TEST(ConfigReload, ChangedKeysComparesTheWrittenValues) {
  const std::string base =
      "local-address = 192.0.2.1\nstatic-sa-file = s.conf\nstate-dir = st\nworkers = 2\n";
  const auto a = espgw::daemon::parse_gateway_config_text(base + "log-level = info\n", "/x.conf");
  const auto b = espgw::daemon::parse_gateway_config_text(
      base + "log-level = debug\ntun-queues = 2\n", "/x.conf");
  ASSERT_TRUE(a.config && b.config);
  EXPECT_EQ(espgw::daemon::changed_keys(*a.config, *a.config), std::vector<std::string>{});
  EXPECT_EQ(espgw::daemon::changed_keys(*a.config, *b.config),
            (std::vector<std::string>{"log-level", "tun-queues"}));
}

}  // namespace

// The static SA/policy file: the shipped examples, the grammar's options and defaults,
// and the writer's round trip.
#include "xfrm/static_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "util/hex.h"

namespace espgw::xfrm {
namespace {

using packet::FlowKey;

const std::string kDir = ESPGW_STATIC_CONFIG_DIR;

esp::IpAddress ip(std::string_view text) {
  return esp::IpAddress::parse(text).value();
}

StaticConfig parse_ok(std::string_view text) {
  auto result = parse_static_file(text, "t.conf");
  EXPECT_TRUE(result.errors.empty()) << (result.errors.empty() ? "" : result.errors[0]);
  return result.config.value_or(StaticConfig{});
}

constexpr std::string_view kKey = "0x00112233445566778899aabbccddeeff01020304";
constexpr std::string_view kOtherKey = "0xffeeddccbbaa99887766554433221100a0b0c0d0";

// The shipped examples as text: git checks them out 0644, which load_static_file
// refuses (the installed copies are 0600, configs/CMakeLists.txt).
StaticFileResult load_example(const std::string& name) {
  std::ifstream in(kDir + name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(in) << name;
  return parse_static_file(text.str(), kDir + name);
}

TEST(StaticFile, SiteAExampleParses) {
  auto result = load_example("/site-a.conf");
  ASSERT_TRUE(result.errors.empty()) << result.errors[0];
  const StaticConfig& c = *result.config;
  ASSERT_EQ(c.sas.size(), 2u);
  const SadEntry& out = c.sas[0];
  EXPECT_EQ(out.direction, Direction::out);
  EXPECT_EQ(out.config.spi, 0x1001u);
  EXPECT_EQ(out.config.algorithm, crypto::AeadAlgorithm::aes_gcm_128);
  EXPECT_EQ(to_hex(out.config.key_material), "00112233445566778899aabbccddeeff01020304");
  EXPECT_EQ(out.config.tunnel_source, ip("192.0.2.1"));
  EXPECT_EQ(out.config.tunnel_destination, ip("192.0.2.2"));
  EXPECT_FALSE(out.config.esn);
  EXPECT_FALSE(out.config.udp_encapsulation);
  EXPECT_EQ(out.reqid, 1u);
  EXPECT_EQ(out.lifetimes, Lifetimes{});
  const SadEntry& in = c.sas[1];
  EXPECT_EQ(in.direction, Direction::in);
  EXPECT_EQ(in.config.spi, 0x2001u);
  EXPECT_EQ(in.config.tunnel_destination, ip("192.0.2.1"));
  EXPECT_EQ(in.config.replay_window, 4096u);

  ASSERT_EQ(c.policies.size(), 3u);
  const Direction directions[] = {Direction::out, Direction::in, Direction::fwd};
  for (size_t i = 0; i < 3; ++i) {
    const Policy& p = c.policies[i];
    EXPECT_EQ(p.id, i + 1);
    EXPECT_EQ(p.direction, directions[i]);
    EXPECT_EQ(p.selector.local.to_string(), "10.1.0.0/16");
    EXPECT_EQ(p.selector.remote.to_string(), "10.2.0.0/16");
    EXPECT_EQ(p.selector.protocol, 0);
    EXPECT_TRUE(p.selector.local_ports.is_any());
    EXPECT_EQ(p.priority, 0u);
    EXPECT_EQ(p.action, PolicyAction::protect);
    EXPECT_EQ(p.reqid, 1u);
  }
}

TEST(StaticFile, ExamplesAreMirrorImages) {
  auto a = load_example("/site-a.conf");
  auto b = load_example("/site-b.conf");
  ASSERT_TRUE(a.config && b.config);
  // What A sends, B receives with the same SPI, key and addresses.
  for (const auto& [sender, receiver] :
       {std::pair{&*a.config, &*b.config}, {&*b.config, &*a.config}}) {
    const SadEntry& out = sender->sas[0];
    const SadEntry& in = receiver->sas[1];
    ASSERT_EQ(out.direction, Direction::out);
    ASSERT_EQ(in.direction, Direction::in);
    EXPECT_EQ(out.config.spi, in.config.spi);
    EXPECT_EQ(out.config.key_material, in.config.key_material);
    EXPECT_EQ(out.config.tunnel_source, in.config.tunnel_source);
    EXPECT_EQ(out.config.tunnel_destination, in.config.tunnel_destination);
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(
        same_prefix(a.config->policies[i].selector.local, b.config->policies[i].selector.remote));
    EXPECT_TRUE(
        same_prefix(a.config->policies[i].selector.remote, b.config->policies[i].selector.local));
  }
  // A packet lanA -> lanB leaves A by its out policy and enters B by its fwd policy.
  Spd spd_a, spd_b;
  for (const auto& p : a.config->policies) ASSERT_TRUE(spd_a.add(p));
  for (const auto& p : b.config->policies) ASSERT_TRUE(spd_b.add(p));
  FlowKey key{ip("10.1.0.5"), ip("10.2.0.7"), 6, true, 1234, 80};
  EXPECT_EQ(spd_a.lookup(Direction::out, key)->reqid, 1u);
  EXPECT_EQ(spd_b.lookup(Direction::fwd, key)->reqid, 1u);
  EXPECT_FALSE(spd_b.lookup(Direction::out, key));
}

TEST(StaticFile, ExamplesRoundTrip) {
  for (const char* name : {"/site-a.conf", "/site-b.conf"}) {
    auto first = load_example(name);
    ASSERT_TRUE(first.config);
    auto second = parse_static_file(to_text(*first.config), "again");
    ASSERT_TRUE(second.errors.empty()) << second.errors[0];
    EXPECT_EQ(*second.config, *first.config);
  }
}

TEST(StaticFile, OuterHeaderSettingsAreReadAndRoundTrip) {
  const std::string head =
      "sa out spi 0x1001 aes-gcm-128 key 0x00112233445566778899aabbccddeeff01020304"
      " src 192.0.2.1 dst 192.0.2.2";
  const StaticConfig defaults = parse_ok(head + "\n");
  EXPECT_EQ(defaults.sas[0].config.outer_header, esp::OuterHeaderPolicy{})
      << "charon's defaults: copy_dscp = out, copy_ecn = yes, copy_df = yes";
  using DontFragment = esp::OuterHeaderPolicy::DontFragment;
  struct Row {
    std::string words;
    bool dscp_out, dscp_in, ecn;
    DontFragment df;
  };
  for (const Row& row :
       {Row{" copy-dscp in copy-ecn no copy-df no", false, true, false, DontFragment::clear},
        Row{" copy-dscp yes copy-df set", true, true, true, DontFragment::set},
        Row{" copy-dscp no copy-df yes", false, false, true, DontFragment::copy},
        Row{" copy-dscp out copy-ecn yes", true, false, true, DontFragment::copy}}) {
    SCOPED_TRACE(row.words);
    const StaticConfig c = parse_ok(head + row.words + "\n");
    const esp::OuterHeaderPolicy& outer = c.sas[0].config.outer_header;
    EXPECT_EQ(outer.copy_dscp_out, row.dscp_out);
    EXPECT_EQ(outer.copy_dscp_in, row.dscp_in);
    EXPECT_EQ(outer.copy_ecn, row.ecn);
    EXPECT_EQ(outer.dont_fragment, row.df);
    EXPECT_EQ(parse_ok(to_text(c)), c) << "written back and read again: the same";
  }
}

TEST(StaticFile, EveryOptionIsReadAndRoundTrips) {
  const std::string text =
      "sa in spi 4096 chacha20-poly1305 key 0x" + std::string(72, 'a') +
      " src 2001:db8::2 dst 2001:db8::1 esn udp 4500:4501 replay-window 0 reqid 0x10"
      " soft-bytes 1 hard-bytes 2 soft-packets 3 hard-packets 4 soft-seconds 5 hard-seconds 6\n"
      "sa out dst 2001:db8::2 src 2001:db8::1 key " +
      std::string(72, 'b') +
      " aes256gcm16 spi 0xFFFFFFFF reqid 16\n"
      "policy fwd local 2001:db8:1::/48 remote 2001:db8:2::/48 proto tcp local-port 80"
      " remote-port 1024-65535 priority 4294967295 action protect reqid 16\n"
      "policy out remote 10.2.0.1 local 10.1.0.0/16 proto 200 action discard\n"
      "policy out local 10.1.0.0/16 remote 10.2.0.0/16 proto sctp local-port 0-65535 action "
      "bypass\n";
  const StaticConfig c = parse_ok(text);
  ASSERT_EQ(c.sas.size(), 2u);
  const SadEntry& in = c.sas[0];
  EXPECT_EQ(in.config.spi, 4096u);
  EXPECT_EQ(in.config.algorithm, crypto::AeadAlgorithm::chacha20_poly1305);
  EXPECT_EQ(in.config.key_material, std::vector<uint8_t>(36, 0xaa));
  EXPECT_TRUE(in.config.esn);
  ASSERT_TRUE(in.config.udp_encapsulation);
  EXPECT_EQ(in.config.udp_encapsulation->source_port, 4500);
  EXPECT_EQ(in.config.udp_encapsulation->destination_port, 4501);
  EXPECT_EQ(in.config.replay_window, 0u);
  EXPECT_EQ(in.reqid, 16u);
  EXPECT_EQ(in.lifetimes, (Lifetimes{1, 2, 3, 4, 5, 6}));
  const SadEntry& out = c.sas[1];
  EXPECT_EQ(out.config.algorithm, crypto::AeadAlgorithm::aes_gcm_256);
  EXPECT_EQ(out.config.spi, 0xFFFFFFFFu);
  EXPECT_EQ(out.config.tunnel_source, ip("2001:db8::1"));

  ASSERT_EQ(c.policies.size(), 3u);
  const Policy& fwd = c.policies[0];
  EXPECT_EQ(fwd.direction, Direction::fwd);
  EXPECT_EQ(fwd.selector.protocol, 6);
  EXPECT_EQ(fwd.selector.local_ports, (PortRange{80, 80}));
  EXPECT_EQ(fwd.selector.remote_ports, (PortRange{1024, 65535}));
  EXPECT_EQ(fwd.priority, 4294967295u);
  const Policy& discard = c.policies[1];
  EXPECT_EQ(discard.selector.remote.to_string(), "10.2.0.1/32");
  EXPECT_EQ(discard.selector.protocol, 200);
  EXPECT_EQ(discard.action, PolicyAction::discard);
  EXPECT_EQ(discard.reqid, 0u);
  EXPECT_TRUE(c.policies[2].selector.local_ports.is_any());
  EXPECT_EQ(c.policies[2].action, PolicyAction::bypass);

  auto again = parse_static_file(to_text(c), "again");
  ASSERT_TRUE(again.config) << again.errors[0];
  EXPECT_EQ(*again.config, c);
}

TEST(StaticFile, CommentsBlankLinesTabsAndCrlf) {
  const std::string text =
      "# header\r\n\r\n   \t\n"
      "sa\tout spi 0x1001 aes-gcm-128 key " +
      std::string(kKey) +
      " src 192.0.2.1 dst 192.0.2.2 # trailing comment\r\n"
      "#policy out local 10.1.0.0/16 remote 10.2.0.0/16 action discard\n"
      "policy out local 10.1.0.0/16 remote 10.2.0.0/16 action bypass";
  const StaticConfig c = parse_ok(text);
  EXPECT_EQ(c.sas.size(), 1u);
  ASSERT_EQ(c.policies.size(), 1u);
  EXPECT_EQ(c.policies[0].action, PolicyAction::bypass);
}

TEST(StaticFile, KeyMayUseColonSeparators) {
  const StaticConfig c = parse_ok(
      "sa out spi 300 aes-gcm-128 key 00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:01:02:03:04"
      " src 192.0.2.1 dst 192.0.2.2");
  EXPECT_EQ(to_hex(c.sas[0].config.key_material), "00112233445566778899aabbccddeeff01020304");
}

TEST(StaticFile, EmptyFileIsAnEmptyConfig) {
  auto result = parse_static_file("", "empty");
  ASSERT_TRUE(result.config);
  EXPECT_TRUE(result.config->sas.empty());
  EXPECT_TRUE(result.config->policies.empty());
}

TEST(StaticFile, SameSpiOutboundToDifferentPeersIsFine) {
  const std::string sa = "sa out spi 0x1001 aes-gcm-128 src 192.0.2.1 key ";
  const StaticConfig c = parse_ok(sa + std::string(kKey) + " dst 192.0.2.2\n" + sa +
                                  std::string(kOtherKey) + " dst 192.0.2.3\n");
  EXPECT_EQ(c.sas.size(), 2u);
}

TEST(StaticFile, AMissingFileIsOneError) {
  auto result = load_static_file(kDir + "/no-such-file.conf");
  EXPECT_FALSE(result.config);
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0], kDir + "/no-such-file.conf: cannot open: No such file or directory");
}

}  // namespace
}  // namespace espgw::xfrm

namespace espgw::xfrm {
namespace {

// AES-CBC with an HMAC: the integrity algorithm is a word of its own (our name or
// strongSwan's), the key the encryption key followed by the integrity key.
TEST(StaticFile, AesCbcWithHmacParsesAndRoundTrips) {
  const std::string key256(64 * 2 + 32 * 2, 'a');  // 32-byte AES key + 64-byte SHA-512 key
  const std::string text =
      "sa out spi 0x3001 aes-cbc-256 hmac-sha2-512-256 key 0x" + key256 +
      " src 192.0.2.1 dst 192.0.2.2 reqid 3\n"
      "sa in spi 0x3002 sha1 aes-cbc-128 key 0x" +
      std::string(72, 'b') +
      " src 192.0.2.2 dst 192.0.2.1 reqid 3 esn\n"
      "policy in local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 3\n";
  const StaticConfig c = parse_ok(text);
  ASSERT_EQ(c.sas.size(), 2u);
  EXPECT_EQ(c.sas[0].config.algorithm, crypto::EncryptionAlgorithm::aes_cbc_256);
  EXPECT_EQ(c.sas[0].config.integrity, crypto::IntegrityAlgorithm::hmac_sha512_256);
  EXPECT_EQ(c.sas[0].config.key_material, std::vector<uint8_t>(96, 0xaa));
  EXPECT_EQ(c.sas[1].config.algorithm, crypto::EncryptionAlgorithm::aes_cbc_128);
  EXPECT_EQ(c.sas[1].config.integrity, crypto::IntegrityAlgorithm::hmac_sha1_96);
  const std::string written = to_text(c);
  EXPECT_NE(written.find("aes-cbc-256 hmac-sha2-512-256 key"), std::string::npos) << written;
  auto again = parse_static_file(written, "again");
  ASSERT_TRUE(again.errors.empty()) << again.errors[0];
  EXPECT_EQ(*again.config, c);
}

TEST(StaticFile, AesCbcErrorsNameTheTransform) {
  const std::string head = "sa out spi 300 src 192.0.2.1 dst 192.0.2.2 ";
  const std::pair<std::string, std::string> cases[] = {
      {head + "aes-cbc-128 key 0x" + std::string(32, '1'),
       "t.conf:1: sa: aes-cbc-128 needs an integrity algorithm (hmac-sha1-96, "
       "hmac-sha2-256-128, hmac-sha2-384-192 or hmac-sha2-512-256)"},
      {head + "aes-gcm-128 hmac-sha1-96 key 0x" + std::string(40, '1'),
       "t.conf:1: sa: aes-gcm-128 is an AEAD and takes no integrity algorithm"},
      {head + "aes-cbc-192 sha256 key 0x" + std::string(40, '1'),
       "t.conf:1: key: 20 bytes, but aes-cbc-192 hmac-sha2-256-128 needs 56 (24-byte encryption "
       "key followed by the 32-byte hmac-sha2-256-128 key)"},
      {head + "aes-cbc-128 sha1 sha256 key 0x" + std::string(72, '1'),
       "t.conf:1: duplicate 'integrity algorithm'"},
  };
  for (const auto& [text, error] : cases) {
    auto result = parse_static_file(text, "t.conf");
    ASSERT_EQ(result.errors.size(), 1u) << text;
    EXPECT_EQ(result.errors[0], error) << text;
  }
}

}  // namespace
}  // namespace espgw::xfrm

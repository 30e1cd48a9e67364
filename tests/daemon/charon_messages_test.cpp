// The translation of the charon plugin's requests into SAD and SPD records: what a
// well-formed request becomes, and that every malformed or unsupported one gets an error
// that names the problem and never quotes key material.
#include "daemon/charon_messages.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <variant>

#include "support/charon_requests.h"

using espgw::daemon::policy_from;
using espgw::daemon::PolicyRequest;
using espgw::daemon::sa_from_add_sa;
using espgw::daemon::sa_id_from;
using espgw::daemon::sa_update_from;
using espgw::daemon::SaUpdate;
using espgw::vici::Message;
namespace xfrm = espgw::xfrm;

namespace {

const std::string kKey20(20, '\x42');  // AES-128 key + salt, as charon hands them over

Message add_sa(bool inbound = false) {
  Message m = espgw::test::add_sa_request(0xc0001234, 7, inbound, "192.0.2.1", "192.0.2.2", kKey20);
  m.set_bool("encap", true);
  m.set("src-port", 4500);
  m.set("dst-port", 4501);
  m.set("soft-bytes", 1000);
  m.set("hard-bytes", 2000);
  m.set("soft-seconds", 3600);
  m.set("hard-seconds", 3960);
  return m;
}

Message policy(const char* direction, bool with_action = true) {
  const bool out = std::string(direction) == "out";
  const espgw::test::Selector source{out ? "10.1.0.0/16" : "10.2.0.0/16", 6};
  const espgw::test::Selector destination{out ? "10.2.0.0/16" : "10.1.0.0/16", 6, 443, 443};
  return espgw::test::policy_request(direction, source, destination,
                                     with_action ? std::optional<uint32_t>(7) : std::nullopt);
}

std::string error_of(const auto& result) {
  const auto* error = std::get_if<std::string>(&result);
  return error ? *error : std::string("(no error)");
}

}  // namespace

TEST(CharonMessages, OutboundSaBecomesASadEntry) {
  auto result = sa_from_add_sa(add_sa());
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& entry = std::get<xfrm::SadEntry>(result);
  EXPECT_EQ(entry.config.spi, 0xc0001234u);
  EXPECT_EQ(entry.direction, xfrm::Direction::out);
  EXPECT_EQ(entry.reqid, 7u);
  EXPECT_EQ(entry.config.tunnel_source.to_string(), "192.0.2.1");
  EXPECT_EQ(entry.config.tunnel_destination.to_string(), "192.0.2.2");
  ASSERT_TRUE(entry.config.udp_encapsulation);
  EXPECT_EQ(entry.config.udp_encapsulation->source_port, 4500);
  EXPECT_EQ(entry.config.udp_encapsulation->destination_port, 4501);
  EXPECT_EQ(entry.config.key_material.size(), 20u);
  EXPECT_EQ(entry.config.replay_window, 32u);  // the daemon widens it, not the parser
  EXPECT_EQ(entry.lifetimes.soft_bytes, 1000u);
  EXPECT_EQ(entry.lifetimes.hard_bytes, 2000u);
  EXPECT_EQ(entry.lifetimes.soft_seconds, 3600u);
  EXPECT_EQ(entry.lifetimes.hard_seconds, 3960u);
  EXPECT_TRUE(entry.config.selectors.empty());  // outbound SAs are chosen by policy
  EXPECT_EQ(entry.group_slot, 0u);              // no IKE_SA named: the SPI is the slot
}

TEST(CharonMessages, TheChildsOuterHeaderSettingsReachTheSa) {
  auto defaults = sa_from_add_sa(add_sa());
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(defaults)) << error_of(defaults);
  EXPECT_EQ(std::get<xfrm::SadEntry>(defaults).config.outer_header, espgw::esp::OuterHeaderPolicy{})
      << "a plugin that sends none gets charon's defaults";
  Message m = add_sa();
  m.set("copy-dscp", "in");
  m.set_bool("copy-ecn", false);
  m.set_bool("copy-df", false);
  auto result = sa_from_add_sa(m);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& outer = std::get<xfrm::SadEntry>(result).config.outer_header;
  EXPECT_FALSE(outer.copy_dscp_out);
  EXPECT_TRUE(outer.copy_dscp_in);
  EXPECT_FALSE(outer.copy_ecn);
  EXPECT_EQ(outer.dont_fragment, espgw::esp::OuterHeaderPolicy::DontFragment::clear);
  Message bad = add_sa();
  bad.set("copy-dscp", "sometimes");
  EXPECT_EQ(error_of(sa_from_add_sa(bad)), "'copy-dscp' must be out, in, yes or no");
}

TEST(CharonMessages, TheChildsTfcPaddingReachesTheSa) {
  auto none = sa_from_add_sa(add_sa());
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(none)) << error_of(none);
  EXPECT_EQ(std::get<xfrm::SadEntry>(none).config.tfc_pad_to, 0u) << "no tfc: no padding";
  for (const uint64_t tfc : {uint64_t{1000}, uint64_t{UINT32_MAX}}) {  // bytes, or "mtu"
    Message m = add_sa();
    m.set("tfc", tfc);
    auto result = sa_from_add_sa(m);
    ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
    EXPECT_EQ(std::get<xfrm::SadEntry>(result).config.tfc_pad_to, tfc);
  }
}

Message update_sa() {
  Message m;
  m.set("spi", 0xc0001234u);
  m.set("src", "192.0.2.2");
  m.set("dst", "192.0.2.1");
  m.set("new-src", "198.51.100.7");
  m.set("new-dst", "192.0.2.1");
  m.set("src-port", 40001);
  m.set("dst-port", 4500);
  m.set("new-src-port", 41007);
  m.set("new-dst-port", 4500);
  m.set_bool("encap", true);
  m.set_bool("new-encap", true);
  return m;
}

TEST(CharonMessages, UpdateSaNamesTheSaAndItsNewEnds) {
  auto result = sa_update_from(update_sa());
  ASSERT_TRUE(std::holds_alternative<SaUpdate>(result)) << error_of(result);
  const auto& update = std::get<SaUpdate>(result);
  EXPECT_EQ(update.id.spi, 0xc0001234u);
  EXPECT_EQ(update.id.destination.to_string(), "192.0.2.1");
  EXPECT_EQ(update.source.to_string(), "192.0.2.2");
  EXPECT_EQ(update.new_source.to_string(), "198.51.100.7");
  EXPECT_EQ(update.new_destination.to_string(), "192.0.2.1");
  EXPECT_TRUE(update.encap);
  ASSERT_TRUE(update.new_udp);
  EXPECT_EQ(update.new_udp->source_port, 41007);
  EXPECT_EQ(update.new_udp->destination_port, 4500);
  Message raw = update_sa();
  raw.set_bool("new-encap", false);
  auto unencapsulated = sa_update_from(raw);
  ASSERT_TRUE(std::holds_alternative<SaUpdate>(unencapsulated)) << error_of(unencapsulated);
  EXPECT_FALSE(std::get<SaUpdate>(unencapsulated).new_udp);
}

TEST(CharonMessages, MalformedUpdateSaRequestsAreRefusedWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"spi", "0"},          {"dst", "nowhere"},        {"new-dst", "2001:db8::1"},
      {"new-src-port", "0"}, {"new-dst-port", "70000"}, {"new-encap", "perhaps"},
  };
  for (const auto& [key, value] : cases) {
    Message m = update_sa();
    m.set(key, value);
    const std::string error = error_of(sa_update_from(m));
    EXPECT_NE(error, "(no error)") << key << "=" << value;
    EXPECT_FALSE(error.empty()) << key;
  }
  Message missing;
  missing.set("spi", 1);
  EXPECT_NE(error_of(sa_update_from(missing)).find("'src'"), std::string::npos);
}

TEST(CharonMessages, TheIkeSaIsTheGroupSlot) {
  Message m = add_sa();
  m.set("ike-sa", 42);
  auto result = sa_from_add_sa(m);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  EXPECT_EQ(std::get<xfrm::SadEntry>(result).group_slot, 42u);
}

TEST(CharonMessages, InboundSaCarriesItsSelectors) {
  Message m = add_sa(true);
  m.set_list("src-ts", {"10.2.0.0/16", "fd00:2::/64"});
  m.set_list("dst-ts", {"10.1.0.0/16", "fd00:1::/64"});
  auto result = sa_from_add_sa(m);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& entry = std::get<xfrm::SadEntry>(result);
  EXPECT_EQ(entry.direction, xfrm::Direction::in);
  // Pairs of one family only: 10.2/16 -> 10.1/16 and fd00:2::/64 -> fd00:1::/64.
  ASSERT_EQ(entry.config.selectors.size(), 2u);
  EXPECT_EQ(entry.config.selectors[0].remote.to_string(), "10.2.0.0/16");
  EXPECT_EQ(entry.config.selectors[0].local.to_string(), "10.1.0.0/16");
  EXPECT_EQ(entry.config.selectors[1].remote.to_string(), "fd00:2::/64");
}

TEST(CharonMessages, RawEspAndChaChaAndNoLifetimes) {
  Message m = add_sa();
  m.set_bool("encap", false);
  m.set("algorithm", "chacha20-poly1305");
  m.set("key", std::string(36, '\x01'));
  Message bare;
  for (const auto& e : m.entries())
    if (e.name.find("soft-") != 0 && e.name.find("hard-") != 0 && e.kind == Message::Kind::value)
      bare.set(e.name, e.value);
  bare.set_list("src-ts", {"10.1.0.0/16"});
  bare.set_list("dst-ts", {"10.2.0.0/16"});
  auto result = sa_from_add_sa(bare);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& entry = std::get<xfrm::SadEntry>(result);
  EXPECT_FALSE(entry.config.udp_encapsulation);
  EXPECT_EQ(entry.lifetimes, xfrm::Lifetimes{});
}

TEST(CharonMessages, MalformedSaRequestsAreRefusedWithAReason) {
  struct Case {
    const char* key;
    const char* value;  // nullptr: remove the key
    const char* expected;
  };
  const Case cases[] = {
      {"spi", "0", "'spi'"},
      {"spi", "4294967296", "'spi'"},
      {"spi", "-1", "'spi'"},
      {"spi", nullptr, "'spi'"},
      {"src", "not-an-address", "'src'"},
      {"dst", "2001:db8::1", "families"},
      {"algorithm", "aes-cbc-128", "unsupported algorithm"},
      {"algorithm", nullptr, "'algorithm'"},
      {"key", nullptr, "'key'"},
      {"replay-window", "70000", "'replay-window'"},
      {"inbound", "maybe", "'inbound'"},
      {"src-port", "0", "'src-port'"},
      {"dst-port", "65536", "'dst-port'"},
      {"soft-bytes", "lots", "'soft-bytes'"},
      {"tfc", "4294967296", "'tfc'"},
      {"tfc", "mtu", "'tfc'"},
  };
  const Message valid = add_sa();
  for (const Case& c : cases) {
    Message m;
    for (const auto& e : valid.entries()) {
      if (e.name == c.key) continue;
      if (e.kind == Message::Kind::list)
        m.set_list(e.name, e.items);
      else
        m.set(e.name, e.value);
    }
    if (c.value) m.set(c.key, c.value);
    const std::string error = error_of(sa_from_add_sa(m));
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.key << "=" << (c.value ? c.value : "(absent)") << " gave: " << error;
  }
}

TEST(CharonMessages, WrongKeyLengthNamesLengthsButNeverTheKey) {
  Message m = add_sa();
  const std::string secret = "SECRETKEYSECRETKEY01234";  // 23 bytes: wrong for AES-128
  m.set("key", secret);
  const std::string error = error_of(sa_from_add_sa(m));
  EXPECT_NE(error.find("23 bytes"), std::string::npos) << error;
  EXPECT_NE(error.find("needs 20"), std::string::npos) << error;
  EXPECT_EQ(error.find("SECRET"), std::string::npos) << error;
}

TEST(CharonMessages, InboundSaNeedsSelectors) {
  Message m = add_sa(true);
  m.set_list("src-ts", {});
  EXPECT_NE(error_of(sa_from_add_sa(m)).find("'src-ts'"), std::string::npos);
  m = add_sa(true);
  m.set_list("dst-ts", {"10.1.0.0/33"});
  EXPECT_NE(error_of(sa_from_add_sa(m)).find("bad subnet"), std::string::npos);
  // Selectors of two families make no pair: the SA would have none and accept anything.
  m = add_sa(true);
  m.set_list("src-ts", {"10.2.0.0/16"});
  m.set_list("dst-ts", {"fd00:1::/64"});
  EXPECT_EQ(error_of(sa_from_add_sa(m)),
            "no pair of src-ts and dst-ts selectors of one address family and protocol");
  // Two different protocols match no packet either.
  m = add_sa(true);
  m.set_list("src-ts", {"10.2.0.0/16[6/0-65535]"});
  m.set_list("dst-ts", {"10.1.0.0/16[17/0-65535]"});
  EXPECT_EQ(error_of(sa_from_add_sa(m)),
            "no pair of src-ts and dst-ts selectors of one address family and protocol");
}

// The plugin writes a selector that names a protocol or ports as PREFIX[PROTO/FROM-TO].
TEST(CharonMessages, InboundSelectorsCarryProtocolAndPorts) {
  Message m = add_sa(true);
  m.set_list("src-ts", {"10.2.0.0/16[6/1024-65535]", "10.3.0.0/16"});
  m.set_list("dst-ts", {"10.1.0.0/16[6/443-443]"});
  auto result = sa_from_add_sa(m);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& selectors = std::get<xfrm::SadEntry>(result).config.selectors;
  ASSERT_EQ(selectors.size(), 2u);
  EXPECT_EQ(selectors[0].remote.to_string(), "10.2.0.0/16");
  EXPECT_EQ(selectors[0].protocol, 6);
  EXPECT_EQ(selectors[0].remote_port_first, 1024);
  EXPECT_EQ(selectors[0].remote_port_last, 65535);
  EXPECT_EQ(selectors[0].local_port_first, 443);
  EXPECT_EQ(selectors[0].local_port_last, 443);
  // Any protocol on one side and TCP on the other: TCP.
  EXPECT_EQ(selectors[1].remote.to_string(), "10.3.0.0/16");
  EXPECT_EQ(selectors[1].protocol, 6);
  EXPECT_TRUE(selectors[1].remote_port_first == 0 && selectors[1].remote_port_last == 65535);

  for (const char* bad : {"10.1.0.0/16[6/443]", "10.1.0.0/16[300/0-1]", "10.1.0.0/16[6/1-2]x",
                          "10.1.0.0/16[6/1-70000]"}) {
    m.set_list("dst-ts", {bad});
    EXPECT_NE(error_of(sa_from_add_sa(m)).find("bad selector"), std::string::npos) << bad;
  }
  m.set_list("dst-ts", {"10.1.0.0/16[6/65535-0]"});  // charon's OPAQUE
  EXPECT_NE(error_of(sa_from_add_sa(m)).find("opaque"), std::string::npos);
}

TEST(CharonMessages, SaIdNeedsSpiAndDestination) {
  Message m;
  m.set("spi", 5);
  m.set("dst", "192.0.2.2");
  auto id = sa_id_from(m);
  ASSERT_TRUE(std::holds_alternative<espgw::daemon::SaId>(id));
  EXPECT_EQ(std::get<espgw::daemon::SaId>(id).spi, 5u);
  Message no_dst;
  no_dst.set("spi", 5);
  EXPECT_NE(error_of(sa_id_from(no_dst)).find("'dst'"), std::string::npos);
}

TEST(CharonMessages, PoliciesAreNamedFromThisGatewaysSide) {
  auto out = policy_from(policy("out"), true);
  ASSERT_TRUE(std::holds_alternative<PolicyRequest>(out)) << error_of(out);
  const auto& p = std::get<PolicyRequest>(out).policy;
  EXPECT_EQ(p.direction, xfrm::Direction::out);
  EXPECT_EQ(p.selector.local.to_string(), "10.1.0.0/16");
  EXPECT_EQ(p.selector.remote.to_string(), "10.2.0.0/16");
  EXPECT_EQ(p.selector.protocol, 6);
  EXPECT_EQ(p.selector.remote_ports.first, 443);
  EXPECT_TRUE(p.selector.local_ports.is_any());
  EXPECT_EQ(p.action, xfrm::PolicyAction::protect);
  EXPECT_EQ(p.reqid, 7u);

  // in and fwd carry the remote network as source; the selector comes out the same.
  auto fwd = policy_from(policy("fwd"), true);
  ASSERT_TRUE(std::holds_alternative<PolicyRequest>(fwd)) << error_of(fwd);
  const auto& f = std::get<PolicyRequest>(fwd).policy;
  EXPECT_EQ(f.selector.local.to_string(), "10.1.0.0/16");
  EXPECT_EQ(f.selector.remote.to_string(), "10.2.0.0/16");
  EXPECT_EQ(f.selector.local_ports.first, 443);
}

TEST(CharonMessages, PolicyKeyIgnoresActionSoAddAndDelMatch) {
  auto added = policy_from(policy("out"), true);
  auto deleted = policy_from(policy("out", false), false);
  ASSERT_TRUE(std::holds_alternative<PolicyRequest>(added));
  ASSERT_TRUE(std::holds_alternative<PolicyRequest>(deleted)) << error_of(deleted);
  EXPECT_EQ(std::get<PolicyRequest>(added).key, std::get<PolicyRequest>(deleted).key);
  auto other = policy_from(policy("in"), true);
  EXPECT_NE(std::get<PolicyRequest>(added).key, std::get<PolicyRequest>(other).key);
}

TEST(CharonMessages, InterfaceIdsKeepTwoPeersZeroSelectorsApart) {
  // Route-based VPN: two peers' 0.0.0.0/0 policies differ only in their if_id.
  auto zero = [](std::optional<uint64_t> if_id, bool with_action) {
    auto m = espgw::test::policy_request("out", {"0.0.0.0/0"}, {"0.0.0.0/0"},
                                         with_action ? std::optional<uint32_t>(7) : std::nullopt);
    if (if_id) m.set("if-id", *if_id);
    return policy_from(m, with_action);
  };
  auto key = [](const auto& result) { return std::get<PolicyRequest>(result).key; };
  const auto none = zero(std::nullopt, true), first = zero(1, true), second = zero(2, true);
  ASSERT_TRUE(std::holds_alternative<PolicyRequest>(first)) << error_of(first);
  EXPECT_EQ(std::get<PolicyRequest>(none).policy.if_id, 0u);
  EXPECT_EQ(std::get<PolicyRequest>(first).policy.if_id, 1u);
  EXPECT_EQ(std::get<PolicyRequest>(second).policy.if_id, 2u);
  EXPECT_NE(key(first), key(second));
  EXPECT_NE(key(none), key(first));
  EXPECT_EQ(key(none), key(zero(0, true))) << "if-id 0 is the default device, as if absent";
  EXPECT_EQ(key(first), key(zero(1, false))) << "add and del of one policy still match";
  EXPECT_EQ(error_of(zero(uint64_t{1} << 32, true)),
            "'if-id' must be a number from 0 to 4294967295");

  auto sa = add_sa(true);
  sa.set("if-id", 3);
  const auto entry = sa_from_add_sa(sa);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(entry)) << error_of(entry);
  EXPECT_EQ(std::get<xfrm::SadEntry>(entry).if_id, 3u);
  EXPECT_EQ(std::get<xfrm::SadEntry>(sa_from_add_sa(add_sa(true))).if_id, 0u);
  sa.set("if-id", "three");
  EXPECT_EQ(error_of(sa_from_add_sa(sa)), "'if-id' must be a number from 0 to 4294967295");
}

TEST(CharonMessages, PolicyPriorityClassesKeepCharonsOrder) {
  auto priority = [](const char* priority_class, uint64_t manual = 0) {
    Message m = policy("out");
    m.set("priority-class", priority_class);
    m.set("manual-priority", manual);
    return std::get<PolicyRequest>(policy_from(m, true)).policy.priority;
  };
  EXPECT_LT(priority("pass"), priority("default"));
  EXPECT_LT(priority("default"), priority("routed"));
  EXPECT_LT(priority("routed"), priority("fallback"));
  EXPECT_EQ(priority("default", 42), 42u);
}

TEST(CharonMessages, MalformedPoliciesAreRefused) {
  Message m = policy("sideways");
  EXPECT_NE(error_of(policy_from(m, true)).find("'dir'"), std::string::npos);
  m = policy("out");
  m.set("action", "maybe");
  EXPECT_NE(error_of(policy_from(m, true)).find("'action'"), std::string::npos);
  m = policy("out");
  m.set("reqid", 0);
  EXPECT_NE(error_of(policy_from(m, true)).find("reqid"), std::string::npos);
  m = policy("out");
  m.set("dst-net", "fd00::/64");
  EXPECT_NE(error_of(policy_from(m, true)).find("families"), std::string::npos);
  m = policy("out");
  m.set("src-port-to", 70000);
  EXPECT_NE(error_of(policy_from(m, true)).find("'src-port-to'"), std::string::npos);
}

// AES-CBC: the plugin sends the encryption key and the integrity key apart; the SA keeps
// them one after the other.
TEST(CharonMessages, AesCbcWithHmacKeepsBothKeys) {
  Message m = add_sa();
  m.set("algorithm", "aes-cbc-256");
  m.set("key", std::string(32, '\x11'));
  m.set("integrity", "hmac-sha2-256-128");
  m.set("integrity-key", std::string(32, '\x22'));
  auto result = sa_from_add_sa(m);
  ASSERT_TRUE(std::holds_alternative<xfrm::SadEntry>(result)) << error_of(result);
  const auto& config = std::get<xfrm::SadEntry>(result).config;
  EXPECT_EQ(config.algorithm, espgw::crypto::EncryptionAlgorithm::aes_cbc_256);
  EXPECT_EQ(config.integrity, espgw::crypto::IntegrityAlgorithm::hmac_sha256_128);
  std::string expected(32, '\x11');
  expected += std::string(32, '\x22');
  EXPECT_EQ(std::string(config.key_material.begin(), config.key_material.end()), expected);
}

TEST(CharonMessages, AesCbcRefusalsNameTheProblemButNeverTheKey) {
  const std::string secret = "SECRETKEYSECRETKEY012";  // 21 bytes: wrong for SHA-1
  struct Case {
    const char* algorithm;
    const char* integrity;  // nullptr: absent
    size_t key_length;
    const std::string* integrity_key;
    const char* expected;
  };
  const std::string sha1_key(20, 'k');
  const Case cases[] = {
      {"aes-cbc-128", nullptr, 16, nullptr, "without an 'integrity' algorithm"},
      {"aes-cbc-128", "hmac-md5-96", 16, &sha1_key, "unsupported integrity algorithm"},
      {"aes-cbc-128", "hmac-sha1-96", 16, nullptr, "missing 'integrity-key'"},
      {"aes-cbc-128", "hmac-sha1-96", 16, &secret, "needs 16 and 20"},
      {"aes-cbc-192", "hmac-sha1-96", 16, &sha1_key, "needs 24 and 20"},
      {"aes-gcm-128", "hmac-sha1-96", 20, &sha1_key, "is an AEAD"},
      {"aes-gcm-128", nullptr, 20, &sha1_key, "'integrity-key' without"},
  };
  for (const Case& c : cases) {
    Message m = add_sa();
    m.set("algorithm", c.algorithm);
    m.set("key", std::string(c.key_length, 'K'));
    if (c.integrity) m.set("integrity", c.integrity);
    if (c.integrity_key) m.set("integrity-key", *c.integrity_key);
    const std::string error = error_of(sa_from_add_sa(m));
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.algorithm << " " << (c.integrity ? c.integrity : "-") << " gave: " << error;
    EXPECT_EQ(error.find("SECRET"), std::string::npos) << error;
  }
}

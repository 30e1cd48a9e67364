// Every error the static file parser reports, with its exact "FILE:LINE: message", and
// the promise that no message ever shows key material.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "support/temporary_directory.h"
#include "xfrm/static_file.h"

namespace espgw::xfrm {
namespace {

const std::string kKeyHex = "00112233445566778899aabbccddeeff01020304";
const std::string kOtherKeyHex = "ffeeddccbbaa99887766554433221100a0b0c0d0";
// A valid SA and the start of a valid policy, to which each case adds one fault.
const std::string kSa =
    "sa out spi 0x1001 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.1 dst 192.0.2.2 reqid 1";
const std::string kSaIn =
    "sa in spi 0x2001 aes-gcm-128 key 0x" + kOtherKeyHex + " src 192.0.2.2 dst 192.0.2.1 reqid 1";
// What gives kSaIn its traffic selectors.
const std::string kProtectIn =
    "policy in local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1";
const std::string kPolicy = "policy out local 10.1.0.0/16 remote 10.2.0.0/16";
const std::string kBypass = kPolicy + " action bypass";

std::vector<std::string> errors_of(const std::string& text) {
  auto result = parse_static_file(text, "f.conf");
  EXPECT_EQ(result.config.has_value(), result.errors.empty());
  return result.errors;
}

struct Case {
  std::string text;
  std::string error;
};

void expect_errors(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    auto errors = errors_of(c.text);
    ASSERT_EQ(errors.size(), 1u) << c.text;
    EXPECT_EQ(errors[0], c.error) << c.text;
  }
}

TEST(StaticFileErrors, Lines) {
  expect_errors({
      {"frobnicate 1 2",
       "f.conf:1: unknown keyword 'frobnicate' (a line starts with sa or policy)"},
      {"# comment\n\n0x" + kKeyHex,
       "f.conf:3: unexpected value at the start of a line (not shown: it could be key "
       "material)"},
      {"sa out\x01", "f.conf:1: control character in line"},
      {std::string("sa out spi\0 1", 13), "f.conf:1: control character in line"},
  });
}

TEST(StaticFileErrors, SaKeywordsAndValues) {
  expect_errors({
      {"sa", "f.conf:1: sa: missing direction (in or out)"},
      {"sa fwd spi 300", "f.conf:1: sa: 'fwd' is not a direction (in or out)"},
      {"sa sideways", "f.conf:1: sa: 'sideways' is not a direction (in or out)"},
      {kSa + " replay-windw 5", "f.conf:1: sa: unknown keyword 'replay-windw'"},
      {"sa out spi 0x1001 aes-gcm-128 0x" + kKeyHex + " src 192.0.2.1 dst 192.0.2.2",
       "f.conf:1: sa: unexpected value where a keyword belongs (not shown: it could be key "
       "material)"},
      {kSa + " spi 0x1002", "f.conf:1: duplicate 'spi'"},
      {kSa + " aes-gcm-256", "f.conf:1: duplicate 'algorithm'"},
      {kSa + " esn esn", "f.conf:1: duplicate 'esn'"},
      {kSa + " copy-dscp sideways", "f.conf:1: copy-dscp: must be out, in, yes or no"},
      {kSa + " copy-ecn maybe", "f.conf:1: copy-ecn: must be yes or no"},
      {kSa + " copy-df often", "f.conf:1: copy-df: must be yes, no or set"},
      {kSa + " copy-df no copy-df yes", "f.conf:1: duplicate 'copy-df'"},
      {"sa out spi 0x1001 aes-gcm-128 src 192.0.2.1 dst 192.0.2.2 key",
       "f.conf:1: key: missing value"},
      {"sa out esn", "f.conf:1: sa: missing spi, algorithm, key, src, dst"},
      {"sa in spi 0x1001 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.1",
       "f.conf:1: sa: missing dst"},
  });
}

TEST(StaticFileErrors, SaNumbers) {
  const std::string head = "sa out aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.1 dst 192.0.2.2";
  const std::string range = "f.conf:1: spi: out of range (256-4294967295; 0-255 are reserved)";
  expect_errors({
      {head + " spi zz", "f.conf:1: spi: 'zz' is not a number (decimal, or hex with 0x)"},
      {head + " spi 12ab", "f.conf:1: spi: '12ab' is not a number (decimal, or hex with 0x)"},
      {head + " spi 123456z", "f.conf:1: spi: the value is not a number (decimal, or hex with 0x)"},
      {head + " spi 0x", "f.conf:1: spi: '0x' is not a number (decimal, or hex with 0x)"},
      {head + " spi -1", "f.conf:1: spi: '-1' is not a number (decimal, or hex with 0x)"},
      {head + " spi 0", range},
      {head + " spi 255", range},
      {head + " spi 0x100000000", range},
      {head + " spi 99999999999999999999999", range},
      {kSa + " reqid 4294967296", "f.conf:1: duplicate 'reqid'"},
      {head + " spi 300 reqid 4294967296", "f.conf:1: reqid: out of range (0-4294967295)"},
      {kSaIn + " replay-window 65537", "f.conf:1: replay-window: out of range (0-65536)"},
      {kSa + " replay-window 64", "f.conf:1: replay-window: only an 'sa in' has a replay window"},
      {kSa + " soft-bytes lots",
       "f.conf:1: soft-bytes: 'lots' is not a number (decimal, or hex with 0x)"},
      {kSa + " hard-seconds 18446744073709551616",
       "f.conf:1: hard-seconds: out of range (0-18446744073709551615)"},
      {kSa + " soft-bytes 10 hard-bytes 5", "f.conf:1: soft-bytes is larger than hard-bytes"},
      {kSa + " soft-packets 10 hard-packets 5",
       "f.conf:1: soft-packets is larger than hard-packets"},
      {kSa + " hard-seconds 5 soft-seconds 6",
       "f.conf:1: soft-seconds is larger than hard-seconds"},
  });
}

TEST(StaticFileErrors, SaKeysAddressesAndPorts) {
  const std::string head = "sa out spi 300 src 192.0.2.1 dst 192.0.2.2 ";
  expect_errors({
      {head + "aes-gcm-128 key 0x" + kKeyHex + "0",
       "f.conf:1: key: not a hex string (the value is not shown)"},
      {head + "aes-gcm-128 key 0x" + kKeyHex.substr(0, 32),
       "f.conf:1: key: 16 bytes, but aes-gcm-128 needs 20 (16-byte key followed by the 4-byte "
       "salt)"},
      {head + "key 0x" + kKeyHex + " aes-gcm-256",
       "f.conf:1: key: 20 bytes, but aes-gcm-256 needs 36 (32-byte key followed by the 4-byte "
       "salt)"},
      {head + "chacha20poly1305 key 0x" + kKeyHex,
       "f.conf:1: key: 20 bytes, but chacha20-poly1305 needs 36 (32-byte key followed by the "
       "4-byte salt)"},
      {"sa out spi 300 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.300 dst 192.0.2.2",
       "f.conf:1: src: '192.0.2.300' is not an IP address"},
      {"sa out spi 300 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.1 dst 2001:db8:::1",
       "f.conf:1: dst: the value is not an IP address"},
      {"sa out spi 300 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.1 dst 2001:db8::1",
       "f.conf:1: sa: src and dst are of different address families"},
      {kSa + " udp 4500", "f.conf:1: udp: '4500' is not SPORT:DPORT (ports 1-65535)"},
      {kSa + " udp 0:4500", "f.conf:1: udp: the value is not SPORT:DPORT (ports 1-65535)"},
      {kSa + " udp 4500:65536", "f.conf:1: udp: the value is not SPORT:DPORT (ports 1-65535)"},
      {kSa + " udp 4500-4500", "f.conf:1: udp: '4500-4500' is not SPORT:DPORT (ports 1-65535)"},
  });
}

TEST(StaticFileErrors, Policies) {
  const std::string port_error =
      " is not a port or port range (0-65535, or FIRST-LAST with FIRST <= LAST)";
  expect_errors({
      {"policy", "f.conf:1: policy: missing direction (out, in or fwd)"},
      {"policy up", "f.conf:1: policy: 'up' is not a direction (out, in or fwd)"},
      {kBypass + " prio 5", "f.conf:1: policy: unknown keyword 'prio'"},
      {kBypass + " local 10.3.0.0/16", "f.conf:1: duplicate 'local'"},
      {"policy out local", "f.conf:1: local: missing value"},
      {"policy out remote 10.2.0.0/16", "f.conf:1: policy: missing local, action"},
      {"policy in local 10.1.0.0/33 remote 10.2.0.0/16 action bypass",
       "f.conf:1: local: '10.1.0.0/33' is not an IP prefix"},
      {"policy in local 10.1.0.0/16 remote 10.2.0.1/16 action bypass",
       "f.conf:1: remote: '10.2.0.1/16' has bits set beyond its prefix length"},
      {"policy in local 10.1.0.0/16 remote 2001:db8::/32 action bypass",
       "f.conf:1: policy: local and remote are of different address families"},
      {kBypass + " proto tcpp",
       "f.conf:1: proto: 'tcpp' is not a protocol (tcp, udp, icmp, ... or a number 0-255)"},
      {kBypass + " proto 256", "f.conf:1: proto: out of range (0-255)"},
      {kBypass + " proto tcp local-port 80-79", "f.conf:1: local-port: '80-79'" + port_error},
      {kBypass + " proto tcp remote-port 70000", "f.conf:1: remote-port: the value" + port_error},
      {kBypass + " proto tcp remote-port 1-2-3", "f.conf:1: remote-port: '1-2-3'" + port_error},
      {kBypass + " remote-port 22", "f.conf:1: policy: ports need proto tcp, udp, sctp or udplite"},
      {kBypass + " proto icmp local-port 8",
       "f.conf:1: policy: ports need proto tcp, udp, sctp or udplite"},
      {kBypass + " priority 4294967296", "f.conf:1: priority: out of range (0-4294967295)"},
      {kPolicy + " action allow", "f.conf:1: action: 'allow' is not protect, bypass or discard"},
      {kPolicy + " action protect",
       "f.conf:1: policy: action protect needs a reqid (the SAs to use)"},
      {kBypass + " reqid 1", "f.conf:1: reqid: only action protect uses SAs"},
      {kPolicy + " action protect reqid 0", "f.conf:1: reqid: out of range (1-4294967295)"},
  });
}

TEST(StaticFileErrors, BetweenLines) {
  expect_errors({
      {kSa + "\n" + kSa, "f.conf:2: sa: spi 0x00001001 dst 192.0.2.2 is already defined on line 1"},
      // An in and an out SA may not share (SPI, dst) either: that is the SAD's key.
      {kSa + "\n\n" + "sa in spi 0x1001 aes-gcm-128 key 0x" + kKeyHex +
           " src 192.0.2.1 dst 192.0.2.2",
       "f.conf:3: sa: spi 0x00001001 dst 192.0.2.2 is already defined on line 1"},
      {kSaIn + "\n" + "sa in spi 0x2001 aes-gcm-128 key 0x" + kKeyHex +
           " src 192.0.2.3 dst 192.0.2.4\n" + kProtectIn,
       "f.conf:2: sa: spi 0x00002001 is already used by the 'sa in' on line 1 (inbound SAs are "
       "found by SPI alone)"},
      {kBypass + "\n" + kPolicy + " priority 5 action discard",
       "f.conf:2: policy: same direction and selector as the policy on line 1"},
      {kSa + "\n" + kPolicy + " action protect reqid 2",
       "f.conf:2: policy: no 'sa out' has reqid 2"},
      // in and fwd policies name inbound SAs; an outbound SA of that reqid doesn't count.
      {kSa + "\n" + "policy fwd local 10.1.0.0/16 remote 10.2.0.0/16 action protect reqid 1",
       "f.conf:2: policy: no 'sa in' has reqid 1"},
  });
}

TEST(StaticFileErrors, EachBadLineIsReportedInOrder) {
  const std::string text = "sa out\n" + kSa + "\npolicy out\nbogus\n" + kBypass + " prio 1\n";
  auto errors = errors_of(text);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_EQ(errors[0], "f.conf:1: sa: missing spi, algorithm, key, src, dst");
  EXPECT_EQ(errors[1], "f.conf:3: policy: missing local, remote, action");
  EXPECT_EQ(errors[2], "f.conf:4: unknown keyword 'bogus' (a line starts with sa or policy)");
  EXPECT_EQ(errors[3], "f.conf:5: policy: unknown keyword 'prio'");
}

TEST(StaticFileErrors, FileNameIsThePrefix) {
  auto result = parse_static_file("bogus", "/etc/espgw/static.conf");
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0],
            "/etc/espgw/static.conf:1: unknown keyword 'bogus' (a line starts with sa or policy)");
}

// Keys misplaced in every way we could think of: no message may contain any 4 bytes of
// them in hex, in either case.
TEST(StaticFileErrors, NoMessageShowsKeyMaterial) {
  const std::string key = kKeyHex;
  const std::string upper = "00112233445566778899AABBCCDDEEFF01020304";
  const std::string head = "sa out spi 300 aes-gcm-128 src 192.0.2.1 dst 192.0.2.2 ";
  const std::vector<std::string> texts = {
      head + "key 0x" + key + "00",                                // wrong length
      head + "key 0x" + key + "0",                                 // odd digit count
      head + "key 0x" + key.substr(0, 20) + "g" + key.substr(21),  // not hex
      head + "key 0x" + key.substr(0, 8) + " " + key.substr(8),    // split in two
      head + "key " + key + ":zz",                                 // bad trailing group
      head + key,                                                  // keyword forgotten
      head + "0x" + key,
      head + "0X" + upper,
      head + key.substr(0, 20) + "g" + key.substr(21),
      head + "key 0x" + key + " " + key.substr(0, 8),
      head + "key 0x" + key + " deadbeef",
      key,
      "0x" + key,
      key.substr(0, 8),
      "sa out spi 0x" + key + " aes-gcm-128 src 192.0.2.1 dst 192.0.2.2 key 0x" + key,
      "sa out spi " + key.substr(0, 8) + "z aes-gcm-128 src 192.0.2.1 dst 192.0.2.2",
      "sa " + key,
      "sa out src " + key,
      "sa out src 0x" + key,
      "sa out udp " + key + ":" + key,
      "sa out replay-window " + key,
      "sa in soft-bytes " + key,
      "policy " + key,
      "policy out local " + key + "/16",
      "policy out local " + key.substr(0, 8) + "::/16",
      "policy out proto " + key,
      "policy out local-port " + key + "-" + key,
      "policy out action " + key,
      "policy out reqid " + key,
  };
  for (const auto& text : texts) {
    auto errors = errors_of(text);
    ASSERT_FALSE(errors.empty()) << text;
    for (const auto& error : errors)
      for (size_t i = 0; i + 8 <= key.size(); i += 2) {
        ASSERT_EQ(error.find(key.substr(i, 8)), std::string::npos) << error;
        ASSERT_EQ(error.find(upper.substr(i, 8)), std::string::npos) << error;
      }
  }
}

// Two SAs under one key would reuse nonces (the sequence number is the IV), whatever
// their SPIs and directions.
TEST(StaticFileErrors, TwoSasWithOneKey) {
  const std::string in_same_key =
      "sa in spi 0x2001 aes-gcm-128 key 0x" + kKeyHex + " src 192.0.2.2 dst 192.0.2.1 reqid 1";
  expect_errors({
      {kSa + "\n" + in_same_key + "\n" + kProtectIn,
       "f.conf:2: sa: same key as the SA on line 1 (every SA needs its own key: two SAs "
       "under one key would reuse nonces)"},
      // Another SPI and peer, written with separators: still the same key bytes.
      {kSa + "\n\nsa out spi 0x1002 aes-gcm-128 src 192.0.2.1 dst 192.0.2.9 reqid 1 key " +
           "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:01:02:03:04",
       "f.conf:3: sa: same key as the SA on line 1 (every SA needs its own key: two SAs "
       "under one key would reuse nonces)"},
  });
  EXPECT_TRUE(errors_of(kSa + "\n" + kSaIn + "\n" + kProtectIn).empty());
}

// An inbound SA takes its selectors from its reqid's protect policies; one without any
// would accept every inner packet.
TEST(StaticFileErrors, AnInboundSaWithoutPoliciesIsRefused) {
  const std::string message =
      "f.conf:1: sa: no protect policy has reqid 1: an 'sa in' takes its traffic selectors "
      "from its reqid's policies, and one without selectors would accept any packet";
  expect_errors({
      {kSaIn, message},
      {kSaIn + "\n" + kPolicy + " action bypass", message},
      {"sa in spi 0x2001 aes-gcm-128 key 0x" + kOtherKeyHex + " src 192.0.2.2 dst 192.0.2.1",
       "f.conf:1: sa: no protect policy has reqid 0: an 'sa in' takes its traffic selectors "
       "from its reqid's policies, and one without selectors would accept any packet"},
  });
  // An out policy of the reqid is enough (its selector, reversed).
  EXPECT_TRUE(errors_of(kSa + "\n" + kSaIn + "\n" + kPolicy + " action protect reqid 1").empty());
}

// As ssh refuses a private key others can read.
TEST(StaticFileErrors, AccessProblems) {
  EXPECT_FALSE(static_file_access_problem(0100600, 0, 0));
  EXPECT_FALSE(static_file_access_problem(0100400, 1000, 1000));
  EXPECT_FALSE(static_file_access_problem(0100600, 0, 1000));  // root's file, espgw as 1000
  EXPECT_EQ(static_file_access_problem(0100644, 0, 0).value_or(""),
            "mode 0644 lets group or others read or write it; it holds keys (chmod 600 it)");
  EXPECT_TRUE(static_file_access_problem(0100640, 0, 0));
  EXPECT_TRUE(static_file_access_problem(0100602, 0, 0));
  EXPECT_TRUE(static_file_access_problem(0100610, 0, 0));
  EXPECT_EQ(static_file_access_problem(0100600, 1000, 0).value_or(""),
            "owned by uid 1000, neither root nor the user espgw runs as; it holds keys (chown "
            "it)");
}

TEST(StaticFileErrors, AFileOthersCanReadIsRefusedUnread) {
  const test::TemporaryDirectory directory("espgw-static");
  const std::string path = directory.path() + "/sa.conf";
  {
    std::ofstream out(path);
    out << kSa << "\n" << kSaIn << "\n" << kProtectIn << "\n";
  }
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto refused = load_static_file(path);
  EXPECT_FALSE(refused.config);
  ASSERT_EQ(refused.errors.size(), 1u);
  EXPECT_EQ(refused.errors[0], path +
                                   ": refused: mode 0644 lets group or others read or write it; "
                                   "it holds keys (chmod 600 it)");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  auto loaded = load_static_file(path);
  EXPECT_TRUE(loaded.config) << (loaded.errors.empty() ? "" : loaded.errors[0]);
  if (loaded.config) {
    EXPECT_EQ(loaded.config->sas.size(), 2u);
  }
}

}  // namespace
}  // namespace espgw::xfrm

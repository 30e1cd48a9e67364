// Published ESP vectors: draft-mcgrew-gcm-test-01 (AES-GCM ESP, with and without ESN)
// and RFC 7634 Appendix A (ChaCha20-Poly1305 ESP). They check our AAD and nonce layout
// and key/salt split, with both backends, in both directions.
#include <gtest/gtest.h>

#include "esp/decap.h"
#include "esp/esp_format.h"
#include "packet/ip_format.h"
#include "support/sequential_esp.h"
#include "util/byte_order.h"
#include "util/hex.h"
#include "vectors/published_esp_vectors.h"

namespace espgw::esp {
namespace {

using packet::kProtocolIpv4;
using packet::kProtocolIpv6;
using test::decapsulate;
using test::InboundSaTable;

using test::kPublishedEspVectors;
using test::PublishedEspVector;

struct Decoded {
  SaConfig config;
  std::vector<uint8_t> iv, plaintext, esp_packet;
};

Decoded decode(const PublishedEspVector& v) {
  Decoded d;
  d.config.spi = v.spi;
  d.config.algorithm = *crypto::parse_algorithm(v.algorithm);
  d.config.key_material = *parse_hex(v.key_hex);
  d.config.esn = v.esn;
  d.config.tunnel_source = *IpAddress::parse("192.0.2.1");
  d.config.tunnel_destination = *IpAddress::parse("192.0.2.2");
  d.iv = *parse_hex(v.iv_hex);
  d.plaintext = *parse_hex(v.plaintext_hex);
  d.esp_packet = *parse_hex(v.esp_packet_hex);
  return d;
}

class PublishedVectors : public ::testing::TestWithParam<std::tuple<size_t, const char*>> {};

TEST_P(PublishedVectors, SealAndOpenMatchTheDocument) {
  const auto& [index, backend_name] = GetParam();
  const PublishedEspVector& v = kPublishedEspVectors[index];
  SCOPED_TRACE(v.name);
  Decoded d = decode(v);
  ASSERT_EQ(d.esp_packet.size(), 16 + d.plaintext.size() + kIcvLength);
  SaCrypto crypto(d.config, *crypto::find_backend(backend_name));

  // Header fields as the document carries them.
  EXPECT_EQ(load_be32(&d.esp_packet[0]), v.spi);
  EXPECT_EQ(load_be32(&d.esp_packet[4]), static_cast<uint32_t>(v.seq));
  EXPECT_EQ(std::vector<uint8_t>(d.esp_packet.begin() + 8, d.esp_packet.begin() + 16), d.iv);

  std::vector<uint8_t> sealed = d.plaintext;
  uint8_t icv[kIcvLength];
  crypto.seal(v.seq, d.iv.data(), sealed.data(), sealed.size(), icv);
  sealed.insert(sealed.end(), icv, icv + kIcvLength);
  EXPECT_EQ(to_hex(sealed), to_hex(std::span(d.esp_packet).subspan(16)));

  std::vector<uint8_t> opened(d.esp_packet.begin() + 16, d.esp_packet.end() - kIcvLength);
  ASSERT_TRUE(crypto.open(v.seq, d.iv.data(), opened.data(), opened.size(),
                          d.esp_packet.data() + d.esp_packet.size() - kIcvLength));
  EXPECT_EQ(opened, d.plaintext);
}

TEST_P(PublishedVectors, FullDecapsulationRunsEveryCheck) {
  const auto& [index, backend_name] = GetParam();
  const PublishedEspVector& v = kPublishedEspVectors[index];
  SCOPED_TRACE(v.name);
  Decoded d = decode(v);
  if (v.spi == 0) {
    // RFC 4303 2.1 reserves SPI 0 (draft case 4 uses it anyway); the engine must refuse
    // to install such an SA rather than accept its packets.
    EXPECT_THROW(InboundSa(d.config, *crypto::find_backend(backend_name)), std::invalid_argument);
    return;
  }
  InboundSaTable table;
  auto sa = std::make_shared<InboundSa>(d.config, *crypto::find_backend(backend_name));
  // Put the window just below the packet so ESN inference lands in the document's epoch.
  if (v.seq > 1) {
    ASSERT_EQ(sa->replay_window().commit(v.seq - 1), ReplayWindow::Verdict::accept);
  }
  table.add(sa);
  EngineCounters engine;
  PacketBuffer packet;
  ASSERT_TRUE(packet.assign(d.esp_packet));

  const uint8_t next_header = d.plaintext.back();
  const DropReason reason = decapsulate(table, engine, packet);
  if (next_header == kProtocolIpv4 || next_header == kProtocolIpv6) {
    ASSERT_EQ(reason, DropReason::none) << drop_reason_name(reason);
    const size_t pad = d.plaintext[d.plaintext.size() - 2];
    EXPECT_EQ(packet.size(), d.plaintext.size() - 2 - pad);
    EXPECT_EQ(0, memcmp(packet.data(), d.plaintext.data(), packet.size()));
  } else {
    // The draft's packets all carry next header 1 (ICMP, a transport-mode value): ICV,
    // replay and padding pass, and tunnel mode then refuses the next header.
    EXPECT_EQ(reason, DropReason::bad_next_header) << drop_reason_name(reason);
  }
  EXPECT_EQ(sa->replay_window().highest(), v.seq) << "window committed the document's number";
}

INSTANTIATE_TEST_SUITE_P(
    Documents, PublishedVectors,
    ::testing::Combine(::testing::Range<size_t>(0, std::size(kPublishedEspVectors)),
                       ::testing::Values("ipsec-mb", "openssl")),
    [](const auto& param_info) {
      std::string name = kPublishedEspVectors[std::get<0>(param_info.param)].name;
      name += std::string("_") + std::get<1>(param_info.param);
      for (auto& c : name)
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

TEST(PublishedVectorsCoverage, AllAlgorithmsAndEsnArePresent) {
  bool gcm128 = false, gcm256 = false, chacha = false, esn = false, esn_high = false;
  for (const auto& v : kPublishedEspVectors) {
    gcm128 |= std::string_view(v.algorithm) == "aes-gcm-128";
    gcm256 |= std::string_view(v.algorithm) == "aes-gcm-256";
    chacha |= std::string_view(v.algorithm) == "chacha20-poly1305";
    esn |= v.esn;
    esn_high |= v.esn && (v.seq >> 32) != 0;
  }
  EXPECT_TRUE(gcm128 && gcm256 && chacha && esn && esn_high);
}

}  // namespace
}  // namespace espgw::esp

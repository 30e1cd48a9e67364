// The SAs every fuzz target works against: one per AEAD, and AES-CBC with each HMAC, with
// and without ESN, so that the SPI a fuzzer guesses (0x100..0x107) reaches each code path.
#pragma once

#include <memory>
#include <utility>

#include "esp/security_association.h"
#include "support/inbound_sa_table.h"

namespace espgw::fuzz {

inline esp::SaConfig fuzz_sa_config(uint32_t spi) {
  using crypto::EncryptionAlgorithm;
  using crypto::IntegrityAlgorithm;
  static constexpr std::pair<EncryptionAlgorithm, IntegrityAlgorithm> kTransforms[] = {
      {EncryptionAlgorithm::aes_gcm_128, IntegrityAlgorithm::none},
      {EncryptionAlgorithm::aes_gcm_256, IntegrityAlgorithm::none},
      {EncryptionAlgorithm::chacha20_poly1305, IntegrityAlgorithm::none},
      {EncryptionAlgorithm::aes_gcm_128, IntegrityAlgorithm::none},
      {EncryptionAlgorithm::aes_cbc_128, IntegrityAlgorithm::hmac_sha1_96},
      {EncryptionAlgorithm::aes_cbc_256, IntegrityAlgorithm::hmac_sha256_128},
      {EncryptionAlgorithm::aes_cbc_192, IntegrityAlgorithm::hmac_sha384_192},
      {EncryptionAlgorithm::aes_cbc_256, IntegrityAlgorithm::hmac_sha512_256}};
  esp::SaConfig c;
  c.spi = spi;
  c.algorithm = kTransforms[spi & 7].first;
  c.integrity = kTransforms[spi & 7].second;
  c.esn = (spi & 1) != 0;
  c.key_material.assign(crypto::key_material_length(c.algorithm, c.integrity),
                        static_cast<uint8_t>(spi));
  c.tunnel_source = *esp::IpAddress::parse((spi & 2) ? "2001:db8::1" : "192.0.2.1");
  c.tunnel_destination = *esp::IpAddress::parse((spi & 2) ? "2001:db8::2" : "192.0.2.2");
  if (spi & 1) c.udp_encapsulation = esp::UdpEncapsulation{};
  c.replay_window = 64;
  return c;
}

inline constexpr uint32_t kFirstFuzzSpi = 0x100;
inline constexpr uint32_t kFuzzSaCount = 8;

}  // namespace espgw::fuzz

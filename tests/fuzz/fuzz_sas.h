// The SAs every fuzz target works against: one per algorithm, with and without ESN, so
// that the SPI a fuzzer guesses (0x100..0x103) reaches each code path.
#pragma once

#include <memory>

#include "esp/security_association.h"
#include "support/inbound_sa_table.h"

namespace espgw::fuzz {

inline esp::SaConfig fuzz_sa_config(uint32_t spi) {
  static constexpr crypto::AeadAlgorithm kAlgorithms[] = {
      crypto::AeadAlgorithm::aes_gcm_128, crypto::AeadAlgorithm::aes_gcm_256,
      crypto::AeadAlgorithm::chacha20_poly1305, crypto::AeadAlgorithm::aes_gcm_128};
  esp::SaConfig c;
  c.spi = spi;
  c.algorithm = kAlgorithms[spi & 3];
  c.esn = (spi & 1) != 0;
  c.key_material.assign(crypto::key_material_length(c.algorithm), static_cast<uint8_t>(spi));
  c.tunnel_source = *esp::IpAddress::parse((spi & 2) ? "2001:db8::1" : "192.0.2.1");
  c.tunnel_destination = *esp::IpAddress::parse((spi & 2) ? "2001:db8::2" : "192.0.2.2");
  if (spi & 1) c.udp_encapsulation = esp::UdpEncapsulation{};
  c.replay_window = 64;
  return c;
}

inline constexpr uint32_t kFirstFuzzSpi = 0x100;
inline constexpr uint32_t kFuzzSaCount = 4;

}  // namespace espgw::fuzz

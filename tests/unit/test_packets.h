// Builders for inner packets and SA configurations shared by the unit tests.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "esp/security_association.h"

namespace espgw::test {

// A valid IPv4 UDP packet from 10.1.0.1 to 10.2.0.1 with `payload_length` payload bytes.
std::vector<uint8_t> make_ipv4_packet(size_t payload_length, uint8_t fill = 0xAB,
                                      bool dont_fragment = true);
// A valid IPv6 UDP packet from fd00:1::1 to fd00:2::1.
std::vector<uint8_t> make_ipv6_packet(size_t payload_length, uint8_t fill = 0xCD);

// An SA pair config: the same keys and SPI for both ends of one direction.
esp::SaConfig make_sa_config(crypto::AeadAlgorithm algorithm, bool esn, bool ipv6_outer, bool udp,
                             uint32_t spi = 0x1000);

// The same for AES-CBC with an HMAC: encryption key followed by integrity key.
esp::SaConfig make_cbc_sa_config(crypto::EncryptionAlgorithm cipher,
                                 crypto::IntegrityAlgorithm integrity, bool esn, bool ipv6_outer,
                                 bool udp, uint32_t spi = 0x1000);

// make_ipv4_packet(100) with IPv4 TOS byte `tos` (DSCP and ECN) and a valid checksum.
std::vector<uint8_t> ipv4_with_tos(uint8_t tos);
// Whether an IPv4 header's checksum verifies, by the RFC 1071 sum over the 20 bytes (not
// the incremental updates the code under test makes).
bool ipv4_checksum_verifies(const std::vector<uint8_t>& packet);
// make_ipv6_packet(100) with traffic class `traffic_class`.
std::vector<uint8_t> ipv6_with_traffic_class(uint8_t traffic_class);

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t length);

}  // namespace espgw::test

#include "unit/test_packets.h"

#include "esp/checksum.h"
#include "util/byte_order.h"

namespace espgw::test {

std::vector<uint8_t> make_ipv4_packet(size_t payload_length, uint8_t fill, bool dont_fragment) {
  std::vector<uint8_t> p(20 + 8 + payload_length, fill);
  p[0] = 0x45;
  p[1] = 0x10;
  store_be16(&p[2], static_cast<uint16_t>(p.size()));
  store_be16(&p[4], 0x1234);
  store_be16(&p[6], dont_fragment ? 0x4000 : 0);
  p[8] = 64;
  p[9] = 17;
  store_be16(&p[10], 0);
  const uint8_t src[] = {10, 1, 0, 1}, dst[] = {10, 2, 0, 1};
  std::copy(src, src + 4, &p[12]);
  std::copy(dst, dst + 4, &p[16]);
  store_be16(&p[20], 5000);
  store_be16(&p[22], 6000);
  store_be16(&p[24], static_cast<uint16_t>(8 + payload_length));
  store_be16(&p[26], 0);
  return p;
}

std::vector<uint8_t> make_ipv6_packet(size_t payload_length, uint8_t fill) {
  std::vector<uint8_t> p(40 + 8 + payload_length, fill);
  store_be32(&p[0], 0x60000000);
  store_be16(&p[4], static_cast<uint16_t>(8 + payload_length));
  p[6] = 17;
  p[7] = 64;
  const uint8_t src[16] = {0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const uint8_t dst[16] = {0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  std::copy(src, src + 16, &p[8]);
  std::copy(dst, dst + 16, &p[24]);
  store_be16(&p[40], 5000);
  store_be16(&p[42], 6000);
  store_be16(&p[44], static_cast<uint16_t>(8 + payload_length));
  store_be16(&p[46], 0);
  return p;
}

esp::SaConfig make_sa_config(crypto::AeadAlgorithm algorithm, bool esn, bool ipv6_outer, bool udp,
                             uint32_t spi) {
  esp::SaConfig c;
  c.spi = spi;
  c.algorithm = algorithm;
  c.key_material.resize(crypto::key_material_length(algorithm));
  for (size_t i = 0; i < c.key_material.size(); ++i)
    c.key_material[i] = static_cast<uint8_t>(i * 7 + spi);
  c.esn = esn;
  c.tunnel_source = *esp::IpAddress::parse(ipv6_outer ? "2001:db8::1" : "192.0.2.1");
  c.tunnel_destination = *esp::IpAddress::parse(ipv6_outer ? "2001:db8::2" : "192.0.2.2");
  if (udp) c.udp_encapsulation = esp::UdpEncapsulation{};
  return c;
}

esp::SaConfig make_cbc_sa_config(crypto::EncryptionAlgorithm cipher,
                                 crypto::IntegrityAlgorithm integrity, bool esn, bool ipv6_outer,
                                 bool udp, uint32_t spi) {
  esp::SaConfig c = make_sa_config(crypto::AeadAlgorithm::aes_gcm_128, esn, ipv6_outer, udp, spi);
  c.algorithm = cipher;
  c.integrity = integrity;
  c.key_material.resize(crypto::key_material_length(cipher, integrity));
  for (size_t i = 0; i < c.key_material.size(); ++i)
    c.key_material[i] = static_cast<uint8_t>(i * 11 + spi);
  return c;
}

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t length) {
  std::vector<uint8_t> out(length);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

std::vector<uint8_t> ipv4_with_tos(uint8_t tos) {
  std::vector<uint8_t> p = make_ipv4_packet(100);
  p[1] = tos;
  p[10] = p[11] = 0;
  const uint16_t checksum = esp::ipv4_header_checksum(p.data(), 20);
  p[10] = static_cast<uint8_t>(checksum >> 8);
  p[11] = static_cast<uint8_t>(checksum);
  return p;
}

bool ipv4_checksum_verifies(const std::vector<uint8_t>& packet) {
  return esp::checksum_finish(esp::checksum_add(0, packet.data(), 20)) == 0;
}

std::vector<uint8_t> ipv6_with_traffic_class(uint8_t traffic_class) {
  std::vector<uint8_t> p = make_ipv6_packet(100);
  p[0] = static_cast<uint8_t>(0x60 | traffic_class >> 4);
  p[1] = static_cast<uint8_t>((p[1] & 0x0F) | traffic_class << 4);
  return p;
}

}  // namespace espgw::test

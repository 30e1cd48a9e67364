#include "esp/checksum.h"

#include <cstring>

#include "util/byte_order.h"

namespace espgw::esp {

uint32_t checksum_add(uint32_t sum, const uint8_t* data, size_t length) {
  uint64_t wide = sum;
  // 32 bits at a time into a 64-bit accumulator; the carries fold back in at the end.
  while (length >= 4) {
    uint32_t word;
    std::memcpy(&word, data, 4);
    wide += __builtin_bswap32(word);
    data += 4;
    length -= 4;
  }
  if (length >= 2) {
    wide += load_be16(data);
    data += 2;
    length -= 2;
  }
  if (length) wide += uint32_t{data[0]} << 8;
  while (wide >> 16) wide = (wide & 0xFFFF) + (wide >> 16);
  return static_cast<uint32_t>(wide);
}

uint16_t checksum_finish(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

uint16_t ipv4_header_checksum(const uint8_t* header, size_t length) {
  return checksum_finish(checksum_add(0, header, length));
}

uint16_t udp6_checksum(const uint8_t* source, const uint8_t* destination, const uint8_t* udp,
                       size_t udp_length) {
  uint8_t pseudo[8] = {};
  store_be32(pseudo, static_cast<uint32_t>(udp_length));
  pseudo[7] = 17;  // next header: UDP
  uint32_t sum = checksum_add(0, source, 16);
  sum = checksum_add(sum, destination, 16);
  sum = checksum_add(sum, pseudo, sizeof pseudo);
  sum = checksum_add(sum, udp, udp_length);
  uint16_t result = checksum_finish(sum);
  return result == 0 ? 0xFFFF : result;  // 0 means "no checksum"; send all ones instead
}

}  // namespace espgw::esp

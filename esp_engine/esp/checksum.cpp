#include "esp/checksum.h"

#include <bit>
#include <cstring>

#include "util/byte_order.h"

namespace espgw::esp {

static_assert(std::endian::native == std::endian::little,
              "checksum_add sums little-endian words and swaps the result once");

uint32_t checksum_add(uint32_t sum, const uint8_t* data, size_t length) {
  // RFC 1071's one's-complement sum does not depend on byte order: summing the words as
  // the CPU loads them (little-endian) and swapping the folded 16-bit result gives the
  // big-endian sum, with no byte swap per word. Two 64-bit accumulators of 32-bit words
  // keep the loop free of carries (each add leaves 32 bits of headroom) and let two
  // additions run at once; it runs on every TCP segment cut from a TSO super-packet.
  uint64_t a = 0;
  uint64_t b = 0;
  while (length >= 16) {
    uint32_t words[4];
    std::memcpy(words, data, sizeof words);
    a += words[0];
    b += words[1];
    a += words[2];
    b += words[3];
    data += 16;
    length -= 16;
  }
  while (length >= 4) {
    uint32_t word;
    std::memcpy(&word, data, 4);
    a += word;
    data += 4;
    length -= 4;
  }
  if (length >= 2) {
    uint16_t half;
    std::memcpy(&half, data, 2);
    b += half;
    data += 2;
    length -= 2;
  }
  if (length) b += data[0];  // the odd last byte is the high byte of a big-endian word
  uint64_t wide = (a & 0xFFFFFFFF) + (a >> 32) + (b & 0xFFFFFFFF) + (b >> 32);
  while (wide >> 16) wide = (wide & 0xFFFF) + (wide >> 16);
  const uint64_t swapped = ((wide & 0xFF) << 8) | (wide >> 8);
  uint64_t total = swapped + sum;
  while (total >> 16) total = (total & 0xFFFF) + (total >> 16);
  return static_cast<uint32_t>(total);
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

#include "esp/checksum.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

#include "packet/ip_format.h"
#include "util/byte_order.h"

namespace espgw::esp {

static_assert(std::endian::native == std::endian::little,
              "checksum_add sums little-endian words and swaps the result once");

namespace {

// Sums the little-endian 16-bit words of `blocks` 64-byte blocks, unfolded. Each 32-bit
// lane of a 256-bit register takes the low and the high half of its word separately
// (mask and shift: plain ALU operations, 4 per cycle, where unpacking would queue on the
// shuffle port), two loads per iteration; a lane grows by at most 0xFFFF per iteration,
// so it is widened to 64 bits every kBlocksPerFold blocks, long before it could overflow. 1460
// bytes take 23 iterations instead of the portable loop's 91.
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint8_t* data, size_t blocks) {
  constexpr size_t kBlocksPerFold = 16384;  // 1 MiB; a sum of two lanes stays in 32 bits
  const __m256i low_half = _mm256_set1_epi32(0xFFFF);
  uint64_t total = 0;
  while (blocks > 0) {
    const size_t run = blocks < kBlocksPerFold ? blocks : kBlocksPerFold;
    // Four accumulators, so that no add waits for the one before it.
    __m256i low_a = _mm256_setzero_si256(), low_b = low_a, high_a = low_a, high_b = low_a;
    for (size_t i = 0; i < run; ++i, data += 64) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(data + 32));
      low_a = _mm256_add_epi32(low_a, _mm256_and_si256(a, low_half));
      high_a = _mm256_add_epi32(high_a, _mm256_srli_epi32(a, 16));
      low_b = _mm256_add_epi32(low_b, _mm256_and_si256(b, low_half));
      high_b = _mm256_add_epi32(high_b, _mm256_srli_epi32(b, 16));
    }
    // Each of these lanes is at most 2 * 16384 * 0xFFFF, still under 2^32.
    const __m256i low = _mm256_add_epi32(low_a, low_b);
    const __m256i high = _mm256_add_epi32(high_a, high_b);
    // Widen the sixteen 32-bit lanes into four 64-bit ones, then add those.
    const __m256i lanes = _mm256_add_epi64(
        _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(low)),
                         _mm256_cvtepu32_epi64(_mm256_extracti128_si256(low, 1))),
        _mm256_add_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(high)),
                         _mm256_cvtepu32_epi64(_mm256_extracti128_si256(high, 1))));
    alignas(32) uint64_t parts[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(parts), lanes);
    total += parts[0] + parts[1] + parts[2] + parts[3];
    blocks -= run;
  }
  return total;
}

// A static initializer may run before the compiler runtime's own CPU detection: ask for
// it first.
const bool cpu_has_avx2 = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));

// Below this the vector set-up and reduction cost more than they save (headers).
constexpr size_t kVectorFrom = 128;

}  // namespace

uint32_t checksum_add(uint32_t sum, const uint8_t* data, size_t length) {
  if (length < kVectorFrom || !cpu_has_avx2) return checksum_add_portable(sum, data, length);
  // The vector sum is of 16-bit little-endian words; the portable loop's 32-bit words are
  // the same sum modulo 0xFFFF (2^16 = 1 there), so the two halves simply add up. A
  // 16-bit word at an even offset stays whole since the blocks cover 64-byte multiples.
  const size_t blocks = length / 64;
  const uint64_t words = sum_words_avx2(data, blocks);
  uint64_t folded = (words & 0xFFFFFFFF) + (words >> 32);
  while (folded >> 16) folded = (folded & 0xFFFF) + (folded >> 16);
  // Little-endian fold to big-endian order, as the portable loop does at its end.
  uint64_t total = (((folded & 0xFF) << 8) | (folded >> 8)) + sum;
  while (total >> 16) total = (total & 0xFFFF) + (total >> 16);
  return checksum_add_portable(static_cast<uint32_t>(total), data + blocks * 64,
                               length - blocks * 64);
}

uint32_t checksum_add_portable(uint32_t sum, const uint8_t* data, size_t length) {
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
  pseudo[7] = packet::kProtocolUdp;  // next header
  uint32_t sum = checksum_add(0, source, 16);
  sum = checksum_add(sum, destination, 16);
  sum = checksum_add(sum, pseudo, sizeof pseudo);
  sum = checksum_add(sum, udp, udp_length);
  uint16_t result = checksum_finish(sum);
  return result == 0 ? 0xFFFF : result;  // 0 means "no checksum"; send all ones instead
}

}  // namespace espgw::esp

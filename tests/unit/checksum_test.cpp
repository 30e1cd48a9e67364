// The Internet checksum against RFC 1071's definition, written the obvious way (big-endian
// 16-bit words, one at a time): every length from 0 to 300 bytes at every alignment,
// random contents and starting sums, segment and super-packet sizes, the all-ones corner
// cases, and chaining. Both the dispatched checksum_add (AVX2 on these machines, from 128
// bytes on) and the portable loop are checked.
#include "esp/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/rfc1071_checksum.h"

namespace espgw::esp {
namespace {

using Sum = uint32_t (*)(uint32_t, const uint8_t*, size_t);

void expect_rfc1071_at_every_alignment(Sum sum, const std::vector<size_t>& lengths) {
  std::mt19937_64 random(20261130);
  std::vector<uint8_t> buffer(70000 + 8);  // the longest length at the largest offset
  for (const size_t length : lengths) {
    for (size_t offset = 0; offset < 8; ++offset) {
      for (size_t i = 0; i < length + offset; ++i) buffer[i] = static_cast<uint8_t>(random());
      // Any 32-bit partial sum may come in, not only folded ones.
      const uint32_t start = offset == 7 ? 0xFFFFFFFFu : static_cast<uint32_t>(random());
      const uint8_t* data = buffer.data() + offset;
      ASSERT_EQ(checksum_finish(sum(start, data, length)),
                checksum_finish(test::rfc1071_sum(start, data, length)))
          << "length " << length << " offset " << offset;
    }
  }
}

std::vector<size_t> every_length_to(size_t last) {
  std::vector<size_t> lengths;
  for (size_t length = 0; length <= last; ++length) lengths.push_back(length);
  return lengths;
}

// Sizes around the vector loop's 64-byte blocks, a segment, a jumbo segment, super-packets.
const std::vector<size_t> kLargeLengths = {511,  512,  513,  1399, 1400,  1460,  1461,
                                           4095, 8960, 8961, 9000, 65535, 65536, 69999};

TEST(Checksum, MatchesRfc1071AtEveryLengthAndAlignment) {
  expect_rfc1071_at_every_alignment(checksum_add, every_length_to(300));
  expect_rfc1071_at_every_alignment(checksum_add, kLargeLengths);
}

TEST(Checksum, PortableLoopMatchesRfc1071AtEveryLengthAndAlignment) {
  expect_rfc1071_at_every_alignment(checksum_add_portable, every_length_to(300));
  expect_rfc1071_at_every_alignment(checksum_add_portable, kLargeLengths);
}

// Past the point where the vector loop widens its 32-bit lanes (1 MiB), all ones being
// the largest words there are.
TEST(Checksum, LongRunsOfAllOnesDoNotOverflow) {
  const std::vector<uint8_t> ones(3 * 1024 * 1024 + 6, 0xFF);
  for (const size_t length : {ones.size(), size_t{1} << 20, (size_t{1} << 21) + 64})
    EXPECT_EQ(checksum_finish(checksum_add(0, ones.data(), length)),
              checksum_finish(test::rfc1071_sum(0, ones.data(), length)))
        << length;
}

TEST(Checksum, AllOnesAndAllZeros) {
  std::vector<uint8_t> ones(65535, 0xFF), zeros(1500, 0);
  EXPECT_EQ(checksum_finish(checksum_add(0, ones.data(), ones.size())),
            checksum_finish(test::rfc1071_sum(0, ones.data(), ones.size())));
  EXPECT_EQ(checksum_finish(checksum_add(0xFFFF, ones.data(), 64)),
            checksum_finish(test::rfc1071_sum(0xFFFF, ones.data(), 64)));
  EXPECT_EQ(checksum_add(0, zeros.data(), zeros.size()), 0u);
}

TEST(Checksum, ChainsOverEvenLengthPieces) {
  std::mt19937_64 random(7);
  std::vector<uint8_t> data(1500);
  for (auto& byte : data) byte = static_cast<uint8_t>(random());
  uint32_t chained = checksum_add(0, data.data(), 40);
  chained = checksum_add(chained, data.data() + 40, 1000);
  chained = checksum_add(chained, data.data() + 1040, 460);
  EXPECT_EQ(checksum_finish(chained), checksum_finish(test::rfc1071_sum(0, data.data(), 1500)));
}

}  // namespace
}  // namespace espgw::esp

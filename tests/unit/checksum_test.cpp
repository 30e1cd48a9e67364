// The Internet checksum against RFC 1071's definition, written the obvious way (big-endian
// 16-bit words, one at a time): every length from 0 to 300 bytes at every alignment,
// random contents and starting sums, the all-ones corner cases, and chaining.
#include "esp/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "support/rfc1071_checksum.h"

namespace espgw::esp {
namespace {

TEST(Checksum, MatchesRfc1071AtEveryLengthAndAlignment) {
  std::mt19937_64 random(20261130);
  std::vector<uint8_t> buffer(400);
  for (size_t length = 0; length <= 300; ++length) {
    for (size_t offset = 0; offset < 8; ++offset) {
      for (auto& byte : buffer) byte = static_cast<uint8_t>(random());
      const uint32_t start = static_cast<uint32_t>(random() % 0x10000);
      const uint8_t* data = buffer.data() + offset;
      ASSERT_EQ(checksum_finish(checksum_add(start, data, length)),
                checksum_finish(test::rfc1071_sum(start, data, length)))
          << "length " << length << " offset " << offset;
    }
  }
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

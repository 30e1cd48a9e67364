// ipsec-mb against OpenSSL: random keys, nonces, AAD and lengths. Both must produce the
// same ciphertext and tag, each must open what the other sealed, and both must refuse a
// tampered message.
#include <gtest/gtest.h>

#include <random>

#include "crypto/aead.h"
#include "unit/test_packets.h"

namespace espgw::crypto {
namespace {

class CryptoCrossCheck : public ::testing::TestWithParam<AeadAlgorithm> {};

TEST_P(CryptoCrossCheck, BackendsAgreeOnRandomInputs) {
  const AeadAlgorithm algorithm = GetParam();
  std::mt19937_64 rng(static_cast<uint64_t>(algorithm) + 11);
  for (int i = 0; i < 400; ++i) {
    auto key = test::random_bytes(rng, cipher_key_length(algorithm));
    auto mb = ipsec_mb_backend().make_key(algorithm, key);
    auto ossl = openssl_backend().make_key(algorithm, key);
    auto nonce = test::random_bytes(rng, kNonceLength);
    auto aad = test::random_bytes(rng, rng() % 2 ? 8 : 12);
    // Lengths around block and vector-register boundaries, and large ones.
    const size_t length = i < 300 ? i : rng() % 9000;
    auto plaintext = test::random_bytes(rng, length);

    std::vector<uint8_t> c1(length), c2(length);
    uint8_t t1[kIcvLength], t2[kIcvLength];
    mb->seal(nonce.data(), aad.data(), aad.size(), plaintext.data(), c1.data(), length, t1);
    ossl->seal(nonce.data(), aad.data(), aad.size(), plaintext.data(), c2.data(), length, t2);
    ASSERT_EQ(c1, c2) << "length " << length;
    ASSERT_EQ(0, memcmp(t1, t2, kIcvLength)) << "length " << length;

    std::vector<uint8_t> p1(length), p2(length);
    ASSERT_TRUE(ossl->open(nonce.data(), aad.data(), aad.size(), c1.data(), p1.data(), length, t1));
    ASSERT_TRUE(mb->open(nonce.data(), aad.data(), aad.size(), c2.data(), p2.data(), length, t2));
    ASSERT_EQ(p1, plaintext);
    ASSERT_EQ(p2, plaintext);

    // In place, as the ESP path uses them.
    std::vector<uint8_t> in_place = plaintext;
    mb->seal(nonce.data(), aad.data(), aad.size(), in_place.data(), in_place.data(), length, t1);
    ASSERT_EQ(in_place, c1);
    ASSERT_TRUE(mb->open(nonce.data(), aad.data(), aad.size(), in_place.data(), in_place.data(),
                         length, t1));
    ASSERT_EQ(in_place, plaintext);

    // Tampering with the tag, the ciphertext or the AAD must be caught by both.
    std::vector<uint8_t> scratch(length);
    t1[rng() % kIcvLength] ^= static_cast<uint8_t>(1 + rng() % 255);
    EXPECT_FALSE(
        mb->open(nonce.data(), aad.data(), aad.size(), c1.data(), scratch.data(), length, t1));
    EXPECT_FALSE(
        ossl->open(nonce.data(), aad.data(), aad.size(), c1.data(), scratch.data(), length, t1));
    aad[rng() % aad.size()] ^= 0x40;
    EXPECT_FALSE(
        mb->open(nonce.data(), aad.data(), aad.size(), c2.data(), scratch.data(), length, t2));
    EXPECT_FALSE(
        ossl->open(nonce.data(), aad.data(), aad.size(), c2.data(), scratch.data(), length, t2));
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CryptoCrossCheck,
                         ::testing::Values(AeadAlgorithm::aes_gcm_128, AeadAlgorithm::aes_gcm_256,
                                           AeadAlgorithm::chacha20_poly1305),
                         [](const auto& param_info) {
                           std::string name(algorithm_name(param_info.param));
                           for (auto& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

TEST(CryptoBackends, WrongKeyLengthIsRefused) {
  std::vector<uint8_t> key(17);
  EXPECT_THROW(ipsec_mb_backend().make_key(AeadAlgorithm::aes_gcm_128, key), std::invalid_argument);
  EXPECT_THROW(openssl_backend().make_key(AeadAlgorithm::chacha20_poly1305, key),
               std::invalid_argument);
}

TEST(CryptoBackends, LookupByName) {
  EXPECT_EQ(find_backend("ipsec-mb"), &ipsec_mb_backend());
  EXPECT_EQ(find_backend("openssl"), &openssl_backend());
  EXPECT_EQ(find_backend("rot13"), nullptr);
  EXPECT_EQ(parse_algorithm("aes128gcm16"), AeadAlgorithm::aes_gcm_128);
  EXPECT_EQ(parse_algorithm("chacha20poly1305"), AeadAlgorithm::chacha20_poly1305);
  EXPECT_FALSE(parse_algorithm("aes128").has_value());
}

}  // namespace
}  // namespace espgw::crypto

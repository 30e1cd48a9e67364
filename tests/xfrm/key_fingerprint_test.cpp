// The key fingerprint: a fixed, domain-separated SHA-256, so values persisted by one
// build still match in the next.
#include "xfrm/key_fingerprint.h"

#include <gtest/gtest.h>

#include <vector>

namespace espgw::xfrm {
namespace {

std::string hex_of(const KeyFingerprint& f) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t b : f) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

TEST(KeyFingerprint, IsSha256OfTheLabelAndTheKey) {
  // sha256("espgw sa key v1" || 00 01 02 ... 13), computed with `openssl dgst -sha256`.
  std::vector<uint8_t> key(20);
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(hex_of(key_fingerprint(key)),
            "5a00b72ba95450e2b7a4109c3172e4d5496f22bce593b385dc2deebe6aee21ed");
}

TEST(KeyFingerprint, DiffersForDifferentKeysAndIsNotThePlainHash) {
  std::vector<uint8_t> a(36, 0x11), b(36, 0x11);
  b[35] = 0x12;
  EXPECT_TRUE(same_fingerprint(key_fingerprint(a), key_fingerprint(a)));
  EXPECT_FALSE(same_fingerprint(key_fingerprint(a), key_fingerprint(b)));
  // The empty key still hashes the label: sha256("espgw sa key v1"), not sha256("").
  EXPECT_NE(hex_of(key_fingerprint({})),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace espgw::xfrm

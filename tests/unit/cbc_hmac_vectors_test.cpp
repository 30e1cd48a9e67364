// AES-CBC + HMAC against published values, with both backends: AES-CBC from RFC 3602
// section 4 (cases 1 to 3, AES-128) and NIST SP 800-38A F.2.3 and F.2.5 (AES-192 and
// AES-256); the HMACs from RFC 2202 (SHA-1, cases 1 and 3) and RFC 4868 2.7.1 (SHA-256,
// SHA-384, SHA-512 with ESP's key lengths), truncated as RFC 2404 and RFC 4868 say. Then
// the ESP composition: ICV over header, IV and ciphertext (and ESN high bits), ICV
// failure before decryption, and the two backends on random packets.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "crypto/aead.h"
#include "unit/test_packets.h"
#include "util/hex.h"

namespace espgw::crypto {
namespace {

using Bytes = std::vector<uint8_t>;
Bytes hex(const char* text) {
  return *parse_hex(text);
}
Bytes text_bytes(const char* text) {
  return Bytes(text, text + std::strlen(text));
}

const char* const kBackends[] = {"ipsec-mb", "openssl"};

struct CbcVector {
  const char* name;
  EncryptionAlgorithm cipher;
  const char* key;
  const char* iv;
  Bytes plaintext;
  const char* ciphertext;
};

std::vector<CbcVector> cbc_vectors() {
  Bytes counting(32), high(64);
  for (size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < high.size(); ++i) high[i] = static_cast<uint8_t>(0xa0 + i);
  const Bytes nist = hex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51");
  return {
      {"rfc3602-case1", EncryptionAlgorithm::aes_cbc_128, "06a9214036b8a15b512e03d534120006",
       "3dafba429d9eb430b422da802c9fac41", text_bytes("Single block msg"),
       "e353779c1079aeb82708942dbe77181a"},
      {"rfc3602-case2", EncryptionAlgorithm::aes_cbc_128, "c286696d887c9aa0611bbb3e2025a45a",
       "562e17996d093d28ddb3ba695a2e6f58", counting,
       "d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1"},
      {"rfc3602-case3", EncryptionAlgorithm::aes_cbc_128, "56e47a38c5598974bc46903dba290349",
       "8ce82eefbea0da3c44699ed7db51b7d9", high,
       "c30e32ffedc0774e6aff6af0869f71aa0f3af07a9a31a9c684db207eb0ef8e4e"
       "35907aa632c3ffdf868bb7b29d3d46ad83ce9f9a102ee99d49a53e87f4c3da55"},
      {"sp800-38a-f.2.3", EncryptionAlgorithm::aes_cbc_192,
       "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b", "000102030405060708090a0b0c0d0e0f", nist,
       "4f021db243bc633d7178183a9fa071e8b4d9ada9ad7dedf4e5e738763f69145a"},
      {"sp800-38a-f.2.5", EncryptionAlgorithm::aes_cbc_256,
       "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
       "000102030405060708090a0b0c0d0e0f", nist,
       "f58c4c04d6e5f1ba779eabfb5f7bfbd69cfc4e967edb808d679f777bc6702c7d"},
  };
}

struct HmacVector {
  const char* name;
  IntegrityAlgorithm integrity;
  Bytes key;
  Bytes data;
  const char* truncated;  // the ICV: the digest's first icv_length bytes
};

std::vector<HmacVector> hmac_vectors() {
  return {
      {"rfc2202-sha1-case1", IntegrityAlgorithm::hmac_sha1_96, Bytes(20, 0x0b),
       text_bytes("Hi There"), "b617318655057264e28bc0b6"},
      {"rfc2202-sha1-case3", IntegrityAlgorithm::hmac_sha1_96, Bytes(20, 0xaa), Bytes(50, 0xdd),
       "125d7342b9ac11cd91a39af4"},
      {"rfc4868-auth256-1", IntegrityAlgorithm::hmac_sha256_128, Bytes(32, 0x0b),
       text_bytes("Hi There"), "198a607eb44bfbc69903a0f1cf2bbdc5"},
      {"rfc4868-auth256-3", IntegrityAlgorithm::hmac_sha256_128, Bytes(32, 0xaa), Bytes(50, 0xdd),
       "cdcb1220d1ecccea91e53aba3092f962"},
      {"rfc4868-auth384-1", IntegrityAlgorithm::hmac_sha384_192, Bytes(48, 0x0b),
       text_bytes("Hi There"), "b6a8d5636f5c6a7224f9977dcf7ee6c7fb6d0c48cbdee973"},
      {"rfc4868-auth384-3", IntegrityAlgorithm::hmac_sha384_192, Bytes(48, 0xaa), Bytes(50, 0xdd),
       "809f439be00274321d4a538652164b53554a508184a0c316"},
      {"rfc4868-auth512-1", IntegrityAlgorithm::hmac_sha512_256, Bytes(64, 0x0b),
       text_bytes("Hi There"), "637edc6e01dce7e6742a99451aae82df23da3e92439e590e43e761b33e910fb8"},
      {"rfc4868-auth512-3", IntegrityAlgorithm::hmac_sha512_256, Bytes(64, 0xaa), Bytes(50, 0xdd),
       "2ee7acd783624ca9398710f3ee05ae41b9f9b0510c87e49e586cc9bf961733d8"},
  };
}

// An ESP packet as CbcHmacKey sees it: header, IV, plaintext, room for the ICV.
Bytes esp_packet(const Bytes& iv, const Bytes& plaintext, size_t icv_length) {
  Bytes p(8, 0);
  p[0] = 0x12;
  p[7] = 0x01;
  p.insert(p.end(), iv.begin(), iv.end());
  p.insert(p.end(), plaintext.begin(), plaintext.end());
  p.resize(p.size() + icv_length);
  return p;
}

TEST(CbcHmacVectors, AesCbcCiphertextMatchesThePublishedValue) {
  for (const char* backend : kBackends)
    for (const CbcVector& v : cbc_vectors()) {
      SCOPED_TRACE(std::string(backend) + " " + v.name);
      const Bytes integrity_key(20, 0x42);
      auto key = find_backend(backend)->make_cbc_hmac_key(
          v.cipher, IntegrityAlgorithm::hmac_sha1_96, hex(v.key), integrity_key);
      Bytes packet = esp_packet(hex(v.iv), v.plaintext, key->icv_length());
      key->seal(packet.data(), v.plaintext.size(), nullptr);
      const Bytes ciphertext(packet.begin() + kCbcCiphertextOffset,
                             packet.end() - static_cast<long>(key->icv_length()));
      EXPECT_EQ(ciphertext, hex(v.ciphertext));
      ASSERT_TRUE(key->open(packet.data(), v.plaintext.size(), nullptr));
      EXPECT_EQ(Bytes(packet.begin() + kCbcCiphertextOffset,
                      packet.end() - static_cast<long>(key->icv_length())),
                v.plaintext);
    }
}

TEST(CbcHmacVectors, HmacMatchesThePublishedValueTruncated) {
  for (const char* backend : kBackends)
    for (const HmacVector& v : hmac_vectors()) {
      SCOPED_TRACE(std::string(backend) + " " + v.name);
      auto key = find_backend(backend)->make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_128,
                                                          v.integrity, Bytes(16, 1), v.key);
      const Bytes expected = hex(v.truncated);
      ASSERT_EQ(key->icv_length(), expected.size());
      Bytes icv(key->icv_length());
      key->compute_icv(v.data.data(), v.data.size(), icv.data());
      EXPECT_EQ(icv, expected);
    }
}

struct Transform {
  EncryptionAlgorithm cipher;
  IntegrityAlgorithm integrity;
};

std::vector<Transform> all_transforms() {
  std::vector<Transform> out;
  for (auto cipher : {EncryptionAlgorithm::aes_cbc_128, EncryptionAlgorithm::aes_cbc_192,
                      EncryptionAlgorithm::aes_cbc_256})
    for (auto integrity :
         {IntegrityAlgorithm::hmac_sha1_96, IntegrityAlgorithm::hmac_sha256_128,
          IntegrityAlgorithm::hmac_sha384_192, IntegrityAlgorithm::hmac_sha512_256})
      out.push_back({cipher, integrity});
  return out;
}

// The ICV covers SPI, sequence number, IV and ciphertext, then the ESN high bits when the
// SA has ESN (RFC 4303 2.2.1, 3.3.2: encrypt, then MAC); both backends agree on random
// keys, IVs and lengths, and each opens what the other sealed.
TEST(CbcHmacCrossCheck, BackendsAgreeAndTheIcvCoversWhatRfc4303Says) {
  std::mt19937_64 rng(3602);
  for (const Transform& t : all_transforms())
    for (bool esn : {false, true})
      for (size_t blocks : {1, 2, 5, 64, 94}) {
        SCOPED_TRACE(std::string(algorithm_name(t.cipher)) + " " +
                     std::string(integrity_name(t.integrity)) + (esn ? " esn " : " ") +
                     std::to_string(blocks));
        const Bytes encryption_key = test::random_bytes(rng, cipher_key_length(t.cipher));
        const Bytes integrity_key = test::random_bytes(rng, integrity_key_length(t.integrity));
        auto mb = ipsec_mb_backend().make_cbc_hmac_key(t.cipher, t.integrity, encryption_key,
                                                       integrity_key);
        auto ossl = openssl_backend().make_cbc_hmac_key(t.cipher, t.integrity, encryption_key,
                                                        integrity_key);
        const size_t icv_length = integrity_icv_length(t.integrity);
        const Bytes plaintext = test::random_bytes(rng, blocks * 16);
        const Bytes iv = test::random_bytes(rng, 16);
        const Bytes esn_high = test::random_bytes(rng, kEsnHighLength);
        const uint8_t* high = esn ? esn_high.data() : nullptr;
        Bytes a = esp_packet(iv, plaintext, icv_length);
        Bytes b = a;
        mb->seal(a.data(), plaintext.size(), high);
        ossl->seal(b.data(), plaintext.size(), high);
        ASSERT_EQ(a, b);

        Bytes authenticated(a.begin(), a.end() - static_cast<long>(icv_length));
        if (esn) authenticated.insert(authenticated.end(), esn_high.begin(), esn_high.end());
        Bytes icv(icv_length);
        ossl->compute_icv(authenticated.data(), authenticated.size(), icv.data());
        EXPECT_EQ(Bytes(a.end() - static_cast<long>(icv_length), a.end()), icv);

        Bytes opened_by_ossl = a, opened_by_mb = b;
        ASSERT_TRUE(ossl->open(opened_by_ossl.data(), plaintext.size(), high));
        ASSERT_TRUE(mb->open(opened_by_mb.data(), plaintext.size(), high));
        const auto payload = [&](const Bytes& p) {
          return Bytes(p.begin() + kCbcCiphertextOffset,
                       p.begin() + static_cast<long>(kCbcCiphertextOffset + plaintext.size()));
        };
        EXPECT_EQ(payload(opened_by_ossl), plaintext);
        EXPECT_EQ(payload(opened_by_mb), plaintext);
      }
}

// Any changed bit of header, IV, ciphertext or ICV (or the wrong ESN high half) fails the
// check, and then the ciphertext is left as it came: nothing is decrypted.
TEST(CbcHmacCrossCheck, AForgedPacketIsNeverDecrypted) {
  std::mt19937_64 rng(2404);
  for (const char* backend : kBackends)
    for (const Transform& t : all_transforms()) {
      SCOPED_TRACE(std::string(backend) + " " + std::string(algorithm_name(t.cipher)) + " " +
                   std::string(integrity_name(t.integrity)));
      auto key = find_backend(backend)->make_cbc_hmac_key(
          t.cipher, t.integrity, test::random_bytes(rng, cipher_key_length(t.cipher)),
          test::random_bytes(rng, integrity_key_length(t.integrity)));
      const Bytes plaintext = test::random_bytes(rng, 48);
      const Bytes esn_high = {0, 0, 0, 1};
      Bytes sealed = esp_packet(test::random_bytes(rng, 16), plaintext, key->icv_length());
      key->seal(sealed.data(), plaintext.size(), esn_high.data());
      for (size_t i = 0; i < sealed.size(); i += 3) {
        Bytes forged = sealed;
        forged[i] ^= static_cast<uint8_t>(1 + rng() % 255);
        const Bytes ciphertext(forged.begin() + kCbcCiphertextOffset,
                               forged.begin() + kCbcCiphertextOffset + 48);
        ASSERT_FALSE(key->open(forged.data(), plaintext.size(), esn_high.data())) << i;
        EXPECT_EQ(Bytes(forged.begin() + kCbcCiphertextOffset,
                        forged.begin() + kCbcCiphertextOffset + 48),
                  ciphertext);
      }
      const Bytes other_high = {0, 0, 0, 2};
      Bytes copy = sealed;
      EXPECT_FALSE(key->open(copy.data(), plaintext.size(), other_high.data()));
      copy = sealed;
      EXPECT_FALSE(key->open(copy.data(), plaintext.size(), nullptr));
      copy = sealed;
      EXPECT_TRUE(key->open(copy.data(), plaintext.size(), esn_high.data()));
    }
}

// IVs from one SA never repeat and do not follow the sequence number; two SAs with the
// same keys get different IVs for the same number (each has its own random IV key).
TEST(CbcHmacCrossCheck, IvsAreDistinctAndNotACounter) {
  for (const char* backend : kBackends) {
    SCOPED_TRACE(backend);
    const Bytes k(32, 7), i(32, 9);
    auto a = find_backend(backend)->make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_256,
                                                      IntegrityAlgorithm::hmac_sha256_128, k, i);
    auto b = find_backend(backend)->make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_256,
                                                      IntegrityAlgorithm::hmac_sha256_128, k, i);
    std::vector<Bytes> seen;
    for (uint64_t sequence = 1; sequence <= 256; ++sequence) {
      Bytes iv(16), again(16), other(16);
      a->make_iv(sequence, iv.data());
      a->make_iv(sequence, again.data());
      b->make_iv(sequence, other.data());
      EXPECT_EQ(iv, again) << "a function of the sequence number";
      EXPECT_NE(iv, other) << "keyed per SA";
      for (const Bytes& earlier : seen) ASSERT_NE(iv, earlier);
      seen.push_back(iv);
    }
  }
}

TEST(CbcHmacCrossCheck, RefusesWrongLengthsAndPairings) {
  for (const char* backend : kBackends) {
    const CryptoBackend& b = *find_backend(backend);
    EXPECT_THROW(b.make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_128,
                                     IntegrityAlgorithm::hmac_sha1_96, Bytes(24, 0), Bytes(20, 0)),
                 std::invalid_argument);
    EXPECT_THROW(
        b.make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_256, IntegrityAlgorithm::hmac_sha256_128,
                            Bytes(32, 0), Bytes(20, 0)),
        std::invalid_argument);
    EXPECT_THROW(b.make_cbc_hmac_key(EncryptionAlgorithm::aes_gcm_128,
                                     IntegrityAlgorithm::hmac_sha1_96, Bytes(16, 0), Bytes(20, 0)),
                 std::invalid_argument);
    EXPECT_THROW(b.make_cbc_hmac_key(EncryptionAlgorithm::aes_cbc_128, IntegrityAlgorithm::none,
                                     Bytes(16, 0), Bytes()),
                 std::invalid_argument);
    EXPECT_THROW(b.make_key(EncryptionAlgorithm::aes_cbc_128, Bytes(16, 0)), std::invalid_argument);
  }
  EXPECT_EQ(parse_algorithm("aes-cbc-192"), EncryptionAlgorithm::aes_cbc_192);
  EXPECT_EQ(parse_integrity("sha256"), IntegrityAlgorithm::hmac_sha256_128);
  EXPECT_EQ(parse_integrity("hmac-sha2-512-256"), IntegrityAlgorithm::hmac_sha512_256);
  EXPECT_FALSE(parse_integrity("none").has_value());
  EXPECT_EQ(
      key_material_length(EncryptionAlgorithm::aes_cbc_256, IntegrityAlgorithm::hmac_sha384_192),
      32u + 48u);
}

}  // namespace
}  // namespace espgw::crypto

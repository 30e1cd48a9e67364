// AES-CBC + HMAC seals queued in a CbcHmacSealBurst: byte for byte what one seal at a
// time writes, on both backends, across more packets than a burst holds, with ICV checks
// and opens of other packets run on the same thread while seals wait in ipsec-mb's lanes,
// and with a burst abandoned before its flush (an exception unwinding past it).
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crypto/aead.h"
#include "unit/test_packets.h"

namespace espgw::crypto {
namespace {

using Bytes = std::vector<uint8_t>;

const char* const kBackends[] = {"ipsec-mb", "openssl"};

struct Sealed {
  std::shared_ptr<const CbcHmacKey> key;
  Bytes packet;  // SPI, sequence number, IV, plaintext, room for the ICV
  size_t length;
  Bytes esn_high;  // empty without ESN
  const uint8_t* high() const { return esn_high.empty() ? nullptr : esn_high.data(); }
};

// Keys of every pairing the tests mix in one burst: a burst may hold packets of many SAs.
std::vector<std::shared_ptr<const CbcHmacKey>> mixed_keys(const CryptoBackend& backend,
                                                          std::mt19937_64& rng) {
  std::vector<std::shared_ptr<const CbcHmacKey>> keys;
  for (auto cipher : {EncryptionAlgorithm::aes_cbc_128, EncryptionAlgorithm::aes_cbc_256})
    for (auto integrity : {IntegrityAlgorithm::hmac_sha1_96, IntegrityAlgorithm::hmac_sha256_128,
                           IntegrityAlgorithm::hmac_sha512_256})
      keys.push_back(backend.make_cbc_hmac_key(
          cipher, integrity, test::random_bytes(rng, cipher_key_length(cipher)),
          test::random_bytes(rng, integrity_key_length(integrity))));
  return keys;
}

std::vector<Sealed> random_packets(const std::vector<std::shared_ptr<const CbcHmacKey>>& keys,
                                   size_t count, std::mt19937_64& rng) {
  std::vector<Sealed> out;
  for (size_t i = 0; i < count; ++i) {
    Sealed s;
    s.key = keys[rng() % keys.size()];
    s.length = 16 * (1 + rng() % 94);
    s.packet = test::random_bytes(rng, 8 + 16 + s.length + s.key->icv_length());
    if (rng() % 2) s.esn_high = test::random_bytes(rng, kEsnHighLength);
    out.push_back(std::move(s));
  }
  return out;
}

// What seal() writes, one packet at a time: the expected bytes.
std::vector<Bytes> sealed_one_by_one(std::vector<Sealed> packets) {
  std::vector<Bytes> out;
  for (Sealed& s : packets) {
    s.key->seal(s.packet.data(), s.length, s.high());
    out.push_back(s.packet);
  }
  return out;
}

TEST(CbcHmacSealBurst, WritesWhatSealingOneByOneWrites) {
  std::mt19937_64 rng(4303);
  for (const char* name : kBackends) {
    SCOPED_TRACE(name);
    const auto keys = mixed_keys(*find_backend(name), rng);
    // More than a burst holds: the burst flushes itself when full.
    std::vector<Sealed> packets = random_packets(keys, 3 * CbcHmacSealBurst::kCapacity + 5, rng);
    const std::vector<Bytes> expected = sealed_one_by_one(packets);
    CbcHmacSealBurst burst;
    for (Sealed& s : packets) s.key->seal_in_burst(burst, s.packet.data(), s.length, s.high());
    burst.flush();
    EXPECT_TRUE(burst.empty());
    for (size_t i = 0; i < packets.size(); ++i) {
      ASSERT_EQ(packets[i].packet, expected[i]) << i;
      Bytes opened = packets[i].packet;
      EXPECT_TRUE(packets[i].key->open(opened.data(), packets[i].length, packets[i].high()));
    }
  }
}

// A worker's batch mixes outbound seals (queued) with inbound opens (each needs its own
// result at once). An open's job comes back from the manager after the queued seals ahead
// of it; those must be completed then, into their own packets, and the open must still
// get its own verdict, forged or genuine.
TEST(CbcHmacSealBurst, OpensBetweenQueuedSealsGetTheirOwnVerdicts) {
  std::mt19937_64 rng(3602);
  for (const char* name : kBackends) {
    SCOPED_TRACE(name);
    const auto keys = mixed_keys(*find_backend(name), rng);
    std::vector<Sealed> outbound = random_packets(keys, 40, rng);
    const std::vector<Bytes> expected = sealed_one_by_one(outbound);
    std::vector<Sealed> inbound = random_packets(keys, 40, rng);
    std::vector<Bytes> plaintexts;
    for (Sealed& s : inbound) {
      plaintexts.emplace_back(s.packet.begin() + kCbcCiphertextOffset,
                              s.packet.begin() + kCbcCiphertextOffset + s.length);
      s.key->seal(s.packet.data(), s.length, s.high());
    }
    CbcHmacSealBurst burst;
    for (size_t i = 0; i < outbound.size(); ++i) {
      Sealed& out = outbound[i];
      out.key->seal_in_burst(burst, out.packet.data(), out.length, out.high());
      Sealed& in = inbound[i];
      const bool forged = i % 3 == 0;
      if (forged) in.packet[8 + rng() % 16] ^= 0x20;  // the IV: covered by the ICV
      ASSERT_EQ(in.key->open(in.packet.data(), in.length, in.high()), !forged) << i;
      if (!forged) {
        EXPECT_EQ(Bytes(in.packet.begin() + kCbcCiphertextOffset,
                        in.packet.begin() + kCbcCiphertextOffset + in.length),
                  plaintexts[i]);
      }
    }
    burst.flush();
    for (size_t i = 0; i < outbound.size(); ++i) EXPECT_EQ(outbound[i].packet, expected[i]) << i;
  }
}

// A burst that goes out of scope unflushed (an exception between its seals and its flush)
// completes its jobs before its slots go: the manager is left empty, and the thread's next
// seal and open work (AddressSanitizer would see a write into the dead burst).
TEST(CbcHmacSealBurst, AnAbandonedBurstLeavesTheThreadsManagerClean) {
  std::mt19937_64 rng(2104);
  for (const char* name : kBackends) {
    SCOPED_TRACE(name);
    const auto keys = mixed_keys(*find_backend(name), rng);
    std::vector<Sealed> abandoned = random_packets(keys, 20, rng);
    const std::vector<Bytes> expected_abandoned = sealed_one_by_one(abandoned);
    {
      CbcHmacSealBurst burst;
      for (Sealed& s : abandoned) s.key->seal_in_burst(burst, s.packet.data(), s.length, s.high());
    }
    for (size_t i = 0; i < abandoned.size(); ++i)
      EXPECT_EQ(abandoned[i].packet, expected_abandoned[i]);
    std::vector<Sealed> next = random_packets(keys, 10, rng);
    const std::vector<Bytes> expected = sealed_one_by_one(next);
    for (size_t i = 0; i < next.size(); ++i) {
      next[i].key->seal(next[i].packet.data(), next[i].length, next[i].high());
      ASSERT_EQ(next[i].packet, expected[i]);
      EXPECT_TRUE(next[i].key->open(next[i].packet.data(), next[i].length, next[i].high()));
    }
  }
}

// Keys are shared by every worker; each worker has its own burst and its own manager.
TEST(CbcHmacSealBurstConcurrent, WorkersWithBurstsOfTheirOwnShareTheKeys) {
  std::mt19937_64 rng(1851);
  const auto keys = mixed_keys(ipsec_mb_backend(), rng);
  constexpr int kThreads = 4;
  std::vector<std::vector<Sealed>> work;
  std::vector<std::vector<Bytes>> expected;
  for (int t = 0; t < kThreads; ++t) {
    work.push_back(random_packets(keys, 200, rng));
    expected.push_back(sealed_one_by_one(work.back()));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&work, t] {
      CbcHmacSealBurst burst;
      for (size_t i = 0; i < work[t].size(); ++i) {
        Sealed& s = work[t][i];
        s.key->seal_in_burst(burst, s.packet.data(), s.length, s.high());
        if (i % 32 == 31) burst.flush();
      }
      burst.flush();
    });
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t)
    for (size_t i = 0; i < work[t].size(); ++i) EXPECT_EQ(work[t][i].packet, expected[t][i]);
}

}  // namespace
}  // namespace espgw::crypto

// A crypto backend for the benchmarks that times every seal and open of the backend it
// wraps, so that a pipeline case can say how much of its time per packet was the cipher
// and how much everything else (bench/pipeline_bench.cpp, --pipeline_time_crypto).
//
// Why: on this project's shared 2-vCPU hosts the raw ipsec-mb baseline alone reads
// 744-1247 ns per packet from one run to the next, so a change of a few percent in the
// pipeline's ratio to raw is lost in the noise. The cipher time and the rest, taken in the
// same interval by the same thread, move together with the host's speed; what the engine
// adds around the cipher, and whether the cipher itself runs slower inside the pipeline
// (cold data or keys), can then be read apart.
//
// The cost: two time stamp reads and one more virtual call per seal or open, about 1-2%
// of a 1400-byte AES-GCM call, which is why it is off unless asked for.
#pragma once

#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "crypto/aead.h"

namespace espgw::bench {

// Cycles spent in the cipher, per thread: each thread adds to an account of its own (no
// line shared between threads that encrypt at once), and the accounts are summed when
// read. Accounts outlive their threads (they are few: one per thread that ever
// encrypted), so a sum taken after a pipeline's workers stopped still has their time.
class CryptoClock {
 public:
  static CryptoClock& instance() {
    static CryptoClock clock;
    return clock;
  }

  void add(uint64_t cycles) {
    thread_local Account* account = open_account();
    account->cycles.store(account->cycles.load(std::memory_order_relaxed) + cycles,
                          std::memory_order_relaxed);
    account->calls.store(account->calls.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
  }

  struct Totals {
    uint64_t cycles = 0;
    uint64_t calls = 0;
  };
  Totals totals() const {
    std::lock_guard guard(lock_);
    Totals sum;
    for (const auto& account : accounts_) {
      sum.cycles += account->cycles.load(std::memory_order_relaxed);
      sum.calls += account->calls.load(std::memory_order_relaxed);
    }
    return sum;
  }

  // Time stamp counter ticks per nanosecond, measured once against the steady clock.
  double ticks_per_ns() const { return ticks_per_ns_; }

  static uint64_t now() {
    _mm_lfence();  // not before the work above has finished
    return __rdtsc();
  }

 private:
  struct alignas(64) Account {
    std::atomic<uint64_t> cycles{0};
    std::atomic<uint64_t> calls{0};
  };

  CryptoClock() {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t ticks = now();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t elapsed_ticks = now() - ticks;
    const auto elapsed = std::chrono::steady_clock::now() - start;
    ticks_per_ns_ =
        static_cast<double>(elapsed_ticks) /
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  }

  Account* open_account() {
    std::lock_guard guard(lock_);
    accounts_.push_back(std::make_unique<Account>());
    return accounts_.back().get();
  }

  mutable std::mutex lock_;
  std::vector<std::unique_ptr<Account>> accounts_;
  double ticks_per_ns_ = 1;
};

class TimedKey final : public crypto::AeadKey {
 public:
  explicit TimedKey(std::unique_ptr<crypto::AeadKey> inner) : inner_(std::move(inner)) {}

  void seal(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, uint8_t* tag) const override {
    const uint64_t start = CryptoClock::now();
    inner_->seal(nonce, aad, aad_length, in, out, length, tag);
    CryptoClock::instance().add(CryptoClock::now() - start);
  }

  bool open(const uint8_t* nonce, const uint8_t* aad, size_t aad_length, const uint8_t* in,
            uint8_t* out, size_t length, const uint8_t* tag) const override {
    const uint64_t start = CryptoClock::now();
    const bool valid = inner_->open(nonce, aad, aad_length, in, out, length, tag);
    CryptoClock::instance().add(CryptoClock::now() - start);
    return valid;
  }

 private:
  std::unique_ptr<crypto::AeadKey> inner_;
};

class TimedBackend final : public crypto::CryptoBackend {
 public:
  explicit TimedBackend(const crypto::CryptoBackend& inner) : inner_(inner) {
    CryptoClock::instance();  // calibrated now, not inside a timed run
  }
  std::string_view name() const override { return inner_.name(); }
  std::unique_ptr<crypto::AeadKey> make_key(crypto::AeadAlgorithm algorithm,
                                            std::span<const uint8_t> cipher_key) const override {
    return std::make_unique<TimedKey>(inner_.make_key(algorithm, cipher_key));
  }
  // Untimed: the timed pipeline benchmarks run AEAD SAs only.
  std::unique_ptr<crypto::CbcHmacKey> make_cbc_hmac_key(
      crypto::EncryptionAlgorithm cipher, crypto::IntegrityAlgorithm integrity,
      std::span<const uint8_t> encryption_key,
      std::span<const uint8_t> integrity_key) const override {
    return inner_.make_cbc_hmac_key(cipher, integrity, encryption_key, integrity_key);
  }

 private:
  const crypto::CryptoBackend& inner_;
};

}  // namespace espgw::bench

// ESP engine micro benchmark: espgw's encapsulation and decapsulation against raw ipsec-mb
// calls on the same payload, side by side in one binary: a comparison is measured side by side in
// one run, and the ratio is what counts.
//
// For each algorithm (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305, and AES-128-CBC with
// HMAC-SHA1-96 and AES-256-CBC with HMAC-SHA2-256-128; ipsec-mb backend),
// inner packet size (64, 1400, 8192 bytes) and direction:
//   raw/<alg>/encrypt/<size>    the direct ipsec-mb AEAD calls, in place, on a buffer the
//                               size of the ESP payload espgw encrypts (inner + padding +
//                               2-byte trailer), 8-byte AAD, 12-byte nonce, 16-byte tag.
//   espgw/<alg>/encap/<size>    test::encapsulate(sa, buffer, OuterHeaders::omit).
//   raw/<alg>/decrypt/<size>    the direct calls plus a 16-byte memcmp of the tag.
//   espgw/<alg>/decap/<size>    test::decapsulate(table, engine_counters, buffer).
//   raw/<alg>/roundtrip/<size>  encrypt then decrypt and compare the tag, in place.
//   For AES-CBC + HMAC the raw side is bench/raw_cbc_hmac.h: ipsec-mb's job API, one
//   chained job to seal, an HMAC job, the compare and a CBC job to open (decrypting out of
//   place: CBC decryption in place could not be repeated on the same buffer).
//   espgw/<alg>/roundtrip/<size> encapsulate then decapsulate the same buffer, in place.
// Every benchmark reports real time, bytes_per_second over the inner packet bytes, and
// ns_per_packet. After the run a table of espgw/raw ratios per (algorithm, size,
// direction) is printed (from the median aggregate when --benchmark_repetitions > 1), and
// written to --esp_ratios_out=FILE when given.
//
// Extra flags (besides Google Benchmark's):
//   --esp_ratios_out=FILE   also write the ratio table to FILE
//   --esp_decap_ring=N      packets in the decapsulation ring (default 1024)
#include <benchmark/benchmark.h>
#include <intel-ipsec-mb.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "collecting_reporter.h"
#include "crypto/aead.h"
#include "esp/counters.h"
#include "esp/decap.h"
#include "esp/drop_reason.h"
#include "esp/encap.h"
#include "esp/esp_format.h"
#include "esp/ip_address.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "esp_bench_common.h"
#include "packet/ip_format.h"
#include "raw_cbc_hmac.h"
#include "raw_ipsec_mb.h"
#include "support/sequential_esp.h"
#include "util/byte_order.h"

namespace espgw::esp_bench {
namespace {

namespace packet = espgw::packet;
namespace test = espgw::test;

constexpr size_t kAadLength = 8;  // SPI || 32-bit sequence number (no ESN)
constexpr size_t kTagLength = 16;
// Packets in the decapsulation benchmark's ring; see espgw_decap. --esp_decap_ring=N.
constexpr size_t kDefaultDecapRing = 1024;
size_t g_decap_ring = kDefaultDecapRing;

// ---------------------------------------------------------------------------------------
// Raw ipsec-mb: the ceiling.

using espgw::bench::arch_name;
using espgw::bench::g_arch;
using espgw::bench::raw_manager;

// gcm_key_data must be 16-byte aligned; the header only guarantees it with -DLINUX.
struct alignas(64) RawKey {
  gcm_key_data gcm;
  alignas(16) uint8_t chacha[32];
};

// Everything the raw benchmarks need: expanded key, nonce, AAD and a payload buffer placed
// exactly like espgw's (an esp::PacketBuffer of the same capacity, with the payload at the
// default headroom, so the alignment is the same). Nonce and AAD are fixed: the baseline
// is the crypto alone. (espgw must build both per packet; how it writes them matters, see
// docs/performance.md.)
template <AeadAlgorithm A>
class RawFixture {
 public:
  explicit RawFixture(size_t inner)
      : manager_(raw_manager()),
        key_(std::make_unique<RawKey>()),
        buffer_(kCapacity),
        length_(esp_payload_length(inner)) {
    const std::vector<uint8_t> material = key_material({A});
    const size_t key_length = crypto::cipher_key_length(A);
    if constexpr (A == AeadAlgorithm::aes_gcm_128) {
      IMB_AES128_GCM_PRE(manager_, material.data(), &key_->gcm);
    } else if constexpr (A == AeadAlgorithm::aes_gcm_256) {
      IMB_AES256_GCM_PRE(manager_, material.data(), &key_->gcm);
    } else {
      std::memcpy(key_->chacha, material.data(), sizeof key_->chacha);
    }
    std::memcpy(nonce_, material.data() + key_length, crypto::kSaltLength);
    espgw::store_be64(nonce_ + crypto::kSaltLength, 1);
    espgw::store_be32(aad_, kSpi);
    espgw::store_be32(aad_ + 4, 1);
    buffer_.assign(make_inner_packet(inner), kHeadroom);
    std::memset(payload() + inner, 0, length_ - inner + kTagLength);
  }

  uint8_t* payload() { return buffer_.data(); }
  uint8_t* tag() { return payload() + length_; }
  size_t length() const { return length_; }

  void seal(uint8_t* data, uint8_t* tag_out) {
    if constexpr (A == AeadAlgorithm::aes_gcm_128) {
      gcm_context_data context;
      IMB_AES128_GCM_ENC(manager_, &key_->gcm, &context, data, data, length_, nonce_, aad_,
                         kAadLength, tag_out, kTagLength);
    } else if constexpr (A == AeadAlgorithm::aes_gcm_256) {
      gcm_context_data context;
      IMB_AES256_GCM_ENC(manager_, &key_->gcm, &context, data, data, length_, nonce_, aad_,
                         kAadLength, tag_out, kTagLength);
    } else {
      chacha20_poly1305_context_data context;
      IMB_CHACHA20_POLY1305_INIT(manager_, key_->chacha, &context, nonce_, aad_, kAadLength);
      IMB_CHACHA20_POLY1305_ENC_UPDATE(manager_, key_->chacha, &context, data, data, length_);
      IMB_CHACHA20_POLY1305_ENC_FINALIZE(manager_, &context, tag_out, kTagLength);
    }
  }

  // Decrypts in place and writes the computed tag (ipsec-mb never compares it).
  void open(uint8_t* data, uint8_t* computed) {
    if constexpr (A == AeadAlgorithm::aes_gcm_128) {
      gcm_context_data context;
      IMB_AES128_GCM_DEC(manager_, &key_->gcm, &context, data, data, length_, nonce_, aad_,
                         kAadLength, computed, kTagLength);
    } else if constexpr (A == AeadAlgorithm::aes_gcm_256) {
      gcm_context_data context;
      IMB_AES256_GCM_DEC(manager_, &key_->gcm, &context, data, data, length_, nonce_, aad_,
                         kAadLength, computed, kTagLength);
    } else {
      chacha20_poly1305_context_data context;
      IMB_CHACHA20_POLY1305_INIT(manager_, key_->chacha, &context, nonce_, aad_, kAadLength);
      IMB_CHACHA20_POLY1305_DEC_UPDATE(manager_, key_->chacha, &context, data, data, length_);
      IMB_CHACHA20_POLY1305_DEC_FINALIZE(manager_, &context, computed, kTagLength);
    }
  }

 private:
  IMB_MGR* manager_;
  std::unique_ptr<RawKey> key_;
  esp::PacketBuffer buffer_;
  size_t length_;
  // 16-byte aligned: ipsec-mb reads them with (masked) 16-byte loads, which are slower
  // when they straddle a cache line (measured here: +10 ns per 64-byte packet).
  alignas(16) uint8_t nonce_[16];
  alignas(16) uint8_t aad_[16];
};

template <AeadAlgorithm A>
void raw_encrypt(benchmark::State& state, size_t inner) {
  RawFixture<A> f(inner);
  for (auto _ : state) {
    f.seal(f.payload(), f.tag());
    benchmark::ClobberMemory();
  }
  finish(state, inner);
}

template <AeadAlgorithm A>
void raw_decrypt(benchmark::State& state, size_t inner) {
  RawFixture<A> f(inner);
  // Decrypting in place with a fixed nonce turns the buffer from ciphertext C into
  // plaintext P, and the next iteration turns P back into C (both ciphers are stream
  // ciphers). The tag is computed over the input, so it alternates between C's real tag
  // and the tag P would have as a ciphertext. Precompute both, so that every iteration
  // does the full 16-byte compare of a matching tag, as the success path of real code.
  uint8_t expected[2][kTagLength];
  std::vector<uint8_t> plain(f.payload(), f.payload() + f.length());
  f.open(plain.data(), expected[1]);  // tag of P taken as ciphertext (plain is now garbage)
  f.seal(f.payload(), expected[0]);   // payload is now C, expected[0] its tag
  uint8_t computed[kTagLength];
  size_t parity = 0;
  for (auto _ : state) {
    f.open(f.payload(), computed);
    if (std::memcmp(computed, expected[parity], kTagLength) != 0) {
      state.SkipWithError("raw decrypt: tag mismatch");
      break;
    }
    parity ^= 1;
  }
  finish(state, inner);
}

template <AeadAlgorithm A>
void raw_roundtrip(benchmark::State& state, size_t inner) {
  RawFixture<A> f(inner);
  uint8_t computed[kTagLength];
  for (auto _ : state) {
    f.seal(f.payload(), f.tag());
    f.open(f.payload(), computed);
    if (std::memcmp(computed, f.tag(), kTagLength) != 0) {
      state.SkipWithError("raw roundtrip: tag mismatch");
      break;
    }
  }
  finish(state, inner);
}
}  // namespace

// ---------------------------------------------------------------------------------------
// espgw.

esp::EspLayout layout_of(Transform t) {
  return esp::esp_layout(t.algorithm, t.integrity);
}
size_t esp_prefix(Transform t) {
  return esp::kEspHeaderLength + layout_of(t).iv_length;
}

bool check_encapsulated(benchmark::State& state, const esp::PacketBuffer& buffer, size_t inner,
                        Transform t) {
  const esp::EspLayout layout = layout_of(t);
  if (buffer.size() !=
      esp_prefix(t) + esp_payload_length(inner, layout.alignment) + layout.icv_length) {
    state.SkipWithError("encapsulated size differs from the raw baseline's payload");
    return false;
  }
  return true;
}

void espgw_encap(benchmark::State& state, Transform algorithm, size_t inner) {
  const size_t kEspPrefix = esp_prefix(algorithm);
  esp::OutboundSa sa(make_config(algorithm), crypto::ipsec_mb_backend());
  const std::vector<uint8_t> packet = make_inner_packet(inner);
  esp::PacketBuffer buffer(kCapacity);
  buffer.assign(packet);
  if (test::encapsulate(sa, buffer, esp::OuterHeaders::omit) != esp::DropReason::none) {
    state.SkipWithError("encapsulate failed");
    return;
  }
  if (!check_encapsulated(state, buffer, inner, algorithm)) return;
  buffer.narrow(kEspPrefix, inner);
  std::memcpy(buffer.data(), packet.data(), packet::kIpv4HeaderLength);

  for (auto _ : state) {
    if (test::encapsulate(sa, buffer, esp::OuterHeaders::omit) != esp::DropReason::none) {
      state.SkipWithError("encapsulate failed");
      break;
    }
    // Restore the view to the inner packet for the next iteration: the head goes back to
    // where the inner packet started (narrow past the ESP header and IV, cut padding,
    // trailer and ICV), and only the 20-byte inner IPv4 header is copied back, because
    // encapsulation checks it (version, total length) and encrypted it in place; the
    // rest of the "inner packet" may stay ciphertext, the cipher does not care. This is
    // timed on purpose: it is two integer stores and a 20-byte memcpy (~1-2 ns), far
    // cheaper than PauseTiming/ResumeTiming, which read the clocks (a CPU-time clock read
    // is a system call, hundreds of ns). It is at most ~1% of the 64-byte figure.
    buffer.narrow(kEspPrefix, inner);
    std::memcpy(buffer.data(), packet.data(), packet::kIpv4HeaderLength);
  }
  finish(state, inner);
}

void espgw_decap(benchmark::State& state, Transform algorithm, size_t inner) {
  const esp::SaConfig config = make_config(algorithm);
  esp::OutboundSa outbound(config, crypto::ipsec_mb_backend());
  test::InboundSaTable table;
  table.add(std::make_shared<esp::InboundSa>(config, crypto::ipsec_mb_backend()));
  esp::EngineCounters engine;
  const std::vector<uint8_t> packet = make_inner_packet(inner);

  // The replay window accepts every sequence number once, so each iteration needs a fresh
  // packet: a ring of packets encapsulated with increasing sequence numbers, decapsulated
  // one per iteration. Decapsulation leaves each buffer holding its inner packet again, so
  // when the ring is used up it is encapsulated again, with new numbers, while the timer
  // is paused.
  // - Part of PauseTiming/ResumeTiming leaks into the timed region (the CPU-time clock
  //   read in ResumeTiming is a system call): measured here at ~0.7 us per pause, which
  //   is why the ring is long: 1024 packets make it < 1 ns per packet (a 16-packet ring
  //   added ~45 ns per packet).
  // - The raw benchmark works on one hot buffer while this one reads 1024 different
  //   packets (1.4 MiB at 1400 B, 8 MiB at 8192 B; L2 is 1 MiB per core). Measured: rings
  //   of 64 to 1024 packets differ by at most ~3 ns per packet (within noise at 8192 B),
  //   as the reads are sequential and the prefetchers keep up.
  std::vector<esp::PacketBuffer> ring;
  ring.reserve(g_decap_ring);
  for (size_t i = 0; i < g_decap_ring; ++i) {
    ring.emplace_back(kCapacity);
    ring.back().assign(packet);
  }
  auto refill = [&] {
    for (esp::PacketBuffer& buffer : ring)
      if (test::encapsulate(outbound, buffer, esp::OuterHeaders::omit) != esp::DropReason::none)
        return false;
    return true;
  };
  if (!refill()) {
    state.SkipWithError("encapsulate failed");
    return;
  }
  if (!check_encapsulated(state, ring.front(), inner, algorithm)) return;

  size_t next = 0;
  for (auto _ : state) {
    if (next == ring.size()) {
      state.PauseTiming();
      const bool ok = refill();
      next = 0;
      state.ResumeTiming();
      if (!ok) {
        state.SkipWithError("encapsulate failed");
        break;
      }
    }
    esp::PacketBuffer& buffer = ring[next++];
    if (test::decapsulate(table, engine, buffer) != esp::DropReason::none ||
        buffer.size() != inner) {
      state.SkipWithError("decapsulate failed");
      break;
    }
  }
  finish(state, inner);
  if (ring.size() != kDefaultDecapRing) state.SetLabel("ring=" + std::to_string(ring.size()));
}

void espgw_roundtrip(benchmark::State& state, Transform algorithm, size_t inner) {
  const esp::SaConfig config = make_config(algorithm);
  esp::OutboundSa outbound(config, crypto::ipsec_mb_backend());
  test::InboundSaTable table;
  table.add(std::make_shared<esp::InboundSa>(config, crypto::ipsec_mb_backend()));
  esp::EngineCounters engine;
  const std::vector<uint8_t> packet = make_inner_packet(inner);
  esp::PacketBuffer buffer(kCapacity);
  buffer.assign(packet);
  if (test::encapsulate(outbound, buffer, esp::OuterHeaders::omit) != esp::DropReason::none) {
    state.SkipWithError("encapsulate failed");
    return;
  }
  if (!check_encapsulated(state, buffer, inner, algorithm)) return;
  if (test::decapsulate(table, engine, buffer) != esp::DropReason::none || buffer.size() != inner ||
      std::memcmp(buffer.data(), packet.data(), inner) != 0) {
    state.SkipWithError("round trip does not restore the inner packet");
    return;
  }
  // Decapsulation narrows the view back to the (decrypted) inner packet, so no restore.
  for (auto _ : state) {
    if (test::encapsulate(outbound, buffer, esp::OuterHeaders::omit) != esp::DropReason::none ||
        test::decapsulate(table, engine, buffer) != esp::DropReason::none) {
      state.SkipWithError("round trip failed");
      break;
    }
  }
  finish(state, inner);
}

// ---------------------------------------------------------------------------------------
// Registration and the ratio table.

std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

namespace {

template <AeadAlgorithm A>
void register_algorithm(const char* name) {
  using RawFn = void (*)(benchmark::State&, size_t);
  using EspFn = void (*)(benchmark::State&, Transform, size_t);
  const RawFn raw[] = {&raw_encrypt<A>, &raw_decrypt<A>, &raw_roundtrip<A>};
  const EspFn espgw[] = {&espgw_encap, &espgw_decap, &espgw_roundtrip};
  for (size_t d = 0; d < 3; ++d) {
    for (const size_t size : kSizes) {
      Case c{name, size, kDirections[d][0],
             std::string("raw/") + name + "/" + kDirections[d][1] + "/" + std::to_string(size),
             std::string("espgw/") + name + "/" + kDirections[d][0] + "/" + std::to_string(size)};
      // Each raw benchmark runs right before its espgw counterpart, so the pair sees the
      // same machine state as far as possible.
      benchmark::RegisterBenchmark(c.raw_name.c_str(), raw[d], size)->UseRealTime();
      benchmark::RegisterBenchmark(c.espgw_name.c_str(), espgw[d], Transform{A}, size)
          ->UseRealTime();
      cases().push_back(std::move(c));
    }
  }
}

// The ratio table: for each (algorithm, size, direction), espgw's and raw ipsec-mb's
// real time per packet from the same run.
void print_ratios(const espgw::bench::CollectingReporter& reporter, std::ostream& out) {
  const int64_t repetitions = reporter.repetitions();
  out << "# espgw vs raw ipsec-mb, real time per packet ("
      << (repetitions > 0 ? "median of " + std::to_string(repetitions) + " repetitions"
                          : std::string("single run"))
      << "); ratio = raw_ns / espgw_ns = espgw throughput / raw throughput\n";
  out << std::left << std::setw(20) << "algorithm" << std::right << std::setw(6) << "size"
      << "  " << std::left << std::setw(14) << "direction" << std::right << std::setw(10)
      << "espgw_ns" << std::setw(10) << "raw_ns" << std::setw(18) << "ratio(raw/espgw)"
      << std::setw(13) << "overhead_ns"
      << "\n";
  for (const Case& c : cases()) {
    std::optional<double> espgw = reporter.value(c.espgw_name, "real_ns");
    std::optional<double> raw = reporter.value(c.raw_name, "real_ns");
    if (!espgw || !raw) continue;
    *espgw /= static_cast<double>(c.packets);
    *raw /= static_cast<double>(c.packets);
    out << std::left << std::setw(20) << c.algorithm << std::right << std::setw(6) << c.size << "  "
        << std::left << std::setw(14) << c.direction << std::right << std::fixed
        << std::setprecision(1) << std::setw(10) << *espgw << std::setw(10) << *raw
        << std::setprecision(3) << std::setw(18) << *raw / *espgw << std::setprecision(1)
        << std::setw(13) << *espgw - *raw << "\n";
    out.unsetf(std::ios::fixed);
  }
}

// Takes our own --esp_* flags out of argv; returns false on a malformed one.
bool parse_own_flags(int& argc, char** argv, std::string& ratios_out) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--esp_ratios_out=")) {
      ratios_out = std::string(arg.substr(arg.find('=') + 1));
    } else if (arg.starts_with("--esp_decap_ring=")) {
      const long n = std::strtol(argv[i] + arg.find('=') + 1, nullptr, 10);
      if (n <= 0) {
        std::cerr << "--esp_decap_ring must be a positive number\n";
        return false;
      }
      g_decap_ring = static_cast<size_t>(n);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return true;
}

}  // namespace

int run(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string ratios_out;
  if (!parse_own_flags(argc, argv, ratios_out)) return 2;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;

  raw_manager();
  benchmark::AddCustomContext("ipsec_mb_version", imb_get_version_str());
  benchmark::AddCustomContext("ipsec_mb_arch", arch_name(g_arch));
  benchmark::AddCustomContext("espgw_backend", std::string(crypto::ipsec_mb_backend().name()));
  benchmark::AddCustomContext("decap_ring", std::to_string(g_decap_ring) + " packets");

  register_algorithm<AeadAlgorithm::aes_gcm_128>("AES-128-GCM");
  register_algorithm<AeadAlgorithm::aes_gcm_256>("AES-256-GCM");
  register_algorithm<AeadAlgorithm::chacha20_poly1305>("ChaCha20-Poly1305");
  register_cbc_benchmarks();

  espgw::bench::CollectingReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::cout << "\n";
  print_ratios(reporter, std::cout);
  if (!ratios_out.empty()) {
    std::ofstream file(ratios_out);
    print_ratios(reporter, file);
    if (!file) {
      std::cerr << "cannot write " << ratios_out << "\n";
      return 1;
    }
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace espgw::esp_bench

int main(int argc, char** argv) {
  return espgw::esp_bench::run(argc, argv);
}

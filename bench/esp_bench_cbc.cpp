// The ESP engine micro benchmark's AES-CBC + HMAC pairs: espgw against ipsec-mb's job API
// as bench/raw_cbc_hmac.h drives it, one packet at a time and in bursts.
#include <benchmark/benchmark.h>
#include <intel-ipsec-mb.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "esp/encap.h"
#include "esp_bench_common.h"
#include "packet/ip_format.h"
#include "raw_cbc_hmac.h"

namespace espgw::esp_bench {
namespace {

// AES-CBC + HMAC: the raw baseline of bench/raw_cbc_hmac.h on a buffer placed like
// espgw's (the payload at the default headroom, the ESP header and IV before it).
struct RawCbcCase {
  Transform transform;
  espgw::bench::RawCbcHmacTransform raw;
};

class RawCbcFixture {
 public:
  RawCbcFixture(const RawCbcCase& c, size_t inner)
      : material_(key_material(c.transform)),
        key_length_(crypto::cipher_key_length(c.transform.algorithm)),
        raw_(c.raw, material_.data(), material_.data() + key_length_,
             material_.size() - key_length_),
        buffer_(kCapacity),
        length_(esp_payload_length(inner, 16)),
        icv_length_(c.raw.icv_length),
        scratch_(length_) {
    buffer_.assign(make_inner_packet(inner), kHeadroom);
    std::memset(payload() + inner, 0, length_ - inner + icv_length_);
    espgw::store_be32(esp(), kSpi);
    espgw::store_be32(esp() + 4, 1);
    for (size_t i = 0; i < 16; ++i) esp()[8 + i] = static_cast<uint8_t>(0x5a ^ i);
  }
  uint8_t* payload() { return buffer_.data(); }
  uint8_t* esp() { return payload() - 24; }
  uint8_t* tag() { return payload() + length_; }
  uint8_t* scratch() { return scratch_.data(); }
  size_t length() const { return length_; }
  espgw::bench::RawCbcHmac& raw() { return raw_; }

 private:
  std::vector<uint8_t> material_;
  size_t key_length_;
  espgw::bench::RawCbcHmac raw_;
  esp::PacketBuffer buffer_;
  size_t length_;
  size_t icv_length_;
  std::vector<uint8_t> scratch_;
};

void raw_cbc_encrypt(benchmark::State& state, const RawCbcCase* c, size_t inner) {
  RawCbcFixture f(*c, inner);
  for (auto _ : state) {
    f.raw().seal(f.esp(), f.length(), f.tag());
    benchmark::ClobberMemory();
  }
  finish(state, inner);
}

void raw_cbc_decrypt(benchmark::State& state, const RawCbcCase* c, size_t inner) {
  RawCbcFixture f(*c, inner);
  f.raw().seal(f.esp(), f.length(), f.tag());
  for (auto _ : state) {
    if (!f.raw().open(f.esp(), f.length(), f.tag(), f.scratch())) {
      state.SkipWithError("raw decrypt: tag mismatch");
      break;
    }
    benchmark::ClobberMemory();
  }
  finish(state, inner);
}

void raw_cbc_roundtrip(benchmark::State& state, const RawCbcCase* c, size_t inner) {
  RawCbcFixture f(*c, inner);
  for (auto _ : state) {
    f.raw().seal(f.esp(), f.length(), f.tag());
    if (!f.raw().open(f.esp(), f.length(), f.tag(), f.payload())) {
      state.SkipWithError("raw roundtrip: tag mismatch");
      break;
    }
  }
  finish(state, inner);
}

// Bursts: a worker seals its batch's AES-CBC packets as one burst (esp::encap_seal_in_burst),
// so that several packets share ipsec-mb's multi-buffer lanes.
constexpr size_t kBurst = 32;  // the pipeline's worker batch

void finish_burst(benchmark::State& state, size_t inner) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(inner * kBurst));
  state.counters["ns_per_packet"] = benchmark::Counter(
      1e-9 * kBurst, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void raw_cbc_encrypt_burst(benchmark::State& state, const RawCbcCase* c, size_t inner) {
  std::vector<std::unique_ptr<RawCbcFixture>> fixtures;
  std::array<uint8_t*, kBurst> esps, tags;
  for (size_t i = 0; i < kBurst; ++i) {
    fixtures.push_back(std::make_unique<RawCbcFixture>(*c, inner));
    esps[i] = fixtures[i]->esp();
    tags[i] = fixtures[i]->tag();
  }
  // Each packet's own key schedule and buffer, as a batch of different SAs would have; the
  // raw side drives them all through the first fixture's manager, which is the thread's.
  for (auto _ : state) {
    fixtures[0]->raw().seal_burst(esps.data(), kBurst, fixtures[0]->length(), tags.data());
    benchmark::ClobberMemory();
  }
  finish_burst(state, inner);
}

// encap_prepare and encap_seal_in_burst for each packet of a burst, one flush, then
// encap_seal_finish: what a pipeline worker does with a batch of outbound AES-CBC packets.
void espgw_encap_burst(benchmark::State& state, Transform algorithm, size_t inner) {
  const size_t prefix = esp_prefix(algorithm);
  esp::OutboundSa sa(make_config(algorithm), crypto::ipsec_mb_backend());
  const std::vector<uint8_t> packet = make_inner_packet(inner);
  std::vector<esp::PacketBuffer> buffers;
  std::array<esp::PreparedEncap, kBurst> prepared;
  for (size_t i = 0; i < kBurst; ++i) {
    buffers.emplace_back(kCapacity);
    buffers.back().assign(packet);
  }
  const auto seal_all = [&] {
    crypto::CbcHmacSealBurst burst;
    for (size_t i = 0; i < kBurst; ++i) {
      if (esp::encap_prepare(sa, buffers[i], esp::OuterHeaders::omit, prepared[i]) !=
          esp::DropReason::none)
        return false;
      esp::encap_seal_in_burst(sa, buffers[i], prepared[i], burst);
    }
    burst.flush();
    for (size_t i = 0; i < kBurst; ++i) esp::encap_seal_finish(buffers[i], prepared[i]);
    return true;
  };
  // As espgw_encap does: back to the inner packet's view, its IPv4 header restored.
  const auto restore = [&] {
    for (esp::PacketBuffer& buffer : buffers) {
      buffer.narrow(prefix, inner);
      std::memcpy(buffer.data(), packet.data(), packet::kIpv4HeaderLength);
    }
  };
  if (!seal_all()) {
    state.SkipWithError("encapsulate failed");
    return;
  }
  for (const esp::PacketBuffer& buffer : buffers)
    if (!check_encapsulated(state, buffer, inner, algorithm)) return;
  restore();
  for (auto _ : state) {
    if (!seal_all()) {
      state.SkipWithError("encapsulate failed");
      break;
    }
    restore();
  }
  finish_burst(state, inner);
}

void register_cbc(const char* name, const RawCbcCase* cbc) {
  using RawFn = void (*)(benchmark::State&, const RawCbcCase*, size_t);
  using EspFn = void (*)(benchmark::State&, Transform, size_t);
  const RawFn raw[] = {&raw_cbc_encrypt, &raw_cbc_decrypt, &raw_cbc_roundtrip};
  const EspFn espgw[] = {&espgw_encap, &espgw_decap, &espgw_roundtrip};
  for (size_t d = 0; d < 3; ++d) {
    for (const size_t size : kSizes) {
      Case c{name, size, kDirections[d][0],
             std::string("raw/") + name + "/" + kDirections[d][1] + "/" + std::to_string(size),
             std::string("espgw/") + name + "/" + kDirections[d][0] + "/" + std::to_string(size)};
      benchmark::RegisterBenchmark(c.raw_name.c_str(), raw[d], cbc, size)->UseRealTime();
      benchmark::RegisterBenchmark(c.espgw_name.c_str(), espgw[d], cbc->transform, size)
          ->UseRealTime();
      cases().push_back(std::move(c));
    }
  }
  for (const size_t size : kSizes) {
    const std::string burst = "encap-burst" + std::to_string(kBurst);
    Case c{name,
           size,
           burst,
           std::string("raw/") + name + "/" + burst + "/" + std::to_string(size),
           std::string("espgw/") + name + "/" + burst + "/" + std::to_string(size),
           kBurst};
    benchmark::RegisterBenchmark(c.raw_name.c_str(), &raw_cbc_encrypt_burst, cbc, size)
        ->UseRealTime();
    benchmark::RegisterBenchmark(c.espgw_name.c_str(), &espgw_encap_burst, cbc->transform, size)
        ->UseRealTime();
    cases().push_back(std::move(c));
  }
}

const RawCbcCase kAes128Sha1{{AeadAlgorithm::aes_cbc_128, crypto::IntegrityAlgorithm::hmac_sha1_96},
                             {IMB_KEY_128_BYTES, IMB_AUTH_HMAC_SHA_1, 64, 12}};
const RawCbcCase kAes256Sha256{
    {AeadAlgorithm::aes_cbc_256, crypto::IntegrityAlgorithm::hmac_sha256_128},
    {IMB_KEY_256_BYTES, IMB_AUTH_HMAC_SHA_256, 64, 16}};

}  // namespace

void register_cbc_benchmarks() {
  register_cbc("AES-128-CBC-SHA1", &kAes128Sha1);
  register_cbc("AES-256-CBC-SHA256", &kAes256Sha256);
}

}  // namespace espgw::esp_bench

// What the ESP engine micro benchmark's files share (bench/esp_bench.cpp: the AEADs, the
// espgw side and the ratio table; bench/esp_bench_cbc.cpp: AES-CBC + HMAC): the packets,
// the SA, the espgw benchmarks every transform runs, and the list of compared pairs.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "crypto/aead.h"
#include "esp/esp_format.h"
#include "esp/ip_address.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "util/byte_order.h"

namespace espgw::esp_bench {

using crypto::AeadAlgorithm;

inline constexpr size_t kSizes[] = {64, 1400, 8192};
inline constexpr size_t kMaxInner = 8192;
inline constexpr size_t kHeadroom = esp::PacketBuffer::kDefaultHeadroom;
// Room for the largest inner packet, the ESP header in front and padding, trailer and
// ICV behind (esp::encap_tailroom() is 49 bytes), with slack.
inline constexpr size_t kCapacity = kHeadroom + kMaxInner + 128;
inline constexpr uint32_t kSpi = 0x0000c0de;

// ESP payload length for an inner packet: padding to a 4-byte boundary (16 for AES-CBC)
// including the 2-byte trailer (RFC 4303 2.4), as esp/encap.cpp computes it. Checked
// against the engine's actual output in every espgw benchmark's setup.
inline constexpr size_t esp_payload_length(size_t inner,
                                           size_t alignment = esp::kPayloadAlignment) {
  const size_t padding = (alignment - (inner + esp::kEspTrailerLength) % alignment) % alignment;
  return inner + padding + esp::kEspTrailerLength;
}

// The SA's transform: an AEAD, or AES-CBC with an HMAC.
struct Transform {
  AeadAlgorithm algorithm;
  crypto::IntegrityAlgorithm integrity = crypto::IntegrityAlgorithm::none;
};

// An IPv4/UDP packet of `size` bytes in total (10.1.0.1 -> 10.2.0.1).
inline std::vector<uint8_t> make_inner_packet(size_t size) {
  std::vector<uint8_t> p(size);
  for (size_t i = 0; i < size; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  p[0] = 0x45;
  p[1] = 0;
  espgw::store_be16(&p[2], static_cast<uint16_t>(size));
  espgw::store_be16(&p[4], 1);
  espgw::store_be16(&p[6], 0x4000);  // DF
  p[8] = 64;
  p[9] = 17;
  espgw::store_be16(&p[10], 0);
  const uint8_t source[] = {10, 1, 0, 1}, destination[] = {10, 2, 0, 1};
  std::memcpy(&p[12], source, 4);
  std::memcpy(&p[16], destination, 4);
  return p;
}

inline std::vector<uint8_t> key_material(Transform t) {
  std::vector<uint8_t> key(crypto::key_material_length(t.algorithm, t.integrity));
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(0x11 * (i + 1));
  return key;
}

inline esp::SaConfig make_config(Transform t) {
  esp::SaConfig config;
  config.spi = kSpi;
  config.algorithm = t.algorithm;
  config.integrity = t.integrity;
  config.key_material = key_material(t);
  config.tunnel_source = *esp::IpAddress::parse("192.0.2.1");
  config.tunnel_destination = *esp::IpAddress::parse("192.0.2.2");
  config.replay_window = 1024;
  return config;
}

inline void finish(benchmark::State& state, size_t inner) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(inner));
  // value * iterations / seconds, inverted: seconds * 1e9 / iterations.
  state.counters["ns_per_packet"] = benchmark::Counter(
      1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The espgw side (bench/esp_bench.cpp), for any transform.
void espgw_encap(benchmark::State& state, Transform algorithm, size_t inner);
void espgw_decap(benchmark::State& state, Transform algorithm, size_t inner);
void espgw_roundtrip(benchmark::State& state, Transform algorithm, size_t inner);
esp::EspLayout layout_of(Transform t);
size_t esp_prefix(Transform t);
// Checks once, before timing, that the engine produced the ESP packet the raw baseline
// models: ESP header + IV, esp_payload_length(inner) bytes of payload, the ICV.
bool check_encapsulated(benchmark::State& state, const esp::PacketBuffer& buffer, size_t inner,
                        Transform t);

struct Case {
  std::string algorithm;
  size_t size;
  std::string direction;  // encap, decap, roundtrip, encap-burst32
  std::string raw_name;
  std::string espgw_name;
  size_t packets = 1;  // per benchmark iteration: the table shows time per packet
};
// Every (raw, espgw) pair registered, in order: the ratio table's rows.
std::vector<Case>& cases();

inline constexpr const char* kDirections[][2] = {
    {"encap", "encrypt"}, {"decap", "decrypt"}, {"roundtrip", "roundtrip"}};

// Registers the AES-CBC + HMAC pairs (bench/esp_bench_cbc.cpp).
void register_cbc_benchmarks();

}  // namespace espgw::esp_bench

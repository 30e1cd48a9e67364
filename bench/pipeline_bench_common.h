// Shared by the parts of the pipeline benchmark (pipeline_bench*.cpp): its constants and
// flags, the SAs and the inner packet every case uses, the case names, and the cases.
#pragma once

#include <benchmark/benchmark.h>
#include <intel-ipsec-mb.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
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
#include "packet/flow_key.h"
#include "packet/ip_format.h"
#include "pipeline/channels.h"
#include "pipeline/ordered_release.h"
#include "pipeline/packet.h"
#include "pipeline/pipeline.h"
#include "pipeline/reorder_buffer.h"
#include "pipeline/sa_group.h"
#include "raw_ipsec_mb.h"
#include "support/sequential_esp.h"
#include "timed_crypto.h"
#include "util/byte_order.h"
#include "util/clock.h"
#include "util/serial_sections.h"

namespace pipeline_benchmark {

namespace esp = espgw::esp;
namespace packet = espgw::packet;
namespace test = espgw::test;
namespace crypto = espgw::crypto;
namespace pl = espgw::pipeline;

inline constexpr size_t kInner = 1400;
inline constexpr size_t kFlows = 1024;
inline constexpr uint32_t kSpiBase = 0x00010000;
inline constexpr uint64_t kFlowSeed = 0x5eed5eed12345678ull;
inline constexpr size_t kTagLength = 16;
inline constexpr size_t kAadLength = 8;
// UDP payload offset in the inner packet: where the per-SA marker goes.
inline constexpr size_t kMarkerOffset = packet::kIpv4HeaderLength + packet::kUdpHeaderLength;
inline constexpr uint16_t kSourcePortBase = 10000;
inline constexpr auto kDrainTimeout = std::chrono::seconds(10);

inline size_t g_batch = 256;
inline size_t g_pool = 8192;
inline std::optional<unsigned> g_reorder_hold_us;
inline std::optional<size_t> g_reorder_capacity;
inline std::optional<size_t> g_assist_threshold;
inline bool g_pin = false;
inline bool g_time_serial = false;           // --pipeline_time_serial
inline std::optional<double> g_transfer_ns;  // --pipeline_transfer_ns
inline bool g_strict_order = false;
inline bool g_time_crypto = false;

// The backend of the pipeline cases' SAs: ipsec-mb, timed when --pipeline_time_crypto.
inline const crypto::CryptoBackend& sa_backend() {
  if (!g_time_crypto) return crypto::ipsec_mb_backend();
  static const espgw::bench::TimedBackend timed(crypto::ipsec_mb_backend());
  return timed;
}

// Cycles the SAs' cipher calls took so far, all threads (0 unless --pipeline_time_crypto).
inline uint64_t cipher_cycles() {
  return g_time_crypto ? espgw::bench::CryptoClock::instance().totals().cycles : 0;
}
inline std::vector<unsigned> g_workers;

// ESP payload (inner + padding + 2-byte trailer), as esp/encap.cpp computes it.
inline constexpr size_t esp_payload_length(size_t inner) {
  const size_t padding =
      (esp::kPayloadAlignment - (inner + esp::kEspTrailerLength) % esp::kPayloadAlignment) %
      esp::kPayloadAlignment;
  return inner + padding + esp::kEspTrailerLength;
}

inline uint16_t ipv4_checksum(const uint8_t* header) {
  uint32_t sum = 0;
  for (size_t i = 0; i < packet::kIpv4HeaderLength; i += 2) sum += espgw::load_be16(header + i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// A 1400-byte IPv4/UDP packet 10.1.0.1:10000 -> 10.2.0.1:5201; the feeder patches the
// source port (the flow) and the marker.
inline std::vector<uint8_t> make_inner_packet() {
  std::vector<uint8_t> p(kInner);
  for (size_t i = 0; i < kInner; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  p[0] = 0x45;
  p[1] = 0;
  espgw::store_be16(&p[2], static_cast<uint16_t>(kInner));
  espgw::store_be16(&p[4], 1);
  espgw::store_be16(&p[6], 0x4000);  // DF
  p[8] = 64;
  p[9] = packet::kProtocolUdp;
  espgw::store_be16(&p[10], 0);
  const uint8_t source[] = {10, 1, 0, 1}, destination[] = {10, 2, 0, 1};
  std::memcpy(&p[12], source, 4);
  std::memcpy(&p[16], destination, 4);
  espgw::store_be16(&p[10], ipv4_checksum(p.data()));
  espgw::store_be16(&p[20], kSourcePortBase);
  espgw::store_be16(&p[22], 5201);
  espgw::store_be16(&p[24], static_cast<uint16_t>(kInner - packet::kIpv4HeaderLength));
  espgw::store_be16(&p[26], 0);  // no UDP checksum
  return p;
}

inline std::vector<uint8_t> key_material(uint32_t sa_index) {
  std::vector<uint8_t> key(crypto::key_material_length(crypto::AeadAlgorithm::aes_gcm_128));
  for (size_t i = 0; i < key.size(); ++i)
    key[i] = static_cast<uint8_t>(0x11 * (i + 1) + 31 * sa_index);
  return key;
}

inline esp::SaConfig make_config(uint32_t sa_index) {
  esp::SaConfig config;
  config.spi = kSpiBase + sa_index;
  config.algorithm = crypto::AeadAlgorithm::aes_gcm_128;
  config.key_material = key_material(sa_index);
  config.tunnel_source = *esp::IpAddress::parse("192.0.2.1");
  config.tunnel_destination = *esp::IpAddress::parse("192.0.2.2");
  // The gateway's default floor (espgw.conf min-replay-window): a narrower window lets
  // the packets of a worker preempted while it holds a batch fall outside it.
  config.replay_window = 4096;
  return config;
}

using espgw::clock_ns;
using espgw::bench::arch_name;
using espgw::bench::CollectingReporter;
using espgw::bench::g_arch;
using espgw::bench::raw_manager;

// Marker in the UDP payload: SA index (4 bytes), feeder (2 bytes) and that feeder's packet
// counter for the SA (6 bytes). One feeder's packets of an SA take their sequence numbers
// in the order it submits them, so each feeder's counters must arrive in order.
inline constexpr unsigned kMaxFeeders = 64;

inline constexpr size_t kReorderBatch = 4096;
inline constexpr size_t kReorderWindow = 64;
inline constexpr size_t kReorderCapacity = 512;  // PipelineConfig's default reorder_capacity

// Case names.
inline const std::string kRawName = "raw/AES-128-GCM/roundtrip/1400";
inline std::string floor_name(uint32_t sas) {
  return "floor/engine_with_copies/sas:" + std::to_string(sas);
}
inline const char* const kHandoffNames[] = {"handoff/cache_line_round_trip/before_pipeline",
                                            "handoff/cache_line_round_trip/after_pipeline"};
inline std::string raw_threads_name(unsigned threads) {
  return kRawName + "/parallel:" + std::to_string(threads);
}
// SA counts of the pipeline cases (--pipeline_sas); 1 and 64 unless told.
inline std::vector<uint32_t> g_sa_counts;
inline const char* const kReorderNames[] = {
    "reorder/inbound/in_order", "reorder/inbound/shuffled64", "reorder/outbound/in_order",
    "reorder/outbound/shuffled64"};

inline std::string pipeline_name(uint32_t sas, unsigned workers) {
  // Run to completion is named apart, so that the worker-scaling series stays 1..N.
  return "pipeline/sas:" + std::to_string(sas) +
         (workers == 0 ? std::string("/inline") : "/workers:" + std::to_string(workers));
}
// Several feeders, each running its packets to completion; `reader_per_sa`: on SAs of
// their own.
inline std::string inline_threads_name(uint32_t sas, unsigned threads, bool reader_per_sa = false) {
  return "pipeline/sas:" + std::to_string(sas) + "/inline_threads:" + std::to_string(threads) +
         (reader_per_sa ? "/reader_per_sa" : "");
}

// The several-feeder cases of a series: n feeders sharing the group's SAs for each n of
// --pipeline_workers above 1, then, where there are SAs enough, n feeders on SAs of their
// own.
inline std::vector<std::pair<unsigned, bool>> inline_thread_cases(uint32_t sas) {
  std::vector<std::pair<unsigned, bool>> cases;
  for (const bool own : {false, true})
    for (const unsigned n : g_workers)
      if (n > 1 && n <= kMaxFeeders && (!own || sas >= n)) cases.emplace_back(n, own);
  return cases;
}

// The cases (pipeline_bench_baselines.cpp, pipeline_bench_pipeline.cpp).
void raw_roundtrip(benchmark::State& state);
void handoff_round_trip(benchmark::State& state);
void engine_floor(benchmark::State& state, uint32_t sas);
void reorder_bench(benchmark::State& state, bool shuffled, uint64_t hold_ns);
void pipeline_bench(benchmark::State& state, uint32_t sas, unsigned workers, unsigned feeders,
                    bool reader_per_sa);

// The summary after the run (pipeline_bench_summary.cpp).
void print_summary(const CollectingReporter& r, std::ostream& out);

}  // namespace pipeline_benchmark

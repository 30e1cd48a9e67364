// Parallel pipeline benchmark: the whole in-memory data path of the gateway, through the
// real esp_engine/pipeline code, against raw ipsec-mb measured in the same binary.
//
//   feeder (the benchmark thread)
//     acquire a Packet (nullptr = backpressure: yield and retry), copy a 1400-byte inner
//     IPv4/UDP packet in, classify it (SaGroup::pick_for_packet: flow_hash when the group
//     has a choice), write a per-SA counter into the UDP payload,
//     Pipeline::submit_outbound(channel, packet, OuterHeaders::omit)
//   workers seal, the SA's OrderedRelease hands ESP packets in order to the LoopbackSink
//   LoopbackSink::deliver (on a worker)
//     copies each ESP packet into a fresh Packet and calls submit_inbound on the same
//     pipeline, where the SA's inbound half is registered: what the peer gateway would do
//   workers verify + decrypt, the SA's reorder buffer releases by sequence number
//   InboundSink::deliver counts packets and bytes and checks that the per-SA counter
//     strictly increases. The reorder buffer is bounded by design (reorder_capacity
//     sequence numbers, reorder_hold time): when a worker is descheduled long enough that
//     a gap is given up, the missing packet is released "late", which is one violation.
//     Violations beyond the reorder buffer's late count are a pipeline bug and fail the
//     benchmark (--pipeline_strict_order fails on any); late ones are reported as counters.
//
// Benchmarks (all UseRealTime):
//   raw/AES-128-GCM/roundtrip/1400   IMB_AES128_GCM_ENC + IMB_AES128_GCM_DEC + 16-byte tag
//                                    compare of the 1404-byte ESP payload, one thread: the
//                                    minimum crypto work per packet.
//   pipeline/sas:S/workers:W         one iteration = feed a batch of 256 packets; the last
//                                    iteration also waits until every packet came out of
//                                    the inbound sink, so the timed region covers all work.
//                                    S = 1 (a group of one SA) or 64 (a group of 64, 1024
//                                    flows); W = 1..hardware_concurrency().
//   pipeline/sas:S/inline_threads:N  N feeders at once, no workers, each running its own
//                                    packets to completion over the whole group (so with
//                                    one SA all share it)
//   pipeline/sas:S/inline_threads:N/reader_per_sa
//                                    the same, each feeder's flows spread over SAs of its
//                                    own (S >= N): no SA is shared between threads
//   handoff/cache_line_round_trip/{before,after}_pipeline
//                                    one cache line bounced between two threads, before
//                                    and after the pipeline cases: what a hand-off to a
//                                    worker costs on this machine right now (see below).
//   reorder/{inbound,outbound}/{in_order,shuffled64}
//                                    ReorderBuffer alone, one thread, insert + release per
//                                    packet as OrderedRelease does: indexes in order, or
//                                    randomly permuted within windows of 64. Inbound uses
//                                    the pipeline's hold time (gap scans), outbound none.
//
// Counters: Gbps and Mpps (inner bytes/packets delivered by the inbound sink), ns_per_packet
// (real), cpu_ns_per_packet (process CPU time, all threads, per delivered packet), split
// into feeder_cpu_ns_per_packet (the benchmark thread, backpressure waits included) and
// worker_cpu_ns_per_packet (the rest: workers, gap timer), drops, order_violations,
// reorder-buffer late/hold_timeouts/overflows and feeder_wait (fraction of the feeder's
// wall time spent waiting on backpressure).
//
// After the run a summary is printed (and written to --pipeline_summary_out=FILE): per SA
// count and worker count, Gbit/s, Mpps, scaling efficiency throughput(n)/(n*throughput(1)),
// fraction of raw = throughput / (raw single-thread throughput * n), and CPU efficiency =
// raw ns per packet / pipeline CPU ns per packet (all threads, and workers only). Medians
// when --benchmark_repetitions > 1.
//
// Honesty note: the feeder thread does real work (copy, classify, submit) and competes with
// the workers for the CPUs. With W workers the process wants W + 1 busy threads; on a
// 2-core machine W = 2 is oversubscribed, and every W is bounded by the single feeder when
// the workers are faster than it (feeder_wait near 0 means the feeder, not the workers, was
// the bottleneck). The fairest efficiency figure on an oversubscribed box is the CPU
// figure: CPU ns per packet against raw crypto ns per packet.
//
// Extra flags (besides Google Benchmark's):
//   --pipeline_summary_out=FILE  also write the summary to FILE
//   --pipeline_workers=LIST      worker counts, e.g. 1,2,4,8 (default 1..hardware threads)
//   --pipeline_batch=N           packets fed per iteration (default 256)
//   --pipeline_pool=N            pool packets (default 8192)
//   --pipeline_reorder_hold_us=N inbound reorder hold time (default: the pipeline's 1000)
//   --pipeline_reorder_capacity=N inbound reorder window per SA (default: the pipeline's 512)
//   --pipeline_assist=N          submitter assist threshold (0: off; default: the pipeline's)
//   --pipeline_pin               pin workers to CPUs (PipelineConfig::pin_workers)
//   --pipeline_strict_order      fail on any order violation, even one the reorder buffer
//                                accounts for as a late release (see below)
//   --pipeline_time_crypto       time every seal and open (bench/timed_crypto.h): counter
//                                crypto_ns_per_packet, and a summary table splitting each
//                                case's CPU time into the cipher and the rest
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
#include "esp/inbound_sa_table.h"
#include "esp/ip_address.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "pipeline/channels.h"
#include "pipeline/ordered_release.h"
#include "pipeline/packet.h"
#include "pipeline/pipeline.h"
#include "pipeline/reorder_buffer.h"
#include "pipeline/sa_group.h"
#include "raw_ipsec_mb.h"
#include "timed_crypto.h"
#include "util/byte_order.h"
#include "util/clock.h"

namespace {

namespace esp = espgw::esp;
namespace crypto = espgw::crypto;
namespace pl = espgw::pipeline;

constexpr size_t kInner = 1400;
constexpr size_t kFlows = 1024;
constexpr uint32_t kSpiBase = 0x00010000;
constexpr uint64_t kFlowSeed = 0x5eed5eed12345678ull;
constexpr size_t kTagLength = 16;
constexpr size_t kAadLength = 8;
// UDP payload offset in the inner packet: where the per-SA marker goes.
constexpr size_t kMarkerOffset = esp::kIpv4HeaderLength + esp::kUdpHeaderLength;
constexpr uint16_t kSourcePortBase = 10000;
constexpr auto kDrainTimeout = std::chrono::seconds(10);

size_t g_batch = 256;
size_t g_pool = 8192;
std::optional<unsigned> g_reorder_hold_us;
std::optional<size_t> g_reorder_capacity;
std::optional<size_t> g_assist_threshold;
bool g_pin = false;
bool g_strict_order = false;
bool g_time_crypto = false;

// The backend of the pipeline cases' SAs: ipsec-mb, timed when --pipeline_time_crypto.
const crypto::CryptoBackend& sa_backend() {
  if (!g_time_crypto) return crypto::ipsec_mb_backend();
  static const espgw::bench::TimedBackend timed(crypto::ipsec_mb_backend());
  return timed;
}

// Cycles the SAs' cipher calls took so far, all threads (0 unless --pipeline_time_crypto).
uint64_t cipher_cycles() {
  return g_time_crypto ? espgw::bench::CryptoClock::instance().totals().cycles : 0;
}
std::vector<unsigned> g_workers;

// ESP payload (inner + padding + 2-byte trailer), as esp/encap.cpp computes it.
constexpr size_t esp_payload_length(size_t inner) {
  const size_t padding =
      (esp::kPayloadAlignment - (inner + esp::kEspTrailerLength) % esp::kPayloadAlignment) %
      esp::kPayloadAlignment;
  return inner + padding + esp::kEspTrailerLength;
}

uint16_t ipv4_checksum(const uint8_t* header) {
  uint32_t sum = 0;
  for (size_t i = 0; i < esp::kIpv4HeaderLength; i += 2) sum += espgw::load_be16(header + i);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// A 1400-byte IPv4/UDP packet 10.1.0.1:10000 -> 10.2.0.1:5201; the feeder patches the
// source port (the flow) and the marker.
std::vector<uint8_t> make_inner_packet() {
  std::vector<uint8_t> p(kInner);
  for (size_t i = 0; i < kInner; ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  p[0] = 0x45;
  p[1] = 0;
  espgw::store_be16(&p[2], static_cast<uint16_t>(kInner));
  espgw::store_be16(&p[4], 1);
  espgw::store_be16(&p[6], 0x4000);  // DF
  p[8] = 64;
  p[9] = esp::kProtocolUdp;
  espgw::store_be16(&p[10], 0);
  const uint8_t source[] = {10, 1, 0, 1}, destination[] = {10, 2, 0, 1};
  std::memcpy(&p[12], source, 4);
  std::memcpy(&p[16], destination, 4);
  espgw::store_be16(&p[10], ipv4_checksum(p.data()));
  espgw::store_be16(&p[20], kSourcePortBase);
  espgw::store_be16(&p[22], 5201);
  espgw::store_be16(&p[24], static_cast<uint16_t>(kInner - esp::kIpv4HeaderLength));
  espgw::store_be16(&p[26], 0);  // no UDP checksum
  return p;
}

std::vector<uint8_t> key_material(uint32_t sa_index) {
  std::vector<uint8_t> key(crypto::key_material_length(crypto::AeadAlgorithm::aes_gcm_128));
  for (size_t i = 0; i < key.size(); ++i)
    key[i] = static_cast<uint8_t>(0x11 * (i + 1) + 31 * sa_index);
  return key;
}

esp::SaConfig make_config(uint32_t sa_index) {
  esp::SaConfig config;
  config.spi = kSpiBase + sa_index;
  config.algorithm = crypto::AeadAlgorithm::aes_gcm_128;
  config.key_material = key_material(sa_index);
  config.tunnel_source = *esp::IpAddress::parse("192.0.2.1");
  config.tunnel_destination = *esp::IpAddress::parse("192.0.2.2");
  // The gateway's default floor (espgw.conf min-replay-window): with workers preempted
  // while they hold a batch, 1024 let packets fall outside the window on 2 vCPUs.
  config.replay_window = 4096;
  return config;
}

using espgw::clock_ns;

// ---------------------------------------------------------------------------------------
// Raw ipsec-mb baseline.

// The first thread to ask reuses the manager created at start-up; every other thread gets
// its own (one manager per thread, as ipsec-mb requires).
bool state_is_first_thread() {
  static std::atomic<bool> taken{false};
  return !taken.exchange(true);
}

using espgw::bench::arch_name;
using espgw::bench::g_arch;
using espgw::bench::raw_manager;

// gcm_key_data must be 16-byte aligned; the header only guarantees it with -DLINUX.
struct alignas(64) RawKey {
  gcm_key_data gcm;
};

// Also run with ->Threads(n): n independent threads doing raw crypto, the most this
// machine can do with n cores busy. On a small VM that is well below n times one thread
// (vCPUs share host cores), and it is the fair ceiling for n workers.
void raw_roundtrip(benchmark::State& state) {
  thread_local IMB_MGR* const manager = [] {
    if (IMB_MGR* shared = raw_manager(); shared && state_is_first_thread()) return shared;
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) throw std::bad_alloc();
    init_mb_mgr_auto(m, nullptr);
    return m;
  }();
  auto key = std::make_unique<RawKey>();
  const std::vector<uint8_t> material = key_material(0);
  IMB_AES128_GCM_PRE(manager, material.data(), &key->gcm);
  uint8_t nonce[crypto::kNonceLength];
  uint8_t aad[kAadLength];
  std::memcpy(nonce,
              material.data() + crypto::cipher_key_length(crypto::AeadAlgorithm::aes_gcm_128),
              crypto::kSaltLength);
  espgw::store_be64(nonce + crypto::kSaltLength, 1);
  espgw::store_be32(aad, kSpiBase);
  espgw::store_be32(aad + 4, 1);
  const size_t length = esp_payload_length(kInner);
  // Placed like a pipeline packet: at the default headroom of a 2048-byte heap buffer.
  std::unique_ptr<uint8_t[]> storage(new uint8_t[2048]);
  uint8_t* payload = storage.get() + esp::PacketBuffer::kDefaultHeadroom;
  const std::vector<uint8_t> packet = make_inner_packet();
  std::memcpy(payload, packet.data(), kInner);
  std::memset(payload + kInner, 0, length - kInner);
  uint8_t* tag = payload + length;
  uint8_t computed[kTagLength];
  for (auto _ : state) {
    gcm_context_data context;
    IMB_AES128_GCM_ENC(manager, &key->gcm, &context, payload, payload, length, nonce, aad,
                       kAadLength, tag, kTagLength);
    IMB_AES128_GCM_DEC(manager, &key->gcm, &context, payload, payload, length, nonce, aad,
                       kAadLength, computed, kTagLength);
    if (std::memcmp(computed, tag, kTagLength) != 0) {
      state.SkipWithError("raw roundtrip: tag mismatch");
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kInner));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.counters["ns_per_packet"] = benchmark::Counter(
      1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["Gbps"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kInner * 8 / 1e9, benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------------------------------
// Hand-off baseline: one cache line bounced between two threads (an iteration is a round
// trip). Handing a packet to a worker and getting it back moves lines like this, and on
// this project's VMs the cost depends on where the host runs the two vCPUs: ~75-110 ns
// per round trip when they share a cache, ~360-380 ns when they do not, and it changes
// while a benchmark runs. So it is measured before and after the pipeline cases, and the
// worker cases are read against it.

void handoff_round_trip(benchmark::State& state) {
  alignas(64) std::atomic<int> turn{0};  // 1: the partner's move, 0: ours, -1: stop
  std::thread partner([&turn] {
    for (;;) {
      int seen;
      while ((seen = turn.load(std::memory_order_acquire)) == 0) {
      }
      if (seen < 0) return;
      turn.store(0, std::memory_order_release);
    }
  });
  for (auto _ : state) {
    turn.store(1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 0) {
    }
  }
  turn.store(-1, std::memory_order_release);
  partner.join();
}

// ---------------------------------------------------------------------------------------
// The pipeline.

// What the inbound sinks delivered, counted per delivering thread: one shared count that
// every delivery incremented moved its cache line between the CPUs once per delivery (a
// packet, with 64 SAs), 250 ns each way on a host that runs the two vCPUs on different
// caches, so the two-thread cases measured the benchmark's counting more than the pipeline.
class DeliveredCounts {
 public:
  void add(uint64_t packets, uint64_t bytes) {
    Slot& slot = slots_[thread_slot()];
    slot.bytes.fetch_add(bytes, std::memory_order_relaxed);
    slot.packets.fetch_add(packets, std::memory_order_release);
  }
  uint64_t packets() const {
    uint64_t sum = 0;
    for (const Slot& slot : slots_) sum += slot.packets.load(std::memory_order_acquire);
    return sum;
  }
  uint64_t bytes() const {
    uint64_t sum = 0;
    for (const Slot& slot : slots_) sum += slot.bytes.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  static constexpr size_t kSlots = 16;  // more threads than this share slots (still atomic)
  struct alignas(64) Slot {
    std::atomic<uint64_t> packets{0};
    std::atomic<uint64_t> bytes{0};
  };
  static size_t thread_slot() {
    static std::atomic<size_t> next{0};
    thread_local const size_t slot = next.fetch_add(1, std::memory_order_relaxed) % kSlots;
    return slot;
  }
  std::array<Slot, kSlots> slots_{};
};

struct Totals {
  DeliveredCounts delivered;
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> loopback_drops{0};  // no free packet for the ESP copy
  std::atomic<uint64_t> first_violation_sa{~0ull};
};

// Marker in the UDP payload: SA index (4 bytes), feeder (2 bytes) and that feeder's packet
// counter for the SA (6 bytes). One feeder's packets of an SA take their sequence numbers
// in the order it submits them, so each feeder's counters must arrive in order.
constexpr unsigned kMaxFeeders = 64;
void write_marker(uint8_t* inner, uint32_t sa_index, unsigned feeder, uint64_t counter) {
  espgw::store_be32(inner + kMarkerOffset, sa_index);
  espgw::store_be64(inner + kMarkerOffset + 4, uint64_t{feeder} << 48 | counter);
}

// One per inbound SA: deliver() runs on one thread at a time per channel (OrderedRelease's
// draining flag orders the calls), so `last_` needs no lock.
class InboundSink : public pl::PacketSink {
 public:
  InboundSink(Totals& totals, uint32_t sa_index) : totals_(totals), sa_index_(sa_index) {}

  void deliver(std::span<pl::Packet* const> packets) override {
    uint64_t bytes = 0;
    uint64_t violations = 0;
    for (const pl::Packet* packet : packets) {
      const esp::PacketBuffer& b = packet->buffer;
      bytes += b.size();
      if (b.size() != kInner) {
        ++violations;
        continue;
      }
      const uint32_t sa = espgw::load_be32(b.data() + kMarkerOffset);
      const uint64_t marker = espgw::load_be64(b.data() + kMarkerOffset + 4);
      const unsigned feeder = static_cast<unsigned>(marker >> 48) % kMaxFeeders;
      const uint64_t counter = marker & ((uint64_t{1} << 48) - 1);
      if (sa != sa_index_ || counter <= last_[feeder]) ++violations;
      last_[feeder] = counter;
    }
    if (violations > 0) {
      totals_.violations.fetch_add(violations, std::memory_order_relaxed);
      uint64_t none = ~0ull;
      totals_.first_violation_sa.compare_exchange_strong(none, sa_index_);
    }
    totals_.delivered.add(packets.size(), bytes);
  }

 private:
  Totals& totals_;
  const uint32_t sa_index_;
  std::array<uint64_t, kMaxFeeders> last_{};  // per feeder
};

// The wire: each sealed ESP packet goes back into the same pipeline, inbound.
class LoopbackSink : public pl::PacketSink, public pl::SharedSink {
 public:
  explicit LoopbackSink(Totals& totals) : totals_(totals) {}
  void set_pipeline(pl::Pipeline* pipeline) { pipeline_ = pipeline; }

  // The wire every SA's packets take, as the gateway's WAN socket is: a worker's batch
  // comes in one call, however many SAs it spans (as the gateway sends it).
  pl::SharedSink* shared() override { return this; }
  void deliver_together(std::span<const pl::ChannelDelivery> deliveries) override {
    for (const pl::ChannelDelivery& delivery : deliveries) deliver(delivery.packets);
  }

  void deliver(std::span<pl::Packet* const> packets) override {
    for (const pl::Packet* packet : packets) {
      pl::Packet* copy = pipeline_->acquire();
      if (copy == nullptr) {
        totals_.loopback_drops.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      copy->buffer.assign(packet->buffer.bytes());
      // A drop here is counted on the inbound SA (or the engine counters) by the pipeline.
      pipeline_->submit_inbound(copy);
    }
  }

 private:
  Totals& totals_;
  pl::Pipeline* pipeline_ = nullptr;
};

struct Rig {
  Totals totals;
  LoopbackSink loopback{totals};
  std::vector<std::unique_ptr<InboundSink>> inbound_sinks;
  std::vector<std::shared_ptr<esp::InboundSa>> inbound_sas;
  std::vector<std::shared_ptr<esp::OutboundSa>> outbound_sas;
  std::unique_ptr<pl::Pipeline> pipeline;  // destroyed before the sinks it delivers to
  std::vector<std::shared_ptr<pl::OutboundChannel>> outbound;
  std::vector<std::shared_ptr<pl::InboundChannel>> inbound;
  pl::SaGroup group;

  // workers == 0: no workers, the feeder runs every packet to completion itself.
  Rig(unsigned workers, uint32_t sas) {
    pl::PipelineConfig config;
    config.workers = workers;
    config.run_to_completion = workers == 0;
    config.pin_workers = g_pin;
    config.pool_packets = g_pool;
    config.packet_capacity = 2048;
    if (g_reorder_hold_us) config.reorder_hold = std::chrono::microseconds(*g_reorder_hold_us);
    if (g_reorder_capacity) config.reorder_capacity = *g_reorder_capacity;
    if (g_assist_threshold) config.submitter_assist_threshold = *g_assist_threshold;
    pipeline = std::make_unique<pl::Pipeline>(config);
    loopback.set_pipeline(pipeline.get());
    for (uint32_t i = 0; i < sas; ++i) {
      const esp::SaConfig sa_config = make_config(i);
      outbound_sas.push_back(std::make_shared<esp::OutboundSa>(sa_config, sa_backend()));
      inbound_sas.push_back(std::make_shared<esp::InboundSa>(sa_config, sa_backend()));
      inbound_sinks.push_back(std::make_unique<InboundSink>(totals, i));
      outbound.push_back(pipeline->make_outbound(outbound_sas.back(), loopback));
      auto channel = pipeline->add_inbound(inbound_sas.back(), *inbound_sinks.back());
      if (!channel) throw std::runtime_error("add_inbound: SPI taken");
      inbound.push_back(std::move(channel));
      group.set_member(i + 1, outbound.back());
    }
  }

  ~Rig() {
    // Stop the workers (the destructor drains) before the channels and sinks go.
    pipeline.reset();
  }

  // Packets that will never reach an inbound sink: drops counted anywhere on the path.
  uint64_t dropped(uint64_t feeder_drops) const {
    uint64_t sum = feeder_drops + totals.loopback_drops.load(std::memory_order_relaxed);
    for (const auto& sa : inbound_sas) sum += sa->counters().total_drops();
    sum += const_cast<pl::Pipeline&>(*pipeline).engine_counters().total_drops();
    return sum;
  }

  pl::ReorderStats reorder_stats() const {
    pl::ReorderStats total;
    for (const auto& channel : inbound) {
      const pl::ReorderStats s = channel->release().stats();
      total.released += s.released;
      total.late += s.late;
      total.skipped += s.skipped;
      total.hold_timeouts += s.hold_timeouts;
      total.overflows += s.overflows;
    }
    return total;
  }

  std::string describe_drops() const {
    std::ostringstream out;
    std::map<std::string, uint64_t> reasons;
    for (const auto& sa : inbound_sas)
      for (size_t r = 1; r < esp::kDropReasonCount; ++r)
        if (const uint64_t n = sa->counters().drops(static_cast<esp::DropReason>(r)))
          reasons[std::string("in:") +
                  std::string(esp::drop_reason_name(static_cast<esp::DropReason>(r)))] += n;
    for (const auto& sa : outbound_sas)
      for (size_t r = 1; r < esp::kDropReasonCount; ++r)
        if (const uint64_t n = sa->counters().drops(static_cast<esp::DropReason>(r)))
          reasons[std::string("out:") +
                  std::string(esp::drop_reason_name(static_cast<esp::DropReason>(r)))] += n;
    for (const auto& [name, n] : reasons) out << " " << name << "=" << n;
    return out.str();
  }
};

// One reader of the benchmark: copies, classifies and submits packets of its own flows.
struct alignas(64) Feeder {
  explicit Feeder(unsigned feeder_index, uint32_t sas) : index(feeder_index), next_counter(sas) {}
  const unsigned index;
  size_t flow = 0;
  std::atomic<uint64_t> fed{0};        // packets handed to submit_outbound (read by the others)
  std::atomic<uint64_t> drops{0};      // refused by submit_outbound (read by the others)
  uint64_t wait_ns = 0;                // time spent on backpressure
  uint64_t delivered_seen = 0;         // the last sum of the delivered count it read
  std::vector<uint64_t> next_counter;  // per SA
};

// `feeders` > 1: that many threads feed at once, each running its packets to completion
// (no workers): the gateway's readers on a machine where they do the crypto themselves.
// `reader_per_sa`: each feeder spreads its flows over SAs of its own (feeder f over the SAs
// s with s % feeders == f) instead of over the whole group, so no two feeders share an SA:
// what the gateway's WAN readers see inbound (one socket, so one reader, per peer), and
// the bound for the case where they share (TUN readers outbound).
void pipeline_bench(benchmark::State& state, uint32_t sas, unsigned workers, unsigned feeders,
                    bool reader_per_sa) {
  Rig rig(workers, sas);
  std::vector<std::unique_ptr<pl::SaGroup>> own_groups;
  if (reader_per_sa)
    for (unsigned f = 0; f < feeders; ++f) {
      own_groups.push_back(std::make_unique<pl::SaGroup>());
      for (uint32_t i = f; i < sas; i += feeders)
        own_groups.back()->set_member(i + 1, rig.outbound[i]);
    }
  auto group_of = [&](unsigned feeder) -> const pl::SaGroup& {
    return reader_per_sa ? *own_groups[feeder] : rig.group;
  };
  pl::Pipeline& pipeline = *rig.pipeline;
  const std::vector<uint8_t> inner = make_inner_packet();
  // Keep a quarter of the pool for the loopback's ESP copies: the feeders' outbound packets
  // and their inbound copies together never exhaust it, so the loopback does not drop.
  // The pool keeps no count of free packets, so the feeders count what they have in
  // flight: fed and not yet delivered or dropped (each holds one packet, two while the
  // loopback copies it).
  const size_t reserve = std::max<size_t>(g_pool / 4, 2 * g_batch);
  const uint64_t in_flight_limit = g_pool - reserve;

  // Touch every packet buffer once, so that first-touch page faults of the 16 MB pool are
  // not timed.
  {
    std::vector<pl::Packet*> all;
    while (pl::Packet* packet = pipeline.acquire()) {
      packet->buffer.assign(inner);
      all.push_back(packet);
    }
    for (pl::Packet* packet : all) pipeline.release(packet);
  }

  std::vector<std::unique_ptr<Feeder>> feeder_states;
  for (unsigned f = 0; f < feeders; ++f) feeder_states.push_back(std::make_unique<Feeder>(f, sas));
  auto total_fed = [&] {
    uint64_t sum = 0;
    for (const auto& f : feeder_states) sum += f->fed.load(std::memory_order_relaxed);
    return sum;
  };
  auto feeder_drops = [&] {
    uint64_t sum = 0;
    for (const auto& f : feeder_states) sum += f->drops.load(std::memory_order_relaxed);
    return sum;
  };
  const benchmark::IterationCount last = state.max_iterations;
  benchmark::IterationCount iteration = 0;
  bool failed = false;

  auto wait_start = [] { return std::chrono::steady_clock::now(); };
  const size_t flows_per_feeder = std::max<size_t>(kFlows / feeders, 1);
  // One feeder's read batch: g_batch packets, then complete_submitted().
  auto feed_batch = [&](Feeder& feeder) {
    // The delivered count is summed again, and the drop counters (every SA) summed at
    // all, only when the bound with the last sum says "full": deliveries only grow it, so
    // an old sum overstates what is in flight. With several feeders, each looks at the
    // others' counts every 16 packets (the reserve covers what they feed meanwhile).
    uint64_t fed_seen = 0;
    auto has_room = [&](size_t i) {
      if (feeders == 1)
        fed_seen = feeder.fed.load(std::memory_order_relaxed);
      else if (i % 16 == 0)
        fed_seen = total_fed();
      if (fed_seen - feeder.delivered_seen < in_flight_limit) return true;
      feeder.delivered_seen = rig.totals.delivered.packets();
      return fed_seen - feeder.delivered_seen < in_flight_limit ||
             fed_seen - feeder.delivered_seen - rig.dropped(feeder_drops()) < in_flight_limit;
    };
    for (size_t i = 0; i < g_batch; ++i) {
      pl::Packet* packet = nullptr;
      if (!has_room(i) || (packet = pipeline.acquire()) == nullptr) {
        const auto t0 = wait_start();
        do {
          pipeline.complete_submitted();  // without workers, the feeder frees the packets
          std::this_thread::yield();
          if (feeders > 1) fed_seen = total_fed();
        } while (!has_room(1) || (packet = pipeline.acquire()) == nullptr);
        feeder.wait_ns += static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(wait_start() - t0).count());
      }
      packet->buffer.assign(inner);
      uint8_t* data = packet->buffer.data();
      espgw::store_be16(
          data + 20,
          static_cast<uint16_t>(kSourcePortBase + feeder.index * flows_per_feeder + feeder.flow));
      feeder.flow = feeder.flow + 1 == flows_per_feeder ? 0 : feeder.flow + 1;
      // As the gateway classifies: the flow hash is computed when the group has a choice.
      pl::OutboundChannel* channel =
          group_of(feeder.index).pick_for_packet(packet->buffer.bytes(), kFlowSeed);
      // Per-SA backpressure: wait rather than have the packet dropped as queue-full (with
      // several feeders one may still be; it is counted like any drop).
      if (channel->in_flight() >= channel->max_in_flight()) {
        const auto t0 = wait_start();
        do {
          pipeline.complete_submitted();
          std::this_thread::yield();
        } while (channel->in_flight() >= channel->max_in_flight());
        feeder.wait_ns += static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(wait_start() - t0).count());
      }
      const uint32_t sa_index = channel->sa().config().spi - kSpiBase;
      write_marker(data, sa_index, feeder.index, ++feeder.next_counter[sa_index]);
      feeder.fed.store(feeder.fed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      if (pipeline.submit_outbound(*channel, packet, esp::OuterHeaders::omit) !=
          esp::DropReason::none)
        feeder.drops.store(feeder.drops.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
    }
    pipeline.complete_submitted();  // the end of a "read batch"
  };

  // The other feeders run an iteration's batches between two barriers, in step with the
  // benchmark thread (feeder 0). Several batches per iteration keep the barriers' cost
  // small next to the work.
  const size_t batches_per_iteration = feeders == 1 ? 1 : 16;
  std::barrier<> step(static_cast<std::ptrdiff_t>(feeders));
  std::atomic<bool> stop{false};
  std::vector<std::thread> helpers;
  for (unsigned f = 1; f < feeders; ++f)
    helpers.emplace_back([&, f] {
      Feeder& feeder = *feeder_states[f];
      for (;;) {
        step.arrive_and_wait();
        if (stop.load(std::memory_order_acquire)) return;
        for (size_t b = 0; b < batches_per_iteration; ++b) feed_batch(feeder);
        step.arrive_and_wait();
      }
    });

  pipeline.hand_over_in_batches();  // the feeder is a reader: it completes every batch
  const uint64_t cpu_start = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  const uint64_t feeder_cpu_start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const uint64_t cipher_start = cipher_cycles();
  for (auto _ : state) {
    if (feeders > 1) step.arrive_and_wait();
    for (size_t b = 0; b < batches_per_iteration; ++b) feed_batch(*feeder_states[0]);
    if (feeders > 1) step.arrive_and_wait();
    if (++iteration == last) {
      // Last iteration: everything fed must come out (or be counted as dropped) before
      // the clock stops.
      pipeline.wait_idle();
      const uint64_t fed = total_fed();
      const auto deadline = std::chrono::steady_clock::now() + kDrainTimeout;
      while (rig.totals.delivered.packets() + rig.dropped(feeder_drops()) < fed) {
        if (std::chrono::steady_clock::now() > deadline) {
          failed = true;
          break;
        }
        std::this_thread::yield();
      }
    }
  }
  if (feeders > 1) {
    stop.store(true, std::memory_order_release);
    step.arrive_and_wait();
    for (auto& helper : helpers) helper.join();
  }
  const uint64_t fed = total_fed();
  uint64_t wait_ns = 0;
  for (const auto& f : feeder_states) wait_ns = std::max(wait_ns, f->wait_ns);
  const uint64_t feeder_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - feeder_cpu_start;
  const uint64_t cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
  // Workers have finished every packet by now (wait_idle above), and threads that went
  // keep their accounts: the sum covers the whole run.
  const uint64_t cipher_cycles_taken = cipher_cycles() - cipher_start;

  const uint64_t delivered = rig.totals.delivered.packets();
  const uint64_t dropped = rig.dropped(feeder_drops());
  const pl::ReorderStats reorder = rig.reorder_stats();
  if (failed) {
    std::ostringstream message;
    message << "pipeline stalled: fed " << fed << ", delivered " << delivered << ", dropped "
            << dropped << " (" << rig.describe_drops() << " ), reorder late=" << reorder.late
            << " skipped=" << reorder.skipped << " hold_timeouts=" << reorder.hold_timeouts
            << " overflows=" << reorder.overflows;
    for (size_t i = 0; i < rig.inbound.size(); ++i)
      if (const size_t held = rig.inbound[i]->release().held())
        message << " sa" << i << "_held=" << held;
    state.SkipWithError(message.str().c_str());
    return;
  }
  // A packet released "late" (its index skipped after the hold time or on overflow of the
  // reorder window) is the pipeline's documented bound at work, and shows up here as exactly
  // one order violation. Any violation beyond those is a pipeline bug.
  const uint64_t violations = rig.totals.violations.load();
  if (violations > reorder.late || (g_strict_order && violations > 0)) {
    std::ostringstream message;
    message << "order violations: " << violations << " (first on SA "
            << rig.totals.first_violation_sa << "), reorder late=" << reorder.late
            << " skipped=" << reorder.skipped << " hold_timeouts=" << reorder.hold_timeouts
            << " overflows=" << reorder.overflows << ", drops:" << rig.describe_drops();
    state.SkipWithError(message.str().c_str());
    return;
  }
  if (delivered + dropped != fed) {
    std::ostringstream message;
    message << "accounting: fed " << fed << " != delivered " << delivered << " + dropped "
            << dropped;
    state.SkipWithError(message.str().c_str());
    return;
  }

  // Where counted drops happened, next to the figures (the summary shows only the total).
  if (dropped > 0) state.SetLabel("drops:" + rig.describe_drops());
  const double packets = static_cast<double>(delivered);
  state.SetBytesProcessed(static_cast<int64_t>(rig.totals.delivered.bytes()));
  state.SetItemsProcessed(static_cast<int64_t>(delivered));
  using C = benchmark::Counter;
  state.counters["Gbps"] =
      C(static_cast<double>(rig.totals.delivered.bytes()) * 8 / 1e9, C::kIsRate);
  state.counters["Mpps"] = C(packets / 1e6, C::kIsRate);
  // seconds * 1e9 / packets
  state.counters["ns_per_packet"] = C(packets / 1e9, C::kIsRate | C::kInvert);
  // Process CPU time (every thread) per packet, and the part of it the feeder spent
  // (its copy/classify/submit work and its backpressure waits); the rest is the workers'
  // and the gap timer's.
  state.counters["cpu_ns_per_packet"] = C(packets > 0 ? static_cast<double>(cpu_ns) / packets : 0);
  state.counters["feeder_cpu_ns_per_packet"] =
      C(packets > 0 ? static_cast<double>(feeder_cpu_ns) / packets : 0);
  state.counters["worker_cpu_ns_per_packet"] =
      C(packets > 0 ? static_cast<double>(cpu_ns - std::min(cpu_ns, feeder_cpu_ns)) / packets : 0);
  if (g_time_crypto)
    state.counters["crypto_ns_per_packet"] =
        C(packets > 0 ? static_cast<double>(cipher_cycles_taken) /
                            espgw::bench::CryptoClock::instance().ticks_per_ns() / packets
                      : 0);
  state.counters["order_violations"] = C(static_cast<double>(violations));
  state.counters["feeder_wait"] = C(static_cast<double>(wait_ns) / 1e9, C::kIsRate);
  state.counters["drops"] = C(static_cast<double>(dropped));
  state.counters["late"] = C(static_cast<double>(reorder.late));
  state.counters["hold_timeouts"] = C(static_cast<double>(reorder.hold_timeouts));
  state.counters["overflows"] = C(static_cast<double>(reorder.overflows));
  state.counters["workers"] = C(workers);
  state.counters["feeders"] = C(feeders);
  state.counters["sas"] = C(sas);
}

// ---------------------------------------------------------------------------------------
// The floor under the pipeline cases: the same ESP work with no pipeline at all.

// One thread, per packet: copy the inner packet into a buffer (the feeder's copy), encap
// with the engine (esp::encapsulate: sequence number, ESP framing, seal), copy the ESP
// packet into a second buffer (the loopback's copy), decap (SPI lookup, replay check,
// open, commit, trailer, selectors). The SAs are taken in turn (with 64, each packet has
// another SA than the one before, as in the ECMP case), and buffers rotate over one
// run-to-completion batch (Pipeline::kWorkerBatch). What the pipeline adds, queues,
// ordering, classification, pool and sinks, is absent: an inline case's time beyond this
// floor is the pipeline's own, and the floor's ratio to raw is the most any pipeline
// built on this engine can reach in this benchmark.
void engine_floor(benchmark::State& state, uint32_t sas) {
  std::vector<std::unique_ptr<esp::OutboundSa>> outbound;
  esp::InboundSaTable inbound;
  for (uint32_t i = 0; i < sas; ++i) {
    const esp::SaConfig config = make_config(i);
    outbound.push_back(std::make_unique<esp::OutboundSa>(config, crypto::ipsec_mb_backend()));
    inbound.add(std::make_shared<esp::InboundSa>(config, crypto::ipsec_mb_backend()));
  }
  esp::EngineCounters engine;
  constexpr size_t kBuffers = pl::Pipeline::kWorkerBatch;
  std::vector<esp::PacketBuffer> sealed, received;
  for (size_t i = 0; i < kBuffers; ++i) {
    sealed.emplace_back(2048);
    received.emplace_back(2048);
  }
  const std::vector<uint8_t> inner = make_inner_packet();
  size_t next_buffer = 0;
  uint32_t next_sa = 0;
  for (auto _ : state) {
    esp::PacketBuffer& out = sealed[next_buffer];
    esp::PacketBuffer& in = received[next_buffer];
    next_buffer = next_buffer + 1 == kBuffers ? 0 : next_buffer + 1;
    out.assign(inner);
    if (esp::encapsulate(*outbound[next_sa], out, esp::OuterHeaders::omit) !=
        esp::DropReason::none) {
      state.SkipWithError("engine floor: encapsulate failed");
      break;
    }
    next_sa = next_sa + 1 == sas ? 0 : next_sa + 1;
    in.assign(out.bytes());
    if (esp::decapsulate(inbound, engine, in) != esp::DropReason::none || in.size() != kInner) {
      state.SkipWithError("engine floor: decapsulate failed");
      break;
    }
  }
  state.counters["ns_per_packet"] = benchmark::Counter(
      1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["Gbps"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kInner * 8 / 1e9, benchmark::Counter::kIsRate);
}

// ---------------------------------------------------------------------------------------
// ReorderBuffer alone.

constexpr size_t kReorderBatch = 4096;
constexpr size_t kReorderWindow = 64;
constexpr size_t kReorderCapacity = 512;  // PipelineConfig's default reorder_capacity

void reorder_bench(benchmark::State& state, bool shuffled, uint64_t hold_ns) {
  // Offsets within one batch: identity, or a random permutation inside each window of 64.
  std::vector<uint64_t> order(kReorderBatch);
  for (size_t i = 0; i < kReorderBatch; ++i) order[i] = i;
  if (shuffled) {
    std::mt19937_64 random(42);
    for (size_t w = 0; w < kReorderBatch; w += kReorderWindow)
      std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(w),
                   order.begin() + static_cast<std::ptrdiff_t>(w + kReorderWindow), random);
  }
  // The buffer only stores the pointers; they are never dereferenced.
  alignas(64) static uint8_t dummy[64];
  pl::Packet* const fake = reinterpret_cast<pl::Packet*>(dummy);
  pl::ReorderBuffer buffer(kReorderCapacity, hold_ns, 0);
  std::vector<pl::Packet*> out;
  out.reserve(kReorderCapacity + kReorderBatch);
  uint64_t base = 0;
  uint64_t now = 0;  // a fake clock that never lets the hold time expire
  uint64_t released = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < kReorderBatch; ++i) {
      buffer.insert(base + order[i], fake, ++now, out);
      buffer.release(now, out);  // as OrderedRelease::drain does after every insert
      if (out.size() >= kReorderCapacity) {
        released += out.size();
        out.clear();
      }
    }
    base += kReorderBatch;
    benchmark::DoNotOptimize(out.data());
  }
  released += out.size();
  const uint64_t expected = static_cast<uint64_t>(state.iterations()) * kReorderBatch;
  if (released != expected || buffer.held() != 0) {
    state.SkipWithError("reorder buffer lost or held packets");
    return;
  }
  using C = benchmark::Counter;
  state.SetItemsProcessed(static_cast<int64_t>(expected));
  state.counters["ns_per_packet"] = C(static_cast<double>(expected) / 1e9, C::kIsRate | C::kInvert);
}

// ---------------------------------------------------------------------------------------
// Registration, the collecting reporter and the summary.

const std::string kRawName = "raw/AES-128-GCM/roundtrip/1400";
std::string floor_name(uint32_t sas) {
  return "floor/engine_with_copies/sas:" + std::to_string(sas);
}
const char* const kHandoffNames[] = {"handoff/cache_line_round_trip/before_pipeline",
                                     "handoff/cache_line_round_trip/after_pipeline"};
std::string raw_threads_name(unsigned threads) {
  return kRawName + "/parallel:" + std::to_string(threads);
}
constexpr uint32_t kSaCounts[] = {1, 64};
const char* const kReorderNames[] = {"reorder/inbound/in_order", "reorder/inbound/shuffled64",
                                     "reorder/outbound/in_order", "reorder/outbound/shuffled64"};

std::string pipeline_name(uint32_t sas, unsigned workers) {
  // Run to completion is named apart, so that the worker-scaling series stays 1..N.
  return "pipeline/sas:" + std::to_string(sas) +
         (workers == 0 ? std::string("/inline") : "/workers:" + std::to_string(workers));
}
// Several feeders, each running its packets to completion; `reader_per_sa`: on SAs of
// their own.
std::string inline_threads_name(uint32_t sas, unsigned threads, bool reader_per_sa = false) {
  return "pipeline/sas:" + std::to_string(sas) + "/inline_threads:" + std::to_string(threads) +
         (reader_per_sa ? "/reader_per_sa" : "");
}

// The several-feeder cases of a series: n feeders sharing the group's SAs for each n of
// --pipeline_workers above 1, then, where there are SAs enough, n feeders on SAs of their
// own.
std::vector<std::pair<unsigned, bool>> inline_thread_cases(uint32_t sas) {
  std::vector<std::pair<unsigned, bool>> cases;
  for (const bool own : {false, true})
    for (const unsigned n : g_workers)
      if (n > 1 && n <= kMaxFeeders && (!own || sas >= n)) cases.emplace_back(n, own);
  return cases;
}

using espgw::bench::CollectingReporter;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  return line;
}

// With --pipeline_time_crypto: each case's CPU time per packet split into the cipher
// (seal + open, timed around the backend's calls) and the rest (everything the engine and
// the benchmark's copies add). Both are taken in the same interval, so their ratio moves
// less with the host's speed than the ratio to raw, which is measured at another time.
void print_cipher_split(const CollectingReporter& r, std::optional<double> raw_ns,
                        std::ostream& out) {
  std::vector<std::string> names;
  for (const uint32_t sas : kSaCounts) {
    names.push_back(pipeline_name(sas, 0));
    for (const unsigned w : g_workers) names.push_back(pipeline_name(sas, w));
    for (const auto& [n, own] : inline_thread_cases(sas))
      names.push_back(inline_threads_name(sas, n, own));
  }
  bool header = false;
  for (const std::string& name : names) {
    const auto cipher_ns = r.value(name, "crypto_ns_per_packet");
    const auto cpu_ns = r.value(name, "cpu_ns_per_packet");
    if (!cipher_ns || !cpu_ns || *cipher_ns <= 0) continue;
    if (!header) {
      out << "\nCipher time and the rest (--pipeline_time_crypto), CPU ns per packet, all "
             "threads;\ncipher/raw = the cipher's time against raw's whole round trip; "
             "rest/cipher = what the\npipeline and the benchmark's two copies add per ns of "
             "cipher (with workers, their\nwaiting too):\n";
      out << format("  %-44s %8s %9s %8s %10s %11s\n", "case", "cpu_ns", "cipher_ns", "rest_ns",
                    "cipher/raw", "rest/cipher");
      header = true;
    }
    const double rest_ns = *cpu_ns - *cipher_ns;
    out << format("  %-44s %8.1f %9.1f %8.1f %10s %11.3f\n", name.c_str(), *cpu_ns, *cipher_ns,
                  rest_ns, raw_ns ? format("%.3f", *cipher_ns / *raw_ns).c_str() : "-",
                  rest_ns / *cipher_ns);
  }
}

void print_summary(const CollectingReporter& r, std::ostream& out) {
  const int64_t repetitions = r.repetitions();
  const unsigned cpus = std::thread::hardware_concurrency();
  out << "# espgw pipeline: classify -> encrypt -> loopback -> decrypt -> reorder -> deliver\n"
      << "# AES-128-GCM (ipsec-mb), " << kInner << "-byte inner IPv4/UDP, " << kFlows
      << " flows, batch " << g_batch << ", pool " << g_pool << "; "
      << (repetitions > 0 ? "median of " + std::to_string(repetitions) + " repetitions"
                          : std::string("single run"))
      << "; " << cpus << " hardware threads\n";
  const auto raw_ns = r.value(kRawName, "real_ns");
  const auto raw_gbps = r.value(kRawName, "Gbps");
  if (raw_ns && raw_gbps)
    out << format(
        "# raw ipsec-mb, one thread, encrypt + decrypt + tag compare: %.1f ns/packet "
        "= %.2f Gbit/s\n",
        *raw_ns, *raw_gbps);
  for (const unsigned w : g_workers) {
    if (w == 1) continue;
    if (const auto parallel = r.value(raw_threads_name(w), "Gbps"); parallel && raw_gbps)
      out << format(
          "# raw ipsec-mb, %u threads at once: %.2f Gbit/s = %.2fx one thread (the machine's "
          "ceiling for %u workers)\n",
          w, *parallel, *parallel / *raw_gbps, w);
  }
  const auto handoff_before = r.value(kHandoffNames[0], "real_ns");
  const auto handoff_after = r.value(kHandoffNames[1], "real_ns");
  if (handoff_before && handoff_after)
    out << format(
        "# cache line bounced between two threads (the hand-off to a worker and back): %.0f ns "
        "per round trip\n# before the pipeline cases, %.0f ns after (this VM: ~75-110 when the "
        "host runs both vCPUs on one cache, ~360-380 when not)\n",
        *handoff_before, *handoff_after);
  out << "# scaling = Gbit/s(n) / (n * Gbit/s(1));  of_raw = Gbit/s / (raw Gbit/s * n);  "
         "of_ceiling = Gbit/s / raw Gbit/s with n threads at once\n"
         "# cpu_ns = process CPU (all threads) per packet; wcpu_ns = the same without the "
         "feeder thread\n"
         "# cpu_eff = raw ns / cpu_ns;  wcpu_eff = raw ns / wcpu_ns (the pipeline's own "
         "efficiency)\n"
         "# feeder_wait = share of wall time the feeder waited on backpressure; late = packets "
         "the bounded\n# reorder buffer released after giving up their gap (hold time or "
         "window overflow)\n";
  out << "# inline = no workers (PipelineConfig::run_to_completion): the feeder runs every "
         "packet to completion\n# itself; its of_raw compares with raw in one thread\n"
         "# inl xN = N feeders at once, each running its own packets to completion (the "
         "gateway's readers\n# without workers); scaling = Gbit/s(N) / (N * inline Gbit/s), "
         "of_ceiling against raw in N threads\n"
         "# own xN = the same, each feeder's flows over SAs of its own (feeder f: the SAs s with "
         "s % N == f):\n# no SA shared between threads, as inbound where one WAN reader reads "
         "each peer\n";
  out << "# NOTE: the feeder (the benchmark thread: copy + classify + submit) is a busy thread "
         "besides the W workers.\n# With W + 1 > "
      << cpus
      << " hardware threads the machine is oversubscribed: feeder and workers share cores, "
         "so\n# real-time scaling understates the pipeline; compare wcpu_ns with raw ns. A "
         "feeder_wait near 0\n# means the single feeder, not the workers, bounded throughput.\n";
  for (const uint32_t sas : kSaCounts) {
    out << "\nSAs: " << sas << (sas == 1 ? " (a group of one)" : " (one group, ECMP by flow)")
        << "\n";
    if (const auto floor_ns = r.value(floor_name(sas), "real_ns"); floor_ns && raw_ns) {
      const auto inline_ns = r.value(pipeline_name(sas, 0), "cpu_ns_per_packet");
      out << format(
          "floor (no pipeline: engine encap + decap and the two copies, one thread): %.1f ns "
          "= %.3f of raw; inline's time beyond it: %s\n",
          *floor_ns, *raw_ns / *floor_ns,
          inline_ns ? format("%.1f ns", *inline_ns - *floor_ns).c_str() : "-");
    }
    out << format("%7s %8s %7s %8s %8s %8s %8s %7s %10s %8s %8s %11s %6s %5s\n", "workers",
                  "Gbit/s", "Mpps", "real_ns", "cpu_ns", "wcpu_ns", "scaling", "of_raw",
                  "of_ceiling", "cpu_eff", "wcpu_eff", "feeder_wait", "drops", "late");
    std::optional<double> base;
    std::vector<unsigned> cases = g_workers;
    cases.insert(cases.begin(), 0);
    for (const unsigned w : cases) {
      const std::string name = pipeline_name(sas, w);
      const std::string label = w == 0 ? std::string("inline") : std::to_string(w);
      if (const auto e = r.errors().find(name); e != r.errors().end()) {
        out << format("%7s ERROR: %s\n", label.c_str(), e->second.c_str());
        continue;
      }
      const auto gbps = r.value(name, "Gbps");
      if (!gbps) continue;
      if (w == 1) base = gbps;
      // Run to completion is one thread (the feeder): compared with raw in one thread.
      const unsigned threads = std::max(w, 1u);
      const double cpu_ns = r.value(name, "cpu_ns_per_packet").value_or(0);
      const double wcpu_ns = r.value(name, "worker_cpu_ns_per_packet").value_or(0);
      const auto ratio = [](std::optional<double> num, std::optional<double> den) {
        return num && den && *den > 0 ? format("%.3f", *num / *den) : std::string("-");
      };
      const auto ceiling = threads == 1 ? raw_gbps : r.value(raw_threads_name(w), "Gbps");
      out << format(
          "%7s %8.2f %7.3f %8.1f %8.1f %8.1f %8s %7s %10s %8s %8s %11.3f %6.0f %5.0f\n",
          label.c_str(), *gbps, r.value(name, "Mpps").value_or(0),
          r.value(name, "ns_per_packet").value_or(0), cpu_ns, wcpu_ns,
          w == 0 ? "-"
                 : ratio(gbps, base ? std::optional<double>(*base * w) : std::nullopt).c_str(),
          ratio(gbps, raw_gbps ? std::optional<double>(*raw_gbps * threads) : std::nullopt).c_str(),
          ratio(gbps, ceiling).c_str(), ratio(raw_ns, cpu_ns).c_str(),
          w == 0 ? "-" : ratio(raw_ns, wcpu_ns).c_str(), r.value(name, "feeder_wait").value_or(0),
          r.value(name, "drops").value_or(0), r.value(name, "late").value_or(0));
    }
    // Readers running to completion: n threads each copy, classify, encrypt, loop back,
    // decrypt and deliver their own packets; scaling is against the single inline thread.
    const auto inline_gbps = r.value(pipeline_name(sas, 0), "Gbps");
    for (const auto& [n, own] : inline_thread_cases(sas)) {
      const std::string name = inline_threads_name(sas, n, own);
      const std::string label = (own ? "own x" : "inl x") + std::to_string(n);
      if (const auto e = r.errors().find(name); e != r.errors().end()) {
        out << format("%7s ERROR: %s\n", label.c_str(), e->second.c_str());
        continue;
      }
      const auto gbps = r.value(name, "Gbps");
      if (!gbps) continue;
      const double cpu_ns = r.value(name, "cpu_ns_per_packet").value_or(0);
      const auto ratio = [](std::optional<double> num, std::optional<double> den) {
        return num && den && *den > 0 ? format("%.3f", *num / *den) : std::string("-");
      };
      out << format(
          "%7s %8.2f %7.3f %8.1f %8.1f %8s %8s %7s %10s %8s %8s %11.3f %6.0f %5.0f\n",
          label.c_str(), *gbps, r.value(name, "Mpps").value_or(0),
          r.value(name, "ns_per_packet").value_or(0), cpu_ns, "-",
          ratio(gbps, inline_gbps ? std::optional<double>(*inline_gbps * n) : std::nullopt).c_str(),
          ratio(gbps, raw_gbps ? std::optional<double>(*raw_gbps * n) : std::nullopt).c_str(),
          ratio(gbps, r.value(raw_threads_name(n), "Gbps")).c_str(), ratio(raw_ns, cpu_ns).c_str(),
          "-", r.value(name, "feeder_wait").value_or(0), r.value(name, "drops").value_or(0),
          r.value(name, "late").value_or(0));
    }
  }
  print_cipher_split(r, raw_ns, out);
  out << "\nReorderBuffer alone (one thread, capacity " << kReorderCapacity
      << ", insert + release per packet):\n";
  for (const char* name : kReorderNames)
    if (const auto ns = r.value(name, "ns_per_packet"))
      out << format("  %-30s %8.2f ns/packet\n", name, *ns);
}

bool parse_unsigned(std::string_view text, unsigned long& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  const std::string s(text);
  value = std::strtoul(s.c_str(), &end, 10);
  return end != nullptr && *end == '\0';
}

// Takes our own --pipeline_* flags out of argv; returns false on a malformed one.
bool parse_own_flags(int& argc, char** argv, std::string& summary_out) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&] { return arg.substr(arg.find('=') + 1); };
    unsigned long n = 0;
    if (arg.starts_with("--pipeline_summary_out=")) {
      summary_out = std::string(value());
    } else if (arg.starts_with("--pipeline_workers=")) {
      std::string_view list = value();
      while (!list.empty()) {
        const size_t comma = list.find(',');
        if (!parse_unsigned(list.substr(0, comma), n) || n == 0 || n > 1024) {
          std::cerr << "--pipeline_workers: a comma-separated list of positive numbers\n";
          return false;
        }
        g_workers.push_back(static_cast<unsigned>(n));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
    } else if (arg.starts_with("--pipeline_batch=")) {
      if (!parse_unsigned(value(), n) || n == 0) {
        std::cerr << "--pipeline_batch must be a positive number\n";
        return false;
      }
      g_batch = n;
    } else if (arg.starts_with("--pipeline_pool=")) {
      if (!parse_unsigned(value(), n) || n < 1024) {
        std::cerr << "--pipeline_pool must be at least 1024\n";
        return false;
      }
      g_pool = n;
    } else if (arg.starts_with("--pipeline_reorder_hold_us=")) {
      if (!parse_unsigned(value(), n) || n == 0) {
        std::cerr << "--pipeline_reorder_hold_us must be a positive number\n";
        return false;
      }
      g_reorder_hold_us = static_cast<unsigned>(n);
    } else if (arg.starts_with("--pipeline_assist=")) {
      g_assist_threshold =
          std::stoul(std::string(arg.substr(std::string_view("--pipeline_assist=").size())));
    } else if (arg.starts_with("--pipeline_reorder_capacity=")) {
      if (!parse_unsigned(value(), n) || n == 0) {
        std::cerr << "--pipeline_reorder_capacity must be a positive number\n";
        return false;
      }
      g_reorder_capacity = n;
    } else if (arg == "--pipeline_time_crypto") {
      g_time_crypto = true;
    } else if (arg == "--pipeline_strict_order") {
      g_strict_order = true;
    } else if (arg == "--pipeline_pin") {
      g_pin = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string summary_out;
  if (!parse_own_flags(argc, argv, summary_out)) return 2;
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  if (g_workers.empty()) {
    const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned w = 1; w <= cpus; ++w) g_workers.push_back(w);
  }
  std::sort(g_workers.begin(), g_workers.end());
  g_workers.erase(std::unique(g_workers.begin(), g_workers.end()), g_workers.end());
  if (g_workers.front() != 1) g_workers.insert(g_workers.begin(), 1);  // scaling needs 1

  raw_manager();
  benchmark::AddCustomContext("ipsec_mb_version", imb_get_version_str());
  benchmark::AddCustomContext("ipsec_mb_arch", arch_name(g_arch));
  benchmark::AddCustomContext("espgw_backend", std::string(crypto::ipsec_mb_backend().name()));
  benchmark::AddCustomContext("pipeline_batch", std::to_string(g_batch));
  benchmark::AddCustomContext("pipeline_pool", std::to_string(g_pool));
  benchmark::AddCustomContext("pipeline_feeder",
                              "one feeder thread (the benchmark thread) besides the workers");

  benchmark::RegisterBenchmark(kRawName.c_str(), raw_roundtrip)->UseRealTime();
  for (const unsigned w : g_workers)
    if (w > 1)
      benchmark::RegisterBenchmark(raw_threads_name(w).c_str(), raw_roundtrip)
          ->Threads(static_cast<int>(w))
          ->UseRealTime();
  for (const uint32_t sas : kSaCounts)
    benchmark::RegisterBenchmark(floor_name(sas).c_str(), engine_floor, sas)->UseRealTime();
  benchmark::RegisterBenchmark(kHandoffNames[0], handoff_round_trip)->UseRealTime();
  for (const uint32_t sas : kSaCounts) {
    std::vector<unsigned> cases = g_workers;
    cases.insert(cases.begin(), 0);  // run to completion: the feeder alone
    for (const unsigned w : cases)
      benchmark::RegisterBenchmark(pipeline_name(sas, w).c_str(), pipeline_bench, sas, w, 1u, false)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    for (const auto& [n, own] : inline_thread_cases(sas))
      benchmark::RegisterBenchmark(inline_threads_name(sas, n, own).c_str(), pipeline_bench, sas,
                                   0u, n, own)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
  }
  benchmark::RegisterBenchmark(kHandoffNames[1], handoff_round_trip)->UseRealTime();
  const uint64_t hold_ns = 1'000'000;  // PipelineConfig's default reorder_hold, 1 ms
  benchmark::RegisterBenchmark(kReorderNames[0], reorder_bench, false, hold_ns)->UseRealTime();
  benchmark::RegisterBenchmark(kReorderNames[1], reorder_bench, true, hold_ns)->UseRealTime();
  benchmark::RegisterBenchmark(kReorderNames[2], reorder_bench, false, uint64_t{0})->UseRealTime();
  benchmark::RegisterBenchmark(kReorderNames[3], reorder_bench, true, uint64_t{0})->UseRealTime();

  CollectingReporter reporter(benchmark::CreateDefaultDisplayReporter());
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::cout << "\n";
  print_summary(reporter, std::cout);
  if (!summary_out.empty()) {
    std::ofstream file(summary_out);
    print_summary(reporter, file);
    if (!file) {
      std::cerr << "cannot write " << summary_out << "\n";
      return 1;
    }
  }
  benchmark::Shutdown();
  return 0;
}

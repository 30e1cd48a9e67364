// The pipeline benchmark's baselines: raw ipsec-mb, a cache line bounced between two
// threads, the engine with no pipeline, and the reorder buffer alone.
#include "pipeline_bench_common.h"

namespace pipeline_benchmark {

// ---------------------------------------------------------------------------------------
// Raw ipsec-mb baseline.

// The first thread to ask reuses the manager created at start-up; every other thread gets
// its own (one manager per thread, as ipsec-mb requires).
bool state_is_first_thread() {
  static std::atomic<bool> taken{false};
  return !taken.exchange(true);
}

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
// trip). Handing a packet to a worker and getting it back moves lines like this, and on a
// VM the cost depends on where the host runs the two vCPUs (several times more when they
// share no cache), which can change while a benchmark runs. So it is measured before and after the
// pipeline cases, and the worker cases are read against it.

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
  // The fastest of chunks of 256 round trips as well: on a busy machine the median
  // includes the times either thread was descheduled, which is no transfer cost.
  constexpr uint64_t kChunk = 256;
  uint64_t fastest = UINT64_MAX;
  uint64_t in_chunk = 0;
  uint64_t chunk_start = espgw::clock_ns(CLOCK_MONOTONIC);
  for (auto _ : state) {
    turn.store(1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 0) {
    }
    if (++in_chunk == kChunk) {
      const uint64_t now = espgw::clock_ns(CLOCK_MONOTONIC);
      fastest = std::min(fastest, (now - chunk_start) / kChunk);
      chunk_start = now;
      in_chunk = 0;
    }
  }
  turn.store(-1, std::memory_order_release);
  partner.join();
  if (fastest != UINT64_MAX) state.counters["fastest_ns"] = static_cast<double>(fastest);
}

// ---------------------------------------------------------------------------------------
// The floor under the pipeline cases: the same ESP work with no pipeline at all.

// One thread, per packet: copy the inner packet into a buffer (the feeder's copy), encap
// with the engine (test::encapsulate: sequence number, ESP framing, seal), copy the ESP
// packet into a second buffer (the loopback's copy), decap (SPI lookup, replay check,
// open, commit, trailer, selectors). The SAs are taken in turn (with 64, each packet has
// another SA than the one before, as in the ECMP case), and buffers rotate over one
// run-to-completion batch (Pipeline::kWorkerBatch). What the pipeline adds, queues,
// ordering, classification, pool and sinks, is absent: an inline case's time beyond this
// floor is the pipeline's own, and the floor's ratio to raw is the most any pipeline
// built on this engine can reach in this benchmark.
void engine_floor(benchmark::State& state, uint32_t sas) {
  std::vector<std::unique_ptr<esp::OutboundSa>> outbound;
  test::InboundSaTable inbound;
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
    if (test::encapsulate(*outbound[next_sa], out, esp::OuterHeaders::omit) !=
        esp::DropReason::none) {
      state.SkipWithError("engine floor: encapsulate failed");
      break;
    }
    next_sa = next_sa + 1 == sas ? 0 : next_sa + 1;
    in.assign(out.bytes());
    if (test::decapsulate(inbound, engine, in) != esp::DropReason::none || in.size() != kInner) {
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

}  // namespace pipeline_benchmark

// The pipeline benchmark's main cases: feeders -> outbound pipeline -> loopback ->
// inbound pipeline -> sinks that check the order, all in one process.
#include "pipeline_bench_common.h"

namespace pipeline_benchmark {

// ---------------------------------------------------------------------------------------
// The pipeline.

// What the inbound sinks delivered, counted per delivering thread: one shared count would
// move its cache line between the CPUs once per delivery (a packet, with 64 SAs), and the
// several-thread cases would measure the benchmark's counting more than the pipeline.
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
  // One feeder's read batch: g_batch packets, then end_read_batch().
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
          pipeline.end_read_batch();  // without workers, the feeder frees the packets
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
      // As the gateway classifies: the flow key (which it looks the policy up by), then the
      // flow hash of that key when the group has a choice.
      const auto flow = packet::flow_key(packet->buffer.bytes());
      pl::OutboundChannel* channel = group_of(feeder.index).pick_for_packet(*flow, kFlowSeed);
      // Per-SA backpressure: wait rather than have the packet dropped as queue-full (with
      // several feeders one may still be; it is counted like any drop). The bound counts
      // the packets readers hold unnumbered and the places they reserved.
      if (channel->committed_in_flight() >= channel->max_in_flight()) {
        const auto t0 = wait_start();
        do {
          pipeline.end_read_batch();
          std::this_thread::yield();
        } while (channel->committed_in_flight() >= channel->max_in_flight());
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
    pipeline.end_read_batch();  // the end of a "read batch"
  };

  // The other feeders run an iteration's batches between two barriers, in step with the
  // benchmark thread (feeder 0). Many batches per iteration keep the barriers' cost small
  // next to the work: at a barrier every feeder waits for the slowest, so on a shared host
  // one feeder descheduled for a moment stalls the others too, which raw ipsec-mb's
  // threads (no barrier within a run) never pay. 16 batches cost two feeders on SAs of
  // their own about a sixth of their speed-up (bench/results/sharing_step_experiment.txt).
  const size_t batches_per_iteration = feeders == 1 ? 1 : 512;
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

  pipeline.register_reader();  // the feeder is a reader: it completes every batch
  namespace serial = espgw::serial_sections;
  if (g_time_serial) serial::reset();
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
  const serial::Totals serial_totals = g_time_serial ? serial::totals() : serial::Totals{};

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
  if (g_time_serial && packets > 0) {
    const double ticks_per_ns = serial::ticks_per_ns();
    for (size_t s = 0; s < serial::kSections; ++s) {
      const std::string prefix =
          std::string("serial_") + serial::name(static_cast<serial::Section>(s)) + "_";
      state.counters[prefix + "hold_ns"] =
          C(static_cast<double>(serial_totals.hold_cycles[s]) / ticks_per_ns / packets);
      state.counters[prefix + "acquire_ns"] =
          C(static_cast<double>(serial_totals.acquire_cycles[s]) / ticks_per_ns / packets);
      state.counters[prefix + "handovers"] =
          C(static_cast<double>(serial_totals.handovers[s]) / packets);
      state.counters[prefix + "entries"] =
          C(static_cast<double>(serial_totals.entries[s]) / packets);
    }
  }
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

}  // namespace pipeline_benchmark

// Parallel pipeline benchmark: the whole in-memory data path of the gateway, through the
// real esp_engine/pipeline code, against raw ipsec-mb measured in the same binary.
//
//   feeder (the benchmark thread)
//     acquire a Packet (nullptr = backpressure: yield and retry), copy a 1400-byte inner
//     IPv4/UDP packet in, classify it as the gateway does (packet::flow_key, then
//     SaGroup::pick_for_packet: flow_hash of the key when the group has a choice), write a
//     per-SA counter into the UDP payload,
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
//   --pipeline_sas=LIST          SA counts of the pipeline cases, e.g. 1,2,4 (default 1,64)
//   --pipeline_batch=N           packets fed per iteration (default 256)
//   --pipeline_pool=N            pool packets (default 8192)
//   --pipeline_reorder_hold_us=N inbound reorder hold time (default: the pipeline's 1000)
//   --pipeline_reorder_capacity=N inbound reorder window per SA (default: the pipeline's 512)
//   --pipeline_assist=N          submitter assist threshold (0: off; default: the pipeline's)
//   --pipeline_pin               pin workers to CPUs (PipelineConfig::pin_workers)
//   --pipeline_time_serial       time the sections one SA serialises (util/serial_sections.h):
//                                counters serial_<section>_{hold_ns,acquire_ns,handovers}
//                                per packet, and a summary table with the serial time per
//                                packet and the speed-up it allows on more cores (Amdahl)
//   --pipeline_transfer_ns=N     the cache-line transfer the serial model assumes (default:
//                                half the fastest bounce round trip of the run)
//   --pipeline_strict_order      fail on any order violation, even one the reorder buffer
//                                accounts for as a late release (see below)
//   --pipeline_time_crypto       time every seal and open (bench/timed_crypto.h): counter
//                                crypto_ns_per_packet, and a summary table splitting each
//                                case's CPU time into the cipher and the rest
#include "pipeline_bench_common.h"

using namespace pipeline_benchmark;

namespace {

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
    } else if (arg.starts_with("--pipeline_sas=")) {
      std::string_view list = value();
      while (!list.empty()) {
        const size_t comma = list.find(',');
        if (!parse_unsigned(list.substr(0, comma), n) || n == 0 || n > 4096) {
          std::cerr << "--pipeline_sas: a comma-separated list of SA counts (1..4096)\n";
          return false;
        }
        g_sa_counts.push_back(static_cast<uint32_t>(n));
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
    } else if (arg.starts_with("--pipeline_transfer_ns=")) {
      if (!parse_unsigned(value(), n) || n == 0) {
        std::cerr << "--pipeline_transfer_ns must be a positive number\n";
        return false;
      }
      g_transfer_ns = static_cast<double>(n);
    } else if (arg == "--pipeline_time_serial") {
      g_time_serial = true;
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
  if (g_sa_counts.empty()) g_sa_counts = {1, 64};
  std::sort(g_sa_counts.begin(), g_sa_counts.end());
  g_sa_counts.erase(std::unique(g_sa_counts.begin(), g_sa_counts.end()), g_sa_counts.end());
  std::sort(g_workers.begin(), g_workers.end());
  g_workers.erase(std::unique(g_workers.begin(), g_workers.end()), g_workers.end());
  if (g_workers.front() != 1) g_workers.insert(g_workers.begin(), 1);  // scaling needs 1

  if (g_time_serial) espgw::serial_sections::set_enabled(true);
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
  for (const uint32_t sas : g_sa_counts)
    benchmark::RegisterBenchmark(floor_name(sas).c_str(), engine_floor, sas)->UseRealTime();
  benchmark::RegisterBenchmark(kHandoffNames[0], handoff_round_trip)->UseRealTime();
  for (const uint32_t sas : g_sa_counts) {
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

// The pipeline benchmark's summary: throughput, scaling and efficiency against raw
// ipsec-mb, from the collecting reporter.
#include "pipeline_bench_common.h"

namespace pipeline_benchmark {

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
  for (const uint32_t sas : g_sa_counts) {
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

// Threads sharing one SA (or one ECMP group) against threads on SAs of their own, and
// those against raw ipsec-mb's own speed-up in as many threads, all from this run.
void print_sharing(const CollectingReporter& r, std::ostream& out) {
  const auto gbps = [&](const std::string& name) { return r.value(name, "Gbps"); };
  const auto raw1 = gbps(kRawName);
  bool header = false;
  for (const unsigned n : g_workers) {
    if (n < 2) continue;
    const auto line = [&](const std::string& what, std::optional<double> num,
                          std::optional<double> den, const char* target) {
      if (!num || !den || *den <= 0) return;
      if (!header) {
        out << "\nSharing and parallel efficiency (readers running to completion, this run):\n";
        header = true;
      }
      out << format("  %-64s %6.3f  (target %s)\n", what.c_str(), *num / *den, target);
    };
    const std::string ns = std::to_string(n);
    // One SA shared by n readers, against n readers with an SA each.
    const auto own_n = gbps(inline_threads_name(n, n, true));
    line(ns + " readers sharing 1 SA / " + ns + " readers on an SA each",
         gbps(inline_threads_name(1, n, false)), own_n, ">= 0.9");
    for (const uint32_t sas : g_sa_counts)
      if (sas > n && sas <= 16)
        line(ns + " readers sharing a group of " + std::to_string(sas) + " / the " +
                 std::to_string(sas) + " SAs split among them",
             gbps(inline_threads_name(sas, n, false)), gbps(inline_threads_name(sas, n, true)),
             ">= 0.9");
    // Parallel efficiency: the readers' speed-up over one reader on one SA, against raw's.
    const auto one = gbps(pipeline_name(1, 0));
    const auto raw_n = gbps(raw_threads_name(n));
    if (own_n && one && raw_n && raw1 && *one > 0 && *raw1 > 0)
      line(ns + " readers on an SA each: speed-up " + format("%.2f", *own_n / *one) + " / raw's " +
               format("%.2f", *raw_n / *raw1),
           *own_n / *one, *raw_n / *raw1, ">= 0.9");
  }
}

// --pipeline_time_serial: the time per packet that one SA serialises, and the speed-up
// it allows on N cores. Model: each reader's own work runs in parallel; what an SA's
// sections hold (their hold time), and one cache-line transfer each time a section
// passes to another core, does not. With N readers interleaving on one SA a section's
// next entry is another core's with probability (N - 1) / N, so per packet
//   s(N) = sum of hold + sum of entries * (N - 1) / N * transfer
//   speed-up(N) = T1 / (s(N) + (T1 - hold) / N)
// (Amdahl with the coherence cost of the sections counted serial). T1 and the sections
// come from the one-reader case (uncontended, so timing and entry counts are not the
// contention's), but for the sequence number: a reader alone on an SA takes it per packet
// on lines no other core touches, readers that share the SA per batch, so its hold and
// entries come from two readers sharing the SA where that case ran. The transfer is half
// the measured bounce round trip, or --pipeline_transfer_ns.
void print_serial(const CollectingReporter& r, std::ostream& out) {
  namespace serial = espgw::serial_sections;
  const auto handoff = r.value(kHandoffNames[1], "fastest_ns");
  const double transfer_ns = g_transfer_ns ? *g_transfer_ns : handoff ? *handoff / 2 : 0;
  bool header = false;
  for (const uint32_t sas : g_sa_counts) {
    std::vector<std::string> names{pipeline_name(sas, 0)};
    for (const auto& [n, own] : inline_thread_cases(sas))
      names.push_back(inline_threads_name(sas, n, own));
    for (const std::string& name : names) {
      if (!r.value(name, "serial_sequence_hold_ns")) continue;
      if (!header) {
        out << format(
            "\nSerial sections per packet (--pipeline_time_serial): hold ns / entries / "
            "hand-overs seen;\none cache-line transfer = %.0f ns%s. Model for the one-reader "
            "rows: s(N) = hold + entries *\n(N-1)/N * transfer, speed-up(N) = T1 / (s(N) + "
            "(T1 - hold) / N), T1 = the reader's CPU ns per packet;\nthe sequence section "
            "as two readers sharing the SA take it (per batch), where that case ran:\n",
            transfer_ns,
            g_transfer_ns ? " (--pipeline_transfer_ns)" : " (half the fastest bounce round trip)");
        out << format("  %-48s", "case");
        for (size_t s = 0; s < serial::kSections; ++s)
          out << format(" %24s", serial::name(static_cast<serial::Section>(s)));
        out << format(" %6s %6s %6s %6s %6s %6s %6s %6s\n", "hold", "T1", "s(64)", "N=2", "N=4",
                      "N=8", "N=16", "N=64");
        header = true;
      }
      out << format("  %-48s", name.c_str());
      double hold_ns = 0;
      double entries = 0;
      for (size_t s = 0; s < serial::kSections; ++s) {
        const std::string prefix =
            std::string("serial_") + serial::name(static_cast<serial::Section>(s)) + "_";
        const double hold = r.value(name, prefix + "hold_ns").value_or(0);
        const double entered = r.value(name, prefix + "entries").value_or(0);
        hold_ns += hold;
        entries += entered;
        out << format(" %7.1f / %6.3f / %5.3f", hold, entered,
                      r.value(name, prefix + "handovers").value_or(0));
      }
      const auto t1 = r.value(name, "cpu_ns_per_packet");
      if (name != pipeline_name(sas, 0) || !t1) {
        out << format(" %6.1f\n", hold_ns);
        continue;
      }
      const std::string shared = inline_threads_name(sas, 2, false);
      const std::string sequence =
          std::string("serial_") + serial::name(serial::Section::sequence) + "_";
      if (const auto shared_hold = r.value(shared, sequence + "hold_ns")) {
        hold_ns += *shared_hold - r.value(name, sequence + "hold_ns").value_or(0);
        entries += r.value(shared, sequence + "entries").value_or(0) -
                   r.value(name, sequence + "entries").value_or(0);
      }
      const auto serial_ns = [&](double cores) {
        return hold_ns + entries * (cores - 1) / cores * transfer_ns;
      };
      out << format(" %6.1f %6.1f %6.1f", hold_ns, *t1, serial_ns(64));
      for (const double cores : {2.0, 4.0, 8.0, 16.0, 64.0})
        out << format(" %6.2f", *t1 / (serial_ns(cores) + (*t1 - hold_ns) / cores));
      out << "\n";
    }
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
  for (const uint32_t sas : g_sa_counts) {
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
  print_sharing(r, out);
  print_serial(r, out);
  print_cipher_split(r, raw_ns, out);
  out << "\nReorderBuffer alone (one thread, capacity " << kReorderCapacity
      << ", insert + release per packet):\n";
  for (const char* name : kReorderNames)
    if (const auto ns = r.value(name, "ns_per_packet"))
      out << format("  %-30s %8.2f ns/packet\n", name, *ns);
}

}  // namespace pipeline_benchmark

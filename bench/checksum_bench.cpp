// The Internet checksum that completes every TCP segment cut from a TSO super-packet and
// checks every segment the TUN writer coalesces (5.6% of all CPU samples in the
// site-to-site profile, docs/performance.md): espgw's checksum_add (AVX2 where the CPU has
// it) and its portable loop against RFC 1071's definition written the obvious way
// (big-endian 16-bit words), measured in the same run. Prints, per size, the median time of
// each and the speedups over the definition.
//
//   espgw_checksum_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/collecting_reporter.h"
#include "esp/checksum.h"
#include "support/rfc1071_checksum.h"

namespace {

constexpr size_t kSizes[] = {40, 1460, 8960};  // a TCP/IP header, a segment, a jumbo segment

std::vector<uint8_t> payload(size_t size) {
  std::vector<uint8_t> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  return data;
}

template <uint32_t (*Sum)(uint32_t, const uint8_t*, size_t)>
void checksum(benchmark::State& state, size_t size) {
  const auto data = payload(size);
  for (auto _ : state) {
    uint32_t sum = Sum(0, data.data(), data.size());
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
}

std::string name(const char* which, size_t size) {
  return std::string("checksum/") + which + "/" + std::to_string(size);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  for (const size_t size : kSizes) {
    benchmark::RegisterBenchmark(name("rfc1071", size).c_str(), checksum<espgw::test::rfc1071_sum>,
                                 size);
    benchmark::RegisterBenchmark(name("portable", size).c_str(),
                                 checksum<espgw::esp::checksum_add_portable>, size);
    benchmark::RegisterBenchmark(name("espgw", size).c_str(), checksum<espgw::esp::checksum_add>,
                                 size);
  }
  benchmark::ConsoleReporter display;
  espgw::bench::CollectingReporter reporter(&display);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf(
      "\nsize  rfc1071 ns  portable ns  espgw ns  portable speedup  espgw speedup (medians)\n");
  for (const size_t size : kSizes) {
    const auto reference = reporter.value(name("rfc1071", size), "real_ns");
    const auto portable = reporter.value(name("portable", size), "real_ns");
    const auto espgw = reporter.value(name("espgw", size), "real_ns");
    if (!reference || !portable || !espgw) continue;
    std::printf("%4zu  %10.1f  %11.1f  %8.1f  %15.2fx  %12.2fx\n", size, *reference, *portable,
                *espgw, *reference / *portable, *reference / *espgw);
  }
  benchmark::Shutdown();
  return 0;
}

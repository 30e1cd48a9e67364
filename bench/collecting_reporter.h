// A Google Benchmark reporter shared by the benchmarks: it passes every run on to the
// display reporter and keeps each benchmark's counters (and its real time per iteration,
// as "real_ns") so that a benchmark can print ratios against a baseline measured in the
// same run. With repetitions it keeps the "median" aggregate; without, the median of the
// individual runs.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace espgw::bench {

inline double to_ns(double value, benchmark::TimeUnit unit) {
  switch (unit) {
    case benchmark::kNanosecond:
      return value;
    case benchmark::kMicrosecond:
      return value * 1e3;
    case benchmark::kMillisecond:
      return value * 1e6;
    case benchmark::kSecond:
      return value * 1e9;
  }
  return value;
}

// Passes everything to the display reporter and keeps, per benchmark, the counters of the
// "median" aggregate (with repetitions) or of the individual runs (their median is taken).
class CollectingReporter final : public benchmark::BenchmarkReporter {
 public:
  explicit CollectingReporter(benchmark::BenchmarkReporter* display) : display_(display) {}

  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }

  void ReportRuns(const std::vector<Run>& runs) override {
    // Inverted rates would print with an "s" unit ("71.3s"); their values are final by now.
    std::vector<Run> shown = runs;
    for (Run& run : shown)
      for (auto& [name, counter] : run.counters)
        if (counter.flags & benchmark::Counter::kInvert)
          counter.flags = benchmark::Counter::kDefaults;
    display_->ReportRuns(shown);
    for (const Run& run : runs) {
      if (run.error_occurred) {
        errors_[run.run_name.function_name] = run.error_message;
        continue;
      }
      Samples& samples = samples_[run.run_name.function_name];
      std::map<std::string, double> values;
      for (const auto& [name, counter] : run.counters) values[name] = counter.value;
      values["real_ns"] = to_ns(run.GetAdjustedRealTime(), run.time_unit);
      if (run.run_type == Run::RT_Aggregate) {
        if (run.aggregate_name == "median") {
          for (const auto& [name, value] : values) samples.median[name] = value;
          samples.repetitions = run.repetitions;
        }
      } else {
        samples.runs.push_back(std::move(values));
      }
    }
  }

  void Finalize() override { display_->Finalize(); }

  std::optional<double> value(const std::string& benchmark, const std::string& counter) const {
    const auto it = samples_.find(benchmark);
    if (it == samples_.end()) return std::nullopt;
    const auto m = it->second.median.find(counter);
    if (m != it->second.median.end()) return m->second;
    std::vector<double> values;
    for (const auto& run : it->second.runs)
      if (const auto v = run.find(counter); v != run.end()) values.push_back(v->second);
    if (values.empty()) return std::nullopt;
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  }

  int64_t repetitions() const {
    int64_t r = 0;
    for (const auto& [name, samples] : samples_) r = std::max(r, samples.repetitions);
    return r;
  }
  const std::map<std::string, std::string>& errors() const { return errors_; }

 private:
  struct Samples {
    std::map<std::string, double> median;
    int64_t repetitions = 0;
    std::vector<std::map<std::string, double>> runs;
  };
  benchmark::BenchmarkReporter* display_;
  std::map<std::string, Samples> samples_;
  std::map<std::string, std::string> errors_;
};

}  // namespace espgw::bench

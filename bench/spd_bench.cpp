// SPD lookup cost against the number of policies: xfrm::Spd (its index, with each
// thread's flow cache in front) against the plain ordered list it replaced
// (tests/support/linear_spd.h, under the same shared lock), in the same run. n tunnels
// (1, 100, 1,000, 10,000), each an out policy from 10.1.0.0/16 to a /24 of its own, behind
// them a catch-all discard. Two traffic mixes: 16 flows (a few busy tunnels: the flow
// cache answers) and 4,096 flows spread over all tunnels (more than the cache holds: the
// index answers most). Prints the median time per lookup of each and the ratio.
//
//   espgw_spd_bench --benchmark_repetitions=3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <string>
#include <vector>

#include "bench/collecting_reporter.h"
#include "support/linear_spd.h"
#include "xfrm/spd.h"
#include "xfrm/writer_preferring_mutex.h"

namespace {

namespace esp = espgw::esp;
using espgw::packet::FlowKey;
using espgw::xfrm::Direction;
using espgw::xfrm::Policy;

constexpr size_t kTunnels[] = {1, 100, 1000, 10000};
constexpr size_t kFlowMixes[] = {16, 4096};

esp::IpAddress address(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  esp::IpAddress address;
  address.family = 4;
  address.bytes[0] = a;
  address.bytes[1] = b;
  address.bytes[2] = c;
  address.bytes[3] = d;
  return address;
}

// Tunnel i's remote subnet: 10.(16 + i / 256).(i % 256).0/24.
esp::IpAddress remote_host(size_t tunnel, uint8_t host) {
  return address(10, static_cast<uint8_t>(16 + tunnel / 256), static_cast<uint8_t>(tunnel % 256),
                 host);
}

std::vector<Policy> policies(size_t tunnels) {
  std::vector<Policy> out;
  for (size_t i = 0; i < tunnels; ++i) {
    Policy p;
    p.id = static_cast<uint32_t>(i + 1);
    p.selector.local = {address(10, 1, 0, 0), 16};
    p.selector.remote = {remote_host(i, 0), 24};
    p.priority = 100;
    p.reqid = p.id;
    out.push_back(p);
  }
  Policy discard;
  discard.id = static_cast<uint32_t>(tunnels + 1);
  discard.selector.local = {address(0, 0, 0, 0), 0};
  discard.selector.remote = {address(0, 0, 0, 0), 0};
  discard.priority = 1000;
  discard.action = espgw::xfrm::PolicyAction::discard;
  out.push_back(discard);
  return out;
}

std::vector<FlowKey> flows(size_t tunnels, size_t count) {
  std::mt19937 random(42);
  std::vector<FlowKey> out;
  for (size_t i = 0; i < count; ++i) {
    FlowKey key;
    key.source = address(10, 1, static_cast<uint8_t>(random() % 256), 2);
    key.destination = remote_host(random() % tunnels, static_cast<uint8_t>(1 + random() % 250));
    key.protocol = 6;
    key.ports_known = true;
    key.source_port = static_cast<uint16_t>(32768 + random() % 28000);
    key.destination_port = 443;
    out.push_back(key);
  }
  return out;
}

class LockedLinearSpd {
 public:
  bool add(const Policy& policy) { return list_.add(policy); }
  std::optional<Policy> lookup(Direction direction, const FlowKey& key) const {
    std::shared_lock lock(mutex_);
    return list_.lookup(direction, key);
  }

 private:
  mutable espgw::xfrm::WriterPreferringMutex mutex_;
  espgw::test::LinearSpd list_;
};

template <typename Database>
void lookup(benchmark::State& state, size_t tunnels, size_t flow_count) {
  Database spd;
  for (const Policy& p : policies(tunnels))
    if (!spd.add(p)) state.SkipWithError("add failed");
  const auto keys = flows(tunnels, flow_count);
  size_t next = 0;
  for (auto _ : state) {
    auto found = spd.lookup(Direction::out, keys[next]);
    benchmark::DoNotOptimize(found);
    if (++next == keys.size()) next = 0;
  }
  if (!spd.lookup(Direction::out, keys[0]) ||
      spd.lookup(Direction::out, keys[0])->action != espgw::xfrm::PolicyAction::protect)
    state.SkipWithError("a tunnel's flow did not find its tunnel");
}

std::string name(const char* which, size_t tunnels, size_t flow_count) {
  return std::string("spd/") + which + "/" + std::to_string(tunnels) +
         "/flows:" + std::to_string(flow_count);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  for (const size_t flow_count : kFlowMixes)
    for (const size_t tunnels : kTunnels) {
      benchmark::RegisterBenchmark(name("linear", tunnels, flow_count).c_str(),
                                   lookup<LockedLinearSpd>, tunnels, flow_count);
      benchmark::RegisterBenchmark(name("index", tunnels, flow_count).c_str(),
                                   lookup<espgw::xfrm::Spd>, tunnels, flow_count);
    }
  benchmark::ConsoleReporter display;
  espgw::bench::CollectingReporter reporter(&display);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nflows  policies  linear ns  index ns  linear/index (medians)\n");
  for (const size_t flow_count : kFlowMixes)
    for (const size_t tunnels : kTunnels) {
      const auto linear = reporter.value(name("linear", tunnels, flow_count), "real_ns");
      const auto index = reporter.value(name("index", tunnels, flow_count), "real_ns");
      if (!linear || !index) continue;
      std::printf("%5zu  %8zu  %9.1f  %8.1f  %12.1fx\n", flow_count, tunnels + 1, *linear, *index,
                  *linear / *index);
    }
  benchmark::Shutdown();
  return 0;
}

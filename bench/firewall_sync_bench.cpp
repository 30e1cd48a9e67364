// One firewall sync at 1,000 and 10,000 policies: the whole table written from the SPD
// (what every sync did before xfrm/firewall_sync.h, and what it still does at start or
// after a change behind its back) against one incremental sync of one change, in the same
// run, in a private network namespace of its own (needs root).
//
//   espgw_firewall_sync_bench [REPETITIONS (9)] [POLICIES ... (1000 10000)]
//
// Two kinds of policies: charon's per-child ones as bench/control_install_bench.cpp sends
// them (a port each: one rule each), and address-only ones to one remote host each (all
// in one shared rule per chain part, whose anonymous set a change sends again whole).
// Prints the median milliseconds of each and their ratio.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "xfrm/firewall_sync.h"
#include "xfrm/spd.h"

namespace {

using espgw::xfrm::Direction;
using espgw::xfrm::FirewallChange;
using espgw::xfrm::Policy;
using Clock = std::chrono::steady_clock;

espgw::esp::IpPrefix prefix(const std::string& text) {
  return *espgw::esp::IpPrefix::parse(text);
}

// Child `child`'s policy of `direction`, as the scaling harness's children have them.
Policy child_policy(uint32_t child, Direction direction, bool ports) {
  Policy p;
  p.id = child * 3 + static_cast<uint32_t>(direction) + 1;
  p.direction = direction;
  p.selector.local = prefix("10.1.0.0/16");
  if (ports) {
    p.selector.remote = prefix("10.2.0.0/16");
    p.selector.protocol = 17;
    p.selector.remote_ports = {static_cast<uint16_t>(20000 + child % 40000),
                               static_cast<uint16_t>(20000 + child % 40000)};
  } else {
    p.selector.remote = prefix("10.2." + std::to_string(child / 250) + "." +
                               std::to_string(child % 250 + 1) + "/32");
  }
  p.reqid = child + 1;
  return p;
}

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void measure(unsigned policies, bool ports, int repetitions) {
  espgw::xfrm::KernelFirewall kernel;
  espgw::xfrm::Spd spd;
  espgw::xfrm::FirewallSync sync(kernel, "espgw0");
  const uint32_t children = policies / 3;
  const Direction directions[] = {Direction::out, Direction::in, Direction::fwd};
  for (uint32_t child = 0; child < children; ++child)
    for (const Direction direction : directions) {
      const Policy p = child_policy(child, direction, ports);
      spd.add(p);
      sync.apply({FirewallChange::Kind::add_policy, p, {}});
    }
  sync.apply({FirewallChange::Kind::add_prefix, {}, prefix("10.2.0.0/16")});
  if (auto r = sync.sync(); !r) {
    std::fprintf(stderr, "first sync: %s\n", r.message.c_str());
    std::exit(1);
  }
  std::vector<double> whole, one_add, one_remove;
  for (int repetition = 0; repetition < repetitions; ++repetition) {
    // Before: the table from Spd::list(), as every sync wrote it.
    auto start = Clock::now();
    espgw::xfrm::FirewallSpec spec;
    spec.tun_name = "espgw0";
    spec.policies = spd.list();
    spec.fail_closed_prefixes = {prefix("10.2.0.0/16")};
    if (auto r = kernel.run(espgw::xfrm::firewall_ruleset(spec), "whole"); !r) {
      std::fprintf(stderr, "%s\n", r.message.c_str());
      std::exit(1);
    }
    whole.push_back(milliseconds_since(start));
    // That moved the generation: the sync's next would be a rebuild. Tell it the table is
    // its own (it is the same table).
    sync.rebuild_next("bench");
    if (auto r = sync.sync(); !r) std::exit(1);
    // The kernel frees the replaced table's rules in the background, and the next
    // transaction waits for that: not part of a sync that follows a change.
    for (int warm = 0; warm < 3; ++warm) {
      const Policy p =
          child_policy(children + 1000 + static_cast<uint32_t>(warm), Direction::fwd, ports);
      sync.apply({FirewallChange::Kind::add_policy, p, {}});
      sync.sync();
      if (warm == 2) break;  // stays until after the timed add
      sync.apply({FirewallChange::Kind::remove_policy, p, {}});
      sync.sync();
    }
    const Policy last_warm = child_policy(children + 1002, Direction::fwd, ports);
    // After: one new fwd policy, then its removal, each one sync.
    const Policy extra =
        child_policy(children + static_cast<uint32_t>(repetition), Direction::fwd, ports);
    sync.apply({FirewallChange::Kind::add_policy, extra, {}});
    start = Clock::now();
    if (auto r = sync.sync(); !r) {
      std::fprintf(stderr, "%s\n", r.message.c_str());
      std::exit(1);
    }
    one_add.push_back(milliseconds_since(start));
    // libnftables read every rule for the add's position (its cache, see
    // xfrm/firewall_sync.h) and frees them at its next command: not part of a removal
    // that follows removals, as when SAs go.
    sync.apply({FirewallChange::Kind::remove_policy, last_warm, {}});
    sync.sync();
    sync.apply({FirewallChange::Kind::remove_policy, extra, {}});
    start = Clock::now();
    if (auto r = sync.sync(); !r) std::exit(1);
    one_remove.push_back(milliseconds_since(start));
  }
  const auto& stats = sync.stats();
  std::printf(
      "%-13s %6u policies: whole table %8.2f ms | one add %7.3f ms (%6.0fx) | one removal %7.3f "
      "ms (%6.0fx) | rebuilds %llu (bench's own), deltas %llu\n",
      ports ? "port rules" : "shared rules", children * 3, median(whole), median(one_add),
      median(whole) / median(one_add), median(one_remove), median(whole) / median(one_remove),
      static_cast<unsigned long long>(stats.rebuilds),
      static_cast<unsigned long long>(stats.deltas));
}

}  // namespace

int main(int argc, char** argv) {
  if (unshare(CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "unshare(CLONE_NEWNET): %s (needs root)\n", std::strerror(errno));
    return 1;
  }
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 9;
  std::vector<unsigned> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(static_cast<unsigned>(std::atoi(argv[i])));
  if (sizes.empty()) sizes = {1000, 10000};
  std::printf(
      "median of %d; whole table = firewall_ruleset(Spd::list()) through libnftables, as "
      "each sync before; one add/removal = FirewallSync::sync() of that change\n",
      repetitions);
  for (const bool ports : {true, false})
    for (const unsigned size : sizes) measure(size, ports, repetitions);
  return 0;
}

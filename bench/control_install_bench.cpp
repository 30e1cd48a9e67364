// How fast espgw installs and removes SAs through its control socket, without IKE: the
// requests the charon plugin sends for each CHILD_SA (get-spi, add-sa in and out,
// add-policy out, in and fwd), one at a time and waiting for each answer as the plugin
// does, against a running espgw. Then the SAs are listed as espgwctl lists them
// (streamed, one event each), and everything is deleted again the same way.
// bench/scaling_bench.sh runs it (the "control" load) next to the end-to-end runs with
// charon, so the two rates can be told apart: what espgw can take, and what charon
// delivers.
//
//   espgw_control_install_bench SOCKET CHILD_SAS [ESPGW_PID]
//
// Prints one JSON object. With ESPGW_PID, also espgw's resident memory before, with all
// SAs installed (right after the last answer, and 2.5 s later, idle: after the firewall
// sync and the heap trim that follow a burst), right after they were removed, and 2.5 s
// later (idle). With CONTROL_BENCH_HOOK set, runs that command with the argument "before",
// "installed" (after the idle reading) or "removed" at each of those points (say, to read
// espgw's heap statistics), outside the timed phases.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/charon_requests.h"
#include "vici_bridge/vici_client.h"

namespace {

using espgw::vici::Client;
using espgw::vici::Message;
using Clock = std::chrono::steady_clock;

constexpr const char* kLocal = "192.0.2.1";
constexpr const char* kPeer = "192.0.2.2";

long rss_kib(const std::string& pid) {
  if (pid.empty()) return -1;
  std::ifstream status("/proc/" + pid + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

Message checked(Client& client, const char* command, const Message& request) {
  Message answer = client.request(command, request);
  if (answer.boolean("success") != true) {
    const std::string* error = answer.value("errmsg");
    throw std::runtime_error(std::string(command) + " failed: " + (error ? *error : "?"));
  }
  return answer;
}

Message sa_request(uint32_t spi, uint32_t reqid, bool inbound) {
  // A different key per SA, as charon derives them; nothing secret in a benchmark.
  std::string key(20, '\0');
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<char>((spi >> (i % 4 * 8)) + i);
  Message m = espgw::test::add_sa_request(spi, reqid, inbound, kLocal, kPeer, key);
  m.set_bool("encap", true);
  m.set("src-port", 4500);
  m.set("dst-port", 4500);
  m.set("soft-seconds", 3600);
  m.set("hard-seconds", 3960);
  return m;
}

Message sa_id(uint32_t spi, bool inbound) {
  Message m;
  m.set("spi", uint64_t{spi});
  m.set("dst", inbound ? kLocal : kPeer);
  return m;
}

// One child's policies, told apart by gwB's UDP port as the scaling harness's children are.
Message child_policy(const char* direction, uint32_t reqid, bool with_action) {
  const bool out = std::string(direction) == "out";
  const uint64_t port = 20000 + reqid;
  const espgw::test::Selector lan_a{"10.1.0.0/16", 17}, lan_b{"10.2.0.0/16", 17, port, port};
  return espgw::test::policy_request(direction, out ? lan_a : lan_b, out ? lan_b : lan_a,
                                     with_action ? std::optional<uint32_t>(reqid) : std::nullopt);
}

void run_hook(const char* phase) {
  const char* hook = std::getenv("CONTROL_BENCH_HOOK");
  if (!hook || !*hook) return;
  const std::string command = std::string(hook) + " " + phase;
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "hook %s failed\n", phase);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SOCKET CHILD_SAS [ESPGW_PID]\n", argv[0]);
    return 2;
  }
  const std::string socket = argv[1];
  const uint32_t children = static_cast<uint32_t>(std::stoul(argv[2]));
  const std::string pid = argc > 3 ? argv[3] : "";
  try {
    Client client(socket);
    Message hello;
    hello.set("charon-instance", "control-install-bench");
    checked(client, "hello", hello);
    run_hook("before");
    const long rss_before = rss_kib(pid);

    struct Child {
      uint32_t in_spi;
      uint32_t out_spi;
    };
    std::vector<Child> installed;
    installed.reserve(children);
    static const char* const kDirections[] = {"out", "in", "fwd"};
    const auto install_start = Clock::now();
    for (uint32_t i = 0; i < children; ++i) {
      const uint32_t reqid = i + 1;
      const auto spi = checked(client, "get-spi", {}).number("spi");
      if (!spi) throw std::runtime_error("get-spi gave no spi");
      const uint32_t in_spi = static_cast<uint32_t>(*spi);
      const uint32_t out_spi = 0x10000000u + i;  // the peer's choice
      checked(client, "add-sa", sa_request(in_spi, reqid, true));
      checked(client, "add-sa", sa_request(out_spi, reqid, false));
      for (const char* direction : kDirections)
        checked(client, "add-policy", child_policy(direction, reqid, true));
      installed.push_back({in_spi, out_spi});
    }
    const double install_seconds = seconds_since(install_start);
    const auto stats = checked(client, "stats", {});
    const uint64_t sas = stats.number("sas").value_or(0);
    const long rss_installed = rss_kib(pid);
    // Steady state: espgw syncs the firewall within 100 ms and returns freed heap once
    // installs have stopped for a second (HeapTrimmer).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const long rss_installed_idle = rss_kib(pid);
    run_hook("installed");

    // espgwctl's listing at this size: one list-sa event per SA ahead of the answer.
    client.subscribe("list-sa");
    uint64_t listed = 0;
    const auto list_start = Clock::now();
    client.request("list-sas", {}, [&](const espgw::vici::Packet&) { ++listed; });
    const double list_seconds = seconds_since(list_start);
    client.unsubscribe("list-sa");

    const auto remove_start = Clock::now();
    for (uint32_t i = 0; i < children; ++i) {
      for (const char* direction : kDirections)
        checked(client, "del-policy", child_policy(direction, i + 1, false));
      checked(client, "del-sa", sa_id(installed[i].out_spi, false));
      checked(client, "del-sa", sa_id(installed[i].in_spi, true));
    }
    const double remove_seconds = seconds_since(remove_start);
    const uint64_t left = checked(client, "stats", {}).number("sas").value_or(~uint64_t{0});
    const long rss_after = rss_kib(pid);
    run_hook("removed");
    // espgw returns freed heap once removals have stopped for a second (HeapTrimmer).
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    const long rss_idle = rss_kib(pid);

    const double total = 2.0 * children;
    std::printf(
        "{\"kind\": \"control\", \"child_sas\": %u, \"sas_installed\": %llu, \"sas_left\": "
        "%llu, \"requests_per_child_sa\": 6, \"install_seconds\": %.3f, "
        "\"install_rate_sas_per_second\": %.1f, \"remove_seconds\": %.3f, "
        "\"remove_rate_sas_per_second\": %.1f, \"rss_kib_before\": %ld, \"rss_kib_installed\": "
        "%ld, \"rss_kib_installed_idle\": %ld, \"rss_kib_after_removal\": %ld, "
        "\"rss_kib_idle_after_removal\": %ld, \"bytes_per_sa\": %.1f, \"bytes_per_sa_idle\": "
        "%.1f, \"listed_sas\": %llu, \"list_seconds\": %.3f}\n",
        children, static_cast<unsigned long long>(sas), static_cast<unsigned long long>(left),
        install_seconds, total / install_seconds, remove_seconds, total / remove_seconds,
        rss_before, rss_installed, rss_installed_idle, rss_after, rss_idle,
        rss_before >= 0 ? (rss_installed - rss_before) * 1024.0 / total : -1.0,
        rss_before >= 0 ? (rss_installed_idle - rss_before) * 1024.0 / total : -1.0,
        static_cast<unsigned long long>(listed), list_seconds);
    return sas == total && listed == sas && left == 0 ? 0 : 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "control_install_bench: %s\n", error.what());
    return 1;
  }
}

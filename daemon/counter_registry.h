// Every counter espgw reports, each declared once: its name, what it counts, and where it
// is read from. The periodic log lines (Gateway::log_counters), the status
// (Gateway::status, the control socket's `stats` and `list-sas`), espgwctl's tables and
// JSON, and the counter table of docs/counters.md (checked by a unit test) all take their
// names from these tables; the engine's drop reasons come from esp/drop_reason.h.
//
// The tables describe storage, they do not sit in front of it: the data path updates its
// relaxed atomics and per-SA fields directly; only the control path reads through `read`.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "daemon/gateway_counters.h"
#include "daemon/gateway_status.h"
#include "esp/counters.h"
#include "io/wan_socket.h"
#include "pipeline/pipeline.h"
#include "vici_bridge/vici_server.h"

namespace espgw::daemon {

template <typename Source>
struct Counter {
  std::string_view name;
  std::string_view help;
  uint64_t (*read)(const Source&);
};

// Where the status shows a gateway counter: at the top of `stats`, or in one of its sections.
enum class StatusPlace { top, gateway_drops, wan };

struct GatewayCounter {
  std::string_view name;
  std::string_view help;
  StatusPlace place;
  uint64_t (*read)(const GatewayCounters&);
};

inline constexpr GatewayCounter kGatewayCounters[] = {
#define ESPGW_GATEWAY_COUNTER_ENTRY(symbol, name, place, help) \
  {name, help, StatusPlace::place,                             \
   [](const GatewayCounters& c) -> uint64_t { return c.symbol.load(std::memory_order_relaxed); }},
    ESPGW_GATEWAY_COUNTERS(ESPGW_GATEWAY_COUNTER_ENTRY)
#undef ESPGW_GATEWAY_COUNTER_ENTRY
};

// Per WAN socket, shown as "udpN-NAME" (N: the socket's index) or "raw-NAME".
struct WanCounter {
  std::string_view name;
  std::string_view help;
  bool udp_only;  // GRO: UDP sockets only
  uint64_t (*read)(const io::WanReceiveStats&);
};

inline constexpr WanCounter kWanCounters[] = {
    {"kernel-drops", "datagrams the kernel dropped on a full receive buffer (SO_RXQ_OVFL)", false,
     [](const io::WanReceiveStats& s) -> uint64_t { return s.kernel_drops; }},
    {"gro-batches", "receives that held more than one datagram (UDP GRO)", true,
     [](const io::WanReceiveStats& s) -> uint64_t { return s.gro_batches; }},
    {"gro-datagrams", "the datagrams split out of those batches", true,
     [](const io::WanReceiveStats& s) -> uint64_t { return s.gro_datagrams; }},
    {"oversize", "datagrams larger than a packet buffer: dropped", false,
     [](const io::WanReceiveStats& s) -> uint64_t { return s.oversize; }},
    {"receive-buffer",
     "not a count: the bytes the kernel lets the receive queue hold (SO_RCVBUF), which "
     "decides kernel-drops",
     false, [](const io::WanReceiveStats& s) -> uint64_t { return s.receive_buffer; }},
};

// Not drops: waits that keep flows in order across SAs, and the reorder gaps given up
// because the packet pool ran dry.
inline constexpr Counter<pipeline::Pipeline> kPipelineCounters[] = {
    {"fences",
     "readers that waited for the packets in flight of a changed ECMP group or a rekeyed "
     "inbound SA's predecessor",
     [](const pipeline::Pipeline& p) { return p.fences(); }},
    {"fence-timeouts", "fences that gave up waiting (after 5 ms)",
     [](const pipeline::Pipeline& p) { return p.fence_timeouts(); }},
    {"room-waits", "TUN readers that waited for room on a full SA",
     [](const pipeline::Pipeline& p) { return p.room_waits(); }},
    {"room-wait-timeouts",
     "room waits that outlasted 20 ms: the SA stalled, the packet was dropped as queue-full",
     [](const pipeline::Pipeline& p) { return p.room_wait_timeouts(); }},
    {"pressure-flushes", "an empty packet pool made the reorder buffers give up their gaps",
     [](const pipeline::Pipeline& p) { return p.pressure_flushes(); }},
};

// Per SA, read from its status entry (Gateway::status fills SaStatus from the SA's
// counters and its channel). Bytes count inner (plaintext) packets.
inline constexpr Counter<SaStatus> kOutboundSaCounters[] = {
    {"packets", "packets the SA carried", [](const SaStatus& s) { return s.packets; }},
    {"bytes", "inner bytes the SA carried", [](const SaStatus& s) { return s.bytes; }},
    {"in-flight", "outbound: packets between sequence number and send",
     [](const SaStatus& s) -> uint64_t { return s.in_flight; }},
};
inline constexpr Counter<SaStatus> kInboundSaCounters[] = {
    kOutboundSaCounters[0],
    kOutboundSaCounters[1],
    {"reorder-late", "inbound: packets released after their gap was skipped",
     [](const SaStatus& s) { return s.late; }},
    {"reorder-skipped", "inbound: gaps the reorder buffer gave up on",
     [](const SaStatus& s) { return s.skipped; }},
};

// The control socket's own counters: the VICI server's and the control service's.
struct ControlSocketStats {
  vici::Server::Stats server{};
  uint64_t expiries_pending = 0;
  uint64_t expiries_sent_late = 0;
  uint64_t expiries_dropped = 0;
};

inline constexpr Counter<ControlSocketStats> kControlSocketCounters[] = {
    {"connections", "connections accepted",
     [](const ControlSocketStats& s) { return s.server.connections_accepted; }},
    {"refused", "connections refused (another uid, or too many)",
     [](const ControlSocketStats& s) { return s.server.connections_refused; }},
    {"malformed", "packets with broken framing or encoding, each closed its connection",
     [](const ControlSocketStats& s) { return s.server.malformed_packets; }},
    {"slow-clients-dropped", "clients dropped for not reading their output",
     [](const ControlSocketStats& s) { return s.server.slow_clients_dropped; }},
    {"ike-events-shed", "IKE packets for charon not queued to a slow charon",
     [](const ControlSocketStats& s) { return s.server.bulk_events_shed; }},
    {"expiries-pending", "not a count: SA expiries waiting for charon to attach",
     [](const ControlSocketStats& s) { return s.expiries_pending; }},
    {"expiries-sent-late", "SA expiries delivered when charon attached",
     [](const ControlSocketStats& s) { return s.expiries_sent_late; }},
    {"expiries-dropped", "SA expiries dropped while charon was away (the oldest first)",
     [](const ControlSocketStats& s) { return s.expiries_dropped; }},
    {"commands", "requests answered by a handler",
     [](const ControlSocketStats& s) { return s.server.commands; }},
    {"unknown-commands", "requests for a command espgw does not know",
     [](const ControlSocketStats& s) { return s.server.unknown_commands; }},
};

// The sections of `stats` (and an SA's "drops" in `list-sas`) whose every value is a
// counter, with the title espgwctl shows them under.
struct CounterSection {
  std::string_view key;
  std::string_view title;
};
inline constexpr CounterSection kStatsCounterSections[] = {
    {"gateway-drops", "gateway drops"},
    {"engine-drops", "engine drops"},
    {"wan", "wan sockets"},
    {"pipeline", "pipeline"},
    {"control-socket", "control socket"},
    {"workers", "per-worker load"},  // packets each worker handled, by worker index
};
inline constexpr std::string_view kSaDropsSection = "drops";

// The registry's values that are levels, not counts: gauges in the metrics
// (daemon/metrics_text.h); every other value only grows.
inline constexpr std::string_view kGaugeCounters[] = {"receive-buffer", "expiries-pending",
                                                      "in-flight"};

template <typename Source, typename Table>
void read_counters(const Table& table, const Source& source, NamedCounters& out) {
  for (const auto& counter : table)
    out.emplace_back(std::string(counter.name), counter.read(source));
}

// The drop reasons with a non-zero count, in the order of esp::DropReason.
NamedCounters nonzero_drops(const esp::DropCounters& counters);
// A WAN socket's counters, named "PREFIX-NAME" ("udp0-kernel-drops").
void read_wan_counters(const std::string& prefix, bool udp, const io::WanReceiveStats& stats,
                       NamedCounters& out);
// " a=1 b=2", or `empty` when there are none. An SA's last drops, logged when it goes
// (" drops none" or " drops queue-full=85 ..."), use it too: its counters go with it, and
// the tests add those lines up.
std::string format_counters(const NamedCounters& counters, std::string_view empty = "");

// One row per counter, for docs/counters.md's counter table (a unit test compares them): its
// family ("stats" for the top of `stats`, another section of `stats`, "wan-socket" for the
// per-socket counters of its wan section, "sa", "drop-reason", "workers") and its name.
struct CounterDoc {
  std::string_view family;
  std::string_view name;
  std::string_view help;
};
std::vector<CounterDoc> all_counters();

}  // namespace espgw::daemon

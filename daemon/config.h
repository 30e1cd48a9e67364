// espgw.conf: the daemon's one configuration file. Line-based `key = value`, '#' starts a
// comment. Every problem is reported as "FILE:LINE: message" and the daemon exits
// non-zero. See configs/espgw.conf for a documented example.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/log.h"
#include "daemon/parallel_children.h"
#include "esp/ip_address.h"

namespace espgw::daemon {

inline constexpr std::chrono::microseconds kAutoQueueDelayTarget{300};
// What `socket-buffer = auto` means with workers = inline and with workers
// (wan_socket_buffer_bytes()).
inline constexpr size_t kInlineSocketBufferBytes = 2 << 20;
inline constexpr size_t kWorkersSocketBufferBytes = 2 << 20;

// A route-based VPN interface (`interface = IF_ID NAME`): a TUN device of its own for
// charon's SAs and policies with that if_id (docs/route_based_vpn.md).
struct RouteInterface {
  uint32_t if_id = 0;  // 1 to 4294967295; 0 is the default device, tun-name
  std::string name;
  bool operator==(const RouteInterface&) const = default;
};

struct GatewayConfig {
  std::string tun_name = "espgw0";
  // Route-based VPN interfaces, in the order written; none by default.
  std::vector<RouteInterface> interfaces;
  unsigned tun_queues = 1;
  // IFF_VNET_HDR with TSO/checksum offload: the kernel hands over TCP super-packets (up to
  // 64 KB) that espgw segments itself, and takes coalesced super-packets back (GRO).
  bool tun_offload = true;
  std::optional<esp::IpPrefix> tun_address;  // optional address on the TUN device
  // Receive packet steering on the TUN device (io/receive_steering.h): the kernel then
  // forwards each flow from one CPU, in the order espgw wrote its packets, whichever
  // worker wrote them. Unset ("auto"): on with workers on a machine of several CPUs.
  std::optional<bool> tun_rps;
  // The WAN addresses espgw sends from and receives on (required; IPv4, IPv6 or both, in
  // the order written): each gets its own sockets (docs/gateway_wan.md). An SA leaves from
  // the address that is its outer source and arrives on its outer destination; an SA
  // whose local end is none of these is refused.
  std::vector<esp::IpAddress> local_addresses;
  uint16_t udp_port = 4500;
  // UDP sockets sharing local-address:udp-port through SO_REUSEPORT, one reader thread
  // each; the kernel spreads peers (4-tuples) over them. Per local address. 0: one per
  // online CPU, at most 4.
  unsigned wan_readers = 0;
  // Where each SA key's sequence-number and replay state survives restarts
  // (daemon/sa_state_keeper.h). One directory per espgw instance: a second instance on
  // the same directory refuses to start. Resolved against the config file's directory.
  // Unset: default_state_dir() of the config file, so that instances with configuration
  // files of their own keep their state apart. Empty (not settable from the file): kept
  // in memory only, for tests.
  std::string state_dir;
  std::string static_sa_file;  // resolved against the config file's directory; optional
                               // when a control socket is set
  // The control socket of the charon plugin and espgwctl (root-only); empty: static SAs
  // only. With it, espgw also owns the IKE ports: udp-port (NAT-T) and ike-port.
  std::string control_socket;
  uint16_t ike_port = 500;  // 0: no IKE socket (NAT-T port only)
  // IKE datagrams passed to charon, per second from one source address and in all
  // (`ike-rate-limit = PER-SOURCE GLOBAL`; 0: no limit); more are dropped and counted as
  // ike-rate-limited (daemon/ike_rate_limiter.h, docs/security_control_events.md).
  uint32_t ike_rate_per_source = 5000;
  uint32_t ike_rate_global = 20000;
  // charon asks for a 32-packet replay window by default (like the kernel). Packets that
  // workers on different cores put on the wire can overtake each other by more than that
  // inside the kernel, so espgw widens smaller windows to this; 0 from charon (no replay
  // protection) stays 0.
  uint32_t min_replay_window = 4096;
  // ECMP over parallel CHILD_SAs (daemon/parallel_children.h): charon's VICI socket, and
  // how many CHILD_SAs of which child configs espgw keeps up. Needs control-socket.
  std::string charon_vici;
  std::vector<ParallelChild> parallel_children;
  unsigned workers = 0;            // 0: one per online CPU
  bool run_to_completion = false;  // "workers = inline": readers do the crypto
  // "workers = auto", a file's default: the parser chose between the two above by the CPUs
  // this process may run on (resolve_auto_workers). Kept so that status says it was chosen.
  bool workers_auto = false;
  std::string crypto_backend = "ipsec-mb";  // or "openssl", the reference backend
  bool pin_workers = false;
  // Bytes per WAN socket and direction (the kernel doubles them for its bookkeeping).
  // Unset ("auto", wan_socket_buffer_bytes()): with readers running to completion 2 MiB,
  // about 4 ms of ESP at what one reader drains on a small VM. Their receive queue is the
  // one that stands under TCP; the queue-delay gate keeps its standing delay short, so the
  // buffer only has to absorb what arrives while the reader is preempted (384 KiB
  // overflowed then, hundreds of times a run on a 2-vCPU VM, and 1 MiB now and then;
  // docs/gateway_wan.md). With workers the queue is in the pipeline and a reader only
  // hands packets over, so the buffer only has to outlast the reader being descheduled:
  // 2 MiB, tens of ms at the paced rates of the charon tests.
  std::optional<size_t> socket_buffer_bytes;
  // CoDel on the WAN receive queue (io/QueueDelayGate): a byte-sized buffer holds more
  // delay the slower the reader drains it, so the reader also drops (after decryption,
  // counted as queue-delay) once the queue has stayed above `queue_delay_target` for
  // `queue_delay_interval`. A target of 0 turns it off. Tuned for site-to-site links of
  // sub-millisecond RTT (docs/performance.md, "Workers or none").
  // Unset ("auto"): kAutoQueueDelayTarget when the readers run to completion, where the
  // socket's queue is the one that stands under load; off with workers, where the
  // readers only hand packets over and the pipeline's in-flight bound is the queue's
  // limit (with the gate on there, a reader the host keeps descheduling looks like a
  // standing queue, and TCP loses packets to it).
  std::optional<std::chrono::microseconds> queue_delay_target;
  std::chrono::microseconds queue_delay_interval{2000};
  std::chrono::microseconds reorder_hold{1000};
  size_t pool_packets = 8192;
  // Tunnel MTU: derived from the route MTU towards the peers minus the ESP overhead,
  // unless set here.
  std::optional<unsigned> tunnel_mtu;
  // Cut TCP super-packets read from the TUN into packets of up to the tunnel MTU (whole
  // multiples of the sender's segment size) instead of one per segment: a WAN with a
  // larger MTU than the LANs then carries fewer, larger ESP packets. Only towards peers
  // that segment again what does not fit their LAN (espgw does; a kernel peer would drop
  // such packets as too big), hence off by default.
  bool jumbo_segments = false;
  // The largest packet written whole to the TUN: larger TCP packets (a peer's jumbo
  // segments) leave as GSO frames whose segments fit. Unset: the smallest route MTU
  // towards the inbound SAs' local traffic selectors, 1500 when there is none.
  std::optional<unsigned> lan_mtu;
  // A core dump of espgw holds every SA's expanded key. Unless this is set, espgw makes
  // itself non-dumpable (PR_SET_DUMPABLE 0, which also keeps other users' ptrace and
  // /proc/PID/mem out) and sets its core size limit to 0 at start (docs/security_keys.md).
  bool allow_core_dumps = false;
  LogLevel log_level = LogLevel::info;
  std::chrono::seconds stats_interval{0};  // 0: no periodic counter log
  // Every key's value as the file wrote it (repeated keys joined by "; "): a reload
  // compares them to tell which settings changed (daemon/config_reload.h).
  std::map<std::string, std::string> written;
};

struct ConfigResult {
  std::optional<GatewayConfig> config;
  std::vector<std::string> errors;  // "FILE:LINE: message"
};

ConfigResult parse_gateway_config(const std::string& path);

// state-dir's default for the configuration file at `config_path`: a directory of its own
// under /var/lib/espgw, named after the file and a hash of its absolute path
// ("/var/lib/espgw/espgw.conf-1a2b3c4d" for /etc/espgw/espgw.conf).
std::string default_state_dir(const std::string& config_path);
inline constexpr const char* kStateRoot = "/var/lib/espgw";
// `workers = auto` (a file's default) is resolved against usable_cpu_count().
ConfigResult parse_gateway_config_text(const std::string& text, const std::string& path);

// The most CPUs at which `workers = auto` runs the readers inline. With one or two CPUs a
// worker has no core of its own: the hand-over and the wake-up per batch cost more than
// spreading the crypto gives (docs/performance.md, "Workers or none"); from three, workers
// spread one SA's crypto over cores that no reader can use.
inline constexpr unsigned kAutoInlineMaxCpus = 2;

// Resolves `workers = auto` for `cpus` usable CPUs: inline up to kAutoInlineMaxCpus, one
// worker per CPU above. A config with an explicit workers line is left as it is.
void resolve_auto_workers(GatewayConfig& config, unsigned cpus);

// The CPUs this process may run on (its affinity mask, which a cpuset or taskset narrows),
// at least 1.
unsigned usable_cpu_count();

// The WAN sockets' buffer size `socket-buffer` asks for, with auto resolved by the
// workers mode.
size_t wan_socket_buffer_bytes(const GatewayConfig& config);

// The queue-delay gate's target `queue-delay-target-us` asks for, with auto resolved by the
// workers mode (0: off).
std::chrono::microseconds queue_delay_target_of(const GatewayConfig& config);

// How many WAN readers `wan-readers` asks for, with 0 resolved against this machine.
unsigned wan_reader_count(const GatewayConfig& config);

// Whether `tun-rps` asks for receive steering, with auto resolved against `cpus`, the
// CPUs espgw may run on: with workers an SA's packets are written by several threads.
bool wants_tun_rps(const GatewayConfig& config, unsigned cpus);

// What the gateway throws when the configuration, not the system, is at fault (the static
// SA file's errors, SAs it cannot carry): espgw exits with kExitConfigError
// (service_manager.h), which the systemd unit does not restart.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace espgw::daemon

// The gateway: wires a TUN device, WAN sockets, the SPD/SAD from a static SA file and
// the parallel pipeline together, and keeps the kernel's view (TUN link, MTU, routes for
// remote subnets) in line with the policies.
//
//   TUN reader ─ SPD lookup (out) ─ SA group (reqid) ─ flow hash ─ pipeline ─ WanSink ─ WAN
//   WAN reader ─ RFC 3948 demux ─ pipeline (SPI) ─ TunSink ─ TUN
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "esp/counters.h"
#include "io/tun_device.h"
#include "io/wan_socket.h"
#include "pipeline/pipeline.h"
#include "pipeline/sa_group.h"
#include "xfrm/netlink.h"
#include "xfrm/spd.h"
#include "xfrm/static_file.h"

namespace espgw::daemon {

// Drops the gateway itself decides, before a packet reaches an SA.
struct GatewayCounters {
  std::atomic<uint64_t> no_policy{0};       // outbound packet matched no policy
  std::atomic<uint64_t> policy_discard{0};  // matched a discard (or bypass) policy
  std::atomic<uint64_t> no_sa{0};           // protect policy whose SA group is empty
  std::atomic<uint64_t> not_ip{0};          // TUN gave something that is not IPv4/IPv6
  std::atomic<uint64_t> ike_dropped{0};     // IKE on 4500 with no IKE daemon attached
  std::atomic<uint64_t> wan_send_failed{0};
  std::atomic<uint64_t> tun_write_failed{0};
  std::atomic<uint64_t> tun_bad_offload{0};  // a TUN frame the segmenter refused
};

class Gateway {
 public:
  // Sets everything up; throws std::runtime_error with a message naming what failed.
  explicit Gateway(GatewayConfig config);
  // Stops the threads, removes the routes it added and the TUN device.
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  void start();
  void stop();
  // Re-reads the static SA file. SAs whose configuration did not change keep their
  // state (sequence numbers, replay windows, counters) and keep carrying traffic.
  // Returns false, keeping the running configuration, if the file has errors.
  bool reload();
  void log_counters() const;
  // Applies the SAs' soft and hard lifetimes (bytes, packets, seconds): a soft limit is
  // logged once (static SAs are not rekeyed; with charon it asks for a rekey), a hard
  // limit takes the SA out of service. Called every 100 ms, so an SA may overshoot its hard
  // limit by up to 100 ms of traffic.
  void enforce_lifetimes();

 private:
  class WanSink;
  class TunSink;
  struct OutboundEntry;
  struct InboundEntry;
  // What the TUN readers need per packet, swapped as a whole on reload.
  struct Forwarding {
    xfrm::Spd spd;
    std::map<uint32_t, std::shared_ptr<pipeline::SaGroup>> groups;  // by reqid
  };

  void apply(const xfrm::StaticConfig& config);
  void sync_routes(const xfrm::StaticConfig& config);
  unsigned derive_tunnel_mtu(const xfrm::StaticConfig& config);
  io::WanSocket& socket_for(const esp::SaConfig& config);
  void tun_reader(unsigned queue);
  void wan_reader(io::WanSocket* socket);
  void handle_outbound(pipeline::Packet* packet, const Forwarding& forwarding);
  void tun_reader_offload(unsigned queue);

  GatewayConfig config_;
  std::unique_ptr<io::TunDevice> tun_;
  // `wan-readers` sockets on local-address:udp-port (SO_REUSEPORT), a reader thread each;
  // the first also sends. Empty until an SA needs UDP encapsulation.
  std::vector<std::unique_ptr<io::WanSocket>> udp_sockets_;
  // One raw ESP socket is enough: every raw socket of the protocol gets a copy of every
  // packet, so a second would only double the work.
  std::unique_ptr<io::WanSocket> raw_socket_;
  xfrm::RtNetlink netlink_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  std::unique_ptr<TunSink> tun_sink_;
  uint64_t flow_seed_;
  unsigned tunnel_mtu_ = 0;
  size_t max_path_mtu_ = 1500;  // largest WAN path MTU towards a peer

  std::map<std::string, std::unique_ptr<OutboundEntry>> outbound_;  // by "spi/destination"
  std::map<std::string, std::unique_ptr<InboundEntry>> inbound_;
  std::vector<std::shared_ptr<void>> retired_;  // sinks of removed SAs: in-flight packets
  std::vector<esp::IpPrefix> routes_;           // routes we added, to remove on exit
  std::atomic<std::shared_ptr<const Forwarding>> forwarding_;

  GatewayCounters counters_;
  std::atomic<bool> running_{false};
  std::vector<std::thread> threads_;
};

}  // namespace espgw::daemon

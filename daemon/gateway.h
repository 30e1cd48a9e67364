// The gateway: wires a TUN device, WAN sockets, the SA table, the policies, the routes
// and the parallel pipeline together, owns the threads, and keeps the control API that
// reload, charon (through the control socket) and espgwctl use. The parts
// (docs/architecture.md):
//
//   OutboundPath (outbound_path.h)  TUN reader ─ SPD ─ SA group ─ pipeline ─ PeerSink ─
//                                   WanBatchSender ─ WAN
//   InboundPath (inbound_path.h)    WAN reader ─ RFC 3948 demux ─ pipeline (SPI) ─ TunWriter ─ TUN
//   SaTable (sa_table.h)            the SAD: SAs, their channels and ECMP groups, lifetimes
//   MtuTracker (mtu_tracker.h)      tunnel and LAN MTU from the SAs' path and route MTUs
//   RouteTable (route_table.h)      TUN routes, fail-closed routes and bypass rules by use
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/acquire_raiser.h"
#include "daemon/config.h"
#include "daemon/gateway_counters.h"
#include "daemon/gateway_status.h"
#include "daemon/ike_rate_limiter.h"
#include "daemon/inbound_path.h"
#include "daemon/mtu_tracker.h"
#include "daemon/outbound_lookup.h"
#include "daemon/outbound_path.h"
#include "daemon/route_interfaces.h"
#include "daemon/route_table.h"
#include "daemon/sa_state_keeper.h"
#include "daemon/sa_table.h"
#include "daemon/wan_endpoints.h"
#include "io/tun_device.h"
#include "io/wan_socket.h"
#include "pipeline/pipeline.h"
#include "xfrm/firewall_sync.h"
#include "xfrm/kernel_firewall.h"
#include "xfrm/key_fingerprint.h"
#include "xfrm/netlink.h"
#include "xfrm/spd.h"
#include "xfrm/static_file.h"

namespace espgw::daemon {

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
  // A reload of espgw.conf's settings that change at run time (daemon/config_reload.h):
  // log-level, stats-interval and the queue-delay gate's. Other fields of `next` are not read.
  void apply_runtime_settings(const GatewayConfig& next);
  // stats-interval, as the last reload set it (0: no periodic counter log).
  std::chrono::seconds stats_interval() const {
    return std::chrono::seconds(stats_interval_s_.load(std::memory_order_relaxed));
  }
  void log_counters() const;
  // Applies the SAs' soft and hard lifetimes (bytes, packets, seconds): a soft limit is
  // logged once (static SAs are not rekeyed; with charon it asks for a rekey), a hard
  // limit takes the SA out of service. Called every 100 ms, so an SA may overshoot its hard
  // limit by up to 100 ms of traffic.
  void enforce_lifetimes();
  // Brings the kernel firewall (xfrm/kernel_firewall.h) in line with the policies when
  // they changed since the last call: only the rules they touch (xfrm/firewall_sync.h).
  // Called with enforce_lifetimes, every 100 ms, so that a burst of charon's changes costs
  // one nft transaction, not one each. False (and logged; the whole table is written again
  // on the next call) when nft refused it.
  bool sync_kernel_firewall();
  // How many SAs were removed or replaced since the start (no lock: for the heap trimmer).
  uint64_t sas_retired() const { return sas_->retired_count(); }
  // How many SAs were installed or replaced since the start (the same).
  uint64_t sas_installed() const { return sas_->installed_count(); }

  // --- The control path (charon through the control socket; docs/strongswan.md). ---
  // charon's SAs and policies, one change at a time. A change touches only what it names:
  // O(log n) map updates, plus a copy of one shard of the reqid -> group map (n/256
  // groups) when a group appears or goes, so installing n SAs costs about O(n log n). The static
  // file's SAs and policies are not affected. Thread-safe, like everything below.
  //
  // Installs an SA, or replaces charon's SA with its (SPI, destination) when the entry
  // differs (an identical one keeps its state). False if an inbound SA's SPI is taken or
  // a static SA has that (SPI, destination). `replayed`: charon's plugin re-installs an
  // SA a previous espgw had; without a record of its key's counter it is held
  // (daemon/sa_state_keeper.h).
  bool add_dynamic_sa(const xfrm::SadEntry& entry, bool replayed = false);
  // False unless charon's SA with that (SPI, destination) was there.
  bool remove_dynamic_sa(uint32_t spi, const esp::IpAddress& destination);
  // Moves charon's SA to the peer's new address or port in place (SaTable::move), its
  // peer sink included.
  SaTable::MoveResult move_dynamic_sa(const xfrm::SaId& id, const esp::IpAddress& new_source,
                                      const esp::IpAddress& new_destination,
                                      const std::optional<esp::UdpEncapsulation>& new_udp);
  // Installs a policy, or replaces the one with its id.
  void add_dynamic_policy(const xfrm::Policy& policy);
  bool remove_dynamic_policy(uint32_t id);
  // Each returns how many it removed.
  size_t clear_dynamic_sas();
  size_t clear_dynamic_policies();
  struct SaUsage {
    uint64_t bytes = 0;
    uint64_t packets = 0;
    std::optional<uint64_t> idle_ms;  // none while the SA has carried nothing
  };
  std::optional<SaUsage> sa_usage(uint32_t spi, const esp::IpAddress& destination) const;
  // The shortest idle time among the SAs of a group (reqid) in one direction.
  std::optional<uint64_t> group_idle_ms(xfrm::Direction direction, uint32_t reqid) const;
  bool spi_in_use(uint32_t spi) const;  // by an inbound SA
  // `entries`: the per-SA, group and policy lists too; without them only counts and
  // counters (cheap at thousands of SAs, for frequent polling).
  GatewayStatus status(bool entries = true) const;
  const GatewayConfig& config() const { return config_; }
  // Why an SA cannot be installed on this gateway's local addresses (its local end is
  // none of them: docs/gateway_wan.md); nullopt when it can.
  std::optional<std::string> wan_refusal(const xfrm::SadEntry& entry) const {
    return wan_.refusal(entry);
  }
  // Why an SA or policy of interface id `if_id` cannot be installed (no `interface` of
  // espgw.conf has that id: route-based VPN, daemon/route_interfaces.h); counted as
  // interface-refused. nullopt for 0 and for configured ids.
  std::optional<std::string> interface_refusal(uint32_t if_id);
  // The TUN device of an interface id: tun-name for 0, "" for an unknown id.
  std::string interface_name(uint32_t if_id) const {
    return if_id ? interfaces_->name_of(if_id) : tun_->name();
  }

  // Called when one of charon's SAs reaches its soft or hard lifetime (from
  // enforce_lifetimes, without the gateway's lock held). Set before start().
  using ExpireHandler =
      std::function<void(uint32_t spi, const esp::IpAddress& destination, bool hard)>;
  void on_expire(ExpireHandler handler) { expire_handler_ = std::move(handler); }
  // Called from WAN reader threads with each IKE packet (non-ESP marker removed on
  // port 4500) when a control socket is configured, within `ike-rate-limit`, with the
  // local address and port it arrived on. Returns false when nobody took it (no charon
  // attached): the gateway counts it as dropped. Set before start().
  using IkeHandler =
      std::function<bool(std::span<const uint8_t> ike, const esp::IpAddress& peer,
                         uint16_t peer_port, const esp::IpAddress& local, uint16_t local_port)>;
  void on_ike(IkeHandler handler) { ike_handler_ = std::move(handler); }
  // Called from TUN reader threads when a packet matches a protect policy whose reqid has
  // no SA group, at most once per policy per AcquireRaiser::kIntervalMs. Returns false
  // when nobody took it (no charon attached). Set before start().
  void on_acquire(AcquireRaiser::Handler handler) {
    acquire_raiser_.on_acquire(std::move(handler));
  }
  // Sends an IKE packet from `source`:`local_port` (the IKE port, or the NAT-T port with
  // the non-ESP marker added); an unset or unspecified source: the first local address
  // of the peer's family. False if there is no such socket or the send failed.
  bool send_ike(const std::optional<esp::IpAddress>& source, uint16_t local_port,
                const esp::IpAddress& peer, uint16_t peer_port, std::span<const uint8_t> ike);

 private:
  // A policy itself is kept once, by the SPD that has it (the gateway's, or its interface's
  // for an if_id): with 10,000 SAs a copy here cost about 100 bytes per SA.
  struct InstalledPolicy {
    uint32_t if_id = 0;
    bool from_charon = false;
  };

  // Receive steering on a TUN device as `tun-rps` asks (io/receive_steering.h); returns
  // the status's words for it: "off", "CPUs MASK" or "not set: why".
  std::string steer_tun_receive(const std::string& device);
  // Brings the running static SAs and policies to `next` (the constructor, reload):
  // only what changed is installed or removed.
  void apply_static_locked(xfrm::StaticConfig next);
  void install_policy_locked(const xfrm::Policy& policy, bool from_charon);
  bool remove_policy_locked(uint32_t id);
  // The installed policy of that id, from the SPD that has it.
  std::optional<xfrm::Policy> installed_policy_locked(uint32_t id,
                                                      const InstalledPolicy& installed) const;
  // The tunnel and LAN MTU after SAs came or went (MtuTracker::update).
  void update_tunnel_mtu_locked();
  void ike_reader(WanEndpoint& endpoint);
  void deliver_ike(std::span<const uint8_t> ike, const sockaddr_storage& peer,
                   const esp::IpAddress& local, uint16_t local_port);
  // The endpoint of a local address; throws for any other (SAs are checked before).
  WanEndpoint& endpoint_for(const esp::IpAddress& local);
  // The UDP (or raw ESP) socket of an endpoint, opened (with its readers) on first use.
  io::WanSocket& socket_for(WanEndpoint& endpoint, bool udp);
  // Logs the receive buffer the kernel granted a new WAN socket, and what asked for it.
  void log_receive_buffer(const char* kind, const io::WanSocket& socket) const;
  // The sender for the socket an SA's packets leave through (created with it).
  WanBatchSender& sender_for(const esp::SaConfig& config);
  // One reader thread per UDP socket of an endpoint (SO_REUSEPORT has spread the peers).
  void start_udp_readers(WanEndpoint& endpoint);
  // Refuses (throws, or on a reload returns the errors) static SAs whose local end is
  // none of the local addresses.
  std::vector<std::string> static_wan_refusals(const xfrm::StaticConfig& config) const;

  GatewayConfig config_;
  std::unique_ptr<io::TunDevice> tun_;
  // IPv4 packets whose outer DF bit is clear, with a header espgw writes (every sender
  // uses it; the header carries the SA's own source address); null where the raw socket
  // could not be made. Declared before wan_, whose senders point at it.
  std::unique_ptr<io::Ipv4HeaderSender> clear_df_sender_;
  bool clear_df_sender_tried_ = false;
  // Per local address: its UDP, raw ESP and IKE sockets and their senders, opened as SAs
  // (or charon) need them. Declared before pipeline_, which delivers through the senders
  // until it is gone.
  WanEndpoints wan_;
  xfrm::RtNetlink netlink_;
  // Every SA's counter, ahead of what is on disk. Made before any SA is installed.
  std::unique_ptr<SaStateKeeper> sa_state_;
  std::unique_ptr<MtuTracker> mtu_;
  std::unique_ptr<pipeline::Pipeline> pipeline_;
  // The data paths; the inbound one's TunWriter is every inbound SA's sink, so both
  // outlive the SA table.
  std::unique_ptr<InboundPath> inbound_path_;
  std::unique_ptr<TunWriter> tun_writer_;
  std::unique_ptr<OutboundPath> outbound_path_;
  // Route-based VPN: the TUN devices of the interface ids, each with its SPD, readers and
  // writer (inbound SAs of its id deliver into it, so it outlives the SA table too).
  std::unique_ptr<RouteInterfaces> interfaces_;
  uint64_t flow_seed_;
  // What steer_tun_receive did, for the status: "off", "CPUs MASK" or "not set: why".
  std::string tun_rps_state_ = "off";

  std::unique_ptr<SaTable> sas_;
  std::unique_ptr<RouteTable> routes_;
  // The nftables table of the policies, changed by sync_kernel_firewall (its thread only).
  std::unique_ptr<xfrm::KernelFirewall> firewall_;
  std::unique_ptr<xfrm::FirewallSync> firewall_sync_;
  std::vector<xfrm::FirewallChange> firewall_changes_;  // under control_mutex_, not yet synced
  std::map<uint32_t, InstalledPolicy> policies_;        // by id, static and charon's
  // What the TUN readers look packets up in; its groups are the SA table's.
  PublishedOutboundLookup outbound_lookup_{std::make_shared<const OutboundLookup>()};

  // Serialises changes (reload, charon's updates, lifetimes) and status readers. The data
  // path never takes it: it reads the `outbound_lookup_` snapshot.
  mutable std::mutex control_mutex_;
  // From static-sa-file, inbound selectors filled in; its keys are wiped once installed,
  // and their fingerprints (one per SA, in order) say on a reload which SAs are unchanged.
  xfrm::StaticConfig static_config_;
  std::vector<xfrm::KeyFingerprint> static_key_fingerprints_;
  ExpireHandler expire_handler_;
  IkeHandler ike_handler_;
  IkeRateLimiter ike_limiter_;  // what deliver_ike lets through to ike_handler_

  GatewayCounters counters_;
  AcquireRaiser acquire_raiser_{counters_};  // what the TUN readers tell of trapped packets
  std::atomic<bool> running_{false};
  std::atomic<int64_t> stats_interval_s_{0};
  std::vector<std::thread> threads_;
};

}  // namespace espgw::daemon

// The outbound data path, LAN to WAN:
//
//   read_tun / read_tun_offload   read a frame from a TUN queue (offload: cut TCP
//                                 super-packets into segments)
//   submit                        classify (flow key), look up (SPD -> reqid -> SA group ->
//                                 the flow's SA), hand to the pipeline, which seals and
//                                 orders each SA's packets
//   PeerSink                      an SA's sealed packets, in order, to its peer
//   WanBatchSender                one send per batch on the WAN socket, whatever the SAs
//
// The readers never take the gateway's control lock: they read the published
// OutboundLookup snapshot, once per packet.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daemon/acquire_raiser.h"
#include "daemon/gateway_counters.h"
#include "daemon/outbound_lookup.h"
#include "esp/security_association.h"
#include "io/ipv4_header_sender.h"
#include "io/tun_device.h"
#include "io/wan_socket.h"
#include "pipeline/pipeline.h"

namespace espgw::daemon {

class OutboundPath {
 public:
  // `segment_limit`: the largest segment a TUN super-packet is cut into (MtuTracker).
  // `acquires`: told of packets whose protect policy has no SA group (trap policies).
  // The readers run while `running` holds. `spd`: the policies of a route-based
  // interface's device (daemon/route_interfaces.h); null: the default device's, the
  // lookup's SPD.
  OutboundPath(const io::TunDevice& tun, pipeline::Pipeline& pipeline,
               const PublishedOutboundLookup& lookup, const std::atomic<unsigned>& segment_limit,
               GatewayCounters& counters, AcquireRaiser& acquires, uint64_t flow_seed,
               const std::atomic<bool>& running, const xfrm::Spd* spd = nullptr);

  // A TUN queue's reader thread, without and with offloads (virtio-net header).
  void read_tun(unsigned queue);
  void read_tun_offload(unsigned queue);

 private:
  // One inner packet: classify, look up, submit (or count the drop and free it).
  void submit(pipeline::Packet* packet, const OutboundLookup& lookup);

  const io::TunDevice& tun_;
  pipeline::Pipeline& pipeline_;
  const PublishedOutboundLookup& lookup_;
  const std::atomic<unsigned>& segment_limit_;
  GatewayCounters& counters_;
  AcquireRaiser& acquires_;
  const uint64_t flow_seed_;
  const std::atomic<bool>& running_;
  const xfrm::Spd* const spd_;
};

// Sends the ESP packets of every SA that leaves through one WAN socket. A worker's batch
// that holds packets of many SAs (flows hashed over an ECMP group, many tunnels) goes out
// in one send: one sendmmsg, and with UDP GSO one buffer per run of equal-size packets to
// one peer, whichever SAs they belong to.
// Sends the packets of every SA on one WAN socket, with the outer traffic class each
// packet's SA chose. An IPv4 packet whose outer DF bit must be clear goes through
// `clear_df` instead, with the outer header written here (the socket sets DF on all it
// sends); without that sender (no CAP_NET_RAW) it keeps DF, counted.
class WanBatchSender final : public pipeline::SharedSink {
 public:
  WanBatchSender(io::WanSocket& socket, const io::Ipv4HeaderSender* clear_df,
                 GatewayCounters& counters)
      : socket_(socket), clear_df_(clear_df), counters_(counters) {}
  void deliver_together(std::span<const pipeline::ChannelDelivery> deliveries) override;

 private:
  io::WanSocket& socket_;
  const io::Ipv4HeaderSender* clear_df_;
  GatewayCounters& counters_;
};

// One outbound SA's sink: its peer's address; the packets go out through the socket's
// WanBatchSender. charon may move the peer (a NAT's new port, MOBIKE: update-sa) while
// packets are on their way: the senders read the peer through one atomic pointer per
// delivery, and an endpoint once published stays valid as long as the sink, so a send
// in flight keeps the address it started with.
class PeerSink final : public pipeline::PacketSink {
 public:
  struct Endpoint {
    sockaddr_storage peer{};
    socklen_t peer_length = 0;
    esp::IpAddress destination;
    std::optional<esp::UdpEncapsulation> udp;
  };
  // How often one SA may move; beyond it charon is told "not supported" and rekeys, which
  // gives the new SAs fresh sinks.
  static constexpr size_t kMaxMoves = 16;

  PeerSink(WanBatchSender& sender, const esp::SaConfig& sa);
  void deliver(std::span<pipeline::Packet* const> packets) override;
  pipeline::SharedSink* shared() override { return &sender_; }
  const Endpoint& endpoint() const { return *current_.load(std::memory_order_acquire); }
  // What an outer IPv4 header written by espgw needs (WanBatchSender's DF-clear packets).
  bool ipv4() const { return source_.family == 4; }
  const esp::IpAddress& source() const { return source_; }
  // Sends to `destination` (same family) and, with UDP encapsulation, those ports from now
  // on. Under the gateway's control lock; false once kMaxMoves are used up.
  bool move_to(const esp::IpAddress& destination, const std::optional<esp::UdpEncapsulation>& udp);

 private:
  WanBatchSender& sender_;
  esp::IpAddress source_;
  std::vector<std::unique_ptr<const Endpoint>> endpoints_;  // every one published, oldest first
  std::atomic<const Endpoint*> current_{nullptr};
};

}  // namespace espgw::daemon

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
#include <optional>
#include <span>

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
// WanBatchSender.
class PeerSink final : public pipeline::PacketSink {
 public:
  PeerSink(WanBatchSender& sender, const esp::SaConfig& sa);
  void deliver(std::span<pipeline::Packet* const> packets) override;
  pipeline::SharedSink* shared() override { return &sender_; }
  const sockaddr_storage& peer() const { return peer_; }
  socklen_t peer_length() const { return peer_length_; }
  // What an outer IPv4 header written by espgw needs (WanBatchSender's DF-clear packets).
  bool ipv4() const { return source_.family == 4; }
  const esp::IpAddress& source() const { return source_; }
  const esp::IpAddress& destination() const { return destination_; }
  const std::optional<esp::UdpEncapsulation>& udp() const { return udp_; }

 private:
  WanBatchSender& sender_;
  sockaddr_storage peer_{};
  socklen_t peer_length_ = 0;
  esp::IpAddress source_;
  esp::IpAddress destination_;
  std::optional<esp::UdpEncapsulation> udp_;
};

}  // namespace espgw::daemon

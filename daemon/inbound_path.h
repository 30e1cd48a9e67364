// The inbound data path, WAN to LAN:
//
//   read_wan    read a batch of datagrams from a WAN socket (recvmmsg, GRO)
//               classify: NAT keepalive (dropped), IKE (to charon), or ESP
//               hand ESP to the pipeline, which finds the SA by SPI, checks replay,
//               opens the packet and releases each SA's packets in sequence order
//   TunWriter   write the SA's decrypted packets into the TUN device
//
// The readers never take the gateway's control lock.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "daemon/gateway_counters.h"
#include "io/tun_device.h"
#include "io/wan_socket.h"
#include "pipeline/pipeline.h"

namespace espgw::daemon {

// Writes decrypted packets into the TUN device. Shared by every inbound SA: a write of
// one frame is atomic, so concurrent calls for different SAs are fine. With offloads, the
// in-order TCP segments of a flow in one delivery batch are coalesced into one
// super-packet (GRO), so the kernel's TCP stack sees few large packets.
class TunWriter final : public pipeline::PacketSink {
 public:
  // `lan_mtu`: larger TCP packets are cut to fit it (MtuTracker).
  TunWriter(const io::TunDevice& tun, GatewayCounters& counters,
            const std::atomic<unsigned>& lan_mtu)
      : tun_(tun), counters_(counters), lan_mtu_(lan_mtu) {}
  void deliver(std::span<pipeline::Packet* const> packets) override;

 private:
  void count_queue_delay(uint64_t drops, uint64_t marks);

  const io::TunDevice& tun_;
  GatewayCounters& counters_;
  const std::atomic<unsigned>& lan_mtu_;
};

class InboundPath {
 public:
  // Where IKE read on the NAT-T port goes (the non-ESP marker still in front), with the
  // local address and port it arrived on.
  using IkeReceiver = std::function<void(std::span<const uint8_t> ike, const sockaddr_storage& peer,
                                         const esp::IpAddress& local, uint16_t local_port)>;
  struct Settings {
    uint16_t udp_port = 0;  // the NAT-T port: its IKE goes to `receive_ike`
    // The queue-delay gate's target (0: off) and interval (io/queue_delay_gate.h).
    std::chrono::microseconds queue_delay_target{0};
    std::chrono::microseconds queue_delay_interval{0};
  };
  // The readers run while `running` holds.
  InboundPath(Settings settings, pipeline::Pipeline& pipeline, IkeReceiver receive_ike,
              const std::atomic<bool>& running);

  // A WAN socket's reader thread. `name`: the thread's name, as its socket appears in the
  // stats ("udp0", "raw").
  void read_wan(io::WanSocket* socket, std::string name);

  // A reload's new queue-delay gate settings: each reader starts a new gate with them
  // before its next batch (a gate's state is per reader and not shared).
  void set_queue_delay(std::chrono::microseconds target, std::chrono::microseconds interval);

 private:
  const Settings settings_;
  std::atomic<uint64_t> gate_target_ns_;
  std::atomic<uint64_t> gate_interval_ns_;
  std::atomic<uint32_t> gate_generation_{0};
  pipeline::Pipeline& pipeline_;
  IkeReceiver receive_ike_;
  const std::atomic<bool>& running_;
};

}  // namespace espgw::daemon

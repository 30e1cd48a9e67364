// The inbound data path, top to bottom: read a batch of WAN datagrams, classify each
// (NAT keepalive, IKE or ESP), hand ESP to the pipeline (which opens it and releases each
// SA's packets in sequence order), and write the decrypted packets into the TUN device.
#include "daemon/inbound_path.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <optional>

#include "esp/ecn.h"
#include "esp/wire.h"
#include "io/offload.h"
#include "io/queue_delay_gate.h"
#include "util/clock.h"
#include "util/thread_name.h"

namespace espgw::daemon {

namespace {

constexpr size_t kWanBatch = 32;
constexpr int kPollMs = 100;  // how often an idle reader looks at the stop flag
// A datagram that seems to have waited longer was stamped before a clock step.
constexpr uint64_t kMaxPlausibleQueueDelayNs = 1'000'000'000;

}  // namespace

InboundPath::InboundPath(Settings settings, pipeline::Pipeline& pipeline, IkeReceiver receive_ike,
                         const std::atomic<bool>& running)
    : settings_(settings),
      gate_target_ns_(
          static_cast<uint64_t>(std::chrono::nanoseconds(settings.queue_delay_target).count())),
      gate_interval_ns_(
          static_cast<uint64_t>(std::chrono::nanoseconds(settings.queue_delay_interval).count())),
      pipeline_(pipeline),
      receive_ike_(std::move(receive_ike)),
      running_(running) {}

// --- 1. Read, classify, hand to the pipeline to open and order ---

void InboundPath::read_wan(io::WanSocket* socket, std::string name) {
  name_this_thread("wan-rx-" + name);
  std::array<pipeline::Packet*, kWanBatch> packets{};
  std::array<io::Datagram, kWanBatch> datagrams{};
  size_t have = 0;
  uint32_t gate_generation = gate_generation_.load(std::memory_order_acquire);
  std::optional<io::QueueDelayGate> gate;
  auto new_gate = [&] {
    gate.emplace(gate_target_ns_.load(std::memory_order_relaxed),
                 gate_interval_ns_.load(std::memory_order_relaxed));
  };
  new_gate();
  pipeline_.register_reader();  // a recvmmsg batch reaches a worker together
  while (running_.load(std::memory_order_relaxed)) {
    while (have < kWanBatch) {
      pipeline::Packet* packet = pipeline_.acquire();
      if (!packet) break;
      packets[have++] = packet;
    }
    if (have == 0) {
      usleep(50);
      continue;
    }
    for (size_t i = 0; i < have; ++i) datagrams[i].buffer = &packets[i]->buffer;
    const int received = socket->receive({datagrams.data(), have}, kPollMs);
    if (received <= 0) continue;
    if (const uint32_t g = gate_generation_.load(std::memory_order_acquire); g != gate_generation) {
      gate_generation = g;
      new_gate();
    }
    // The kernel stamps arrivals with the real-time clock; the gate keeps time with the
    // monotonic one (a clock step must not look like a delay, hence the bound).
    const uint64_t now_real = clock_ns(CLOCK_REALTIME);
    const uint64_t now = clock_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < received; ++i) {
      pipeline::Packet* packet = packets[i];
      esp::PacketBuffer& buffer = packet->buffer;
      const uint64_t arrival = datagrams[i].arrival_ns;
      const uint64_t waited =
          arrival != 0 && now_real > arrival && now_real - arrival < kMaxPlausibleQueueDelayNs
              ? now_real - arrival
              : 0;
      if (socket->kind() == io::WanKind::udp) {
        const esp::WireKind kind = esp::udp_payload_kind(buffer.bytes());
        if (kind == esp::WireKind::nat_keepalive) {
          pipeline_.engine_counters().count(esp::DropReason::nat_keepalive);
          pipeline_.release(packet);
          continue;
        }
        if (kind == esp::WireKind::ike) {
          // charon's receiver strips the marker itself, as it does for socket-default.
          receive_ike_(buffer.bytes(), datagrams[i].peer, socket->local(), settings_.udp_port);
          pipeline_.release(packet);
          continue;
        }
      }
      const bool left_empty = i + 1 == received && socket->drained();
      packet->drop_at_delivery = gate->should_drop(waited, now, left_empty);
      packet->decap.outer_traffic_class = datagrams[i].traffic_class;  // for RFC 6040
      pipeline_.submit_inbound(packet);  // drops are counted by the pipeline or the SA
    }
    pipeline_.end_read_batch();
    // Unused packets stay for the next batch; move the used slots' replacements in.
    const size_t used = static_cast<size_t>(received);
    std::move(packets.begin() + used, packets.begin() + have, packets.begin());
    have -= used;
  }
  for (size_t i = 0; i < have; ++i) pipeline_.release(packets[i]);
}

void InboundPath::set_queue_delay(std::chrono::microseconds target,
                                  std::chrono::microseconds interval) {
  gate_target_ns_.store(static_cast<uint64_t>(std::chrono::nanoseconds(target).count()),
                        std::memory_order_relaxed);
  gate_interval_ns_.store(static_cast<uint64_t>(std::chrono::nanoseconds(interval).count()),
                          std::memory_order_relaxed);
  gate_generation_.fetch_add(1, std::memory_order_release);
}

// --- 2. Write: the SA's packets, in order, into the TUN device ---

void TunWriter::deliver(std::span<pipeline::Packet* const> packets) {
  // Packets the WAN reader's queue-delay gate picked: marked CE where the sender speaks
  // ECN (it slows down without losing the packet), dropped where it does not.
  uint64_t queue_delay_drops = 0;
  uint64_t queue_delay_marks = 0;
  auto keep = [&](pipeline::Packet* packet) {
    if (!packet->drop_at_delivery) return true;
    if (esp::mark_congestion_experienced({packet->buffer.data(), packet->buffer.size()})) {
      ++queue_delay_marks;
      return true;
    }
    ++queue_delay_drops;
    return false;
  };
  if (!tun_.vnet_header()) {
    for (pipeline::Packet* packet : packets)
      if (keep(packet) && !tun_.write(0, packet->buffer.bytes()))
        counters_.tun_write_failed.fetch_add(1, std::memory_order_relaxed);
    count_queue_delay(queue_delay_drops, queue_delay_marks);
    return;
  }
  thread_local io::TcpCoalescer coalescer;
  coalescer.set_max_packet(lan_mtu_.load(std::memory_order_relaxed));
  const uint64_t resegmented = coalescer.stats().resegmented;
  // The frames point into the packets' buffers, which stay ours until this returns: each
  // byte is copied once, by the kernel, from the buffer it was decrypted in.
  for (pipeline::Packet* packet : packets)
    if (keep(packet)) coalescer.add_borrowed(packet->buffer.bytes());
  count_queue_delay(queue_delay_drops, queue_delay_marks);
  auto write = [&](std::span<const iovec> frame) {
    if (!tun_.write_pieces(0, frame))
      counters_.tun_write_failed.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  coalescer.flush_pieces(write);
  if (const uint64_t more = coalescer.stats().resegmented - resegmented)
    counters_.tun_resegmented.fetch_add(more, std::memory_order_relaxed);
}

void TunWriter::count_queue_delay(uint64_t drops, uint64_t marks) {
  if (drops != 0) counters_.queue_delay.fetch_add(drops, std::memory_order_relaxed);
  if (marks != 0) counters_.queue_delay_marked.fetch_add(marks, std::memory_order_relaxed);
}

}  // namespace espgw::daemon

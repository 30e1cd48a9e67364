// The outbound data path, top to bottom: read a TUN frame, classify and look up each
// packet, submit it to the pipeline (which seals it and releases each SA's packets in
// order), and send the SA's packets to its peer in one batch per WAN socket.
#include "daemon/outbound_path.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "esp/encap.h"
#include "io/offload.h"
#include "packet/flow_key.h"
#include "pipeline/sa_group.h"
#include "util/thread_name.h"

namespace espgw::daemon {

namespace {

constexpr int kPollMs = 100;  // how often an idle reader looks at the stop flag
// A TUN reader completes its batch (the crypto inline, or the hand-over to the workers)
// when the device has nothing more to read, or after this many frames. A frame is one
// packet unless the kernel coalesced a TCP super-packet, so completing after every frame
// sent small packets (the ACKs of a transfer) one system call each; read back to back,
// equal-sized ones leave in one UDP GSO send. The bound keeps the first frame's wait
// for its crypto to a few reads.
constexpr unsigned kTunFramesPerBatch = 16;

// The completion rule of a TUN reader's batch (kTunFramesPerBatch), shared by the plain
// and the offload reader.
class TunReadBatch {
 public:
  explicit TunReadBatch(pipeline::Pipeline& pipeline) : pipeline_(pipeline) {}
  // A frame was read and its packets submitted.
  void frame_read() {
    if (++frames_ == kTunFramesPerBatch) complete();
  }
  // The device had nothing to read. True if that completed a batch: then read once more
  // before sleeping (the crypto took a while); false: nothing was pending, sleep.
  bool device_ran_dry() {
    if (frames_ == 0) {
      // About to sleep: SAs this reader's cached ECMP group views still hold after they
      // were removed go now (their key schedules are wiped with them).
      pipeline_.release_retired_group_views();
      return false;
    }
    complete();
    return true;
  }

 private:
  void complete() {
    pipeline_.end_read_batch();
    frames_ = 0;
    // A reader that never runs dry still lets go of removed SAs: about every 1,000 frames
    // it looks at some of its group views (one per tunnel it carries), going round them.
    if (++completions_ % kCompletionsPerViewSweep == 0)
      pipeline_.release_retired_group_views(kViewsPerSweep);
  }

  static constexpr unsigned kCompletionsPerViewSweep = 64;
  static constexpr size_t kViewsPerSweep = 256;
  pipeline::Pipeline& pipeline_;
  unsigned frames_ = 0;  // read since the last completion
  unsigned completions_ = 0;
};

}  // namespace

OutboundPath::OutboundPath(const io::TunDevice& tun, pipeline::Pipeline& pipeline,
                           const PublishedOutboundLookup& lookup,
                           const std::atomic<unsigned>& segment_limit, GatewayCounters& counters,
                           AcquireRaiser& acquires, uint64_t flow_seed,
                           const std::atomic<bool>& running, const xfrm::Spd* spd)
    : tun_(tun),
      pipeline_(pipeline),
      lookup_(lookup),
      segment_limit_(segment_limit),
      counters_(counters),
      acquires_(acquires),
      flow_seed_(flow_seed),
      running_(running),
      spd_(spd) {}

// --- 1. Read ---

void OutboundPath::read_tun(unsigned queue) {
  name_this_thread("tun-rx-" + std::to_string(queue));
  const int fd = tun_.fd(queue);
  pipeline_.register_reader();  // completes before it waits, as readers must
  TunReadBatch batch(pipeline_);
  while (running_.load(std::memory_order_relaxed)) {
    pipeline::Packet* packet = pipeline_.acquire();
    if (!packet) {  // backpressure: every packet is in flight
      usleep(50);
      continue;
    }
    packet->buffer.assign({}, esp::PacketBuffer::kDefaultHeadroom);
    const long n =
        tun_.read(queue, packet->buffer.data(), packet->buffer.tailroom() - esp::encap_tailroom());
    if (n <= 0) {
      pipeline_.release(packet);
      if (batch.device_ran_dry()) continue;
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    packet->buffer.push_back(static_cast<size_t>(n));
    // One snapshot per packet: a reload swaps it, and packets already classified finish
    // with the old one.
    const auto lookup = lookup_.load(std::memory_order_acquire);
    submit(packet, *lookup);
    batch.frame_read();
  }
}

void OutboundPath::read_tun_offload(unsigned queue) {
  name_this_thread("tun-rx-" + std::to_string(queue));
  // A frame is a virtio-net header and up to 64 KB of packet: read it into a scratch
  // buffer and cut TCP super-packets into MSS-sized segments (completing checksums the
  // kernel left partial), each built straight in the pipeline packet that carries it.
  const int fd = tun_.fd(queue);
  pipeline_.register_reader();  // a super-packet's segments reach a worker together
  io::TsoSegmenter segmenter;
  std::vector<uint8_t> frame(io::VnetHeader::kSize + 65536);
  TunReadBatch batch(pipeline_);
  auto acquire_waiting = [&]() -> pipeline::Packet* {
    pipeline::Packet* packet = pipeline_.acquire();
    while (!packet && running_.load(std::memory_order_relaxed)) {
      usleep(50);  // backpressure: every packet is in flight
      packet = pipeline_.acquire();
    }
    return packet;
  };
  pipeline::Packet* claimed = nullptr;  // the packet the segmenter is building in
  while (running_.load(std::memory_order_relaxed)) {
    const long n = tun_.read(queue, frame.data(), frame.size());
    if (n <= 0) {
      if (batch.device_ran_dry()) continue;
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    const auto lookup = lookup_.load(std::memory_order_acquire);
    segmenter.set_max_packet(segment_limit_.load(std::memory_order_relaxed));
    // A segment is built in a pool packet when it fits one with room for the ESP trailer;
    // one that does not is built in the segmenter's scratch, and emit counts it.
    auto claim = [&](size_t length) -> uint8_t* {
      pipeline::Packet* packet = acquire_waiting();
      if (!packet) return nullptr;
      packet->buffer.assign({}, esp::PacketBuffer::kDefaultHeadroom);
      if (packet->buffer.tailroom() < length + esp::encap_tailroom()) {
        pipeline_.release(packet);
        return nullptr;
      }
      claimed = packet;
      return packet->buffer.data();
    };
    auto emit = [&](std::span<const uint8_t> segment) {
      pipeline::Packet* packet = std::exchange(claimed, nullptr);
      if (packet && segment.data() == packet->buffer.data()) {
        packet->buffer.push_back(segment.size());  // built in place
      } else {
        // A packet passed through as the kernel wrote it, or one too large for a pool packet.
        if (packet) pipeline_.release(packet);
        packet = acquire_waiting();
        if (!packet) return false;
        if (!packet->buffer.assign(segment) || packet->buffer.tailroom() < esp::encap_tailroom()) {
          counters_.tun_bad_offload.fetch_add(1, std::memory_order_relaxed);
          pipeline_.release(packet);
          return true;
        }
      }
      submit(packet, *lookup);
      return true;
    };
    const auto result =
        segmenter.segment_frame({frame.data(), static_cast<size_t>(n)}, emit, claim);
    if (claimed) pipeline_.release(std::exchange(claimed, nullptr));  // claimed, never emitted
    if (result != io::OffloadResult::ok && result != io::OffloadResult::stopped)
      counters_.tun_bad_offload.fetch_add(1, std::memory_order_relaxed);
    batch.frame_read();
  }
}

// --- 2. Classify, look up, hand to the pipeline to seal and order ---

void OutboundPath::submit(pipeline::Packet* packet, const OutboundLookup& lookup) {
  const auto key = packet::flow_key(packet->buffer.bytes());
  if (!key) {
    counters_.not_ip.fetch_add(1, std::memory_order_relaxed);
    pipeline_.release(packet);
    return;
  }
  // A route-based interface's packets meet only its own policies: what the routing table
  // sent into it is protected by them or dropped, never another interface's tunnel.
  const auto policy = (spd_ ? *spd_ : *lookup.spd).lookup(xfrm::Direction::out, *key);
  if (!policy) {
    counters_.no_policy.fetch_add(1, std::memory_order_relaxed);
    pipeline_.release(packet);
    return;
  }
  if (policy->action != xfrm::PolicyAction::protect) {
    // A packet routed into the tunnel device has nowhere to go in clear.
    counters_.policy_discard.fetch_add(1, std::memory_order_relaxed);
    pipeline_.release(packet);
    return;
  }
  const auto group = lookup.groups.find(policy->reqid);
  // This thread's snapshot of the group keeps the channel alive through the submit.
  pipeline::OutboundChannel* channel = nullptr;
  pipeline::SaGroup::Superseded superseded;
  if (group != lookup.groups.end())
    channel = group->second->pick_for_packet(*key, flow_seed_, &superseded);
  // The group changed since this reader's last packet to it (a CHILD_SA rekeyed, added or
  // deleted): a flow may now take another SA than its packets still in flight, so those
  // leave first. A TUN queue carries each flow, so this reader's packets are the ones
  // that matter.
  if (!superseded.channels.empty()) pipeline_.fence_outbound(superseded.channels);
  if (!channel) {
    // Dropped, never sent in clear. A policy without any SA group is trapped: charon is
    // asked to negotiate one. A group without a usable SA (held after a restart) is
    // charon's to rekey already.
    counters_.no_sa.fetch_add(1, std::memory_order_relaxed);
    pipeline_.release(packet);
    if (group == lookup.groups.end()) acquires_.no_sa_group(policy->reqid, *key);
    return;
  }
  // Drops (queue-full, sequence-exhausted, ...) are counted on the SA. A worker seals the
  // packet; the SA's OrderedRelease hands its packets to its PeerSink in order.
  pipeline_.submit_outbound(*channel, packet, esp::OuterHeaders::omit);
}

// --- 3. Write: to the SA's peer, one send per batch and socket ---

namespace {
std::unique_ptr<const PeerSink::Endpoint> make_endpoint(
    const esp::IpAddress& destination, const std::optional<esp::UdpEncapsulation>& udp) {
  auto endpoint = std::make_unique<PeerSink::Endpoint>();
  endpoint->destination = destination;
  endpoint->udp = udp;
  endpoint->peer_length =
      io::WanSocket::make_peer(destination, udp ? udp->destination_port : 0, endpoint->peer);
  return endpoint;
}
}  // namespace

PeerSink::PeerSink(WanBatchSender& sender, const esp::SaConfig& sa)
    : sender_(sender), source_(sa.tunnel_source) {
  endpoints_.push_back(make_endpoint(sa.tunnel_destination, sa.udp_encapsulation));
  current_.store(endpoints_.back().get(), std::memory_order_release);
}

bool PeerSink::move_to(const esp::IpAddress& destination,
                       const std::optional<esp::UdpEncapsulation>& udp) {
  if (endpoints_.size() > kMaxMoves || destination.family != source_.family ||
      udp.has_value() != endpoint().udp.has_value())
    return false;
  endpoints_.push_back(make_endpoint(destination, udp));
  current_.store(endpoints_.back().get(), std::memory_order_release);
  return true;
}

void PeerSink::deliver(std::span<pipeline::Packet* const> packets) {
  const pipeline::ChannelDelivery delivery{this, packets};
  sender_.deliver_together({&delivery, 1});
}

void WanBatchSender::deliver_together(std::span<const pipeline::ChannelDelivery> deliveries) {
  // Packets leave in the order given: a run for one socket is sent before the next run
  // for the other begins.
  std::array<io::Outgoing, pipeline::Pipeline::kWorkerBatch * 2> batch;
  size_t count = 0;
  bool batch_clears_df = false;
  auto send = [&] {
    const int sent = batch_clears_df ? clear_df_->send({batch.data(), count})
                                     : socket_.send({batch.data(), count});
    if (static_cast<size_t>(sent) < count)
      counters_.wan_send_failed.fetch_add(count - static_cast<size_t>(std::max(sent, 0)),
                                          std::memory_order_relaxed);
    count = 0;
  };
  for (const pipeline::ChannelDelivery& delivery : deliveries) {
    // Only PeerSinks name this sender as their shared sink.
    const auto& sink = static_cast<const PeerSink&>(*delivery.channel_sink);
    const PeerSink::Endpoint& peer = sink.endpoint();  // one peer for the whole delivery
    for (pipeline::Packet* packet : delivery.packets) {
      const esp::PreparedEncap& outer = packet->encap;
      bool clears_df = !outer.outer_dont_fragment && sink.ipv4();
      if (clears_df && (!clear_df_ || packet->buffer.headroom() < io::kIpv4OuterRoom)) {
        counters_.outer_df_kept.fetch_add(1, std::memory_order_relaxed);
        clears_df = false;
      }
      if (count == batch.size() || (count != 0 && clears_df != batch_clears_df)) send();
      batch_clears_df = clears_df;
      if (!clears_df) {
        batch[count++] = {packet->buffer.data(), packet->buffer.size(), &peer.peer,
                          peer.peer_length, outer.outer_traffic_class};
        continue;
      }
      const size_t esp_length = packet->buffer.size();
      const uint8_t* header =
          io::write_ipv4_outer_header(packet->buffer.data(), esp_length, sink.source(),
                                      peer.destination, peer.udp, outer.outer_traffic_class);
      batch[count++] = {header, static_cast<size_t>(packet->buffer.data() + esp_length - header),
                        &peer.peer, peer.peer_length, 0};
    }
  }
  if (count != 0) send();
}

}  // namespace espgw::daemon

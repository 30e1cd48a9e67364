#include "daemon/gateway.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "daemon/counter_log.h"
#include "daemon/counter_registry.h"
#include "daemon/gateway_entries.h"
#include "daemon/log.h"
#include "esp/ecn.h"
#include "esp/esp_format.h"
#include "esp/wire.h"
#include "io/offload.h"
#include "io/queue_delay_gate.h"
#include "io/receive_steering.h"
#include "packet/flow_key.h"
#include "util/clock.h"
#include "util/secure_wipe.h"
#include "util/thread_name.h"
#include "xfrm/key_fingerprint.h"
#include "xfrm/lifetime.h"

namespace espgw::daemon {

namespace {

constexpr size_t kWanBatch = 32;
constexpr int kPollMs = 100;  // how often idle readers look at the stop flag
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
    pipeline_.complete_submitted();
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
// A datagram that seems to have waited longer was stamped before a clock step.
constexpr uint64_t kMaxPlausibleQueueDelayNs = 1'000'000'000;

// The SA group slot an outbound SA fills (its member key for rendezvous hashing): the
// IKE_SA for charon's SAs, so that a CHILD_SA rekey moves no flow; the SPI for static SAs,
// which are never rekeyed. The top bit keeps the two kinds apart.
uint64_t group_slot(const xfrm::SadEntry& entry) {
  return entry.group_slot != 0 ? (entry.group_slot | (uint64_t{1} << 63)) : entry.config.spi;
}

uint64_t random_seed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = 0x9e3779b97f4a7c15ull;
  return seed;
}

// Whether an installed SA is `entry` again: same fields, and a key of the same
// fingerprint (the installed copy no longer has the key itself).
template <typename Installed>
bool unchanged(const Installed& installed, const xfrm::SadEntry& entry) {
  return xfrm::same_except_key(installed.entry, entry) &&
         xfrm::same_fingerprint(installed.key_fingerprint,
                                xfrm::key_fingerprint(entry.config.key_material));
}

// A policy's selector as an inbound SA checks it: the inner source is the remote side.
esp::TrafficSelector inbound_selector(const xfrm::Selector& s) {
  return {s.remote,
          s.local,
          s.protocol,
          s.remote_ports.first,
          s.remote_ports.last,
          s.local_ports.first,
          s.local_ports.last};
}

// Inbound SAs accept inner packets within the selectors of the in/fwd protect policies of
// their reqid (RFC 4301 5.2); without such policies, the reversed out policies. None at
// all leaves the SA without selectors, which install_sa_locked refuses.
std::vector<esp::TrafficSelector> inbound_selectors(const xfrm::StaticConfig& config,
                                                    uint32_t reqid) {
  std::vector<esp::TrafficSelector> selectors;
  for (const auto& policy : config.policies)
    if (policy.action == xfrm::PolicyAction::protect && policy.reqid == reqid &&
        policy.direction != xfrm::Direction::out)
      selectors.push_back(inbound_selector(policy.selector));
  if (selectors.empty())
    for (const auto& policy : config.policies)
      if (policy.action == xfrm::PolicyAction::protect && policy.reqid == reqid &&
          policy.direction == xfrm::Direction::out)
        selectors.push_back(inbound_selector(policy.selector));
  return selectors;
}

}  // namespace

// Sends the ESP packets of every SA that leaves through one WAN socket. A worker's batch
// that holds packets of many SAs (flows hashed over an ECMP group, many tunnels) goes out
// in one send: one sendmmsg, and with UDP GSO one buffer per run of equal-size packets to
// one peer, whichever SAs they belong to.
class Gateway::WanTransmitter final : public pipeline::SharedSink {
 public:
  WanTransmitter(io::WanSocket& socket, GatewayCounters& counters)
      : socket_(socket), counters_(counters) {}
  void deliver_together(std::span<const pipeline::ChannelDelivery> deliveries) override;

 private:
  io::WanSocket& socket_;
  GatewayCounters& counters_;
};

// One SA's way out: its peer's address, and the socket's transmitter.
class Gateway::WanSink final : public pipeline::PacketSink {
 public:
  WanSink(WanTransmitter& transmitter, const esp::SaConfig& sa) : transmitter_(transmitter) {
    const uint16_t port = sa.udp_encapsulation ? sa.udp_encapsulation->destination_port : 0;
    peer_length_ = io::WanSocket::make_peer(sa.tunnel_destination, port, peer_);
  }
  void deliver(std::span<pipeline::Packet* const> packets) override {
    const pipeline::ChannelDelivery delivery{this, packets};
    transmitter_.deliver_together({&delivery, 1});
  }
  pipeline::SharedSink* shared() override { return &transmitter_; }
  const sockaddr_storage& peer() const { return peer_; }
  socklen_t peer_length() const { return peer_length_; }

 private:
  WanTransmitter& transmitter_;
  sockaddr_storage peer_{};
  socklen_t peer_length_ = 0;
};

void Gateway::WanTransmitter::deliver_together(
    std::span<const pipeline::ChannelDelivery> deliveries) {
  std::array<io::Outgoing, pipeline::Pipeline::kWorkerBatch * 2> batch;
  size_t count = 0;
  auto send = [&] {
    const int sent = socket_.send({batch.data(), count});
    if (static_cast<size_t>(sent) < count)
      counters_.wan_send_failed.fetch_add(count - static_cast<size_t>(std::max(sent, 0)),
                                          std::memory_order_relaxed);
    count = 0;
  };
  for (const pipeline::ChannelDelivery& delivery : deliveries) {
    // Only WanSinks name this transmitter as their shared sink.
    const auto& sink = static_cast<const WanSink&>(*delivery.channel_sink);
    for (const pipeline::Packet* packet : delivery.packets) {
      if (count == batch.size()) send();
      batch[count++] = {packet->buffer.data(), packet->buffer.size(), &sink.peer(),
                        sink.peer_length()};
    }
  }
  if (count != 0) send();
}

// Writes decrypted packets into the TUN device. Shared by every inbound SA: a write of
// one frame is atomic, so concurrent calls for different SAs are fine. With offloads, the
// in-order TCP segments of a flow in one delivery batch are coalesced into one
// super-packet (GRO), so the kernel's TCP stack sees few large packets.
class Gateway::TunSink final : public pipeline::PacketSink {
 public:
  TunSink(const io::TunDevice& tun, GatewayCounters& counters, const std::atomic<unsigned>& lan_mtu)
      : tun_(tun), counters_(counters), lan_mtu_(lan_mtu) {}
  void deliver(std::span<pipeline::Packet* const> packets) override {
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
    for (pipeline::Packet* packet : packets)
      if (keep(packet)) coalescer.add(packet->buffer.bytes());
    count_queue_delay(queue_delay_drops, queue_delay_marks);
    auto write = [&](std::span<const uint8_t> frame) {
      if (!tun_.write(0, frame)) counters_.tun_write_failed.fetch_add(1, std::memory_order_relaxed);
      return true;
    };
    coalescer.flush(write);
    if (const uint64_t more = coalescer.stats().resegmented - resegmented)
      counters_.tun_resegmented.fetch_add(more, std::memory_order_relaxed);
  }

 private:
  void count_queue_delay(uint64_t drops, uint64_t marks) {
    if (drops != 0) counters_.queue_delay.fetch_add(drops, std::memory_order_relaxed);
    if (marks != 0) counters_.queue_delay_marked.fetch_add(marks, std::memory_order_relaxed);
  }

  const io::TunDevice& tun_;
  GatewayCounters& counters_;
  const std::atomic<unsigned>& lan_mtu_;
};

Gateway::Gateway(GatewayConfig config)
    : config_(std::move(config)),
      flow_seed_(random_seed()),
      ike_limiter_({config_.ike_rate_per_source, config_.ike_rate_global}, random_seed()) {
  set_log_level(config_.log_level);
  if (!config_.static_sa_file.empty()) {
    auto file = xfrm::load_static_file(config_.static_sa_file);
    if (!file.config) {
      std::string message = "static SA file has errors:";
      for (const auto& error : file.errors) message += "\n  " + error;
      throw std::runtime_error(message);
    }
    static_config_ = std::move(*file.config);
  }
  // Before anything else that could carry traffic: no SA may exist without its counter.
  sa_state_ = std::make_unique<SaStateKeeper>(config_.state_dir);

  tun_ = std::make_unique<io::TunDevice>(config_.tun_name, config_.tun_queues, config_.tun_offload);
  for (unsigned q = 0; q < tun_->queues(); ++q)
    fcntl(tun_->fd(q), F_SETFL, fcntl(tun_->fd(q), F_GETFL) | O_NONBLOCK);

  tunnel_mtu_ = derive_tunnel_mtu(static_config_);
  pipeline::PipelineConfig pipeline_config;
  pipeline_config.workers = config_.workers;
  pipeline_config.pin_workers = config_.pin_workers;
  pipeline_config.run_to_completion = config_.run_to_completion;
  pipeline_config.pool_packets = config_.pool_packets;
  pipeline_config.reorder_hold = config_.reorder_hold;
  // A TUN reader whose SA has its bound in flight waits for room rather than drop: the
  // packets in flight are sure to leave, and a host whose CPUs are busy elsewhere for a few
  // tens of ms (a 2-vCPU VM running both charons' rekeys) otherwise lost the packets read
  // meanwhile, which TCP counted as losses. Beyond this the TUN device's queue (500
  // packets) would drop them anyway.
  pipeline_config.outbound_room_wait = std::chrono::milliseconds(20);
  // A buffer holds the largest packet either side can carry: an inner packet of the
  // tunnel MTU plus ESP and outer headers, or an ESP packet of the WAN path MTU.
  pipeline_config.packet_capacity =
      std::max<size_t>(2048, esp::PacketBuffer::kDefaultHeadroom +
                                 std::max<size_t>(tunnel_mtu_ + 128, max_path_mtu_) + 64);
  pipeline_ = std::make_unique<pipeline::Pipeline>(pipeline_config);
  tun_sink_ = std::make_unique<TunSink>(*tun_, counters_, lan_mtu_);

  if (auto r = netlink_.set_mtu(tun_->name(), tunnel_mtu_); !r) throw std::runtime_error(r.message);
  if (config_.tun_address)
    if (auto r = netlink_.add_address(tun_->name(), *config_.tun_address);
        !r && !r.already_exists())
      throw std::runtime_error(r.message);
  if (auto r = netlink_.set_link_up(tun_->name()); !r) throw std::runtime_error(r.message);
  steer_tun_receive();
  // Fail closed: espgw's routing table, with what an earlier run left in it, before any
  // policy (xfrm/fail_closed_routes.h, xfrm/kernel_firewall.h).
  if (!xfrm::firewall_interface_name_ok(tun_->name()))
    throw std::runtime_error("tun-name '" + tun_->name() +
                             "': the firewall rules need letters, digits, '_', '-' or '.' only");
  firewall_ = std::make_unique<xfrm::KernelFirewall>();
  routing_ = xfrm::routing_ids_for(tun_->name());
  adopt_fail_closed_routes();

  if (!config_.control_socket.empty()) {
    // charon talks IKE through us before any SA exists: the NAT-T port and the IKE port
    // are open from the start.
    esp::SaConfig udp;
    udp.udp_encapsulation = esp::UdpEncapsulation{};
    socket_for(udp);
    if (config_.ike_port != 0) {
      io::WanSocketOptions options;
      options.buffer_bytes = 1 << 20;
      options.gro = false;  // IKE is a few datagrams per exchange
      ike_socket_ = std::make_unique<io::WanSocket>(io::WanKind::udp, config_.local_address,
                                                    config_.ike_port, options);
    }
  }
  {
    std::lock_guard lock(control_mutex_);
    xfrm::StaticConfig initial = std::move(static_config_);
    static_config_ = {};
    apply_static_locked(std::move(initial));
    if (fail_closed_route_errors_ != 0)
      throw std::runtime_error("fail closed: the kernel refused " +
                               std::to_string(fail_closed_route_errors_) +
                               " fail-closed route(s) (logged above); not starting");
    // charon replays its policies after a restart of either daemon: with a control socket
    // the routes of its last policies stay closed until it does.
    if (config_.control_socket.empty()) remove_unused_fail_closed_routes_locked();
  }
  if (!sync_kernel_firewall())
    throw std::runtime_error(
        "fail closed: the nftables table of the policies could not be "
        "installed (logged above); not starting");
  // The static SAs' first reservations are on disk before a packet can use them.
  if (!sa_state_->reserve())
    throw std::runtime_error("cannot write the SA state in " + config_.state_dir);
  const std::string workers = config_.run_to_completion
                                  ? std::string("no workers (readers run to completion)")
                                  : std::to_string(pipeline_->worker_count()) + " workers";
  log(LogLevel::info, "gateway up: %s mtu %u, %zu outbound and %zu inbound SAs, %s, %s",
      tun_->name().c_str(), tunnel_mtu_, outbound_.size(), inbound_.size(), workers.c_str(),
      config_.crypto_backend.c_str());
}

void Gateway::steer_tun_receive() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) CPU_SET(0, &cpus);
  if (!wants_tun_rps(config_, static_cast<unsigned>(CPU_COUNT(&cpus)))) return;
  const std::string mask = io::cpu_mask_text(cpus);
  const auto result = io::steer_receive_queues("/sys/class/net", tun_->name(),
                                               if_nametoindex(tun_->name().c_str()), mask);
  if (!result) {
    // Asked for by name: a clear stop. Chosen by auto: the gateway works without it.
    if (config_.tun_rps) throw std::runtime_error("tun-rps = yes: " + result.error);
    log(LogLevel::warn,
        "%s: receive steering (RPS) not set: %s; the kernel may reorder a flow's packets "
        "that different workers wrote (docs/gateway.md)",
        tun_->name().c_str(), result.error.c_str());
    tun_rps_state_ = "not set: " + result.error;
    return;
  }
  log(LogLevel::info, "%s: receive steering (RPS) to CPUs %s on %u receive queue%s%s",
      tun_->name().c_str(), mask.c_str(), result.queues_set, result.queues_set == 1 ? "" : "s",
      result.queues_kept ? " (others had CPUs set already, left as they were)" : "");
  tun_rps_state_ = "CPUs " + mask;
}

Gateway::~Gateway() {
  stop();
  pipeline_.reset();  // delivers what is in flight while sockets and TUN still exist
  // Nothing sends or receives any more: the exact counters, so that a planned restart
  // neither skips sequence numbers nor refuses the peer's next packets.
  sa_state_->stop();
  sa_state_->write_exact();
  // Only the routes through the TUN device: the fail-closed routes and the firewall table
  // keep the protected destinations closed until espgw runs again (or --release).
  for (const auto& [text, route] : routes_)
    if (auto r = netlink_.remove_route(route.prefix, tun_->name(), std::nullopt, routing_.table);
        !r)
      log(LogLevel::warn, "%s", r.message.c_str());
  log(LogLevel::info,
      "gateway down: routes through %s removed, %s closed; fail-closed routes (table %u), "
      "bypass rules and nftables table %s kept (espgw --release removes them)",
      tun_->name().c_str(), tun_->name().c_str(), routing_.table,
      xfrm::firewall_table_name(tun_->name()).c_str());
}

unsigned Gateway::mtu_candidate(const esp::SaConfig& sa) {
  // One route lookup per peer, not per SA: charon installs SAs one at a time. reload()
  // forgets the cache.
  const uint32_t path = route_mtu_cached(sa.tunnel_destination);
  max_path_mtu_ = std::max<size_t>(max_path_mtu_, path);
  const size_t overhead =
      esp::max_esp_overhead(sa.tunnel_destination.family == 6, sa.udp_encapsulation.has_value());
  return std::max(static_cast<unsigned>(path > overhead ? path - overhead : 576), 576u);
}

uint32_t Gateway::route_mtu_cached(const esp::IpAddress& address) {
  const std::string text = address.to_string();
  auto cached = path_mtus_.find(text);
  if (cached == path_mtus_.end()) {
    const auto route = netlink_.route_mtu(address);
    if (!route) log(LogLevel::warn, "%s; assuming 1500", route.message.c_str());
    cached = path_mtus_.emplace(text, route ? route.mtu : 1500).first;
  }
  return cached->second;
}

unsigned Gateway::lan_mtu_candidate(const esp::SaConfig& sa) {
  unsigned mtu = 0;
  for (const auto& selector : sa.selectors) {
    if (selector.local.length == 0) continue;  // "any" says nothing about the LAN
    const unsigned route = route_mtu_cached(selector.local.address);
    mtu = mtu == 0 ? route : std::min(mtu, route);
  }
  return mtu;
}

unsigned Gateway::derive_tunnel_mtu(const xfrm::StaticConfig& config) {
  if (config_.tunnel_mtu) return *config_.tunnel_mtu;
  unsigned mtu = 0;
  for (const auto& sa : config.sas)
    if (sa.direction == xfrm::Direction::out) {
      const unsigned candidate = mtu_candidate(sa.config);
      mtu = mtu == 0 ? candidate : std::min(mtu, candidate);
    }
  return mtu == 0 ? 1400u : mtu;
}

io::WanSocket& Gateway::socket_for(const esp::SaConfig& sa) {
  io::WanSocketOptions options;
  options.buffer_bytes = wan_socket_buffer_bytes(config_);
  if (sa.udp_encapsulation) {
    if (udp_sockets_.empty()) {
      // With a single reader the port stays exclusive: nothing else can join it by
      // accident. Readers start only once every socket is bound.
      const unsigned readers = wan_reader_count(config_);
      options.reuse_port = readers > 1;
      for (unsigned i = 0; i < readers; ++i)
        udp_sockets_.push_back(std::make_unique<io::WanSocket>(
            io::WanKind::udp, config_.local_address, config_.udp_port, options));
      log_receive_buffer("udp", *udp_sockets_.front());
      // The first UDP SA may come after start(): with a reload, or from charon.
      if (running_.load()) start_udp_readers();
    }
    return *udp_sockets_.front();
  }
  if (!raw_socket_) {
    raw_socket_ =
        std::make_unique<io::WanSocket>(io::WanKind::raw_esp, config_.local_address, 0, options);
    log_receive_buffer("raw", *raw_socket_);
    if (running_.load()) threads_.emplace_back([this] { wan_reader(raw_socket_.get(), "raw"); });
  }
  return *raw_socket_;
}

void Gateway::log_receive_buffer(const char* kind, const io::WanSocket& socket) const {
  log(LogLevel::info,
      "wan %s socket: receive buffer %llu bytes (socket-buffer %s%zu, doubled by the kernel), "
      "gro=%s",
      kind, static_cast<unsigned long long>(socket.stats().receive_buffer),
      config_.socket_buffer_bytes ? "" : "auto: ", wan_socket_buffer_bytes(config_),
      socket.gro() ? "on" : "off");
}

Gateway::WanTransmitter& Gateway::transmitter_for(const esp::SaConfig& sa) {
  io::WanSocket& socket = socket_for(sa);
  std::unique_ptr<WanTransmitter>& transmitter =
      sa.udp_encapsulation ? udp_transmitter_ : raw_transmitter_;
  if (!transmitter) transmitter = std::make_unique<WanTransmitter>(socket, counters_);
  return *transmitter;
}

std::shared_ptr<pipeline::SaGroup> Gateway::group_locked(uint32_t reqid) {
  const auto current = forwarding_.load();
  if (auto found = current->groups.find(reqid); found != current->groups.end())
    return found->second;
  auto next = std::make_shared<Forwarding>(*current);  // shares the SPD
  // The members share one SA's in-flight bound: an ECMP group queues no more than one SA.
  auto group = std::make_shared<pipeline::SaGroup>(pipeline_->config().max_in_flight_per_sa);
  next->groups.emplace(reqid, group);
  forwarding_.store(std::move(next));
  return group;
}

void Gateway::drop_group_if_empty_locked(uint32_t reqid) {
  const auto current = forwarding_.load();
  auto found = current->groups.find(reqid);
  if (found == current->groups.end() || found->second->size() != 0) return;
  auto next = std::make_shared<Forwarding>(*current);
  next->groups.erase(reqid);
  forwarding_.store(std::move(next));
}

bool Gateway::install_sa_locked(const xfrm::SadEntry& entry, InstallOrigin origin) {
  const bool from_charon = origin != InstallOrigin::static_file;
  // RFC 4301 5.2: an inbound SA checks decrypted packets against its selectors; one
  // without any would accept every inner packet. The static parser and the add-sa parser
  // refuse such SAs already; this keeps any other way in closed.
  if (entry.direction == xfrm::Direction::in && entry.config.selectors.empty()) {
    log(LogLevel::error, "SA in spi 0x%08x refused: it has no traffic selectors", entry.config.spi);
    return false;
  }
  const xfrm::SaId key = xfrm::sa_id_of(entry);
  const auto& backend = *crypto::find_backend(config_.crypto_backend);
  // Taken before the SA wipes its copy of the key: the key is what its counter belongs to.
  const xfrm::SaStateKey state_key{entry.direction,
                                   xfrm::key_fingerprint(entry.config.key_material)};
  if (entry.direction == xfrm::Direction::out) {
    if (auto existing = outbound_.find(key); existing != outbound_.end()) {
      if (unchanged(*existing->second, entry)) {
        existing->second->from_charon = from_charon;
        return true;
      }
      retire_outbound_locked(existing, /*forget_key=*/false);  // its key may stay
    }
    auto fresh = std::make_unique<OutboundEntry>();
    fresh->entry = entry;
    // The SA expands its own copy of the key; the gateway's record keeps a fingerprint.
    fresh->key_fingerprint = xfrm::key_fingerprint(entry.config.key_material);
    wipe(fresh->entry.config.key_material);
    fresh->from_charon = from_charon;
    fresh->sa = std::make_shared<esp::OutboundSa>(entry.config, backend);
    fresh->state_key = state_key;
    // Before the channel is made: it starts at the SA's next sequence number.
    sa_state_->adopt(state_key, fresh->sa, origin);
    fresh->sink = std::make_shared<WanSink>(transmitter_for(entry.config), entry.config);
    // Packets in flight after the SA is removed still deliver through the sink: the
    // channel keeps it until the pipeline deletes the channel.
    fresh->channel = pipeline_->make_outbound(fresh->sa, *fresh->sink, fresh->sink);
    fresh->mtu_candidate = mtu_candidate(entry.config);
    mtu_candidates_.insert(fresh->mtu_candidate);
    log(LogLevel::info, "SA out spi 0x%08x %s -> %s %s%s installed", entry.config.spi,
        std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
        entry.config.tunnel_destination.to_string().c_str(),
        entry.config.udp_encapsulation ? "udp" : "esp", entry.config.esn ? " esn" : "");
    // The newest SA of a slot carries its flows, as the kernel sends on the newest SA
    // while a rekey has the old and the new one installed.
    group_locked(entry.reqid)->set_member(group_slot(entry), fresh->channel);
    outbound_.emplace(key, std::move(fresh));
    return true;
  }
  if (auto existing = inbound_.find(key); existing != inbound_.end()) {
    if (unchanged(*existing->second, entry)) {
      existing->second->from_charon = from_charon;
      return true;
    }
    retire_inbound_locked(existing, /*forget_key=*/false);
  }
  auto fresh = std::make_unique<InboundEntry>();
  fresh->entry = entry;
  fresh->key_fingerprint = xfrm::key_fingerprint(entry.config.key_material);
  wipe(fresh->entry.config.key_material);
  fresh->from_charon = from_charon;
  socket_for(entry.config);  // make sure the socket it arrives on exists
  fresh->sa = std::make_shared<esp::InboundSa>(entry.config, backend);
  fresh->state_key = state_key;
  sa_state_->adopt(state_key, fresh->sa, origin);
  // A rekey installs the new inbound SA while the old one still receives: the earlier SAs
  // of the same CHILD_SA (charon's slot) are its predecessors, whose packets in flight the
  // new SA's first packets must not overtake. All of them, oldest first: after a rekey
  // collision both sides' new SAs are installed, and the newest earlier SA may be the
  // redundant one, which carries nothing while the old one still has packets in flight.
  // (A scan of integers, per install of a charon SA; static SAs have no slot.)
  std::vector<const InboundEntry*> earlier;
  if (entry.group_slot != 0)
    for (const auto& [other_key, other] : inbound_)
      if (other->entry.reqid == entry.reqid && other->entry.group_slot == entry.group_slot)
        earlier.push_back(other.get());
  std::stable_sort(earlier.begin(), earlier.end(), [](const auto* a, const auto* b) {
    return a->lifetime.added_at < b->lifetime.added_at;
  });
  std::vector<std::shared_ptr<pipeline::InboundChannel>> predecessors;
  for (const InboundEntry* other : earlier) predecessors.push_back(other->channel);
  fresh->channel = pipeline_->add_inbound(fresh->sa, *tun_sink_, predecessors);
  if (!fresh->channel) {
    log(LogLevel::error, "SA in spi 0x%08x: SPI already in use", entry.config.spi);
    sa_state_->retire(state_key, from_charon);
    return false;
  }
  fresh->lan_mtu_candidate = lan_mtu_candidate(entry.config);
  if (fresh->lan_mtu_candidate) lan_mtu_candidates_.insert(fresh->lan_mtu_candidate);
  log(LogLevel::info, "SA in spi 0x%08x %s from %s installed", entry.config.spi,
      std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
      entry.config.tunnel_source.to_string().c_str());
  inbound_.emplace(key, std::move(fresh));
  return true;
}

void Gateway::retire_outbound_locked(
    std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>>::iterator it, bool forget_key) {
  const OutboundEntry& old = *it->second;
  sa_state_->retire(old.state_key, forget_key);
  // The final counters: after this the SA and its statistics are gone.
  log(LogLevel::info, "SA out spi 0x%08x removed after %llu packets, %llu bytes; drops%s",
      old.entry.config.spi, static_cast<unsigned long long>(old.sa->counters().packets()),
      static_cast<unsigned long long>(old.sa->counters().bytes()),
      format_counters(nonzero_drops(old.sa->counters().drop_counters()), " none").c_str());
  const uint32_t reqid = old.entry.reqid;
  const uint64_t slot = group_slot(old.entry);
  const auto forwarding = forwarding_.load();
  if (auto group = forwarding->groups.find(reqid); group != forwarding->groups.end())
    if (group->second->remove_member(slot, old.channel.get())) {
      // It carried the slot: the newest other SA of the slot (a rekey's predecessor not
      // yet deleted) takes over, unless it is past its hard lifetime. A scan, but of
      // integers only, and only when a slot's carrier goes.
      const OutboundEntry* successor = nullptr;
      for (const auto& [key, other] : outbound_)
        if (other.get() != &old && other->entry.reqid == reqid &&
            group_slot(other->entry) == slot &&
            other->lifetime.reported != xfrm::LifetimeState::hard &&
            (!successor || other->lifetime.added_at >= successor->lifetime.added_at))
          successor = other.get();
      if (successor) group->second->set_member(slot, successor->channel);
    }
  mtu_candidates_.erase(mtu_candidates_.find(old.mtu_candidate));
  outbound_.erase(it);
  drop_group_if_empty_locked(reqid);
}

void Gateway::retire_inbound_locked(
    std::map<xfrm::SaId, std::unique_ptr<InboundEntry>>::iterator it, bool forget_key) {
  const InboundEntry& old = *it->second;
  sa_state_->retire(old.state_key, forget_key);
  pipeline_->remove_inbound(old.entry.config.spi);
  if (old.lan_mtu_candidate)
    lan_mtu_candidates_.erase(lan_mtu_candidates_.find(old.lan_mtu_candidate));
  // The reorder figures say whether the SA's last packets came late (a gap given up after
  // its hold time, say while a worker was preempted) when a rekey seemed to lose one.
  const pipeline::ReorderStats reorder = old.channel->release().stats();
  log(LogLevel::info,
      "SA in spi 0x%08x removed after %llu packets, %llu bytes (reorder: %llu late, %llu "
      "skipped, %llu hold timeouts); drops%s",
      old.entry.config.spi, static_cast<unsigned long long>(old.sa->counters().packets()),
      static_cast<unsigned long long>(old.sa->counters().bytes()),
      static_cast<unsigned long long>(reorder.late),
      static_cast<unsigned long long>(reorder.skipped),
      static_cast<unsigned long long>(reorder.hold_timeouts),
      format_counters(nonzero_drops(old.sa->counters().drop_counters()), " none").c_str());
  inbound_.erase(it);
}

bool Gateway::remove_sa_locked(const xfrm::SaId& key) {
  // charon never installs a deleted SA's key again; a static key may come back with a
  // later reload, and its counter must then continue.
  if (auto out = outbound_.find(key); out != outbound_.end()) {
    retire_outbound_locked(out, out->second->from_charon);
    return true;
  }
  if (auto in = inbound_.find(key); in != inbound_.end()) {
    retire_inbound_locked(in, in->second->from_charon);
    return true;
  }
  return false;
}

void Gateway::add_route_use_locked(const xfrm::Policy& policy) {
  firewall_dirty_ = true;  // every policy is a rule of the firewall
  if (policy.direction != xfrm::Direction::out) return;
  if (policy.action == xfrm::PolicyAction::bypass)
    add_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind::bypass, policy.selector);
  if (policy.action != xfrm::PolicyAction::protect) return;
  // The fail-closed route before the TUN route: the destination is never routable in clear.
  add_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind::fail_closed,
                               xfrm::fail_closed_selector(policy.selector.remote));
  auto& use = routes_[policy.selector.remote.to_string()];
  if (use.policies++ > 0) return;  // ours already
  use.prefix = policy.selector.remote;
  auto r = netlink_.add_route(use.prefix, tun_->name(), std::nullopt, std::nullopt, routing_.table);
  if (!r && !r.already_exists())
    log(LogLevel::error, "%s", r.message.c_str());
  else if (r)
    log(LogLevel::info, "route %s dev %s table %u added", use.prefix.to_string().c_str(),
        tun_->name().c_str(), routing_.table);
}

void Gateway::drop_route_use_locked(const xfrm::Policy& policy) {
  firewall_dirty_ = true;
  if (policy.direction != xfrm::Direction::out) return;
  if (policy.action == xfrm::PolicyAction::bypass)
    drop_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind::bypass, policy.selector);
  if (policy.action != xfrm::PolicyAction::protect) return;
  auto use = routes_.find(policy.selector.remote.to_string());
  if (use != routes_.end() && --use->second.policies == 0) {
    if (auto r =
            netlink_.remove_route(use->second.prefix, tun_->name(), std::nullopt, routing_.table);
        !r)
      log(LogLevel::warn, "%s", r.message.c_str());
    routes_.erase(use);
  }
  // After the TUN route: the destination stays closed to the last.
  drop_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind::fail_closed,
                                xfrm::fail_closed_selector(policy.selector.remote));
}

void Gateway::adopt_fail_closed_routes() {
  if (auto r = xfrm::install_routing_rules(netlink_, routing_); !r)
    throw std::runtime_error("fail closed: " + r.message);
  std::vector<xfrm::RtNetlink::TableRoute> routes;
  if (auto r = netlink_.list_routes(routing_.table, routes); !r)
    throw std::runtime_error("fail closed: " + r.message);
  std::vector<xfrm::RtNetlink::Rule> rules;
  if (auto r = netlink_.list_rules(rules); !r)
    throw std::runtime_error("fail closed: " + r.message);
  size_t adopted = 0;
  for (const auto& route : routes)
    if (route.type == xfrm::RtNetlink::RouteType::prohibit) {
      fail_closed_routes_.adopt(xfrm::FailClosedRouteSet::Kind::fail_closed,
                                xfrm::fail_closed_selector(route.destination));
      ++adopted;
    }
  for (const auto& rule : rules)
    if (rule.priority == routing_.bypass_rule_priority &&
        rule.table == xfrm::RtNetlink::kMainTable) {
      fail_closed_routes_.adopt(xfrm::FailClosedRouteSet::Kind::bypass,
                                xfrm::bypass_selector(rule));
      ++adopted;
    }
  log(LogLevel::info,
      "fail closed: routing table %u (rule priority %u, bypass rules %u), %zu fail-closed "
      "route(s) or bypass rule(s) of an earlier run adopted",
      routing_.table, routing_.table_rule_priority, routing_.bypass_rule_priority, adopted);
}

xfrm::Result Gateway::change_fail_closed_route(bool add, xfrm::FailClosedRouteSet::Kind kind,
                                               const xfrm::Selector& selector) {
  if (kind == xfrm::FailClosedRouteSet::Kind::bypass) {
    const auto rule = xfrm::bypass_rule(selector, routing_.bypass_rule_priority);
    return add ? netlink_.add_rule(rule) : netlink_.remove_rule(rule);
  }
  return add ? netlink_.add_typed_route(xfrm::RtNetlink::RouteType::prohibit, selector.remote,
                                        routing_.table, xfrm::kFailClosedRouteMetric)
             : netlink_.remove_typed_route(xfrm::RtNetlink::RouteType::prohibit, selector.remote,
                                           routing_.table, xfrm::kFailClosedRouteMetric);
}

void Gateway::remove_unused_fail_closed_routes_locked() {
  for (const auto& entry : fail_closed_routes_.unused()) {
    const bool bypass = entry.kind == xfrm::FailClosedRouteSet::Kind::bypass;
    const auto r = change_fail_closed_route(false, entry.kind, entry.selector);
    if (!r && r.error != ESRCH && r.error != ENOENT)
      log(LogLevel::warn, "%s", r.message.c_str());
    else
      log(LogLevel::info, "fail closed: %s %s of an earlier run removed (no policy needs it)",
          bypass ? "bypass rule to" : "prohibit route", entry.selector.remote.to_string().c_str());
    fail_closed_routes_.forget(entry.kind, entry.selector);
  }
  firewall_dirty_ = true;
}

void Gateway::add_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind kind,
                                           const xfrm::Selector& selector) {
  if (!fail_closed_routes_.use(kind, selector)) return;  // in the kernel already
  const auto r = change_fail_closed_route(true, kind, selector);
  if (r || r.already_exists()) return;
  log(LogLevel::error, "fail closed: %s", r.message.c_str());
  // A fail-closed route the kernel refused leaves the destination open without espgw.
  if (kind == xfrm::FailClosedRouteSet::Kind::fail_closed) ++fail_closed_route_errors_;
}

void Gateway::drop_fail_closed_route_locked(xfrm::FailClosedRouteSet::Kind kind,
                                            const xfrm::Selector& selector) {
  if (!fail_closed_routes_.release(kind, selector, keep_fail_closed_routes_)) return;
  const auto r = change_fail_closed_route(false, kind, selector);
  if (!r && r.error != ESRCH && r.error != ENOENT) log(LogLevel::warn, "%s", r.message.c_str());
}

bool Gateway::sync_kernel_firewall() {
  xfrm::FirewallSpec spec;
  {
    std::lock_guard lock(control_mutex_);
    if (!firewall_dirty_) return true;
    firewall_dirty_ = false;
    spec.tun_name = tun_->name();
    spec.policies = forwarding_.load()->spd->list();
    spec.fail_closed_prefixes = fail_closed_routes_.fail_closed_prefixes();
  }
  // Without the lock: nft takes a while with many policies, and charon's changes go on.
  const auto r = firewall_->run(xfrm::firewall_ruleset(spec), "installing the policies' rules");
  if (r) return true;
  log(LogLevel::error, "%s", r.message.c_str());
  std::lock_guard lock(control_mutex_);
  firewall_dirty_ = true;  // the next call tries again
  return false;
}

void Gateway::install_policy_locked(const xfrm::Policy& policy, bool from_charon) {
  if (auto existing = policies_.find(policy.id); existing != policies_.end()) {
    if (existing->second.policy == policy) {
      existing->second.from_charon = from_charon;
      return;
    }
    remove_policy_locked(policy.id);
  }
  // The SPD learns the policy before its route exists: whatever the route brings in
  // finds the policy.
  forwarding_.load()->spd->add(policy);
  add_route_use_locked(policy);
  policies_.emplace(policy.id, InstalledPolicy{policy, from_charon});
}

bool Gateway::remove_policy_locked(uint32_t id) {
  auto existing = policies_.find(id);
  if (existing == policies_.end()) return false;
  drop_route_use_locked(existing->second.policy);
  forwarding_.load()->spd->remove(id);
  policies_.erase(existing);
  return true;
}

void Gateway::update_tunnel_mtu_locked() {
  const unsigned lan_mtu = config_.lan_mtu               ? *config_.lan_mtu
                           : lan_mtu_candidates_.empty() ? 1500u
                                                         : *lan_mtu_candidates_.begin();
  if (lan_mtu != lan_mtu_.exchange(lan_mtu, std::memory_order_relaxed))
    log(LogLevel::info, "lan mtu %u: larger TCP packets from the tunnel are segmented to fit",
        lan_mtu);
  if (!config_.tunnel_mtu) {
    // SAs towards a peer with a smaller path MTU may have arrived: the TUN MTU follows the
    // smallest, within what the packet buffers hold.
    const size_t buffer_limit = pipeline_->config().packet_capacity -
                                esp::PacketBuffer::kDefaultHeadroom - esp::encap_tailroom() - 128;
    const unsigned wanted = mtu_candidates_.empty() ? 1400u : *mtu_candidates_.begin();
    const unsigned mtu = std::min<unsigned>(wanted, static_cast<unsigned>(buffer_limit));
    if (mtu != tunnel_mtu_) {
      if (auto r = netlink_.set_mtu(tun_->name(), mtu); !r) {
        log(LogLevel::error, "%s", r.message.c_str());
      } else {
        log(LogLevel::info, "%s mtu %u -> %u", tun_->name().c_str(), tunnel_mtu_, mtu);
        tunnel_mtu_ = mtu;
      }
    }
  }
  segment_limit_.store(config_.jumbo_segments ? tunnel_mtu_ : 0, std::memory_order_relaxed);
}

void Gateway::apply_static_locked(xfrm::StaticConfig next) {
  // Static inbound SAs take their selectors from the file's policies.
  for (auto& entry : next.sas)
    if (entry.direction == xfrm::Direction::in && entry.config.selectors.empty())
      entry.config.selectors = inbound_selectors(next, entry.reqid);

  // Policies that left the file or changed go first; a changed one keeps its id.
  for (const auto& old : static_config_.policies)
    if (std::none_of(next.policies.begin(), next.policies.end(),
                     [&](const auto& policy) { return policy == old; }))
      remove_policy_locked(old.id);
  for (const auto& policy : next.policies) install_policy_locked(policy, false);

  // SAs: what left the file goes, what is new or changed is installed; an unchanged SA
  // is left alone and keeps its sequence numbers, replay window and counters.
  // The SAs kept from the last load have no keys: keys are compared by fingerprint.
  std::vector<xfrm::KeyFingerprint> next_fingerprints;
  for (const auto& entry : next.sas)
    next_fingerprints.push_back(xfrm::key_fingerprint(entry.config.key_material));
  for (size_t i = 0; i < static_config_.sas.size(); ++i) {
    const xfrm::SadEntry& old = static_config_.sas[i];
    bool stays = false;
    for (size_t j = 0; j < next.sas.size() && !stays; ++j)
      stays = xfrm::same_except_key(next.sas[j], old) &&
              xfrm::same_fingerprint(next_fingerprints[j], static_key_fingerprints_[i]);
    if (!stays) remove_sa_locked(xfrm::sa_id_of(old));
  }
  for (const auto& entry : next.sas) install_sa_locked(entry, InstallOrigin::static_file);

  // The installed SAs hold the keys now; the copy kept for the next reload goes without.
  for (auto& entry : next.sas) wipe(entry.config.key_material);
  static_config_ = std::move(next);
  static_key_fingerprints_ = std::move(next_fingerprints);
  update_tunnel_mtu_locked();
}

bool Gateway::reload() {
  if (config_.static_sa_file.empty()) {
    log(LogLevel::info, "reload: no static-sa-file configured, nothing to re-read");
    return true;
  }
  auto file = xfrm::load_static_file(config_.static_sa_file);
  if (!file.config) {
    for (const auto& error : file.errors) log(LogLevel::error, "%s", error.c_str());
    log(LogLevel::error, "reload refused: keeping the running configuration");
    return false;
  }
  std::lock_guard lock(control_mutex_);
  // A reload also picks up WAN MTU changes: the path MTUs are looked up again.
  path_mtus_.clear();
  mtu_candidates_.clear();
  for (auto& [key, entry] : outbound_) {
    entry->mtu_candidate = mtu_candidate(entry->entry.config);
    mtu_candidates_.insert(entry->mtu_candidate);
  }
  lan_mtu_candidates_.clear();
  for (auto& [key, entry] : inbound_) {
    entry->lan_mtu_candidate = lan_mtu_candidate(entry->entry.config);
    if (entry->lan_mtu_candidate) lan_mtu_candidates_.insert(entry->lan_mtu_candidate);
  }
  apply_static_locked(std::move(*file.config));
  sa_state_->reserve();  // new static SAs carry traffic once their reservation is on disk
  log(LogLevel::info, "reloaded %s: %zu outbound and %zu inbound SAs",
      config_.static_sa_file.c_str(), outbound_.size(), inbound_.size());
  return true;
}

bool Gateway::add_dynamic_sa(const xfrm::SadEntry& entry, bool replayed) {
  std::lock_guard lock(control_mutex_);
  const xfrm::SaId key = xfrm::sa_id_of(entry);
  auto is_static = [&](const auto& entries) {
    const auto found = entries.find(key);
    return found != entries.end() && !found->second->from_charon;
  };
  if (is_static(outbound_) || is_static(inbound_)) return false;  // the static file's
  const bool installed = install_sa_locked(
      entry, replayed ? InstallOrigin::charon_replayed : InstallOrigin::charon_new);
  update_tunnel_mtu_locked();
  return installed;
}

bool Gateway::remove_dynamic_sa(uint32_t spi, const esp::IpAddress& destination) {
  std::lock_guard lock(control_mutex_);
  const xfrm::SaId key{spi, destination};
  auto from_charon = [&](const auto& entries) {
    const auto found = entries.find(key);
    return found != entries.end() && found->second->from_charon;
  };
  if (!from_charon(outbound_) && !from_charon(inbound_)) return false;
  remove_sa_locked(key);
  update_tunnel_mtu_locked();
  return true;
}

void Gateway::add_dynamic_policy(const xfrm::Policy& policy) {
  std::lock_guard lock(control_mutex_);
  install_policy_locked(policy, true);
}

bool Gateway::remove_dynamic_policy(uint32_t id) {
  std::lock_guard lock(control_mutex_);
  return remove_policy_locked(id);
}

size_t Gateway::clear_dynamic_sas() {
  std::lock_guard lock(control_mutex_);
  std::vector<xfrm::SaId> keys;
  for (const auto& [key, entry] : outbound_)
    if (entry->from_charon) keys.push_back(key);
  for (const auto& [key, entry] : inbound_)
    if (entry->from_charon) keys.push_back(key);
  for (const auto& key : keys) remove_sa_locked(key);
  update_tunnel_mtu_locked();
  return keys.size();
}

size_t Gateway::clear_dynamic_policies() {
  std::lock_guard lock(control_mutex_);
  std::vector<uint32_t> ids;
  for (const auto& [id, installed] : policies_)
    if (installed.from_charon) ids.push_back(id);
  // A charon that went away (or flushed) will install its policies again: until then their
  // destinations stay closed (fail-closed routes kept, without a user).
  keep_fail_closed_routes_ = true;
  for (const uint32_t id : ids) remove_policy_locked(id);
  keep_fail_closed_routes_ = false;
  return ids.size();
}

void Gateway::start() {
  running_.store(true);
  sa_state_->start();
  for (unsigned q = 0; q < tun_->queues(); ++q) {
    if (tun_->vnet_header())
      threads_.emplace_back([this, q] { tun_reader_offload(q); });
    else
      threads_.emplace_back([this, q] { tun_reader(q); });
  }
  start_udp_readers();
  if (raw_socket_) threads_.emplace_back([this] { wan_reader(raw_socket_.get(), "raw"); });
  if (ike_socket_) threads_.emplace_back([this] { ike_reader(); });
}

void Gateway::stop() {
  running_.store(false);
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

void Gateway::handle_outbound(pipeline::Packet* packet, const Forwarding& forwarding) {
  const auto key = packet::flow_key(packet->buffer.bytes());
  if (!key) {
    counters_.not_ip.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  const auto policy = forwarding.spd->lookup(xfrm::Direction::out, *key);
  if (!policy) {
    counters_.no_policy.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  if (policy->action != xfrm::PolicyAction::protect) {
    // A packet routed into the tunnel device has nowhere to go in clear.
    counters_.policy_discard.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  const auto group = forwarding.groups.find(policy->reqid);
  // This thread's snapshot of the group keeps the channel alive through the submit.
  pipeline::OutboundChannel* channel = nullptr;
  pipeline::SaGroup::Superseded superseded;
  if (group != forwarding.groups.end())
    channel = group->second->pick_for_packet(*key, flow_seed_, &superseded);
  // The group changed since this reader's last packet to it (a CHILD_SA rekeyed, added or
  // deleted): a flow may now take another SA than its packets still in flight, so those
  // leave first. A TUN queue carries each flow, so this reader's packets are the ones
  // that matter.
  if (!superseded.channels.empty()) pipeline_->fence_outbound(superseded.channels);
  if (!channel) {
    counters_.no_sa.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  // Drops (queue-full, sequence-exhausted, ...) are counted on the SA.
  pipeline_->submit_outbound(*channel, packet, esp::OuterHeaders::omit);
}

void Gateway::start_udp_readers() {
  for (size_t i = 0; i < udp_sockets_.size(); ++i)
    threads_.emplace_back(
        [this, s = udp_sockets_[i].get(), i] { wan_reader(s, "udp" + std::to_string(i)); });
}

void Gateway::tun_reader(unsigned queue) {
  name_this_thread("tun-rx-" + std::to_string(queue));
  const int fd = tun_->fd(queue);
  pipeline_->hand_over_in_batches();  // completes before it waits, as readers must
  TunReadBatch batch(*pipeline_);
  while (running_.load(std::memory_order_relaxed)) {
    pipeline::Packet* packet = pipeline_->acquire();
    if (!packet) {  // backpressure: every packet is in flight
      usleep(50);
      continue;
    }
    packet->buffer.assign({}, esp::PacketBuffer::kDefaultHeadroom);
    const long n =
        tun_->read(queue, packet->buffer.data(), packet->buffer.tailroom() - esp::encap_tailroom());
    if (n <= 0) {
      pipeline_->release(packet);
      if (batch.device_ran_dry()) continue;
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    packet->buffer.push_back(static_cast<size_t>(n));
    // One snapshot per packet: a reload swaps it, and packets already classified finish
    // with the old one.
    const auto forwarding = forwarding_.load(std::memory_order_acquire);
    handle_outbound(packet, *forwarding);
    batch.frame_read();
  }
}

void Gateway::tun_reader_offload(unsigned queue) {
  name_this_thread("tun-rx-" + std::to_string(queue));
  // A frame is a virtio-net header and up to 64 KB of packet: read it into a scratch
  // buffer, cut TCP super-packets into MSS-sized segments (completing checksums the
  // kernel left partial), and copy each segment into a pipeline packet.
  const int fd = tun_->fd(queue);
  pipeline_->hand_over_in_batches();  // a super-packet's segments reach a worker together
  io::TsoSegmenter segmenter;
  std::vector<uint8_t> frame(io::VnetHeader::kSize + 65536);
  TunReadBatch batch(*pipeline_);
  while (running_.load(std::memory_order_relaxed)) {
    const long n = tun_->read(queue, frame.data(), frame.size());
    if (n <= 0) {
      if (batch.device_ran_dry()) continue;
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    const auto forwarding = forwarding_.load(std::memory_order_acquire);
    segmenter.set_max_packet(segment_limit_.load(std::memory_order_relaxed));
    auto emit = [&](std::span<const uint8_t> segment) {
      pipeline::Packet* packet = pipeline_->acquire();
      while (!packet && running_.load(std::memory_order_relaxed)) {
        usleep(50);  // backpressure: every packet is in flight
        packet = pipeline_->acquire();
      }
      if (!packet) return false;
      if (!packet->buffer.assign(segment) || packet->buffer.tailroom() < esp::encap_tailroom()) {
        counters_.tun_bad_offload.fetch_add(1, std::memory_order_relaxed);
        pipeline_->release(packet);
        return true;
      }
      handle_outbound(packet, *forwarding);
      return true;
    };
    const auto result = segmenter.segment_frame({frame.data(), static_cast<size_t>(n)}, emit);
    if (result != io::OffloadResult::ok && result != io::OffloadResult::stopped)
      counters_.tun_bad_offload.fetch_add(1, std::memory_order_relaxed);
    batch.frame_read();
  }
}

void Gateway::wan_reader(io::WanSocket* socket, std::string name) {
  name_this_thread("wan-rx-" + name);
  std::array<pipeline::Packet*, kWanBatch> packets{};
  std::array<io::Datagram, kWanBatch> datagrams{};
  size_t have = 0;
  const auto target = config_.queue_delay_target.value_or(
      config_.run_to_completion ? kAutoQueueDelayTarget : std::chrono::microseconds(0));
  io::QueueDelayGate gate(
      static_cast<uint64_t>(std::chrono::nanoseconds(target).count()),
      static_cast<uint64_t>(std::chrono::nanoseconds(config_.queue_delay_interval).count()));
  pipeline_->hand_over_in_batches();  // a recvmmsg batch reaches a worker together
  while (running_.load(std::memory_order_relaxed)) {
    while (have < kWanBatch) {
      pipeline::Packet* packet = pipeline_->acquire();
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
          pipeline_->engine_counters().count(esp::DropReason::nat_keepalive);
          pipeline_->release(packet);
          continue;
        }
        if (kind == esp::WireKind::ike) {
          // charon's receiver strips the marker itself, as it does for socket-default.
          deliver_ike(buffer.bytes(), datagrams[i].peer, config_.udp_port);
          pipeline_->release(packet);
          continue;
        }
      }
      const bool left_empty = i + 1 == received && socket->drained();
      packet->drop_at_delivery = gate.should_drop(waited, now, left_empty);
      pipeline_->submit_inbound(packet);  // drops are counted by the pipeline or the SA
    }
    pipeline_->complete_submitted();
    // Unused packets stay for the next batch; move the used slots' replacements in.
    const size_t used = static_cast<size_t>(received);
    std::move(packets.begin() + used, packets.begin() + have, packets.begin());
    have -= used;
  }
  for (size_t i = 0; i < have; ++i) pipeline_->release(packets[i]);
}

void Gateway::enforce_lifetimes() {
  struct Expiry {
    uint32_t spi;
    esp::IpAddress destination;
    bool hard;
  };
  std::vector<Expiry> expiries;
  std::unique_lock lock(control_mutex_);
  const auto now = std::chrono::steady_clock::now();
  auto check = [&](const char* direction, auto& installed, auto&& take_out_of_service) {
    const xfrm::SadEntry& entry = installed.entry;
    LifetimeTracking& tracking = installed.lifetime;
    const esp::SaCounters& counters = installed.sa->counters();
    const uint64_t packets = counters.packets();
    if (packets != tracking.packets_seen) {
      tracking.packets_seen = packets;
      tracking.last_used = now;
    }
    const uint64_t seconds = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(now - tracking.added_at).count());
    auto state = xfrm::check(entry.lifetimes, counters.bytes(), packets, seconds);
    // An outbound SA also expires with its sequence numbers, whatever its lifetimes say.
    if constexpr (std::is_same_v<std::decay_t<decltype(installed)>, OutboundEntry>)
      state =
          std::max(state, xfrm::check_sequence(installed.sa->last_sequence(), entry.config.esn));
    if (state <= tracking.reported) return;
    tracking.reported = state;
    // charon rekeys its own SAs; a static SA's expiry is only logged.
    if (installed.from_charon)
      expiries.push_back(
          {entry.config.spi, entry.config.tunnel_destination, state == xfrm::LifetimeState::hard});
    const bool hard = state == xfrm::LifetimeState::hard;
    log(LogLevel::warn,
        "SA %s spi 0x%08x: %s lifetime reached (%llu bytes, %llu packets, %llu s); %s", direction,
        entry.config.spi, hard ? "hard" : "soft", static_cast<unsigned long long>(counters.bytes()),
        static_cast<unsigned long long>(counters.packets()),
        static_cast<unsigned long long>(seconds), hard ? "out of service" : "a rekey is due");
    if (hard) take_out_of_service();
  };
  const auto forwarding = forwarding_.load();
  for (auto& [key, e] : outbound_) {
    check("out", *e, [&, &entry = e] {
      if (auto group = forwarding->groups.find(entry->entry.reqid);
          group != forwarding->groups.end())
        group->second->remove_member(group_slot(entry->entry), entry->channel.get());
    });
  }
  for (auto& [key, e] : inbound_) {
    check("in", *e, [&, &entry = e] { pipeline_->remove_inbound(entry->entry.config.spi); });
  }
  lock.unlock();
  // Without the lock: the handler tells charon, which answers with calls that take it.
  if (expire_handler_)
    for (const auto& expiry : expiries)
      expire_handler_(expiry.spi, expiry.destination, expiry.hard);
}

void Gateway::log_counters() const {
  log_status_counters(status());
}

}  // namespace espgw::daemon

#include "daemon/gateway.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "daemon/gateway_entries.h"
#include "daemon/log.h"
#include "esp/esp_format.h"
#include "esp/wire.h"
#include "io/offload.h"
#include "pipeline/flow_hash.h"
#include "util/byte_order.h"
#include "xfrm/flow_key.h"
#include "xfrm/lifetime.h"

namespace espgw::daemon {

namespace {

constexpr size_t kWanBatch = 32;
constexpr int kPollMs = 100;  // how often idle readers look at the stop flag

std::string sa_key(uint32_t spi, const esp::IpAddress& destination) {
  char spi_text[16];
  std::snprintf(spi_text, sizeof spi_text, "%08x", spi);
  return std::string(spi_text) + "/" + destination.to_string();
}

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

// Inbound SAs accept inner packets within the selectors of the in/fwd protect policies of
// their reqid (RFC 4301 5.2); without such policies, the reversed out policies.
std::vector<esp::TrafficSelector> inbound_selectors(const xfrm::StaticConfig& config,
                                                    uint32_t reqid) {
  std::vector<esp::TrafficSelector> selectors;
  for (const auto& policy : config.policies)
    if (policy.action == xfrm::PolicyAction::protect && policy.reqid == reqid &&
        policy.direction != xfrm::Direction::out)
      selectors.push_back({policy.selector.remote, policy.selector.local});
  if (selectors.empty())
    for (const auto& policy : config.policies)
      if (policy.action == xfrm::PolicyAction::protect && policy.reqid == reqid &&
          policy.direction == xfrm::Direction::out)
        selectors.push_back({policy.selector.remote, policy.selector.local});
  return selectors;
}

void log_drops(const char* what, const esp::DropCounters& counters) {
  for (size_t i = 1; i < esp::kDropReasonCount; ++i) {
    const auto reason = static_cast<esp::DropReason>(i);
    if (const uint64_t n = counters.drops(reason))
      log(LogLevel::info, "  %s drop %s=%llu", what,
          std::string(esp::drop_reason_name(reason)).c_str(), static_cast<unsigned long long>(n));
  }
}

}  // namespace

// Sends one SA's ESP packets to its peer, a batch per sendmmsg.
class Gateway::WanSink final : public pipeline::PacketSink {
 public:
  WanSink(io::WanSocket& socket, const esp::SaConfig& sa, GatewayCounters& counters)
      : socket_(socket), counters_(counters) {
    const uint16_t port = sa.udp_encapsulation ? sa.udp_encapsulation->destination_port : 0;
    peer_length_ = io::WanSocket::make_peer(sa.tunnel_destination, port, peer_);
  }
  void deliver(std::span<pipeline::Packet* const> packets) override {
    std::array<io::Outgoing, pipeline::Pipeline::kWorkerBatch * 2> batch;
    size_t offset = 0;
    while (offset < packets.size()) {
      const size_t count = std::min(batch.size(), packets.size() - offset);
      for (size_t i = 0; i < count; ++i) {
        const esp::PacketBuffer& buffer = packets[offset + i]->buffer;
        batch[i] = {buffer.data(), buffer.size(), &peer_, peer_length_};
      }
      const int sent = socket_.send({batch.data(), count});
      if (static_cast<size_t>(sent) < count)
        counters_.wan_send_failed.fetch_add(count - static_cast<size_t>(std::max(sent, 0)),
                                            std::memory_order_relaxed);
      offset += count;
    }
  }

 private:
  io::WanSocket& socket_;
  GatewayCounters& counters_;
  sockaddr_storage peer_{};
  socklen_t peer_length_ = 0;
};

// Writes decrypted packets into the TUN device. Shared by every inbound SA: a write of
// one frame is atomic, so concurrent calls for different SAs are fine. With offloads, the
// in-order TCP segments of a flow in one delivery batch are coalesced into one
// super-packet (GRO), so the kernel's TCP stack sees few large packets.
class Gateway::TunSink final : public pipeline::PacketSink {
 public:
  TunSink(const io::TunDevice& tun, GatewayCounters& counters) : tun_(tun), counters_(counters) {}
  void deliver(std::span<pipeline::Packet* const> packets) override {
    if (!tun_.vnet_header()) {
      for (pipeline::Packet* packet : packets)
        if (!tun_.write(0, packet->buffer.bytes()))
          counters_.tun_write_failed.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    thread_local io::TcpCoalescer coalescer;
    for (pipeline::Packet* packet : packets) coalescer.add(packet->buffer.bytes());
    auto write = [&](std::span<const uint8_t> frame) {
      if (!tun_.write(0, frame)) counters_.tun_write_failed.fetch_add(1, std::memory_order_relaxed);
      return true;
    };
    coalescer.flush(write);
  }

 private:
  const io::TunDevice& tun_;
  GatewayCounters& counters_;
};

Gateway::Gateway(GatewayConfig config) : config_(std::move(config)), flow_seed_(random_seed()) {
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

  tun_ = std::make_unique<io::TunDevice>(config_.tun_name, config_.tun_queues, config_.tun_offload);
  for (unsigned q = 0; q < tun_->queues(); ++q)
    fcntl(tun_->fd(q), F_SETFL, fcntl(tun_->fd(q), F_GETFL) | O_NONBLOCK);

  tunnel_mtu_ = derive_tunnel_mtu(static_config_);
  pipeline::PipelineConfig pipeline_config;
  pipeline_config.workers = config_.workers;
  pipeline_config.pin_workers = config_.pin_workers;
  pipeline_config.pool_packets = config_.pool_packets;
  pipeline_config.reorder_hold = config_.reorder_hold;
  // A buffer holds the largest packet either side can carry: an inner packet of the
  // tunnel MTU plus ESP and outer headers, or an ESP packet of the WAN path MTU.
  pipeline_config.packet_capacity =
      std::max<size_t>(2048, esp::PacketBuffer::kDefaultHeadroom +
                                 std::max<size_t>(tunnel_mtu_ + 128, max_path_mtu_) + 64);
  pipeline_ = std::make_unique<pipeline::Pipeline>(pipeline_config);
  tun_sink_ = std::make_unique<TunSink>(*tun_, counters_);

  if (auto r = netlink_.set_mtu(tun_->name(), tunnel_mtu_); !r) throw std::runtime_error(r.message);
  if (config_.tun_address)
    if (auto r = netlink_.add_address(tun_->name(), *config_.tun_address);
        !r && !r.already_exists())
      throw std::runtime_error(r.message);
  if (auto r = netlink_.set_link_up(tun_->name()); !r) throw std::runtime_error(r.message);

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
    apply_locked(merged_config());
  }
  log(LogLevel::info, "gateway up: %s mtu %u, %zu outbound and %zu inbound SAs, %u workers, %s",
      tun_->name().c_str(), tunnel_mtu_, outbound_.size(), inbound_.size(),
      pipeline_->worker_count(), config_.crypto_backend.c_str());
}

Gateway::~Gateway() {
  stop();
  pipeline_.reset();  // delivers what is in flight while sockets and TUN still exist
  for (const auto& route : routes_)
    if (auto r = netlink_.remove_route(route, tun_->name()); !r)
      log(LogLevel::warn, "%s", r.message.c_str());
  log(LogLevel::info, "gateway down: routes removed, %s closed", tun_->name().c_str());
}

unsigned Gateway::derive_tunnel_mtu(const xfrm::StaticConfig& config) {
  if (config_.tunnel_mtu) return *config_.tunnel_mtu;
  unsigned mtu = 0;
  for (const auto& sa : config.sas) {
    if (sa.direction != xfrm::Direction::out) continue;
    // One route lookup per peer, not per SA and change: charon installs SAs one at a
    // time, and this runs after each. reload() forgets the cache.
    const std::string peer = sa.config.tunnel_destination.to_string();
    auto cached = path_mtus_.find(peer);
    if (cached == path_mtus_.end()) {
      const auto route = netlink_.route_mtu(sa.config.tunnel_destination);
      if (!route) log(LogLevel::warn, "%s; assuming 1500", route.message.c_str());
      cached = path_mtus_.emplace(peer, route ? route.mtu : 1500).first;
    }
    const uint32_t path = cached->second;
    max_path_mtu_ = std::max<size_t>(max_path_mtu_, path);
    const size_t overhead = esp::max_esp_overhead(sa.config.tunnel_destination.family == 6,
                                                  sa.config.udp_encapsulation.has_value());
    const unsigned candidate = static_cast<unsigned>(path > overhead ? path - overhead : 576);
    mtu = mtu == 0 ? candidate : std::min(mtu, candidate);
  }
  return std::max(mtu == 0 ? 1400u : mtu, 576u);
}

io::WanSocket& Gateway::socket_for(const esp::SaConfig& sa) {
  io::WanSocketOptions options;
  options.buffer_bytes = config_.socket_buffer_bytes;
  if (sa.udp_encapsulation) {
    if (udp_sockets_.empty()) {
      // With a single reader the port stays exclusive: nothing else can join it by
      // accident. Readers start only once every socket is bound.
      const unsigned readers = wan_reader_count(config_);
      options.reuse_port = readers > 1;
      for (unsigned i = 0; i < readers; ++i)
        udp_sockets_.push_back(std::make_unique<io::WanSocket>(
            io::WanKind::udp, config_.local_address, config_.udp_port, options));
      // The first UDP SA may come after start(): with a reload, or from charon.
      if (running_.load())
        for (const auto& socket : udp_sockets_)
          threads_.emplace_back([this, s = socket.get()] { wan_reader(s); });
    }
    return *udp_sockets_.front();
  }
  if (!raw_socket_) {
    raw_socket_ =
        std::make_unique<io::WanSocket>(io::WanKind::raw_esp, config_.local_address, 0, options);
    if (running_.load()) threads_.emplace_back([this] { wan_reader(raw_socket_.get()); });
  }
  return *raw_socket_;
}

void Gateway::apply(const xfrm::StaticConfig& config) {
  auto forwarding = std::make_shared<Forwarding>();
  for (const auto& policy : config.policies) forwarding->spd.add(policy);

  std::map<std::string, std::unique_ptr<OutboundEntry>> outbound;
  std::map<std::string, std::unique_ptr<InboundEntry>> inbound;
  std::map<std::pair<uint32_t, uint64_t>, std::chrono::steady_clock::time_point> slot_holders;
  for (const auto& entry : config.sas) {
    const std::string key = sa_key(entry.config.spi, entry.config.tunnel_destination);
    if (entry.direction == xfrm::Direction::out) {
      auto existing = outbound_.find(key);
      if (existing != outbound_.end() && existing->second->entry == entry) {
        outbound[key] = std::move(existing->second);
        outbound_.erase(existing);
      } else {
        auto fresh = std::make_unique<OutboundEntry>();
        fresh->entry = entry;
        fresh->sa = std::make_shared<esp::OutboundSa>(
            entry.config, *crypto::find_backend(config_.crypto_backend));
        fresh->sink = std::make_shared<WanSink>(socket_for(entry.config), entry.config, counters_);
        fresh->channel = pipeline_->make_outbound(fresh->sa, *fresh->sink);
        log(LogLevel::info, "SA out spi 0x%08x %s -> %s %s%s installed", entry.config.spi,
            std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
            entry.config.tunnel_destination.to_string().c_str(),
            entry.config.udp_encapsulation ? "udp" : "esp", entry.config.esn ? " esn" : "");
        outbound[key] = std::move(fresh);
      }
      auto& group = forwarding->groups[entry.reqid];
      if (!group) group = std::make_shared<pipeline::SaGroup>();
      // While a rekey has the old and the new SA of a slot installed, the newer one
      // carries the slot's flows (as the kernel sends on the newest). An SA past its hard
      // lifetime stays out of service across reloads.
      const OutboundEntry& candidate = *outbound[key];
      auto& holder = slot_holders[{entry.reqid, group_slot(entry)}];
      if (candidate.lifetime.reported != xfrm::LifetimeState::hard &&
          candidate.lifetime.added_at >= holder) {
        holder = candidate.lifetime.added_at;
        group->set_member(group_slot(entry), candidate.channel);
      }
    } else {
      esp::SaConfig sa_config = entry.config;
      // charon's SAs carry their traffic selectors; static ones take them from policies.
      if (sa_config.selectors.empty()) sa_config.selectors = inbound_selectors(config, entry.reqid);
      auto existing = inbound_.find(key);
      if (existing != inbound_.end() && existing->second->entry == entry) {
        inbound[key] = std::move(existing->second);
        inbound_.erase(existing);
        continue;
      }
      if (existing != inbound_.end()) pipeline_->remove_inbound(entry.config.spi);
      auto fresh = std::make_unique<InboundEntry>();
      fresh->entry = entry;
      socket_for(entry.config);  // make sure the socket it arrives on exists
      fresh->sa = std::make_shared<esp::InboundSa>(sa_config,
                                                   *crypto::find_backend(config_.crypto_backend));
      fresh->channel = pipeline_->add_inbound(fresh->sa, *tun_sink_);
      if (!fresh->channel) {
        log(LogLevel::error, "SA in spi 0x%08x: SPI already in use", entry.config.spi);
        continue;
      }
      log(LogLevel::info, "SA in spi 0x%08x %s from %s installed", entry.config.spi,
          std::string(crypto::algorithm_name(entry.config.algorithm)).c_str(),
          entry.config.tunnel_source.to_string().c_str());
      inbound[key] = std::move(fresh);
    }
  }
  // What is left in the old maps was removed or changed.
  for (auto& [key, old] : outbound_) {
    // The final counters: after this the SA and its statistics are gone.
    log(LogLevel::info, "SA out spi 0x%08x removed after %llu packets, %llu bytes",
        old->entry.config.spi, static_cast<unsigned long long>(old->sa->counters().packets()),
        static_cast<unsigned long long>(old->sa->counters().bytes()));
    retired_.emplace_back(old->channel, old->sink);
  }
  std::erase_if(retired_, [](const auto& retired) { return retired.first.expired(); });
  for (auto& [key, old] : inbound_) {
    if (!inbound.count(key)) pipeline_->remove_inbound(old->entry.config.spi);
    log(LogLevel::info, "SA in spi 0x%08x removed after %llu packets, %llu bytes",
        old->entry.config.spi, static_cast<unsigned long long>(old->sa->counters().packets()),
        static_cast<unsigned long long>(old->sa->counters().bytes()));
  }
  outbound_ = std::move(outbound);
  inbound_ = std::move(inbound);
  forwarding_.store(std::move(forwarding));
}

void Gateway::sync_routes(const xfrm::StaticConfig& config) {
  std::vector<esp::IpPrefix> wanted;
  for (const auto& policy : config.policies)
    if (policy.direction == xfrm::Direction::out && policy.action == xfrm::PolicyAction::protect &&
        std::none_of(wanted.begin(), wanted.end(),
                     [&](const auto& p) { return xfrm::same_prefix(p, policy.selector.remote); }))
      wanted.push_back(policy.selector.remote);
  for (const auto& route : routes_)
    if (std::none_of(wanted.begin(), wanted.end(),
                     [&](const auto& p) { return xfrm::same_prefix(p, route); }))
      if (auto r = netlink_.remove_route(route, tun_->name()); !r)
        log(LogLevel::warn, "%s", r.message.c_str());
  for (const auto& route : wanted) {
    if (std::any_of(routes_.begin(), routes_.end(),
                    [&](const auto& p) { return xfrm::same_prefix(p, route); }))
      continue;  // ours already
    auto r = netlink_.add_route(route, tun_->name());
    if (!r && !r.already_exists())
      log(LogLevel::error, "%s", r.message.c_str());
    else if (r)
      log(LogLevel::info, "route %s dev %s added", route.to_string().c_str(), tun_->name().c_str());
  }
  routes_ = std::move(wanted);
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
  static_config_ = std::move(*file.config);
  path_mtus_.clear();  // a reload also picks up WAN MTU changes
  apply_locked(merged_config());
  log(LogLevel::info, "reloaded %s: %zu outbound and %zu inbound SAs",
      config_.static_sa_file.c_str(), outbound_.size(), inbound_.size());
  return true;
}

void Gateway::set_dynamic(xfrm::StaticConfig config) {
  std::lock_guard lock(control_mutex_);
  dynamic_config_ = std::move(config);
  apply_locked(merged_config());
}

xfrm::StaticConfig Gateway::merged_config() const {
  xfrm::StaticConfig merged = static_config_;
  merged.sas.insert(merged.sas.end(), dynamic_config_.sas.begin(), dynamic_config_.sas.end());
  merged.policies.insert(merged.policies.end(), dynamic_config_.policies.begin(),
                         dynamic_config_.policies.end());
  return merged;
}

void Gateway::apply_locked(const xfrm::StaticConfig& config) {
  apply(config);
  sync_routes(config);
  if (config_.tunnel_mtu) return;
  // SAs towards a peer with a smaller path MTU may have arrived: the TUN MTU follows the
  // smallest, within what the packet buffers hold.
  const size_t buffer_limit = pipeline_->config().packet_capacity -
                              esp::PacketBuffer::kDefaultHeadroom - esp::encap_tailroom() - 128;
  const unsigned mtu =
      std::min<unsigned>(derive_tunnel_mtu(config), static_cast<unsigned>(buffer_limit));
  if (mtu == tunnel_mtu_) return;
  if (auto r = netlink_.set_mtu(tun_->name(), mtu); !r) {
    log(LogLevel::error, "%s", r.message.c_str());
    return;
  }
  log(LogLevel::info, "%s mtu %u -> %u", tun_->name().c_str(), tunnel_mtu_, mtu);
  tunnel_mtu_ = mtu;
}

void Gateway::start() {
  running_.store(true);
  for (unsigned q = 0; q < tun_->queues(); ++q) {
    if (tun_->vnet_header())
      threads_.emplace_back([this, q] { tun_reader_offload(q); });
    else
      threads_.emplace_back([this, q] { tun_reader(q); });
  }
  // One reader per UDP socket: SO_REUSEPORT has already spread the peers over them.
  for (const auto& socket : udp_sockets_)
    threads_.emplace_back([this, s = socket.get()] { wan_reader(s); });
  if (raw_socket_) threads_.emplace_back([this] { wan_reader(raw_socket_.get()); });
  if (ike_socket_) threads_.emplace_back([this] { ike_reader(); });
}

void Gateway::stop() {
  running_.store(false);
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

void Gateway::handle_outbound(pipeline::Packet* packet, const Forwarding& forwarding) {
  const auto key = xfrm::flow_key(packet->buffer.bytes());
  if (!key) {
    counters_.not_ip.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  const auto policy = forwarding.spd.lookup(xfrm::Direction::out, *key);
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
  std::shared_ptr<pipeline::OutboundChannel> channel;
  if (group != forwarding.groups.end())
    channel = group->second->pick(pipeline::flow_hash(packet->buffer.bytes(), flow_seed_));
  if (!channel) {
    counters_.no_sa.fetch_add(1, std::memory_order_relaxed);
    pipeline_->release(packet);
    return;
  }
  // Drops (queue-full, sequence-exhausted, ...) are counted on the SA.
  pipeline_->submit_outbound(std::move(channel), packet, esp::OuterHeaders::omit);
}

void Gateway::tun_reader(unsigned queue) {
  const int fd = tun_->fd(queue);
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
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    packet->buffer.push_back(static_cast<size_t>(n));
    // One snapshot per packet: a reload swaps it, and packets already classified finish
    // with the old one.
    const auto forwarding = forwarding_.load(std::memory_order_acquire);
    handle_outbound(packet, *forwarding);
  }
}

void Gateway::tun_reader_offload(unsigned queue) {
  // A frame is a virtio-net header and up to 64 KB of packet: read it into a scratch
  // buffer, cut TCP super-packets into MSS-sized segments (completing checksums the
  // kernel left partial), and copy each segment into a pipeline packet.
  const int fd = tun_->fd(queue);
  io::TsoSegmenter segmenter;
  std::vector<uint8_t> frame(io::VnetHeader::kSize + 65536);
  while (running_.load(std::memory_order_relaxed)) {
    const long n = tun_->read(queue, frame.data(), frame.size());
    if (n <= 0) {
      pollfd waiter{fd, POLLIN, 0};
      poll(&waiter, 1, kPollMs);
      continue;
    }
    const auto forwarding = forwarding_.load(std::memory_order_acquire);
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
  }
}

void Gateway::wan_reader(io::WanSocket* socket) {
  std::array<pipeline::Packet*, kWanBatch> packets{};
  std::array<io::Datagram, kWanBatch> datagrams{};
  size_t have = 0;
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
    for (int i = 0; i < received; ++i) {
      pipeline::Packet* packet = packets[i];
      esp::PacketBuffer& buffer = packet->buffer;
      if (socket->kind() == io::WanKind::udp) {
        if (buffer.size() == 1 && buffer.data()[0] == 0xFF) {  // RFC 3948 NAT keepalive
          pipeline_->engine_counters().count(esp::DropReason::nat_keepalive);
          pipeline_->release(packet);
          continue;
        }
        if (buffer.size() >= 4 && load_be32(buffer.data()) == 0) {  // non-ESP marker: IKE
          // charon's receiver strips the marker itself, as it does for socket-default.
          deliver_ike(buffer.bytes(), datagrams[i].peer, config_.udp_port);
          pipeline_->release(packet);
          continue;
        }
      }
      pipeline_->submit_inbound(packet);  // drops are counted by the pipeline or the SA
    }
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
  auto check = [&](const char* direction, const xfrm::SadEntry& entry, LifetimeTracking& tracking,
                   const esp::SaCounters& counters, auto&& take_out_of_service) {
    const uint64_t packets = counters.packets();
    if (packets != tracking.packets_seen) {
      tracking.packets_seen = packets;
      tracking.last_used = now;
    }
    const uint64_t seconds = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(now - tracking.added_at).count());
    const auto state = xfrm::check(entry.lifetimes, counters.bytes(), packets, seconds);
    if (state <= tracking.reported) return;
    tracking.reported = state;
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
    check("out", e->entry, e->lifetime, e->sa->counters(), [&, &entry = e] {
      if (auto group = forwarding->groups.find(entry->entry.reqid);
          group != forwarding->groups.end())
        group->second->remove_member(group_slot(entry->entry), entry->channel.get());
    });
  }
  for (auto& [key, e] : inbound_) {
    check("in", e->entry, e->lifetime, e->sa->counters(),
          [&, &entry = e] { pipeline_->remove_inbound(entry->entry.config.spi); });
  }
  lock.unlock();
  // Without the lock: the handler tells charon, which answers with calls that take it.
  if (expire_handler_)
    for (const auto& expiry : expiries)
      expire_handler_(expiry.spi, expiry.destination, expiry.hard);
}

void Gateway::log_counters() const {
  std::lock_guard lock(control_mutex_);
  for (const auto& [key, entry] : outbound_) {
    const auto& c = entry->sa->counters();
    log(LogLevel::info, "sa out spi=0x%08x dst=%s packets=%llu bytes=%llu in_flight=%zu",
        entry->entry.config.spi, entry->entry.config.tunnel_destination.to_string().c_str(),
        static_cast<unsigned long long>(c.packets()), static_cast<unsigned long long>(c.bytes()),
        entry->channel->in_flight());
    log_drops("out", c);
  }
  for (const auto& [key, entry] : inbound_) {
    const auto& c = entry->sa->counters();
    const auto reorder = entry->channel->release().stats();
    log(LogLevel::info, "sa in spi=0x%08x src=%s packets=%llu bytes=%llu late=%llu skipped=%llu",
        entry->entry.config.spi, entry->entry.config.tunnel_source.to_string().c_str(),
        static_cast<unsigned long long>(c.packets()), static_cast<unsigned long long>(c.bytes()),
        static_cast<unsigned long long>(reorder.late),
        static_cast<unsigned long long>(reorder.skipped));
    log_drops("in", c);
  }
  log_drops("engine", pipeline_->engine_counters());
  const auto g = [](const std::atomic<uint64_t>& v) {
    return static_cast<unsigned long long>(v.load(std::memory_order_relaxed));
  };
  log(LogLevel::info,
      "gateway drops: no-policy=%llu policy-discard=%llu no-sa=%llu not-ip=%llu ike=%llu "
      "wan-send-failed=%llu tun-write-failed=%llu tun-bad-offload=%llu",
      g(counters_.no_policy), g(counters_.policy_discard), g(counters_.no_sa), g(counters_.not_ip),
      g(counters_.ike_dropped), g(counters_.wan_send_failed), g(counters_.tun_write_failed),
      g(counters_.tun_bad_offload));
  for (size_t i = 0; i < udp_sockets_.size(); ++i) {
    const auto wan = udp_sockets_[i]->stats();
    log(LogLevel::info,
        "wan udp socket %zu: kernel-drops=%u (receive buffer full) gro=%s gro-batches=%llu "
        "gro-datagrams=%llu oversize=%llu",
        i, wan.kernel_drops, udp_sockets_[i]->gro() ? "on" : "off",
        static_cast<unsigned long long>(wan.gro_batches),
        static_cast<unsigned long long>(wan.gro_datagrams),
        static_cast<unsigned long long>(wan.oversize));
  }
  if (raw_socket_) {
    const auto wan = raw_socket_->stats();
    log(LogLevel::info, "wan raw socket: kernel-drops=%u (receive buffer full) oversize=%llu",
        wan.kernel_drops, static_cast<unsigned long long>(wan.oversize));
  }
  const auto load = pipeline_->worker_load();
  for (size_t i = 0; i < load.size(); ++i)
    log(LogLevel::info, "worker %zu packets=%llu", i,
        static_cast<unsigned long long>(load[i].packets));
}

}  // namespace espgw::daemon

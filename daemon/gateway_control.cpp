// The gateway's side of the control path: charon's SAs and policies, one change at a
// time; status and usage queries for charon and espgwctl; and the IKE packets espgw
// carries for charon (it owns UDP 500 and 4500).
#include <netinet/in.h>

#include <algorithm>
#include <array>

#include "daemon/charon_messages.h"
#include "daemon/counter_registry.h"
#include "daemon/gateway.h"
#include "daemon/log.h"
#include "util/clock.h"
#include "util/thread_name.h"

namespace espgw::daemon {

namespace {

constexpr int kIkePollMs = 100;

std::optional<uint64_t> idle_ms(const LifetimeTracking& tracking,
                                std::chrono::steady_clock::time_point now) {
  if (tracking.packets_seen == 0) return std::nullopt;
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - tracking.last_used).count());
}

const char* lifetime_name(xfrm::LifetimeState state) {
  switch (state) {
    case xfrm::LifetimeState::none:
      return "none";
    case xfrm::LifetimeState::soft:
      return "soft";
    case xfrm::LifetimeState::hard:
      return "hard";
  }
  return "?";
}

// The address and port of a peer as recvmmsg reported it.
bool peer_of(const sockaddr_storage& peer, esp::IpAddress& address, uint16_t& port) {
  if (peer.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(peer);
    address = esp::IpAddress::v4(reinterpret_cast<const uint8_t*>(&in.sin_addr));
    port = ntohs(in.sin_port);
    return true;
  }
  if (peer.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(peer);
    address = esp::IpAddress::v6(in6.sin6_addr.s6_addr);
    port = ntohs(in6.sin6_port);
    return true;
  }
  return false;
}

}  // namespace

std::optional<std::string> Gateway::interface_refusal(uint32_t if_id) {
  std::string refusal = interfaces_->refusal(if_id);
  if (refusal.empty()) return std::nullopt;
  // Fail closed: neither the SA nor the policy exists, and charon's CHILD_SA fails.
  counters_.interface_refused.fetch_add(1, std::memory_order_relaxed);
  return refusal;
}

bool Gateway::add_dynamic_sa(const xfrm::SadEntry& entry, bool replayed) {
  if (const auto refusal = wan_.refusal(entry)) {
    log(LogLevel::error, "charon's %s: refused", refusal->c_str());
    return false;
  }
  std::lock_guard lock(control_mutex_);
  const xfrm::SaId key = xfrm::sa_id_of(entry);
  auto is_static = [](const auto* installed) { return installed && !installed->from_charon; };
  if (is_static(sas_->find_outbound(key)) || is_static(sas_->find_inbound(key)))
    return false;  // the static file's
  const bool installed =
      sas_->install(entry, replayed ? InstallOrigin::charon_replayed : InstallOrigin::charon_new);
  update_tunnel_mtu_locked();
  return installed;
}

bool Gateway::remove_dynamic_sa(uint32_t spi, const esp::IpAddress& destination) {
  std::lock_guard lock(control_mutex_);
  const xfrm::SaId key{spi, destination};
  auto from_charon = [](const auto* installed) { return installed && installed->from_charon; };
  if (!from_charon(sas_->find_outbound(key)) && !from_charon(sas_->find_inbound(key))) return false;
  sas_->remove(key);
  update_tunnel_mtu_locked();
  return true;
}

SaTable::MoveResult Gateway::move_dynamic_sa(const xfrm::SaId& id, const esp::IpAddress& new_source,
                                             const esp::IpAddress& new_destination,
                                             const std::optional<esp::UdpEncapsulation>& new_udp) {
  std::lock_guard lock(control_mutex_);
  return sas_->move(id, new_source, new_destination, new_udp, [&](pipeline::PacketSink& sink) {
    auto* peer = dynamic_cast<PeerSink*>(&sink);
    return peer && peer->move_to(new_destination, new_udp);
  });
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
  for (const auto& [key, entry] : sas_->outbound())
    if (entry->from_charon) keys.push_back(key);
  for (const auto& [key, entry] : sas_->inbound())
    if (entry->from_charon) keys.push_back(key);
  for (const auto& key : keys) sas_->remove(key);
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
  routes_->keep_fail_closed_routes(true);
  for (const uint32_t id : ids) remove_policy_locked(id);
  routes_->keep_fail_closed_routes(false);
  return ids.size();
}

std::optional<Gateway::SaUsage> Gateway::sa_usage(uint32_t spi,
                                                  const esp::IpAddress& destination) const {
  std::lock_guard lock(control_mutex_);
  const auto now = std::chrono::steady_clock::now();
  const xfrm::SaId key{spi, destination};
  auto usage = [&](const auto& entry) {
    const auto& counters = entry.sa->counters();
    return SaUsage{counters.bytes(), counters.packets(), idle_ms(entry.lifetime, now)};
  };
  if (const auto* out = sas_->find_outbound(key)) return usage(*out);
  if (const auto* in = sas_->find_inbound(key)) return usage(*in);
  return std::nullopt;
}

std::optional<uint64_t> Gateway::group_idle_ms(xfrm::Direction direction, uint32_t reqid) const {
  std::lock_guard lock(control_mutex_);
  const auto now = std::chrono::steady_clock::now();
  std::optional<uint64_t> best;
  auto consider = [&](const auto& entries) {
    for (const auto& [key, entry] : entries) {
      if (entry->entry.reqid != reqid) continue;
      if (const auto idle = idle_ms(entry->lifetime, now); idle && (!best || *idle < *best))
        best = idle;
    }
  };
  if (direction == xfrm::Direction::out)
    consider(sas_->outbound());
  else
    consider(sas_->inbound());
  return best;
}

bool Gateway::spi_in_use(uint32_t spi) const {
  return pipeline_->has_inbound(spi);
}

GatewayStatus Gateway::status(bool entries) const {
  std::lock_guard lock(control_mutex_);
  const auto now = std::chrono::steady_clock::now();
  GatewayStatus status;
  status.tun_name = tun_->name();
  status.tunnel_mtu = mtu_->tunnel_mtu();
  status.lan_mtu = mtu_->lan_mtu().load(std::memory_order_relaxed);
  status.jumbo_segments = config_.jumbo_segments;
  status.tun_rps = tun_rps_state_;
  status.crypto_backend = config_.crypto_backend;
  auto describe = [&](const auto& entry, xfrm::Direction direction) {
    SaStatus sa;
    const esp::SaConfig& config = entry.entry.config;
    sa.spi = config.spi;
    sa.direction = direction;
    sa.from_charon = entry.from_charon;
    sa.source = config.tunnel_source;
    sa.destination = config.tunnel_destination;
    sa.algorithm = crypto::transform_name(config.algorithm, config.integrity);
    sa.udp_encapsulation = config.udp_encapsulation.has_value();
    if (config.udp_encapsulation) {
      sa.udp_source_port = config.udp_encapsulation->source_port;
      sa.udp_destination_port = config.udp_encapsulation->destination_port;
    }
    sa.esn = config.esn;
    sa.reqid = entry.entry.reqid;
    sa.interface = interface_name(entry.entry.if_id);
    const auto& counters = entry.sa->counters();
    sa.packets = counters.packets();
    sa.bytes = counters.bytes();
    sa.drops = nonzero_drops(counters.drop_counters());
    sa.idle_ms = idle_ms(entry.lifetime, now);
    sa.lifetime = lifetime_name(entry.lifetime.reported);
    sa.age_seconds = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(now - entry.lifetime.added_at).count());
    return sa;
  };
  const auto& outbound = sas_->outbound();
  const auto& inbound = sas_->inbound();
  status.sa_count = outbound.size() + inbound.size();
  auto charon_count = [](const auto& installed) {
    return static_cast<size_t>(std::count_if(installed.begin(), installed.end(),
                                             [](const auto& e) { return e.second->from_charon; }));
  };
  status.charon_sa_count = charon_count(outbound) + charon_count(inbound);
  if (entries) {
    for (const auto& [key, entry] : outbound) {
      SaStatus sa = describe(*entry, xfrm::Direction::out);
      sa.in_flight = entry->channel->in_flight();
      status.sas.push_back(std::move(sa));
    }
    for (const auto& [key, entry] : inbound) {
      SaStatus sa = describe(*entry, xfrm::Direction::in);
      const auto reorder = entry->channel->release().stats();
      sa.late = reorder.late;
      sa.skipped = reorder.skipped;
      status.sas.push_back(std::move(sa));
    }
    const auto lookup = outbound_lookup_.load();
    for (const auto& [reqid, group] : lookup->groups) {
      GroupStatus g;
      g.reqid = reqid;
      g.member_spis = group->member_spis();
      g.member_slots = group->member_keys();
      std::sort(g.member_slots.begin(), g.member_slots.end());
      std::sort(g.member_spis.begin(), g.member_spis.end());
      status.groups.push_back(std::move(g));
    }
    // The group map is sharded by a hash of the reqid: list the groups by reqid.
    std::sort(status.groups.begin(), status.groups.end(),
              [](const GroupStatus& a, const GroupStatus& b) { return a.reqid < b.reqid; });
    status.policies = lookup->spd->list();
    for (auto* device : interfaces_->all()) {
      auto policies = device->spd->list();
      status.policies.insert(status.policies.end(), policies.begin(), policies.end());
    }
  }
  for (const auto& counter : kGatewayCounters) {
    NamedCounters& place = counter.place == StatusPlace::gateway_drops ? status.gateway_drops
                           : counter.place == StatusPlace::wan         ? status.wan
                                                                       : status.gateway;
    place.emplace_back(std::string(counter.name), counter.read(counters_));
  }
  status.engine_drops = nonzero_drops(pipeline_->engine_counters());
  for (const auto& endpoint : wan_.all()) {
    status.local_addresses.push_back(endpoint->prefix + endpoint->address.to_string());
    for (size_t i = 0; i < endpoint->udp.size(); ++i)
      read_wan_counters(endpoint->prefix + "udp" + std::to_string(i), true,
                        endpoint->udp[i]->stats(), status.wan);
    if (endpoint->raw)
      read_wan_counters(endpoint->prefix + "raw", false, endpoint->raw->stats(), status.wan);
  }
  read_counters(kPipelineCounters, *pipeline_, status.pipeline);
  for (const auto& load : pipeline_->worker_load()) status.worker_packets.push_back(load.packets);
  return status;
}

void Gateway::deliver_ike(std::span<const uint8_t> ike, const sockaddr_storage& peer,
                          const esp::IpAddress& local, uint16_t local_port) {
  esp::IpAddress address;
  uint16_t port = 0;
  if (!ike_handler_ || ike.empty() || !peer_of(peer, address, port)) {
    counters_.ike_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!ike_limiter_.admit(address, clock_ns(CLOCK_MONOTONIC))) {
    counters_.ike_rate_limited.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Not taken: no charon registered for IKE (detached, or restarting). Counted here; it
  // used to be a debug log line only, and a flood while charon was away went uncounted.
  if (!ike_handler_(ike, address, port, local, local_port))
    counters_.ike_dropped.fetch_add(1, std::memory_order_relaxed);
}

bool Gateway::send_ike(const std::optional<esp::IpAddress>& source, uint16_t local_port,
                       const esp::IpAddress& peer, uint16_t peer_port,
                       std::span<const uint8_t> ike) {
  if (ike.empty() || ike.size() > 65000) return false;
  // The sockets are opened in the constructor and never closed while it runs: no lock.
  const WanEndpoint* endpoint = wan_.for_ike(source, peer);
  if (!endpoint) return false;
  // charon's sender has already put the RFC 3948 non-ESP marker in front of IKE for the
  // NAT-T port, as it does for socket-default: the bytes go out as they are.
  const io::WanSocket* socket = nullptr;
  if (local_port == config_.udp_port && !endpoint->udp.empty())
    socket = endpoint->udp.front().get();
  else if (endpoint->ike && local_port == config_.ike_port)
    socket = endpoint->ike.get();
  else
    return false;
  sockaddr_storage address{};
  const socklen_t length = io::WanSocket::make_peer(peer, peer_port, address);
  const io::Outgoing packet{ike.data(), ike.size(), &address, length};
  return socket->send({&packet, 1}) == 1;
}

void Gateway::ike_reader(WanEndpoint& endpoint) {
  name_this_thread(endpoint.prefix + "ike-rx");
  esp::PacketBuffer buffer(65536 + esp::PacketBuffer::kDefaultHeadroom);
  while (running_.load(std::memory_order_relaxed)) {
    io::Datagram datagram;
    buffer.assign({}, esp::PacketBuffer::kDefaultHeadroom);
    datagram.buffer = &buffer;
    if (endpoint.ike->receive({&datagram, 1}, kIkePollMs) != 1) continue;
    deliver_ike(buffer.bytes(), datagram.peer, endpoint.address, config_.ike_port);
  }
}

}  // namespace espgw::daemon

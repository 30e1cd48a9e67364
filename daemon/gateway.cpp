// The gateway's wiring: builds the TUN device, the pipeline, the data paths, the SA
// table, the MTU tracker and the route table, starts and stops the threads, and brings
// the static SA file's SAs and policies in (the constructor, reload). charon's changes
// and the queries are in gateway_control.cpp, the counter log in counter_log.cpp.
#include "daemon/gateway.h"

#include <fcntl.h>
#include <net/if.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <system_error>

#include "daemon/counter_log.h"
#include "daemon/log.h"
#include "esp/encap.h"
#include "io/receive_steering.h"
#include "util/secure_wipe.h"
#include "xfrm/key_fingerprint.h"

namespace espgw::daemon {

namespace {

uint64_t random_seed() {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = 0x9e3779b97f4a7c15ull;
  return seed;
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
// all leaves the SA without selectors, which SaTable::install refuses.
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

Gateway::Gateway(GatewayConfig config)
    : config_(std::move(config)),
      wan_(config_.local_addresses),
      flow_seed_(random_seed()),
      ike_limiter_({config_.ike_rate_per_source, config_.ike_rate_global}, random_seed()) {
  set_log_level(config_.log_level);
  stats_interval_s_.store(config_.stats_interval.count(), std::memory_order_relaxed);
  if (!config_.static_sa_file.empty()) {
    auto file = xfrm::load_static_file(config_.static_sa_file);
    if (!file.config) {
      std::string message = "static SA file has errors:";
      for (const auto& error : file.errors) message += "\n  " + error;
      throw ConfigError(message);
    }
    static_config_ = std::move(*file.config);
    if (const auto refusals = static_wan_refusals(static_config_); !refusals.empty()) {
      std::string message = config_.static_sa_file + ": SAs this gateway cannot send or receive:";
      for (const auto& refusal : refusals) message += "\n  " + refusal;
      throw ConfigError(message);
    }
  }
  if (config_.local_addresses.empty()) throw ConfigError("no local-address configured");
  // Before anything else that could carry traffic: no SA may exist without its counter.
  sa_state_ = std::make_unique<SaStateKeeper>(config_.state_dir);

  tun_ = std::make_unique<io::TunDevice>(config_.tun_name, config_.tun_queues, config_.tun_offload);
  for (unsigned q = 0; q < tun_->queues(); ++q)
    fcntl(tun_->fd(q), F_SETFL, fcntl(tun_->fd(q), F_GETFL) | O_NONBLOCK);

  mtu_ = std::make_unique<MtuTracker>(
      MtuTracker::Settings{tun_->name(), config_.tunnel_mtu, config_.lan_mtu,
                           config_.jumbo_segments},
      [this](const esp::IpAddress& destination) { return netlink_.route_mtu(destination); },
      [this](unsigned mtu) {
        // Every device carries the tunnel MTU: the route-based interfaces' too.
        auto result = netlink_.set_mtu(tun_->name(), mtu);
        if (auto r = interfaces_ ? interfaces_->set_mtu(netlink_, mtu) : result; !r) result = r;
        return result;
      });
  const unsigned tunnel_mtu = mtu_->initial_tunnel_mtu(static_config_);
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
                                 std::max<size_t>(tunnel_mtu + 128, mtu_->max_path_mtu()) + 64);
  pipeline_ = std::make_unique<pipeline::Pipeline>(pipeline_config);
  tun_writer_ = std::make_unique<TunWriter>(*tun_, counters_, mtu_->lan_mtu());
  outbound_path_ =
      std::make_unique<OutboundPath>(*tun_, *pipeline_, outbound_lookup_, mtu_->segment_limit(),
                                     counters_, acquire_raiser_, flow_seed_, running_);
  interfaces_ = std::make_unique<RouteInterfaces>(
      config_.interfaces, config_.tun_queues, config_.tun_offload,
      RouteInterfaces::Shared{*pipeline_, outbound_lookup_, mtu_->segment_limit(), mtu_->lan_mtu(),
                              counters_, acquire_raiser_, flow_seed_, running_});
  InboundPath::Settings inbound;
  inbound.udp_port = config_.udp_port;
  inbound.queue_delay_target = queue_delay_target_of(config_);
  inbound.queue_delay_interval = config_.queue_delay_interval;
  inbound_path_ = std::make_unique<InboundPath>(
      inbound, *pipeline_,
      [this](std::span<const uint8_t> ike, const sockaddr_storage& peer,
             const esp::IpAddress& local,
             uint16_t local_port) { deliver_ike(ike, peer, local, local_port); },
      running_);
  sas_ = std::make_unique<SaTable>(
      *pipeline_, *sa_state_, *mtu_, config_.crypto_backend, *tun_writer_, outbound_lookup_,
      [this](const esp::SaConfig& sa) { return std::make_shared<PeerSink>(sender_for(sa), sa); },
      [this](const esp::SaConfig& sa) {
        socket_for(endpoint_for(sa.tunnel_destination), sa.udp_encapsulation.has_value());
      });
  sas_->set_interface_sinks([this](uint32_t if_id) -> pipeline::PacketSink* {
    auto* device = interfaces_->find(if_id);
    return device ? device->writer.get() : nullptr;
  });

  if (auto r = netlink_.set_mtu(tun_->name(), tunnel_mtu); !r) throw std::runtime_error(r.message);
  if (config_.tun_address)
    if (auto r = netlink_.add_address(tun_->name(), *config_.tun_address);
        !r && !r.already_exists())
      throw std::runtime_error(r.message);
  if (auto r = netlink_.set_link_up(tun_->name()); !r) throw std::runtime_error(r.message);
  interfaces_->bring_up(netlink_, tunnel_mtu);
  tun_rps_state_ = steer_tun_receive(tun_->name());
  for (auto* device : interfaces_->all()) steer_tun_receive(device->tun->name());
  // Fail closed: espgw's routing table, with what an earlier run left in it, before any
  // policy (xfrm/fail_closed_routes.h, xfrm/kernel_firewall.h).
  if (!xfrm::firewall_interface_name_ok(tun_->name()))
    throw std::runtime_error("tun-name '" + tun_->name() +
                             "': the firewall rules need letters, digits, '_', '-' or '.' only");
  firewall_ = std::make_unique<xfrm::KernelFirewall>();
  firewall_sync_ = std::make_unique<xfrm::FirewallSync>(*firewall_, tun_->name());
  routes_ = std::make_unique<RouteTable>(netlink_, tun_->name());
  routes_->adopt_fail_closed_routes();

  if (!config_.control_socket.empty()) {
    // charon talks IKE through us before any SA exists: the NAT-T port and the IKE port
    // are open from the start, on every local address.
    for (auto& endpoint : wan_.all()) {
      socket_for(*endpoint, true);
      if (config_.ike_port == 0) continue;
      io::WanSocketOptions options;
      options.buffer_bytes = 1 << 20;
      options.gro = false;  // IKE is a few datagrams per exchange
      endpoint->ike = std::make_unique<io::WanSocket>(io::WanKind::udp, endpoint->address,
                                                      config_.ike_port, options);
    }
  }
  {
    std::lock_guard lock(control_mutex_);
    xfrm::StaticConfig initial = std::move(static_config_);
    static_config_ = {};
    apply_static_locked(std::move(initial));
    if (routes_->refused_fail_closed_routes() != 0)
      throw std::runtime_error("fail closed: the kernel refused " +
                               std::to_string(routes_->refused_fail_closed_routes()) +
                               " fail-closed route(s) (logged above); not starting");
    // charon replays its policies after a restart of either daemon: with a control socket
    // the routes of its last policies stay closed until it does.
    if (config_.control_socket.empty()) {
      routes_->remove_unused_fail_closed_routes();
    }
  }
  if (!sync_kernel_firewall())
    throw std::runtime_error(
        "fail closed: the nftables table of the policies could not be "
        "installed (logged above); not starting");
  // The static SAs' first reservations are on disk before a packet can use them.
  if (!sa_state_->reserve())
    throw std::runtime_error("cannot write the SA state in " + config_.state_dir);
  const std::string workers =
      (config_.run_to_completion ? std::string("no workers (readers run to completion)")
                                 : std::to_string(pipeline_->worker_count()) + " workers") +
      (config_.workers_auto
           ? " by workers = auto for " + std::to_string(usable_cpu_count()) + " CPUs"
           : std::string());
  log(LogLevel::info, "gateway up: %s mtu %u, %zu outbound and %zu inbound SAs, %s, %s",
      tun_->name().c_str(), mtu_->tunnel_mtu(), sas_->outbound().size(), sas_->inbound().size(),
      workers.c_str(), config_.crypto_backend.c_str());
}

std::string Gateway::steer_tun_receive(const std::string& device) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) CPU_SET(0, &cpus);
  if (!wants_tun_rps(config_, static_cast<unsigned>(CPU_COUNT(&cpus)))) return "off";
  const std::string mask = io::cpu_mask_text(cpus);
  const auto result =
      io::steer_receive_queues("/sys/class/net", device, if_nametoindex(device.c_str()), mask);
  if (!result) {
    // Asked for by name: a clear stop. Chosen by auto: the gateway works without it.
    if (config_.tun_rps) throw std::runtime_error("tun-rps = yes: " + result.error);
    log(LogLevel::warn,
        "%s: receive steering (RPS) not set: %s; the kernel may reorder a flow's packets "
        "that different workers wrote (docs/gateway_tun.md)",
        device.c_str(), result.error.c_str());
    return "not set: " + result.error;
  }
  log(LogLevel::info, "%s: receive steering (RPS) to CPUs %s on %u receive queue%s%s",
      device.c_str(), mask.c_str(), result.queues_set, result.queues_set == 1 ? "" : "s",
      result.queues_kept ? " (others had CPUs set already, left as they were)" : "");
  return "CPUs " + mask;
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
  routes_->remove_tun_routes();
  log(LogLevel::info,
      "gateway down: routes through %s removed, %s closed; fail-closed routes (table %u), "
      "bypass rules and nftables table %s kept (espgw --release removes them)",
      tun_->name().c_str(), tun_->name().c_str(), routes_->ids().table,
      xfrm::firewall_table_name(tun_->name()).c_str());
}

WanEndpoint& Gateway::endpoint_for(const esp::IpAddress& local) {
  WanEndpoint* endpoint = wan_.find(local);
  if (!endpoint)
    throw std::logic_error(local.to_string() + " is not a local-address (SAs are checked first)");
  return *endpoint;
}

io::WanSocket& Gateway::socket_for(WanEndpoint& endpoint, bool udp) {
  io::WanSocketOptions options;
  options.buffer_bytes = wan_socket_buffer_bytes(config_);
  if (udp) {
    if (endpoint.udp.empty()) {
      // With a single reader the port stays exclusive: nothing else can join it by
      // accident. Readers start only once every socket is bound.
      const unsigned readers = wan_reader_count(config_);
      options.reuse_port = readers > 1;
      for (unsigned i = 0; i < readers; ++i)
        endpoint.udp.push_back(std::make_unique<io::WanSocket>(io::WanKind::udp, endpoint.address,
                                                               config_.udp_port, options));
      log_receive_buffer((endpoint.prefix + "udp").c_str(), *endpoint.udp.front());
      // The first UDP SA may come after start(): with a reload, or from charon.
      if (running_.load()) start_udp_readers(endpoint);
    }
    return *endpoint.udp.front();
  }
  if (!endpoint.raw) {
    endpoint.raw =
        std::make_unique<io::WanSocket>(io::WanKind::raw_esp, endpoint.address, 0, options);
    log_receive_buffer((endpoint.prefix + "raw").c_str(), *endpoint.raw);
    if (running_.load())
      threads_.emplace_back([this, &endpoint] {
        inbound_path_->read_wan(endpoint.raw.get(), endpoint.prefix + "raw");
      });
  }
  return *endpoint.raw;
}

void Gateway::log_receive_buffer(const char* kind, const io::WanSocket& socket) const {
  log(LogLevel::info,
      "wan %s socket: receive buffer %llu bytes (socket-buffer %s%zu, doubled by the kernel), "
      "gro=%s, on %s",
      kind, static_cast<unsigned long long>(socket.stats().receive_buffer),
      config_.socket_buffer_bytes ? "" : "auto: ", wan_socket_buffer_bytes(config_),
      socket.gro() ? "on" : "off", socket.local().to_string().c_str());
}

WanBatchSender& Gateway::sender_for(const esp::SaConfig& sa) {
  WanEndpoint& endpoint = endpoint_for(sa.tunnel_source);
  io::WanSocket& socket = socket_for(endpoint, sa.udp_encapsulation.has_value());
  std::unique_ptr<WanBatchSender>& sender =
      sa.udp_encapsulation ? endpoint.udp_sender : endpoint.raw_sender;
  if (!clear_df_sender_tried_) {
    clear_df_sender_tried_ = true;
    try {
      clear_df_sender_ = std::make_unique<io::Ipv4HeaderSender>();
    } catch (const std::system_error& e) {
      log(LogLevel::warn,
          "%s: IPv4 packets whose SA clears the outer DF bit (copy_df) are sent with DF set "
          "(counter outer-df-kept)",
          e.what());
    }
  }
  if (!sender) sender = std::make_unique<WanBatchSender>(socket, clear_df_sender_.get(), counters_);
  return *sender;
}

std::vector<std::string> Gateway::static_wan_refusals(const xfrm::StaticConfig& config) const {
  std::vector<std::string> refusals;
  for (const auto& entry : config.sas)
    if (auto refusal = wan_.refusal(entry)) refusals.push_back(std::move(*refusal));
  return refusals;
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
    if (!stays) sas_->remove(xfrm::sa_id_of(old));
  }
  for (const auto& entry : next.sas) sas_->install(entry, InstallOrigin::static_file);

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
  if (const auto refusals = static_wan_refusals(*file.config); !refusals.empty()) {
    for (const auto& refusal : refusals)
      log(LogLevel::error, "%s: %s", config_.static_sa_file.c_str(), refusal.c_str());
    log(LogLevel::error, "reload refused: keeping the running configuration");
    return false;
  }
  std::lock_guard lock(control_mutex_);
  // A reload also picks up WAN MTU changes: the path MTUs are looked up again.
  mtu_->forget_routes_and_sas();
  sas_->recount_mtus();
  apply_static_locked(std::move(*file.config));
  sa_state_->reserve();  // new static SAs carry traffic once their reservation is on disk
  log(LogLevel::info, "reloaded %s: %zu outbound and %zu inbound SAs",
      config_.static_sa_file.c_str(), sas_->outbound().size(), sas_->inbound().size());
  return true;
}

std::optional<xfrm::Policy> Gateway::installed_policy_locked(
    uint32_t id, const InstalledPolicy& installed) const {
  if (installed.if_id != 0) return interfaces_->find_policy(installed.if_id, id);
  return outbound_lookup_.load()->spd->find(id);
}

void Gateway::install_policy_locked(const xfrm::Policy& policy, bool from_charon) {
  if (auto existing = policies_.find(policy.id); existing != policies_.end()) {
    if (installed_policy_locked(policy.id, existing->second) == policy) {
      existing->second.from_charon = from_charon;
      return;
    }
    remove_policy_locked(policy.id);
  }
  if (policy.if_id != 0) {
    // Route-based: only its interface's SPD. No route and no firewall rule: what enters
    // the interface is the operator's routing, as with XFRM interfaces, and a 0.0.0.0/0
    // rule would catch every other packet of the host.
    if (interfaces_->add_policy(policy))
      policies_.emplace(policy.id, InstalledPolicy{policy.if_id, from_charon});
    return;
  }
  // The SPD learns the policy before its route exists: whatever the route brings in
  // finds the policy.
  outbound_lookup_.load()->spd->add(policy);
  // Every policy is a rule of the firewall, in the order the SPD was given them.
  firewall_changes_.push_back({xfrm::FirewallChange::Kind::add_policy, policy, {}});
  routes_->add_policy(policy);
  policies_.emplace(policy.id, InstalledPolicy{0, from_charon});
}

bool Gateway::remove_policy_locked(uint32_t id) {
  auto existing = policies_.find(id);
  if (existing == policies_.end()) return false;
  const auto policy = installed_policy_locked(id, existing->second);
  policies_.erase(existing);
  if (!policy) return true;  // its SPD refused it (or its interface is gone): nothing to undo
  if (policy->if_id != 0) {
    interfaces_->remove_policy(*policy);
    return true;
  }
  firewall_changes_.push_back({xfrm::FirewallChange::Kind::remove_policy, *policy, {}});
  routes_->drop_policy(*policy);
  outbound_lookup_.load()->spd->remove(id);
  return true;
}

bool Gateway::sync_kernel_firewall() {
  std::vector<xfrm::FirewallChange> changes;
  {
    std::lock_guard lock(control_mutex_);
    changes.swap(firewall_changes_);
    for (auto& [prefix, added] : routes_->take_fail_closed_prefix_changes())
      changes.push_back({added ? xfrm::FirewallChange::Kind::add_prefix
                               : xfrm::FirewallChange::Kind::remove_prefix,
                         {},
                         prefix});
  }
  // Without the lock: charon's changes go on while nft works.
  for (const auto& change : changes) firewall_sync_->apply(change);
  if (!firewall_sync_->pending()) return true;
  const uint64_t rebuilds = firewall_sync_->stats().rebuilds;
  const auto r = firewall_sync_->sync();
  const auto& stats = firewall_sync_->stats();
  // The first is the start; any later one means the table was not as espgw left it.
  if (stats.rebuilds != rebuilds && stats.rebuilds > 1)
    log(LogLevel::warn, "nftables: table %s written whole again (rebuild %llu): %s",
        xfrm::firewall_table_name(tun_->name()).c_str(),
        static_cast<unsigned long long>(stats.rebuilds), stats.last_rebuild_reason.c_str());
  if (r) return true;
  log(LogLevel::error, "%s", r.message.c_str());
  return false;
}

void Gateway::update_tunnel_mtu_locked() {
  mtu_->update(pipeline_->config().packet_capacity - esp::PacketBuffer::kDefaultHeadroom -
               esp::encap_tailroom() - 128);
}

void Gateway::start() {
  running_.store(true);
  sa_state_->start();
  for (unsigned q = 0; q < tun_->queues(); ++q) {
    if (tun_->vnet_header())
      threads_.emplace_back([this, q] { outbound_path_->read_tun_offload(q); });
    else
      threads_.emplace_back([this, q] { outbound_path_->read_tun(q); });
  }
  interfaces_->start_readers(threads_);
  for (auto& endpoint : wan_.all()) {
    WanEndpoint& e = *endpoint;
    start_udp_readers(e);
    if (e.raw)
      threads_.emplace_back([this, &e] { inbound_path_->read_wan(e.raw.get(), e.prefix + "raw"); });
    if (e.ike) threads_.emplace_back([this, &e] { ike_reader(e); });
  }
}

void Gateway::stop() {
  running_.store(false);
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

void Gateway::start_udp_readers(WanEndpoint& endpoint) {
  for (size_t i = 0; i < endpoint.udp.size(); ++i)
    threads_.emplace_back(
        [this, s = endpoint.udp[i].get(), name = endpoint.prefix + "udp" + std::to_string(i)] {
          inbound_path_->read_wan(s, name);
        });
}

void Gateway::enforce_lifetimes() {
  std::unique_lock lock(control_mutex_);
  const auto expiries = sas_->enforce_lifetimes(std::chrono::steady_clock::now());
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

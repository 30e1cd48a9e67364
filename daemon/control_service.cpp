#include "daemon/control_service.h"

#include <sys/random.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <variant>

#include "daemon/charon_messages.h"
#include "daemon/counter_registry.h"
#include "daemon/log.h"
#include "util/secure_wipe.h"

namespace espgw::daemon {

namespace {

// SPIs handed out by get-spi, in the range charon's kernel-netlink uses by default.
constexpr uint32_t kSpiMin = 0xc0000000;
constexpr uint32_t kSpiMax = 0xcfffffff;
// A reserved SPI not used by an add-sa within this time is given back, like the kernel's
// larval SAs.
constexpr auto kSpiReservation = std::chrono::seconds(60);

uint64_t random_u64() {
  uint64_t value = 0;
  if (getrandom(&value, sizeof value, 0) != sizeof value)
    value = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  return value;
}

vici::Message success() {
  vici::Message message;
  message.set_bool("success", true);
  return message;
}

// strongSwan's convention; the plugin maps "not found" and "not supported" to status codes.
vici::Message failure(const std::string& why) {
  vici::Message message;
  message.set_bool("success", false);
  message.set("errmsg", why);
  return message;
}

std::string spi_text(uint32_t spi) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", spi);
  return text;
}

void add_counters(vici::Section& section, std::string_view name, const NamedCounters& counters) {
  auto& child = section.add_section(std::string(name));
  for (const auto& [counter, value] : counters) child.set(counter, value);
}

}  // namespace

ControlService::ControlService(Gateway& gateway, const std::string& socket_path)
    : gateway_(gateway), server_(socket_path), instance_(random_u64() >> 1) {
  auto on = [this](const char* command, auto method) {
    server_.handle(command, [this, method](const Message& request, ConnectionId) {
      return (this->*method)(request);
    });
  };
  auto on_plain = [this](const char* command, Message (ControlService::*method)()) {
    server_.handle(command,
                   [this, method](const Message&, ConnectionId) { return (this->*method)(); });
  };
  on("hello", &ControlService::hello);
  on("get-spi", &ControlService::get_spi);
  on("add-sa", &ControlService::add_sa);
  on("update-sa", &ControlService::update_sa);
  on("query-sa", &ControlService::query_sa);
  on("del-sa", &ControlService::del_sa);
  on_plain("flush-sas", &ControlService::flush_sas);
  on("add-policy", &ControlService::add_policy);
  on("del-policy", &ControlService::del_policy);
  on("query-policy", &ControlService::query_policy);
  on_plain("flush-policies", &ControlService::flush_policies);
  on("ike-send", &ControlService::ike_send);
  server_.handle("list-sas", [this](const Message&, ConnectionId from) { return list_sas(from); });
  server_.handle("list-policies",
                 [this](const Message&, ConnectionId from) { return list_policies(from); });
  on_plain("stats", &ControlService::stats);
  on_plain("reload", &ControlService::reload);
  on("log-level", &ControlService::log_level);
  on_plain("reset-counters", &ControlService::reset_counters);
  server_.declare_event("ike-packet");
  server_.declare_event("sa-expire");
  server_.declare_event("acquire");
  server_.declare_event("list-sa");
  server_.declare_event("list-policy");

  gateway_.on_ike([this](std::span<const uint8_t> ike, const esp::IpAddress& peer,
                         uint16_t peer_port, const esp::IpAddress& local, uint16_t local_port) {
    return publish_ike(ike, peer, peer_port, local, local_port);
  });
  gateway_.on_expire([this](uint32_t spi, const esp::IpAddress& destination, bool hard) {
    publish_expire(spi, destination, hard);
  });
  gateway_.on_acquire([this](uint32_t reqid, const packet::FlowKey& packet) {
    return publish_acquire(reqid, packet);
  });
}

ControlService::~ControlService() {
  stop();
}

void ControlService::start() {
  server_.start();
  log(LogLevel::info, "control socket %s ready", server_.path().c_str());
}

void ControlService::stop() {
  server_.stop();
}

vici::Message ControlService::hello(const Message& request) {
  const std::string* instance = request.value("charon-instance");
  if (!instance || instance->empty() || instance->size() > 64)
    return failure("missing 'charon-instance'");
  std::lock_guard lock(mutex_);
  if (*instance != charon_instance_) {
    // A charon we did not know: if another one installed SAs before, it is gone (a
    // restart) and nobody will ever delete or rekey what it left.
    if (!charon_instance_.empty()) forget_charon_state_locked("charon restarted");
    charon_instance_ = *instance;
    log(LogLevel::info, "charon attached to the control socket");
  }
  // The plugin registers for its events before its hello (espgw_control.c, run_events),
  // so expiries that found no charon can go now.
  flush_pending_expiries_locked();
  Message response = success();
  response.set("espgw-instance", instance_);
  return response;
}

void ControlService::forget_charon_state_locked(const char* why) {
  policies_.clear();
  // Their SAs go below: a new charon never knew them.
  if (const size_t stale = pending_expiries_.size()) {
    pending_expiries_.clear();
    log(LogLevel::info, "%s: %zu queued SA expiries of the previous charon dropped", why, stale);
  }
  const size_t sas = gateway_.clear_dynamic_sas();
  const size_t policies = gateway_.clear_dynamic_policies();
  if (sas || policies)
    log(LogLevel::warn, "%s: removed %zu stale SAs and %zu policies it had installed", why, sas,
        policies);
}

vici::Message ControlService::get_spi(const Message&) {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(reserved_spis_, [&](const auto& reservation) {
    return now - reservation.second > kSpiReservation;
  });
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint32_t spi = kSpiMin + static_cast<uint32_t>(random_u64() % (kSpiMax - kSpiMin + 1));
    if (reserved_spis_.count(spi) || gateway_.spi_in_use(spi)) continue;
    reserved_spis_[spi] = now;
    Message response = success();
    response.set("spi", spi);
    return response;
  }
  return failure("no free SPI");
}

vici::Message ControlService::add_sa(const Message& request) {
  auto parsed = sa_from_add_sa(request);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    log(LogLevel::warn, "add-sa refused: %s", error->c_str());
    return failure(*error);
  }
  auto& entry = std::get<xfrm::SadEntry>(parsed);
  // The SA takes its own copy of the key (or is refused); this one goes when the request
  // is answered, whichever way.
  struct KeyWipe {
    std::vector<uint8_t>& key;
    ~KeyWipe() { wipe(key); }
  } key_wipe{entry.config.key_material};
  auto& window = entry.config.replay_window;
  if (window != 0) window = std::max(window, gateway_.config().min_replay_window);
  std::lock_guard lock(mutex_);
  reserved_spis_.erase(entry.config.spi);
  // The plugin marks the SAs it re-installs into a restarted espgw: their keys have been
  // used, so their counters must continue (or the SA is held until charon rekeys it).
  const bool replayed = request.boolean("replayed").value_or(false);
  // An SA whose local end is not one of espgw's addresses would leave from (or wait on)
  // the wrong address: charon hears why.
  if (const auto refusal = gateway_.wan_refusal(entry)) return failure(*refusal);
  // Route-based VPN: an if_id needs its interface (TUN device) in espgw.conf.
  if (const auto refusal = gateway_.interface_refusal(entry.if_id)) {
    log(LogLevel::warn, "add-sa spi %s refused: %s", spi_text(entry.config.spi).c_str(),
        refusal->c_str());
    return failure(*refusal);
  }
  // Refused for an inbound SPI another SA holds, or the (SPI, destination) of a static SA.
  if (!gateway_.add_dynamic_sa(entry, replayed))
    return failure("SPI " + spi_text(entry.config.spi) + " is already in use");
  return success();
}

vici::Message ControlService::update_sa(const Message& request) {
  // The peer's end moves in place; anything that needs another socket of ours is "not
  // supported", and charon rekeys instead (fresh SAs on the new addresses).
  auto parsed = sa_update_from(request);
  if (auto* error = std::get_if<std::string>(&parsed)) return failure(*error);
  const auto& update = std::get<SaUpdate>(parsed);
  switch (gateway_.move_dynamic_sa(update.id, update.new_source, update.new_destination,
                                   update.new_udp)) {
    case SaTable::MoveResult::moved:
      return success();
    case SaTable::MoveResult::not_found:
      return failure("not found");
    case SaTable::MoveResult::conflict:
      return failure("SPI " + spi_text(update.id.spi) + " is already in use at " +
                     update.new_destination.to_string());
    case SaTable::MoveResult::not_supported:
      break;
  }
  return failure("not supported");
}

vici::Message ControlService::query_sa(const Message& request) {
  auto parsed = sa_id_from(request);
  if (auto* error = std::get_if<std::string>(&parsed)) return failure(*error);
  const auto& id = std::get<SaId>(parsed);
  const auto usage = gateway_.sa_usage(id.spi, id.destination);
  if (!usage) return failure("not found");
  Message response = success();
  response.set("bytes", usage->bytes);
  response.set("packets", usage->packets);
  if (usage->idle_ms) response.set("idle-ms", *usage->idle_ms);
  return response;
}

vici::Message ControlService::del_sa(const Message& request) {
  auto parsed = sa_id_from(request);
  if (auto* error = std::get_if<std::string>(&parsed)) return failure(*error);
  const auto& id = std::get<SaId>(parsed);
  if (!gateway_.remove_dynamic_sa(id.spi, id.destination)) return failure("not found");
  return success();
}

vici::Message ControlService::flush_sas() {
  gateway_.clear_dynamic_sas();
  return success();
}

vici::Message ControlService::add_policy(const Message& request) {
  auto parsed = policy_from(request, true);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    log(LogLevel::warn, "add-policy refused: %s", error->c_str());
    return failure(*error);
  }
  auto& policy = std::get<PolicyRequest>(parsed);
  if (const auto refusal = gateway_.interface_refusal(policy.policy.if_id)) {
    log(LogLevel::warn, "add-policy %s refused: %s", policy.key.c_str(), refusal->c_str());
    return failure(*refusal);
  }
  std::lock_guard lock(mutex_);
  auto& entry = policies_[policy.key];
  // A second CHILD_SA with the same selectors shares the policy: count it, and let the
  // newest installation's action and reqid win, as kernel-netlink does.
  policy.policy.id = entry.references ? entry.id : next_policy_id_++;
  entry.id = policy.policy.id;
  entry.reqid = policy.policy.reqid;
  entry.direction = policy.policy.direction;
  ++entry.references;
  gateway_.add_dynamic_policy(policy.policy);
  return success();
}

vici::Message ControlService::del_policy(const Message& request) {
  auto parsed = policy_from(request, false);
  if (auto* error = std::get_if<std::string>(&parsed)) return failure(*error);
  std::lock_guard lock(mutex_);
  auto entry = policies_.find(std::get<PolicyRequest>(parsed).key);
  if (entry == policies_.end()) return failure("not found");
  if (--entry->second.references == 0) {
    gateway_.remove_dynamic_policy(entry->second.id);
    policies_.erase(entry);
  }
  return success();
}

vici::Message ControlService::query_policy(const Message& request) {
  auto parsed = policy_from(request, false);
  if (auto* error = std::get_if<std::string>(&parsed)) return failure(*error);
  PolicyEntry policy;
  {
    std::lock_guard lock(mutex_);
    auto entry = policies_.find(std::get<PolicyRequest>(parsed).key);
    if (entry == policies_.end()) return failure("not found");
    policy = entry->second;
  }
  Message response = success();
  // A policy is used when its SAs are: the freshest SA of its group and direction.
  const auto direction =
      policy.direction == xfrm::Direction::out ? xfrm::Direction::out : xfrm::Direction::in;
  if (const auto idle = gateway_.group_idle_ms(direction, policy.reqid))
    response.set("idle-ms", *idle);
  return response;
}

vici::Message ControlService::flush_policies() {
  std::lock_guard lock(mutex_);
  policies_.clear();
  gateway_.clear_dynamic_policies();
  return success();
}

vici::Message ControlService::ike_send(const Message& request) {
  const auto source_port = request.number("src-port");
  const auto destination_port = request.number("dst-port");
  const std::string* destination = request.value("dst");
  const std::string* data = request.value("data");
  const std::string* source_text = request.value("src");
  const auto peer = destination ? esp::IpAddress::parse(*destination) : std::nullopt;
  // The local address charon sends from picks the socket; without one (or unspecified),
  // the first local address of the peer's family.
  const auto source = source_text ? esp::IpAddress::parse(*source_text) : std::nullopt;
  if (source_text && !source) return failure("ike-send: src is not an address");
  if (!source_port || *source_port > 65535 || !destination_port || *destination_port == 0 ||
      *destination_port > 65535 || !peer || !data || data->empty())
    return failure("ike-send needs src-port, dst, dst-port and data");
  const auto* bytes = reinterpret_cast<const uint8_t*>(data->data());
  if (!gateway_.send_ike(source, static_cast<uint16_t>(*source_port), *peer,
                         static_cast<uint16_t>(*destination_port), {bytes, data->size()}))
    return failure("espgw has no IKE socket on " + (source ? source->to_string() : "any address") +
                   " port " + std::to_string(*source_port) +
                   " for that address family, or the send failed");
  return success();
}

bool ControlService::publish_ike(std::span<const uint8_t> ike, const esp::IpAddress& peer,
                                 uint16_t peer_port, const esp::IpAddress& local,
                                 uint16_t local_port) {
  Message event;
  event.set("src", peer.to_string());
  event.set("src-port", peer_port);
  event.set("dst", local.to_string());
  event.set("dst-port", local_port);
  event.set("data", std::string_view(reinterpret_cast<const char*>(ike.data()), ike.size()));
  // Bulk: behind a backlog of 1 MiB (charon not reading fast enough) IKE is shed, not
  // queued, so a flood can neither overflow the event connection (which would close it,
  // losing the expiries queued on it) nor hold an expiry back for long.
  size_t shed = 0;
  if (server_.publish("ike-packet", event, vici::Server::Priority::bulk, &shed) != 0 || shed != 0)
    return true;
  log(LogLevel::debug, "IKE packet from %s dropped: no charon attached", peer.to_string().c_str());
  return false;
}

namespace {

vici::Message expire_event(const Expiry& expiry) {
  vici::Message event;  // the gateway reports charon's SAs only: static ones are never rekeyed
  event.set("spi", expiry.spi);
  event.set("dst", expiry.destination.to_string());
  event.set_bool("hard", expiry.hard);
  return event;
}

}  // namespace

void ControlService::publish_expire(uint32_t spi, const esp::IpAddress& destination, bool hard) {
  const Expiry expiry{spi, destination, hard};
  std::lock_guard lock(mutex_);
  // Urgent: ahead of any IKE queued for the plugin.
  if (server_.publish("sa-expire", expire_event(expiry), vici::Server::Priority::urgent) != 0)
    return;
  if (pending_expiries_.add(expiry))
    log(LogLevel::warn,
        "SA %s reached its %s lifetime but no charon is attached to rekey it; queued until "
        "charon attaches",
        spi_text(spi).c_str(), hard ? "hard" : "soft");
}

bool ControlService::publish_acquire(uint32_t reqid, const packet::FlowKey& packet) {
  // Urgent like an expiry: a few small events per interval and policy, and the tunnel's
  // traffic waits for it.
  if (server_.publish("acquire", acquire_event(reqid, packet), vici::Server::Priority::urgent) != 0)
    return true;
  log(LogLevel::debug, "acquire for reqid %u not sent: no charon attached", reqid);
  return false;
}

void ControlService::flush_pending_expiries_locked() {
  if (pending_expiries_.size() == 0) return;
  const std::vector<Expiry> waiting = pending_expiries_.take();
  size_t sent = 0, gone = 0;
  for (size_t i = 0; i < waiting.size(); ++i) {
    const Expiry& expiry = waiting[i];
    if (!gateway_.sa_usage(expiry.spi, expiry.destination)) {
      ++gone;  // charon deleted the SA meanwhile: nothing left to rekey
      continue;
    }
    if (server_.publish("sa-expire", expire_event(expiry), vici::Server::Priority::urgent) == 0) {
      // The hello came on the command connection before the events were registered
      // (a charon that reconnected only that one): they wait for the next hello.
      for (size_t j = i; j < waiting.size(); ++j) pending_expiries_.add(waiting[j]);
      break;
    }
    ++sent;
  }
  expiries_sent_late_ += sent;
  if (sent || gone)
    log(LogLevel::info,
        "charon attached: %zu SA expiries that waited for it sent, %zu dropped (SA deleted "
        "meanwhile), %zu still waiting",
        sent, gone, pending_expiries_.size());
}

template <typename Items, typename Describe>
void ControlService::stream_or_answer(ConnectionId to, const char* event_name,
                                      const char* section_name, const Items& items,
                                      const Describe& describe, Message& response) {
  // A client registered for the event gets one event per item ahead of the response, as
  // charon's list-sas does: thousands of SAs would not fit in one message (512 KiB).
  // Others get them all in the response's section.
  size_t streamed = 0;
  for (const auto& item : items) {
    Message event;
    describe(event, item);
    if (!server_.publish_to(to, event_name, event)) break;
    ++streamed;
  }
  if (streamed == 0) {
    auto& section = response.add_section(section_name);
    for (const auto& item : items) describe(section, item);
  }
  response.set("streamed", static_cast<uint64_t>(streamed));
}

vici::Message ControlService::list_sas(ConnectionId from) {
  GatewayStatus status = gateway_.status();
  baseline_.apply(status);
  Message response = success();
  auto describe = [](vici::Section& parent, const SaStatus& sa) {
    auto& section = parent.add_section(spi_text(sa.spi) + "/" + sa.destination.to_string());
    section.set("spi", spi_text(sa.spi));
    section.set("direction", xfrm::direction_name(sa.direction));
    section.set("origin", sa.from_charon ? "charon" : "static");
    section.set("src", sa.source.to_string());
    section.set("dst", sa.destination.to_string());
    section.set("algorithm", sa.algorithm);
    section.set("encap", sa.udp_encapsulation ? "udp" : "esp");
    if (sa.udp_encapsulation) {
      section.set("src-port", sa.udp_source_port);
      section.set("dst-port", sa.udp_destination_port);
    }
    section.set_bool("esn", sa.esn);
    section.set("reqid", sa.reqid);
    section.set("interface", sa.interface);
    NamedCounters counters;
    if (sa.direction == xfrm::Direction::out)
      read_counters(kOutboundSaCounters, sa, counters);
    else
      read_counters(kInboundSaCounters, sa, counters);
    for (const auto& [name, value] : counters) section.set(name, value);
    if (sa.idle_ms) section.set("idle-ms", *sa.idle_ms);
    section.set("lifetime", sa.lifetime);
    section.set("age-seconds", sa.age_seconds);
    add_counters(section, kSaDropsSection, sa.drops);
  };
  stream_or_answer(from, "list-sa", "sas", status.sas, describe, response);
  auto& groups = response.add_section("groups");
  for (const auto& group : status.groups) {
    std::vector<std::string> members;
    for (uint32_t spi : group.member_spis) members.push_back(spi_text(spi));
    std::vector<std::string> slots;
    for (uint64_t slot : group.member_slots) slots.push_back(std::to_string(slot));
    auto& section = groups.add_section(std::to_string(group.reqid));
    section.set_list("members", std::move(members));
    section.set_list("slots", std::move(slots));
  }
  return response;
}

vici::Message ControlService::list_policies(ConnectionId from) {
  const GatewayStatus status = gateway_.status();
  Message response = success();
  auto describe = [this](vici::Section& parent, const xfrm::Policy& policy) {
    auto& section = parent.add_section(std::to_string(policy.id));
    section.set("direction", xfrm::direction_name(policy.direction));
    section.set("local", policy.selector.local.to_string());
    section.set("remote", policy.selector.remote.to_string());
    section.set("protocol", policy.selector.protocol);
    section.set("priority", policy.priority);
    section.set("action", xfrm::action_name(policy.action));
    section.set("reqid", policy.reqid);
    section.set("interface", gateway_.interface_name(policy.if_id));
  };
  stream_or_answer(from, "list-policy", "policies", status.policies, describe, response);
  return response;
}

NamedCounters ControlService::control_socket_counters() {
  ControlSocketStats control;
  control.server = server_.stats();
  {
    std::lock_guard lock(mutex_);
    control.expiries_pending = pending_expiries_.size();
    control.expiries_sent_late = expiries_sent_late_;
    control.expiries_dropped = pending_expiries_.dropped();
  }
  NamedCounters socket;
  read_counters(kControlSocketCounters, control, socket);
  return socket;
}

vici::Message ControlService::stats() {
  GatewayStatus status = gateway_.status(false);
  baseline_.apply(status);
  Message response = success();
  response.set("tun", status.tun_name);
  response.set("tunnel-mtu", status.tunnel_mtu);
  response.set("lan-mtu", status.lan_mtu);
  response.set_bool("jumbo-segments", status.jumbo_segments);
  response.set("tun-rps", status.tun_rps);
  for (const auto& [name, value] : status.gateway) response.set(name, value);
  response.set("crypto-backend", status.crypto_backend);
  response.set_list("local-addresses", status.local_addresses);
  {
    std::lock_guard lock(mutex_);
    response.set_bool("charon-attached", !charon_instance_.empty());
    // Counts for scripts at scale, where list-sas gets long.
    response.set("sas", static_cast<uint64_t>(status.sa_count));
    response.set("charon-sas", static_cast<uint64_t>(status.charon_sa_count));
  }
  add_counters(response, "gateway-drops", status.gateway_drops);
  add_counters(response, "engine-drops", status.engine_drops);
  add_counters(response, "wan", status.wan);
  add_counters(response, "pipeline", status.pipeline);
  auto& workers = response.add_section("workers");
  for (size_t i = 0; i < status.worker_packets.size(); ++i)
    workers.set(std::to_string(i), status.worker_packets[i]);
  NamedCounters socket = control_socket_counters();
  baseline_.apply_control_socket(socket);
  add_counters(response, "control-socket", socket);
  return response;
}

}  // namespace espgw::daemon

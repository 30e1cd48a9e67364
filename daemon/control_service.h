// espgw's control socket: the VICI commands of the charon plugin (SAs, policies, IKE
// packets; vici_bridge/charon_plugin) and of espgwctl (status), on one root-only unix
// socket. It hands the gateway each of charon's changes on its own (the gateway knows
// which SAs and policies are charon's) and keeps charon's reference counts of policies.
// docs/strongswan.md lists the commands and events.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>

#include "daemon/config_reload.h"
#include "daemon/counter_baseline.h"
#include "daemon/gateway.h"
#include "daemon/pending_expiries.h"
#include "vici_bridge/vici_server.h"
#include "xfrm/static_file.h"

namespace espgw::daemon {

class ControlService {
 public:
  // Binds the socket (mode 0600) and hooks into the gateway's IKE and expiry callbacks;
  // throws std::system_error if the socket can't be bound.
  ControlService(Gateway& gateway, const std::string& socket_path);
  ~ControlService();
  ControlService(const ControlService&) = delete;
  ControlService& operator=(const ControlService&) = delete;

  void start();
  void stop();
  // What `reload` (espgwctl reload) runs: main's ConfigReloader. Set before start().
  void on_reload(std::function<ReloadOutcome()> reload) { reload_ = std::move(reload); }

 private:
  using Message = vici::Message;
  using ConnectionId = vici::Server::ConnectionId;

  // charon plugin
  Message hello(const Message& request);
  Message get_spi(const Message& request);
  Message add_sa(const Message& request);
  Message update_sa(const Message& request);
  Message query_sa(const Message& request);
  Message del_sa(const Message& request);
  Message flush_sas();
  Message add_policy(const Message& request);
  Message del_policy(const Message& request);
  Message query_policy(const Message& request);
  Message flush_policies();
  Message ike_send(const Message& request);
  // espgwctl
  // Streamed as list-sa / list-policy events to a client registered for them.
  Message list_sas(ConnectionId from);
  Message list_policies(ConnectionId from);
  // Each of `items` (put into a section by `describe`) as an `event_name` event to `to`
  // if it registered for that event, else all of them in `response`'s `section_name`.
  template <typename Items, typename Describe>
  void stream_or_answer(ConnectionId to, const char* event_name, const char* section_name,
                        const Items& items, const Describe& describe, Message& response);
  Message stats();
  // Administration (control_admin.cpp): reload espgw.conf, read or set the log level,
  // set the counters' zero point.
  Message reload();
  Message log_level(const Message& request);
  Message reset_counters();
  NamedCounters control_socket_counters();

  // False when no connection registered for IKE (no charon attached): the gateway counts
  // the datagram as dropped. A datagram shed for a full backlog (vici::Server's bulk
  // priority) counts as taken; the server counts it (bulk-events-shed).
  bool publish_ike(std::span<const uint8_t> ike, const esp::IpAddress& peer, uint16_t peer_port,
                   const esp::IpAddress& local, uint16_t local_port);
  // Sends `sa-expire` ahead of any queued IKE; with no charon registered for it, queues
  // it in pending_expiries_ until the next hello.
  void publish_expire(uint32_t spi, const esp::IpAddress& destination, bool hard);
  // Sends `acquire` (a trap policy's packet found no SA) to the charon registered for
  // it; false if none is. Not queued for a later charon: the policy's traffic asks again.
  bool publish_acquire(uint32_t reqid, const packet::FlowKey& packet);
  // Publishes the expiries that waited for a charon, oldest first, skipping those whose
  // SA charon has since deleted. What still finds nobody stays queued.
  void flush_pending_expiries_locked();
  void forget_charon_state_locked(const char* why);

  Gateway& gateway_;
  std::function<ReloadOutcome()> reload_;
  CounterBaseline baseline_;  // reset-counters' zero point for stats and list-sas
  vici::Server server_;
  const uint64_t instance_;  // tells the plugin whether espgw restarted

  std::mutex mutex_;  // the state below; handlers run on the server thread, expiry elsewhere
  std::string charon_instance_;
  // What del-policy and query-policy need of a policy; the policy itself is kept by the
  // gateway's SPD (a copy here cost about 70 bytes per SA at 10,000 SAs).
  struct PolicyEntry {
    uint32_t id = 0;
    uint32_t reqid = 0;
    xfrm::Direction direction = xfrm::Direction::out;
    unsigned references = 0;
  };
  std::map<std::string, PolicyEntry> policies_;
  std::map<uint32_t, std::chrono::steady_clock::time_point> reserved_spis_;
  uint32_t next_policy_id_ = 1u << 24;  // static-file policies are numbered from 1
  PendingExpiries pending_expiries_;
  uint64_t expiries_sent_late_ = 0;  // delivered from pending_expiries_ at a hello
};

}  // namespace espgw::daemon

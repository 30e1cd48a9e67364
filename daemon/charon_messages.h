// What the charon plugin (vici_bridge/charon_plugin) sends, turned into the SAD and SPD
// records the gateway installs. Pure translation, so that every malformed or unsupported
// request gets a precise error without touching the gateway. The message keys are
// documented in docs/strongswan.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "esp/ip_address.h"
#include "packet/flow_key.h"
#include "vici_bridge/vici_message.h"
#include "xfrm/sad_entry.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

using xfrm::SaId;

// A policy and the key charon's identical add/del calls share: direction and selectors.
// charon adds the same policy once per CHILD_SA that uses it, so the gateway counts them.
struct PolicyRequest {
  std::string key;
  xfrm::Policy policy;  // id left 0: the caller numbers policies
};

// Each returns the record, or an error message for the plugin (never key material).
std::variant<xfrm::SadEntry, std::string> sa_from_add_sa(const vici::Message& request);
std::variant<SaId, std::string> sa_id_from(const vici::Message& request);
// update-sa: charon moves an SA to new addresses or ports (a NAT's new mapping, MOBIKE).
// The SA is named by its SPI and old destination; the ports are the UDP encapsulation's,
// set only when the SA has one after the move.
struct SaUpdate {
  SaId id;
  esp::IpAddress source, new_source, new_destination;
  bool encap = false;
  std::optional<esp::UdpEncapsulation> new_udp;
};
std::variant<SaUpdate, std::string> sa_update_from(const vici::Message& request);
// `with_action`: add-policy carries action, priority and reqid; del and query don't.
std::variant<PolicyRequest, std::string> policy_from(const vici::Message& request,
                                                     bool with_action);

// The `acquire` event for a packet (flow `packet`) that matched a protect policy of
// `reqid` with no SA: reqid, src, dst and proto of the packet, and its src-port and
// dst-port when it has ports (TCP, UDP, UDP-Lite, SCTP, not a fragment). The plugin makes
// the traffic selectors of charon's acquire from them, as kernel-netlink does from the
// kernel's.
vici::Message acquire_event(uint32_t reqid, const packet::FlowKey& packet);

}  // namespace espgw::daemon

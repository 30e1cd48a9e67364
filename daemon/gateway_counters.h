// The gateway's own counters: drops it decides before a packet reaches an SA, and events
// that are not drops. Each is declared once, in ESPGW_GATEWAY_COUNTERS, which expands into
// the storage below and into the registry's table (daemon/counter_registry.h) that the
// periodic log, the status, espgwctl and docs/counters.md take their names from.
#pragma once

#include <atomic>
#include <cstdint>

namespace espgw::daemon {

// X(symbol, name, place, help). `place`: where the status shows it (StatusPlace).
#define ESPGW_GATEWAY_COUNTERS(X)                                                             \
  X(no_policy, "no-policy", gateway_drops, "outbound packet matched no policy")               \
  X(policy_discard, "policy-discard", gateway_drops,                                          \
    "outbound packet matched a discard (or bypass) policy")                                   \
  X(no_sa, "no-sa", gateway_drops,                                                            \
    "outbound packet's protect policy has an empty SA group (a trap policy's, until charon "  \
    "negotiated its SA)")                                                                     \
  X(not_ip, "not-ip", gateway_drops, "the TUN device gave something that is not IPv4/IPv6")   \
  X(ike_dropped, "ike-no-charon", gateway_drops,                                              \
    "IKE (on udp-port with the non-ESP marker, or on ike-port) that no charon took: none "    \
    "registered for it on the control socket, or no control socket at all")                   \
  X(ike_rate_limited, "ike-rate-limited", gateway_drops,                                      \
    "IKE over the rates of `ike-rate-limit`, never passed to charon")                         \
  X(wan_send_failed, "wan-send-failed", gateway_drops, "ESP packets the WAN socket refused")  \
  X(outer_df_kept, "outer-df-kept", wan,                                                      \
    "not a drop: IPv4 packets sent with DF set although their SA asked for it clear (no "     \
    "raw socket: espgw lacks CAP_NET_RAW)")                                                   \
  X(tun_write_failed, "tun-write-failed", gateway_drops,                                      \
    "decrypted packets the TUN device refused")                                               \
  X(tun_bad_offload, "tun-bad-offload", gateway_drops, "a TUN frame the segmenter refused")   \
  X(queue_delay, "queue-delay", gateway_drops,                                                \
    "decrypted, then dropped to keep the WAN receive queue short (queue-delay gate)")         \
  X(queue_delay_marked, "queue-delay-ecn-marked", wan,                                        \
    "not a drop: picked by the queue-delay gate but ECN-capable, so marked CE and delivered") \
  X(tun_resegmented, "tun-resegmented", top,                                                  \
    "not a drop: TCP packets larger than the LAN's MTU written as GSO frames that fit it")    \
  X(acquires, "acquires", top,                                                                \
    "not a drop: acquires sent to charon for a protect policy without SAs (a trap policy)")   \
  X(acquires_paced, "acquires-paced", top,                                                    \
    "not a drop: acquires not sent, one for the same policy went out in the last 3 s")        \
  X(acquires_no_charon, "acquires-no-charon", top,                                            \
    "acquires that found no charon registered for them (asked again 3 s later)")              \
  X(acquires_table_full, "acquires-table-full", top,                                          \
    "acquires not sent: the pacing table's slots for the policy held fresher acquires")       \
  X(interface_refused, "interface-refused", top,                                              \
    "charon's SAs and policies refused: their if_id names no `interface` of espgw.conf")

// Relaxed atomics, updated on the data path: counters_.no_policy.fetch_add(1, relaxed).
struct GatewayCounters {
#define ESPGW_GATEWAY_COUNTER_FIELD(symbol, name, place, help) std::atomic<uint64_t> symbol{0};
  ESPGW_GATEWAY_COUNTERS(ESPGW_GATEWAY_COUNTER_FIELD)
#undef ESPGW_GATEWAY_COUNTER_FIELD
};

}  // namespace espgw::daemon

// The gateway's record of each installed SA: the SAD entry it came from, the engine's SA,
// its pipeline channel and lifetime tracking. Private to the gateway's own files
// (gateway.cpp installs them, gateway_control.cpp reports on them).
#pragma once

#include <chrono>
#include <memory>

#include "daemon/gateway.h"
#include "esp/security_association.h"
#include "pipeline/channels.h"
#include "xfrm/key_fingerprint.h"
#include "xfrm/lifetime.h"
#include "xfrm/sad.h"

namespace espgw::daemon {

// When an SA was installed, when it last carried a packet, and how far through its
// lifetime it is. Updated by enforce_lifetimes every 100 ms, so idle times have that
// resolution and the data path pays nothing for them.
struct LifetimeTracking {
  std::chrono::steady_clock::time_point added_at = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_used{};
  uint64_t packets_seen = 0;
  xfrm::LifetimeState reported = xfrm::LifetimeState::none;
};

// `entry` is kept without its key (wiped once the SA has expanded it); the fingerprint
// tells an identical re-install or reload apart from a new key.
struct Gateway::OutboundEntry {
  xfrm::SadEntry entry;
  xfrm::KeyFingerprint key_fingerprint{};
  xfrm::SaStateKey state_key;  // its key's counter record (SaStateKeeper)
  bool from_charon = false;
  unsigned mtu_candidate = 0;  // its element of the gateway's mtu_candidates_
  LifetimeTracking lifetime;
  std::shared_ptr<esp::OutboundSa> sa;
  std::shared_ptr<WanSink> sink;
  std::shared_ptr<pipeline::OutboundChannel> channel;
};

struct Gateway::InboundEntry {
  xfrm::SadEntry entry;  // without its key, as for OutboundEntry
  xfrm::KeyFingerprint key_fingerprint{};
  xfrm::SaStateKey state_key;
  bool from_charon = false;
  unsigned lan_mtu_candidate = 0;  // its element of lan_mtu_candidates_, if not 0
  LifetimeTracking lifetime;
  std::shared_ptr<esp::InboundSa> sa;
  std::shared_ptr<pipeline::InboundChannel> channel;
};

}  // namespace espgw::daemon

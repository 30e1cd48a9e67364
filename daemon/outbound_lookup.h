// What a TUN reader looks an outbound packet up in: the SPD (which policy, which reqid)
// and the SA groups by reqid (which SA of the group carries the flow). Published as one
// immutable snapshot that readers load per packet, never under a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include "pipeline/sa_group.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

// The SPD changes in place (it has its own lock) and every snapshot shares it; the group
// map is copied when a group appears or goes (SaTable), and the whole snapshot is swapped,
// so a reader never sees a map being changed.
struct OutboundLookup {
  std::shared_ptr<xfrm::Spd> spd = std::make_shared<xfrm::Spd>();
  std::map<uint32_t, std::shared_ptr<pipeline::SaGroup>> groups;  // by reqid
};

using PublishedOutboundLookup = std::atomic<std::shared_ptr<const OutboundLookup>>;

}  // namespace espgw::daemon

// What a TUN reader looks an outbound packet up in: the SPD (which policy, which reqid)
// and the SA groups by reqid (which SA of the group carries the flow). Published as one
// immutable snapshot that readers load per packet, never under a lock.
#pragma once

#include <atomic>
#include <memory>

#include "daemon/sa_groups_by_reqid.h"
#include "xfrm/spd.h"

namespace espgw::daemon {

// The SPD changes in place (it has its own lock) and every snapshot shares it; when a
// group appears or goes, SaTable makes a new snapshot whose group map shares every shard
// but the one that changed, and swaps the whole snapshot, so a reader never sees a map
// being changed. A group's members change inside the group (pipeline::SaGroup).
struct OutboundLookup {
  std::shared_ptr<xfrm::Spd> spd = std::make_shared<xfrm::Spd>();
  SaGroupsByReqid groups;
};

using PublishedOutboundLookup = std::atomic<std::shared_ptr<const OutboundLookup>>;

}  // namespace espgw::daemon

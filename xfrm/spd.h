// The Security Policy Database (RFC 4301 4.4.1): for each direction, an ordered list of
// policies that decides whether an inner packet is protected, passed in clear or dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "packet/flow_key.h"
#include "xfrm/direction.h"
#include "xfrm/policy.h"
#include "xfrm/policy_index.h"
#include "xfrm/selector.h"
#include "xfrm/writer_preferring_mutex.h"

namespace espgw::xfrm {

// Read-mostly: packets look policies up on every core while changes are rare (tunnel up
// or down). Each thread remembers its recent answers (SpdFlowCache) until the next
// change and answers repeated flows without a lock. Other lookups share a
// writer-preferring lock, so they never wait for each other and a change is not starved
// by constant lookups; they cost the same with one policy as with thousands
// (PolicyIndex).
class Spd {
 public:
  Spd();
  Spd(const Spd&) = delete;
  Spd& operator=(const Spd&) = delete;

  // Refuses (returns false) a policy whose id is already present, or an invalid direction.
  bool add(const Policy& policy);
  bool remove(uint32_t id);

  // The policy that decides a packet with flow `key`, as the packet carries it (for in
  // and fwd the source is the remote side). The winner has the lowest priority value;
  // among equal priorities the more specific selector (Selector::specificity), then the
  // one added first. nullopt when nothing matches.
  std::optional<Policy> lookup(Direction direction, const packet::FlowKey& key) const;

  // The policy of that id, nullopt if none. The SPD is where a policy is kept: whoever
  // installed it keeps its id.
  std::optional<Policy> find(uint32_t id) const;

  // Every policy, direction by direction (out, in, fwd), each in the order lookup tries them.
  std::vector<Policy> list() const;
  size_t size() const;

 private:
  mutable WriterPreferringMutex mutex_;
  PolicyIndex index_;
  uint64_t next_sequence_ = 0;  // insertion order, the last tie-break
  // A new value, unique across all SPDs, with every change (written under the lock):
  // answers cached under any other generation are void.
  std::atomic<uint64_t> generation_;
};

}  // namespace espgw::xfrm

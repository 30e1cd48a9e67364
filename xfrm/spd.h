// The Security Policy Database (RFC 4301 4.4.1): for each direction, an ordered list of
// policies that decides whether an inner packet is protected, passed in clear or dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "xfrm/direction.h"
#include "xfrm/flow_key.h"
#include "xfrm/selector.h"
#include "xfrm/writer_preferring_mutex.h"

namespace espgw::xfrm {

enum class PolicyAction : uint8_t { protect, bypass, discard };

// The words for actions, as the static file and the control socket write them.
constexpr std::string_view action_name(PolicyAction action) {
  switch (action) {
    case PolicyAction::protect:
      return "protect";
    case PolicyAction::bypass:
      return "bypass";
    case PolicyAction::discard:
      return "discard";
  }
  return "?";
}

constexpr std::optional<PolicyAction> parse_action(std::string_view word) {
  if (word == "protect") return PolicyAction::protect;
  if (word == "bypass") return PolicyAction::bypass;
  if (word == "discard") return PolicyAction::discard;
  return std::nullopt;
}

struct Policy {
  uint32_t id = 0;
  Direction direction = Direction::out;
  Selector selector;
  uint32_t priority = 0;  // lower value wins, as with the kernel's xfrm policy priority
  PolicyAction action = PolicyAction::protect;
  uint32_t reqid = 0;  // protect only: the SA group (all SAs of this reqid and direction)

  bool operator==(const Policy&) const = default;
};

// Read-mostly: packets look policies up on every core while changes are rare (tunnel up
// or down). Lookups share a writer-preferring lock, so they never wait for each other
// and a change is not starved by constant lookups.
class Spd {
 public:
  // Refuses (returns false) a policy whose id is already present, or an invalid direction.
  bool add(const Policy& policy);
  bool remove(uint32_t id);

  // The policy that decides a packet with flow `key`, as the packet carries it (for in
  // and fwd the source is the remote side). The winner has the lowest priority value;
  // among equal priorities the more specific selector (Selector::specificity), then the
  // one added first. nullopt when nothing matches.
  std::optional<Policy> lookup(Direction direction, const FlowKey& key) const;

  // Every policy, direction by direction (out, in, fwd), each in the order lookup tries them.
  std::vector<Policy> list() const;
  size_t size() const;

 private:
  struct Entry {
    Policy policy;
    unsigned specificity;
    uint64_t sequence;  // insertion order, the last tie-break
  };
  static constexpr size_t kDirections = 3;  // out, in, fwd
  static bool evaluated_before(const Entry& a, const Entry& b);

  mutable WriterPreferringMutex mutex_;
  // One list per direction, kept sorted so the first match is the winner.
  std::vector<Entry> lists_[kDirections];
  uint64_t next_sequence_ = 0;
};

}  // namespace espgw::xfrm

// An ECMP group: several outbound SAs with identical traffic selectors (one per
// CHILD_SA), among which flows are spread by rendezvous (highest random weight) hashing.
// Each member has a stable key (the CHILD_SA's slot, not its SPI), so a rekey that
// replaces a member's SA moves no flow, removing a member moves only that member's
// flows, and adding one moves only the flows the newcomer wins.
//
// Readers take a snapshot of the member list without locking out writers; membership
// changes copy the list (they happen at IKE speed, not packet speed).
//
// The members share one in-flight bound (InFlightBudget): every SA has its own, but they
// all feed the same workers, so without a shared one an ECMP group of N let N times as
// many packets queue as a single SA, and latency under load grew with N.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace espgw::pipeline {

class OutboundChannel;

// Packets of a group's SAs between their sequence number and their delivery.
struct InFlightBudget {
  explicit InFlightBudget(uint64_t bound) : limit(bound) {}
  std::atomic<uint64_t> in_flight{0};
  const uint64_t limit;
};

class SaGroup {
 public:
  // `in_flight_limit`: the group's bound on packets in flight, shared by its members
  // (0: none, each member has only its own).
  explicit SaGroup(uint64_t in_flight_limit = 0)
      : budget_(in_flight_limit ? std::make_shared<InFlightBudget>(in_flight_limit) : nullptr) {}

  // Adds a member, or replaces the channel of an existing member (rekey). The channel
  // joins the group's in-flight budget; a channel belongs to one group.
  void set_member(uint64_t member_key, std::shared_ptr<OutboundChannel> channel);
  bool remove_member(uint64_t member_key);
  // Removes the member only while `channel` is still its channel: an old SA that expires
  // after a rekey gave its slot to the new one must not take the new one out.
  bool remove_member(uint64_t member_key, const OutboundChannel* channel);
  // The member for a flow, or nullptr when the group is empty.
  std::shared_ptr<OutboundChannel> pick(uint64_t flow_hash) const;
  // The member key a flow maps to (for tests and status); 0 when empty.
  uint64_t pick_key(uint64_t flow_hash) const;
  size_t size() const;
  // The member keys, in no particular order (for status displays).
  std::vector<uint64_t> member_keys() const;
  // The SPIs of the members' current SAs, in no particular order (for status displays).
  std::vector<uint32_t> member_spis() const;

 private:
  struct Member {
    uint64_t key;
    uint64_t key_hash;
    std::shared_ptr<OutboundChannel> channel;
  };
  using Members = std::vector<Member>;
  const Member* choose(const Members& members, uint64_t flow_hash) const;

  std::shared_ptr<InFlightBudget> budget_;
  std::mutex writer_;
  std::atomic<std::shared_ptr<const Members>> members_{std::make_shared<const Members>()};
};

}  // namespace espgw::pipeline

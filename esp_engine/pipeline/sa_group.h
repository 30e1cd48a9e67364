// An ECMP group: several outbound SAs with identical traffic selectors (one per
// CHILD_SA), among which flows are spread by rendezvous (highest random weight) hashing.
// Each member has a stable key (the CHILD_SA's slot, not its SPI), so a rekey that
// replaces a member's SA moves no flow, removing a member moves only that member's
// flows, and adding one moves only the flows the newcomer wins.
//
// Membership changes copy the member list and publish the copy (they happen at IKE speed,
// not packet speed). Each thread keeps the list it last used per group, tagged with the
// group's generation, so a packet costs one atomic load of the generation; only after a
// change does a reader take the lock to fetch the new list. A lock or a reference count
// per packet would be a line that every reader of the group writes.
//
// Rendezvous hashing scores every member for every packet. For a large group (16 members
// or more) each member list carries a table of the choices made so far, by flow hash:
// the same answer, computed once per flow instead of once per packet, so the guarantees
// above hold unchanged (a new list starts with an empty table).
//
// The members share one in-flight bound (InFlightBudget): every SA has its own, but they
// all feed the same workers, so without a shared one an ECMP group of N let N times as
// many packets queue as a single SA, and latency under load grew with N.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "packet/flow_key.h"

namespace espgw::pipeline {

class OutboundChannel;

// Packets of a group's SAs between their admission (Pipeline::submit_outbound) and their
// delivery. The count never admits more than `limit`: a submitter takes its place before
// it looks, and gives it back if that made too many.
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
      : budget_(in_flight_limit ? std::make_shared<InFlightBudget>(in_flight_limit) : nullptr),
        generation_(next_generation()) {
    members_ = make_members({}, generation_.load(std::memory_order_relaxed));
  }
  ~SaGroup();
  SaGroup(const SaGroup&) = delete;
  SaGroup& operator=(const SaGroup&) = delete;

  // Adds a member, or replaces the channel of an existing member (rekey). The channel
  // joins the group's in-flight budget; a channel belongs to one group.
  void set_member(uint64_t member_key, std::shared_ptr<OutboundChannel> channel);
  bool remove_member(uint64_t member_key);
  // Removes the member only while `channel` is still its channel: an old SA that expires
  // after a rekey gave its slot to the new one must not take the new one out.
  bool remove_member(uint64_t member_key, const OutboundChannel* channel);
  // The member for a flow, or nullptr when the group is empty. Like every pick, it leaves
  // the calling thread a view of the group, which keeps the group's channels (and their
  // key schedules) alive after they are removed, until the thread lets go of retired
  // views: a long-lived thread that picks must call Pipeline::release_retired_group_views
  // now and then, as the gateway's TUN readers do.
  std::shared_ptr<OutboundChannel> pick(uint64_t flow_hash) const;
  // A thread's previous view of the group, handed over when membership changed since its
  // last pick: flows may now map to other channels than those it used, and the packets it
  // submitted through them may still be in flight. `channels` stay valid while `keep_alive`
  // is held. See Pipeline::fence_outbound.
  struct Superseded {
    std::shared_ptr<const void> keep_alive;
    std::vector<OutboundChannel*> channels;
  };
  // The member for an inner packet's flow (flow_hash of its key with `seed`), hashing only
  // when there is a choice. The pointer is this thread's snapshot's: valid until the thread's next
  // snapshot of any group, which is enough to submit the packet (no reference count
  // touched per packet). When this thread's view of the group changed since its previous
  // pick (a member added, removed or rekeyed) and `superseded` is given, it receives the
  // previous view; otherwise it is left empty.
  OutboundChannel* pick_for_packet(const packet::FlowKey& flow, uint64_t seed,
                                   Superseded* superseded = nullptr) const;
  // Takes one of the calling thread's cached views that is no longer any group's current
  // one (a member was added, removed or rekeyed since, or the group is gone) and returns
  // true; false when none is left among the views looked at. A cached view keeps its
  // channels, and so their SAs and key schedules, alive: without this, the SA of a group
  // that this thread stopped using would stay in memory as long as the thread. The caller
  // makes the view's packets leave first (Pipeline::release_retired_group_views), as a
  // pick would have: a later pick of the group then finds no earlier view to hand over.
  // `looks` bounds the views examined (a thread may hold thousands, one per tunnel) and is
  // decremented per view; the next call goes on where this one stopped. Calls sharing
  // full_sweep_looks() looks find every view retired before the first of them; while no
  // group retired a list since this thread last looked at all its views, a call costs one
  // load.
  static bool take_retired_view(Superseded& view, size_t& looks);
  // Looks that take every view of the calling thread retired so far: the rest of a round
  // under way and a whole one (twice its table's capacity).
  static size_t full_sweep_looks();
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
  // Groups this large get a table of choices (below that, scoring is cheap).
  static constexpr size_t kChoiceTableFrom = 16;
  static constexpr size_t kChoiceWays = 8;  // one 64-byte line per bucket
  static constexpr size_t kChoiceBuckets = 512;
  static constexpr uint64_t kChoiceBucketMask = kChoiceBuckets - 1;  // hash bits 0-8
  static constexpr size_t kChoiceTableMaxMembers = 510;  // positions + 1 fit in bits 0-8
  struct alignas(64) ChoiceBucket {
    std::array<std::atomic<uint64_t>, kChoiceWays> ways;
  };
  struct Members {
    // The group's generation_ when this list was published: a thread's copy is current
    // while the two match.
    uint64_t generation = 0;
    std::vector<Member> list;
    // Choices made for this list, or null: 512 buckets of 8 entries, each bucket one
    // cache line, so a lookup reads one line and a flow is evicted only when 9 of the
    // flows in use share its bucket (with 2048 buckets of two entries, about 9% of 1024
    // random flows shared a bucket with two others and could evict each other, each miss
    // scoring every member again). A flow's bucket is its hash's bits 0-8; an entry holds the
    // hash's bits 9-63 and the member's position + 1 in bits 0-8, so that a hit means the whole
    // hash matched; 0 is empty. Any thread may fill one: all would write the same value, since the
    // choice depends only on this list and the hash.
    std::unique_ptr<ChoiceBucket[]> choices;
    // Set when a newer list replaces this one, or the group goes: threads' cached copies
    // of it are then only kept for the ordering fence (take_retired_view).
    mutable std::atomic<bool> retired{false};
  };
  // A thread's copy of a group's list (24 bytes: a gateway's reader keeps one per tunnel).
  struct CachedView {
    const SaGroup* group = nullptr;  // whose list this is (nullptr: the entry is free)
    std::shared_ptr<const Members> members;
  };
  // A thread's views, one per group it picked from, found by the group's address: open
  // addressing with linear probing, at most 3/4 full, grown by doubling (so no
  // allocation per packet). A view stays until take_retired_view lets go of it: one
  // that another group pushed out, as a cache of fixed size did when two groups' addresses
  // shared an entry, left no trace of the channels this thread had sent on, and its
  // group's next change then moved flows without a fence (a gateway's reader picks from
  // one group per tunnel, so with more than a handful of tunnels that was the rule).
  class ThreadViews {
   public:
    // This thread's view of `group`, or a new empty one for it.
    CachedView& of(const SaGroup* group);
    // Looks at up to `looks` views from where the last look stopped; takes the first
    // retired one out into `out`. Calls with 2 * capacity() looks in all (the rest of a
    // round under way, then a whole one) find every view retired before the first.
    bool take_retired(CachedView& out, size_t& looks);
    size_t capacity() const { return entries_.size(); }

   private:
    size_t home(const SaGroup* group) const;
    CachedView& find_or_add(const SaGroup* group);  // past the home entry
    void grow();
    void erase(size_t index);  // backward shift: no tombstones to skip
    std::vector<CachedView> entries_;
    size_t used_ = 0;
    // Sweeps go round the table in rounds, a few views per call. A round begins only when
    // lists were retired (retirements()) since the last full round began, so a sweep
    // while nothing changed costs one load, however many views the thread holds.
    size_t cursor_ = 0;           // where take_retired looks next
    size_t round_left_ = 0;       // entries the current round has still to look at
    uint64_t round_start_ = 0;    // retirements() when the current round began
    uint64_t clean_through_ = 0;  // retirements() when the last full round began
  };
  // Counts lists retired by any group (publish, ~SaGroup).
  static std::atomic<uint64_t>& retirements();
  static void retire(const Members& members);
  static ThreadViews& thread_views();
  // Moves `slot`'s list into `view` (its channels and a reference keeping them alive).
  static void hand_over(const CachedView& slot, Superseded& view);
  static std::shared_ptr<const Members> make_members(std::vector<Member> list, uint64_t generation);
  static const Member* choose(const Members& members, uint64_t flow_hash);
  static const Member* score(const std::vector<Member>& list, uint64_t flow_hash);
  // This thread's snapshot of the members; valid until its next snapshot of any group.
  // When it replaces an earlier snapshot of this group and `superseded` is given, the
  // earlier one goes there.
  const Members& snapshot(Superseded* superseded = nullptr) const;
  // Publishes a new member list with a new generation (under lock_).
  void publish(std::vector<Member> list);
  // Unique across all groups, so a group created where a dead one lived never matches
  // the dead one's cached snapshots.
  static uint64_t next_generation();

  std::shared_ptr<InFlightBudget> budget_;
  // Guards members_: held by membership changes, and by a reader only when the group's
  // generation moved since its snapshot. (Not std::atomic<std::shared_ptr>: libstdc++ 12
  // locks it on every load all the same, and TSan cannot see that lock.)
  mutable std::mutex lock_;
  std::shared_ptr<const Members> members_;  // set in the constructor, with its generation
  // The current list (under lock_), shared by the caller.
  std::shared_ptr<const Members> current() const;
  std::atomic<uint64_t> generation_;  // changes after every publish
};

}  // namespace espgw::pipeline

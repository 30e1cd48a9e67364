// The SAs of each (reqid, group slot), kept by SaTable next to its SAs by id, so that
// finding the other SAs of a slot (a rekeyed inbound SA's predecessors, the successor of
// an outbound slot's carrier) costs the slot's few SAs rather than a walk over the table.
// `Entry` is SaTable's OutboundEntry or InboundEntry: the order between a slot's SAs is
// (lifetime.added_at, SA id), which is the order the table's walk in SA-id order gave.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "xfrm/sad_entry.h"

namespace espgw::daemon {

template <typename Entry>
class SaSlotIndex {
 public:
  // `entry` must not be in the index yet, and stay where it is until removed.
  void add(uint32_t reqid, uint64_t slot, const Entry* entry) {
    Members& members = slots_[{reqid, slot}];
    if (!members.first) {
      members.first = entry;
      return;
    }
    if (!members.more) members.more = std::make_unique<std::vector<const Entry*>>();
    members.more->push_back(entry);
  }
  void remove(uint32_t reqid, uint64_t slot, const Entry* entry) {
    const auto found = slots_.find({reqid, slot});
    if (found == slots_.end()) return;
    Members& members = found->second;
    if (members.first == entry) {
      if (!members.more) {
        slots_.erase(found);
        return;
      }
      members.first = members.more->front();
      members.more->erase(members.more->begin());
    } else if (members.more) {
      std::erase(*members.more, entry);
    }
    if (members.more && members.more->empty()) members.more.reset();
  }

  // The slot's SAs, oldest first.
  std::vector<const Entry*> oldest_first(uint32_t reqid, uint64_t slot) const {
    std::vector<const Entry*> members;
    for_each(reqid, slot, [&](const Entry* entry) { members.push_back(entry); });
    std::sort(members.begin(), members.end(),
              [](const Entry* a, const Entry* b) { return older(*a, *b); });
    return members;
  }
  // The newest of the slot's SAs that `eligible` accepts; nullptr if none.
  template <typename Predicate>
  const Entry* newest(uint32_t reqid, uint64_t slot, Predicate eligible) const {
    const Entry* newest = nullptr;
    for_each(reqid, slot, [&](const Entry* entry) {
      if (eligible(*entry) && (!newest || older(*newest, *entry))) newest = entry;
    });
    return newest;
  }

  size_t slots() const { return slots_.size(); }
  // How many SAs the slot has.
  size_t size(uint32_t reqid, uint64_t slot) const {
    const auto found = slots_.find({reqid, slot});
    if (found == slots_.end()) return 0;
    return 1 + (found->second.more ? found->second.more->size() : 0);
  }

 private:
  struct Key {
    uint32_t reqid;
    uint64_t slot;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& key) const noexcept {
      return static_cast<size_t>((key.slot ^ (uint64_t{key.reqid} << 32 | key.reqid)) *
                                 0x9E3779B97F4A7C15ull);
    }
  };
  // Almost every slot has one SA (two or three for the moments of a rekey), so the first
  // lives in the hash node (48 bytes with malloc's header) and only further ones cost an
  // allocation.
  struct Members {
    const Entry* first = nullptr;
    std::unique_ptr<std::vector<const Entry*>> more;
  };

  template <typename Visit>
  void for_each(uint32_t reqid, uint64_t slot, Visit visit) const {
    const auto found = slots_.find({reqid, slot});
    if (found == slots_.end()) return;
    visit(found->second.first);
    if (found->second.more)
      for (const Entry* entry : *found->second.more) visit(entry);
  }
  // Install time, then SA id between SAs installed within one clock tick.
  static bool older(const Entry& a, const Entry& b) {
    if (a.lifetime.added_at != b.lifetime.added_at)
      return a.lifetime.added_at < b.lifetime.added_at;
    return xfrm::sa_id_of(a.entry) < xfrm::sa_id_of(b.entry);
  }

  std::unordered_map<Key, Members, KeyHash> slots_;
};

}  // namespace espgw::daemon

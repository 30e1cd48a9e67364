// The SPD as a plain ordered list: every policy of a direction kept in lookup order and
// tried one after another until one matches. Slow (every lookup may try every policy)
// but obviously right, so the tests hold xfrm::Spd's index to it and the SPD benchmark
// measures against it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "packet/flow_key.h"
#include "xfrm/policy.h"

namespace espgw::test {

class LinearSpd {
 public:
  bool add(const xfrm::Policy& policy) {
    const auto index = static_cast<size_t>(policy.direction);
    if (index >= kDirections) return false;
    for (const auto& list : lists_)
      for (const auto& entry : list)
        if (entry.policy.id == policy.id) return false;
    Entry entry{policy, policy.selector.specificity(), next_sequence_++};
    auto& list = lists_[index];
    list.insert(std::upper_bound(list.begin(), list.end(), entry, evaluated_before),
                std::move(entry));
    return true;
  }

  bool remove(uint32_t id) {
    for (auto& list : lists_) {
      auto it = std::find_if(list.begin(), list.end(),
                             [id](const Entry& entry) { return entry.policy.id == id; });
      if (it != list.end()) {
        list.erase(it);
        return true;
      }
    }
    return false;
  }

  // As xfrm::Spd::lookup: `key` as the packet carries it.
  std::optional<xfrm::Policy> lookup(xfrm::Direction direction, const packet::FlowKey& key) const {
    const auto index = static_cast<size_t>(direction);
    if (index >= kDirections) return std::nullopt;
    const packet::FlowKey oriented = direction == xfrm::Direction::out ? key : key.reversed();
    for (const auto& entry : lists_[index])
      if (entry.policy.selector.matches(oriented)) return entry.policy;
    return std::nullopt;
  }

  std::vector<xfrm::Policy> list() const {
    std::vector<xfrm::Policy> out;
    for (const auto& list : lists_)
      for (const auto& entry : list) out.push_back(entry.policy);
    return out;
  }

 private:
  struct Entry {
    xfrm::Policy policy;
    unsigned specificity;
    uint64_t sequence;
  };
  static constexpr size_t kDirections = 3;
  // Lowest priority value first, then the more specific selector, then the older policy.
  static bool evaluated_before(const Entry& a, const Entry& b) {
    if (a.policy.priority != b.policy.priority) return a.policy.priority < b.policy.priority;
    if (a.specificity != b.specificity) return a.specificity > b.specificity;
    return a.sequence < b.sequence;
  }

  std::vector<Entry> lists_[kDirections];
  uint64_t next_sequence_ = 0;
};

}  // namespace espgw::test

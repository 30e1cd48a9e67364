#include "xfrm/spd.h"

#include <algorithm>
#include <mutex>
#include <shared_mutex>

namespace espgw::xfrm {

bool Spd::evaluated_before(const Entry& a, const Entry& b) {
  if (a.policy.priority != b.policy.priority) return a.policy.priority < b.policy.priority;
  if (a.specificity != b.specificity) return a.specificity > b.specificity;
  return a.sequence < b.sequence;
}

bool Spd::add(const Policy& policy) {
  const auto index = static_cast<size_t>(policy.direction);
  if (index >= kDirections) return false;
  std::unique_lock lock(mutex_);
  for (const auto& list : lists_)
    for (const auto& entry : list)
      if (entry.policy.id == policy.id) return false;
  Entry entry{policy, policy.selector.specificity(), next_sequence_++};
  auto& list = lists_[index];
  list.insert(std::upper_bound(list.begin(), list.end(), entry, evaluated_before),
              std::move(entry));
  return true;
}

bool Spd::remove(uint32_t id) {
  std::unique_lock lock(mutex_);
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

std::optional<Policy> Spd::lookup(Direction direction, const FlowKey& key) const {
  const auto index = static_cast<size_t>(direction);
  if (index >= kDirections) return std::nullopt;
  // Selectors are written local -> remote; an arriving packet's source is remote.
  const FlowKey oriented = direction == Direction::out ? key : key.reversed();
  std::shared_lock lock(mutex_);
  for (const auto& entry : lists_[index])
    if (entry.policy.selector.matches(oriented)) return entry.policy;
  return std::nullopt;
}

std::vector<Policy> Spd::list() const {
  std::shared_lock lock(mutex_);
  std::vector<Policy> out;
  for (const auto& list : lists_)
    for (const auto& entry : list) out.push_back(entry.policy);
  return out;
}

size_t Spd::size() const {
  std::shared_lock lock(mutex_);
  return lists_[0].size() + lists_[1].size() + lists_[2].size();
}

}  // namespace espgw::xfrm

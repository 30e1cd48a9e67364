#include "xfrm/spd.h"

#include <mutex>
#include <shared_mutex>

#include "xfrm/spd_flow_cache.h"

namespace espgw::xfrm {

namespace {
// Unique across all SPDs: one created at a destroyed one's address can never take its
// cached answers.
uint64_t next_generation() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

Spd::Spd() : generation_(next_generation()) {}

bool Spd::add(const Policy& policy) {
  std::unique_lock lock(mutex_);
  if (!index_.add(policy, next_sequence_)) return false;
  ++next_sequence_;
  generation_.store(next_generation(), std::memory_order_release);
  return true;
}

bool Spd::remove(uint32_t id) {
  std::unique_lock lock(mutex_);
  if (!index_.remove(id)) return false;
  generation_.store(next_generation(), std::memory_order_release);
  return true;
}

std::optional<Policy> Spd::lookup(Direction direction, const packet::FlowKey& key) const {
  if (static_cast<size_t>(direction) > static_cast<size_t>(Direction::fwd)) return std::nullopt;
  SpdFlowCache& cache = SpdFlowCache::local();
  // A lookup that overlaps a change may still take the answer from before it; one that
  // starts after the change returned sees the new generation.
  if (const auto* answer = cache.find(generation_.load(std::memory_order_acquire), direction, key))
    return *answer;
  std::shared_lock lock(mutex_);
  // Selectors are written local -> remote; an arriving packet's source is remote.
  const Policy* found = index_.find(direction, direction == Direction::out ? key : key.reversed());
  std::optional<Policy> answer;
  if (found) answer = *found;
  // Under the lock the generation is the one of the index just searched.
  cache.store(generation_.load(std::memory_order_relaxed), direction, key, answer);
  return answer;
}

std::optional<Policy> Spd::find(uint32_t id) const {
  std::shared_lock lock(mutex_);
  const Policy* found = index_.find(id);
  return found ? std::optional<Policy>(*found) : std::nullopt;
}

std::vector<Policy> Spd::list() const {
  std::shared_lock lock(mutex_);
  return index_.list();
}

size_t Spd::size() const {
  std::shared_lock lock(mutex_);
  return index_.size();
}

}  // namespace espgw::xfrm

#include "xfrm/spd_flow_cache.h"

#include <cstring>

namespace espgw::xfrm {

SpdFlowCache& SpdFlowCache::local() {
  thread_local SpdFlowCache cache;
  return cache;
}

size_t SpdFlowCache::slot_of(Direction direction, const packet::FlowKey& key) {
  // Word by word, each folded in with a multiply: the table is small, any fair spread
  // will do. IPv4 addresses leave their last 12 bytes zero.
  uint64_t words[4];
  std::memcpy(words, key.source.bytes.data(), 16);
  std::memcpy(words + 2, key.destination.bytes.data(), 16);
  uint64_t hash = uint64_t{key.protocol} << 40 | uint64_t{static_cast<uint8_t>(direction)} << 32 |
                  uint64_t{key.source_port} << 16 | key.destination_port;
  for (uint64_t word : words) {
    hash = (hash ^ word) * 0x9e3779b97f4a7c15ull;
    hash ^= hash >> 32;
  }
  return static_cast<size_t>(hash) & (kSlots - 1);
}

const std::optional<Policy>* SpdFlowCache::find(uint64_t generation, Direction direction,
                                                const packet::FlowKey& key) const {
  const Slot& slot = slots_[slot_of(direction, key)];
  if (slot.generation != generation || slot.direction != direction || !(slot.key == key))
    return nullptr;
  return &slot.answer;
}

void SpdFlowCache::store(uint64_t generation, Direction direction, const packet::FlowKey& key,
                         const std::optional<Policy>& answer) {
  Slot& slot = slots_[slot_of(direction, key)];
  slot.generation = generation;
  slot.key = key;
  slot.direction = direction;
  slot.answer = answer;
}

}  // namespace espgw::xfrm

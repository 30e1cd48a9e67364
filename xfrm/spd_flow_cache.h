// A small per-thread cache of SPD answers by flow. Packets of one flow come in runs, and
// each data-path thread sees its own flows (a TUN queue per thread), so a private,
// direct-mapped table answers most packets with one hash and one compare, without the
// SPD's lock: threads never write a cache line they share. An answer is only taken if it
// was stored at the SPD's current generation; every add or remove moves the SPD to a new
// generation, unique across all SPDs, so nothing cached before a change is used after it
// and no SPD takes another's answers. Answers are copies, so a cached policy outlives its
// removal harmlessly (it is never returned again).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "packet/flow_key.h"
#include "xfrm/direction.h"
#include "xfrm/policy.h"

namespace espgw::xfrm {

class SpdFlowCache {
 public:
  // This thread's cache.
  static SpdFlowCache& local();

  // The answer stored for (generation, direction, key), or nullptr on a miss; an answer
  // is nullopt when no policy matches the flow.
  const std::optional<Policy>* find(uint64_t generation, Direction direction,
                                    const packet::FlowKey& key) const;
  void store(uint64_t generation, Direction direction, const packet::FlowKey& key,
             const std::optional<Policy>& answer);

 private:
  static constexpr size_t kSlots = 256;  // a power of two; about 30 KiB per thread
  struct Slot {
    uint64_t generation = 0;  // 0: empty (generations count from 1)
    packet::FlowKey key;
    Direction direction = Direction::out;
    std::optional<Policy> answer;
  };
  static size_t slot_of(Direction direction, const packet::FlowKey& key);

  std::array<Slot, kSlots> slots_{};
};

}  // namespace espgw::xfrm

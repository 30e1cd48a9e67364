// The SA table's (reqid, slot) index against the walks over every SA it replaced: random
// sequences of SAs added and removed, with install times that tie, SA ids in any order
// and SAs past their hard lifetime, must give the same predecessors (oldest first) and
// the same successor (the newest eligible SA) as the walk in SA-id order did.
#include "daemon/sa_slot_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "daemon/sa_table.h"

namespace espgw::daemon {
namespace {

using Table = std::map<xfrm::SaId, std::unique_ptr<OutboundEntry>>;

bool eligible(const OutboundEntry& entry) {
  return entry.lifetime.reported != xfrm::LifetimeState::hard;
}

// What SaTable::install_inbound did: every SA of the slot, stable-sorted by install time.
std::vector<const OutboundEntry*> walk_oldest_first(const Table& table, uint32_t reqid,
                                                    uint64_t slot) {
  std::vector<const OutboundEntry*> earlier;
  for (const auto& [key, other] : table)
    if (other->entry.reqid == reqid && group_slot(other->entry) == slot)
      earlier.push_back(other.get());
  std::stable_sort(earlier.begin(), earlier.end(), [](const auto* a, const auto* b) {
    return a->lifetime.added_at < b->lifetime.added_at;
  });
  return earlier;
}

// What SaTable::retire_outbound did: the newest eligible SA of the slot, the last of
// equals in SA-id order.
const OutboundEntry* walk_newest(const Table& table, uint32_t reqid, uint64_t slot) {
  const OutboundEntry* successor = nullptr;
  for (const auto& [key, other] : table)
    if (other->entry.reqid == reqid && group_slot(other->entry) == slot && eligible(*other) &&
        (!successor || other->lifetime.added_at >= successor->lifetime.added_at))
      successor = other.get();
  return successor;
}

TEST(SaSlotIndexTest, MatchesTheWalkOverEverySaOverRandomChanges) {
  std::mt19937 random(31337);
  const auto start = std::chrono::steady_clock::now();
  const esp::IpAddress destinations[] = {esp::IpAddress::parse("192.0.2.2").value(),
                                         esp::IpAddress::parse("2001:db8::2").value()};
  Table table;
  SaSlotIndex<OutboundEntry> index;
  size_t compared_nonempty = 0;
  for (int step = 0; step < 8000; ++step) {
    if (table.size() < 60 && random() % 5 < 3) {
      auto fresh = std::make_unique<OutboundEntry>();
      fresh->entry.config.spi = 1 + random() % 400;
      fresh->entry.config.tunnel_destination = destinations[random() % 2];
      fresh->entry.direction = xfrm::Direction::out;
      fresh->entry.reqid = 1 + random() % 3;
      // Charon's slots, and now and then a static SA (slot 0: the SPI is its slot).
      fresh->entry.group_slot = random() % 8 == 0 ? 0 : 1 + random() % 3;
      // Few distinct install times: ties are common, as within one clock tick.
      fresh->lifetime.added_at = start + std::chrono::milliseconds(random() % 6);
      if (random() % 5 == 0) fresh->lifetime.reported = xfrm::LifetimeState::hard;
      const xfrm::SaId id = xfrm::sa_id_of(fresh->entry);
      if (table.count(id)) continue;
      index.add(fresh->entry.reqid, group_slot(fresh->entry), fresh.get());
      table.emplace(id, std::move(fresh));
    } else if (!table.empty()) {
      auto victim = std::next(table.begin(), static_cast<long>(random() % table.size()));
      index.remove(victim->second->entry.reqid, group_slot(victim->second->entry),
                   victim->second.get());
      table.erase(victim);
    }
    size_t indexed = 0;
    for (uint32_t reqid = 1; reqid <= 3; ++reqid) {
      // charon's slots here; static SAs' (their SPIs) are checked below, SA by SA.
      for (uint64_t charon_slot = 1; charon_slot <= 3; ++charon_slot) {
        xfrm::SadEntry probe;
        probe.group_slot = charon_slot;
        const uint64_t slot = group_slot(probe);
        const auto expected = walk_oldest_first(table, reqid, slot);
        ASSERT_EQ(index.oldest_first(reqid, slot), expected) << "step " << step;
        ASSERT_EQ(index.newest(reqid, slot, eligible), walk_newest(table, reqid, slot));
        ASSERT_EQ(index.size(reqid, slot), expected.size());
        compared_nonempty += !expected.empty();
      }
    }
    for (const auto& [key, entry] : table) {
      const uint32_t reqid = entry->entry.reqid;
      const uint64_t slot = group_slot(entry->entry);
      ASSERT_EQ(index.oldest_first(reqid, slot), walk_oldest_first(table, reqid, slot));
      ASSERT_EQ(index.newest(reqid, slot, eligible), walk_newest(table, reqid, slot));
      ++indexed;
    }
    ASSERT_EQ(indexed, table.size());
  }
  EXPECT_GT(compared_nonempty, 4000u) << "the sequence exercised slots with SAs in them";
  // Everything removed: no slot lingers.
  for (auto it = table.begin(); it != table.end(); it = table.erase(it))
    index.remove(it->second->entry.reqid, group_slot(it->second->entry), it->second.get());
  EXPECT_EQ(index.slots(), 0u);
}

}  // namespace
}  // namespace espgw::daemon

// The sharded group map of the lookup snapshot against a plain std::map, over random
// sequences of groups appearing and going; and that a copy never changes what an older
// snapshot holds.
#include "daemon/sa_groups_by_reqid.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace espgw::daemon {
namespace {

using Reference = std::map<uint32_t, std::shared_ptr<pipeline::SaGroup>>;

std::vector<std::pair<uint32_t, pipeline::SaGroup*>> contents(const SaGroupsByReqid& groups) {
  std::vector<std::pair<uint32_t, pipeline::SaGroup*>> all;
  for (const auto& [reqid, group] : groups) all.emplace_back(reqid, group.get());
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<std::pair<uint32_t, pipeline::SaGroup*>> contents(const Reference& groups) {
  std::vector<std::pair<uint32_t, pipeline::SaGroup*>> all;
  for (const auto& [reqid, group] : groups) all.emplace_back(reqid, group.get());
  return all;  // a std::map is sorted already
}

TEST(SaGroupsByReqidTest, StartsEmptyAndFindsWhatItHolds) {
  SaGroupsByReqid empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.begin(), empty.end());
  EXPECT_EQ(empty.find(1), empty.end());
  auto group = std::make_shared<pipeline::SaGroup>();
  const SaGroupsByReqid one = empty.with(7, group);
  EXPECT_TRUE(empty.empty()) << "a copy leaves the original as it was";
  ASSERT_NE(one.find(7), one.end());
  EXPECT_EQ(one.find(7)->first, 7u);
  EXPECT_EQ(one.find(7)->second, group);
  EXPECT_EQ(one.find(8), one.end());
  EXPECT_EQ(one.size(), 1u);
  const SaGroupsByReqid none = one.without(7);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(one.find(7)->second, group) << "nor does removing from a copy";
  EXPECT_EQ(one.without(8).size(), 1u) << "removing a missing reqid changes nothing";
}

TEST(SaGroupsByReqidTest, ConsecutiveReqidsSpreadOverTheShards) {
  std::vector<unsigned> per_shard(SaGroupsByReqid::kShards);
  for (uint32_t reqid = 1; reqid <= 5000; ++reqid) ++per_shard[SaGroupsByReqid::shard_of(reqid)];
  // 5,000 reqids: about 20 a shard, none far from it (so a change copies ~n/256 groups).
  EXPECT_LE(*std::max_element(per_shard.begin(), per_shard.end()), 40u);
  EXPECT_GE(*std::min_element(per_shard.begin(), per_shard.end()), 5u);
}

TEST(SaGroupsByReqidTest, MatchesAPlainMapOverRandomChanges) {
  std::mt19937 random(20261203);
  // Reqids from a small range (collisions within shards, re-adds) and from all of uint32.
  std::uniform_int_distribution<uint32_t> small(0, 600);
  std::uniform_int_distribution<uint32_t> any;
  SaGroupsByReqid groups;
  Reference reference;
  std::vector<std::pair<SaGroupsByReqid, Reference>> older;  // snapshots must not change
  for (int step = 0; step < 6000; ++step) {
    const uint32_t reqid = step % 7 == 0 ? any(random) : small(random);
    if (reference.count(reqid) == 0 && random() % 3 != 0) {
      auto group = std::make_shared<pipeline::SaGroup>();
      groups = groups.with(reqid, group);
      reference.emplace(reqid, group);
    } else {
      groups = groups.without(reqid);
      reference.erase(reqid);
    }
    ASSERT_EQ(groups.size(), reference.size());
    ASSERT_EQ(groups.empty(), reference.empty());
    for (int probe = 0; probe < 4; ++probe) {
      const uint32_t key = probe == 0 ? reqid : small(random);
      const auto found = groups.find(key);
      const auto expected = reference.find(key);
      ASSERT_EQ(found == groups.end(), expected == reference.end()) << key;
      if (expected != reference.end()) {
        ASSERT_EQ(found->second, expected->second);
      }
    }
    if (step % 500 == 0) {
      ASSERT_EQ(contents(groups), contents(reference));
      older.emplace_back(groups, reference);
    }
  }
  ASSERT_EQ(contents(groups), contents(reference));
  for (const auto& [snapshot, then] : older) EXPECT_EQ(contents(snapshot), contents(then));
}

}  // namespace
}  // namespace espgw::daemon

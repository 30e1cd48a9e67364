#include "daemon/sa_groups_by_reqid.h"

#include <algorithm>

namespace espgw::daemon {

namespace {

static_assert(SaGroupsByReqid::kShards == 256, "shard_of takes the hash's top 8 bits");

SaGroupsByReqid::Shard::const_iterator lower_bound(const SaGroupsByReqid::Shard& shard,
                                                   uint32_t reqid) {
  return std::lower_bound(shard.begin(), shard.end(), reqid,
                          [](const auto& entry, uint32_t key) { return entry.first < key; });
}

}  // namespace

SaGroupsByReqid::const_iterator SaGroupsByReqid::find(uint32_t reqid) const {
  const size_t index = shard_of(reqid);
  const Shard* shard = shards_[index].get();
  if (!shard) return end();
  const auto found = lower_bound(*shard, reqid);
  if (found == shard->end() || found->first != reqid) return end();
  return {&shards_, index, static_cast<size_t>(found - shard->begin())};
}

SaGroupsByReqid::const_iterator SaGroupsByReqid::begin() const {
  const_iterator first(&shards_, 0, 0);
  first.skip_to_entry();
  return first;
}

SaGroupsByReqid SaGroupsByReqid::with(uint32_t reqid,
                                      std::shared_ptr<pipeline::SaGroup> group) const {
  SaGroupsByReqid next = *this;  // shares every shard
  const size_t index = shard_of(reqid);
  auto shard = std::make_shared<Shard>();
  if (const Shard* old = shards_[index].get()) {
    const auto place = lower_bound(*old, reqid);
    shard->reserve(old->size() + 1);
    shard->insert(shard->end(), old->begin(), place);
    shard->emplace_back(reqid, std::move(group));
    shard->insert(shard->end(), place, old->end());
  } else {
    shard->emplace_back(reqid, std::move(group));
  }
  next.shards_[index] = std::move(shard);
  ++next.size_;
  return next;
}

SaGroupsByReqid SaGroupsByReqid::without(uint32_t reqid) const {
  const size_t index = shard_of(reqid);
  if (!shards_[index]) return *this;
  const Shard& old = *shards_[index];
  const auto found = lower_bound(old, reqid);
  if (found == old.end() || found->first != reqid) return *this;
  SaGroupsByReqid next = *this;
  if (old.size() == 1) {
    next.shards_[index] = nullptr;
  } else {
    auto shard = std::make_shared<Shard>();
    shard->reserve(old.size() - 1);
    shard->insert(shard->end(), old.begin(), found);
    shard->insert(shard->end(), std::next(found), old.end());
    next.shards_[index] = std::move(shard);
  }
  --next.size_;
  return next;
}

}  // namespace espgw::daemon

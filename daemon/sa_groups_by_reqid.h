// The SA groups by reqid, as a TUN reader's lookup snapshot holds them (OutboundLookup).
// An immutable value that SaTable copies and changes when a group appears or goes, then
// publishes with the rest of the snapshot. The groups are spread over kShards shards by a
// hash of the reqid and held by shared pointer, so a copy shares every shard and a change
// copies only the shard it touches: kShards pointers plus n / kShards groups per
// CHILD_SA added or removed, not all n groups (at 5,000 reqids the whole map used to be
// copied for every new CHILD_SA). Readers keep one atomic load per packet (the snapshot),
// then a binary search in a shard of a few entries.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/sa_group.h"

namespace espgw::daemon {

class SaGroupsByReqid {
 public:
  static constexpr size_t kShards = 256;
  using value_type = std::pair<uint32_t, std::shared_ptr<pipeline::SaGroup>>;
  using Shard = std::vector<value_type>;  // sorted by reqid

  // Forward iteration over every group, shard by shard (not in reqid order).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = SaGroupsByReqid::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return (*(*shards_)[shard_])[position_]; }
    pointer operator->() const { return &**this; }
    const_iterator& operator++() {
      ++position_;
      skip_to_entry();
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const const_iterator& other) const {
      return shard_ == other.shard_ && position_ == other.position_;
    }

   private:
    friend class SaGroupsByReqid;
    using Shards = std::array<std::shared_ptr<const Shard>, kShards>;
    const_iterator(const Shards* shards, size_t shard, size_t position)
        : shards_(shards), shard_(shard), position_(position) {}
    // From (shard_, position_) on to the first entry there is, or to end.
    void skip_to_entry() {
      while (shard_ < kShards && (!(*shards_)[shard_] || position_ >= (*shards_)[shard_]->size())) {
        ++shard_;
        position_ = 0;
      }
    }
    const Shards* shards_ = nullptr;
    size_t shard_ = kShards;
    size_t position_ = 0;
  };
  using iterator = const_iterator;

  const_iterator find(uint32_t reqid) const;
  const_iterator begin() const;
  const_iterator end() const { return {&shards_, kShards, 0}; }
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // A copy with `group` under `reqid`, which must have none yet.
  SaGroupsByReqid with(uint32_t reqid, std::shared_ptr<pipeline::SaGroup> group) const;
  // A copy without `reqid`'s group (the same if it has none).
  SaGroupsByReqid without(uint32_t reqid) const;

  // Which shard a reqid's group is in: a multiplicative hash, so that consecutive reqids
  // (charon numbers its CHILD_SAs) spread over all shards.
  static size_t shard_of(uint32_t reqid) {
    return static_cast<size_t>((reqid * uint32_t{0x9E3779B1}) >> 24);
  }

 private:
  const_iterator::Shards shards_{};  // an empty shard is a null pointer
  size_t size_ = 0;
};

}  // namespace espgw::daemon

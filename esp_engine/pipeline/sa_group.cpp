#include "pipeline/sa_group.h"

#include "pipeline/channels.h"
#include "pipeline/flow_hash.h"

namespace espgw::pipeline {

void SaGroup::set_member(uint64_t member_key, std::shared_ptr<OutboundChannel> channel) {
  std::lock_guard guard(lock_);
  // Before the channel is published: packets reach it only through the member list.
  if (channel && budget_) channel->share_budget(budget_);
  std::vector<Member> next = members_->list;
  for (auto& member : next) {
    if (member.key == member_key) {
      member.channel = std::move(channel);
      publish(std::move(next));
      return;
    }
  }
  next.push_back({member_key, mix64(member_key ^ 0x9e3779b97f4a7c15ull), std::move(channel)});
  publish(std::move(next));
}

bool SaGroup::remove_member(uint64_t member_key) {
  return remove_member(member_key, nullptr);
}

bool SaGroup::remove_member(uint64_t member_key, const OutboundChannel* channel) {
  std::lock_guard guard(lock_);
  std::vector<Member> next = members_->list;
  const auto before = next.size();
  std::erase_if(next, [&](const Member& m) {
    return m.key == member_key && (!channel || m.channel.get() == channel);
  });
  if (next.size() == before) return false;
  publish(std::move(next));
  return true;
}

std::shared_ptr<const SaGroup::Members> SaGroup::make_members(std::vector<Member> list,
                                                              uint64_t generation) {
  auto members = std::make_shared<Members>();
  members->generation = generation;
  // Positions + 1 must fit the entry's low bits. make_unique<T[]> value-initializes, and
  // a value-initialized std::atomic holds 0 (C++20): every entry starts empty.
  if (list.size() >= kChoiceTableFrom && list.size() <= kChoiceTableMaxMembers)
    members->choices = std::make_unique<ChoiceBucket[]>(kChoiceBuckets);
  members->list = std::move(list);
  return members;
}

const SaGroup::Member* SaGroup::choose(const Members& members, uint64_t flow_hash) {
  if (!members.choices) return score(members.list, flow_hash);
  auto& bucket = members.choices[flow_hash & kChoiceBucketMask].ways;
  const uint64_t key = flow_hash & ~kChoiceBucketMask;
  size_t empty = kChoiceWays;
  for (size_t way = 0; way < kChoiceWays; ++way) {
    const uint64_t entry = bucket[way].load(std::memory_order_relaxed);
    if (entry == 0) {
      empty = way;  // entries fill from way 0 and are never cleared: none after this one
      break;
    }
    if ((entry & ~kChoiceBucketMask) == key) return &members.list[(entry & kChoiceBucketMask) - 1];
  }
  const Member* best = score(members.list, flow_hash);
  // An empty way if there is one, else the way further hash bits pick.
  const size_t way = empty != kChoiceWays ? empty : (flow_hash >> 9) % kChoiceWays;
  bucket[way].store(key | static_cast<uint64_t>(best - members.list.data() + 1),
                    std::memory_order_relaxed);
  return best;
}

const SaGroup::Member* SaGroup::score(const std::vector<Member>& list, uint64_t flow_hash) {
  const Member* best = nullptr;
  uint64_t best_score = 0;
  for (const auto& member : list) {
    const uint64_t score = mix64(flow_hash ^ member.key_hash);
    if (!best || score > best_score || (score == best_score && member.key < best->key)) {
      best = &member;
      best_score = score;
    }
  }
  return best;
}

uint64_t SaGroup::next_generation() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

std::atomic<uint64_t>& SaGroup::retirements() {
  static std::atomic<uint64_t> count{0};
  return count;
}

void SaGroup::retire(const Members& members) {
  members.retired.store(true, std::memory_order_release);
  // After the flag: a sweep that reads the new count finds the flag set.
  retirements().fetch_add(1, std::memory_order_acq_rel);
}

SaGroup::~SaGroup() {
  retire(*members_);
}

void SaGroup::publish(std::vector<Member> list) {
  const uint64_t generation = next_generation();
  std::shared_ptr<const Members> members = make_members(std::move(list), generation);
  retire(*members_);
  members_ = std::move(members);
  // After the list: a reader that sees the new generation then loads the new list.
  generation_.store(generation, std::memory_order_release);
}

std::shared_ptr<const SaGroup::Members> SaGroup::current() const {
  std::lock_guard guard(lock_);
  return members_;
}

SaGroup::ThreadViews& SaGroup::thread_views() {
  thread_local ThreadViews views;
  return views;
}

inline size_t SaGroup::ThreadViews::home(const SaGroup* group) const {
  // Fibonacci hashing of the address (groups are heap objects, 64-byte aligned or close):
  // the product's top bits spread neighbouring addresses over the table.
  const uint64_t product = (reinterpret_cast<uintptr_t>(group) >> 4) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(product >> 32) & (entries_.size() - 1);
}

inline SaGroup::CachedView& SaGroup::ThreadViews::of(const SaGroup* group) {
  // Most picks find the group at its home entry: that look is all they cost.
  if (!entries_.empty()) {
    CachedView& first = entries_[home(group)];
    if (first.group == group) return first;
  }
  return find_or_add(group);
}

SaGroup::CachedView& SaGroup::ThreadViews::find_or_add(const SaGroup* group) {
  if (!entries_.empty()) {
    for (size_t i = home(group);; i = (i + 1) & (entries_.size() - 1)) {
      if (entries_[i].group == group) return entries_[i];
      if (entries_[i].group == nullptr) break;
    }
  }
  // Not here: a new entry, in a table at most three quarters full once it is in.
  if (4 * (used_ + 1) > 3 * entries_.size()) grow();
  size_t i = home(group);
  while (entries_[i].group != nullptr) i = (i + 1) & (entries_.size() - 1);
  ++used_;
  entries_[i].group = group;
  return entries_[i];
}

void SaGroup::ThreadViews::grow() {
  std::vector<CachedView> old = std::move(entries_);
  entries_ = std::vector<CachedView>(old.empty() ? 16 : 2 * old.size());
  for (CachedView& view : old) {
    if (view.group == nullptr) continue;
    size_t i = home(view.group);
    while (entries_[i].group != nullptr) i = (i + 1) & (entries_.size() - 1);
    entries_[i] = std::move(view);
  }
  // Positions changed: a round under way starts again at its next call.
  cursor_ = 0;
  round_left_ = 0;
}

void SaGroup::ThreadViews::erase(size_t index) {
  const size_t mask = entries_.size() - 1;
  entries_[index] = {};
  --used_;
  // Later entries of the same run whose home is not between the hole and them move
  // into the hole, so that a lookup never stops early at it.
  for (size_t next = (index + 1) & mask; entries_[next].group != nullptr;
       next = (next + 1) & mask) {
    const size_t wanted = home(entries_[next].group);
    const bool stays =
        index <= next ? (index < wanted && wanted <= next) : (index < wanted || wanted <= next);
    if (stays) continue;
    entries_[index] = std::move(entries_[next]);
    entries_[next] = {};
    index = next;
  }
}

bool SaGroup::ThreadViews::take_retired(CachedView& out, size_t& looks) {
  for (;;) {
    if (round_left_ == 0) {
      // Nothing retired since the last full round began: nothing to look for.
      const uint64_t retired_so_far = retirements().load(std::memory_order_acquire);
      if (retired_so_far == clean_through_ || entries_.empty()) return false;
      round_start_ = retired_so_far;
      round_left_ = entries_.size();
    }
    if (looks == 0) return false;
    cursor_ &= entries_.size() - 1;
    CachedView& view = entries_[cursor_];
    if (view.members && view.members->retired.load(std::memory_order_acquire)) {
      out = std::move(view);
      // The cursor stays: an entry that moves into this one is looked at next, and
      // entries only move backwards into holes at or after the cursor, so none that is
      // still to be looked at moves behind it. Taking costs no look.
      erase(cursor_);
      return true;
    }
    --looks;
    ++cursor_;
    // A whole round looked at every view: what was retired before it began is taken.
    if (--round_left_ == 0) clean_through_ = round_start_;
  }
}

void SaGroup::hand_over(const CachedView& slot, Superseded& view) {
  view.channels.clear();
  for (const Member& member : slot.members->list)
    if (member.channel) view.channels.push_back(member.channel.get());
  view.keep_alive = slot.members;
}

const SaGroup::Members& SaGroup::snapshot(Superseded* superseded) const {
  CachedView& view = thread_views().of(this);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (!view.members || view.members->generation != generation) {
    // A view that a dead group at this address left is handed over all the same:
    // waiting for its channels is harmless.
    if (superseded && view.members) hand_over(view, *superseded);
    // At least as new as `generation` (a change may have come since): a newer list
    // matches the generation the next pick loads.
    view.members = current();
  }
  return *view.members;
}

bool SaGroup::take_retired_view(Superseded& view, size_t& looks) {
  CachedView retired;
  if (!thread_views().take_retired(retired, looks)) return false;
  hand_over(retired, view);
  return true;
}

size_t SaGroup::full_sweep_looks() {
  return 2 * thread_views().capacity();
}

std::shared_ptr<OutboundChannel> SaGroup::pick(uint64_t flow_hash) const {
  const Member* member = choose(snapshot(), flow_hash);
  return member ? member->channel : nullptr;
}

OutboundChannel* SaGroup::pick_for_packet(const packet::FlowKey& flow, uint64_t seed,
                                          Superseded* superseded) const {
  const Members& members = snapshot(superseded);
  if (members.list.size() == 1) return members.list.front().channel.get();
  const Member* member = choose(members, flow_hash(flow, seed));
  return member ? member->channel.get() : nullptr;
}

uint64_t SaGroup::pick_key(uint64_t flow_hash) const {
  const Member* member = choose(snapshot(), flow_hash);
  return member ? member->key : 0;
}

size_t SaGroup::size() const {
  return current()->list.size();
}

std::vector<uint32_t> SaGroup::member_spis() const {
  std::vector<uint32_t> spis;
  for (const Member& member : current()->list) spis.push_back(member.channel->sa().config().spi);
  return spis;
}

std::vector<uint64_t> SaGroup::member_keys() const {
  std::vector<uint64_t> keys;
  for (const Member& member : current()->list) keys.push_back(member.key);
  return keys;
}

}  // namespace espgw::pipeline

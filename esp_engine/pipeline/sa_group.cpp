#include "pipeline/sa_group.h"

#include "pipeline/channels.h"
#include "pipeline/flow_hash.h"

namespace espgw::pipeline {

void SaGroup::set_member(uint64_t member_key, std::shared_ptr<OutboundChannel> channel) {
  std::lock_guard guard(writer_);
  // Before the channel is published: packets reach it only through the member list.
  if (channel && budget_) channel->share_budget(budget_);
  auto next = std::make_shared<Members>(*members_.load());
  for (auto& member : *next) {
    if (member.key == member_key) {
      member.channel = std::move(channel);
      members_.store(std::move(next));
      return;
    }
  }
  next->push_back({member_key, mix64(member_key ^ 0x9e3779b97f4a7c15ull), std::move(channel)});
  members_.store(std::move(next));
}

bool SaGroup::remove_member(uint64_t member_key) {
  return remove_member(member_key, nullptr);
}

bool SaGroup::remove_member(uint64_t member_key, const OutboundChannel* channel) {
  std::lock_guard guard(writer_);
  auto next = std::make_shared<Members>(*members_.load());
  const auto before = next->size();
  std::erase_if(*next, [&](const Member& m) {
    return m.key == member_key && (!channel || m.channel.get() == channel);
  });
  if (next->size() == before) return false;
  members_.store(std::move(next));
  return true;
}

const SaGroup::Member* SaGroup::choose(const Members& members, uint64_t flow_hash) const {
  const Member* best = nullptr;
  uint64_t best_score = 0;
  for (const auto& member : members) {
    const uint64_t score = mix64(flow_hash ^ member.key_hash);
    if (!best || score > best_score || (score == best_score && member.key < best->key)) {
      best = &member;
      best_score = score;
    }
  }
  return best;
}

std::shared_ptr<OutboundChannel> SaGroup::pick(uint64_t flow_hash) const {
  const auto members = members_.load();
  const Member* member = choose(*members, flow_hash);
  return member ? member->channel : nullptr;
}

uint64_t SaGroup::pick_key(uint64_t flow_hash) const {
  const auto members = members_.load();
  const Member* member = choose(*members, flow_hash);
  return member ? member->key : 0;
}

size_t SaGroup::size() const {
  return members_.load()->size();
}

std::vector<uint32_t> SaGroup::member_spis() const {
  std::vector<uint32_t> spis;
  for (const Member& member : *members_.load()) spis.push_back(member.channel->sa().config().spi);
  return spis;
}

std::vector<uint64_t> SaGroup::member_keys() const {
  std::vector<uint64_t> keys;
  for (const Member& member : *members_.load()) keys.push_back(member.key);
  return keys;
}

}  // namespace espgw::pipeline

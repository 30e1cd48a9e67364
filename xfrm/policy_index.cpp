#include "xfrm/policy_index.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace espgw::xfrm {

namespace {

// The address with every bit past `length` cleared: what IpPrefix::contains compares.
std::array<uint8_t, 16> masked(const esp::IpAddress& address, unsigned length) {
  // One mask per prefix length, applied eight bytes at a time.
  static const auto kMasks = [] {
    std::array<std::array<uint8_t, 16>, 129> masks{};
    for (unsigned l = 0; l <= 128; ++l)
      for (unsigned bit = 0; bit < l; ++bit)
        masks[l][bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
    return masks;
  }();
  const auto& mask = kMasks[std::min(length, 128u)];
  uint64_t a[2], m[2];
  std::memcpy(a, address.bytes.data(), 16);
  std::memcpy(m, mask.data(), 16);
  a[0] &= m[0];
  a[1] &= m[1];
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), a, 16);
  return out;
}

}  // namespace

PolicyOrder PolicyOrder::of(const Policy& policy, uint64_t sequence) {
  return {policy.priority, std::numeric_limits<uint32_t>::max() - policy.selector.specificity(),
          sequence};
}

size_t PolicyIndex::BucketHash::operator()(const BucketKey& key) const {
  // Word by word, each folded in with a multiply; the shape tells equal prefixes of
  // different shapes apart.
  uint64_t words[4];
  std::memcpy(words, key.local.data(), 16);
  std::memcpy(words + 2, key.remote.data(), 16);
  uint64_t hash = reinterpret_cast<uintptr_t>(key.shape);
  auto fold = [&hash](uint64_t word) {
    hash = (hash ^ word) * 0x9e3779b97f4a7c15ull;
    hash ^= hash >> 32;
  };
  for (uint64_t word : words) fold(word);
  fold(uint64_t{key.protocol} << 32 | uint64_t{key.local_port} << 16 | key.remote_port);
  return static_cast<size_t>(hash);
}

size_t PolicyIndex::BucketHash::operator()(const Bucket& bucket) const {
  return (*this)(bucket_of(*bucket.first));
}

bool PolicyIndex::BucketEqual::operator()(const Bucket& a, const Bucket& b) const {
  return bucket_of(*a.first) == bucket_of(*b.first);
}

bool PolicyIndex::BucketEqual::operator()(const BucketKey& key, const Bucket& bucket) const {
  return key == bucket_of(*bucket.first);
}

PolicyIndex::ShapeKey PolicyIndex::shape_of(const Policy& policy) {
  const Selector& s = policy.selector;
  auto kind = [](const PortRange& range) {
    if (range.is_any()) return PortKind::any;
    return range.first == range.last ? PortKind::single : PortKind::range;
  };
  return {static_cast<uint8_t>(policy.direction),
          s.local.address.family,
          s.local.length,
          s.remote.address.family,
          s.remote.length,
          s.protocol != 0,
          kind(s.local_ports),
          kind(s.remote_ports)};
}

PolicyIndex::BucketKey PolicyIndex::bucket_of(const Shape& shape, const Selector& selector) {
  BucketKey key;
  key.shape = &shape;
  key.local = masked(selector.local.address, selector.local.length);
  key.remote = masked(selector.remote.address, selector.remote.length);
  key.protocol = selector.protocol;
  if (shape.key.local_ports == PortKind::single) key.local_port = selector.local_ports.first;
  if (shape.key.remote_ports == PortKind::single) key.remote_port = selector.remote_ports.first;
  return key;
}

bool PolicyIndex::bucket_for_flow(const Shape& shape, const packet::FlowKey& oriented,
                                  BucketKey& key) {
  const ShapeKey& s = shape.key;
  // IpPrefix::contains never matches another family.
  if (oriented.source.family != s.local_family || oriented.destination.family != s.remote_family)
    return false;
  // A port range other than "any" needs known ports (fragments have none).
  if ((s.local_ports != PortKind::any || s.remote_ports != PortKind::any) && !oriented.ports_known)
    return false;
  key.shape = &shape;
  key.local = masked(oriented.source, s.local_length);
  key.remote = masked(oriented.destination, s.remote_length);
  key.protocol = s.protocol_fixed ? oriented.protocol : 0;
  key.local_port = s.local_ports == PortKind::single ? oriented.source_port : 0;
  key.remote_port = s.remote_ports == PortKind::single ? oriented.destination_port : 0;
  return true;
}

void PolicyIndex::sort_shapes(size_t direction) {
  auto& order = shape_order_[direction];
  std::sort(order.begin(), order.end(),
            [](const Shape* a, const Shape* b) { return a->bound < b->bound; });
}

bool PolicyIndex::add(const Policy& policy, uint64_t sequence) {
  const auto direction = static_cast<size_t>(policy.direction);
  if (direction >= kDirections) return false;
  auto [it, inserted] = entries_.try_emplace(policy.id);
  if (!inserted) return false;
  Entry& entry = it->second;
  entry.policy = policy;
  entry.order = PolicyOrder::of(policy, sequence);

  const ShapeKey shape_key = shape_of(policy);
  auto& shape_slot = shapes_[shape_key];
  if (!shape_slot) {
    shape_slot = std::make_unique<Shape>();
    shape_slot->key = shape_key;
    shape_slot->bound = entry.order;
    shape_order_[direction].push_back(shape_slot.get());
    sort_shapes(direction);
  } else if (entry.order < shape_slot->bound) {
    shape_slot->bound = entry.order;
    sort_shapes(direction);
  }
  Shape& shape = *shape_slot;
  ++shape.policies;
  entry.shape = &shape;

  // Into its bucket's chain, in lookup order.
  const auto [bucket, fresh] = buckets_.insert(Bucket{&entry});
  if (fresh) return true;
  Entry** link = &bucket->first;
  while (*link && (*link)->order < entry.order) link = &(*link)->next;
  entry.next = *link;
  *link = &entry;
  return true;
}

bool PolicyIndex::remove(uint32_t id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  Entry& entry = it->second;
  Shape& shape = *entry.shape;
  const auto bucket = buckets_.find(bucket_of(entry));
  if (!entry.next && bucket->first == &entry) {
    buckets_.erase(bucket);  // its last entry (the key is read from it: erase it first)
  } else {
    Entry** link = &bucket->first;
    while (*link != &entry) link = &(*link)->next;
    *link = entry.next;
  }
  if (--shape.policies == 0) {
    auto& order = shape_order_[shape.key.direction];
    order.erase(std::find(order.begin(), order.end(), &shape));
    shapes_.erase(shape.key);
  }
  entries_.erase(it);
  return true;
}

const Policy* PolicyIndex::find(Direction direction, const packet::FlowKey& oriented) const {
  const auto index = static_cast<size_t>(direction);
  if (index >= kDirections) return nullptr;
  const Entry* best = nullptr;
  BucketKey key;
  for (const Shape* shape : shape_order_[index]) {
    // The shapes left start no earlier than this one's bound: none can beat the winner.
    if (best && best->order < shape->bound) break;
    if (!bucket_for_flow(*shape, oriented, key)) continue;
    const auto bucket = buckets_.find(key);
    if (bucket == buckets_.end()) continue;
    const bool ranges =
        shape->key.local_ports == PortKind::range || shape->key.remote_ports == PortKind::range;
    for (const Entry* entry = bucket->first; entry; entry = entry->next) {
      if (best && best->order < entry->order) break;
      // Prefixes, protocol and single ports are the bucket's; only ranges are left.
      if (ranges && !entry->policy.selector.matches(oriented)) continue;
      best = entry;
      break;
    }
  }
  return best ? &best->policy : nullptr;
}

const Policy* PolicyIndex::find(uint32_t id) const {
  const auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second.policy;
}

std::vector<Policy> PolicyIndex::list() const {
  std::vector<const Entry*> sorted;
  sorted.reserve(entries_.size());
  for (const auto& [id, entry] : entries_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    if (a->policy.direction != b->policy.direction)
      return a->policy.direction < b->policy.direction;
    return a->order < b->order;
  });
  std::vector<Policy> out;
  out.reserve(sorted.size());
  for (const Entry* entry : sorted) out.push_back(entry->policy);
  return out;
}

}  // namespace espgw::xfrm

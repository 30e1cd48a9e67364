// The SPD's search structure: finds the policy that decides a flow without trying every
// policy. Policies are grouped by the shape of their selector (address families, prefix
// lengths, whether the protocol is fixed, and whether each port side is any, one port or
// a range); within a shape, a hash table keyed by the masked addresses, the protocol and
// single ports leads straight to the policies a flow can match. A lookup therefore costs
// one hash probe per shape, however many policies share it: thousands of tunnels that
// differ only in their subnets or ports (the usual case) cost the same as one.
//
// Not thread-safe: Spd puts its lock around it.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "packet/flow_key.h"
#include "xfrm/direction.h"
#include "xfrm/policy.h"

namespace espgw::xfrm {

// Where a policy stands in the order lookups try them: the lowest priority value first,
// then the more specific selector, then the one added first. Every policy's is distinct.
struct PolicyOrder {
  uint32_t priority = 0;
  uint32_t generality = 0;  // UINT32_MAX - specificity: more specific sorts first
  uint64_t sequence = 0;

  static PolicyOrder of(const Policy& policy, uint64_t sequence);
  auto operator<=>(const PolicyOrder&) const = default;
};

class PolicyIndex {
 public:
  PolicyIndex() = default;
  PolicyIndex(const PolicyIndex&) = delete;
  PolicyIndex& operator=(const PolicyIndex&) = delete;

  // False for an id already present (in any direction) or an invalid direction.
  // `sequence` must grow with every call: it breaks ties in favour of the older policy.
  bool add(const Policy& policy, uint64_t sequence);
  bool remove(uint32_t id);
  // The winning policy for `oriented` (local -> remote, as Selector::matches takes it), or
  // nullptr. Valid until the next add or remove.
  const Policy* find(Direction direction, const packet::FlowKey& oriented) const;
  // The policy of that id, or nullptr. Valid until the next add or remove.
  const Policy* find(uint32_t id) const;
  // Every policy, direction by direction (out, in, fwd), each in lookup order.
  std::vector<Policy> list() const;
  size_t size() const { return entries_.size(); }

 private:
  static constexpr size_t kDirections = 3;
  enum class PortKind : uint8_t { any, single, range };

  struct ShapeKey {
    uint8_t direction = 0;
    uint8_t local_family = 0;
    uint8_t local_length = 0;
    uint8_t remote_family = 0;
    uint8_t remote_length = 0;
    bool protocol_fixed = false;
    PortKind local_ports = PortKind::any;
    PortKind remote_ports = PortKind::any;
    auto operator<=>(const ShapeKey&) const = default;
  };
  struct Shape {
    ShapeKey key;
    size_t policies = 0;
    // At or before every policy of the shape in lookup order: lookups stop trying shapes
    // once their winner comes before the next shape's bound. Lowered by adds, left as it
    // is by removals (still a bound, just a looser one).
    PolicyOrder bound;
  };
  struct Entry;
  // What a flow and a policy of one shape have in common exactly when the policy's
  // prefixes, protocol and single ports match the flow.
  struct BucketKey {
    const Shape* shape = nullptr;
    std::array<uint8_t, 16> local{};
    std::array<uint8_t, 16> remote{};
    uint8_t protocol = 0;
    uint16_t local_port = 0;
    uint16_t remote_port = 0;
    bool operator==(const BucketKey&) const = default;
  };
  // A bucket is its first entry in lookup order; its key is that entry's (the same for
  // all of its entries). Keeping no key of its own saves about 60 bytes per policy.
  struct Bucket {
    mutable Entry* first;
  };
  struct BucketHash {
    using is_transparent = void;
    size_t operator()(const BucketKey& key) const;
    size_t operator()(const Bucket& bucket) const;
  };
  struct BucketEqual {
    using is_transparent = void;
    bool operator()(const Bucket& a, const Bucket& b) const;
    bool operator()(const BucketKey& key, const Bucket& bucket) const;
    bool operator()(const Bucket& bucket, const BucketKey& key) const {
      return (*this)(key, bucket);
    }
  };
  struct Entry {
    Policy policy;
    PolicyOrder order;
    Shape* shape = nullptr;
    Entry* next = nullptr;  // the bucket's next policy in lookup order
  };

  static ShapeKey shape_of(const Policy& policy);
  static BucketKey bucket_of(const Shape& shape, const Selector& selector);
  static BucketKey bucket_of(const Entry& entry) {
    return bucket_of(*entry.shape, entry.policy.selector);
  }
  // The bucket of `shape` a flow falls into; false if no policy of the shape can match it.
  static bool bucket_for_flow(const Shape& shape, const packet::FlowKey& oriented, BucketKey& key);
  void sort_shapes(size_t direction);

  // Entries live in the map's nodes, which never move: buckets point at them.
  std::unordered_map<uint32_t, Entry> entries_;
  std::unordered_set<Bucket, BucketHash, BucketEqual> buckets_;
  std::map<ShapeKey, std::unique_ptr<Shape>> shapes_;
  // Per direction, the shapes in the order lookups try them (by bound).
  std::vector<Shape*> shape_order_[kDirections];
};

}  // namespace espgw::xfrm

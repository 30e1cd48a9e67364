#include "pipeline/packet_pool.h"

#include <algorithm>

namespace espgw::pipeline {

namespace {

std::atomic<uint64_t> next_pool_id{1};
std::atomic<uint64_t> next_thread_token{1};

uint64_t this_thread_token() {
  thread_local const uint64_t token = next_thread_token.fetch_add(1, std::memory_order_relaxed);
  return token;
}

// Which cache this thread has in the last few pools it used (a thread of a test may use
// two pipelines in turn). Pool ids are never reused, so a pool created where a dead one
// lived is never mistaken for it.
struct CacheLookup {
  uint64_t pool = 0;
  void* cache = nullptr;
};
constexpr size_t kLookups = 4;
thread_local std::array<CacheLookup, kLookups> lookups{};

}  // namespace

PacketPool::PacketPool(size_t count, size_t buffer_capacity)
    : id_(next_pool_id.fetch_add(1, std::memory_order_relaxed)),
      cache_capacity_([count] {
        const size_t capacity = std::min(kThreadCacheMax, count / (4 * kThreadCaches));
        return capacity >= 4 ? capacity : 0;
      }()),
      next_(std::make_unique<std::atomic<uint32_t>[]>(count)),
      caches_(std::make_unique<ThreadCache[]>(kThreadCaches)) {
  packets_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    packets_.push_back(std::make_unique<Packet>(buffer_capacity));
    packets_.back()->pool_index = static_cast<uint32_t>(i);
    next_[i].store(i + 1 < count ? static_cast<uint32_t>(i + 1) : kEmpty,
                   std::memory_order_relaxed);
  }
  head_.store(pack(count > 0 ? 0 : kEmpty, 0), std::memory_order_release);
}

void PacketPool::use_thread_cache() {
  if (cache_capacity_ == 0 || thread_cache() != nullptr) return;
  const uint64_t token = this_thread_token();
  for (size_t i = 0; i < kThreadCaches; ++i) {
    uint64_t free = 0;
    if (caches_[i].owner.compare_exchange_strong(free, token, std::memory_order_acq_rel)) {
      // Newest first: the lookup a thread uses most is its latest pool's.
      std::move_backward(lookups.begin(), lookups.end() - 1, lookups.end());
      lookups[0] = {id_, &caches_[i]};
      return;
    }
  }
}

PacketPool::ThreadCache* PacketPool::thread_cache() const {
  for (const CacheLookup& lookup : lookups)
    if (lookup.pool == id_) return static_cast<ThreadCache*>(lookup.cache);
  return nullptr;
}

Packet* PacketPool::acquire() {
  ThreadCache* cache = thread_cache();
  if (cache == nullptr) {
    Packet* packet = nullptr;
    return acquire(std::span<Packet*>(&packet, 1)) != 0 ? packet : nullptr;
  }
  uint32_t count = cache->count.load(std::memory_order_relaxed);
  if (count == 0) {
    // Half a cache: room stays for what this thread releases before it acquires again.
    count = static_cast<uint32_t>(
        acquire(std::span<Packet*>(cache->packets.data(), cache_capacity_ / 2)));
    // The stack's top (freed last, still in a CPU cache) is handed out first.
    std::reverse(cache->packets.begin(), cache->packets.begin() + count);
    if (count == 0) return nullptr;
  }
  cache->count.store(count - 1, std::memory_order_relaxed);
  return cache->packets[count - 1];
}

size_t PacketPool::acquire(std::span<Packet*> out) {
  uint64_t head = head_.load(std::memory_order_acquire);
  for (;;) {
    size_t count = 0;
    uint32_t index = index_of(head);
    // A walk that raced with a pop or push is thrown away: every change moves the tag.
    while (index != kEmpty && count < out.size()) {
      out[count++] = packets_[index].get();
      index = next_[index].load(std::memory_order_relaxed);
    }
    if (count == 0) return 0;
    if (head_.compare_exchange_weak(head, pack(index, tag_of(head) + 1), std::memory_order_acq_rel,
                                    std::memory_order_acquire))
      return count;
  }
}

void PacketPool::release(Packet* packet) {
  packet->clear_references();
  if (ThreadCache* cache = thread_cache()) {
    const uint32_t count = cache->count.load(std::memory_order_relaxed);
    if (count < cache_capacity_) {
      cache->packets[count] = packet;
      cache->count.store(count + 1, std::memory_order_relaxed);
      return;
    }
  }
  push_chain(std::span<Packet* const>(&packet, 1));
}

void PacketPool::release(std::span<Packet* const> batch) {
  if (batch.empty()) return;
  for (Packet* packet : batch) packet->clear_references();
  if (ThreadCache* cache = thread_cache()) {
    const uint32_t count = cache->count.load(std::memory_order_relaxed);
    const size_t room = cache_capacity_ - count;
    const size_t kept = std::min(room, batch.size());
    // The end of the batch into the cache (handed out first), the rest onto the stack.
    // A plain loop: with many SAs most deliveries are one or two packets, and std::copy
    // became a call to memmove, whose size dispatch mispredicted about once a packet.
    const size_t skipped = batch.size() - kept;
    for (size_t i = 0; i < kept; ++i) cache->packets[count + i] = batch[skipped + i];
    cache->count.store(count + static_cast<uint32_t>(kept), std::memory_order_relaxed);
    batch = batch.first(batch.size() - kept);
    if (batch.empty()) return;
  }
  push_chain(batch);
}

void PacketPool::push_chain(std::span<Packet* const> batch) {
  for (size_t i = 0; i + 1 < batch.size(); ++i)
    next_[batch[i + 1]->pool_index].store(batch[i]->pool_index, std::memory_order_relaxed);
  const uint32_t bottom = batch.front()->pool_index;
  const uint32_t top = batch.back()->pool_index;
  uint64_t head = head_.load(std::memory_order_relaxed);
  for (;;) {
    next_[bottom].store(index_of(head), std::memory_order_relaxed);
    if (head_.compare_exchange_weak(head, pack(top, tag_of(head) + 1), std::memory_order_release,
                                    std::memory_order_relaxed))
      return;
  }
}

size_t PacketPool::count_free() const {
  size_t count = 0;
  for (uint32_t index = index_of(head_.load(std::memory_order_acquire)); index != kEmpty;
       index = next_[index].load(std::memory_order_relaxed))
    ++count;
  for (size_t i = 0; i < kThreadCaches; ++i)
    count += caches_[i].count.load(std::memory_order_relaxed);
  return count;
}

}  // namespace espgw::pipeline

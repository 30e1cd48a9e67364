// Objects by SPI: the lookup every received ESP packet starts with (the engine's inbound
// SAs, the pipeline's inbound channels). Readers take a shared lock and leave holding a
// reference, so an entry deleted by a rekey stays valid for the packets in flight on it.
// The per-packet lookups go through a per-thread cache instead, which takes no lock:
// with several readers a shared lock per packet is a cache line they all write.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace espgw {

// T provides `uint32_t spi() const`.
template <typename T>
class SpiTable {
 public:
  SpiTable() : generation_(next_generation()) {}

  // False (and nothing changes) if the SPI is already present.
  bool add(std::shared_ptr<T> entry) {
    std::unique_lock lock(mutex_);
    const uint32_t spi = entry->spi();
    const bool added = by_spi_.emplace(spi, std::move(entry)).second;
    if (added) generation_.store(next_generation(), std::memory_order_release);
    return added;
  }
  // The removed entry, or nullptr.
  std::shared_ptr<T> remove(uint32_t spi) {
    std::unique_lock lock(mutex_);
    auto it = by_spi_.find(spi);
    if (it == by_spi_.end()) return nullptr;
    auto entry = std::move(it->second);
    by_spi_.erase(it);
    generation_.store(next_generation(), std::memory_order_release);
    return entry;
  }
  std::shared_ptr<T> find(uint32_t spi) const {
    std::shared_lock lock(mutex_);
    auto it = by_spi_.find(spi);
    return it == by_spi_.end() ? nullptr : it->second;
  }
  // The same lookup through a small per-thread cache: no lock and no reference count
  // change while the table is unchanged. The pointer is valid until this thread's next
  // lookup through the cache on a table of this type (the cache keeps the entry alive
  // until then). Any add or remove moves the table to a new, globally unique generation,
  // which invalidates every thread's cached entries for it.
  T* find_cached(uint32_t spi) const { return cached(spi).entry.get(); }
  // The same, returning a reference of the caller's own: no lock, one reference count
  // increment (the entry's own, not a line every reader of the table shares).
  std::shared_ptr<T> find_shared(uint32_t spi) const { return cached(spi).entry; }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return by_spi_.size();
  }
  template <typename F>
  void for_each(F&& visit) const {
    std::shared_lock lock(mutex_);
    for (const auto& [spi, entry] : by_spi_) visit(entry);
  }

 private:
  struct CacheEntry {
    const SpiTable* table = nullptr;
    uint64_t generation = 0;
    uint32_t spi = 0;
    std::shared_ptr<T> entry;
  };
  struct Cache {
    // 256 entries (10 KiB per thread and table type): with 16, a gateway with 64 peers'
    // SAs missed on most packets and took the shared lock and a reference each time.
    std::array<CacheEntry, 256> entries;
    // The table this thread looked up last, and its generation then.
    const SpiTable* last_table = nullptr;
    uint64_t last_generation = 0;
  };
  const CacheEntry& cached(uint32_t spi) const {
    thread_local Cache cache;
    const uint64_t generation = generation_.load(std::memory_order_acquire);
    if (cache.last_table == this && cache.last_generation != generation) {
      // The table changed since this thread's last lookup: let go of every entry it
      // cached from the old one, so that a removed SA (its key schedule) is not kept
      // alive by a slot that no packet happens to use again.
      for (CacheEntry& stale : cache.entries)
        if (stale.table == this && stale.generation != generation) stale = CacheEntry{};
    }
    cache.last_table = this;
    cache.last_generation = generation;
    CacheEntry& slot = cache.entries[spi % cache.entries.size()];
    if (slot.table == this && slot.generation == generation && slot.spi == spi && slot.entry)
      return slot;
    slot.entry = find(spi);
    slot.table = this;
    slot.generation = generation;
    slot.spi = spi;
    return slot;
  }

  // Generations are unique across all tables, so a table created at a dead table's
  // address can never match that table's cached entries.
  static uint64_t next_generation() {
    static std::atomic<uint64_t> counter{1};
    return counter.fetch_add(1, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> generation_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<T>> by_spi_;
};

}  // namespace espgw

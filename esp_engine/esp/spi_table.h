// Objects by SPI: the lookup every received ESP packet starts with (the engine's inbound
// SAs, the pipeline's inbound channels). Readers take a shared lock and leave holding a
// reference, so an entry deleted by a rekey stays valid for the packets in flight on it.
#pragma once

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
  // False (and nothing changes) if the SPI is already present.
  bool add(std::shared_ptr<T> entry) {
    std::unique_lock lock(mutex_);
    const uint32_t spi = entry->spi();
    return by_spi_.emplace(spi, std::move(entry)).second;
  }
  // The removed entry, or nullptr.
  std::shared_ptr<T> remove(uint32_t spi) {
    std::unique_lock lock(mutex_);
    auto it = by_spi_.find(spi);
    if (it == by_spi_.end()) return nullptr;
    auto entry = std::move(it->second);
    by_spi_.erase(it);
    return entry;
  }
  std::shared_ptr<T> find(uint32_t spi) const {
    std::shared_lock lock(mutex_);
    auto it = by_spi_.find(spi);
    return it == by_spi_.end() ? nullptr : it->second;
  }
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
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<T>> by_spi_;
};

}  // namespace espgw

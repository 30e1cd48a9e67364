#include "esp/inbound_sa_table.h"

#include <mutex>

namespace espgw::esp {

bool InboundSaTable::add(std::shared_ptr<InboundSa> sa) {
  std::unique_lock lock(mutex_);
  const uint32_t spi = sa->config().spi;
  return by_spi_.emplace(spi, std::move(sa)).second;
}

bool InboundSaTable::remove(uint32_t spi) {
  std::unique_lock lock(mutex_);
  return by_spi_.erase(spi) > 0;
}

std::shared_ptr<InboundSa> InboundSaTable::find(uint32_t spi) const {
  std::shared_lock lock(mutex_);
  auto it = by_spi_.find(spi);
  return it == by_spi_.end() ? nullptr : it->second;
}

size_t InboundSaTable::size() const {
  std::shared_lock lock(mutex_);
  return by_spi_.size();
}

}  // namespace espgw::esp

// Inbound SAs by SPI: the lookup every received ESP packet starts with.
// Readers take a shared lock and leave holding a reference, so an SA deleted by a rekey
// stays valid for the packets already in flight on it.
#pragma once

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <unordered_map>

#include "esp/security_association.h"

namespace espgw::esp {

class InboundSaTable {
 public:
  // False (and nothing changes) if the SPI is already present.
  bool add(std::shared_ptr<InboundSa> sa);
  bool remove(uint32_t spi);
  std::shared_ptr<InboundSa> find(uint32_t spi) const;
  size_t size() const;

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<InboundSa>> by_spi_;
};

}  // namespace espgw::esp

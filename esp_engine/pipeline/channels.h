// Per-SA pipeline state. An OutboundChannel numbers its packets under a per-SA lock and
// releases them in that order; an InboundChannel releases by ESP sequence number. Both
// are reached by workers through the Packet, never through a shared table.
#pragma once

#include <atomic>
#include <memory>

#include "esp/security_association.h"
#include "pipeline/ordered_release.h"
#include "util/spin_lock.h"

namespace espgw::pipeline {

class OutboundChannel {
 public:
  OutboundChannel(std::shared_ptr<esp::OutboundSa> sa, PacketSink& sink, size_t max_in_flight);

  esp::OutboundSa& sa() { return *sa_; }
  const std::shared_ptr<esp::OutboundSa>& sa_ptr() const { return sa_; }
  PacketSink& sink() { return sink_; }
  size_t in_flight() const;
  size_t max_in_flight() const { return max_in_flight_; }
  OrderedRelease& release() { return release_; }

 private:
  friend class Pipeline;
  std::shared_ptr<esp::OutboundSa> sa_;
  PacketSink& sink_;
  const size_t max_in_flight_;
  SpinLock submit_lock_;  // orders "take a sequence number" with "take a release slot"
  std::atomic<uint64_t> next_index_{0};  // written under submit_lock_
  OrderedRelease release_;
};

class InboundChannel {
 public:
  InboundChannel(std::shared_ptr<esp::InboundSa> sa, PacketSink& sink, size_t reorder_capacity,
                 uint64_t hold_ns);

  esp::InboundSa& sa() { return *sa_; }
  uint32_t spi() const { return sa_->config().spi; }
  PacketSink& sink() { return sink_; }
  OrderedRelease& release() { return release_; }

 private:
  friend class Pipeline;
  std::shared_ptr<esp::InboundSa> sa_;
  PacketSink& sink_;
  OrderedRelease release_;
  std::atomic<bool> timer_scheduled_{false};
  std::atomic<uint64_t> in_crypto_{0};  // submitted, not yet back from a worker
};

}  // namespace espgw::pipeline

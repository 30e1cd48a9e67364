// Per-SA pipeline state. Both channels release their SA's packets by ESP sequence number:
// outbound the numbers are dense (the SA hands them out in order), inbound they may have
// gaps (loss) and arrive in any order. Workers reach a channel through the Packet, never
// through a shared table.
#pragma once

#include <atomic>
#include <memory>

#include "esp/security_association.h"
#include "pipeline/ordered_release.h"
#include "pipeline/sa_group.h"

namespace espgw::pipeline {

class OutboundChannel {
 public:
  OutboundChannel(std::shared_ptr<esp::OutboundSa> sa, PacketSink& sink, size_t max_in_flight);

  esp::OutboundSa& sa() { return *sa_; }
  PacketSink& sink() { return sink_; }
  size_t in_flight() const;
  size_t max_in_flight() const { return max_in_flight_; }
  // Highest sequence number a new packet may take without exceeding max_in_flight.
  uint64_t sequence_limit() const {
    return first_sequence_ + release_.delivered() + max_in_flight_ - 1;
  }
  OrderedRelease& release() { return release_; }
  // Makes the channel count its packets in flight against `budget` too (its SA group's,
  // sa_group.h). Call before the channel carries packets, and at most once.
  void share_budget(std::shared_ptr<InFlightBudget> budget);
  InFlightBudget* budget() const { return budget_.get(); }

 private:
  friend class Pipeline;
  std::shared_ptr<esp::OutboundSa> sa_;
  std::shared_ptr<InFlightBudget> budget_;
  PacketSink& sink_;
  const size_t max_in_flight_;
  // Packets are released by sequence number, which the SA hands out in order under its
  // own lock, so the channel needs no lock of its own. The first number is fixed here.
  const uint64_t first_sequence_;
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

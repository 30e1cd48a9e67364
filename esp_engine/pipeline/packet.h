// The unit of work in the pipeline: a buffer plus everything a worker needs to finish
// the packet without looking anything up. Packets come from a fixed-size pool, so the
// number in flight, and with it the memory of every queue, is bounded.
#pragma once

#include <cstdint>
#include <memory>

#include "esp/decap.h"
#include "esp/encap.h"
#include "esp/packet_buffer.h"

namespace espgw::pipeline {

class OutboundChannel;
class InboundChannel;

enum class Direction : uint8_t { outbound, inbound };

struct Packet {
  explicit Packet(size_t buffer_capacity) : buffer(buffer_capacity) {}

  esp::PacketBuffer buffer;
  Direction direction = Direction::outbound;
  esp::OuterHeaders outer = esp::OuterHeaders::include;
  // The channel keeps its SA alive while this packet is in flight (rekey, delete).
  std::shared_ptr<OutboundChannel> outbound;
  std::shared_ptr<InboundChannel> inbound;
  esp::PreparedEncap encap;
  esp::PreparedDecap decap;
  uint64_t arrival_ns = 0;  // when it entered a reorder buffer (hold-time accounting)
  uint32_t pool_index = 0;  // set once by the pool that owns the packet
  // A batch handed to the workers as one queue entry: its first packet carries the
  // length, and each packet links to the next.
  Packet* batch_next = nullptr;
  uint32_t batch_length = 1;

  void clear_references() {
    outbound.reset();
    inbound.reset();
    decap = {};
  }
};

}  // namespace espgw::pipeline

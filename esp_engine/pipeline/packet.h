// The unit of work in the pipeline: a buffer plus everything a worker needs to finish
// the packet without looking anything up. Packets come from a fixed-size pool, so the
// number in flight, and with it the memory of every queue, is bounded.
#pragma once

#include <cstdint>

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
  // The packet's channel, not owned: the pipeline deletes a channel whose owners let go
  // only once no packet points at it (ChannelReclaimer), so the SA and its key stay valid
  // for the packets in flight on it (rekey, delete).
  OutboundChannel* outbound = nullptr;
  InboundChannel* inbound = nullptr;
  esp::PreparedEncap encap;
  // Inbound: its reader wants it dropped once it is authenticated and in order (queue
  // management, io/QueueDelayGate); the pipeline carries it to the sink, which drops it
  // (or marks it CE if it is ECN-capable).
  // Dropping it there, not before decryption, leaves no gap in the SA's sequence for the
  // reorder buffer to wait on.
  bool drop_at_delivery = false;
  esp::PreparedDecap decap;
  uint64_t arrival_ns = 0;  // when it entered a reorder buffer (hold-time accounting)
  uint32_t pool_index = 0;  // set once by the pool that owns the packet
  // A batch handed to the workers as one queue entry: its first packet carries the
  // length, and each packet links to the next.
  Packet* batch_next = nullptr;
  uint32_t batch_length = 1;

  void clear_references() {
    outbound = nullptr;
    inbound = nullptr;
    decap = {};
  }
};

}  // namespace espgw::pipeline

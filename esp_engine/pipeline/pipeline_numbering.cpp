// Sequence numbers per batch and SA. A reader's outbound packets wait in its slot framed
// but unnumbered; when the batch leaves the slot (handed to the workers, or processed in
// the reader itself) each SA in it gets one acquisition of its lock for exactly as many
// numbers as the batch holds for it, in the order the reader submitted them. Threads that
// share an SA then trade its lock and its cache line once per batch, not once per packet,
// and the numbers stay dense: nothing is reserved that a packet does not use.
#include <algorithm>
#include <array>
#include <cassert>

#include "esp/encap.h"
#include "pipeline/pipeline.h"

namespace espgw::pipeline {

Pipeline::SubmitterSlot* Pipeline::numbering_slot() {
  // With workers only a reader has a slot (handed over when full); running to completion
  // every submitter does, claimed on first use, as enqueue() would.
  SubmitterSlot* slot = own_slot(config_.run_to_completion);
  if (slot == nullptr || slot->count.load(std::memory_order_relaxed) < kWorkerBatch) return slot;
  // Full with what a sink submitted while this thread processed the last batch; still
  // full inside processing: to the shared queue, as enqueue() does.
  process_queued(false);
  if (slot->count.load(std::memory_order_relaxed) == kWorkerBatch) hand_over(*slot);
  return slot;
}

Pipeline::SlotShare Pipeline::share_of(const SubmitterSlot& slot, const OutboundChannel& channel) {
  for (uint32_t g = 0; g < slot.channel_count; ++g)
    if (slot.channels[g] == &channel)
      return {slot.unnumbered[g], uint32_t{slot.reserved[g]} - slot.unnumbered[g], g};
  return {0, 0, slot.channel_count};
}

uint64_t Pipeline::room_to_reserve(const SubmitterSlot& slot, const OutboundChannel& channel,
                                   const SlotShare& share) {
  if (share.unnumbered == 0) return 1;
  const uint64_t space = kWorkerBatch - slot.count.load(std::memory_order_relaxed);
  const uint64_t sixteenth = std::max<uint64_t>(1, channel.max_in_flight() / 16);
  return std::min({space, sixteenth, kRoomChunk});
}

void Pipeline::add_unnumbered(SubmitterSlot& slot, Packet* packet, OutboundChannel& channel,
                              const SlotShare& share, uint32_t reserved) {
  const uint32_t count = slot.count.load(std::memory_order_relaxed);
  const uint32_t g = share.index;
  assert(g == slot.channel_count || slot.channels[g] == &channel);
  if (g == slot.channel_count) {
    slot.channels[g] = &channel;
    slot.unnumbered[g] = 0;
    slot.reserved[g] = 0;
    ++slot.channel_count;
  }
  slot.reserved[g] = static_cast<uint8_t>(slot.reserved[g] + reserved);
  ++slot.unnumbered[g];
  slot.packets[count] = packet;
  slot.channel_of[count] = static_cast<uint8_t>(g);
  slot.count.store(count + 1, std::memory_order_release);
  if (count + 1 < kWorkerBatch) return;
  if (config_.run_to_completion)
    process_queued(false);  // inside processing it waits: the next submit hands it over
  else
    hand_over(slot);
}

void Pipeline::number_slot(SubmitterSlot& slot) {
  const uint32_t channel_count = slot.channel_count;
  if (channel_count == 0) return;
  const uint32_t count = slot.count.load(std::memory_order_acquire);
  // Each channel's packets together, in submit order (a counting sort).
  std::array<uint32_t, kWorkerBatch> start, cursor, order;
  for (uint32_t g = 0, next = 0; g < channel_count; ++g) {
    start[g] = cursor[g] = next;
    next += slot.unnumbered[g];
  }
  for (uint32_t i = 0; i < count; ++i)
    if (slot.channel_of[i] != kNumbered) order[cursor[slot.channel_of[i]]++] = i;

  bool dropped = false;
  for (uint32_t g = 0; g < channel_count; ++g) {
    OutboundChannel& channel = *slot.channels[g];
    esp::OutboundSa& sa = channel.sa();
    const uint32_t* mine = order.data() + start[g];
    const uint32_t n = slot.unnumbered[g];
    std::array<uint64_t, kWorkerBatch + 1> bytes_through;
    bytes_through[0] = 0;
    for (uint32_t j = 0; j < n; ++j)
      bytes_through[j + 1] = bytes_through[j] + slot.packets[mine[j]]->encap.inner_length;
    size_t taken = 0;
    esp::DropReason refused = esp::DropReason::none;
    // No in-flight limit here: the submits reserved these packets' places, so the numbers
    // stay within delivered + max_in_flight (the release ring's size) without one. A
    // limit read now could also be stale: another reader may have reserved against a
    // later delivered count and numbered first.
    const uint64_t first = sa.take_sequences(n, bytes_through.data(), ~uint64_t{0}, taken, refused);
    uint32_t ipv4 = 0;
    for (size_t j = 0; j < taken; ++j) ipv4 += slot.packets[mine[j]]->encap.outer_ipv4 ? 1 : 0;
    uint16_t ip_id = ipv4 != 0 ? sa.next_ip_ids(ipv4) : 0;
    for (size_t j = 0; j < taken; ++j) {
      Packet* packet = slot.packets[mine[j]];
      esp::encap_number(sa, packet->buffer, packet->encap, first + j,
                        packet->encap.outer_ipv4 ? ip_id++ : 0);
    }
    // Refused after submit_outbound accepted them: a bound another thread's packets
    // reached first (never the in-flight bound: their places are reserved). They took no
    // number, so the numbers stay dense.
    for (size_t j = taken; j < n; ++j) {
      sa.counters().count(refused);
      if (InFlightBudget* budget = channel.budget())
        budget->in_flight.fetch_sub(1, std::memory_order_relaxed);
      pool_.release(slot.packets[mine[j]]);
      slot.packets[mine[j]] = nullptr;
      dropped = true;
    }
    // The last touch of the channel: with nothing in flight it may go right after.
    channel.return_room(slot.reserved[g] - taken);
  }
  uint32_t kept = count;
  if (dropped) {
    kept = 0;
    for (uint32_t i = 0; i < count; ++i)
      if (slot.packets[i] != nullptr) slot.packets[kept++] = slot.packets[i];
  }
  for (uint32_t i = 0; i < kept; ++i) slot.channel_of[i] = kNumbered;
  slot.channel_count = 0;
  slot.count.store(kept, std::memory_order_release);
}

}  // namespace espgw::pipeline

#include "pipeline/reorder_buffer.h"

#include <algorithm>
#include <bit>

#include "pipeline/packet.h"
#include "util/clock.h"

namespace espgw::pipeline {

ReorderBuffer::ReorderBuffer(size_t capacity, uint64_t hold_ns, uint64_t first_index)
    : next_(first_index),
      mask_(std::bit_ceil(capacity < 2 ? size_t{2} : capacity) - 1),
      hold_ns_(hold_ns) {}

void ReorderBuffer::make_room(uint64_t distance) {
  const size_t size = slots_ ? slot_mask_ + 1 : 0;
  if (distance < size) return;
  const size_t grown =
      std::min(mask_ + 1, std::bit_ceil(std::max<size_t>(kInitialSlots, distance + 1)));
  auto slots = std::make_unique<Slot[]>(grown);
  for (size_t i = 0; i < grown; ++i) slots[i] = nullptr;
  // Held entries keep their index; only where it lands in the ring changes.
  for (uint64_t index = next_; index < next_ + size; ++index)
    slots[index & (grown - 1)] = slots_[index & slot_mask_];
  slots_ = std::move(slots);
  slot_mask_ = grown - 1;
}

uint64_t LazyNow::get() {
  if (!known_) {
    value_ = clock_ns(CLOCK_MONOTONIC);
    known_ = true;
  }
  return value_;
}

Packet* ReorderBuffer::tombstone() {
  // Never a real packet: no object lives at an address this small.
  return reinterpret_cast<Packet*>(alignof(Packet));
}

std::optional<uint64_t> ReorderBuffer::first_waiting_packet_from(uint64_t index) const {
  for (; index <= next_ + slot_mask_; ++index) {
    const Slot slot = slots_[index & slot_mask_];
    if (slot != nullptr && slot != tombstone()) return slot->arrival_ns;
  }
  return std::nullopt;
}

void ReorderBuffer::pop_in_order(std::vector<Packet*>& out) {
  while (held_ > 0) {
    Slot& slot = slots_[next_ & slot_mask_];
    if (slot == nullptr) return;
    if (slot != tombstone()) {
      out.push_back(slot);
      ++released_;
    }
    slot = nullptr;
    --held_;
    ++next_;
  }
}

void ReorderBuffer::advance_to(uint64_t index, std::vector<Packet*>& out) {
  // Everything below `index` leaves now: held packets in order, missing ones skipped.
  while (next_ < index) {
    if (held_ == 0) {
      rare_.skipped += index - next_;
      next_ = index;
      return;
    }
    Slot& slot = slots_[next_ & slot_mask_];
    if (slot != nullptr) {
      if (slot != tombstone()) {
        out.push_back(slot);
        ++released_;
      }
      slot = nullptr;
      --held_;
    } else {
      ++rare_.skipped;
    }
    ++next_;
  }
}

void ReorderBuffer::insert(uint64_t index, Packet* packet, LazyNow& now,
                           std::vector<Packet*>& out) {
  if (index < next_) {
    if (packet) {
      out.push_back(packet);
      ++rare_.late;
    }
    return;
  }
  if (index - next_ > mask_) {
    ++rare_.overflows;
    advance_to(index - mask_, out);
  }
  if (index == next_ && held_ == 0) {
    // In order with nothing held (the common case): straight out, no slot touched.
    if (packet) {
      out.push_back(packet);
      ++released_;
    }
    ++next_;
    return;
  }
  make_room(index - next_);
  Slot& slot = slots_[index & slot_mask_];
  if (slot != nullptr) {
    // Two packets for one index: callers guarantee uniqueness (sequence numbers are
    // committed in the replay window first), so this is a bug upstream. Release the
    // newcomer rather than lose either.
    if (packet) {
      out.push_back(packet);
      ++rare_.late;
    }
    return;
  }
  if (packet) {
    // Only a packet that has to wait needs its arrival time (the hold starts there).
    packet->arrival_ns = (index == next_ || hold_ns_ == 0) ? 0 : now.get();
    slot = packet;
  } else {
    slot = tombstone();
  }
  ++held_;
  pop_in_order(out);
}

std::optional<uint64_t> ReorderBuffer::first_held_after_gap() const {
  for (uint64_t index = next_ + 1; index <= next_ + slot_mask_; ++index)
    if (slots_[index & slot_mask_] != nullptr) return index;
  return std::nullopt;
}

bool ReorderBuffer::packets_waiting() const {
  return held_ > 0 && first_waiting_packet_from(next_).has_value();
}

bool ReorderBuffer::release(LazyNow& now, std::vector<Packet*>& out, bool busy) {
  for (;;) {
    pop_in_order(out);
    if (held_ == 0) return false;
    // The release point is a gap. Its hold runs from the first packet waiting behind it:
    // a tombstone has no arrival time and holds nothing back, so with only tombstones
    // there nothing waits and there is nothing to come back for. (Counting a tombstone
    // as arrived long ago gave the gap up at once, and the packet still in crypto that
    // filled it then came late, after the packets that followed.)
    const auto held = first_held_after_gap();
    const auto arrival = held ? first_waiting_packet_from(*held) : std::nullopt;
    if (!arrival) return false;
    if (hold_ns_ == 0 || now.get() - *arrival < (busy ? hold_ns_ * kBusyHoldFactor : hold_ns_))
      return true;
    ++rare_.hold_timeouts;
    advance_to(*held, out);
  }
}

void ReorderBuffer::flush(std::vector<Packet*>& out) {
  while (held_ > 0) {
    pop_in_order(out);
    if (held_ == 0) break;
    ++rare_.skipped;
    ++next_;
  }
}

}  // namespace espgw::pipeline

#include "pipeline/ordered_release.h"

#include <array>
#include <mutex>

#include "util/serial_sections.h"

namespace espgw::pipeline {

OrderedRelease::OrderedRelease(size_t capacity, uint64_t hold_ns, uint64_t first_index,
                               std::atomic<uint64_t>* in_crypto)
    : in_crypto_(in_crypto), buffer_(capacity, hold_ns, first_index) {
  // pending_ and delivering_ grow to what the SA's traffic needs and keep that capacity,
  // so only the first bursts reallocate. Reserving the full capacity up front cost 8 KB
  // per channel, most of an idle SA's memory (docs/scaling.md).
}

bool OrderedRelease::insert(uint64_t index, Packet* packet, PacketSink& sink, PacketPool& pool) {
  const Staged staged{index, packet};
  return stage_and_drain(std::span<const Staged>(&staged, 1), 0, sink, pool);
}

// Inlined into both callers: as a call of its own it cost stage_and_drain, which every
// inbound channel pays per batch, ~25 instructions a packet with 64 SAs.
[[gnu::always_inline]] inline size_t OrderedRelease::stage(std::span<const Staged> batch,
                                                           uint64_t left_crypto,
                                                           std::span<Packet*> out, PacketSink& sink,
                                                           PacketPool& pool, bool& held,
                                                           uint64_t unauthenticated) {
  held = false;
  {
    serial_sections::Timer timer(serial_sections::Section::release_lock, &lock_);
    std::lock_guard guard(lock_);
    timer.acquired();
    LazyNow now;
    if (unauthenticated != 0)
      forged_until_ns_ = now.get() + buffer_.hold_ns() * ReorderBuffer::kBusyHoldFactor;
    const std::optional<size_t> taken = take_in_order(batch, out);
    if (!taken)
      for (const Staged& s : batch) buffer_.insert(s.index, s.packet, now, pending_);
    if (left_crypto != 0) in_crypto_->fetch_sub(left_crypto, std::memory_order_release);
    // Taken (0 when only tombstones: nothing to deliver, nothing held): the caller delivers.
    if (taken) return *taken;
    if (!take_ready(now)) {
      // Turned away or nothing ready: a packet left behind a gap still needs the timer,
      // and this thread is the one who knows of it, so the answer is what is held now.
      held = buffer_.packets_waiting();
      return 0;
    }
  }
  held = deliver_from(delivering_, sink, pool);
  return 0;
}

bool OrderedRelease::stage_and_drain(std::span<const Staged> batch, uint64_t left_crypto,
                                     PacketSink& sink, PacketPool& pool, uint64_t unauthenticated) {
  std::array<Packet*, kInOrderMax> in_order;
  bool held = false;
  const size_t taken = stage(batch, left_crypto, in_order, sink, pool, held, unauthenticated);
  if (taken == 0) return held;
  return deliver_from(std::span<Packet* const>(in_order.data(), taken), sink, pool);
}

size_t OrderedRelease::stage_or_take(std::span<const Staged> batch, uint64_t left_crypto,
                                     std::span<Packet*> out, PacketSink& sink, PacketPool& pool,
                                     bool& held) {
  return stage(batch, left_crypto, out, sink, pool, held);
}

std::optional<size_t> OrderedRelease::take_in_order(std::span<const Staged> batch,
                                                    std::span<Packet*> out) {
  // pending_ too must be empty: after flush() it holds packets numbered below the release
  // point until the flushing thread takes them, and these would overtake them.
  if (draining_ || !pending_.empty() || buffer_.held() != 0 || batch.size() > out.size())
    return std::nullopt;
  const uint64_t next = buffer_.next_index();
  size_t packets = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].index != next + i) return std::nullopt;
    if (batch[i].packet) out[packets++] = batch[i].packet;
  }
  buffer_.pass_in_order(batch.size(), packets);
  if (packets != 0) draining_ = true;
  return packets;
}

bool OrderedRelease::drain(PacketSink& sink, PacketPool& pool) {
  {
    std::lock_guard guard(lock_);
    LazyNow now;
    if (!take_ready(now)) return buffer_.packets_waiting();
  }
  return deliver_from(delivering_, sink, pool);
}

void OrderedRelease::release_held(LazyNow& now) {
  // Nothing held (every packet so far came in order): nothing to look at, and the
  // in-crypto count, another cache line, is not read.
  if (buffer_.held() == 0) return;
  // Forged packets lately: what is in crypto may be nothing but them, so it is no reason
  // to wait longer for a gap (forged_until_ns_).
  const bool busy = workers_busy() && (forged_until_ns_ == 0 || now.get() >= forged_until_ns_);
  buffer_.release(now, pending_, busy);
}

bool OrderedRelease::take_ready(LazyNow& now) {
  if (draining_) return false;
  release_held(now);
  if (pending_.empty()) return false;
  draining_ = true;
  delivering_.swap(pending_);
  return true;
}

bool OrderedRelease::finish_delivery(size_t delivered, PacketSink& sink, PacketPool& pool) {
  bool held = false;
  if (!after_delivery(delivered, held)) return held;
  return deliver_from(delivering_, sink, pool);
}

bool OrderedRelease::deliver_from(std::span<Packet* const> packets, PacketSink& sink,
                                  PacketPool& pool) {
  bool held = false;
  for (;;) {
    {
      serial_sections::Timer timer(serial_sections::Section::delivery, this);
      sink.deliver(packets);
      pool.release(packets);
    }
    if (!after_delivery(packets.size(), held)) return held;
    packets = delivering_;
  }
}

bool OrderedRelease::after_delivery(size_t delivered, bool& held) {
  // Only the delivering thread writes it, and the next one takes over under lock_.
  delivered_.store(delivered_.load(std::memory_order_relaxed) + delivered,
                   std::memory_order_release);
  if (shared_in_flight_) shared_in_flight_->fetch_sub(delivered, std::memory_order_relaxed);
  delivering_.clear();
  serial_sections::Timer timer(serial_sections::Section::release_lock, &lock_);
  std::lock_guard guard(lock_);
  timer.acquired();
  LazyNow now;
  // Whatever other threads staged while this one delivered is ready now or held: they
  // were turned away by draining_, so this thread must not stop before it looked.
  release_held(now);
  if (pending_.empty()) {
    draining_ = false;
    held = buffer_.packets_waiting();
    return false;
  }
  delivering_.swap(pending_);
  return true;
}

void OrderedRelease::flush(PacketSink& sink, PacketPool& pool) {
  {
    std::lock_guard guard(lock_);
    buffer_.flush(pending_);
  }
  drain(sink, pool);
}

bool OrderedRelease::delivering() const {
  std::lock_guard guard(lock_);
  return draining_ || !pending_.empty();
}

ReorderStats OrderedRelease::stats() const {
  std::lock_guard guard(lock_);
  return buffer_.stats();
}

size_t OrderedRelease::held() const {
  std::lock_guard guard(lock_);
  return buffer_.held();
}

}  // namespace espgw::pipeline

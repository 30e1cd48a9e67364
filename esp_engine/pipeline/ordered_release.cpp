#include "pipeline/ordered_release.h"

#include <mutex>

namespace espgw::pipeline {

OrderedRelease::OrderedRelease(size_t capacity, uint64_t hold_ns, uint64_t first_index,
                               const std::atomic<uint64_t>* in_crypto)
    : in_crypto_(in_crypto), buffer_(capacity, hold_ns, first_index) {
  // pending_ and delivering_ grow to what the SA's traffic needs and keep that capacity,
  // so only the first bursts reallocate. Reserving the full capacity up front cost 8 KB
  // per channel, most of an idle SA's memory (docs/scaling.md).
}

bool OrderedRelease::insert(uint64_t index, Packet* packet, PacketSink& sink, PacketPool& pool) {
  stage(index, packet);
  return drain(sink, pool);
}

void OrderedRelease::stage(uint64_t index, Packet* packet) {
  std::lock_guard guard(lock_);
  LazyNow now;
  buffer_.insert(index, packet, now, pending_);
}

void OrderedRelease::stage(std::span<const Staged> batch) {
  std::lock_guard guard(lock_);
  LazyNow now;
  for (const Staged& s : batch) buffer_.insert(s.index, s.packet, now, pending_);
}

bool OrderedRelease::drain(PacketSink& sink, PacketPool& pool) {
  bool stalled = false;
  for (;;) {
    if (draining_.exchange(true, std::memory_order_acq_rel)) {
      // Another worker is delivering; it re-checks after it lets go of the flag, so
      // whatever we left in pending_ will not be stranded. A packet we left behind a gap
      // still needs the timer, and we are the one who knows of it: say so.
      std::lock_guard guard(lock_);
      return buffer_.held() > 0;
    }
    for (;;) {
      {
        std::lock_guard guard(lock_);
        LazyNow now;
        stalled = buffer_.release(now, pending_, workers_busy());
        delivering_.swap(pending_);
      }
      if (delivering_.empty()) break;
      sink.deliver(delivering_);
      pool.release(std::span<Packet* const>(delivering_));
      delivered_.fetch_add(delivering_.size(), std::memory_order_release);
      if (shared_in_flight_)
        shared_in_flight_->fetch_sub(delivering_.size(), std::memory_order_relaxed);
      delivering_.clear();
    }
    draining_.store(false, std::memory_order_seq_cst);
    // A packet inserted after our last look, while we still held the flag, was left for
    // us: look once more now that the flag is down. If it waits behind a gap, the worker
    // that staged it was turned away by our flag and asked for no timer, so answering
    // with what we saw before it came would strand it until the SA's next packet: the
    // answer is what is held now.
    bool more;
    {
      std::lock_guard guard(lock_);
      LazyNow now;
      more = !pending_.empty() || buffer_.ready(now, workers_busy());
      stalled = buffer_.held() > 0;
    }
    if (!more) return stalled;
  }
}

void OrderedRelease::flush(PacketSink& sink, PacketPool& pool) {
  {
    std::lock_guard guard(lock_);
    buffer_.flush(pending_);
  }
  drain(sink, pool);
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

// Deferred deletion of channels. A packet in flight points at its channel without owning
// it: a shared_ptr per packet cost two locked instructions per packet and direction (the
// copy at submit, the release after crypto), a third of the pipeline's own work in one
// thread. The channel's owners (gateway entries, ECMP member lists, SPI table, per-thread
// snapshots) hold shared_ptrs whose deleter hands the channel here instead of deleting it.
//
// A retired channel is deleted once it is quiescent (no packet carries it: outbound, every
// sequence number taken is delivered; inbound, nothing is in crypto, and what its reorder
// buffer held is flushed) and every thread that was following a packet's channel pointer
// at that moment has left its read section. Sections are counted in two counters, one per
// phase, as in SRCU: the reclaimer flips the phase and waits for the old phase's count to
// reach zero; two such flips after quiescence cover any section that was running then.
// A section is a worker's batch or a submitter's processing round, so this is two locked
// instructions per batch instead of four per packet.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace espgw::pipeline {

class OutboundChannel;
class InboundChannel;
class PacketPool;

class ChannelReclaimer {
 public:
  ChannelReclaimer() = default;
  // Deletes whatever is still retired: only once no thread processes packets.
  ~ChannelReclaimer();
  ChannelReclaimer(const ChannelReclaimer&) = delete;
  ChannelReclaimer& operator=(const ChannelReclaimer&) = delete;

  // Marks the calling thread as following packets' channel pointers until exit(phase).
  // Sections do not nest in one thread's use here, but counting allows it.
  unsigned enter() {
    const unsigned phase = static_cast<unsigned>(phase_.load(std::memory_order_seq_cst) & 1);
    sections_[phase].count.fetch_add(1, std::memory_order_seq_cst);
    return phase;
  }
  void exit(unsigned phase) { sections_[phase].count.fetch_sub(1, std::memory_order_release); }

  class Section {
   public:
    explicit Section(ChannelReclaimer& reclaimer)
        : reclaimer_(reclaimer), phase_(reclaimer.enter()) {}
    ~Section() { reclaimer_.exit(phase_); }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;

   private:
    ChannelReclaimer& reclaimer_;
    const unsigned phase_;
  };

  // A channel whose last owner let go (any thread).
  void retire(OutboundChannel* channel);
  void retire(InboundChannel* channel);
  // Flushes what retired inbound channels still hold to their sinks (packets return to
  // `pool`), and deletes the channels that can no longer be reached. Called by one
  // thread at a time (the pipeline's timer). Returns whether any channel is still waiting.
  bool reclaim(PacketPool& pool);
  // Channels retired and not yet deleted.
  size_t waiting() const { return waiting_.load(std::memory_order_relaxed); }

 private:
  struct Retired {
    OutboundChannel* outbound = nullptr;
    InboundChannel* inbound = nullptr;
    // 0: not yet seen quiescent; otherwise the number of completed phase flips after
    // which nothing can reach it.
    uint64_t safe_after_flips = 0;
  };
  static void destroy(const Retired& retired);
  // Starts or completes phase flips until `target` flips completed or a section of the
  // old phase is still running. Returns whether `target` is reached.
  bool advance_to(uint64_t target);

  struct alignas(64) Counter {
    std::atomic<uint64_t> count{0};
  };
  alignas(64) std::atomic<uint64_t> phase_{0};
  std::array<Counter, 2> sections_;

  std::mutex mutex_;  // guards retired_ (retire() may run on any thread)
  std::vector<Retired> retired_;
  std::atomic<size_t> waiting_{0};
  // The reclaiming thread's state of the flips.
  uint64_t flips_started_ = 0;
  uint64_t flips_completed_ = 0;
};

}  // namespace espgw::pipeline

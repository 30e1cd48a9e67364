// RFC 4303 anti-replay with the RFC 6479 bitmap: a ring of 64-bit blocks indexed by
// sequence number, so advancing the window clears whole blocks instead of shifting bits.
// ESN high-order bits are inferred as in RFC 4303 Appendix A.
//
// Built for a receiver with many packets in flight: check() is a lock-free pre-check run
// before decryption (it may only be wrong in the safe direction for a racing packet, which
// commit() then catches), and commit() is the authoritative test-and-set, run after the
// ICV has been verified, under a per-SA spin lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "util/serial_sections.h"
#include "util/spin_lock.h"

namespace espgw::esp {

class ReplayWindow {
 public:
  // unreserved: above the accept limit (not yet reserved on disk); held: the window's
  // state is unknown and it accepts nothing.
  enum class Verdict : uint8_t { accept, replayed, outside_window, unreserved, held };

  struct Candidate {
    uint64_t sequence;  // full 64-bit sequence number (high bits inferred with ESN)
    Verdict verdict;
  };

  static constexpr uint32_t kMaxSize = 65536;

  // `size` is the number of sequence numbers accepted below the highest one seen; it is
  // rounded up to a multiple of 64. 0 disables replay protection (RFC 4303 allows it for
  // manually keyed SAs); sequence numbers are then still tracked for ESN inference.
  // Throws std::invalid_argument above kMaxSize.
  ReplayWindow(uint32_t size, bool esn);

  uint32_t size() const { return size_; }
  bool esn() const { return esn_; }
  // Highest sequence number committed so far (0 before the first packet).
  uint64_t highest() const { return top_.load(std::memory_order_acquire); }

  // Starts the window over as if every sequence number up to `top` had been received:
  // what a restart knows of the window is only the highest number it may have accepted.
  // Not for a window that is receiving (the control side calls it before the SA is live).
  void restore(uint64_t top);
  // The highest sequence number the window may accept; the daemon raises it only once
  // the number is reserved on disk, so that a restart refuses whatever was accepted
  // before it. No limit unless set.
  void set_accept_limit(uint64_t limit) { accept_limit_.store(limit, std::memory_order_relaxed); }
  uint64_t accept_limit() const { return accept_limit_.load(std::memory_order_relaxed); }
  void set_held(bool held) { held_.store(held, std::memory_order_relaxed); }
  bool held() const { return held_.load(std::memory_order_relaxed); }

  // Infers the full sequence number from the 32 bits on the wire and checks it against
  // the current window without modifying it.
  Candidate check(uint32_t sequence_low) const;
  // Records `sequence` as received. Returns accept exactly once per sequence number.
  Verdict commit(uint64_t sequence) {
    return commit(sequence, [] {});
  }
  // The same, running `on_accept` inside the critical section when accepted: the SA's
  // single-writer counters are updated there.
  template <typename OnAccept>
  Verdict commit(uint64_t sequence, OnAccept&& on_accept) {
    serial_sections::Timer timer(serial_sections::Section::replay_commit, &commit_lock_);
    std::lock_guard guard(commit_lock_);
    timer.acquired();
    const Verdict verdict = commit_locked(sequence);
    if (verdict == Verdict::accept) on_accept();
    return verdict;
  }
  // commit() for several sequence numbers in one acquisition of the lock (a worker's batch
  // of one SA): `sequence(i)` gives the i-th number, `on_verdict(i, verdict)` runs inside
  // the critical section for each.
  template <typename Sequence, typename OnVerdict>
  void commit_each(size_t count, Sequence&& sequence, OnVerdict&& on_verdict) {
    serial_sections::Timer timer(serial_sections::Section::replay_commit, &commit_lock_);
    std::lock_guard guard(commit_lock_);
    timer.acquired();
    for (size_t i = 0; i < count; ++i) on_verdict(i, commit_locked(sequence(i)));
  }

 private:
  Verdict verdict_for(uint64_t sequence, uint64_t top) const;
  Verdict commit_locked(uint64_t sequence);
  uint64_t infer_sequence(uint32_t sequence_low, uint64_t top) const;

  uint32_t size_;
  bool esn_;
  uint32_t block_mask_;  // number of blocks - 1 (a power of two)
  std::atomic<uint64_t> top_{0};
  std::atomic<uint64_t> accept_limit_{UINT64_MAX};
  std::atomic<bool> held_{false};
  std::unique_ptr<std::atomic<uint64_t>[]> blocks_;
  SpinLock commit_lock_;
};

}  // namespace espgw::esp

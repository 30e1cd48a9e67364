// Bounded lock-free multi-producer multi-consumer queue: the one queue every SA's crypto
// work passes through, so it must not take a lock per packet. Each cell carries a
// sequence number that tells producers and consumers whose turn it is (the scheme of
// Dmitry Vyukov's bounded MPMC queue); a push or pop is one CAS on a shared index plus
// one store to the cell.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

namespace espgw::pipeline {

template <typename T>
class MpmcQueue {
 public:
  // `capacity` is rounded up to a power of two.
  explicit MpmcQueue(size_t capacity)
      : mask_(std::bit_ceil(capacity < 2 ? size_t{2} : capacity) - 1),
        cells_(std::make_unique<Cell[]>(mask_ + 1)) {
    for (size_t i = 0; i <= mask_; ++i) cells_[i].turn.store(i, std::memory_order_relaxed);
  }

  size_t capacity() const { return mask_ + 1; }

  bool try_push(T value) {
    size_t position = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position & mask_];
      const size_t turn = cell.turn.load(std::memory_order_acquire);
      const intptr_t difference = static_cast<intptr_t>(turn) - static_cast<intptr_t>(position);
      if (difference == 0) {
        // seq_cst on success (free on x86: the CAS is a locked instruction anyway) lets a
        // producer's later seq_cst load and a consumer's size_approx() form a Dekker
        // pair without fences, which ThreadSanitizer cannot check.
        if (tail_.compare_exchange_weak(position, position + 1, std::memory_order_seq_cst,
                                        std::memory_order_relaxed)) {
          cell.value = std::move(value);
          cell.turn.store(position + 1, std::memory_order_release);
          return true;
        }
      } else if (difference < 0) {
        return false;  // full
      } else {
        position = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  bool try_pop(T& out) {
    size_t position = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& cell = cells_[position & mask_];
      const size_t turn = cell.turn.load(std::memory_order_acquire);
      const intptr_t difference = static_cast<intptr_t>(turn) - static_cast<intptr_t>(position + 1);
      if (difference == 0) {
        // seq_cst on success for the same reason as in try_push: Pipeline::idle() reads
        // the indexes, then the workers' busy flags.
        if (head_.compare_exchange_weak(position, position + 1, std::memory_order_seq_cst,
                                        std::memory_order_relaxed)) {
          out = std::move(cell.value);
          cell.turn.store(position + mask_ + 1, std::memory_order_release);
          return true;
        }
      } else if (difference < 0) {
        return false;  // empty
      } else {
        position = head_.load(std::memory_order_relaxed);
      }
    }
  }

  // Approximate: exact only when no push or pop is in progress. A push whose index
  // reservation precedes this call in the seq_cst order is always counted.
  size_t size_approx() const {
    const size_t tail = tail_.load(std::memory_order_seq_cst);
    const size_t head = head_.load(std::memory_order_seq_cst);
    return tail >= head ? tail - head : 0;
  }

 private:
  struct Cell {
    std::atomic<size_t> turn;
    T value;
  };
  static constexpr size_t kLine = 64;

  const size_t mask_;
  std::unique_ptr<Cell[]> cells_;
  alignas(kLine) std::atomic<size_t> tail_{0};
  alignas(kLine) std::atomic<size_t> head_{0};
};

}  // namespace espgw::pipeline

#include "esp/replay_window.h"

#include <bit>
#include <mutex>
#include <stdexcept>

namespace espgw::esp {

namespace {
constexpr uint64_t kBlockBits = 64;
// Used for ESN inference when replay protection is off: any packet within 2^31 of the
// highest sequence number is placed in the nearest epoch.
constexpr uint64_t kInferenceSpanWithoutWindow = uint64_t{1} << 31;
}  // namespace

ReplayWindow::ReplayWindow(uint32_t size, bool esn) : esn_(esn) {
  if (size > kMaxSize) throw std::invalid_argument("replay window larger than 65536");
  size_ = (size + kBlockBits - 1) / kBlockBits * kBlockBits;
  // One block more than the window needs: the block being filled at the top can then
  // be cleared for reuse without touching any bit that is still inside the window.
  uint32_t blocks = std::bit_ceil(size_ / static_cast<uint32_t>(kBlockBits) + 1);
  block_mask_ = blocks - 1;
  blocks_ = std::make_unique<std::atomic<uint64_t>[]>(blocks);
  for (uint32_t i = 0; i < blocks; ++i) blocks_[i].store(0, std::memory_order_relaxed);
}

uint64_t ReplayWindow::infer_sequence(uint32_t sequence_low, uint64_t top) const {
  if (!esn_) return sequence_low;
  // RFC 4303 Appendix A2.2, with W the window size, Tl/Th the halves of the top.
  const uint64_t window = size_ ? size_ : kInferenceSpanWithoutWindow;
  const uint32_t top_low = static_cast<uint32_t>(top);
  const uint32_t top_high = static_cast<uint32_t>(top >> 32);
  const uint32_t window_bottom = static_cast<uint32_t>(top_low - window + 1);  // mod 2^32
  uint32_t high;
  if (top_low >= window - 1) {
    // Case A: the window lies within one epoch of 2^32.
    high = sequence_low >= window_bottom ? top_high : top_high + 1;
  } else {
    // Case B: the window straddles the epoch boundary.
    if (sequence_low >= window_bottom) {
      if (top_high == 0) return 0;  // would belong before the first epoch: never valid
      high = top_high - 1;
    } else {
      high = top_high;
    }
  }
  return (uint64_t{high} << 32) | sequence_low;
}

ReplayWindow::Verdict ReplayWindow::verdict_for(uint64_t sequence, uint64_t top) const {
  // Sequence number 0 is never sent (RFC 4303 3.3.3: the first packet carries 1).
  if (sequence == 0) return Verdict::outside_window;
  if (held_.load(std::memory_order_relaxed)) return Verdict::held;
  if (sequence > top || size_ == 0) return Verdict::accept;
  if (top - sequence >= size_) return Verdict::outside_window;
  const uint64_t block =
      blocks_[(sequence / kBlockBits) & block_mask_].load(std::memory_order_relaxed);
  return (block >> (sequence % kBlockBits)) & 1 ? Verdict::replayed : Verdict::accept;
}

void ReplayWindow::restore(uint64_t top) {
  top_.store(top, std::memory_order_release);
  if (size_ == 0) return;  // nothing to mark: only ESN inference uses the top
  // Every block is full except the top's own, whose bits above the top stay clear for
  // the numbers after it.
  const uint64_t top_block = top / kBlockBits;
  for (uint32_t i = 0; i <= block_mask_; ++i)
    blocks_[i].store(~uint64_t{0}, std::memory_order_relaxed);
  const uint64_t bit = top % kBlockBits;
  const uint64_t up_to_top = bit == kBlockBits - 1 ? ~uint64_t{0} : (uint64_t{2} << bit) - 1;
  blocks_[top_block & block_mask_].store(up_to_top, std::memory_order_relaxed);
}

ReplayWindow::Candidate ReplayWindow::check(uint32_t sequence_low) const {
  const uint64_t top = top_.load(std::memory_order_acquire);
  const uint64_t sequence = infer_sequence(sequence_low, top);
  return {sequence, verdict_for(sequence, top)};
}

ReplayWindow::Verdict ReplayWindow::commit_locked(uint64_t sequence) {
  const uint64_t top = top_.load(std::memory_order_relaxed);
  const Verdict verdict = verdict_for(sequence, top);
  if (verdict != Verdict::accept) return verdict;
  // Checked here, after authentication, not in the pre-check: the number is then the
  // peer's own, which the reservation may follow however far it jumped (decapsulation
  // asks for that first, InboundSa::reserve_through). A forged number never gets here.
  if (sequence > accept_limit_.load(std::memory_order_relaxed)) return Verdict::unreserved;
  if (size_ == 0) {
    if (sequence > top) top_.store(sequence, std::memory_order_release);
    return Verdict::accept;
  }
  if (sequence > top) {
    // Clear every block the top moves into; their old bits belong to sequence numbers
    // that have now left the window.
    const uint64_t old_block = top / kBlockBits;
    const uint64_t new_block = sequence / kBlockBits;
    const uint64_t to_clear = std::min<uint64_t>(new_block - old_block, block_mask_ + 1);
    for (uint64_t i = 1; i <= to_clear; ++i)
      blocks_[(old_block + i) & block_mask_].store(0, std::memory_order_relaxed);
    top_.store(sequence, std::memory_order_release);
  }
  auto& block = blocks_[(sequence / kBlockBits) & block_mask_];
  block.store(block.load(std::memory_order_relaxed) | (uint64_t{1} << (sequence % kBlockBits)),
              std::memory_order_relaxed);
  return Verdict::accept;
}

}  // namespace espgw::esp

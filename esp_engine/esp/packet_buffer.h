// A packet in a single contiguous buffer with headroom and tailroom, so that ESP can be
// added and removed in place: encapsulation prepends headers and appends the trailer
// around the inner packet, decapsulation strips them again, and no payload byte is copied.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>

namespace espgw::esp {

class PacketBuffer {
 public:
  // Room for outer IPv6 + UDP + ESP header + IV (72 bytes), rounded to a cache line.
  // With the storage cache-line aligned, the inner packet (the part that gets encrypted)
  // starts on a cache line: the AVX-512 cipher code is measurably slower on data that
  // straddles lines.
  static constexpr size_t kDefaultHeadroom = 128;
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kDefaultCapacity = 2048;

  explicit PacketBuffer(size_t capacity = kDefaultCapacity, size_t headroom = kDefaultHeadroom)
      : storage_(static_cast<uint8_t*>(::operator new[](capacity, std::align_val_t{kAlignment}))),
        capacity_(capacity),
        // A buffer smaller than the headroom (tests, tiny scratch buffers) starts empty at
        // its end rather than outside it.
        head_(headroom < capacity ? headroom : capacity),
        length_(0) {}

  uint8_t* data() { return storage_.get() + head_; }
  const uint8_t* data() const { return storage_.get() + head_; }
  size_t size() const { return length_; }
  std::span<uint8_t> bytes() { return {data(), length_}; }
  std::span<const uint8_t> bytes() const { return {data(), length_}; }
  size_t headroom() const { return head_; }
  size_t tailroom() const { return capacity_ - head_ - length_; }
  size_t capacity() const { return capacity_; }

  // Replaces the contents with `packet`, placed after `headroom` bytes. False if it does
  // not fit.
  bool assign(std::span<const uint8_t> packet, size_t headroom = kDefaultHeadroom) {
    if (headroom > capacity_ || packet.size() > capacity_ - headroom) return false;
    head_ = headroom;
    length_ = packet.size();
    if (!packet.empty()) std::memcpy(data(), packet.data(), packet.size());
    return true;
  }

  // Callers check headroom()/tailroom() first; these only assert.
  uint8_t* push_front(size_t n) {
    assert(n <= head_);
    head_ -= n;
    length_ += n;
    return data();
  }
  uint8_t* push_back(size_t n) {
    assert(n <= tailroom());
    uint8_t* tail = data() + length_;
    length_ += n;
    return tail;
  }
  void pull_front(size_t n) {
    assert(n <= length_);
    head_ += n;
    length_ -= n;
  }
  void trim_back(size_t n) {
    assert(n <= length_);
    length_ -= n;
  }
  // Grows the view by `front` bytes before and `back` bytes after it, in one update
  // (separate push_front/push_back calls each rewrite head and length, and the
  // dependent stores stall store-to-load forwarding on the hot path).
  uint8_t* expand(size_t front, size_t back) {
    assert(front <= head_ && back <= tailroom());
    head_ -= front;
    length_ += front + back;
    return data();
  }
  // Sets the view to [offset, offset + length) of the current view.
  void narrow(size_t offset, size_t length) {
    assert(offset + length <= length_);
    head_ += offset;
    length_ = length;
  }

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{kAlignment}); }
  };
  std::unique_ptr<uint8_t[], AlignedDelete> storage_;
  size_t capacity_;
  size_t head_;
  size_t length_;
};

}  // namespace espgw::esp

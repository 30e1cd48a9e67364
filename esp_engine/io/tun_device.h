// The plaintext side: a Linux TUN interface carrying raw IPv4/IPv6 packets (IFF_NO_PI).
// With several queues (IFF_MULTI_QUEUE) the kernel spreads flows over one file
// descriptor per queue, so several reader threads can read without sharing a descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace espgw::io {

class TunDevice {
 public:
  // Creates the interface `name` (or attaches to it) with `queues` queues. Throws
  // std::system_error naming the device on failure. The interface exists while any queue
  // is open (it is not made persistent), so closing the device removes it.
  TunDevice(const std::string& name, unsigned queues);
  ~TunDevice();
  TunDevice(const TunDevice&) = delete;
  TunDevice& operator=(const TunDevice&) = delete;

  const std::string& name() const { return name_; }
  unsigned queues() const { return static_cast<unsigned>(fds_.size()); }
  int fd(unsigned queue) const { return fds_[queue]; }

  // One packet into `buffer`; returns its length, 0 if the queue is non-blocking and
  // empty, or -1 with errno set.
  long read(unsigned queue, uint8_t* buffer, size_t capacity) const;
  // One packet out; false with errno set on failure.
  bool write(unsigned queue, std::span<const uint8_t> packet) const;

 private:
  void close_all();

  std::string name_;
  std::vector<int> fds_;
};

}  // namespace espgw::io

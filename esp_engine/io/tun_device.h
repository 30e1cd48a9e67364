// The plaintext side: a Linux TUN interface carrying raw IPv4/IPv6 packets (IFF_NO_PI).
// With several queues (IFF_MULTI_QUEUE) the kernel spreads flows over one file
// descriptor per queue, so several reader threads can read without sharing a descriptor.
// Optionally with a virtio net header (IFF_VNET_HDR) and checksum/TSO offloads, so reads
// and writes carry 64 KB TCP super-packets (see io/offload.h for their handling).
#pragma once

#include <sys/uio.h>

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
  //
  // With `vnet_header`, every read() returns and every write() takes a VnetHeader
  // (io/offload.h, 10 bytes) before the packet, and the kernel is told we handle partial
  // checksums and TCP segmentation (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6): reads may then
  // be TSO super-packets of up to 64 KB plus the header, so read buffers must be that big.
  TunDevice(const std::string& name, unsigned queues, bool vnet_header = false);
  ~TunDevice();
  TunDevice(const TunDevice&) = delete;
  TunDevice& operator=(const TunDevice&) = delete;

  const std::string& name() const { return name_; }
  unsigned queues() const { return static_cast<unsigned>(fds_.size()); }
  int fd(unsigned queue) const { return fds_[queue]; }
  bool vnet_header() const { return vnet_header_; }

  // One packet into `buffer`; returns its length, 0 if the queue is non-blocking and
  // empty, or -1 with errno set.
  long read(unsigned queue, uint8_t* buffer, size_t capacity) const;
  // One packet out; false with errno set on failure.
  bool write(unsigned queue, std::span<const uint8_t> packet) const;
  // One frame gathered from `pieces` (at most UIO_MAXIOV), as write() of their concatenation.
  bool write_pieces(unsigned queue, std::span<const iovec> pieces) const;

 private:
  void close_all();
  void enable_offloads();

  std::string name_;
  std::vector<int> fds_;
  bool vnet_header_ = false;
};

}  // namespace espgw::io

#include "io/tun_device.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "io/offload.h"

namespace espgw::io {

TunDevice::TunDevice(const std::string& name, unsigned queues, bool vnet_header)
    : name_(name), vnet_header_(vnet_header) {
  if (name.empty() || name.size() >= IFNAMSIZ)
    throw std::invalid_argument("TUN device name must be 1.." + std::to_string(IFNAMSIZ - 1) +
                                " characters: '" + name + "'");
  if (queues == 0) queues = 1;
  for (unsigned q = 0; q < queues; ++q) {
    const int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int error = errno;
      close_all();
      throw std::system_error(error, std::generic_category(), "open /dev/net/tun");
    }
    ifreq request{};
    std::strncpy(request.ifr_name, name.c_str(), IFNAMSIZ - 1);
    request.ifr_flags =
        IFF_TUN | IFF_NO_PI | (queues > 1 ? IFF_MULTI_QUEUE : 0) | (vnet_header ? IFF_VNET_HDR : 0);
    if (ioctl(fd, TUNSETIFF, &request) < 0) {
      const int error = errno;
      ::close(fd);
      close_all();
      throw std::system_error(error, std::generic_category(), "TUNSETIFF " + name);
    }
    name_ = request.ifr_name;
    fds_.push_back(fd);
  }
  if (vnet_header) enable_offloads();
}

// The header size and the offloads belong to the device, not to a queue: set them once,
// after every queue is attached. Without TUN_F_TSO_ECN the kernel segments CWR-marked
// super-packets itself; without TUN_F_UFO/USO4/USO6 it never hands us UDP super-packets.
void TunDevice::enable_offloads() {
  int header_size = static_cast<int>(VnetHeader::kSize);
  if (ioctl(fds_[0], TUNSETVNETHDRSZ, &header_size) < 0) {
    const int error = errno;
    close_all();
    throw std::system_error(error, std::generic_category(), "TUNSETVNETHDRSZ " + name_);
  }
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6;
  if (ioctl(fds_[0], TUNSETOFFLOAD, offloads) < 0) {
    const int error = errno;
    close_all();
    throw std::system_error(error, std::generic_category(),
                            "TUNSETOFFLOAD (TUN_F_CSUM|TUN_F_TSO4|TUN_F_TSO6) on " + name_ +
                                ": the kernel refused TUN checksum/TSO offloads");
  }
}

TunDevice::~TunDevice() {
  close_all();
}

void TunDevice::close_all() {
  for (int fd : fds_) ::close(fd);
  fds_.clear();
}

long TunDevice::read(unsigned queue, uint8_t* buffer, size_t capacity) const {
  const ssize_t n = ::read(fds_[queue], buffer, capacity);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  return static_cast<long>(n);
}

bool TunDevice::write(unsigned queue, std::span<const uint8_t> packet) const {
  return ::write(fds_[queue], packet.data(), packet.size()) == static_cast<ssize_t>(packet.size());
}

bool TunDevice::write_pieces(unsigned queue, std::span<const iovec> pieces) const {
  size_t total = 0;
  for (const iovec& piece : pieces) total += piece.iov_len;
  return ::writev(fds_[queue], pieces.data(), static_cast<int>(pieces.size())) ==
         static_cast<ssize_t>(total);
}

}  // namespace espgw::io

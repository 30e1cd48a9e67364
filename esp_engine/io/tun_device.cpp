#include "io/tun_device.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace espgw::io {

TunDevice::TunDevice(const std::string& name, unsigned queues) : name_(name) {
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
    request.ifr_flags = IFF_TUN | IFF_NO_PI | (queues > 1 ? IFF_MULTI_QUEUE : 0);
    if (ioctl(fd, TUNSETIFF, &request) < 0) {
      const int error = errno;
      ::close(fd);
      close_all();
      throw std::system_error(error, std::generic_category(), "TUNSETIFF " + name);
    }
    name_ = request.ifr_name;
    fds_.push_back(fd);
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

}  // namespace espgw::io

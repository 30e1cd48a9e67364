#include "io/receive_steering.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace espgw::io {

std::string cpu_mask_text(const cpu_set_t& cpus) {
  int highest = -1;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &cpus)) highest = cpu;
  if (highest < 0) return "0";
  std::string text;
  char digits[9];
  for (int group = highest / 32; group >= 0; --group) {
    uint32_t bits = 0;
    for (int bit = 0; bit < 32; ++bit)
      if (CPU_ISSET(group * 32 + bit, &cpus)) bits |= uint32_t{1} << bit;
    // The highest group without leading zeros, the others as full groups of eight digits.
    if (text.empty())
      std::snprintf(digits, sizeof digits, "%x", bits);
    else
      std::snprintf(digits, sizeof digits, "%08x", bits);
    if (!text.empty()) text += ',';
    text += digits;
  }
  return text;
}

namespace {

// Whether rps_cpus text ("0", "00000000,00000000", "3") names no CPU.
bool names_no_cpu(const std::string& text) {
  for (char c : text)
    if (c != '0' && c != ',' && c != '\n') return false;
  return true;
}

std::string read_line(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

}  // namespace

SteeringResult steer_receive_queues(const std::string& sysfs_net, const std::string& device,
                                    unsigned ifindex, const std::string& mask) {
  namespace fs = std::filesystem;
  SteeringResult result;
  const fs::path root = fs::path(sysfs_net) / device;
  const std::string index_text = read_line(root / "ifindex");
  if (index_text.empty()) {
    result.error = root.string() + " not found: /sys is not of espgw's network namespace?";
    return result;
  }
  if (index_text != std::to_string(ifindex)) {
    result.error = root.string() + " has index " + index_text + ", " + device + " here has " +
                   std::to_string(ifindex) + ": /sys is of another network namespace";
    return result;
  }
  std::error_code error;
  std::vector<fs::path> queues;
  for (const auto& entry : fs::directory_iterator(root / "queues", error))
    if (entry.path().filename().string().starts_with("rx-")) queues.push_back(entry.path());
  if (error || queues.empty()) {
    result.error = "no receive queues under " + (root / "queues").string();
    return result;
  }
  for (const auto& queue : queues) {
    const fs::path file = queue / "rps_cpus";
    if (!names_no_cpu(read_line(file))) {
      ++result.queues_kept;
      continue;
    }
    // One write(2), so that the kernel's answer (EINVAL for CPUs it does not have,
    // EACCES, EROFS) is the errno reported.
    const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
    const bool written =
        fd >= 0 && ::write(fd, mask.data(), mask.size()) == static_cast<ssize_t>(mask.size());
    const int write_errno = errno;
    if (fd >= 0) ::close(fd);
    if (!written) {
      result.error =
          "writing " + mask + " to " + file.string() + " failed: " + std::strerror(write_errno);
      return result;
    }
    ++result.queues_set;
  }
  return result;
}

}  // namespace espgw::io

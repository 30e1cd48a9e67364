// The virtio net header that starts every frame of an offloading TUN, and the names of
// the offload results.
#include <cstring>

#include "io/offload.h"

namespace espgw::io {

// struct virtio_net_hdr: u8 flags, u8 gso_type, then four u16 in host order at 2, 4, 6, 8.
// (linux/virtio_net.h itself cannot be included from C++: a member there is named `class`.)
bool VnetHeader::parse(std::span<const uint8_t> frame, VnetHeader& header) {
  if (frame.size() < kSize) return false;
  const uint8_t* p = frame.data();
  header.flags = p[0];
  header.gso_type = p[1];
  std::memcpy(&header.hdr_len, p + 2, 2);
  std::memcpy(&header.gso_size, p + 4, 2);
  std::memcpy(&header.csum_start, p + 6, 2);
  std::memcpy(&header.csum_offset, p + 8, 2);
  return true;
}

void VnetHeader::write(uint8_t* out) const {
  out[0] = flags;
  out[1] = gso_type;
  std::memcpy(out + 2, &hdr_len, 2);
  std::memcpy(out + 4, &gso_size, 2);
  std::memcpy(out + 6, &csum_start, 2);
  std::memcpy(out + 8, &csum_offset, 2);
}

std::string_view offload_result_name(OffloadResult result) {
  switch (result) {
    case OffloadResult::ok:
      return "ok";
    case OffloadResult::stopped:
      return "stopped";
    case OffloadResult::too_short:
      return "too_short";
    case OffloadResult::bad_gso_type:
      return "bad_gso_type";
    case OffloadResult::ecn:
      return "ecn";
    case OffloadResult::zero_gso_size:
      return "zero_gso_size";
    case OffloadResult::bad_ip_header:
      return "bad_ip_header";
    case OffloadResult::ipv6_extension_header:
      return "ipv6_extension_header";
    case OffloadResult::bad_length:
      return "bad_length";
    case OffloadResult::bad_checksum_offsets:
      return "bad_checksum_offsets";
    case OffloadResult::count_:
      break;
  }
  return "unknown";
}

}  // namespace espgw::io

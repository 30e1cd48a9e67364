// TUN offloads: the virtio_net_hdr that starts every TUN read and write once the device
// runs with IFF_VNET_HDR, TSO segmentation of the TCP super-packets the kernel hands us
// (LAN -> tunnel), and TCP coalescing (GRO) of decrypted packets into super-packets the
// kernel segments for us (tunnel -> LAN). Big packets through the TUN are what lets a
// tunnel go fast without a jumbo LAN: one read or write moves up to 64 KB.
//
// Deliberately limited to what we offer the kernel with TUNSETOFFLOAD (TUN_F_CSUM,
// TUN_F_TSO4, TUN_F_TSO6): no UFO/USO, no TSO_ECN, no IPv6 extension headers on GSO packets.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace espgw::io {

// The legacy virtio net header (struct virtio_net_hdr in linux/virtio_net.h). Its 16-bit
// fields are in host byte order: TUN uses the host's order unless TUNSETVNETLE/BE is set,
// and we never set them.
struct VnetHeader {
  // The values of linux/virtio_net.h, which C++ cannot include (a member named `class`).
  static constexpr size_t kSize = 10;       // sizeof(struct virtio_net_hdr)
  static constexpr uint8_t kNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
  static constexpr uint8_t kDataValid = 2;  // VIRTIO_NET_HDR_F_DATA_VALID
  static constexpr uint8_t kGsoNone = 0;    // VIRTIO_NET_HDR_GSO_NONE
  static constexpr uint8_t kGsoTcpV4 = 1;   // VIRTIO_NET_HDR_GSO_TCPV4
  static constexpr uint8_t kGsoUdp = 3;     // VIRTIO_NET_HDR_GSO_UDP
  static constexpr uint8_t kGsoTcpV6 = 4;   // VIRTIO_NET_HDR_GSO_TCPV6
  static constexpr uint8_t kGsoUdpL4 = 5;   // VIRTIO_NET_HDR_GSO_UDP_L4
  static constexpr uint8_t kGsoEcn = 0x80;  // VIRTIO_NET_HDR_GSO_ECN

  uint8_t flags = 0;
  uint8_t gso_type = kGsoNone;
  uint16_t hdr_len = 0;
  uint16_t gso_size = 0;
  uint16_t csum_start = 0;
  uint16_t csum_offset = 0;

  // False if `frame` is shorter than the header.
  static bool parse(std::span<const uint8_t> frame, VnetHeader& header);
  // Writes kSize bytes at `out`.
  void write(uint8_t* out) const;
};

// Why a frame read from the TUN could not be turned into packets. Callers count these.
enum class OffloadResult : uint8_t {
  ok = 0,
  stopped,                // the emit callback returned false; later segments were not emitted
  too_short,              // shorter than the vnet header, or IP/TCP headers beyond the packet
  bad_gso_type,           // unknown gso_type, or UDP/UDP_L4 (UFO/USO), which we never enable
  ecn,                    // GSO_ECN set: we do not offer TUN_F_TSO_ECN
  zero_gso_size,          // a GSO frame with gso_size 0
  bad_ip_header,          // IP version disagrees with gso_type, IHL < 5, not TCP, fragment
  ipv6_extension_header,  // GSO over IPv6 with extension headers: not supported
  bad_length,             // IP total/payload length disagrees with the frame
  bad_checksum_offsets,   // csum_start/csum_offset outside the packet or not at the TCP header
  count_
};
std::string_view offload_result_name(OffloadResult result);

// A non-owning reference to a callable: no allocation and one indirect call, where
// std::function could allocate per call site. The callable must outlive the call.
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
           std::is_invocable_r_v<R, F&, Args...>)
      FunctionRef(F&& callable)  // NOLINT(google-explicit-constructor): used like a lambda
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        call_([](void* object, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(object))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

// Receives one packet (or, from TcpCoalescer, one whole TUN frame). The span is valid only
// during the call. Returning false stops the producer.
using EmitFn = FunctionRef<bool(std::span<const uint8_t>)>;

// Turns frames read from a vnet-header TUN into ordinary IP packets with complete checksums.
// Owns one scratch segment (64 KB + headers) so segmenting allocates nothing. One per thread.
// Asked for the place of the next packet of `length` bytes that a segmenter builds: the
// packet is then built there and emitted from there, so a caller that passes its own
// buffer needs no copy. nullptr: build it in the segmenter's scratch, as without one.
using ClaimFn = FunctionRef<uint8_t*(size_t length)>;

class TsoSegmenter {
 public:
  TsoSegmenter();

  // `frame` as read from the TUN: vnet header, then the packet. With `claim`, each packet
  // the segmenter builds (a TSO segment, a packet whose checksum it completed) is built
  // where claim says; a plain packet is emitted from the frame itself, as without.
  OffloadResult segment_frame(std::span<const uint8_t> frame, EmitFn emit);
  OffloadResult segment_frame(std::span<const uint8_t> frame, EmitFn emit, ClaimFn claim);

  // Jumbo segments: cut TCP super-packets into packets of up to `max_packet` bytes (the
  // tunnel MTU) carrying a whole number of gso_size payloads each, instead of one packet
  // per gso_size. Fewer, larger ESP packets when the WAN's MTU exceeds the LANs'. Only
  // for a peer that re-segments what does not fit its LAN (espgw's TcpCoalescer does);
  // 0 (the default) cuts at gso_size, as the sender's stack would have.
  void set_max_packet(size_t max_packet) { max_packet_ = max_packet; }

  // GSO_NONE: the packet as is, or with its checksum completed when NEEDS_CSUM says the
  // field holds only the pseudo-header sum. GSO_TCPV4/TCPV6: one packet per gso_size bytes
  // of TCP payload, each with its own IP length, IPv4 id (incremented) and header checksum,
  // sequence number, flags (CWR only on the first, FIN and PSH only on the last) and a full
  // TCP checksum (with set_max_packet, a whole number of gso_size payloads per packet). Header
  // lengths come from the packet itself, not hdr_len: the kernel sets hdr_len to the skb's linear
  // length, which can include payload.
  OffloadResult segment(const VnetHeader& header, std::span<const uint8_t> packet, EmitFn emit);

 private:
  OffloadResult segment(const VnetHeader& header, std::span<const uint8_t> packet, EmitFn emit,
                        const ClaimFn* claim);
  // Where the next built packet goes: claim's place, or the scratch.
  uint8_t* place_for(size_t length, const ClaimFn* claim);
  OffloadResult complete_checksum(const VnetHeader& header, std::span<const uint8_t> packet,
                                  EmitFn emit, const ClaimFn* claim);
  OffloadResult split_tcp(const VnetHeader& header, std::span<const uint8_t> packet, EmitFn emit,
                          const ClaimFn* claim);

  std::unique_ptr<uint8_t[]> scratch_;
  size_t max_packet_ = 0;
};

// Write-side GRO. Fed the decrypted inner packets of one batch in delivery order, it merges
// consecutive in-order TCP segments of one flow into a super-packet the kernel segments again
// (or hands whole to a local socket). Everything else passes through unchanged behind a zero
// vnet header. Merging needs: same addresses and ports, sequence numbers that follow on, same
// ACK number, window, TCP options and flags (PSH allowed on the last segment; no SYN, FIN,
// RST, URG or CWR anywhere), same IPv4 header apart from length/id/checksum with ids that
// count up by one (IPv6: same traffic class, flow label, hop limit, no extension headers),
// a payload of exactly gso_size bytes except the last, valid IPv4 and TCP checksums (so a
// segment corrupted before encryption is not silently "repaired" by the recomputed checksum),
// and at most 65535 bytes in all. Output order is the order of each frame's first packet;
// packets of one flow never overtake each other.
class TcpCoalescer {
 public:
  static constexpr size_t kDefaultMaxFlows = 16;
  // A frame's pieces: the vnet header with the first packet's headers, then the packets'
  // bytes. Within UIO_MAXIOV with room to spare, and far above the 47 pieces of a 64 KB
  // frame of 1400-byte segments.
  static constexpr size_t kMaxFramePieces = 256;
  struct Stats {
    uint64_t packets_in = 0;
    uint64_t frames_out = 0;
    uint64_t segments_merged = 0;  // packets appended to an earlier one of their flow
    uint64_t bad_checksum = 0;     // TCP candidates passed through because a checksum failed
    uint64_t resegmented = 0;      // frames sent as GSO with segments cut smaller to fit max_packet
  };
  // Receives one whole TUN frame as pieces in order; valid only during the call. Returning
  // false stops the flush.
  using EmitPiecesFn = FunctionRef<bool(std::span<const iovec>)>;

  explicit TcpCoalescer(size_t max_flows = kDefaultMaxFlows);
  // Copies `packet` (an IPv4 or IPv6 packet, no vnet header) into the batch.
  void add(std::span<const uint8_t> packet);
  // The same without a copy: the frame refers to `packet`'s bytes, which must stay where
  // they are, unchanged, until the next flush (the TUN writer's packets do: it flushes
  // before it releases them). Only the first packet's headers of a merged frame are
  // copied, since finishing the frame rewrites them.
  void add_borrowed(std::span<const uint8_t> packet);
  // The largest packet the kernel may be handed whole: the MTU of the LAN behind the TUN
  // (0, the default: no limit). A TCP packet or super-packet larger than that leaves as a
  // GSO frame whose segments fit it, so that TCP segments a peer cut larger than this
  // gateway's LAN (jumbo segments over a jumbo WAN) are not dropped as too big. A packet
  // with a bad checksum is left alone: segmenting would "repair" it.
  void set_max_packet(size_t max_packet) { max_packet_ = max_packet; }
  // Emits every frame of the batch (vnet header + packet, ready for one write() to the TUN)
  // and starts a new batch. False if `emit` stopped it; the rest of the batch is discarded.
  // Each frame is gathered into one buffer first; flush_pieces hands the pieces over as
  // they are, for one writev() each.
  bool flush(EmitFn emit);
  bool flush_pieces(EmitPiecesFn emit);
  size_t pending_frames() const { return used_; }
  const Stats& stats() const { return stats_; }

 private:
  // Room for the vnet header and the largest IP and TCP headers a merge candidate has.
  static constexpr size_t kHeadCapacity = 10 + 60 + 60;
  struct Item {
    // The vnet header, then (for a frame that may carry several segments) the first
    // packet's IP and TCP headers, which finish() rewrites.
    std::array<uint8_t, kHeadCapacity> head{};
    uint8_t head_length = 0;
    std::vector<iovec> pieces;  // head first, then the packets' bytes
    size_t packet_length = 0;   // the IP packet's length so far (head without vnet + pieces)
    bool ipv6 = false;
    uint8_t ip_header_length = 0;
    uint8_t tcp_header_length = 0;
    uint16_t gso_size = 0;
    uint16_t segments = 0;  // 0: not a TCP packet that may become a GSO frame
    uint32_t next_sequence = 0;
    uint8_t* first_headers() { return head.data() + VnetHeader::kSize; }
  };
  Item& next_item();
  std::span<const uint8_t> keep_copy(std::span<const uint8_t> packet);
  bool try_merge(Item& item, std::span<const uint8_t> packet, size_t ip_header_length,
                 size_t tcp_header_length) const;
  void finish(Item& item);
  size_t max_flows_;
  size_t max_packet_ = 0;
  std::vector<Item> items_;  // slots reused across batches, so buffers keep their capacity
  size_t used_ = 0;
  std::vector<size_t> open_;  // items that may still grow, oldest first
  // add()'s copies, reused across batches: moving a vector keeps its bytes where they are,
  // so the pieces that point into them stay valid while the list grows.
  std::vector<std::vector<uint8_t>> copies_;
  size_t copies_used_ = 0;
  std::vector<uint8_t> gathered_;  // flush()'s contiguous frame
  Stats stats_;
};

}  // namespace espgw::io

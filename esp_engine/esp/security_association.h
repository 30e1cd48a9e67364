// Security associations as the data path sees them: the configuration charon (or a static
// SA file) provides, plus the run-time state each direction needs. An SA is one-way
// (RFC 4301): OutboundSa owns the sequence-number counter, InboundSa the replay window.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "crypto/aead.h"
#include "esp/counters.h"
#include "esp/drop_reason.h"
#include "esp/esp_format.h"
#include "esp/ip_address.h"
#include "esp/outer_header.h"
#include "esp/replay_window.h"
#include "util/spin_lock.h"

namespace espgw::esp {

// The last sequence number an SA may use: 2^32-1 without ESN, 2^64-1 with it (RFC 4303
// forbids cycling: the SA must be rekeyed before).
constexpr uint64_t last_sequence_number(bool esn) {
  return esn ? ~uint64_t{0} : 0xFFFFFFFFull;
}

struct UdpEncapsulation {  // RFC 3948
  uint16_t source_port = 4500;
  uint16_t destination_port = 4500;
};

// Inner packets an inbound SA may carry (RFC 4301 5.2: the decrypted packet must match
// the SA's selectors): addresses, next-layer protocol and ports. Ports are TCP, UDP,
// SCTP and UDP-Lite ports; for ICMP and ICMPv6 the 16-bit value type << 8 | code stands
// in for both ports, as IKEv2 traffic selectors carry it (RFC 7296 3.13.1), and must lie
// in both ranges. A range other than 0-65535 only matches packets whose ports are known:
// never a non-first fragment (RFC 4301 4.4.1.1) or a protocol without ports.
struct TrafficSelector {
  IpPrefix remote;                                           // inner source
  IpPrefix local;                                            // inner destination
  uint8_t protocol = 0;                                      // 0 = any
  uint16_t remote_port_first = 0, remote_port_last = 65535;  // inner source port
  uint16_t local_port_first = 0, local_port_last = 65535;    // inner destination port

  bool any_ports() const {
    return remote_port_first == 0 && remote_port_last == 65535 && local_port_first == 0 &&
           local_port_last == 65535;
  }
};

// What selectors look at in a decrypted inner packet (esp/decap.cpp fills it in place,
// without allocating).
struct InnerFlow {
  IpAddress source;
  IpAddress destination;
  // The next-layer protocol after any IPv6 extension headers; unknown when the header
  // chain could not be followed within the packet.
  uint8_t protocol = 0;
  bool protocol_known = false;
  // False for non-first fragments, protocols without ports and truncated headers.
  bool ports_known = false;
  uint16_t source_port = 0;
  uint16_t destination_port = 0;
};

bool selector_matches(const TrafficSelector& selector, const InnerFlow& flow);

// The fields the outbound path reads for every packet (SPI, ESN, outer addresses, UDP
// ports) come first and share one cache line; the key material (wiped once expanded) and
// the selector list (read after decryption, next to the SA's crypto state) come last.
struct SaConfig {
  uint32_t spi = 0;
  crypto::EncryptionAlgorithm algorithm = crypto::EncryptionAlgorithm::aes_gcm_128;
  // none for an AEAD; AES-CBC needs one.
  crypto::IntegrityAlgorithm integrity = crypto::IntegrityAlgorithm::none;
  bool esn = false;
  // Inbound only; 0 disables anti-replay. Wide by default: a worker preempted for a few ms
  // falls behind its peers by thousands of packets at 400k packets/s, and its packets
  // must still be inside the window when it commits them.
  uint32_t replay_window = 4096;
  std::optional<UdpEncapsulation> udp_encapsulation;
  // Outer header addresses: source = the sender of this SA's packets.
  IpAddress tunnel_source;
  IpAddress tunnel_destination;
  // As charon hands it over: an AEAD's cipher key followed by the 4-byte salt, or AES-CBC's
  // encryption key followed by the integrity key. OutboundSa and InboundSa wipe their copy
  // once SaCrypto has expanded it: their config() has none.
  std::vector<uint8_t> key_material;
  // What crosses between the inner and the outer IP header (DSCP, ECN, DF).
  OuterHeaderPolicy outer_header;
  // Outbound only: TFC padding (RFC 4303 2.7). A smaller inner packet is padded with zeros
  // up to this many bytes before the ESP trailer, so that the ESP payload's size no longer
  // tells how big the packet is; 0 pads nothing. The receiver strips the padding by the
  // inner IP header's length. The daemon caps it at the SA's tunnel MTU; encapsulation pads
  // no further than the buffer's tailroom allows.
  uint32_t tfc_pad_to = 0;
  // Inbound only. Empty accepts any inner packet: the engine's tests and benchmarks use
  // that, but the daemon never installs such an SA (it refuses one without selectors).
  std::vector<TrafficSelector> selectors;
};

// The crypto state shared by both directions: an AEAD's key, salt and AAD/nonce layout, or
// AES-CBC's and the HMAC's keys; and the ESP layout the transform implies.
class SaCrypto {
 public:
  // Throws std::invalid_argument for a key of the wrong length.
  SaCrypto(const SaConfig& config, const crypto::CryptoBackend& backend);
  ~SaCrypto();
  SaCrypto(const SaCrypto&) = delete;
  SaCrypto& operator=(const SaCrypto&) = delete;

  uint32_t spi() const { return spi_; }
  bool esn() const { return esn_; }
  crypto::EncryptionAlgorithm algorithm() const { return algorithm_; }
  const EspLayout& layout() const { return layout_; }

  // Protects the ESP packet at `esp` (SPI first) whose payload (inner packet, padding,
  // pad length, next header) of `payload_length` bytes follows the IV: encrypts it in
  // place and writes the ICV after it. An AEAD's IV must be in place already; AES-CBC's
  // is written here (see CbcHmacKey::make_iv).
  void seal_packet(uint64_t sequence, uint8_t* esp, size_t payload_length) const;
  // seal_packet, but AES-CBC's work may wait in `burst` until burst.flush().
  void seal_packet_in_burst(uint64_t sequence, uint8_t* esp, size_t payload_length,
                            crypto::CbcHmacSealBurst& burst) const;
  // Verifies the ICV and, only if it matches, decrypts the payload in place.
  [[nodiscard]] bool open_packet(uint64_t sequence, uint8_t* esp, size_t payload_length) const;

  // AEAD SAs only. Encrypts an ESP payload (inner packet, padding, pad length, next header) in
  // place and writes the ICV after it. `sequence` is the full 64-bit number (its high half goes
  // into the AAD when ESN is on); `iv` is the 8-byte explicit IV as sent.
  void seal(uint64_t sequence, const uint8_t* iv, uint8_t* data, size_t length, uint8_t* icv) const;
  [[nodiscard]] bool open(uint64_t sequence, const uint8_t* iv, uint8_t* data, size_t length,
                          const uint8_t* icv) const;

 private:
  // AES-CBC: writes the packet's IV; with ESN, the sequence number's high half into
  // `esn_high` (4 bytes), which it returns (null without ESN) for the ICV's input.
  const uint8_t* write_cbc_iv(uint64_t sequence, uint8_t* esp, uint8_t* esn_high) const;
  // Writes the 12-byte nonce and the AAD into 16-byte aligned buffers; returns the AAD
  // length.
  size_t build_inputs(uint64_t sequence, const uint8_t* iv, uint8_t* nonce, uint8_t* aad) const;

  uint32_t spi_;
  bool esn_;
  crypto::EncryptionAlgorithm algorithm_;
  EspLayout layout_;
  uint32_t salt_word_ = 0;                            // the 4 salt bytes as they sit in memory
  std::unique_ptr<crypto::AeadKey> key_;              // an AEAD
  std::unique_ptr<crypto::CbcHmacKey> cbc_hmac_key_;  // or AES-CBC + HMAC
};

class OutboundSa {
 public:
  OutboundSa(const SaConfig& config, const crypto::CryptoBackend& backend);

  const SaConfig& config() const { return config_; }
  const SaCrypto& crypto() const { return crypto_; }
  SaCounters& counters() { return counters_; }
  const SaCounters& counters() const { return counters_; }

  // Takes the next sequence number for a packet of `inner_bytes` and counts the packet,
  // under the SA's lock. Refuses with sequence_exhausted once the space is used up (2^32-1
  // without ESN, 2^64-1 with it: RFC 4303 forbids cycling, the SA must be rekeyed), with
  // sa_held while the SA is held, with sequence_unreserved beyond the ceiling, and with
  // queue_full if the number would exceed `limit` (the pipeline's in-flight bound).
  DropReason take_sequence(uint64_t inner_bytes, uint64_t limit, uint64_t& sequence);
  // take_sequence for a batch: under one acquisition of the lock, takes consecutive
  // numbers for the first `taken` of `count` packets, as many as every bound allows,
  // counts them (`bytes_through[i]`: the inner bytes of the first i packets, i <= count),
  // and returns the first number (0 if none). `refused` is why the rest got none (none if
  // all got one). The numbers are dense: nothing is reserved beyond what is taken.
  uint64_t take_sequences(size_t count, const uint64_t* bytes_through, uint64_t limit,
                          size_t& taken, DropReason& refused);
  // What take_sequence would refuse for a packet that comes after `pending` others not
  // numbered yet, read without the lock: a submitter's early answer. Only take_sequence
  // and take_sequences decide; this never takes or counts anything.
  DropReason sequence_refusal(uint64_t pending, uint64_t limit);
  // Highest sequence number handed out so far.
  uint64_t last_sequence() const;

  // The highest sequence number the SA may hand out: the daemon raises it only once the
  // number is reserved on disk, so that a restart never hands out a number twice. No
  // limit unless set.
  void set_sequence_ceiling(uint64_t ceiling);
  uint64_t sequence_ceiling() const { return sequence_ceiling_.load(std::memory_order_relaxed); }
  // A held SA hands out nothing (sa_held) until released: its counter state is unknown.
  void set_held(bool held);
  bool held() const { return held_.load(std::memory_order_relaxed); }
  // Holds the SA for good and returns the last number it handed out, under the SA's lock:
  // a successor under the same key continues after it without a number in between
  // being taken by a packet still on its way through the old SA.
  uint64_t seal();
  uint16_t next_ip_id() {
    return static_cast<uint16_t>(ip_id_.fetch_add(1, std::memory_order_relaxed));
  }
  // The first of `count` consecutive IPv4 IDs (a numbered batch takes them at once).
  uint16_t next_ip_ids(uint32_t count) {
    return static_cast<uint16_t>(ip_id_.fetch_add(count, std::memory_order_relaxed));
  }

  // Lowers the TFC padding target to `max_inner_length` (the SA's tunnel MTU). Only
  // before the SA carries packets: the data path reads the config without a lock.
  void cap_tfc_padding(uint32_t max_inner_length) {
    config_.tfc_pad_to = std::min(config_.tfc_pad_to, max_inner_length);
  }

  // For tests and rekey tooling: the next packet gets sequence number `next`.
  void set_next_sequence(uint64_t next);

 private:
  // Read by every packet: the config's first line (SPI, outer addresses) and crypto_.
  SaConfig config_;
  SaCrypto crypto_;
  // Written by every packet, on a line of their own: the lock, the counter and the packet
  // and byte totals counted under the lock (SaCounters puts them first).
  alignas(64) SpinLock sequence_lock_;
  // Written under sequence_lock_; 0 means exhausted (0 is never a valid number).
  std::atomic<uint64_t> next_sequence_{1};
  std::atomic<uint64_t> sequence_ceiling_{UINT64_MAX};
  std::atomic<bool> held_{false};
  std::atomic<uint32_t> ip_id_{0};
  SaCounters counters_;
};

class alignas(64) InboundSa {
 public:
  InboundSa(const SaConfig& config, const crypto::CryptoBackend& backend);

  uint32_t spi() const { return config_.spi; }
  const SaConfig& config() const { return config_; }
  const SaCrypto& crypto() const { return crypto_; }
  ReplayWindow& replay_window() { return replay_window_; }
  SaCounters& counters() { return counters_; }
  const SaCounters& counters() const { return counters_; }

  // True when the decrypted inner packet's addresses fall inside one of the selectors.
  // Address-only check: a selector with a protocol or ports never matches here.
  bool selectors_allow(const IpAddress& inner_source, const IpAddress& inner_destination) const;
  // True when the inner packet (addresses, protocol, ports) matches one of the selectors.
  bool selectors_allow(const InnerFlow& flow) const;

  // Makes the replay window's accept limit cover `sequence` (an authentic number beyond
  // it: a peer that jumped ahead, a burst faster than the reservations), blocking until
  // the reservation is on disk; false if it could not. Set by the daemon before the SA
  // carries traffic; without one, such packets are refused (sequence-unreserved).
  using Reserver = std::function<bool(uint64_t sequence)>;
  void set_reserver(Reserver reserver) { reserver_ = std::move(reserver); }
  bool reserve_through(uint64_t sequence) const { return reserver_ && reserver_(sequence); }

 private:
  // Per packet: the selector list at the config's end and crypto_ share a line; the
  // replay window's lock and edge and the packet and byte totals counted under that lock
  // (SaCounters puts them first) share the next.
  SaConfig config_;
  SaCrypto crypto_;
  ReplayWindow replay_window_;
  SaCounters counters_;
  Reserver reserver_;  // rarely called: after the per-packet lines
};

}  // namespace espgw::esp

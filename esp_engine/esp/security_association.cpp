#include "esp/security_association.h"

#include <immintrin.h>
#include <string.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "util/byte_order.h"
#include "util/serial_sections.h"

namespace espgw::esp {

namespace {
constexpr uint64_t kLastSequenceWithoutEsn = last_sequence_number(false);
constexpr uint64_t kLastSequenceWithEsn = last_sequence_number(true);

const SaConfig& validated(const SaConfig& config) {
  if (config.spi == 0) throw std::invalid_argument("SPI 0 is reserved");
  if (!crypto::valid_transform(config.algorithm, config.integrity))
    throw std::invalid_argument(std::string(crypto::algorithm_name(config.algorithm)) + " with " +
                                std::string(crypto::integrity_name(config.integrity)) +
                                ": an AEAD takes no integrity algorithm, AES-CBC needs one");
  const size_t expected = crypto::key_material_length(config.algorithm, config.integrity);
  if (config.key_material.size() != expected)
    throw std::invalid_argument("key material for " +
                                std::string(crypto::algorithm_name(config.algorithm)) +
                                " must be " + std::to_string(expected) +
                                (crypto::is_aead(config.algorithm)
                                     ? " bytes (key followed by the 4-byte salt), got "
                                     : " bytes (encryption key followed by integrity key), got ") +
                                std::to_string(config.key_material.size()));
  if (config.tunnel_source.family != config.tunnel_destination.family ||
      (config.tunnel_source.family != 4 && config.tunnel_source.family != 6))
    throw std::invalid_argument("tunnel endpoints must both be IPv4 or both IPv6");
  return config;
}
}  // namespace

SaCrypto::SaCrypto(const SaConfig& config, const crypto::CryptoBackend& backend)
    : spi_(config.spi),
      esn_(config.esn),
      algorithm_(config.algorithm),
      layout_(esp_layout(config.algorithm, config.integrity)) {
  if (!crypto::valid_transform(config.algorithm, config.integrity) ||
      config.key_material.size() != crypto::key_material_length(config.algorithm, config.integrity))
    throw std::invalid_argument("key material has the wrong length");
  const size_t key_length = crypto::cipher_key_length(config.algorithm);
  const std::span<const uint8_t> material(config.key_material);
  if (!crypto::is_aead(config.algorithm)) {
    cbc_hmac_key_ =
        backend.make_cbc_hmac_key(config.algorithm, config.integrity, material.first(key_length),
                                  material.subspan(key_length));
    return;
  }
  memcpy(&salt_word_, config.key_material.data() + key_length, crypto::kSaltLength);
  key_ = backend.make_key(config.algorithm, material.first(key_length));
}

SaCrypto::~SaCrypto() {
  explicit_bzero(&salt_word_, sizeof salt_word_);
}

namespace {

// The nonce and AAD are built in registers and written with one aligned 16-byte store
// each. ipsec-mb's AVX-512 code reads them with 16-byte masked loads right away; built
// from several small stores they stall store-to-load forwarding, which measured ~11 ns
// per packet and direction (more than everything else the engine does around the cipher).
struct alignas(16) CipherInputs {
  uint8_t nonce[16];  // salt || explicit IV, then 4 unused bytes
  uint8_t aad[16];    // SPI || seq (8 bytes) or SPI || seq-high || seq-low (12 bytes)
};

void store16(uint8_t* out, uint64_t low, uint64_t high) {
  _mm_store_si128(reinterpret_cast<__m128i*>(out),
                  _mm_set_epi64x(static_cast<long long>(high), static_cast<long long>(low)));
}

}  // namespace

size_t SaCrypto::build_inputs(uint64_t sequence, const uint8_t* iv, uint8_t* nonce,
                              uint8_t* aad) const {
  // Little-endian words laid out so the bytes land in wire order.
  uint64_t iv_word;
  memcpy(&iv_word, iv, 8);
  store16(nonce, uint64_t{salt_word_} | (iv_word << 32), iv_word >> 32);
  // RFC 4106 5 / RFC 7634 3: SPI || seq (32 bits), or SPI || seq-high || seq-low with ESN.
  const uint64_t spi = __builtin_bswap32(spi_);
  if (esn_) {
    const uint64_t seq_be = __builtin_bswap64(sequence);
    store16(aad, spi | (seq_be << 32), seq_be >> 32);
    return 12;
  }
  store16(aad, spi | (uint64_t{__builtin_bswap32(static_cast<uint32_t>(sequence))} << 32), 0);
  return 8;
}

void SaCrypto::seal(uint64_t sequence, const uint8_t* iv, uint8_t* data, size_t length,
                    uint8_t* icv) const {
  CipherInputs inputs;
  const size_t aad_length = build_inputs(sequence, iv, inputs.nonce, inputs.aad);
  key_->seal(inputs.nonce, inputs.aad, aad_length, data, data, length, icv);
}

bool SaCrypto::open(uint64_t sequence, const uint8_t* iv, uint8_t* data, size_t length,
                    const uint8_t* icv) const {
  CipherInputs inputs;
  const size_t aad_length = build_inputs(sequence, iv, inputs.nonce, inputs.aad);
  return key_->open(inputs.nonce, inputs.aad, aad_length, data, data, length, icv);
}

void SaCrypto::seal_packet(uint64_t sequence, uint8_t* esp, size_t payload_length) const {
  uint8_t* payload = esp + kEspHeaderLength + layout_.iv_length;
  if (key_) {
    seal(sequence, esp + kEspHeaderLength, payload, payload_length, payload + payload_length);
    return;
  }
  uint8_t esn_high[crypto::kEsnHighLength];
  cbc_hmac_key_->seal(esp, payload_length, write_cbc_iv(sequence, esp, esn_high));
}

void SaCrypto::seal_packet_in_burst(uint64_t sequence, uint8_t* esp, size_t payload_length,
                                    crypto::CbcHmacSealBurst& burst) const {
  if (key_) {
    seal_packet(sequence, esp, payload_length);
    return;
  }
  uint8_t esn_high[crypto::kEsnHighLength];
  cbc_hmac_key_->seal_in_burst(burst, esp, payload_length, write_cbc_iv(sequence, esp, esn_high));
}

const uint8_t* SaCrypto::write_cbc_iv(uint64_t sequence, uint8_t* esp, uint8_t* esn_high) const {
  cbc_hmac_key_->make_iv(sequence, esp + kEspHeaderLength);
  if (!esn_) return nullptr;
  store_be32(esn_high, static_cast<uint32_t>(sequence >> 32));
  return esn_high;
}

bool SaCrypto::open_packet(uint64_t sequence, uint8_t* esp, size_t payload_length) const {
  uint8_t* payload = esp + kEspHeaderLength + layout_.iv_length;
  if (key_)
    return open(sequence, esp + kEspHeaderLength, payload, payload_length,
                payload + payload_length);
  uint8_t esn_high[crypto::kEsnHighLength];
  store_be32(esn_high, static_cast<uint32_t>(sequence >> 32));
  return cbc_hmac_key_->open(esp, payload_length, esn_ ? esn_high : nullptr);
}

// The expanded key in SaCrypto is all the SA needs: the raw key material is wiped rather
// than kept in a second place (and it costs memory per SA at thousands of SAs).
namespace {
void forget_key_material(SaConfig& config) {
  explicit_bzero(config.key_material.data(), config.key_material.size());
  config.key_material.clear();
  config.key_material.shrink_to_fit();
}
}  // namespace

OutboundSa::OutboundSa(const SaConfig& config, const crypto::CryptoBackend& backend)
    : config_(validated(config)), crypto_(config_, backend) {
  forget_key_material(config_);
}

DropReason OutboundSa::take_sequence(uint64_t inner_bytes, uint64_t limit, uint64_t& sequence) {
  const uint64_t last = config_.esn ? kLastSequenceWithEsn : kLastSequenceWithoutEsn;
  serial_sections::Timer timer(serial_sections::Section::sequence, &sequence_lock_);
  std::lock_guard guard(sequence_lock_);
  timer.acquired();
  const uint64_t next = next_sequence_.load(std::memory_order_relaxed);
  if (next == 0 || next > last) return DropReason::sequence_exhausted;
  if (held_.load(std::memory_order_relaxed)) return DropReason::sa_held;
  if (next > sequence_ceiling_.load(std::memory_order_relaxed)) {
    // Wakes the state keeper even when no number was taken since it last looked.
    counters_.activity().note();
    return DropReason::sequence_unreserved;
  }
  if (next > limit) return DropReason::queue_full;
  // Park at 0 instead of wrapping: a wrapped counter would hand out a number twice.
  next_sequence_.store(next == last ? 0 : next + 1, std::memory_order_relaxed);
  counters_.count_packet_locked(inner_bytes);
  sequence = next;
  return DropReason::none;
}

uint64_t OutboundSa::take_sequences(size_t count, const uint64_t* bytes_through, uint64_t limit,
                                    size_t& taken, DropReason& refused) {
  const uint64_t last = config_.esn ? kLastSequenceWithEsn : kLastSequenceWithoutEsn;
  taken = 0;
  refused = DropReason::none;
  if (count == 0) return 0;
  serial_sections::Timer timer(serial_sections::Section::sequence, &sequence_lock_);
  std::lock_guard guard(sequence_lock_);
  timer.acquired();
  const uint64_t next = next_sequence_.load(std::memory_order_relaxed);
  if (next == 0 || next > last) {
    refused = DropReason::sequence_exhausted;
    return 0;
  }
  if (held_.load(std::memory_order_relaxed)) {
    refused = DropReason::sa_held;
    return 0;
  }
  // The same bounds as take_sequence, in its order, each allowing numbers through it:
  // the space, the persisted ceiling, the in-flight limit.
  const uint64_t ceiling = sequence_ceiling_.load(std::memory_order_relaxed);
  uint64_t through = next + (count - 1);  // count <= a batch: no overflow below 2^64 - 32
  if (through < next || through > last) {
    through = last;
    refused = DropReason::sequence_exhausted;
  }
  if (through > ceiling) {
    through = ceiling;
    refused = DropReason::sequence_unreserved;
    counters_.activity().note();  // wakes the state keeper, as take_sequence does
  }
  if (through > limit) {
    through = limit;
    refused = DropReason::queue_full;
  }
  if (through < next) return 0;
  taken = static_cast<size_t>(through - next + 1);
  // Park at 0 instead of wrapping: a wrapped counter would hand out a number twice.
  next_sequence_.store(through == last ? 0 : through + 1, std::memory_order_relaxed);
  counters_.count_packets_locked(taken, bytes_through[taken]);
  return next;
}

DropReason OutboundSa::sequence_refusal(uint64_t pending, uint64_t limit) {
  const uint64_t last = config_.esn ? kLastSequenceWithEsn : kLastSequenceWithoutEsn;
  const uint64_t next = next_sequence_.load(std::memory_order_relaxed);
  const uint64_t own = next + pending;
  if (next == 0 || next > last || own < next || own > last) return DropReason::sequence_exhausted;
  if (held_.load(std::memory_order_relaxed)) return DropReason::sa_held;
  if (own > sequence_ceiling_.load(std::memory_order_relaxed)) {
    counters_.activity().note();
    return DropReason::sequence_unreserved;
  }
  if (own > limit) return DropReason::queue_full;
  return DropReason::none;
}

void OutboundSa::set_next_sequence(uint64_t next) {
  std::lock_guard guard(sequence_lock_);
  next_sequence_.store(next, std::memory_order_relaxed);
  counters_.activity().note();
}

void OutboundSa::set_sequence_ceiling(uint64_t ceiling) {
  std::lock_guard guard(sequence_lock_);
  sequence_ceiling_.store(ceiling, std::memory_order_relaxed);
}

void OutboundSa::set_held(bool held) {
  std::lock_guard guard(sequence_lock_);
  held_.store(held, std::memory_order_relaxed);
}

uint64_t OutboundSa::seal() {
  std::lock_guard guard(sequence_lock_);
  held_.store(true, std::memory_order_relaxed);
  return last_sequence();
}

uint64_t OutboundSa::last_sequence() const {
  const uint64_t next = next_sequence_.load(std::memory_order_relaxed);
  return next == 0 ? (config_.esn ? kLastSequenceWithEsn : kLastSequenceWithoutEsn) : next - 1;
}

InboundSa::InboundSa(const SaConfig& config, const crypto::CryptoBackend& backend)
    : config_(validated(config)),
      crypto_(config_, backend),
      replay_window_(config_.replay_window, config_.esn) {
  forget_key_material(config_);
}

bool InboundSa::selectors_allow(const IpAddress& inner_source,
                                const IpAddress& inner_destination) const {
  InnerFlow flow;
  flow.source = inner_source;
  flow.destination = inner_destination;
  return selectors_allow(flow);
}

bool selector_matches(const TrafficSelector& selector, const InnerFlow& flow) {
  if (!selector.remote.contains(flow.source) || !selector.local.contains(flow.destination))
    return false;
  if (selector.protocol == 0 && selector.any_ports()) return true;
  if (selector.protocol != 0 && (!flow.protocol_known || flow.protocol != selector.protocol))
    return false;
  if (selector.any_ports()) return true;
  // RFC 4301 4.4.1.1: a packet without known ports (a non-first fragment, a protocol
  // without ports, a truncated header) matches only "any" ports.
  if (!flow.ports_known) return false;
  return flow.source_port >= selector.remote_port_first &&
         flow.source_port <= selector.remote_port_last &&
         flow.destination_port >= selector.local_port_first &&
         flow.destination_port <= selector.local_port_last;
}

bool InboundSa::selectors_allow(const InnerFlow& flow) const {
  if (config_.selectors.empty()) return true;
  for (const auto& selector : config_.selectors)
    if (selector_matches(selector, flow)) return true;
  return false;
}

}  // namespace espgw::esp

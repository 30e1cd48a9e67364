// VICI packets and their framing on a stream (strongSwan's vici/README.md, "Transport
// protocol" and "Packet layer"): a 32-bit big-endian length, a type byte, a name for the
// named types, then a message. Used alike by the client (to charon) and the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vici_bridge/vici_message.h"

namespace espgw::vici {

enum class PacketType : uint8_t {
  cmd_request = 0,
  cmd_response = 1,
  cmd_unknown = 2,
  event_register = 3,
  event_unregister = 4,
  event_confirm = 5,
  event_unknown = 6,
  event = 7,
};

// cmd_request, event_register, event_unregister and event carry a name.
bool is_named(PacketType type);
const char* to_string(PacketType type);

struct Packet {
  PacketType type = PacketType::cmd_request;
  std::string name;  // only for named types; empty otherwise
  Message message;   // empty for the types that carry none on the wire

  bool operator==(const Packet&) const = default;
};

// The largest packet (type, name and message; the length prefix not counted), as in
// strongSwan, which drops anything bigger.
constexpr size_t kMaxPacketSize = 512 * 1024;

// Including the 4-byte length prefix. Throws std::length_error where encode_message
// does, for a named type with an empty or over-long name, or a packet over
// kMaxPacketSize; std::invalid_argument for a name on an unnamed type.
std::vector<uint8_t> encode_packet(const Packet& packet);

struct PacketResult {
  std::optional<Packet> packet;  // present exactly when error is empty
  std::string error;             // never contains names or values
};
// One packet without its length prefix: what a transport frame holds.
PacketResult decode_packet(std::span<const uint8_t> frame);

// Incremental decoder for a byte stream: feed() what read() returned, then take packets.
// A stream error is final, since framing cannot be recovered after it.
class FrameReader {
 public:
  FrameReader() = default;
  FrameReader(const FrameReader&) = delete;
  FrameReader& operator=(const FrameReader&) = delete;
  FrameReader(FrameReader&&) = default;
  FrameReader& operator=(FrameReader&& other) noexcept;
  ~FrameReader();  // wipes what it still holds
  void feed(std::span<const uint8_t> bytes);
  // The next complete packet, or nullopt if more bytes are needed or the stream is broken
  // (then failed() is true and error() says why; the connection must be closed). An
  // oversized length prefix fails at once, before its body arrives.
  std::optional<Packet> next();
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Bytes fed but not yet returned as packets.
  size_t buffered() const { return buffer_.size() - head_; }

 private:
  std::vector<uint8_t> buffer_;
  size_t head_ = 0;  // consumed bytes at the front, dropped lazily to avoid a copy per packet
  std::string error_;
};

}  // namespace espgw::vici

// VICI packet encoding and stream framing (see vici_packet.h).
#include "vici_bridge/vici_packet.h"

#include <string.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace espgw::vici {

namespace {

constexpr size_t kLengthPrefix = 4;
constexpr uint8_t kLastType = static_cast<uint8_t>(PacketType::event);

}  // namespace

bool is_named(PacketType type) {
  switch (type) {
    case PacketType::cmd_request:
    case PacketType::event_register:
    case PacketType::event_unregister:
    case PacketType::event:
      return true;
    default:
      return false;
  }
}

const char* to_string(PacketType type) {
  switch (type) {
    case PacketType::cmd_request:
      return "CMD_REQUEST";
    case PacketType::cmd_response:
      return "CMD_RESPONSE";
    case PacketType::cmd_unknown:
      return "CMD_UNKNOWN";
    case PacketType::event_register:
      return "EVENT_REGISTER";
    case PacketType::event_unregister:
      return "EVENT_UNREGISTER";
    case PacketType::event_confirm:
      return "EVENT_CONFIRM";
    case PacketType::event_unknown:
      return "EVENT_UNKNOWN";
    case PacketType::event:
      return "EVENT";
  }
  return "unknown packet type";
}

std::vector<uint8_t> encode_packet(const Packet& packet) {
  const bool named = is_named(packet.type);
  if (named && (packet.name.empty() || packet.name.size() > 255)) {
    throw std::length_error(std::string("VICI ") + to_string(packet.type) + " name of " +
                            std::to_string(packet.name.size()) + " bytes (must be 1 to 255)");
  }
  if (!named && !packet.name.empty()) {
    throw std::invalid_argument(std::string("VICI ") + to_string(packet.type) + " carries no name");
  }
  const std::vector<uint8_t> message = encode_message(packet.message);
  const size_t length = 1 + (named ? 1 + packet.name.size() : 0) + message.size();
  if (length > kMaxPacketSize) {
    throw std::length_error("VICI packet of " + std::to_string(length) +
                            " bytes exceeds the 512 KiB limit");
  }
  std::vector<uint8_t> out;
  out.reserve(kLengthPrefix + length);
  for (size_t i = 0; i < kLengthPrefix; ++i) {
    out.push_back(static_cast<uint8_t>(length >> (8 * (kLengthPrefix - 1 - i))));
  }
  out.push_back(static_cast<uint8_t>(packet.type));
  if (named) {
    out.push_back(static_cast<uint8_t>(packet.name.size()));
    out.insert(out.end(), packet.name.begin(), packet.name.end());
  }
  out.insert(out.end(), message.begin(), message.end());
  return out;
}

PacketResult decode_packet(std::span<const uint8_t> frame) {
  if (frame.empty()) return {std::nullopt, "empty packet"};
  if (frame[0] > kLastType) {
    return {std::nullopt, "unknown packet type " + std::to_string(frame[0])};
  }
  Packet packet;
  packet.type = static_cast<PacketType>(frame[0]);
  size_t pos = 1;
  if (is_named(packet.type)) {
    if (frame.size() < 2 || frame[1] == 0 || frame.size() - 2 < frame[1]) {
      return {std::nullopt, std::string("truncated or unnamed ") + to_string(packet.type)};
    }
    packet.name.assign(reinterpret_cast<const char*>(frame.data() + 2), frame[1]);
    pos = 2 + frame[1];
  }
  MessageResult message = decode_message(frame.subspan(pos));
  if (!message.message) {
    // Offsets in the error are made relative to the packet, which is what a capture shows.
    return {std::nullopt, std::string(to_string(packet.type)) + " message at packet offset " +
                              std::to_string(pos) + ": " + message.error};
  }
  packet.message = std::move(*message.message);
  return {std::move(packet), {}};
}

// The buffer holds requests as they came, SA keys included (espgw's add-sa): bytes are
// wiped as soon as they are decoded or moved, and a smaller buffer is wiped before it
// is given up for a larger one.
namespace {
void wipe(uint8_t* bytes, size_t length) {
  if (length != 0) explicit_bzero(bytes, length);
}
}  // namespace

FrameReader::~FrameReader() {
  wipe(buffer_.data(), buffer_.size());
}

FrameReader& FrameReader::operator=(FrameReader&& other) noexcept {
  if (this != &other) {
    wipe(buffer_.data(), buffer_.size());
    buffer_ = std::move(other.buffer_);
    head_ = std::exchange(other.head_, 0);
    error_ = std::move(other.error_);
  }
  return *this;
}

void FrameReader::feed(std::span<const uint8_t> bytes) {
  if (failed()) return;
  if (head_ > 0 && head_ >= buffer_.size() / 2) {
    const size_t old_size = buffer_.size();
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(head_));
    head_ = 0;
    // erase() left copies of the moved tail beyond the new end, in the same allocation.
    wipe(buffer_.data() + buffer_.size(), old_size - buffer_.size());
  }
  if (buffer_.size() + bytes.size() > buffer_.capacity()) {
    std::vector<uint8_t> larger;
    larger.reserve(std::max(buffer_.capacity() * 2, buffer_.size() + bytes.size()));
    larger.assign(buffer_.begin(), buffer_.end());
    wipe(buffer_.data(), buffer_.size());
    buffer_.swap(larger);
  }
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
}

std::optional<Packet> FrameReader::next() {
  if (failed()) return std::nullopt;
  const std::span<const uint8_t> pending = std::span(buffer_).subspan(head_);
  if (pending.size() < kLengthPrefix) return std::nullopt;
  size_t length = 0;
  for (size_t i = 0; i < kLengthPrefix; ++i) length = length << 8 | pending[i];
  if (length > kMaxPacketSize) {
    error_ = "packet length " + std::to_string(length) + " exceeds the 512 KiB limit";
    return std::nullopt;
  }
  if (pending.size() - kLengthPrefix < length) return std::nullopt;
  PacketResult result = decode_packet(pending.subspan(kLengthPrefix, length));
  if (!result.packet) {
    error_ = std::move(result.error);
    return std::nullopt;
  }
  wipe(buffer_.data() + head_, kLengthPrefix + length);  // decoded: the message has it now
  head_ += kLengthPrefix + length;
  if (head_ == buffer_.size()) {
    buffer_.clear();
    head_ = 0;
  }
  return std::move(result.packet);
}

}  // namespace espgw::vici

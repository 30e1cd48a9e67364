// The VICI codec on arbitrary bytes, as a message and as a stream cut in two at a point
// taken from the first byte. Whatever decodes must encode and decode back to itself, and
// the stream reader must agree with itself however the stream was split.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "vici_bridge/vici_message.h"
#include "vici_bridge/vici_packet.h"

using namespace espgw::vici;

namespace {

void check_round_trip(const Message& message) {
  const std::vector<uint8_t> bytes = encode_message(message);
  const MessageResult again = decode_message(bytes);
  if (!again.message || !(*again.message == message)) abort();
}

struct StreamOutcome {
  std::vector<Packet> packets;
  bool failed = false;
};

StreamOutcome read_stream(std::span<const uint8_t> stream, size_t split) {
  FrameReader reader;
  StreamOutcome outcome;
  for (std::span<const uint8_t> part : {stream.first(split), stream.subspan(split)}) {
    reader.feed(part);
    while (auto packet = reader.next()) outcome.packets.push_back(std::move(*packet));
  }
  outcome.failed = reader.failed();
  if (outcome.failed && reader.error().empty()) abort();
  return outcome;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  const MessageResult result = decode_message(input);
  if (result.message.has_value() == !result.error.empty()) abort();
  if (result.message) {
    check_round_trip(*result.message);
    // Byte-exact, too: the decoder keeps every entry in order.
    if (encode_message(*result.message) != std::vector<uint8_t>(input.begin(), input.end())) {
      abort();
    }
  }

  if (size == 0) return 0;
  const size_t split = data[0] % size;
  const StreamOutcome split_read = read_stream(input, split);
  const StreamOutcome whole_read = read_stream(input, size);
  if (split_read.failed != whole_read.failed || split_read.packets != whole_read.packets) abort();
  for (const Packet& packet : whole_read.packets) {
    check_round_trip(packet.message);
    const std::vector<uint8_t> bytes = encode_packet(packet);
    FrameReader reader;
    reader.feed(bytes);
    const auto again = reader.next();
    if (!again || !(*again == packet) || reader.buffered() != 0) abort();
  }
  return 0;
}

// Arbitrary bytes as an outbound packet from the LAN: encapsulation either refuses it
// with a counted reason or produces an ESP packet that decapsulates to the same bytes
// (with or without TFC padding).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "esp/decap.h"
#include "esp/encap.h"
#include "esp/wire.h"
#include "fuzz/fuzz_sas.h"
#include "support/sequential_esp.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t spi = fuzz::kFirstFuzzSpi + (data[0] % fuzz::kFuzzSaCount);
  esp::SaConfig config = fuzz::fuzz_sa_config(spi);
  // TFC padding on half the inputs: beyond what the buffer's tailroom holds for short
  // packets, so both the full and the cut-short padding are exercised.
  if (data[0] & 0x80) config.tfc_pad_to = 600;
  esp::OutboundSa out(config, crypto::ipsec_mb_backend());
  test::InboundSaTable table;
  table.add(std::make_shared<esp::InboundSa>(config, crypto::openssl_backend()));
  data += 1;
  size -= 1;

  esp::PacketBuffer packet(size + 256);
  if (!packet.assign({data, size})) abort();
  const esp::DropReason reason = test::encapsulate(out, packet);
  if (reason != esp::DropReason::none) {
    if (out.counters().drops(reason) != 1 || packet.size() != size) abort();
    return 0;
  }
  esp::EngineCounters engine;
  const auto result = test::decapsulate_wire(table, engine, packet);
  if (result.reason != esp::DropReason::none) abort();
  if (packet.size() != size || std::memcmp(packet.data(), data, size) != 0) abort();
  return 0;
}

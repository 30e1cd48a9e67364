// Arbitrary bytes as the decrypted ESP payload: the input is sealed into an authentic
// ESP packet first, so the fuzzer reaches everything after ICV verification: the
// replay commit, padding, next header, inner version and length, TFC padding and the
// traffic selector check.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "esp/checksum.h"
#include "esp/decap.h"
#include "esp/ecn.h"
#include "esp/esp_format.h"
#include "fuzz/fuzz_sas.h"
#include "support/sequential_esp.h"
#include "util/byte_order.h"

using namespace espgw;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t spi = fuzz::kFirstFuzzSpi + (data[0] & 3);
  esp::SaConfig config = fuzz::fuzz_sa_config(spi);
  if (data[0] & 4)
    config.selectors.push_back(
        {*esp::IpPrefix::parse("10.1.0.0/16"), *esp::IpPrefix::parse("10.2.0.0/16")});
  test::InboundSaTable table;
  auto sa = std::make_shared<esp::InboundSa>(config, crypto::ipsec_mb_backend());
  table.add(sa);
  data += 1;
  size -= 1;

  std::vector<uint8_t> esp(16 + size + esp::kIcvLength);
  const uint64_t sequence = 7;
  store_be32(&esp[0], spi);
  store_be32(&esp[4], static_cast<uint32_t>(sequence));
  store_be64(&esp[8], sequence);
  std::copy(data, data + size, esp.begin() + 16);
  sa->crypto().seal(sequence, &esp[8], &esp[16], size, &esp[16 + size]);

  esp::EngineCounters engine;
  esp::PacketBuffer packet(esp.size() + 256);
  if (!packet.assign(esp)) abort();
  const esp::DropReason reason = test::decapsulate(table, engine, packet);
  if (reason == esp::DropReason::none) {
    // A delivered packet is a prefix of the plaintext and a well-formed IP header.
    if (packet.size() > size || packet.size() == 0) abort();
    const uint8_t version = packet.data()[0] >> 4;
    if (version != 4 && version != 6) abort();
    if (sa->counters().packets() != 1) abort();
    // What the TUN sink does to a packet the queue-delay gate picked: mark it CE if it is
    // ECN-capable. Only the ECN bits (and the IPv4 checksum) may change, a valid IPv4
    // checksum must stay valid, and a packet it refuses must stay as it was.
    const std::vector<uint8_t> before(packet.data(), packet.data() + packet.size());
    const bool ipv4 = version == 4;
    const size_t header_length = (before[0] & 0x0Fu) * 4;
    auto header_checksum_verifies = [&](const uint8_t* header) {
      return ipv4 && header_length >= 20 && header_length <= before.size() &&
             esp::checksum_finish(esp::checksum_add(0, header, header_length)) == 0;
    };
    const bool checksum_was_valid = header_checksum_verifies(before.data());
    const bool marked = esp::mark_congestion_experienced({packet.data(), packet.size()});
    const uint8_t* after = packet.data();
    for (size_t i = 0; i < before.size(); ++i) {
      const bool may_change = marked && (i == 1 || (ipv4 && (i == 10 || i == 11)));
      if (!may_change && after[i] != before[i]) abort();
    }
    if (marked) {
      const uint8_t ecn = version == 4 ? after[1] & 3 : (after[1] >> 4) & 3;
      if (ecn != 3) abort();
    }
    if (marked && checksum_was_valid && !header_checksum_verifies(after)) abort();
  } else if (sa->counters().total_drops() + engine.total_drops() != 1) {
    abort();  // every drop is counted exactly once
  }
  return 0;
}

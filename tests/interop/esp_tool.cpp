// espgw_esp_tool: a small command-line front end to the ESP engine, used only by the
// interop tests (tests/interop/scapy_esp_interop.py) to hand packets to and from an
// independent ESP implementation.
//
//   espgw_esp_tool encap --alg NAME [--integ NAME] --key HEX --spi N --seq N [--esn]
//                        --src ADDR --dst ADDR
//                        [--udp SPORT:DPORT] [--backend ipsec-mb|openssl] [--tfc N]
//       Reads inner IP packets as hex on stdin, one per line, and encapsulates them with
//       consecutive sequence numbers starting at --seq (--tfc: TFC padding up to N bytes).
//       Prints each full outer packet as hex, one per line.
//   espgw_esp_tool decap --alg NAME [--integ NAME] --key HEX --spi N [--esn]
//                        --src ADDR --dst ADDR
//                        [--udp SPORT:DPORT] [--backend ...] [--window N] [--highest N]
//       Reads full outer IP packets as hex on stdin, one per line, and decapsulates them
//       in order through one SA (so a repeated packet is caught by the replay window).
//       --src is the sender of the packets. --highest N commits sequence number N into the
//       replay window first (when N > 0), so that ESN inference lands in N's epoch.
//       Prints each inner packet as hex; for a dropped packet prints "drop REASON" on
//       stdout and the reason name on stderr.
//
// --key is the key material as the SA takes it: an AEAD's cipher key followed by the
// 4-byte salt; with AES-CBC (--alg aes-cbc-128/192/256 --integ hmac-sha1-96,
// hmac-sha2-256-128, ...) the encryption key followed by the integrity key. Numbers may be decimal
// or 0x-prefixed hex. Exit status: 0 all packets went through, 3 at least one was dropped, 2 bad
// arguments or input.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "crypto/aead.h"
#include "esp/counters.h"
#include "esp/decap.h"
#include "esp/drop_reason.h"
#include "esp/encap.h"
#include "esp/ip_address.h"
#include "esp/packet_buffer.h"
#include "esp/security_association.h"
#include "esp/wire.h"
#include "support/sequential_esp.h"
#include "util/hex.h"

namespace {

using espgw::esp::DropReason;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitDropped = 3;

struct UsageError {
  std::string message;
};

struct Options {
  std::string command;
  espgw::esp::SaConfig config;
  const espgw::crypto::CryptoBackend* backend = nullptr;
  uint64_t sequence = 1;
  uint64_t highest = 0;
};

void print_usage() {
  std::cerr << "usage: espgw_esp_tool encap|decap --alg NAME [--integ NAME] --key HEX --spi N\n"
               "                      [--seq N] [--esn]\n"
               "                      --src ADDR --dst ADDR [--udp SPORT:DPORT]\n"
               "                      [--backend ipsec-mb|openssl] [--window N] [--highest N]\n"
               "  Packets are read as hex from stdin, one per line.\n";
}

uint64_t parse_number(std::string_view option, const std::string& text, uint64_t max) {
  size_t used = 0;
  uint64_t value = 0;
  try {
    if (text.empty() || text[0] == '-' || text[0] == '+') throw std::invalid_argument(text);
    value = std::stoull(text, &used, 0);
  } catch (const std::exception&) {
    throw UsageError{std::string(option) + ": not a number: '" + text + "'"};
  }
  if (used != text.size()) throw UsageError{std::string(option) + ": not a number: '" + text + "'"};
  if (value > max)
    throw UsageError{std::string(option) + ": " + text + " is out of range (max " +
                     std::to_string(max) + ")"};
  return value;
}

espgw::esp::IpAddress parse_address(std::string_view option, const std::string& text) {
  auto address = espgw::esp::IpAddress::parse(text);
  if (!address) throw UsageError{std::string(option) + ": not an IP address: '" + text + "'"};
  return *address;
}

Options parse_options(int argc, char** argv) {
  if (argc < 2) throw UsageError{"missing command (encap or decap)"};
  Options options;
  options.command = argv[1];
  if (options.command != "encap" && options.command != "decap")
    throw UsageError{"unknown command '" + options.command + "' (want encap or decap)"};

  bool have_alg = false, have_key = false, have_spi = false, have_seq = false;
  bool have_window = false, have_highest = false;
  std::optional<espgw::esp::IpAddress> source, destination;
  std::string backend_name = "ipsec-mb";
  auto& config = options.config;

  for (int i = 2; i < argc; ++i) {
    const std::string option = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError{option + " needs a value"};
      return argv[++i];
    };
    if (option == "--alg") {
      const std::string name = value();
      auto algorithm = espgw::crypto::parse_algorithm(name);
      if (!algorithm) throw UsageError{"--alg: unknown algorithm '" + name + "'"};
      config.algorithm = *algorithm;
      have_alg = true;
    } else if (option == "--integ") {
      const std::string name = value();
      auto integrity = espgw::crypto::parse_integrity(name);
      if (!integrity) throw UsageError{"--integ: unknown integrity algorithm '" + name + "'"};
      config.integrity = *integrity;
    } else if (option == "--key") {
      const std::string text = value();
      auto key = espgw::parse_hex(text);
      if (!key) throw UsageError{"--key: not valid hex"};
      config.key_material = std::move(*key);
      have_key = true;
    } else if (option == "--spi") {
      config.spi = static_cast<uint32_t>(parse_number(option, value(), UINT32_MAX));
      if (config.spi == 0) throw UsageError{"--spi: SPI 0 is reserved"};
      have_spi = true;
    } else if (option == "--seq") {
      options.sequence = parse_number(option, value(), UINT64_MAX);
      have_seq = true;
    } else if (option == "--esn") {
      config.esn = true;
    } else if (option == "--src") {
      source = parse_address(option, value());
    } else if (option == "--dst") {
      destination = parse_address(option, value());
    } else if (option == "--udp") {
      const std::string text = value();
      const size_t colon = text.find(':');
      if (colon == std::string::npos)
        throw UsageError{"--udp: want SPORT:DPORT, got '" + text + "'"};
      espgw::esp::UdpEncapsulation udp;
      udp.source_port = static_cast<uint16_t>(parse_number(option, text.substr(0, colon), 0xFFFF));
      udp.destination_port =
          static_cast<uint16_t>(parse_number(option, text.substr(colon + 1), 0xFFFF));
      config.udp_encapsulation = udp;
    } else if (option == "--tfc") {
      config.tfc_pad_to = static_cast<uint32_t>(parse_number(option, value(), UINT32_MAX));
    } else if (option == "--backend") {
      backend_name = value();
    } else if (option == "--window") {
      config.replay_window =
          static_cast<uint32_t>(parse_number(option, value(), espgw::esp::ReplayWindow::kMaxSize));
      have_window = true;
    } else if (option == "--highest") {
      options.highest = parse_number(option, value(), UINT64_MAX);
      have_highest = true;
    } else if (option == "-h" || option == "--help") {
      print_usage();
      std::exit(kExitOk);
    } else {
      throw UsageError{"unknown option '" + option + "'"};
    }
  }

  if (!have_alg) throw UsageError{"--alg is required"};
  if (!have_key) throw UsageError{"--key is required"};
  if (!have_spi) throw UsageError{"--spi is required"};
  if (!source) throw UsageError{"--src is required"};
  if (!destination) throw UsageError{"--dst is required"};
  if (source->family != destination->family)
    throw UsageError{"--src and --dst must both be IPv4 or both IPv6"};
  if (!espgw::crypto::valid_transform(config.algorithm, config.integrity))
    throw UsageError{espgw::crypto::is_aead(config.algorithm)
                         ? "--integ: an AEAD takes no integrity algorithm"
                         : "--integ is required with AES-CBC"};
  const size_t key_length = espgw::crypto::key_material_length(config.algorithm, config.integrity);
  if (config.key_material.size() != key_length)
    throw UsageError{"--key: " + espgw::crypto::transform_name(config.algorithm, config.integrity) +
                     " needs " + std::to_string(key_length) +
                     (espgw::crypto::is_aead(config.algorithm)
                          ? " bytes (cipher key followed by the 4-byte salt), got "
                          : " bytes (encryption key followed by integrity key), got ") +
                     std::to_string(config.key_material.size())};
  if (options.command == "encap") {
    if (!have_seq) throw UsageError{"encap: --seq is required"};
    if (options.sequence == 0) throw UsageError{"--seq: sequence number 0 is never sent"};
    if (!config.esn && options.sequence > UINT32_MAX)
      throw UsageError{"--seq: above 2^32 - 1 needs --esn"};
    if (have_window || have_highest) throw UsageError{"--window and --highest are for decap"};
  } else if (config.tfc_pad_to != 0) {
    throw UsageError{"--tfc is for encap"};
  } else {
    if (!config.esn && options.highest > UINT32_MAX)
      throw UsageError{"--highest: above 2^32 - 1 needs --esn"};
  }
  config.tunnel_source = *source;
  config.tunnel_destination = *destination;

  options.backend = espgw::crypto::find_backend(backend_name);
  if (!options.backend)
    throw UsageError{"--backend: unknown backend '" + backend_name + "' (ipsec-mb or openssl)"};
  return options;
}

// Reads stdin: one hex packet per non-empty line.
std::vector<std::vector<uint8_t>> read_packets() {
  std::vector<std::vector<uint8_t>> packets;
  std::string line;
  size_t number = 0;
  while (std::getline(std::cin, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto bytes = espgw::parse_hex(line);
    if (!bytes) throw UsageError{"stdin line " + std::to_string(number) + ": not valid hex"};
    if (bytes->empty()) throw UsageError{"stdin line " + std::to_string(number) + ": empty packet"};
    packets.push_back(std::move(*bytes));
  }
  if (packets.empty()) throw UsageError{"no packet on stdin"};
  return packets;
}

espgw::esp::PacketBuffer make_buffer(const std::vector<uint8_t>& bytes, size_t tfc_pad_to = 0) {
  constexpr size_t kHeadroom = espgw::esp::PacketBuffer::kDefaultHeadroom;
  constexpr size_t kTailroom = 128;
  espgw::esp::PacketBuffer buffer(kHeadroom + std::max(bytes.size(), tfc_pad_to) + kTailroom,
                                  kHeadroom);
  if (!buffer.assign(bytes, kHeadroom)) throw UsageError{"packet does not fit the buffer"};
  return buffer;
}

void report_drop(DropReason reason) {
  const std::string_view name = espgw::esp::drop_reason_name(reason);
  std::cout << "drop " << name << '\n';
  std::cerr << name << '\n';
}

int run_encap(const Options& options) {
  const auto packets = read_packets();
  espgw::esp::OutboundSa sa(options.config, *options.backend);
  sa.set_next_sequence(options.sequence);
  int status = kExitOk;
  for (const auto& bytes : packets) {
    auto buffer = make_buffer(bytes, options.config.tfc_pad_to);
    const DropReason reason =
        espgw::test::encapsulate(sa, buffer, espgw::esp::OuterHeaders::include);
    if (reason != DropReason::none) {
      report_drop(reason);
      status = kExitDropped;
      continue;
    }
    std::cout << espgw::to_hex(buffer.bytes()) << '\n';
  }
  return status;
}

int run_decap(const Options& options) {
  const auto packets = read_packets();
  auto sa = std::make_shared<espgw::esp::InboundSa>(options.config, *options.backend);
  if (options.highest > 0 &&
      sa->replay_window().commit(options.highest) != espgw::esp::ReplayWindow::Verdict::accept)
    throw UsageError{"--highest: the replay window refused " + std::to_string(options.highest)};
  espgw::test::InboundSaTable table;
  table.add(sa);
  espgw::esp::EngineCounters engine;
  int status = kExitOk;
  for (const auto& bytes : packets) {
    auto buffer = make_buffer(bytes);
    const auto result = espgw::test::decapsulate_wire(table, engine, buffer);
    if (result.reason != DropReason::none) {
      report_drop(result.reason);
      status = kExitDropped;
      continue;
    }
    if (result.kind != espgw::esp::WireKind::esp) {
      std::cout << "drop not-esp-kind\n";
      std::cerr << "not an ESP packet (IKE or keepalive)\n";
      status = kExitDropped;
      continue;
    }
    std::cout << espgw::to_hex(buffer.bytes()) << '\n';
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_options(argc, argv);
    const int status = options.command == "encap" ? run_encap(options) : run_decap(options);
    std::cout.flush();
    return status;
  } catch (const UsageError& error) {
    std::cerr << "espgw_esp_tool: " << error.message << '\n';
    print_usage();
    return kExitUsage;
  } catch (const std::exception& error) {
    std::cerr << "espgw_esp_tool: " << error.what() << '\n';
    return kExitUsage;
  }
}

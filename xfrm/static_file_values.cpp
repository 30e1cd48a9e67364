#include "xfrm/static_file_values.h"

#include <cctype>
#include <charconv>

namespace espgw::xfrm::static_file_values {

[[noreturn]] void fail(std::string message) {
  throw LineError{std::move(message)};
}

// A word may be repeated in a message only if it can't be a piece of a key worth hiding.
// Keys are hex, optionally with "0x" and ':' separators, so a word with more than 4 hex
// digits in a row (':' and 'x' don't end a row), more than 16 in all, more than 24
// characters or unprintable bytes is not repeated. Addresses, prefixes and misspelt
// keywords still are.
std::optional<std::string> showable(std::string_view word) {
  constexpr size_t kMaxShown = 24, kMaxRow = 4, kMaxDigits = 16;
  if (word.empty() || word.size() > kMaxShown) return std::nullopt;
  size_t row = 0, digits = 0;
  for (char c : word) {
    if (c <= ' ' || c > '~') return std::nullopt;
    if (std::isxdigit(static_cast<unsigned char>(c))) {
      ++digits;
      if (++row > kMaxRow) return std::nullopt;
    } else if (c != ':' && c != 'x' && c != 'X') {
      row = 0;
    }
  }
  if (digits > kMaxDigits) return std::nullopt;
  std::string quoted = "'";
  quoted.append(word).append("'");
  return quoted;
}

// "'word'" or, where the word may not be repeated, "the value".
std::string describe(std::string_view word) {
  return showable(word).value_or("the value");
}

std::string spi_text(uint32_t spi) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08x", spi);
  return buffer;
}

// Decimal, or hex with a 0x prefix; the whole word, no sign.
std::optional<uint64_t> parse_number(std::string_view text, bool& overflow) {
  overflow = false;
  int base = 10;
  if (text.starts_with("0x") || text.starts_with("0X")) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty()) return std::nullopt;
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (end != text.data() + text.size()) return std::nullopt;
  if (error == std::errc::result_out_of_range) overflow = true;
  if (error != std::errc()) return std::nullopt;
  return value;
}

uint64_t number_in(std::string_view keyword, std::string_view text, uint64_t min, uint64_t max,
                   std::string_view note) {
  bool overflow = false;
  auto value = parse_number(text, overflow);
  if (!value && !overflow)
    fail(std::string(keyword) + ": " + describe(text) +
         " is not a number (decimal, or hex with 0x)");
  if (overflow || *value < min || *value > max)
    fail(std::string(keyword) + ": out of range (" + std::to_string(min) + "-" +
         std::to_string(max) + std::string(note) + ")");
  return *value;
}

esp::IpAddress address_value(std::string_view keyword, std::string_view text) {
  auto address = esp::IpAddress::parse(text);
  if (!address) fail(std::string(keyword) + ": " + describe(text) + " is not an IP address");
  return *address;
}

namespace {

bool host_bits_clear(const esp::IpPrefix& prefix) {
  const unsigned bits = static_cast<unsigned>(prefix.address.length()) * 8;
  for (unsigned bit = prefix.length; bit < bits; ++bit)
    if (prefix.address.bytes[bit / 8] & (0x80 >> (bit % 8))) return false;
  return true;
}

}  // namespace

esp::IpPrefix prefix_value(std::string_view keyword, std::string_view text) {
  auto prefix = esp::IpPrefix::parse(text);
  if (!prefix) fail(std::string(keyword) + ": " + describe(text) + " is not an IP prefix");
  if (!host_bits_clear(*prefix))
    fail(std::string(keyword) + ": " + describe(text) + " has bits set beyond its prefix length");
  return *prefix;
}

// "PORT" or "FIRST-LAST".
PortRange port_range_value(std::string_view keyword, std::string_view text) {
  const auto dash = text.find('-');
  const auto first_text = text.substr(0, dash);
  const auto last_text = dash == std::string_view::npos ? first_text : text.substr(dash + 1);
  bool overflow = false;
  auto first = parse_number(first_text, overflow);
  auto last = parse_number(last_text, overflow);
  if (!first || !last || *first > 65535 || *last > 65535 || *first > *last)
    fail(std::string(keyword) + ": " + describe(text) +
         " is not a port or port range (0-65535, or FIRST-LAST with FIRST <= LAST)");
  return PortRange{static_cast<uint16_t>(*first), static_cast<uint16_t>(*last)};
}

// "SPORT:DPORT", both 1-65535.
esp::UdpEncapsulation udp_value(std::string_view text) {
  const auto colon = text.find(':');
  bool overflow = false;
  std::optional<uint64_t> source, destination;
  if (colon != std::string_view::npos) {
    source = parse_number(text.substr(0, colon), overflow);
    destination = parse_number(text.substr(colon + 1), overflow);
  }
  if (!source || !destination || *source == 0 || *source > 65535 || *destination == 0 ||
      *destination > 65535)
    fail("udp: " + describe(text) + " is not SPORT:DPORT (ports 1-65535)");
  return esp::UdpEncapsulation{static_cast<uint16_t>(*source), static_cast<uint16_t>(*destination)};
}

[[noreturn]] void unknown_word(std::string_view where, std::string_view word) {
  if (auto shown = showable(word)) fail(std::string(where) + ": unknown keyword " + *shown);
  fail(std::string(where) +
       ": unexpected value where a keyword belongs (not shown: it could be key material)");
}

void require(std::string_view what,
             std::initializer_list<std::pair<std::string_view, bool>> fields) {
  std::string missing;
  for (const auto& [name, present] : fields) {
    if (present) continue;
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  if (!missing.empty()) fail(std::string(what) + ": missing " + missing);
}

}  // namespace espgw::xfrm::static_file_values

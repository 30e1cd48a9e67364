// Reading the values of a static SA/policy file line (xfrm/static_file.cpp): numbers,
// addresses, prefixes, ports, the words of a line, and the error of the first problem,
// whose messages never repeat a word that could be key material.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "esp/ip_address.h"
#include "esp/security_association.h"
#include "xfrm/selector.h"

namespace espgw::xfrm::static_file_values {

// Thrown for the first problem on a line; caught by the line loop.
struct LineError {
  std::string message;
};

[[noreturn]] void fail(std::string message);

// The word as a message may show it (quoted), or nullopt if it could be a piece of a key.
std::optional<std::string> showable(std::string_view word);
// showable(word), or a note that it is not shown.
std::string describe(std::string_view word);
std::string spi_text(uint32_t spi);
// Decimal or 0x hex; nullopt (with `overflow` set if that was why) for anything else.
std::optional<uint64_t> parse_number(std::string_view text, bool& overflow);
// The value of `keyword` in [min, max], or fail(); `note` is added to the range message.
uint64_t number_in(std::string_view keyword, std::string_view text, uint64_t min, uint64_t max,
                   std::string_view note = {});
esp::IpAddress address_value(std::string_view keyword, std::string_view text);
esp::IpPrefix prefix_value(std::string_view keyword, std::string_view text);
PortRange port_range_value(std::string_view keyword, std::string_view text);
esp::UdpEncapsulation udp_value(std::string_view text);

// The words of one line, consumed left to right.
class Words {
 public:
  explicit Words(std::vector<std::string_view> words) : words_(std::move(words)) {}
  bool done() const { return next_ == words_.size(); }
  std::string_view next() { return words_[next_++]; }
  std::string_view value_for(std::string_view keyword) {
    if (done()) fail(std::string(keyword) + ": missing value");
    return next();
  }
  // Each keyword may appear once per line.
  void once(std::string_view keyword) {
    if (!seen_.insert(keyword).second) fail("duplicate '" + std::string(keyword) + "'");
  }

 private:
  std::vector<std::string_view> words_;
  size_t next_ = 0;
  std::set<std::string_view> seen_;
};

[[noreturn]] void unknown_word(std::string_view where, std::string_view word);
// fail()s naming every field of `what` that is not present.
void require(std::string_view what,
             std::initializer_list<std::pair<std::string_view, bool>> fields);

}  // namespace espgw::xfrm::static_file_values

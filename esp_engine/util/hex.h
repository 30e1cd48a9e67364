// Hex helpers for tools, tests and configuration files (never for key logging).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace espgw {

// Parses an even-length hex string; whitespace and ':' separators are ignored.
std::optional<std::vector<uint8_t>> parse_hex(std::string_view text);
std::string to_hex(std::span<const uint8_t> bytes);

}  // namespace espgw

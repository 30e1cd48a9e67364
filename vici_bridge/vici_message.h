// VICI messages: the tree of key-values, lists and sections that every command, response
// and event carries, and its wire encoding (strongSwan's vici/README.md, "Message format").
// Nothing here knows about packets, sockets or what any key means.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace espgw::vici {

class MessageDecoder;

// Deeper nesting is refused on decode (and on encode, so that what we send is what we
// accept). charon's deepest messages (list-conns, list-sas) nest about 5 levels.
inline constexpr size_t kMaxDepth = 32;

// A VICI message: an ordered list of entries (key-value, list, section); sections nest.
// Order is kept because charon's output is ordered (children, proposals) and because a
// byte-exact round trip makes the codec testable.
class Section {
 public:
  enum class Kind : uint8_t { value, list, section };
  struct Entry {
    Kind kind;
    std::string name;
    std::string value;               // Kind::value: any bytes, NUL included
    std::vector<std::string> items;  // Kind::list
    std::unique_ptr<Section> child;  // Kind::section, never null there
  };

  Section();
  Section(const Section&);
  Section& operator=(const Section&);
  Section(Section&&) noexcept;
  Section& operator=(Section&&) noexcept;
  ~Section();

  // Setters append in order; setting an existing key-value name replaces its value in
  // place (and set_list an existing list), since VICI keys are unique within a section.
  Section& set(std::string_view key, std::string_view value);
  Section& set(std::string_view key, uint64_t value);  // decimal text
  // The overloads below only resolve what would otherwise be ambiguous or surprising:
  // set(k, 0) (null pointer or number?), set(k, uint32_t) and set(k, true) ("1").
  Section& set(std::string_view key, const char* value) {
    return set(key, std::string_view(value));
  }
  Section& set(std::string_view key, const std::string& value) {
    return set(key, std::string_view(value));
  }
  template <std::integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, uint64_t>) Section& set(std::string_view key,
                                                                              T value) {
    if constexpr (std::is_signed_v<T>) {
      if (value < 0) return set(key, std::string_view(std::to_string(value)));
    }
    return set(key, static_cast<uint64_t>(value));
  }
  Section& set(std::string_view key, bool value) = delete;  // use set_bool
  Section& set_bool(std::string_view key, bool value);      // "yes"/"no"
  Section& set_list(std::string_view key, std::vector<std::string> items);
  // Always appends (sections are not merged by name); returns the new child.
  Section& add_section(std::string_view name);

  // Lookups return the first entry of that name and kind. A decoded message may repeat a
  // name (the wire does not forbid it); the later entries stay visible in entries().
  const std::string* value(std::string_view key) const;        // nullptr if absent
  std::optional<uint64_t> number(std::string_view key) const;  // strict unsigned decimal
  // "yes"/"no", "true"/"false", "1"/"0", case-insensitive; nullopt for anything else.
  std::optional<bool> boolean(std::string_view key) const;
  const std::vector<std::string>* list(std::string_view key) const;
  const Section* section(std::string_view name) const;

  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  // Deep and order-sensitive: the same entries in the same order.
  bool operator==(const Section&) const;

 private:
  // The decoder appends entries as they come (a repeated key stays a separate entry),
  // which the setters, replacing by name, would not do.
  friend class MessageDecoder;

  Entry* find(std::string_view name, Kind kind);
  const Entry* find(std::string_view name, Kind kind) const;

  std::vector<Entry> entries_;
};
using Message = Section;

// Throws std::length_error if a name is empty or longer than 255 bytes, a value or list
// item is longer than 65535 bytes, or sections nest deeper than kMaxDepth: each of those
// would be refused by decode_message at the other end.
std::vector<uint8_t> encode_message(const Message& message);

struct MessageResult {
  std::optional<Message> message;  // present exactly when error is empty
  // Human-readable with the byte offset; never contains value bytes or names, which may
  // be secrets (charon's load-shared carries keys) or binary.
  std::string error;
};

// Strict: truncation, unknown element types, unbalanced sections or lists, elements in
// the wrong place (a key in a list, an item outside one), nesting deeper than kMaxDepth
// and empty names are errors.
MessageResult decode_message(std::span<const uint8_t> bytes);

}  // namespace espgw::vici

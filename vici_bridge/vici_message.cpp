// The VICI message tree and its element encoding (see vici_message.h).
#include "vici_bridge/vici_message.h"

#include <string.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace espgw::vici {

namespace {

// Element types, strongSwan's vici/README.md "Message format".
enum Element : uint8_t {
  kSectionStart = 1,
  kSectionEnd = 2,
  kKeyValue = 3,
  kListStart = 4,
  kListItem = 5,
  kListEnd = 6,
};

constexpr size_t kMaxName = 255;
constexpr size_t kMaxValue = 65535;

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  return std::ranges::equal(a, b, [](char x, char y) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; };
    return lower(x) == lower(y);
  });
}

class Encoder {
 public:
  std::vector<uint8_t> take() { return std::move(out_); }

  void section(const Section& section, size_t depth) {
    for (const Section::Entry& entry : section.entries()) {
      switch (entry.kind) {
        case Section::Kind::value:
          named(kKeyValue, entry.name);
          blob(entry.value);
          break;
        case Section::Kind::list:
          named(kListStart, entry.name);
          for (const std::string& item : entry.items) {
            out_.push_back(kListItem);
            blob(item);
          }
          out_.push_back(kListEnd);
          break;
        case Section::Kind::section:
          if (depth + 1 > kMaxDepth) {
            throw std::length_error("VICI sections nest deeper than " + std::to_string(kMaxDepth));
          }
          named(kSectionStart, entry.name);
          if (entry.child) this->section(*entry.child, depth + 1);
          out_.push_back(kSectionEnd);
          break;
      }
    }
  }

 private:
  void named(uint8_t type, std::string_view name) {
    // The name itself is not quoted: it may be binary, and callers log what() freely.
    if (name.empty() || name.size() > kMaxName) {
      throw std::length_error("VICI element name of " + std::to_string(name.size()) +
                              " bytes (must be 1 to 255)");
    }
    out_.push_back(type);
    out_.push_back(static_cast<uint8_t>(name.size()));
    out_.insert(out_.end(), name.begin(), name.end());
  }

  void blob(std::string_view value) {
    if (value.size() > kMaxValue) {
      throw std::length_error("VICI value of " + std::to_string(value.size()) +
                              " bytes (at most 65535)");
    }
    out_.push_back(static_cast<uint8_t>(value.size() >> 8));
    out_.push_back(static_cast<uint8_t>(value.size()));
    out_.insert(out_.end(), value.begin(), value.end());
  }

  std::vector<uint8_t> out_;
};

}  // namespace

class MessageDecoder {
 public:
  explicit MessageDecoder(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  MessageResult run() {
    Message root;
    // Sections are reached through the stack of open ones; entries of a section do not
    // move while a child is open, since nothing is appended to the parent meanwhile.
    std::vector<Section*> open{&root};
    std::vector<std::string>* list = nullptr;  // the list being filled, if any
    std::string name;
    std::string value;
    while (pos_ < bytes_.size()) {
      const size_t start = pos_;
      const uint8_t type = bytes_[pos_++];
      const bool in_list = list != nullptr;
      switch (type) {
        case kSectionStart: {
          if (in_list) return fail("section start inside a list", start);
          if (!read_name(name)) return fail("truncated or unnamed section start", start);
          if (open.size() > kMaxDepth) return fail("sections nested too deeply", start);
          open.push_back(&open.back()->add_section(name));
          break;
        }
        case kSectionEnd:
          if (in_list) return fail("section end inside a list", start);
          if (open.size() == 1) return fail("section end without an open section", start);
          open.pop_back();
          break;
        case kKeyValue:
          if (in_list) return fail("key-value inside a list", start);
          if (!read_name(name) || !read_value(value)) {
            return fail("truncated or unnamed key-value", start);
          }
          // Appended, not set(): a repeated key stays a separate entry, so that decoding
          // and encoding again gives back the same bytes.
          append(*open.back(), Section::Entry{.kind = Section::Kind::value,
                                              .name = std::move(name),
                                              .value = std::move(value),
                                              .items = {},
                                              .child = nullptr});
          break;
        case kListStart: {
          if (in_list) return fail("list start inside a list", start);
          if (!read_name(name)) return fail("truncated or unnamed list start", start);
          Section::Entry& entry = append(*open.back(), Section::Entry{.kind = Section::Kind::list,
                                                                      .name = std::move(name),
                                                                      .value = {},
                                                                      .items = {},
                                                                      .child = nullptr});
          list = &entry.items;
          break;
        }
        case kListItem:
          if (!in_list) return fail("list item outside a list", start);
          if (!read_value(value)) return fail("truncated list item", start);
          list->push_back(std::move(value));
          break;
        case kListEnd:
          if (!in_list) return fail("list end without an open list", start);
          list = nullptr;
          break;
        default:
          return fail("unknown element type " + std::to_string(type), start);
      }
    }
    if (list) return fail("list not closed", pos_);
    if (open.size() > 1) {
      return fail(std::to_string(open.size() - 1) + " section(s) not closed", pos_);
    }
    return {std::move(root), {}};
  }

 private:
  static Section::Entry& append(Section& section, Section::Entry entry) {
    return section.entries_.emplace_back(std::move(entry));
  }

  bool read_name(std::string& out) {
    if (pos_ >= bytes_.size()) return false;
    const size_t length = bytes_[pos_];
    if (length == 0 || bytes_.size() - pos_ - 1 < length) return false;
    out.assign(reinterpret_cast<const char*>(bytes_.data() + pos_ + 1), length);
    pos_ += 1 + length;
    return true;
  }

  bool read_value(std::string& out) {
    if (bytes_.size() - pos_ < 2) return false;
    const size_t length = size_t{bytes_[pos_]} << 8 | bytes_[pos_ + 1];
    if (bytes_.size() - pos_ - 2 < length) return false;
    out.assign(reinterpret_cast<const char*>(bytes_.data() + pos_ + 2), length);
    pos_ += 2 + length;
    return true;
  }

  static MessageResult fail(const std::string& what, size_t offset) {
    return {std::nullopt, what + " at offset " + std::to_string(offset)};
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

namespace {
// Values may be secrets: espgw's add-sa carries SA keys, charon's load-shared PSKs. A
// message wipes them when it lets go of them, so that they never linger in freed memory
// (control traffic is small; the cost does not show). Child sections wipe their own.
void wipe(std::string& text) {
  explicit_bzero(text.data(), text.size());
}
void wipe(std::vector<Section::Entry>& entries) {
  for (auto& entry : entries) {
    wipe(entry.value);
    for (auto& item : entry.items) wipe(item);
  }
}
}  // namespace

Section::Section() = default;
Section::Section(Section&&) noexcept = default;
Section& Section::operator=(Section&& other) noexcept {
  if (this != &other) {
    wipe(entries_);
    entries_ = std::move(other.entries_);
  }
  return *this;
}
Section::~Section() {
  wipe(entries_);
}

Section::Section(const Section& other) {
  entries_.reserve(other.entries_.size());
  for (const Entry& entry : other.entries_) {
    entries_.push_back(Entry{
        .kind = entry.kind,
        .name = entry.name,
        .value = entry.value,
        .items = entry.items,
        .child = entry.child ? std::make_unique<Section>(*entry.child) : nullptr,
    });
  }
}

Section& Section::operator=(const Section& other) {
  if (this != &other) *this = Section(other);
  return *this;
}

Section::Entry* Section::find(std::string_view name, Kind kind) {
  for (Entry& entry : entries_) {
    if (entry.kind == kind && entry.name == name) return &entry;
  }
  return nullptr;
}

const Section::Entry* Section::find(std::string_view name, Kind kind) const {
  return const_cast<Section*>(this)->find(name, kind);
}

Section& Section::set(std::string_view key, std::string_view value) {
  if (Entry* existing = find(key, Kind::value)) {
    wipe(existing->value);  // assign() may move to a larger buffer and free this one
    existing->value.assign(value);
  } else {
    entries_.push_back(Entry{.kind = Kind::value,
                             .name = std::string(key),
                             .value = std::string(value),
                             .items = {},
                             .child = nullptr});
  }
  return *this;
}

Section& Section::set(std::string_view key, uint64_t value) {
  return set(key, std::string_view(std::to_string(value)));
}

Section& Section::set_bool(std::string_view key, bool value) {
  return set(key, std::string_view(value ? "yes" : "no"));
}

Section& Section::set_list(std::string_view key, std::vector<std::string> items) {
  if (Entry* existing = find(key, Kind::list)) {
    for (auto& item : existing->items) wipe(item);
    existing->items = std::move(items);
  } else {
    entries_.push_back(Entry{.kind = Kind::list,
                             .name = std::string(key),
                             .value = {},
                             .items = std::move(items),
                             .child = nullptr});
  }
  return *this;
}

Section& Section::add_section(std::string_view name) {
  Entry& entry = entries_.emplace_back(Entry{.kind = Kind::section,
                                             .name = std::string(name),
                                             .value = {},
                                             .items = {},
                                             .child = std::make_unique<Section>()});
  return *entry.child;
}

const std::string* Section::value(std::string_view key) const {
  const Entry* entry = find(key, Kind::value);
  return entry ? &entry->value : nullptr;
}

std::optional<uint64_t> Section::number(std::string_view key) const {
  const std::string* text = value(key);
  if (!text || text->empty()) return std::nullopt;
  uint64_t result = 0;
  const char* end = text->data() + text->size();
  // from_chars takes no sign, space or base prefix, and reports overflow: exactly strict.
  const auto [stop, error] = std::from_chars(text->data(), end, result);
  if (error != std::errc() || stop != end) return std::nullopt;
  return result;
}

std::optional<bool> Section::boolean(std::string_view key) const {
  const std::string* text = value(key);
  if (!text) return std::nullopt;
  for (std::string_view yes : {"yes", "true", "1"}) {
    if (equal_ignoring_case(*text, yes)) return true;
  }
  for (std::string_view no : {"no", "false", "0"}) {
    if (equal_ignoring_case(*text, no)) return false;
  }
  return std::nullopt;
}

const std::vector<std::string>* Section::list(std::string_view key) const {
  const Entry* entry = find(key, Kind::list);
  return entry ? &entry->items : nullptr;
}

const Section* Section::section(std::string_view name) const {
  const Entry* entry = find(name, Kind::section);
  return entry ? entry->child.get() : nullptr;
}

bool Section::operator==(const Section& other) const {
  return std::ranges::equal(entries_, other.entries_, [](const Entry& a, const Entry& b) {
    if (a.kind != b.kind || a.name != b.name || a.value != b.value || a.items != b.items) {
      return false;
    }
    // A section entry always has a child; compare missing ones as empty to stay total.
    static const Section kEmpty;
    return (a.child ? *a.child : kEmpty) == (b.child ? *b.child : kEmpty);
  });
}

std::vector<uint8_t> encode_message(const Message& message) {
  Encoder encoder;
  encoder.section(message, 0);
  return encoder.take();
}

MessageResult decode_message(std::span<const uint8_t> bytes) {
  return MessageDecoder(bytes).run();
}

}  // namespace espgw::vici

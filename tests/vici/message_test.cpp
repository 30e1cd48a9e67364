// The VICI message codec: the README's encoding example byte for byte, round trips of
// random trees, every kind of malformed input, and the Section accessors.
#include "vici_bridge/vici_message.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace espgw::vici {
namespace {

// Builds wire bytes by hand, independently of the encoder under test.
class Wire {
 public:
  Wire& type(uint8_t t) {
    bytes.push_back(t);
    return *this;
  }
  Wire& name(std::string_view n) {
    bytes.push_back(static_cast<uint8_t>(n.size()));
    bytes.insert(bytes.end(), n.begin(), n.end());
    return *this;
  }
  Wire& value(std::string_view v) {
    bytes.push_back(static_cast<uint8_t>(v.size() >> 8));
    bytes.push_back(static_cast<uint8_t>(v.size()));
    bytes.insert(bytes.end(), v.begin(), v.end());
    return *this;
  }
  Wire& key_value(std::string_view n, std::string_view v) { return type(3).name(n).value(v); }
  Wire& section_start(std::string_view n) { return type(1).name(n); }
  Wire& section_end() { return type(2); }
  Wire& list_start(std::string_view n) { return type(4).name(n); }
  Wire& item(std::string_view v) { return type(5).value(v); }
  Wire& list_end() { return type(6); }

  std::vector<uint8_t> bytes;
};

// The "Encoding example" of strongSwan's vici/README.md, transcribed from its C array.
const std::vector<uint8_t> kReadmeExample = {
    3, 4,  'k', 'e', 'y', '1', 0,   6,   'v', 'a', 'l', 'u', 'e', '1',  //
    1, 8,  's', 'e', 'c', 't', 'i', 'o', 'n', '1',                      //
    1, 11, 's', 'u', 'b', '-', 's', 'e', 'c', 't', 'i', 'o', 'n',       //
    3, 4,  'k', 'e', 'y', '2', 0,   6,   'v', 'a', 'l', 'u', 'e', '2',  //
    2,                                                                  //
    4, 5,  'l', 'i', 's', 't', '1',                                     //
    5, 0,  5,   'i', 't', 'e', 'm', '1',                                //
    5, 0,  5,   'i', 't', 'e', 'm', '2',                                //
    6,                                                                  //
    2,                                                                  //
};

Message readme_example() {
  Message m;
  m.set("key1", "value1");
  Section& section1 = m.add_section("section1");
  section1.add_section("sub-section").set("key2", "value2");
  section1.set_list("list1", {"item1", "item2"});
  return m;
}

std::string random_bytes(std::mt19937& rng, size_t min, size_t max) {
  std::uniform_int_distribution<size_t> length(min, max);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(length(rng), '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

// Names and values are arbitrary bytes (NUL included); only name length is constrained.
void fill_random(Section& section, std::mt19937& rng, size_t depth) {
  std::uniform_int_distribution<int> count(0, 6);
  std::uniform_int_distribution<int> kind(0, depth < 6 ? 2 : 1);
  for (int n = count(rng); n > 0; --n) {
    const std::string name = random_bytes(rng, 1, 12);
    switch (kind(rng)) {
      case 0:
        section.set(name, std::string_view(random_bytes(rng, 0, 40)));
        break;
      case 1: {
        std::vector<std::string> items;
        for (int i = count(rng); i > 0; --i) items.push_back(random_bytes(rng, 0, 20));
        section.set_list(name, std::move(items));
        break;
      }
      default:
        fill_random(section.add_section(name), rng, depth + 1);
    }
  }
}

Message random_message(uint32_t seed) {
  std::mt19937 rng(seed);
  Message m;
  fill_random(m, rng, 0);
  return m;
}

std::vector<uint8_t> nested(size_t depth) {
  Wire w;
  for (size_t i = 0; i < depth; ++i) w.section_start("s");
  w.key_value("k", "v");
  for (size_t i = 0; i < depth; ++i) w.section_end();
  return w.bytes;
}

TEST(ViciMessage, EncodesTheReadmeExample) {
  EXPECT_EQ(encode_message(readme_example()), kReadmeExample);
}

TEST(ViciMessage, DecodesTheReadmeExample) {
  const MessageResult result = decode_message(kReadmeExample);
  ASSERT_TRUE(result.message) << result.error;
  EXPECT_TRUE(result.error.empty());
  const Message& m = *result.message;
  EXPECT_EQ(m, readme_example());
  ASSERT_NE(m.value("key1"), nullptr);
  EXPECT_EQ(*m.value("key1"), "value1");
  const Section* section1 = m.section("section1");
  ASSERT_NE(section1, nullptr);
  ASSERT_NE(section1->section("sub-section"), nullptr);
  EXPECT_EQ(*section1->section("sub-section")->value("key2"), "value2");
  ASSERT_NE(section1->list("list1"), nullptr);
  EXPECT_EQ(*section1->list("list1"), (std::vector<std::string>{"item1", "item2"}));
}

TEST(ViciMessage, EmptyMessageIsNoBytes) {
  EXPECT_TRUE(encode_message(Message{}).empty());
  const MessageResult result = decode_message({});
  ASSERT_TRUE(result.message);
  EXPECT_TRUE(result.message->empty());
}

TEST(ViciMessage, RandomMessagesRoundTrip) {
  for (uint32_t seed = 0; seed < 500; ++seed) {
    const Message m = random_message(seed);
    const std::vector<uint8_t> bytes = encode_message(m);
    const MessageResult result = decode_message(bytes);
    ASSERT_TRUE(result.message) << "seed " << seed << ": " << result.error;
    ASSERT_EQ(*result.message, m) << "seed " << seed;
    ASSERT_EQ(encode_message(*result.message), bytes) << "seed " << seed;
  }
}

TEST(ViciMessage, BinaryValuesKeepEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  Message m;
  m.set("key", std::string_view(all));
  m.set_list("list", {std::string("\0\0", 2), "", all});
  m.set("empty", std::string_view());
  const MessageResult result = decode_message(encode_message(m));
  ASSERT_TRUE(result.message) << result.error;
  EXPECT_EQ(*result.message->value("key"), all);
  EXPECT_EQ(result.message->list("list")->at(0), std::string("\0\0", 2));
  EXPECT_EQ(*result.message->value("empty"), "");
  EXPECT_EQ(*result.message, m);
}

TEST(ViciMessage, LongestNameAndValueAreAccepted) {
  Message m;
  m.set(std::string(255, 'n'), std::string_view(std::string(65535, 'v')));
  m.set_list("l", {std::string(65535, 'i')});
  const MessageResult result = decode_message(encode_message(m));
  ASSERT_TRUE(result.message) << result.error;
  EXPECT_EQ(*result.message, m);
}

TEST(ViciMessage, EncodeRefusesWhatDecodeWouldRefuse) {
  Message long_name;
  long_name.set(std::string(256, 'n'), "v");
  EXPECT_THROW(encode_message(long_name), std::length_error);
  Message empty_name;
  empty_name.set("", "v");
  EXPECT_THROW(encode_message(empty_name), std::length_error);
  Message long_value;
  long_value.set("k", std::string_view(std::string(65536, 'v')));
  EXPECT_THROW(encode_message(long_value), std::length_error);
  Message long_item;
  long_item.set_list("k", {std::string(65536, 'v')});
  EXPECT_THROW(encode_message(long_item), std::length_error);
  Message deep;
  Section* s = &deep;
  for (size_t i = 0; i <= kMaxDepth; ++i) s = &s->add_section("s");
  EXPECT_THROW(encode_message(deep), std::length_error);
}

TEST(ViciMessage, EveryTruncationFails) {
  for (uint32_t seed = 0; seed < 100; ++seed) {
    // Wrapped in one section, so that no strict prefix is itself a complete message.
    Message m;
    m.add_section("wrap") = random_message(seed);
    const std::vector<uint8_t> bytes = encode_message(m);
    for (size_t length = 1; length < bytes.size(); ++length) {
      const MessageResult result = decode_message(std::span(bytes).first(length));
      ASSERT_FALSE(result.message) << "seed " << seed << " length " << length;
      ASSERT_FALSE(result.error.empty());
    }
  }
  // Unwrapped, a prefix is valid exactly at element boundaries of the root.
  size_t valid = 0;
  for (size_t length = 0; length <= kReadmeExample.size(); ++length) {
    if (decode_message(std::span(kReadmeExample).first(length)).message) ++valid;
  }
  EXPECT_EQ(valid, 3u);  // empty, after key1 = value1, and the whole message
}

TEST(ViciMessage, UnknownElementTypesFail) {
  for (uint8_t type : {0, 7, 8, 0x80, 0xff}) {
    const MessageResult result = decode_message(Wire().key_value("k", "v").type(type).bytes);
    EXPECT_FALSE(result.message) << int(type);
    EXPECT_NE(result.error.find("unknown element type"), std::string::npos) << result.error;
    EXPECT_NE(result.error.find("offset 6"), std::string::npos) << result.error;
  }
}

TEST(ViciMessage, ElementsOutOfPlaceFail) {
  const std::vector<std::vector<uint8_t>> bad = {
      Wire().section_end().bytes,                                        // end at root
      Wire().section_start("s").bytes,                                   // not closed
      Wire().section_start("a").section_start("b").section_end().bytes,  // one not closed
      Wire().list_start("l").bytes,                                      // list not closed
      Wire().list_end().bytes,                                           // end without list
      Wire().item("i").bytes,                                            // item at root
      Wire().list_start("l").key_value("k", "v").list_end().bytes,       // key in list
      Wire().list_start("l").section_start("s").section_end().list_end().bytes,
      Wire().list_start("l").list_start("m").list_end().list_end().bytes,  // nested lists
      Wire().section_start("s").list_start("l").section_end().list_end().section_end().bytes,
      Wire().section_start("s").list_start("l").section_end().bytes,
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    const MessageResult result = decode_message(bad[i]);
    EXPECT_FALSE(result.message) << "case " << i;
    EXPECT_FALSE(result.error.empty()) << "case " << i;
  }
  // Empty lists and empty sections are fine.
  EXPECT_TRUE(decode_message(Wire().list_start("l").list_end().bytes).message);
  EXPECT_TRUE(decode_message(Wire().section_start("s").section_end().bytes).message);
}

TEST(ViciMessage, EmptyNamesFail) {
  EXPECT_FALSE(decode_message(Wire().key_value("", "v").bytes).message);
  EXPECT_FALSE(decode_message(Wire().section_start("").section_end().bytes).message);
  EXPECT_FALSE(decode_message(Wire().list_start("").list_end().bytes).message);
}

TEST(ViciMessage, NestingDeeperThanTheLimitFails) {
  const MessageResult deepest = decode_message(nested(kMaxDepth));
  ASSERT_TRUE(deepest.message) << deepest.error;
  Message expected;
  Section* s = &expected;
  for (size_t i = 0; i < kMaxDepth; ++i) s = &s->add_section("s");
  s->set("k", "v");
  EXPECT_EQ(*deepest.message, expected);
  EXPECT_EQ(encode_message(expected), nested(kMaxDepth));

  const MessageResult too_deep = decode_message(nested(kMaxDepth + 1));
  EXPECT_FALSE(too_deep.message);
  EXPECT_NE(too_deep.error.find("nested too deeply"), std::string::npos) << too_deep.error;
  // Far deeper input must not recurse or allocate per level beyond the limit.
  EXPECT_FALSE(decode_message(nested(100000)).message);
}

TEST(ViciMessage, ErrorsNeverQuoteNamesOrValues) {
  const std::vector<std::vector<uint8_t>> bad = {
      Wire().key_value("SECRETNAME", "SECRETVALUE").type(99).bytes,
      Wire().list_start("SECRETNAME").item("SECRETVALUE").bytes,
      Wire().section_start("SECRETNAME").key_value("k", "SECRETVALUE").bytes,
      [] {
        auto b = Wire().key_value("SECRETNAME", "SECRETVALUE").bytes;
        b.pop_back();
        return b;
      }(),
  };
  for (const auto& bytes : bad) {
    const MessageResult result = decode_message(bytes);
    ASSERT_FALSE(result.message);
    EXPECT_EQ(result.error.find("SECRET"), std::string::npos) << result.error;
  }
}

TEST(ViciMessage, RepeatedKeysSurviveDecoding) {
  // The README asks for unique keys, but a peer may repeat one; decoding keeps both, so
  // that re-encoding is byte-exact, and lookups see the first.
  const auto bytes = Wire().key_value("k", "1").key_value("k", "2").bytes;
  const MessageResult result = decode_message(bytes);
  ASSERT_TRUE(result.message);
  EXPECT_EQ(result.message->entries().size(), 2u);
  EXPECT_EQ(*result.message->value("k"), "1");
  EXPECT_EQ(encode_message(*result.message), bytes);
}

TEST(ViciSection, SetReplacesInPlaceAndKeepsOrder) {
  Message m;
  m.set("a", "1").set("b", "2").set("a", "3");
  m.set_list("l", {"x"});
  m.set_list("l", {"y", "z"});
  ASSERT_EQ(m.entries().size(), 3u);
  EXPECT_EQ(m.entries()[0].name, "a");
  EXPECT_EQ(m.entries()[0].value, "3");
  EXPECT_EQ(m.entries()[1].name, "b");
  EXPECT_EQ(*m.list("l"), (std::vector<std::string>{"y", "z"}));
}

TEST(ViciSection, TypedSetters) {
  Message m;
  m.set("u64", uint64_t{18446744073709551615u});
  m.set("u32", uint32_t{4000000000u});
  m.set("zero", 0);
  m.set("negative", -5);
  m.set_bool("yes", true).set_bool("no", false);
  EXPECT_EQ(*m.value("u64"), "18446744073709551615");
  EXPECT_EQ(*m.value("u32"), "4000000000");
  EXPECT_EQ(*m.value("zero"), "0");
  EXPECT_EQ(*m.value("negative"), "-5");
  EXPECT_EQ(*m.value("yes"), "yes");
  EXPECT_EQ(*m.value("no"), "no");
}

TEST(ViciSection, NumberIsStrictUnsignedDecimal) {
  Message m;
  const std::vector<std::pair<std::string, std::optional<uint64_t>>> cases = {
      {"0", 0},
      {"42", 42},
      {"007", 7},
      {"18446744073709551615", UINT64_MAX},
      {"18446744073709551616", std::nullopt},
      {"", std::nullopt},
      {"-1", std::nullopt},
      {"+1", std::nullopt},
      {" 1", std::nullopt},
      {"1 ", std::nullopt},
      {"0x10", std::nullopt},
      {"1.5", std::nullopt},
      {std::string("1\0", 2), std::nullopt},
  };
  for (const auto& [text, expected] : cases) {
    m.set("n", std::string_view(text));
    EXPECT_EQ(m.number("n"), expected) << "'" << text << "'";
  }
  EXPECT_EQ(m.number("absent"), std::nullopt);
}

TEST(ViciSection, Boolean) {
  Message m;
  for (const char* yes : {"yes", "true", "1", "YES", "True"}) {
    EXPECT_EQ(m.set("b", yes).boolean("b"), true) << yes;
  }
  for (const char* no : {"no", "false", "0", "No"}) {
    EXPECT_EQ(m.set("b", no).boolean("b"), false) << no;
  }
  for (const char* neither : {"", "y", "2", "yes "}) {
    EXPECT_EQ(m.set("b", neither).boolean("b"), std::nullopt) << neither;
  }
  EXPECT_EQ(m.boolean("absent"), std::nullopt);
}

TEST(ViciSection, LookupsAreByKind) {
  Message m;
  m.set("v", "1");
  m.set_list("l", {"a"});
  m.add_section("s").set("inner", "x");
  EXPECT_EQ(m.value("l"), nullptr);
  EXPECT_EQ(m.value("s"), nullptr);
  EXPECT_EQ(m.list("v"), nullptr);
  EXPECT_EQ(m.section("v"), nullptr);
  EXPECT_EQ(m.value("inner"), nullptr);  // not searched recursively
  EXPECT_NE(m.section("s"), nullptr);
}

TEST(ViciSection, CopiesAreDeepAndMovesAreCheap) {
  Message original = random_message(7);
  original.add_section("child").set("k", "v");
  Message copy = original;
  EXPECT_EQ(copy, original);
  // Changing the copy's child leaves the original's alone.
  copy.entries().back().child->set("k", "changed");
  EXPECT_NE(copy, original);
  EXPECT_EQ(*original.entries().back().child->value("k"), "v");

  const Section* child_before = original.entries().back().child.get();
  Message moved = std::move(original);
  EXPECT_EQ(moved.entries().back().child.get(), child_before);

  Message assigned;
  assigned = moved;
  EXPECT_EQ(assigned, moved);
  const Message& same = assigned;
  assigned = same;  // self-assignment keeps the content
  EXPECT_EQ(assigned, moved);
}

TEST(ViciSection, EqualityIsOrderSensitive) {
  Message a, b;
  a.set("x", "1").set("y", "2");
  b.set("y", "2").set("x", "1");
  EXPECT_NE(a, b);
  Message c, d;
  c.add_section("s");
  d.set_list("s", {});
  EXPECT_NE(c, d);
}

}  // namespace
}  // namespace espgw::vici

// VICI messages as JSON: values are strings unless the caller's description says a path
// holds a number, and only unsigned decimal text is ever written bare.
#include "vici_bridge/vici_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace espgw::vici {
namespace {

Message sample() {
  Message message;
  message.set("name", "12");  // digits, but a name: stays a string
  auto& counters = message.add_section("counters");
  counters.set("drops", uint64_t{42});
  counters.set("odd", "12x");     // described as a number, but not one: stays a string
  counters.set("padded", "007");  // not canonical decimal: stays a string
  message.set_list("slots", {"1", "2"});
  return message;
}

TEST(ViciJsonTest, WithoutADescriptionEveryValueIsAString) {
  EXPECT_EQ(to_json(sample()),
            "{\n  \"name\": \"12\",\n  \"counters\": {\n    \"drops\": \"42\",\n    \"odd\": "
            "\"12x\",\n    \"padded\": \"007\"\n  },\n  \"slots\": [\"1\", \"2\"]\n}");
}

TEST(ViciJsonTest, DescribedNumbersAreWrittenBareByTheirPath) {
  std::vector<std::vector<std::string>> asked;
  const auto is_number = [&](const std::vector<std::string>& path) {
    asked.push_back(path);
    return path.size() == 2 && path[0] == "counters";
  };
  EXPECT_EQ(to_json(sample(), is_number),
            "{\n  \"name\": \"12\",\n  \"counters\": {\n    \"drops\": 42,\n    \"odd\": "
            "\"12x\",\n    \"padded\": \"007\"\n  },\n  \"slots\": [\"1\", \"2\"]\n}");
  // Only decimal text is asked about; a list's items by the list's name.
  const std::vector<std::vector<std::string>> expected = {
      {"name"}, {"counters", "drops"}, {"slots"}, {"slots"}};
  EXPECT_EQ(asked, expected);
}

}  // namespace
}  // namespace espgw::vici

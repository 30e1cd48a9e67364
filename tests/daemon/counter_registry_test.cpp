// The counter registry: names unique where they share a namespace, and the counter table of
// docs/counters.md exactly the registry's (family, name, meaning), so that the documentation
// cannot drift from what the log, the status and espgwctl show.
#include "daemon/counter_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace espgw::daemon {
namespace {

using Row = std::tuple<std::string, std::string, std::string>;

// "| `family` | `name` | meaning |" rows between the counter table's marker comments.
std::vector<Row> documented_rows() {
  std::ifstream file(std::string(ESPGW_SOURCE_DIR) + "/docs/counters.md");
  std::vector<Row> rows;
  bool inside = false;
  for (std::string line; std::getline(file, line);) {
    if (line.find("<!-- counters: begin") != std::string::npos) inside = true;
    if (line.find("<!-- counters: end") != std::string::npos) inside = false;
    if (!inside || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream stream(line.substr(1));
    for (std::string cell; std::getline(stream, cell, '|');) {
      const auto first = cell.find_first_not_of(' ');
      const auto last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    if (cells.size() < 3) continue;
    auto unquote = [](const std::string& cell) {
      return cell.size() >= 2 && cell.front() == '`' && cell.back() == '`'
                 ? cell.substr(1, cell.size() - 2)
                 : cell;
    };
    rows.emplace_back(unquote(cells[0]), unquote(cells[1]), cells[2]);
  }
  return rows;
}

std::string markdown(const std::vector<Row>& rows) {
  std::string text;
  for (const auto& [family, name, help] : rows)
    text += "| `" + family + "` | `" + name + "` | " + help + " |\n";
  return text;
}

TEST(CounterRegistryTest, NamesAreUniqueWithinEachFamily) {
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const auto& counter : all_counters())
    EXPECT_TRUE(seen.emplace(counter.family, counter.name).second)
        << counter.family << " " << counter.name;
}

TEST(CounterRegistryTest, DocsCountersMdListsEveryCounterWithItsMeaning) {
  std::vector<Row> registry;
  for (const auto& c : all_counters())
    registry.emplace_back(std::string(c.family), std::string(c.name), std::string(c.help));
  const std::vector<Row> documented = documented_rows();
  EXPECT_EQ(documented, registry)
      << "docs/counters.md's counter table (between its `<!-- counters: begin` and `end` "
         "markers) must read:\n"
      << markdown(registry);
}

TEST(CounterRegistryTest, DropReasonsHaveANameAndAMeaningEach) {
  for (size_t i = 1; i < esp::kDropReasonCount; ++i) {
    const auto reason = static_cast<esp::DropReason>(i);
    EXPECT_NE(esp::drop_reason_name(reason), "unknown");
    EXPECT_FALSE(esp::drop_reason_help(reason).empty()) << esp::drop_reason_name(reason);
  }
  EXPECT_EQ(esp::drop_reason_name(esp::DropReason::count_), "unknown");
}

TEST(CounterRegistryTest, NonzeroDropsAndTheirLogFormat) {
  esp::DropCounters counters;
  EXPECT_EQ(format_counters(nonzero_drops(counters), " none"), " none");
  counters.count(esp::DropReason::replayed);
  counters.count(esp::DropReason::replayed);
  counters.count(esp::DropReason::too_short);
  EXPECT_EQ(format_counters(nonzero_drops(counters), " none"), " too-short=1 replayed=2");
}

}  // namespace
}  // namespace espgw::daemon

namespace {

// The metrics type these as gauges: each must be a counter of the registry.
TEST(CounterRegistry, GaugesAreRegistryCounters) {
  const auto rows = espgw::daemon::all_counters();
  for (const auto gauge : espgw::daemon::kGaugeCounters)
    EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [&](const auto& row) {
      return row.name == gauge;
    })) << gauge;
}

}  // namespace

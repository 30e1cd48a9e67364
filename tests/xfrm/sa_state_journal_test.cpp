// The SA state file's journal: changes appended after the snapshot read back as the state
// they made; a final line cut short by a crash is ignored and yields nothing beyond what
// was durable; damage anywhere else, a line out of place or from another snapshot makes
// the state lost; a crash at any point of a compaction leaves a file that reads back right.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/temporary_directory.h"
#include "xfrm/sa_state_store.h"

namespace espgw::xfrm {
namespace {

using Records = std::map<SaStateKey, SaStateRecord>;

class SaStateJournalTest : public ::testing::Test {
 protected:
  std::string path(const char* name = SaStateStore::kStateFile) const {
    return directory_ + "/" + name;
  }
  std::string read(const std::string& file) const {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void write(const std::string& file, const std::string& text) const {
    std::ofstream(file, std::ios::trunc) << text;
  }
  // The state a fresh start reads from the directory as it is (nullopt: lost).
  std::optional<Records> reload() const {
    SaStateStore store(directory_);
    if (store.health() != SaStateStore::Health::loaded) return std::nullopt;
    const auto parsed = SaStateStore::parse(read(path()));
    EXPECT_TRUE(parsed);
    if (!parsed) return std::nullopt;
    for (const auto& [key, record] : *parsed) EXPECT_EQ(store.find(key), record);
    EXPECT_EQ(store.size(), parsed->size());
    return *parsed;
  }

  static SaStateRecord record(uint64_t high_water, uint32_t spi = 0x1001) {
    SaStateRecord out;
    out.high_water = high_water;
    out.spi = spi;
    out.destination = *esp::IpAddress::parse("192.0.2.2");
    return out;
  }
  static SaStateKey key(unsigned seed, Direction direction = Direction::out) {
    const uint8_t material[20] = {static_cast<uint8_t>(seed), static_cast<uint8_t>(seed >> 8), 7};
    return {direction, key_fingerprint(material)};
  }
  // What the store holds, to compare with what a restart reads.
  static Records contents(const SaStateStore& store, unsigned keys) {
    Records out;
    for (unsigned i = 0; i < keys; ++i)
      for (Direction direction : {Direction::out, Direction::in})
        if (auto found = store.find(key(i, direction))) out.emplace(key(i, direction), *found);
    return out;
  }

  test::TemporaryDirectory root_{"espgw-journal-test"};
  std::string directory_ = root_.path() + "/state";
};

TEST_F(SaStateJournalTest, AppendedChangesReloadAsTheState) {
  Records expected;
  {
    SaStateStore store(directory_);
    for (unsigned i = 0; i < 20; ++i) store.put(key(i), record(1000 + i));
    ASSERT_TRUE(store.write());
    EXPECT_EQ(store.stats().snapshots, 1u);
    for (unsigned round = 1; round <= 10; ++round) {
      store.put(key(round), record(1000 + round * 1000));         // a raise
      store.put(key(100 + round, Direction::in), record(round));  // a new key
      if (round % 3 == 0) store.erase(key(round - 1));            // a key charon deleted
      SaStateRecord held = record(0);
      held.held = true;
      if (round == 5) store.put(key(50), held);
      std::string error;
      ASSERT_TRUE(store.write(&error)) << error;
    }
    EXPECT_EQ(store.stats().snapshots, 1u) << "changes are appended, not rewritten";
    EXPECT_EQ(store.stats().appends, 10u);
    expected = contents(store, 200);
  }
  EXPECT_NE(read(path()).find("\nput 1 "), std::string::npos);
  EXPECT_NE(read(path()).find("\nerase "), std::string::npos);
  EXPECT_EQ(reload(), expected);
  EXPECT_FALSE(expected.contains(key(2))) << "erased keys stay erased";
  EXPECT_TRUE(expected.at(key(50)).held);
}

TEST_F(SaStateJournalTest, ATornLastLineNeverYieldsMoreThanWasDurable) {
  size_t last_line_at = 0;
  {
    SaStateStore store(directory_);
    store.put(key(1), record(1u << 20));
    store.put(key(2, Direction::in), record(640));
    ASSERT_TRUE(store.write());
    store.put(key(1), record(2u << 20));
    ASSERT_TRUE(store.write());
    last_line_at = read(path()).size();
    // The append a crash interrupts: a raise and a new key in one write.
    store.put(key(1), record(3u << 20));
    store.put(key(3), record(1u << 20));
    ASSERT_TRUE(store.write());
  }
  const std::string full = read(path());
  ASSERT_GT(full.size(), last_line_at);
  const auto complete = reload();
  ASSERT_TRUE(complete);
  EXPECT_EQ(complete->at(key(1)).high_water, 3u << 20);
  // The two lines of the interrupted write, in whatever order it put them.
  auto line_end_of = [&](const SaStateKey& changed) {
    char fingerprint[65];
    for (size_t i = 0; i < changed.key.size(); ++i)
      std::snprintf(fingerprint + 2 * i, 3, "%02x", changed.key[i]);
    return full.find('\n', full.find(fingerprint, last_line_at)) + 1;
  };
  const size_t raise_end = line_end_of(key(1));
  const size_t new_key_end = line_end_of(key(3));
  ASSERT_EQ(std::max(raise_end, new_key_end), full.size());
  for (size_t cut = last_line_at; cut < full.size(); ++cut) {
    write(path(), full.substr(0, cut));
    const auto records = reload();
    ASSERT_TRUE(records) << "cut at " << cut << " of " << full.size();
    // A complete line of the interrupted write may count (a reservation only ever grows,
    // so it is safe either way); the line being written never does.
    const uint64_t out = records->at(key(1)).high_water;
    EXPECT_EQ(out, cut >= raise_end ? 3u << 20 : 2u << 20) << "cut at " << cut;
    EXPECT_EQ(records->contains(key(3)), cut >= new_key_end) << "cut at " << cut;
    EXPECT_EQ(records->at(key(2, Direction::in)).high_water, 640u);
  }
  // The next start writes a clean file: the torn bytes go.
  write(path(), full.substr(0, full.size() - 5));
  {
    SaStateStore store(directory_);
    EXPECT_EQ(store.torn_bytes(), full.size() - 5 - std::min(raise_end, new_key_end));
    store.put(key(4), record(9));
    ASSERT_TRUE(store.write());
  }
  const auto after = reload();
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->contains(key(4)));
  EXPECT_EQ(read(path()).find("put "), std::string::npos) << "a new snapshot";
}

TEST_F(SaStateJournalTest, DamageBeforeTheLastLineOrAGapIsLost) {
  {
    SaStateStore store(directory_);
    store.put(key(1), record(100));
    ASSERT_TRUE(store.write());
    for (uint64_t i = 2; i <= 5; ++i) {
      store.put(key(1), record(100 * i));
      ASSERT_TRUE(store.write());
    }
  }
  const std::string good = read(path());
  std::vector<size_t> line_starts;
  for (size_t at = good.find("\nput "); at != std::string::npos; at = good.find("\nput ", at + 1))
    line_starts.push_back(at + 1);
  ASSERT_EQ(line_starts.size(), 4u);
  auto line = [&](size_t i) {
    const size_t end = i + 1 < line_starts.size() ? line_starts[i + 1] : good.size();
    return good.substr(line_starts[i], end - line_starts[i]);
  };
  std::vector<std::pair<std::string, std::string>> damaged;
  // Every byte of every complete line changed (the last line too: it is complete, so
  // its append returned).
  for (size_t at = line_starts[0]; at < good.size(); ++at) {
    if (good[at] == '\n') continue;
    std::string text = good;
    text[at] = text[at] == '0' ? '1' : '0';
    damaged.emplace_back("byte " + std::to_string(at), text);
  }
  // A line left out (a gap), two swapped, one repeated, the last one's newline lost
  // together with a line after it.
  damaged.emplace_back("gap", good.substr(0, line_starts[1]) + line(2) + line(3));
  damaged.emplace_back("swap", good.substr(0, line_starts[1]) + line(2) + line(1) + line(3));
  damaged.emplace_back("repeat", good + line(3));
  damaged.emplace_back("blank line", good.substr(0, line_starts[2]) + "\n" + line(2) + line(3));
  // A bad header, a snapshot cut short.
  damaged.emplace_back("header", "espgw-sa-state 3" + good.substr(16));
  damaged.emplace_back("generation", "espgw-sa-state 2 x" + good.substr(good.find('\n')));
  damaged.emplace_back("snapshot cut", good.substr(0, line_starts[0] - 2));
  for (const auto& [what, text] : damaged) {
    write(path(), text);
    EXPECT_FALSE(reload()) << what;
  }
  // Journal lines of another snapshot (another generation) do not continue this one.
  {
    SaStateStore store(directory_);  // lost: the same records in a new snapshot
    store.put(key(1), record(100));
    ASSERT_TRUE(store.write());
  }
  const std::string other = read(path());
  write(path(), other + line(0));
  EXPECT_FALSE(reload()) << "a journal line grafted onto another snapshot";
}

TEST_F(SaStateJournalTest, ACrashAtAnyStepOfACompactionReadsBackRight) {
  constexpr unsigned kKeys = SaStateStore::kMinCompaction + 44;
  SaStateStore store(directory_);
  for (unsigned i = 0; i < kKeys; ++i) store.put(key(i), record(1000));
  ASSERT_TRUE(store.write());
  // Raises until the next write is due to compact; one key removed on the way.
  uint64_t value = 1000;
  store.erase(key(0));
  ASSERT_TRUE(store.write());
  while (store.stats().file_records + 20 <= 2 * store.size()) {
    value += 1000;
    for (unsigned i = 1; i <= 20; ++i) store.put(key(i), record(value));
    ASSERT_TRUE(store.write());
  }
  ASSERT_EQ(store.stats().snapshots, 1u);
  const Records before = contents(store, kKeys);
  const std::string old_file = read(path());
  // The write that compacts: what it carries was never acknowledged until it returns.
  value += 1000;
  for (unsigned i = 1; i <= 20; ++i) store.put(key(i), record(value));
  ASSERT_TRUE(store.write());
  ASSERT_EQ(store.stats().snapshots, 2u) << "compacted";
  const Records after = contents(store, kKeys);
  const std::string new_file = read(path());
  EXPECT_LT(new_file.size(), old_file.size());
  EXPECT_EQ(new_file.find("put "), std::string::npos);

  const std::string temporary = path() + ".tmp";
  // The temporary file written part of the way, or whole and fsynced: the old file rules.
  for (size_t cut = 0; cut <= new_file.size(); cut += new_file.size() / 37 + 1) {
    write(path(), old_file);
    write(temporary, new_file.substr(0, cut));
    EXPECT_EQ(reload(), before) << "temporary cut at " << cut;
  }
  write(temporary, new_file);
  EXPECT_EQ(reload(), before) << "temporary complete, not renamed";
  // Renamed (whether or not the directory's fsync came): the new file.
  std::filesystem::remove(temporary);
  write(path(), new_file);
  EXPECT_EQ(reload(), after);
  EXPECT_FALSE(after.contains(key(0))) << "a removed key does not come back";
  EXPECT_FALSE(before.contains(key(0)));
  // Writing goes on after a start that found a stale temporary file.
  write(temporary, new_file.substr(0, 10));
  {
    SaStateStore again(directory_);
    again.put(key(1), record(value + 5));
    ASSERT_TRUE(again.write());
    again.put(key(2), record(value + 5));
    ASSERT_TRUE(again.write());
    EXPECT_EQ(again.stats().appends, 1u);
  }
  const auto last = reload();
  ASSERT_TRUE(last);
  EXPECT_EQ(last->at(key(2)).high_water, value + 5);
}

TEST_F(SaStateJournalTest, AVersion1FileIsReadAndReplacedByVersion2) {
  const std::string fingerprint(64, 'a');
  std::filesystem::create_directories(directory_);
  std::filesystem::permissions(directory_, std::filesystem::perms::owner_all);
  write(path(SaStateStore::kMarkerFile), "espgw keeps SA counter state here\n");
  write(path(), SaStateStore::file_text("out " + fingerprint + " 4242 spi 0x00001001 dst -\n"));
  SaStateKey old_key{Direction::out, {}};
  old_key.key.fill(0xaa);
  {
    SaStateStore store(directory_);
    ASSERT_EQ(store.health(), SaStateStore::Health::loaded);
    EXPECT_EQ(store.find(old_key)->high_water, 4242u);
    store.put(key(1), record(5));
    ASSERT_TRUE(store.write());
  }
  EXPECT_TRUE(read(path()).starts_with("espgw-sa-state 2 "));
  const auto records = reload();
  ASSERT_TRUE(records);
  EXPECT_EQ(records->at(old_key).high_water, 4242u);
  EXPECT_EQ(records->at(key(1)).high_water, 5u);
}

TEST_F(SaStateJournalTest, TheFileStaysProportionalToTheLiveKeys) {
  SaStateStore store(directory_);
  for (unsigned i = 0; i < 10; ++i) store.put(key(i), record(1));
  ASSERT_TRUE(store.write());
  for (uint64_t round = 2; round < 200; ++round) {
    store.put(key(round % 10), record(round));
    ASSERT_TRUE(store.write());
    EXPECT_LE(store.stats().file_records, 2 * SaStateStore::kMinCompaction + 1);
  }
  for (uint64_t round = 200; round < 800; ++round) {
    store.put(key(round % 10), record(round));
    ASSERT_TRUE(store.write());
  }
  EXPECT_GE(store.stats().snapshots, 2u);
  EXPECT_LE(store.stats().file_records, 2 * SaStateStore::kMinCompaction + 1);
}

}  // namespace
}  // namespace espgw::xfrm

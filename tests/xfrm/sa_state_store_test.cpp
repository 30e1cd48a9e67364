// The persisted SA counter state: what a restart reads back, and how a lost or damaged
// file is told apart from a first start.
#include "xfrm/sa_state_store.h"
#include "support/temporary_directory.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace espgw::xfrm {
namespace {

class SaStateStoreTest : public ::testing::Test {
 protected:
  std::string state_text() const {
    std::ifstream in(directory_ + "/" + SaStateStore::kStateFile);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  void write_state_text(const std::string& text) const {
    std::ofstream(directory_ + "/" + SaStateStore::kStateFile, std::ios::trunc) << text;
  }

  static SaStateRecord record(uint64_t high_water, uint32_t spi = 0,
                              esp::IpAddress destination = {}) {
    SaStateRecord out;
    out.high_water = high_water;
    out.spi = spi;
    out.destination = destination;
    return out;
  }
  static SaStateKey key(uint8_t seed, Direction direction = Direction::out) {
    const uint8_t material[20] = {seed, 1, 2, 3};
    return {direction, key_fingerprint(material)};
  }

  test::TemporaryDirectory root_{"espgw-state-test"};
  std::string directory_ = root_.path() + "/state";
};

TEST_F(SaStateStoreTest, FirstStartIsFreshAndCreatesAPrivateDirectory) {
  SaStateStore store(directory_);
  EXPECT_EQ(store.health(), SaStateStore::Health::fresh);
  struct stat status {};
  ASSERT_EQ(stat(directory_.c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0700u);
}

TEST_F(SaStateStoreTest, RecordsSurviveAReopen) {
  const auto destination = *esp::IpAddress::parse("192.0.2.2");
  {
    SaStateStore store(directory_);
    store.put(key(1), record(1u << 20, 0x1001, destination));
    store.put(key(2, Direction::in), record(4242, 0x2001));
    SaStateRecord held = record(0, 0x3001);
    held.held = true;
    store.put(key(3), held);
    std::string error;
    ASSERT_TRUE(store.write(&error)) << error;
  }
  SaStateStore again(directory_);
  EXPECT_EQ(again.health(), SaStateStore::Health::loaded);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again.find(key(1))->high_water, 1u << 20);
  EXPECT_EQ(again.find(key(1))->destination, destination);
  EXPECT_EQ(again.find(key(2, Direction::in))->high_water, 4242u);
  EXPECT_TRUE(again.find(key(3))->held);
  EXPECT_FALSE(again.find(key(2)));  // the direction is part of the key
  // The file never holds key material, only fingerprints.
  EXPECT_EQ(state_text().find("0102"), std::string::npos);
}

TEST_F(SaStateStoreTest, MissingStateAfterTheFirstStartIsLost) {
  {
    SaStateStore store(directory_);
    store.put(key(1), record(100));
    ASSERT_TRUE(store.write());
  }
  std::filesystem::remove(directory_ + "/" + SaStateStore::kStateFile);
  SaStateStore again(directory_);
  EXPECT_EQ(again.health(), SaStateStore::Health::lost);
  EXPECT_NE(again.lost_reason().find("missing"), std::string::npos);
}

TEST_F(SaStateStoreTest, EveryDamagedFileIsLostNeverFresh) {
  {
    SaStateStore store(directory_);
    store.put(key(1), record(100, 1));
    store.put(key(2), record(200, 2));
    ASSERT_TRUE(store.write());
  }
  const std::string good = state_text();
  std::vector<std::string> damaged;
  for (size_t cut = 0; cut < good.size(); cut += 7) damaged.push_back(good.substr(0, cut));
  std::string flipped = good;
  flipped[flipped.find("100")] = '9';  // a counter rolled back, checksum unchanged
  damaged.push_back(flipped);
  damaged.push_back("garbage\n");
  for (const auto& text : damaged) {
    write_state_text(text);
    SaStateStore again(directory_);
    EXPECT_EQ(again.health(), SaStateStore::Health::lost) << "text: " << text;
    EXPECT_EQ(again.size(), 0u);
  }
}

TEST_F(SaStateStoreTest, RefusesADirectoryOthersCanWrite) {
  ASSERT_EQ(mkdir(directory_.c_str(), 0777), 0);
  ASSERT_EQ(chmod(directory_.c_str(), 0777), 0);
  EXPECT_THROW(SaStateStore store(directory_), std::runtime_error);
}

TEST_F(SaStateStoreTest, WritesOnlyWhatChanged) {
  SaStateStore store(directory_);
  store.put(key(1), record(5));
  ASSERT_TRUE(store.write());
  std::filesystem::remove(directory_ + "/" + SaStateStore::kStateFile);
  store.put(key(1), record(5));  // unchanged: nothing to write
  ASSERT_TRUE(store.write());
  EXPECT_FALSE(std::filesystem::exists(directory_ + "/" + SaStateStore::kStateFile));
  store.put(key(1), record(6));
  ASSERT_TRUE(store.write());
  EXPECT_TRUE(std::filesystem::exists(directory_ + "/" + SaStateStore::kStateFile));
}

TEST_F(SaStateStoreTest, ParserRejectsMalformedRecords) {
  // Each bad record in a file whose checksum is right, so that the record itself is what
  // the parser refuses.
  auto signed_file = [](const std::string& records) {
    const std::string body = "espgw-sa-state 1\n" + records;
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned length = 0;
    EVP_Digest(body.data(), body.size(), digest, &length, EVP_sha256(), nullptr);
    std::string text = body + "sha256 ";
    for (unsigned i = 0; i < length; ++i) {
      char byte[3];
      std::snprintf(byte, sizeof byte, "%02x", digest[i]);
      text += byte;
    }
    return text + "\n";
  };
  const std::string fingerprint(64, 'a');
  std::string error;
  ASSERT_TRUE(SaStateStore::parse(signed_file("out " + fingerprint + " 1 spi 0x1 dst -\n"), &error))
      << error;
  for (const std::string& bad :
       {"fwd " + fingerprint + " 1 spi 0x1 dst -\n", "out " + fingerprint + " x spi 0x1 dst -\n",
        "out " + fingerprint.substr(1) + " 1 spi 0x1 dst -\n",
        "out " + fingerprint + " 1 spi 1 dst -\n",
        "out " + fingerprint + " 1 spi 0x1 dst nowhere\n", "out " + fingerprint + " 1\n",
        "out " + fingerprint + " 1 spi 0x1 dst -\nout " + fingerprint + " 2 spi 0x1 dst -\n"}) {
    EXPECT_FALSE(SaStateStore::parse(signed_file(bad), &error)) << bad;
  }
}

}  // namespace
}  // namespace espgw::xfrm

// The SPI table every received packet starts with: lookups through the per-thread cache
// follow every change, and the cache does not keep removed entries (their SAs' keys)
// alive once the thread looks anything up again.
#include "esp/spi_table.h"

#include <gtest/gtest.h>

#include <memory>

namespace espgw {
namespace {

struct Entry {
  explicit Entry(uint32_t value) : value_spi(value) {}
  uint32_t spi() const { return value_spi; }
  uint32_t value_spi;
};

TEST(SpiTable, CachedLookupsFollowAddsAndRemovals) {
  SpiTable<Entry> table;
  EXPECT_EQ(table.find_cached(0x100), nullptr);
  auto first = std::make_shared<Entry>(0x100);
  ASSERT_TRUE(table.add(first));
  EXPECT_FALSE(table.add(std::make_shared<Entry>(0x100))) << "an SPI is added once";
  EXPECT_EQ(table.find_cached(0x100), first.get());
  ASSERT_EQ(table.remove(0x100), first);
  EXPECT_EQ(table.find_cached(0x100), nullptr);
  auto second = std::make_shared<Entry>(0x100);  // the SPI reused by a new SA
  ASSERT_TRUE(table.add(second));
  EXPECT_EQ(table.find_cached(0x100), second.get());
}

TEST(SpiTable, TheCacheLetsGoOfRemovedEntriesAtTheNextLookup) {
  SpiTable<Entry> table;
  std::weak_ptr<Entry> removed;
  {
    auto entry = std::make_shared<Entry>(0x200);
    removed = entry;
    ASSERT_TRUE(table.add(std::move(entry)));
  }
  ASSERT_TRUE(table.add(std::make_shared<Entry>(0x201)));
  ASSERT_NE(table.find_cached(0x200), nullptr);  // now cached by this thread
  ASSERT_NE(table.find_cached(0x201), nullptr);
  table.remove(0x200);
  EXPECT_FALSE(removed.expired()) << "this thread's cache still holds it";
  // A lookup of another SPI, in another cache slot: the table changed, so the cache
  // drops what it held from before the change.
  EXPECT_NE(table.find_cached(0x201), nullptr);
  EXPECT_TRUE(removed.expired());
}

}  // namespace
}  // namespace espgw

// What the ipsec-mb backend assumes of the library: its ChaCha20-Poly1305 code reads at
// most 16 bytes past the 32-byte key (ipsec-mb 1.3's AVX2 code loads the key as two
// 32-byte loads), so the backend stores each key with 16 bytes of slack
// (crypto/ipsec_mb_backend.cpp). Here the key sits against a guard page with exactly that
// slack and every length from 1 to 1500 bytes is sealed and opened: a library that read
// further would fault and fail this test, on whichever code path this CPU gets.
#include <gtest/gtest.h>
#include <intel-ipsec-mb.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kKeyLength = 32;
constexpr size_t kSlackTheBackendKeeps = 16;

TEST(IpsecMbChaCha, ReadsNoFurtherPastTheKeyThanTheBackendsSlack) {
  IMB_MGR* manager = alloc_mb_mgr(0);
  ASSERT_NE(manager, nullptr);
  init_mb_mgr_auto(manager, nullptr);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapped =
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* region = static_cast<uint8_t*>(mapped);
  ASSERT_EQ(mprotect(region + page, page, PROT_NONE), 0);
  uint8_t* key = region + page - kSlackTheBackendKeeps - kKeyLength;
  for (size_t i = 0; i < kKeyLength; ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);

  alignas(16) uint8_t nonce[16] = {1, 2, 3};
  alignas(16) uint8_t aad[16] = {4, 5, 6};
  std::vector<uint8_t> plain(1500, 0x5A), sealed(1500), opened(1500);
  for (size_t length = 1; length <= plain.size(); ++length) {
    uint8_t tag[16], computed[16];
    chacha20_poly1305_context_data context;
    IMB_CHACHA20_POLY1305_INIT(manager, key, &context, nonce, aad, 8);
    IMB_CHACHA20_POLY1305_ENC_UPDATE(manager, key, &context, sealed.data(), plain.data(), length);
    IMB_CHACHA20_POLY1305_ENC_FINALIZE(manager, &context, tag, sizeof tag);
    IMB_CHACHA20_POLY1305_INIT(manager, key, &context, nonce, aad, 8);
    IMB_CHACHA20_POLY1305_DEC_UPDATE(manager, key, &context, opened.data(), sealed.data(), length);
    IMB_CHACHA20_POLY1305_DEC_FINALIZE(manager, &context, computed, sizeof computed);
    ASSERT_EQ(std::memcmp(tag, computed, sizeof tag), 0) << "length " << length;
    ASSERT_EQ(std::memcmp(opened.data(), plain.data(), length), 0) << "length " << length;
  }
  munmap(mapped, 2 * page);
  free_mb_mgr(manager);
}

}  // namespace

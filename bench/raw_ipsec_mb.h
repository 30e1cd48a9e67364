// The raw ipsec-mb baseline shared by the benchmarks: a manager for the benchmark's main
// thread, and the name of the code path ipsec-mb chose, for the report's context.
#pragma once

#include <intel-ipsec-mb.h>

#include <new>
#include <stdexcept>

namespace espgw::bench {

// The code path init_mb_mgr_auto picked (set by the first raw_manager() call).
inline IMB_ARCH g_arch = IMB_ARCH_NONE;

inline IMB_MGR* raw_manager() {
  static IMB_MGR* const manager = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) throw std::bad_alloc();
    init_mb_mgr_auto(m, &g_arch);
    if (imb_get_errno(m) != 0) throw std::runtime_error("ipsec-mb: init_mb_mgr_auto failed");
    return m;
  }();
  return manager;
}

inline const char* arch_name(IMB_ARCH arch) {
  switch (arch) {
    case IMB_ARCH_NOAESNI:
      return "no-aesni";
    case IMB_ARCH_SSE:
      return "sse";
    case IMB_ARCH_AVX:
      return "avx";
    case IMB_ARCH_AVX2:
      return "avx2";
    case IMB_ARCH_AVX512:
      return "avx512";
    default:
      return "unknown";
  }
}

}  // namespace espgw::bench

// Names the calling thread, so that top -H, ps -L, perf and gdb tell espgw's threads apart
// (a TUN reader from a WAN reader from a crypto worker) instead of showing "espgw" for all.
#pragma once

#include <string_view>

namespace espgw {

// Linux keeps 15 characters of a thread name; a longer one is cut to that.
inline constexpr size_t kThreadNameMax = 15;

void name_this_thread(std::string_view name);

}  // namespace espgw

// Thread names: each of espgw's threads says what it does in top -H, ps -L and perf.
#include "util/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include "pipeline/pipeline.h"

namespace espgw {
namespace {

std::string name_of(pthread_t thread) {
  char name[kThreadNameMax + 1] = {};
  EXPECT_EQ(pthread_getname_np(thread, name, sizeof name), 0);
  return name;
}

// What the kernel reports for this process's threads, as top -H reads it.
std::set<std::string> thread_names_of_this_process() {
  std::set<std::string> names;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.insert(name);
  }
  return names;
}

// The name a new thread has after it asked for `requested`.
std::string name_after_asking_for(std::string_view requested) {
  std::string seen;
  std::thread thread([&] {
    name_this_thread(requested);
    seen = name_of(pthread_self());
  });
  thread.join();
  return seen;
}

TEST(ThreadName, NamesTheCallingThread) {
  EXPECT_EQ(name_after_asking_for("tun-rx-3"), "tun-rx-3");
}

TEST(ThreadName, ALongNameIsCutToWhatLinuxKeeps) {
  EXPECT_EQ(name_after_asking_for("a-name-longer-than-fifteen"), "a-name-longer-t");
}

TEST(ThreadName, PipelineWorkersAndTimerCarryTheirRoles) {
  pipeline::PipelineConfig config;
  config.workers = 2;
  pipeline::Pipeline pipeline(config);
  // Each thread names itself as it starts: wait for them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::set<std::string> names;
  for (;;) {
    names = thread_names_of_this_process();
    if ((names.count("crypto-0") && names.count("crypto-1") && names.count("reorder-timer")) ||
        std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(names.count("crypto-0"));
  EXPECT_TRUE(names.count("crypto-1"));
  EXPECT_TRUE(names.count("reorder-timer"));
}

}  // namespace
}  // namespace espgw

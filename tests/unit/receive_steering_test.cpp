// Receive steering on the TUN device: the CPU mask text the kernel takes, and which
// rps_cpus files are written, against a directory laid out like /sys/class/net. The
// gateway's real device is checked in tests/netns (site_to_site.sh: tun-rps).
#include "io/receive_steering.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace espgw::io {
namespace {

cpu_set_t cpus_of(std::initializer_list<int> list) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : list) CPU_SET(cpu, &set);
  return set;
}

TEST(CpuMaskText, IsTheKernelsBitmapFormat) {
  EXPECT_EQ(cpu_mask_text(cpus_of({0, 1})), "3");
  EXPECT_EQ(cpu_mask_text(cpus_of({1, 4})), "12");
  EXPECT_EQ(cpu_mask_text(cpus_of({})), "0");
  cpu_set_t forty;
  CPU_ZERO(&forty);
  for (int cpu = 0; cpu < 40; ++cpu) CPU_SET(cpu, &forty);
  EXPECT_EQ(cpu_mask_text(forty), "ff,ffffffff") << "groups of 32 CPUs, the highest first";
  EXPECT_EQ(cpu_mask_text(cpus_of({32})), "1,00000000");
  EXPECT_EQ(cpu_mask_text(cpus_of({0, 64})), "1,00000000,00000001");
}

class SteerReceiveQueues : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("espgw-rps-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    write(root_ / "espgw0" / "ifindex", "7\n");
    for (const char* queue : {"rx-0", "rx-1", "tx-0"})
      write(root_ / "espgw0" / "queues" / queue / "rps_cpus", "0\n");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static void write(const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }
  std::string read(const char* queue) const {
    std::ifstream file(root_ / "espgw0" / "queues" / queue / "rps_cpus");
    std::string line;
    std::getline(file, line);
    return line;
  }

  // Steers `device` with index `ifindex` expecting a refusal; returns its reason.
  std::string refusal(const char* device, unsigned ifindex) const {
    const auto result = steer_receive_queues(root_.string(), device, ifindex, "3");
    EXPECT_FALSE(result) << "steering " << device << " should have been refused";
    return result.error;
  }

  std::filesystem::path root_;
};

TEST_F(SteerReceiveQueues, WritesTheMaskToEveryReceiveQueue) {
  const auto result = steer_receive_queues(root_.string(), "espgw0", 7, "3");
  ASSERT_TRUE(result) << result.error;
  EXPECT_EQ(result.queues_set, 2u);
  EXPECT_EQ(result.queues_kept, 0u);
  EXPECT_EQ(read("rx-0"), "3");
  EXPECT_EQ(read("rx-1"), "3");
  EXPECT_EQ(read("tx-0"), "0") << "transmit queues have no rps_cpus of their own to set";
}

TEST_F(SteerReceiveQueues, LeavesAQueueWhoseCpusAnAdministratorSet) {
  write(root_ / "espgw0" / "queues" / "rx-1" / "rps_cpus", "00000000,00000004\n");
  const auto result = steer_receive_queues(root_.string(), "espgw0", 7, "3");
  ASSERT_TRUE(result) << result.error;
  EXPECT_EQ(result.queues_set, 1u);
  EXPECT_EQ(result.queues_kept, 1u);
  EXPECT_EQ(read("rx-0"), "3");
  EXPECT_EQ(read("rx-1"), "00000000,00000004");
}

TEST_F(SteerReceiveQueues, WritesNothingToAnotherNamespacesDeviceOfTheSameName) {
  const std::string why = refusal("espgw0", 12);
  EXPECT_NE(why.find("another network namespace"), std::string::npos) << why;
  EXPECT_EQ(read("rx-0"), "0");
  EXPECT_EQ(read("rx-1"), "0");
}

TEST_F(SteerReceiveQueues, AMissingDeviceIsAClearError) {
  const std::string why = refusal("espgw9", 7);
  EXPECT_NE(why.find("espgw9 not found"), std::string::npos) << why;
}

TEST_F(SteerReceiveQueues, AFailedWriteIsReportedWithTheSystemsReason) {
  // A directory where the file should be: open(O_WRONLY) fails with EISDIR.
  std::filesystem::remove(root_ / "espgw0" / "queues" / "rx-0" / "rps_cpus");
  std::filesystem::create_directories(root_ / "espgw0" / "queues" / "rx-0" / "rps_cpus");
  const std::string why = refusal("espgw0", 7);
  EXPECT_NE(why.find("Is a directory"), std::string::npos) << why;
}

}  // namespace
}  // namespace espgw::io

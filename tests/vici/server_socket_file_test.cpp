// The control socket's file: a stale one replaced and a live one not, other files never
// replaced, the file removed with the server, the client's connect errors, and peers of
// another user refused whatever the file's mode allows.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "support/temporary_directory.h"
#include "vici_bridge/vici_client.h"
#include "vici_bridge/vici_server.h"

namespace espgw::vici {
namespace {

TEST(ViciServerSocket, StaleSocketIsReplacedLiveOneIsNot) {
  test::TemporaryDirectory dir{"vici-test"};
  const std::string path = dir.path() + "/s.vici";
  {
    // A socket file nobody listens on, as a crashed daemon leaves it.
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    close(fd);
  }
  Server server(path);
  server.start();
  EXPECT_THROW(Server second(path), std::system_error);
  try {
    Server second(path);
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  // The failed second server must not have removed the live one's socket.
  Client client(path);
  EXPECT_THROW(client.request("none"), UnknownCommand);
}

TEST(ViciServerSocket, RefusesToReplaceOtherFiles) {
  test::TemporaryDirectory dir{"vici-test"};
  const std::string path = dir.path() + "/not-a-socket";
  { std::ofstream(path) << "data"; }
  EXPECT_THROW(Server server(path), std::system_error);
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
  EXPECT_THROW(Server server(dir.path() + "/missing-dir/s.vici"), std::system_error);
  EXPECT_THROW(Server server(dir.path() + "/" + std::string(120, 'x')), std::system_error);
}

TEST(ViciServerSocket, DestructorRemovesTheSocketFile) {
  test::TemporaryDirectory dir{"vici-test"};
  const std::string path = dir.path() + "/s.vici";
  {
    Server server(path);
    server.start();
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  { Server never_started(path); }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ViciClient, ConnectErrorsNameThePath) {
  test::TemporaryDirectory dir{"vici-test"};
  const std::string path = dir.path() + "/absent.vici";
  try {
    Client client(path);
    FAIL() << "connected to nothing";
  } catch (const std::system_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_THROW(Client("tcp://127.0.0.1:4502"), std::runtime_error);
  EXPECT_THROW(Client(std::string(200, 'p')), std::runtime_error);
}

// Not "Concurrent": it forks, which the TSan build does not cope with in threaded tests.
TEST(ViciServerPeer, OtherUsersAreRefusedEvenIfTheModeAllows) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another uid";
  test::TemporaryDirectory dir{"vici-test"};
  const std::string path = dir.path() + "/s.vici";
  Server server(path);
  server.start();
  // Loosen what the mode protects, to reach the SO_PEERCRED check behind it.
  ASSERT_EQ(chmod(dir.path().c_str(), 0711), 0);
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  const std::vector<uint8_t> request = encode_packet({PacketType::cmd_request, "x", {}});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only system calls from here: exit 0 if the server closed on us without a reply.
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(2);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) _exit(3);
    [[maybe_unused]] ssize_t sent = send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    uint8_t byte;
    const ssize_t n = recv(fd, &byte, 1, 0);
    _exit(n <= 0 ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(server.stats().connections_refused, 1u);
  EXPECT_EQ(server.stats().connections_accepted, 0u);
}

}  // namespace
}  // namespace espgw::vici

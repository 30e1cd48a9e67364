// A directory of its own under /tmp for one test, removed with everything in it when the
// test ends, so that tests running at once (ctest -j, the sanitizer builds) never share
// state files or sockets.
#pragma once

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <system_error>

namespace espgw::test {

class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& prefix = "espgw-test") {
    std::string pattern = "/tmp/" + prefix + ".XXXXXX";
    if (!mkdtemp(pattern.data()))
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace espgw::test

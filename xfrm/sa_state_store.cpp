#include "xfrm/sa_state_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace espgw::xfrm {

namespace {

constexpr std::string_view kHeader = "espgw-sa-state 1\n";
constexpr std::string_view kChecksumWord = "sha256 ";

std::string hex(const uint8_t* data, size_t length) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (size_t i = 0; i < length; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 0x0F]);
  }
  return out;
}

bool unhex(std::string_view text, uint8_t* out, size_t length) {
  if (text.size() != length * 2) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < length; ++i) {
    const int high = nibble(text[2 * i]);
    const int low = nibble(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<uint8_t>(high << 4 | low);
  }
  return true;
}

std::string sha256_hex(std::string_view text) {
  uint8_t digest[EVP_MAX_MD_SIZE];
  unsigned length = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed");
  return hex(digest, length);
}

template <typename T>
bool parse_number(std::string_view text, T& value, int base = 10) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  return error == std::errc() && end == text.data() + text.size();
}

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (at < line.size()) {
    const size_t end = line.find(' ', at);
    out.push_back(
        line.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  return out;
}

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

bool read_file(const std::string& path, std::string& text) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char chunk[4096];
  ssize_t n;
  while ((n = read(fd, chunk, sizeof chunk)) > 0) text.append(chunk, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

// Writes `text` to `path` durably: a temporary file in the same directory, fsync, rename
// over `path`, fsync of the directory (without the last, a crash may bring back the old
// file).
bool write_durably(const std::string& directory, const std::string& path, std::string_view text,
                   std::string* error) {
  const std::string temporary = path + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (error) *error = errno_text(temporary);
    return false;
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (error) *error = errno_text(temporary);
      close(fd);
      unlink(temporary.c_str());
      return false;
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    if (error) *error = errno_text("fsync " + temporary);
    close(fd);
    unlink(temporary.c_str());
    return false;
  }
  close(fd);
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    if (error) *error = errno_text("rename " + temporary);
    unlink(temporary.c_str());
    return false;
  }
  const int directory_fd = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd < 0 || fsync(directory_fd) != 0) {
    if (error) *error = errno_text("fsync " + directory);
    if (directory_fd >= 0) close(directory_fd);
    return false;
  }
  close(directory_fd);
  return true;
}

}  // namespace

SaStateStore::SaStateStore(std::string directory) : directory_(std::move(directory)) {
  if (directory_.empty()) throw std::runtime_error("state directory: empty path");
  if (mkdir(directory_.c_str(), 0700) != 0 && errno == ENOENT) {
    // The default is one level below /var/lib/espgw, which the unit or package makes; a
    // bare install may not have it yet.
    const std::string parent = directory_.substr(0, directory_.find_last_of('/'));
    if (!parent.empty()) mkdir(parent.c_str(), 0700);
    mkdir(directory_.c_str(), 0700);
  }
  if (access(directory_.c_str(), F_OK) != 0)
    throw std::runtime_error(errno_text("state directory " + directory_));
  struct stat status {};
  if (stat(directory_.c_str(), &status) != 0)
    throw std::runtime_error(errno_text("state directory " + directory_));
  if (!S_ISDIR(status.st_mode))
    throw std::runtime_error("state directory " + directory_ + ": not a directory");
  // Anyone who can write here can roll the counters back (replace sa-state with an old
  // copy) and make espgw reuse nonces.
  if (status.st_mode & (S_IWGRP | S_IWOTH))
    throw std::runtime_error("state directory " + directory_ +
                             ": writable by group or others; chmod go-w it");
  if (access(directory_.c_str(), W_OK) != 0)
    throw std::runtime_error(errno_text("state directory " + directory_));

  const std::string state_path = directory_ + "/" + kStateFile;
  const std::string marker_path = directory_ + "/" + kMarkerFile;
  const bool marked = access(marker_path.c_str(), F_OK) == 0;
  std::string text;
  if (!read_file(state_path, text)) {
    if (errno != ENOENT) {
      health_ = Health::lost;
      lost_reason_ = errno_text(state_path);
    } else if (marked) {
      health_ = Health::lost;
      lost_reason_ = state_path + " is missing although " + marker_path + " exists";
    } else {
      health_ = Health::fresh;
    }
  } else if (std::string why; auto records = parse(text, &why)) {
    health_ = Health::loaded;
    records_ = std::move(*records);
  } else {
    health_ = Health::lost;
    lost_reason_ = state_path + ": " + why;
  }
  if (!marked) {
    std::string error;
    if (!write_durably(directory_, marker_path, "espgw keeps SA counter state here\n", &error))
      throw std::runtime_error("state directory: " + error);
  }
  // The first write happens on the first reservation; a lost state is rewritten then too,
  // with the held records that stand for what was lost.
  dirty_ = true;
}

std::optional<SaStateRecord> SaStateStore::find(const SaStateKey& key) const {
  const auto found = records_.find(key);
  if (found == records_.end()) return std::nullopt;
  return found->second;
}

void SaStateStore::put(const SaStateKey& key, const SaStateRecord& record) {
  auto [at, inserted] = records_.try_emplace(key, record);
  if (!inserted) {
    if (at->second == record) return;
    at->second = record;
  }
  dirty_ = true;
}

void SaStateStore::erase(const SaStateKey& key) {
  if (records_.erase(key) != 0) dirty_ = true;
}

bool SaStateStore::write(std::string* error, bool force) {
  if (!dirty_ && !force) return true;
  if (directory_.empty()) {
    dirty_ = false;
    return true;
  }
  const std::string text = serialize(records_);
  if (!write_durably(directory_, directory_ + "/" + kStateFile, text, error)) return false;
  dirty_ = false;
  return true;
}

std::string SaStateStore::serialize(const std::map<SaStateKey, SaStateRecord>& records) {
  std::string body;
  for (const auto& [key, record] : records) {
    char spi[11];
    std::snprintf(spi, sizeof spi, "0x%08x", record.spi);
    body += std::string(direction_name(key.direction)) + " " + hex(key.key.data(), key.key.size()) +
            " " + (record.held ? std::string("held") : std::to_string(record.high_water)) +
            " spi " + spi + " dst " +
            (record.destination.family ? record.destination.to_string() : std::string("-")) + "\n";
  }
  return file_text(body);
}

std::string SaStateStore::file_text(std::string_view record_lines) {
  const std::string body = std::string(kHeader) + std::string(record_lines);
  return body + std::string(kChecksumWord) + sha256_hex(body) + "\n";
}

std::optional<std::map<SaStateKey, SaStateRecord>> SaStateStore::parse(const std::string& text,
                                                                       std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = why;
    return std::nullopt;
  };
  if (!text.starts_with(kHeader)) return fail("not an espgw SA state file (header)");
  // The checksum line closes the file: a torn or truncated write fails here.
  const size_t checksum_at = text.rfind(kChecksumWord);
  if (checksum_at == std::string::npos || checksum_at < kHeader.size() ||
      text[checksum_at - 1] != '\n' || !text.ends_with("\n"))
    return fail("no checksum line (truncated?)");
  const std::string_view body(text.data(), checksum_at);
  const std::string_view checksum(text.data() + checksum_at + kChecksumWord.size(),
                                  text.size() - checksum_at - kChecksumWord.size() - 1);
  if (checksum != sha256_hex(body)) return fail("checksum mismatch");

  std::map<SaStateKey, SaStateRecord> records;
  size_t line_number = 1;
  size_t at = kHeader.size();
  while (at < body.size()) {
    ++line_number;
    const size_t end = body.find('\n', at);
    const std::string_view line = body.substr(at, end - at);
    at = end + 1;
    const auto w = words(line);
    auto bad = [&](const char* what) {
      return fail("line " + std::to_string(line_number) + ": " + what);
    };
    if (w.size() != 7 || w[3] != "spi" || w[5] != "dst") return bad("malformed record");
    SaStateKey key;
    const auto direction = parse_direction(w[0]);
    if (!direction || *direction == Direction::fwd) return bad("bad direction");
    key.direction = *direction;
    if (!unhex(w[1], key.key.data(), key.key.size())) return bad("bad key fingerprint");
    SaStateRecord record;
    if (w[2] == "held")
      record.held = true;
    else if (!parse_number(w[2], record.high_water))
      return bad("bad counter");
    if (!w[4].starts_with("0x") || !parse_number(w[4].substr(2), record.spi, 16))
      return bad("bad spi");
    if (w[6] != "-") {
      const auto destination = esp::IpAddress::parse(w[6]);
      if (!destination) return bad("bad destination");
      record.destination = *destination;
    }
    if (!records.emplace(key, record).second) return bad("duplicate key");
  }
  return records;
}

}  // namespace espgw::xfrm

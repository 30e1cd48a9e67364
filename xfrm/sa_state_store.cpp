#include "xfrm/sa_state_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace espgw::xfrm {

namespace {

constexpr std::string_view kHeaderV1 = "espgw-sa-state 1\n";
constexpr std::string_view kHeaderV2 = "espgw-sa-state 2 ";
constexpr std::string_view kChecksumWord = "sha256 ";
// 128 bits of SHA-256 per journal line: enough to tell damage from a record, short enough
// that a line stays about as long as a snapshot record.
constexpr size_t kCheckDigits = 32;

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

std::string key_fields(const SaStateKey& key) {
  return std::string(direction_name(key.direction)) + " " + hex(key.key.data(), key.key.size());
}

std::string record_fields(const SaStateKey& key, const SaStateRecord& record) {
  char spi[11];
  std::snprintf(spi, sizeof spi, "0x%08x", record.spi);
  return key_fields(key) + " " +
         (record.held ? std::string("held") : std::to_string(record.high_water)) + " spi " + spi +
         " dst " + (record.destination.family ? record.destination.to_string() : std::string("-"));
}

// A journal line's CHECK: bound to the line before it (or the snapshot) through `previous`.
std::string chain_check(std::string_view previous, std::string_view line) {
  std::string input;
  input.reserve(previous.size() + 1 + line.size());
  input.append(previous).push_back('\n');
  input.append(line);
  return sha256_hex(input).substr(0, kCheckDigits);
}

// Fields KEY (direction and fingerprint) at w[at], w[at + 1].
const char* parse_key(const std::vector<std::string_view>& w, size_t at, SaStateKey& key) {
  const auto direction = parse_direction(w[at]);
  if (!direction || *direction == Direction::fwd) return "bad direction";
  key.direction = *direction;
  if (!unhex(w[at + 1], key.key.data(), key.key.size())) return "bad key fingerprint";
  return nullptr;
}

// A record's seven fields from w[at]: KEY COUNTER|held spi 0xSPI dst ADDRESS|-.
const char* parse_record(const std::vector<std::string_view>& w, size_t at, SaStateKey& key,
                         SaStateRecord& record) {
  if (w.size() != at + 7 || w[at + 3] != "spi" || w[at + 5] != "dst") return "malformed record";
  if (const char* bad = parse_key(w, at, key)) return bad;
  record = SaStateRecord{};
  if (w[at + 2] == "held")
    record.held = true;
  else if (!parse_number(w[at + 2], record.high_water))
    return "bad counter";
  if (!w[at + 4].starts_with("0x") || !parse_number(w[at + 4].substr(2), record.spi, 16))
    return "bad spi";
  if (w[at + 6] != "-") {
    const auto destination = esp::IpAddress::parse(w[at + 6]);
    if (!destination) return "bad destination";
    record.destination = *destination;
  }
  return nullptr;
}

// What a whole file says.
struct Loaded {
  std::map<SaStateKey, SaStateRecord> records;
  uint64_t generation = 0;
  size_t file_records = 0;  // snapshot records and journal lines
  std::string chain;        // the last CHECK, or the snapshot's checksum
  uint64_t next_index = 1;
  size_t torn_bytes = 0;  // a final line cut short (ignored)
};

// The snapshot's record lines (between the header and the checksum line).
bool parse_snapshot_records(std::string_view lines, size_t first_line_number, Loaded& loaded,
                            std::string& why) {
  size_t line_number = first_line_number;
  size_t at = 0;
  while (at < lines.size()) {
    const size_t end = lines.find('\n', at);
    const std::string_view line = lines.substr(at, end - at);
    at = end + 1;
    SaStateKey key;
    SaStateRecord record;
    const char* bad = parse_record(words(line), 0, key, record);
    if (!bad && !loaded.records.emplace(key, record).second) bad = "duplicate key";
    if (bad) {
      why = "line " + std::to_string(line_number) + ": " + bad;
      return false;
    }
    ++line_number;
    ++loaded.file_records;
  }
  return true;
}

std::optional<Loaded> load_text(const std::string& text, std::string* error) {
  auto fail = [&](const std::string& why) -> std::optional<Loaded> {
    if (error) *error = why;
    return std::nullopt;
  };
  Loaded loaded;
  std::string why;
  if (text.starts_with(kHeaderV1)) {
    // Version 1: the snapshot alone, its checksum line closing the file.
    const size_t checksum_at = text.rfind(kChecksumWord);
    if (checksum_at == std::string::npos || checksum_at < kHeaderV1.size() ||
        text[checksum_at - 1] != '\n' || !text.ends_with("\n"))
      return fail("no checksum line (truncated?)");
    const std::string_view body(text.data(), checksum_at);
    const std::string_view checksum(text.data() + checksum_at + kChecksumWord.size(),
                                    text.size() - checksum_at - kChecksumWord.size() - 1);
    if (checksum != sha256_hex(body)) return fail("checksum mismatch");
    if (!parse_snapshot_records(body.substr(kHeaderV1.size()), 2, loaded, why)) return fail(why);
    return loaded;
  }
  if (!text.starts_with(kHeaderV2)) return fail("not an espgw SA state file (header)");
  const size_t header_end = text.find('\n');
  if (header_end == std::string::npos ||
      !parse_number(std::string_view(text).substr(kHeaderV2.size(), header_end - kHeaderV2.size()),
                    loaded.generation))
    return fail("not an espgw SA state file (header)");
  // The snapshot ends at the first line that starts with the checksum word (a record line
  // starts with its direction). It is written whole and renamed into place, so a snapshot
  // that is cut short is damage, never a torn write.
  size_t checksum_at = header_end + 1;
  while (checksum_at < text.size() &&
         std::string_view(text).substr(checksum_at).substr(0, kChecksumWord.size()) !=
             kChecksumWord) {
    const size_t end = text.find('\n', checksum_at);
    if (end == std::string::npos) break;
    checksum_at = end + 1;
  }
  const size_t checksum_end = text.find('\n', checksum_at);
  if (checksum_at >= text.size() || checksum_end == std::string::npos ||
      std::string_view(text).substr(checksum_at, kChecksumWord.size()) != kChecksumWord)
    return fail("no checksum line (truncated?)");
  const std::string_view body(text.data(), checksum_at);
  const std::string_view checksum(text.data() + checksum_at + kChecksumWord.size(),
                                  checksum_end - checksum_at - kChecksumWord.size());
  if (checksum != sha256_hex(body)) return fail("checksum mismatch");
  if (!parse_snapshot_records(body.substr(header_end + 1), 2, loaded, why)) return fail(why);
  loaded.chain = std::string(checksum);

  // The journal.
  size_t at = checksum_end + 1;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) {
      // Cut short by a crash during its append, which therefore never returned: nothing
      // this line carried was made usable.
      loaded.torn_bytes = text.size() - at;
      break;
    }
    const std::string_view line(text.data() + at, end - at);
    at = end + 1;
    auto bad = [&](const std::string& what) {
      return fail("journal line " + std::to_string(loaded.next_index) + ": " + what);
    };
    const size_t check_at = line.rfind(' ');
    if (check_at == std::string_view::npos) return bad("malformed");
    const std::string_view fields = line.substr(0, check_at);
    if (line.substr(check_at + 1) != chain_check(loaded.chain, fields))
      return bad("check mismatch (damaged, out of place or from another snapshot)");
    const auto w = words(fields);
    uint64_t index = 0;
    if (w.size() < 2 || !parse_number(w[1], index) || index != loaded.next_index)
      return bad("out of sequence");
    SaStateKey key;
    if (w[0] == "put") {
      SaStateRecord record;
      if (const char* problem = parse_record(w, 2, key, record)) return bad(problem);
      loaded.records.insert_or_assign(key, record);
    } else if (w[0] == "erase") {
      if (w.size() != 4) return bad("malformed erase");
      if (const char* problem = parse_key(w, 2, key)) return bad(problem);
      loaded.records.erase(key);
    } else {
      return bad("unknown operation");
    }
    loaded.chain = std::string(line.substr(check_at + 1));
    ++loaded.next_index;
    ++loaded.file_records;
  }
  return loaded;
}

// The snapshot text for `records`; `checksum` gets its checksum hex (the journal's start).
std::string snapshot_text(const std::map<SaStateKey, SaStateRecord>& records, uint64_t generation,
                          std::string* checksum) {
  std::string body = std::string(kHeaderV2) + std::to_string(generation) + "\n";
  body.reserve(records.size() * 140 + body.size() + 80);
  for (const auto& [key, record] : records) {
    body += record_fields(key, record);
    body.push_back('\n');
  }
  const std::string sum = sha256_hex(body);
  if (checksum) *checksum = sum;
  return body + std::string(kChecksumWord) + sum + "\n";
}

// Appends to `out` the journal line for `operation` ("put"/"erase") and its fields,
// numbered `index` and chained from `chain`; both are advanced.
void journal_line(std::string& out, std::string_view operation, std::string_view fields,
                  uint64_t& index, std::string& chain) {
  std::string line =
      std::string(operation) + " " + std::to_string(index) + " " + std::string(fields);
  chain = chain_check(chain, line);
  out += line;
  out.push_back(' ');
  out += chain;
  out.push_back('\n');
  ++index;
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
  } else if (std::string why; auto loaded = load_text(text, &why)) {
    health_ = Health::loaded;
    records_ = std::move(loaded->records);
    stats_.generation = loaded->generation;
    torn_bytes_ = loaded->torn_bytes;
  } else {
    health_ = Health::lost;
    lost_reason_ = state_path + ": " + why;
  }
  if (!marked) {
    std::string error;
    if (!write_durably(directory_, marker_path, "espgw keeps SA counter state here\n", &error))
      throw std::runtime_error("state directory: " + error);
  }
  // The first write happens on the first reservation, as a new snapshot; a lost state is
  // rewritten then too, with the held records that stand for what was lost, and a torn
  // final journal line goes.
  dirty_ = true;
  snapshot_due_ = true;
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
  changed_.push_back(key);
}

void SaStateStore::erase(const SaStateKey& key) {
  if (records_.erase(key) == 0) return;
  dirty_ = true;
  changed_.push_back(key);
}

bool SaStateStore::write(std::string* error, bool force) {
  if (!dirty_ && !force) return true;
  if (directory_.empty()) {
    dirty_ = false;
    changed_.clear();
    return true;
  }
  std::sort(changed_.begin(), changed_.end());
  changed_.erase(std::unique(changed_.begin(), changed_.end()), changed_.end());
  // About twice the live records in the file: a new snapshot, so that the file (and the
  // next start's reading) stays proportional to the keys, and each change costs O(1)
  // amortised.
  const bool snapshot =
      force || snapshot_due_ ||
      stats_.file_records + changed_.size() > 2 * std::max(records_.size(), kMinCompaction);
  if (!snapshot) {
    switch (append(error)) {
      case AppendResult::done:
        return true;
      case AppendResult::failed:
        return false;
      case AppendResult::snapshot:
        break;
    }
  }
  return write_snapshot(error);
}

bool SaStateStore::write_snapshot(std::string* error) {
  std::string checksum;
  // A snapshot written after a loss must not repeat an earlier one (whose journal lines
  // would then continue it): the clock's nanoseconds when they are ahead.
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const uint64_t generation =
      std::max(stats_.generation + 1, static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u +
                                          static_cast<uint64_t>(now.tv_nsec));
  const std::string text = snapshot_text(records_, generation, &checksum);
  snapshot_due_ = true;  // until this one is in place
  if (!write_durably(directory_, directory_ + "/" + kStateFile, text, error)) return false;
  stats_.generation = generation;
  ++stats_.snapshots;
  stats_.file_records = records_.size();
  file_size_ = text.size();
  chain_ = std::move(checksum);
  next_index_ = 1;
  snapshot_due_ = false;
  dirty_ = false;
  changed_.clear();
  return true;
}

SaStateStore::AppendResult SaStateStore::append(std::string* error) {
  const std::string path = directory_ + "/" + kStateFile;
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return AppendResult::snapshot;  // removed under us: write it anew
    if (error) *error = errno_text(path);
    return AppendResult::failed;
  }
  // Appending to a file that is not as this store left it (replaced, cut, grown) would
  // break its chain: a new snapshot instead.
  struct stat status {};
  if (fstat(fd, &status) != 0 || static_cast<uint64_t>(status.st_size) != file_size_) {
    close(fd);
    return AppendResult::snapshot;
  }
  std::string text;
  text.reserve(changed_.size() * 180);
  uint64_t index = next_index_;
  std::string chain = chain_;
  for (const SaStateKey& key : changed_) {
    const auto found = records_.find(key);
    if (found != records_.end())
      journal_line(text, "put", record_fields(key, found->second), index, chain);
    else
      journal_line(text, "erase", key_fields(key), index, chain);
  }
  auto failed = [&](const std::string& what) {
    if (error) *error = errno_text(what);
    close(fd);
    // Some of it may be in the file: only a new snapshot can follow.
    snapshot_due_ = true;
    return AppendResult::failed;
  };
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failed(path);
    written += static_cast<size_t>(n);
  }
  // The line is durable, and with it the file's new length, once this returns: only then
  // may the caller use what it reserves.
  if (fdatasync(fd) != 0) return failed("fdatasync " + path);
  close(fd);
  ++stats_.appends;
  stats_.file_records += changed_.size();
  file_size_ += text.size();
  chain_ = std::move(chain);
  next_index_ = index;
  dirty_ = false;
  changed_.clear();
  return AppendResult::done;
}

std::string SaStateStore::serialize(const std::map<SaStateKey, SaStateRecord>& records,
                                    uint64_t generation) {
  return snapshot_text(records, generation, nullptr);
}

std::string SaStateStore::file_text(std::string_view record_lines) {
  const std::string body = std::string(kHeaderV1) + std::string(record_lines);
  return body + std::string(kChecksumWord) + sha256_hex(body) + "\n";
}

std::string SaStateStore::append_journal(std::string file, std::string_view operations) {
  const auto loaded = load_text(file, nullptr);
  if (!loaded || file.starts_with(kHeaderV1) || loaded->torn_bytes != 0) return file;
  uint64_t index = loaded->next_index;
  std::string chain = loaded->chain;
  size_t at = 0;
  while (at < operations.size()) {
    size_t end = operations.find('\n', at);
    if (end == std::string_view::npos) end = operations.size();
    const std::string_view line = operations.substr(at, end - at);
    at = end + 1;
    const size_t space = line.find(' ');
    journal_line(file, line.substr(0, space),
                 space == std::string_view::npos ? std::string_view() : line.substr(space + 1),
                 index, chain);
  }
  return file;
}

std::optional<std::map<SaStateKey, SaStateRecord>> SaStateStore::parse(const std::string& text,
                                                                       std::string* error) {
  auto loaded = load_text(text, error);
  if (!loaded) return std::nullopt;
  return std::move(loaded->records);
}

}  // namespace espgw::xfrm

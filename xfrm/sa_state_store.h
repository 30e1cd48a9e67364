// The SA counter state that must survive a restart: for each key, the highest outbound
// sequence number that may have been used and the highest inbound sequence number that
// may have been accepted. AES-GCM and ChaCha20-Poly1305 take the sequence number as their
// IV, so an outbound counter that restarts at 1 under the same key repeats nonces; an
// inbound window that restarts empty accepts replays of what it already delivered.
//
// Records are keyed by the key's fingerprint (xfrm/key_fingerprint.h): nonce uniqueness is
// a property of the key, whatever SPI or addresses it is installed under. The daemon
// reserves ahead (write-ahead): a number is used only once a value at or above it is on
// disk, so after a crash the counter continues past the last reservation.
//
// One file, `sa-state`, in the state directory: a snapshot followed by a journal.
//
//   espgw-sa-state 2 GENERATION
//   out|in FINGERPRINT COUNTER|held spi 0xSPI dst ADDRESS|-      one line per key
//   sha256 HEX                        SHA-256 of every byte above it
//   put INDEX out|in FINGERPRINT COUNTER|held spi 0xSPI dst ADDRESS|- CHECK
//   erase INDEX out|in FINGERPRINT CHECK
//
// The snapshot (the lines up to the sha256 line) is written whole: a temporary file,
// fsync, rename over the old one, fsync of the directory. Each later change is a journal
// line appended and fdatasynced; write() returns only after that, so a reservation is
// usable only once its line is durable. Journal lines are numbered from 1 and each ends
// in CHECK, the first 32 hex digits of SHA-256(previous CHECK, or for line 1 the
// snapshot's sha256 hex, "\n", the line up to its CHECK): a line checks itself, its place
// and the snapshot (and so the generation) it belongs to. On reading, a final line without
// its newline is the write that a crash cut short: its append never returned, so nothing
// it carried was used, and it is ignored. Anything else that fails (the header, the
// snapshot's checksum, a complete line's CHECK or number) makes the whole file unusable.
// GENERATION grows with every snapshot and is at least the wall clock's nanoseconds, so
// that a snapshot written after a loss never repeats an earlier one. When the file has
// grown to about twice the live records, the next write is a new snapshot in place of
// snapshot and journal; so is the first write after a start, and the first after a failed
// write. A crash during a snapshot leaves the old file or the new one, both whole.
//
// Version 1 files (espgw-sa-state 1: the snapshot alone, no journal) are still read, so
// that a state directory from before the journal keeps its counters (holding every key
// after an upgrade would stop every static SA); the first write replaces them with
// version 2.
//
// A second file, `initialized`, is made once and never rewritten: a directory that has it
// but no readable `sa-state` has lost its state (health lost), which is not the same as a
// first start (health fresh).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "esp/ip_address.h"
#include "xfrm/direction.h"
#include "xfrm/key_fingerprint.h"

namespace espgw::xfrm {

struct SaStateKey {
  Direction direction = Direction::out;
  KeyFingerprint key{};
  auto operator<=>(const SaStateKey&) const = default;
};

struct SaStateRecord {
  // Outbound: every sequence number up to this one may have been used. Inbound: every
  // sequence number up to this one may have been accepted.
  uint64_t high_water = 0;
  // Nothing is known about the counter under this key (its state was lost): the SA must
  // not carry traffic until it is replaced by a new key. Persisted, so that a later start
  // does not mistake the key for a new one.
  bool held = false;
  // For the operator reading the file: where the key was last installed.
  uint32_t spi = 0;
  esp::IpAddress destination;
  bool operator==(const SaStateRecord&) const = default;
};

class SaStateStore {
 public:
  enum class Health {
    fresh,   // first start in this directory: no state was ever written
    loaded,  // sa-state read and verified
    lost,    // the directory was used before but sa-state is missing or corrupt
  };

  // An in-memory store that never touches the disk (tests, tools).
  SaStateStore() = default;
  // Opens `directory`, creating it (and its parent) with mode 0700 when missing, and reads
  // its state. Throws
  // std::runtime_error when the directory cannot be used (not a directory, not writable,
  // writable by group or others).
  explicit SaStateStore(std::string directory);

  Health health() const { return health_; }
  // Why the state counts as lost (empty unless health() is lost).
  const std::string& lost_reason() const { return lost_reason_; }
  const std::string& directory() const { return directory_; }
  // Bytes of a journal line cut short by a crash at the end of the file, ignored on loading
  // (the append never returned, so nothing it carried was used).
  size_t torn_bytes() const { return torn_bytes_; }

  std::optional<SaStateRecord> find(const SaStateKey& key) const;
  void put(const SaStateKey& key, const SaStateRecord& record);
  void erase(const SaStateKey& key);
  size_t size() const { return records_.size(); }

  // Makes the records durable when they changed since the last successful write (or always
  // with `force`, as a new snapshot): appends the changed ones to the journal, or writes a
  // new snapshot when one is due. Returns false, with `error` set, when the write failed:
  // the caller must then not rely on anything it put since. An in-memory store always
  // succeeds.
  bool write(std::string* error = nullptr, bool force = false);

  struct Stats {
    uint64_t appends = 0;     // journal writes (each one fdatasync)
    uint64_t snapshots = 0;   // whole-file writes
    uint64_t generation = 0;  // of the file on disk
    size_t file_records = 0;  // snapshot plus journal lines in the file
  };
  const Stats& stats() const { return stats_; }

  // The text of a snapshot of the records (what a compaction puts on disk), and the parser
  // of a whole file: nullopt when the text is not a verified state file (version 1 or 2).
  static std::string serialize(const std::map<SaStateKey, SaStateRecord>& records,
                               uint64_t generation = 1);
  // A version 1 state file around record lines as they are: the header and the checksum
  // line.
  static std::string file_text(std::string_view record_lines);
  // `file` (a version 2 snapshot, possibly with journal lines) with the journal lines
  // `operations` appended, each numbered and checked as write() does ("put KEY..." or
  // "erase KEY", without INDEX and CHECK); for tests and the fuzz target.
  static std::string append_journal(std::string file, std::string_view operations);
  static std::optional<std::map<SaStateKey, SaStateRecord>> parse(const std::string& text,
                                                                  std::string* error = nullptr);

  static constexpr const char* kStateFile = "sa-state";
  static constexpr const char* kMarkerFile = "initialized";
  // No snapshot is rewritten for fewer journal lines than this.
  static constexpr size_t kMinCompaction = 256;

 private:
  enum class AppendResult { done, failed, snapshot };
  bool write_snapshot(std::string* error);
  AppendResult append(std::string* error);

  std::string directory_;  // empty: in memory only
  Health health_ = Health::fresh;
  std::string lost_reason_;
  size_t torn_bytes_ = 0;
  std::map<SaStateKey, SaStateRecord> records_;
  bool dirty_ = false;
  // Keys put or erased since the last write: what the next append writes.
  std::vector<SaStateKey> changed_;
  // The next write is a snapshot: the first after a start, or after a failed write (whose
  // bytes may have reached the file).
  bool snapshot_due_ = true;
  // The file as this store last wrote it: its length, the last CHECK (the chain's end)
  // and the next journal line's number.
  uint64_t file_size_ = 0;
  std::string chain_;
  uint64_t next_index_ = 1;
  Stats stats_;
};

}  // namespace espgw::xfrm

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
// One file, `sa-state`, in the state directory, written whole: a temporary file, fsync,
// rename over the old one, fsync of the directory. A second file, `initialized`, is made
// once and never rewritten: a directory that has it but no readable `sa-state` has lost
// its state (health lost), which is not the same as a first start (health fresh).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

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

  std::optional<SaStateRecord> find(const SaStateKey& key) const;
  void put(const SaStateKey& key, const SaStateRecord& record);
  void erase(const SaStateKey& key);
  size_t size() const { return records_.size(); }

  // Writes the records when they changed since the last successful write (or always with
  // `force`). Returns false, with `error` set, when the write failed: the caller must then
  // not rely on anything it put since. An in-memory store always succeeds.
  bool write(std::string* error = nullptr, bool force = false);

  // The file's text for the records (what write() puts on disk), and its parser: nullopt
  // when the text is not a complete, verified state file.
  static std::string serialize(const std::map<SaStateKey, SaStateRecord>& records);
  // A state file around record lines as they are: the header and the checksum line.
  static std::string file_text(std::string_view record_lines);
  static std::optional<std::map<SaStateKey, SaStateRecord>> parse(const std::string& text,
                                                                  std::string* error = nullptr);

  static constexpr const char* kStateFile = "sa-state";
  static constexpr const char* kMarkerFile = "initialized";

 private:
  std::string directory_;  // empty: in memory only
  Health health_ = Health::fresh;
  std::string lost_reason_;
  std::map<SaStateKey, SaStateRecord> records_;
  bool dirty_ = false;
};

}  // namespace espgw::xfrm

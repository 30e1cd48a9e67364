// The kernel's nftables notifications (the NFNLGRP_NFTABLES netlink group), for the handles
// of the rules a transaction of this thread added: libnftables' echo would give them too,
// but asks the kernel for every rule of the ruleset first (its cache) to print them, which
// costs as much as the table is large.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace espgw::xfrm {

class NftablesEvents {
 public:
  // Subscribes; valid() is false when the socket could not be opened.
  NftablesEvents();
  ~NftablesEvents();
  NftablesEvents(const NftablesEvents&) = delete;
  NftablesEvents& operator=(const NftablesEvents&) = delete;
  bool valid() const { return fd_ >= 0; }

  // Drops what is queued (before a transaction of ours). False when another process
  // committed a transaction since the last call (or notifications were lost): the
  // ruleset may have changed behind our back.
  bool drain();

  struct Commit {
    uint32_t generation = 0;
    // The rules of `table` the transaction added, in its order: (chain, handle).
    std::vector<std::pair<std::string, uint64_t>> rules;
  };
  // After a transaction this thread committed: what it added to table `table`. nullopt
  // when its notifications cannot be read whole (lost, or another's in between).
  std::optional<Commit> own_commit(const std::string& table);

 private:
  int fd_ = -1;
};

}  // namespace espgw::xfrm

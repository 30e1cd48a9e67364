// Keeps N CHILD_SAs of a child config up, so that an ECMP group (the SAs of one reqid)
// has N members to hash flows over. espgw asks charon over VICI (charon's own socket):
// it counts the INSTALLED CHILD_SAs of each configured child with list-sas, and
// initiates more while there are fewer than N, whenever charon reports a CHILD_SA or
// IKE_SA going up or down, and every few seconds besides.
//
// charon 5.9.8 refuses a second CHILD_SA of one child config on one IKE_SA, so each
// initiate must make its own IKE_SA: the initiating charon needs `reuse_ikesa = no`, and
// the responder a `unique` policy that keeps the parallel IKE_SAs (`no` or `keep`). All
// of them get the same reqid (charon allocates reqids by traffic selectors), so their
// outbound SAs land in one SA group; inbound, every member's SA is accepted.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace espgw::daemon {

struct ParallelChild {
  std::string name;  // the child config's name in swanctl.conf
  unsigned count = 1;
};

class ParallelChildren {
 public:
  // `charon_vici`: the path (or unix:// URI) of charon's VICI socket.
  ParallelChildren(std::string charon_vici, std::vector<ParallelChild> children);
  ~ParallelChildren();
  ParallelChildren(const ParallelChildren&) = delete;
  ParallelChildren& operator=(const ParallelChildren&) = delete;

  void start();
  void stop();

 private:
  void run();
  // One pass: count and initiate what is missing. Returns false if charon is unreachable.
  bool reconcile();

  std::string charon_vici_;
  std::vector<ParallelChild> children_;
  std::atomic<bool> running_{false};
  std::thread thread_;
};

}  // namespace espgw::daemon

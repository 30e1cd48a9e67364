// Receive packet steering (RPS) on espgw's own TUN device, so that the kernel keeps each
// flow in the order espgw wrote it.
//
// With workers, one SA's packets are written to the TUN device in sequence order but by
// whichever worker delivers them. The kernel processes a TUN write in the writing thread,
// on its CPU, and what comes after can reorder packets that two CPUs wrote: a veth or
// bridge port queues each packet on the sending CPU's backlog, and a NIC picks its
// transmit queue by CPU (XPS). With RPS the write only queues the packet on the backlog of
// one CPU chosen by the flow's hash, in the order of the writes, and the kernel forwards
// it from there (docs/gateway_tun.md, "Order after the TUN write").
#pragma once

#include <sched.h>

#include <string>

namespace espgw::io {

// A CPU set in the kernel's bitmap text (what rps_cpus reads and takes): hexadecimal, in
// comma-separated groups of 32 CPUs, the highest first. {0, 1} -> "3", CPUs 0-39 ->
// "ff,ffffffff".
std::string cpu_mask_text(const cpu_set_t& cpus);

struct SteeringResult {
  unsigned queues_set = 0;   // receive queues whose rps_cpus this call wrote
  unsigned queues_kept = 0;  // receive queues that already had CPUs set (left alone)
  std::string error;         // empty on success
  explicit operator bool() const { return error.empty(); }
};

// Writes `mask` (cpu_mask_text) to rps_cpus of every receive queue of `device`, under
// `sysfs_net` (/sys/class/net, or a test's directory), unless a queue already has CPUs
// set (the administrator's choice). `ifindex` is the device's index in espgw's network
// namespace: sysfs shows the namespace it was mounted in, which need not be ours (a
// daemon started by `nsenter --net` without a new /sys), and a different index there
// means another device of that name: nothing is written then.
SteeringResult steer_receive_queues(const std::string& sysfs_net, const std::string& device,
                                    unsigned ifindex, const std::string& mask);

}  // namespace espgw::io

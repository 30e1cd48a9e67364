#include "xfrm/nftables_events.h"

#include <arpa/inet.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace espgw::xfrm {
namespace {

constexpr uint16_t message_type(uint16_t message) {
  return static_cast<uint16_t>((NFNL_SUBSYS_NFTABLES << 8) | message);
}

uint32_t read_be32(const char* data) {
  uint32_t value;
  std::memcpy(&value, data, sizeof value);
  return ntohl(value);
}

uint64_t read_be64(const char* data) {
  return (uint64_t{read_be32(data)} << 32) | read_be32(data + 4);
}

// One notification's attributes that matter here.
struct Notification {
  uint16_t type = 0;
  std::string table, chain;
  uint64_t handle = 0;
  uint32_t generation = 0, pid = 0;
};

Notification parse(const nlmsghdr* header) {
  Notification n;
  n.type = header->nlmsg_type;
  const char* base = reinterpret_cast<const char*>(header);
  for (size_t at = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
       at + sizeof(nlattr) <= header->nlmsg_len;) {
    nlattr attribute;
    std::memcpy(&attribute, base + at, sizeof attribute);
    if (attribute.nla_len < sizeof(nlattr) || at + attribute.nla_len > header->nlmsg_len) break;
    const char* payload = base + at + NLA_HDRLEN;
    const size_t length = attribute.nla_len - NLA_HDRLEN;
    const uint16_t kind = attribute.nla_type & NLA_TYPE_MASK;
    if (n.type == message_type(NFT_MSG_NEWRULE)) {
      if (kind == NFTA_RULE_TABLE) n.table.assign(payload, strnlen(payload, length));
      if (kind == NFTA_RULE_CHAIN) n.chain.assign(payload, strnlen(payload, length));
      if (kind == NFTA_RULE_HANDLE && length >= 8) n.handle = read_be64(payload);
    } else if (n.type == message_type(NFT_MSG_NEWGEN)) {
      if (kind == NFTA_GEN_ID && length >= 4) n.generation = read_be32(payload);
      if (kind == NFTA_GEN_PROC_PID && length >= 4) n.pid = read_be32(payload);
    }
    at += NLA_ALIGN(attribute.nla_len);
  }
  return n;
}

// Reads what is queued without waiting; calls `each` per notification. False when the
// kernel dropped some (the socket's buffer overflowed).
template <typename Each>
bool read_queued(int fd, Each&& each) {
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const ssize_t length = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (length < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    ssize_t remaining = length;
    for (auto* header = reinterpret_cast<const nlmsghdr*>(buffer.data());
         NLMSG_OK(header, remaining); header = NLMSG_NEXT(header, remaining))
      if (!each(parse(header))) return true;
  }
}

}  // namespace

NftablesEvents::NftablesEvents() {
  fd_ = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd_ < 0) return;
  sockaddr_nl address{};
  address.nl_family = AF_NETLINK;
  address.nl_groups = 1u << (NFNLGRP_NFTABLES - 1);
  // Room for a transaction's notifications (a shared rule's set comes whole).
  const int bytes = 32 << 20;
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

NftablesEvents::~NftablesEvents() {
  if (fd_ >= 0) close(fd_);
}

bool NftablesEvents::drain() {
  const uint32_t self = static_cast<uint32_t>(syscall(SYS_gettid));
  bool foreign = false;
  const bool whole = read_queued(fd_, [&](const Notification& n) {
    if (n.type == message_type(NFT_MSG_NEWGEN) && n.pid != self) foreign = true;
    return true;
  });
  return whole && !foreign;
}

std::optional<NftablesEvents::Commit> NftablesEvents::own_commit(const std::string& table) {
  // The kernel sends a transaction's notifications while it commits it, before it answers
  // the batch, and ends them with the new generation and the committing thread's id.
  const uint32_t self = static_cast<uint32_t>(syscall(SYS_gettid));
  Commit commit;
  bool done = false, foreign = false;
  const bool whole = read_queued(fd_, [&](const Notification& n) {
    if (n.type == message_type(NFT_MSG_NEWRULE) && n.table == table) {
      commit.rules.emplace_back(n.chain, n.handle);
    } else if (n.type == message_type(NFT_MSG_NEWGEN)) {
      if (n.pid != self) {
        foreign = true;
        commit.rules.clear();
        return true;
      }
      commit.generation = n.generation;
      done = true;
      return false;
    }
    return true;
  });
  if (!whole || !done || foreign) return std::nullopt;
  return commit;
}

}  // namespace espgw::xfrm

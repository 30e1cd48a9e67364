#include "xfrm/nftables_rule_batch.h"

#include <libmnl/libmnl.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

namespace espgw::xfrm {
namespace {

// Room left before each message: a rule of one policy is well under 2 KiB of attributes.
constexpr size_t kMessageRoom = 8192;

struct RuleFree {
  void operator()(nftnl_rule* rule) const { nftnl_rule_free(rule); }
};
using Rule = std::unique_ptr<nftnl_rule, RuleFree>;
struct SocketClose {
  void operator()(mnl_socket* socket) const { mnl_socket_close(socket); }
};

void add_meta(nftnl_rule* rule, uint32_t key) {
  nftnl_expr* expr = nftnl_expr_alloc("meta");
  nftnl_expr_set_u32(expr, NFTNL_EXPR_META_KEY, key);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_META_DREG, NFT_REG_1);
  nftnl_rule_add_expr(rule, expr);
}

void add_cmp(nftnl_rule* rule, uint32_t op, const void* data, uint32_t length) {
  nftnl_expr* expr = nftnl_expr_alloc("cmp");
  nftnl_expr_set_u32(expr, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_CMP_OP, op);
  nftnl_expr_set_data(expr, NFTNL_EXPR_CMP_DATA, data, length);
  nftnl_rule_add_expr(rule, expr);
}

void add_payload(nftnl_rule* rule, uint32_t base, uint32_t offset, uint32_t length) {
  nftnl_expr* expr = nftnl_expr_alloc("payload");
  nftnl_expr_set_u32(expr, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_PAYLOAD_BASE, base);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_PAYLOAD_LEN, length);
  nftnl_rule_add_expr(rule, expr);
}

void add_verdict(nftnl_rule* rule, int verdict, const char* chain = nullptr) {
  nftnl_expr* expr = nftnl_expr_alloc("immediate");
  nftnl_expr_set_u32(expr, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_IMM_VERDICT, static_cast<uint32_t>(verdict));
  if (chain) nftnl_expr_set_str(expr, NFTNL_EXPR_IMM_CHAIN, chain);
  nftnl_rule_add_expr(rule, expr);
}

void add_counter(nftnl_rule* rule) {
  nftnl_expr* expr = nftnl_expr_alloc("counter");
  nftnl_expr_set_u64(expr, NFTNL_EXPR_CTR_PACKETS, 0);
  nftnl_expr_set_u64(expr, NFTNL_EXPR_CTR_BYTES, 0);
  nftnl_rule_add_expr(rule, expr);
}

std::array<uint8_t, 16> prefix_mask(unsigned length) {
  std::array<uint8_t, 16> mask{};
  for (unsigned bit = 0; bit < length; ++bit)
    mask[bit / 8] |= static_cast<uint8_t>(0x80 >> (bit % 8));
  return mask;
}

bool host_bits_clear(const esp::IpPrefix& prefix) {
  const auto mask = prefix_mask(prefix.length);
  for (size_t i = 0; i < prefix.address.length(); ++i)
    if ((prefix.address.bytes[i] & ~mask[i]) != 0) return false;
  return true;
}

// As nft writes `ip saddr 10.2.0.0/16`: a byte-aligned prefix loads only its own bytes, any
// other loads the whole address and masks it.
void add_prefix_match(nftnl_rule* rule, const esp::IpPrefix& prefix, bool source) {
  const bool v4 = prefix.address.family == 4;
  const uint32_t size = v4 ? 4 : 16;
  const uint32_t offset = v4 ? (source ? 12 : 16) : (source ? 8 : 24);
  if (prefix.length % 8 == 0) {
    add_payload(rule, NFT_PAYLOAD_NETWORK_HEADER, offset, prefix.length / 8u);
    add_cmp(rule, NFT_CMP_EQ, prefix.address.bytes.data(), prefix.length / 8u);
    return;
  }
  add_payload(rule, NFT_PAYLOAD_NETWORK_HEADER, offset, size);
  const auto mask = prefix_mask(prefix.length);
  const std::array<uint8_t, 16> zeros{};
  nftnl_expr* expr = nftnl_expr_alloc("bitwise");
  nftnl_expr_set_u32(expr, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_BITWISE_OP, NFT_BITWISE_BOOL);
  nftnl_expr_set_u32(expr, NFTNL_EXPR_BITWISE_LEN, size);
  nftnl_expr_set_data(expr, NFTNL_EXPR_BITWISE_MASK, mask.data(), size);
  nftnl_expr_set_data(expr, NFTNL_EXPR_BITWISE_XOR, zeros.data(), size);
  nftnl_rule_add_expr(rule, expr);
  add_cmp(rule, NFT_CMP_EQ, prefix.address.bytes.data(), size);
}

// As nft writes `th dport 53` (one compare) and `th dport 1000-2000` (two).
void add_port_match(nftnl_rule* rule, const PortRange& ports, bool source) {
  add_payload(rule, NFT_PAYLOAD_TRANSPORT_HEADER, source ? 0 : 2, 2);
  const uint8_t first[2] = {static_cast<uint8_t>(ports.first >> 8),
                            static_cast<uint8_t>(ports.first)};
  const uint8_t last[2] = {static_cast<uint8_t>(ports.last >> 8), static_cast<uint8_t>(ports.last)};
  if (ports.first == ports.last) {
    add_cmp(rule, NFT_CMP_EQ, first, 2);
    return;
  }
  add_cmp(rule, NFT_CMP_GTE, first, 2);
  add_cmp(rule, NFT_CMP_LTE, last, 2);
}

// firewall_match(policy) and firewall_policy_rule's verdict, expression for expression.
Rule policy_rule(const std::string& table, const std::string& chain, const Policy& policy) {
  Rule rule(nftnl_rule_alloc());
  nftnl_rule* r = rule.get();
  nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
  nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table.c_str());
  nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain.c_str());
  const Selector& selector = policy.selector;
  const bool outbound = policy.direction == Direction::out;
  const esp::IpPrefix& source = outbound ? selector.local : selector.remote;
  const esp::IpPrefix& destination = outbound ? selector.remote : selector.local;
  const PortRange& source_ports = outbound ? selector.local_ports : selector.remote_ports;
  const PortRange& destination_ports = outbound ? selector.remote_ports : selector.local_ports;
  const uint8_t nfproto = selector.local.address.family == 4 ? NFPROTO_IPV4 : NFPROTO_IPV6;
  add_meta(r, NFT_META_NFPROTO);
  add_cmp(r, NFT_CMP_EQ, &nfproto, 1);
  if (source.length != 0) add_prefix_match(r, source, true);
  if (destination.length != 0) add_prefix_match(r, destination, false);
  if (selector.protocol != 0) {
    add_meta(r, NFT_META_L4PROTO);
    add_cmp(r, NFT_CMP_EQ, &selector.protocol, 1);
  }
  if (!source_ports.is_any()) add_port_match(r, source_ports, true);
  if (!destination_ports.is_any()) add_port_match(r, destination_ports, false);
  switch (policy.action) {
    case PolicyAction::protect:
      add_verdict(r, NFT_GOTO, outbound ? "to_tunnel_only" : "from_tunnel_only");
      break;
    case PolicyAction::bypass:
      add_verdict(r, NF_ACCEPT);
      break;
    case PolicyAction::discard:
      add_counter(r);
      add_verdict(r, NF_DROP);
      break;
  }
  return rule;
}

}  // namespace

NftablesRuleBatch::NftablesRuleBatch(std::string table_name) : table_name_(std::move(table_name)) {}

bool NftablesRuleBatch::builds(const Policy& policy) {
  const Selector& selector = policy.selector;
  const uint8_t family = selector.local.address.family;
  if ((family != 4 && family != 6) || selector.remote.address.family != family) return false;
  if (selector.protocol == 0 && (!selector.local_ports.is_any() || !selector.remote_ports.is_any()))
    return false;
  for (const auto& ports : {selector.local_ports, selector.remote_ports})
    if (ports.first > ports.last) return false;
  return host_bits_clear(selector.local) && host_bits_clear(selector.remote);
}

void NftablesRuleBatch::insert(const std::string& chain, const Policy& policy, uint64_t before) {
  operations_.push_back({chain, policy, before, true});
}

void NftablesRuleBatch::remove(const std::string& chain, uint64_t handle) {
  operations_.push_back({chain, {}, handle, false});
}

void NftablesRuleBatch::append(const NftablesRuleBatch& other) {
  operations_.insert(operations_.end(), other.operations_.begin(), other.operations_.end());
}

Result NftablesRuleBatch::commit(std::string_view what) const {
  Result result;
  const auto fail = [&](int error, const std::string& detail) {
    result.ok = false;
    result.error = error;
    result.message = "nftables: " + std::string(what) + " failed: " + detail;
    return result;
  };
  if (operations_.empty()) return result;
  std::unique_ptr<mnl_socket, SocketClose> socket(mnl_socket_open(NETLINK_NETFILTER));
  if (!socket || mnl_socket_bind(socket.get(), 0, MNL_SOCKET_AUTOPID) < 0)
    return fail(errno, std::string("netfilter netlink socket: ") + std::strerror(errno));
  const int fd = mnl_socket_get_fd(socket.get());
  // The errors of the kernel's answer without the request copied into each.
  const int one = 1;
  setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);

  std::vector<char> buffer(kMessageRoom * 2);
  size_t used = 0;
  const auto room = [&]() -> char* {
    if (buffer.size() - used < kMessageRoom) buffer.resize(buffer.size() * 2);
    return buffer.data() + used;
  };
  const uint32_t first_sequence = static_cast<uint32_t>(time(nullptr));
  uint32_t sequence = first_sequence;
  used += nftnl_batch_begin(room(), sequence++)->nlmsg_len;
  // Only the last message asks for an acknowledgement: thousands of them would overflow the
  // socket's receive buffer. An error is answered whatever the flags, and the kernel
  // answers every message before the batch's end, so the last one's answer comes last.
  for (size_t index = 0; index < operations_.size(); ++index) {
    const Operation& operation = operations_[index];
    const uint16_t ack = index + 1 == operations_.size() ? NLM_F_ACK : 0;
    if (operation.insert) {
      const Rule rule = policy_rule(table_name_, operation.chain, operation.policy);
      // Before the rule of handle `position`; without one, at the chain's end.
      uint16_t flags = NLM_F_CREATE | ack;
      if (operation.handle != 0)
        nftnl_rule_set_u64(rule.get(), NFTNL_RULE_POSITION, operation.handle);
      else
        flags |= NLM_F_APPEND;
      nlmsghdr* header =
          nftnl_nlmsg_build_hdr(room(), NFT_MSG_NEWRULE, NFPROTO_INET, flags, sequence++);
      nftnl_rule_nlmsg_build_payload(header, rule.get());
      used += header->nlmsg_len;
    } else {
      const Rule rule(nftnl_rule_alloc());
      nftnl_rule_set_u32(rule.get(), NFTNL_RULE_FAMILY, NFPROTO_INET);
      nftnl_rule_set_str(rule.get(), NFTNL_RULE_TABLE, table_name_.c_str());
      nftnl_rule_set_str(rule.get(), NFTNL_RULE_CHAIN, operation.chain.c_str());
      nftnl_rule_set_u64(rule.get(), NFTNL_RULE_HANDLE, operation.handle);
      nlmsghdr* header =
          nftnl_nlmsg_build_hdr(room(), NFT_MSG_DELRULE, NFPROTO_INET, ack, sequence++);
      nftnl_rule_nlmsg_build_payload(header, rule.get());
      used += header->nlmsg_len;
    }
  }
  used += nftnl_batch_end(room(), sequence++)->nlmsg_len;

  // A netlink message may not be larger than the socket's send buffer.
  const int send_size = static_cast<int>(used) + 4096;
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &send_size, sizeof send_size) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &send_size, sizeof send_size);
  if (mnl_socket_sendto(socket.get(), buffer.data(), used) != static_cast<ssize_t>(used))
    return fail(errno, std::string("sending the batch: ") + std::strerror(errno));

  // The kernel has answered before sendto returns; the poll only guards against an answer
  // that never comes whole. Done at the last message's answer.
  const uint32_t last_sequence = sequence - 2;  // the last operation's, before the end
  bool last_answered = false;
  int first_error = 0;
  uint32_t failed_sequence = 0;
  alignas(nlmsghdr) char answer[MNL_SOCKET_BUFFER_SIZE];
  while (!last_answered) {
    const ssize_t received = recv(fd, answer, sizeof answer, MSG_DONTWAIT);
    if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd readable{fd, POLLIN, 0};
      if (poll(&readable, 1, 1000) <= 0) break;
      continue;
    }
    if (received <= 0)
      return fail(errno, std::string("reading the answer: ") + std::strerror(errno));
    int length = static_cast<int>(received);
    for (auto* header = reinterpret_cast<nlmsghdr*>(answer); mnl_nlmsg_ok(header, length);
         header = mnl_nlmsg_next(header, &length)) {
      if (header->nlmsg_type != NLMSG_ERROR || header->nlmsg_len < NLMSG_HDRLEN + sizeof(nlmsgerr))
        continue;
      const auto* error = static_cast<const nlmsgerr*>(mnl_nlmsg_get_payload(header));
      if (error->msg.nlmsg_seq == last_sequence) last_answered = true;
      if (error->error != 0 && first_error == 0) {
        first_error = -error->error;
        failed_sequence = error->msg.nlmsg_seq;
      }
    }
  }
  if (first_error != 0) {
    const size_t index = failed_sequence - first_sequence - 1;
    std::string detail = std::strerror(first_error);
    if (index < operations_.size()) {
      const Operation& operation = operations_[index];
      detail = (operation.insert
                    ? "adding a rule to chain "
                    : "deleting rule handle " + std::to_string(operation.handle) + " of chain ") +
               operation.chain + ": " + detail;
    }
    return fail(first_error, detail);
  }
  if (!last_answered) return fail(EIO, "no answer from the kernel");
  return result;
}

}  // namespace espgw::xfrm

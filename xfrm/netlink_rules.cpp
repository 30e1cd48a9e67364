// RtNetlink on policy routing rules: adding, removing and listing ours.
#include "xfrm/netlink.h"

#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "xfrm/netlink_request.h"

namespace espgw::xfrm {

using namespace netlink_detail;

namespace {

// One rule of an RTM_GETRULE dump: kept when it is ours (protocol 245).
void parse_dumped_rule(const nlmsghdr* reply, void* context) {
  if (reply->nlmsg_type != RTM_NEWRULE) return;
  if (mnl_nlmsg_get_payload_len(reply) < sizeof(fib_rule_hdr)) return;
  const auto* header = static_cast<const fib_rule_hdr*>(mnl_nlmsg_get_payload(reply));
  if (header->family != AF_INET && header->family != AF_INET6) return;
  if (header->action != FR_ACT_TO_TBL) return;
  struct Attributes {
    RtNetlink::Rule rule;
    uint8_t protocol = 0;
    const nlattr* source = nullptr;
    const nlattr* destination = nullptr;
  } attributes;
  RtNetlink::Rule& rule = attributes.rule;
  rule.family = header->family == AF_INET ? 4 : 6;
  rule.table = header->table;
  mnl_attr_parse(
      reply, sizeof(fib_rule_hdr),
      [](const nlattr* attribute, void* data) {
        auto* out = static_cast<Attributes*>(data);
        auto port_range = [&]() -> std::optional<std::pair<uint16_t, uint16_t>> {
          if (mnl_attr_get_payload_len(attribute) != sizeof(fib_rule_port_range))
            return std::nullopt;
          fib_rule_port_range range;
          std::memcpy(&range, mnl_attr_get_payload(attribute), sizeof range);
          return std::pair<uint16_t, uint16_t>{range.start, range.end};
        };
        switch (mnl_attr_get_type(attribute)) {
          case FRA_TABLE:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->rule.table = mnl_attr_get_u32(attribute);
            break;
          case FRA_PRIORITY:
            if (mnl_attr_validate(attribute, MNL_TYPE_U32) >= 0)
              out->rule.priority = mnl_attr_get_u32(attribute);
            break;
          case FRA_PROTOCOL:
            if (mnl_attr_validate(attribute, MNL_TYPE_U8) >= 0)
              out->protocol = mnl_attr_get_u8(attribute);
            break;
          case FRA_IP_PROTO:
            if (mnl_attr_validate(attribute, MNL_TYPE_U8) >= 0)
              out->rule.protocol = mnl_attr_get_u8(attribute);
            break;
          case FRA_SRC:
            out->source = attribute;
            break;
          case FRA_DST:
            out->destination = attribute;
            break;
          case FRA_SPORT_RANGE:
            out->rule.source_ports = port_range();
            break;
          case FRA_DPORT_RANGE:
            out->rule.destination_ports = port_range();
            break;
        }
        return MNL_CB_OK;
      },
      &attributes);
  if (attributes.protocol != RtNetlink::kRouteProtocol) return;
  const uint8_t family = header->family == AF_INET ? 4 : 6;
  const size_t length = family == 4 ? 4 : 16;
  auto prefix_of = [&](const nlattr* attribute, uint8_t bits, esp::IpPrefix& prefix) {
    prefix.address.family = family;
    prefix.length = bits;
    if (!attribute) return true;
    if (mnl_attr_get_payload_len(attribute) != length) return false;
    std::memcpy(prefix.address.bytes.data(), mnl_attr_get_payload(attribute), length);
    return true;
  };
  if (!prefix_of(attributes.source, header->src_len, rule.source) ||
      !prefix_of(attributes.destination, header->dst_len, rule.destination))
    return;
  static_cast<std::vector<RtNetlink::Rule>*>(context)->push_back(rule);
}

}  // namespace

Result RtNetlink::add_rule(const Rule& rule) {
  return change_rule(RTM_NEWRULE, rule);
}

Result RtNetlink::remove_rule(const Rule& rule) {
  return change_rule(RTM_DELRULE, rule);
}

Result RtNetlink::change_rule(uint16_t message_type, const Rule& rule) {
  const bool adding = message_type == RTM_NEWRULE;
  std::string what = std::string(adding ? "add" : "remove") + " IPv" + std::to_string(rule.family) +
                     " rule priority " + std::to_string(rule.priority);
  if (rule.source.length != 0) what += " from " + rule.source.to_string();
  if (rule.destination.length != 0) what += " to " + rule.destination.to_string();
  what += " lookup " + std::to_string(rule.table);
  for (const auto* prefix : {&rule.source, &rule.destination})
    if (prefix->length != 0)
      if (auto invalid = check_prefix(*prefix, what)) return *invalid;
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, message_type, adding ? NLM_F_CREATE | NLM_F_EXCL : 0);
  auto* header =
      static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(request, sizeof(fib_rule_hdr)));
  header->family = static_cast<uint8_t>(rule.family == 4 ? AF_INET : AF_INET6);
  header->table = rule.table < 256 ? static_cast<uint8_t>(rule.table) : uint8_t{RT_TABLE_UNSPEC};
  header->action = FR_ACT_TO_TBL;
  header->src_len = rule.source.length;
  header->dst_len = rule.destination.length;
  mnl_attr_put_u32(request, FRA_TABLE, rule.table);
  mnl_attr_put_u32(request, FRA_PRIORITY, rule.priority);
  mnl_attr_put_u8(request, FRA_PROTOCOL, kRouteProtocol);
  if (rule.source.length != 0)
    mnl_attr_put(request, FRA_SRC, static_cast<uint16_t>(rule.source.address.length()),
                 rule.source.address.bytes.data());
  if (rule.destination.length != 0)
    mnl_attr_put(request, FRA_DST, static_cast<uint16_t>(rule.destination.address.length()),
                 rule.destination.address.bytes.data());
  if (rule.protocol != 0) mnl_attr_put_u8(request, FRA_IP_PROTO, rule.protocol);
  if (rule.source_ports) {
    const fib_rule_port_range range{rule.source_ports->first, rule.source_ports->second};
    mnl_attr_put(request, FRA_SPORT_RANGE, sizeof range, &range);
  }
  if (rule.destination_ports) {
    const fib_rule_port_range range{rule.destination_ports->first, rule.destination_ports->second};
    mnl_attr_put(request, FRA_DPORT_RANGE, sizeof range, &range);
  }
  return transact(request, what);
}

Result RtNetlink::list_rules(std::vector<Rule>& rules) {
  RequestBuffer buffer;
  nlmsghdr* request = start_request(buffer, RTM_GETRULE, NLM_F_DUMP);
  auto* header =
      static_cast<fib_rule_hdr*>(mnl_nlmsg_put_extra_header(request, sizeof(fib_rule_hdr)));
  header->family = AF_UNSPEC;  // both families
  return transact(request, "list rules", parse_dumped_rule, &rules);
}

}  // namespace espgw::xfrm

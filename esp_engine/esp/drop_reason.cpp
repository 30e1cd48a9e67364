#include "esp/drop_reason.h"

namespace espgw::esp {

std::string_view drop_reason_name(DropReason reason) {
  switch (reason) {
    case DropReason::none:
      return "none";
    case DropReason::too_short:
      return "too-short";
    case DropReason::malformed:
      return "malformed";
    case DropReason::outer_fragment:
      return "outer-fragment";
    case DropReason::not_esp:
      return "not-esp";
    case DropReason::no_sa:
      return "no-sa";
    case DropReason::replayed:
      return "replayed";
    case DropReason::outside_window:
      return "outside-window";
    case DropReason::icv_failure:
      return "icv-failure";
    case DropReason::bad_padding:
      return "bad-padding";
    case DropReason::bad_next_header:
      return "bad-next-header";
    case DropReason::dummy_packet:
      return "dummy-packet";
    case DropReason::inner_malformed:
      return "inner-malformed";
    case DropReason::policy_mismatch:
      return "policy-mismatch";
    case DropReason::sequence_exhausted:
      return "sequence-exhausted";
    case DropReason::no_buffer_space:
      return "no-buffer-space";
    case DropReason::inner_not_ip:
      return "inner-not-ip";
    case DropReason::too_big:
      return "too-big";
    case DropReason::nat_keepalive:
      return "nat-keepalive";
    case DropReason::queue_full:
      return "queue-full";
    case DropReason::sequence_unreserved:
      return "sequence-unreserved";
    case DropReason::sa_held:
      return "sa-held";
    case DropReason::count_:
      break;
  }
  return "unknown";
}

}  // namespace espgw::esp

// The calling thread's ipsec-mb manager, shared by the AEAD and the AES-CBC + HMAC keys
// of the ipsec-mb backend (engine-internal: needs intel-ipsec-mb.h).
#pragma once

#include <intel-ipsec-mb.h>

namespace espgw::crypto {

// One IMB_MGR per thread: the manager holds per-thread scratch state and job queues.
IMB_MGR* ipsec_mb_thread_manager();

}  // namespace espgw::crypto

// The calling thread's ipsec-mb manager, shared by the AEAD and the AES-CBC + HMAC keys
// of the ipsec-mb backend (engine-internal: needs intel-ipsec-mb.h).
#pragma once

#include <intel-ipsec-mb.h>

namespace espgw::crypto {

// One IMB_MGR per thread: the manager holds per-thread scratch state and job queues.
IMB_MGR* ipsec_mb_thread_manager();

// The manager for AES-CBC + HMAC jobs. One packet at a time, ipsec-mb 1.3's AVX2 and
// AVX-512 managers run HMAC-SHA1/SHA2 in a multi-buffer lane that a flush processes
// nearly alone; its SSE manager uses the CPU's SHA extensions (SHA-NI) instead. Measured
// on a Zen 5 EPYC (family 26: AVX-512 and SHA-NI, 2 busy vCPUs), 1408 bytes sealed:
// AES-128-CBC + HMAC-SHA1 3.7 us with the AVX-512 manager, 2.4 us with the SSE one;
// with HMAC-SHA2-256 6.2 us and 2.2 us. So: the SSE manager where the CPU has SHA-NI, else the
// thread's usual one.
IMB_MGR* ipsec_mb_thread_hmac_manager();

}  // namespace espgw::crypto

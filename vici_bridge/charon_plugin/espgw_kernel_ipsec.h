/*
 * charon's kernel_ipsec_t, implemented by forwarding every call to espgw's control socket
 * as a VICI command. espgw holds the SAD and SPD; this side only translates charon's
 * structures and remembers what it installed (see espgw_control.h).
 */
#ifndef ESPGW_KERNEL_IPSEC_H_
#define ESPGW_KERNEL_IPSEC_H_

#include <kernel/kernel_ipsec.h>

kernel_ipsec_t *espgw_kernel_ipsec_create(void);

#endif

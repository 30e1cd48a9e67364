/*
 * The events espgw raises in the kernel's place, handed to charon's kernel interface as
 * kernel-netlink hands the kernel's: `sa-expire` (an SA reached a lifetime: rekey or
 * delete) and `acquire` (a packet met a trap policy without SA: negotiate one).
 */
#ifndef ESPGW_KERNEL_EVENTS_H_
#define ESPGW_KERNEL_EVENTS_H_

#include <library.h>

/* An `sa-expire` event's message: spi, dst, hard. */
void espgw_event_expire(chunk_t message);

/* An `acquire` event's message (espgw_acquire_event.h). */
void espgw_event_acquire(chunk_t message);

#endif

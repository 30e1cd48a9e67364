/*
 * The plugin's link to espgw's control socket: one connection for commands (request,
 * response) and one on which espgw pushes events (IKE packets it received, SA expiries,
 * acquires of trap policies; espgw_kernel_events.h hands the last two to charon).
 *
 * What charon installed is kept (espgw_replay.h) so that an espgw that restarts while
 * charon runs gets its SAs and policies again, on the next connection.
 */
#ifndef ESPGW_CONTROL_H_
#define ESPGW_CONTROL_H_

#include <library.h>
#include <networking/packet.h>

typedef struct espgw_control_t espgw_control_t;

struct espgw_control_t
{

	/**
	 * Sends a request packet (built with evc_begin(EVC_CMD_REQUEST, ...)) and waits for
	 *the response. Connects, or reconnects once, as needed.
	 *
	 * @return		the response packet without its length prefix (chunk_free() it),
	 *				chunk_empty if espgw is unreachable or the answer is broken
	 */
	chunk_t (*request)(espgw_control_t *this, chunk_t packet);

	/**
	 * Keeps a request to replay after an espgw restart. A key seen before gains a
	 * reference (policies are shared by CHILD_SAs); `spi` (network order) and `dst` name
	 * an SA, which is also rekeyed after a replay; spi 0 for policies.
	 */
	void (*remember)(espgw_control_t *this, char *key, chunk_t packet, uint32_t spi,
					 host_t *dst);

	/** See espgw_replay_t.moved. */
	void (*moved)(espgw_control_t *this, char *key, char *new_key, host_t *new_dst,
				  chunk_t update);

	/** Drops one reference to a remembered request; the last one forgets it. */
	void (*forget)(espgw_control_t *this, char *key);

	/** Forgets every remembered request whose key starts with `prefix`. */
	void (*forget_all)(espgw_control_t *this, char *prefix);

	/** The next IKE packet espgw received. Blocks; a thread cancellation point. */
	packet_t *(*receive_ike)(espgw_control_t *this);

	void (*destroy)(espgw_control_t *this);
};

/** Starts the event thread; connections are made on demand. */
espgw_control_t *espgw_control_create(void);

/** The instance the plugin created; the kernel_ipsec_t and socket_t constructors use it.
 */
extern espgw_control_t *espgw_control;

#endif

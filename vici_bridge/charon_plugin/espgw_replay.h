/*
 * What charon installed in espgw (its add-sa and add-policy requests), kept so that an
 * espgw that restarts while charon runs gets the SAs and policies again, and charon
 * rekeys the CHILD_SAs at once: a restarted espgw has lost the sequence numbers, and a
 * peer would drop packets that start again at 1 as replays.
 */
#ifndef ESPGW_REPLAY_H_
#define ESPGW_REPLAY_H_

#include <collections/linked_list.h>
#include <library.h>
#include <networking/host.h>

typedef struct espgw_replay_t espgw_replay_t;

struct espgw_replay_t
{

	/**
	 * Keeps a request. A key seen before gains a reference (policies are shared by
	 * CHILD_SAs); `spi` (network order) and `dst` name an SA, which is also rekeyed
	 * after a replay; spi 0 for policies.
	 */
	void (*remember)(espgw_replay_t *this, char *key, chunk_t packet, uint32_t spi,
					 host_t *dst);

	/**
	 * An SA espgw moved in place (update-sa): the request goes after its add-sa in a
	 * replay, and the SA is known by `new_key` and `new_dst` from now on.
	 */
	void (*moved)(espgw_replay_t *this, char *key, char *new_key, host_t *new_dst,
				  chunk_t update);

	/** Drops one reference to a remembered request; the last one forgets it. */
	void (*forget)(espgw_replay_t *this, char *key);

	/** Forgets every remembered request whose key starts with `prefix`. */
	void (*forget_all)(espgw_replay_t *this, char *prefix);

	/**
	 * Sends everything remembered on the command connection `fd`: policies first (as
	 * often as they are referenced), then the SAs, marked as replayed. Each SA goes on
	 * `rekey` for rekey_replayed(). Nothing happens when nothing is remembered.
	 */
	void (*replay)(espgw_replay_t *this, int fd, linked_list_t *rekey);

	void (*destroy)(espgw_replay_t *this);
};

espgw_replay_t *espgw_replay_create(void);

/**
 * Asks charon to rekey the CHILD_SAs whose SAs a replay sent (a soft expire each), and
 * empties `rekey`. Called without locks held: charon calls back into the plugin.
 */
void espgw_rekey_replayed(linked_list_t *rekey);

#endif

#include "espgw_replay.h"
#include "espgw_control_io.h"
#include "espgw_vici_codec.h"

#include <daemon.h>
#include <collections/hashtable.h>
#include <threading/mutex.h>

typedef struct private_espgw_replay_t private_espgw_replay_t;

/* espgw refuses to move one SA more often than this (charon then rekeys it) */
#define MAX_MOVES 16

typedef struct
{
	char *key;
	chunk_t packet;
	int refs;
	uint32_t spi;
	host_t *dst;
	/* update-sa requests espgw accepted for the SA, oldest first */
	chunk_t moves[MAX_MOVES];
	int move_count;
} remembered_t;

typedef struct
{
	uint32_t spi;
	host_t *dst;
} pending_rekey_t;

struct private_espgw_replay_t
{
	espgw_replay_t public;
	mutex_t *mutex;
	hashtable_t *state;
};

static void destroy_remembered(remembered_t *entry)
{
	int i;

	for (i = 0; i < entry->move_count; i++)
	{
		chunk_free(&entry->moves[i]);
	}
	chunk_clear(&entry->packet);
	DESTROY_IF(entry->dst);
	free(entry->key);
	free(entry);
}

METHOD(espgw_replay_t, remember, void, private_espgw_replay_t *this, char *key,
	   chunk_t packet, uint32_t spi, host_t *dst)
{
	remembered_t *entry;

	this->mutex->lock(this->mutex);
	entry = this->state->get(this->state, key);
	if (entry && spi == 0)
	{
		entry->refs++;
	}
	else if (entry)
	{
		/* an SA installed again under its key: the new request replaces the old */
		chunk_clear(&entry->packet);
		entry->packet = chunk_clone(packet);
		while (entry->move_count)
		{
			chunk_free(&entry->moves[--entry->move_count]);
		}
	}
	else
	{
		INIT(entry, .key = strdup(key), .packet = chunk_clone(packet), .refs = 1,
			 .spi = spi, .dst = dst ? dst->clone(dst) : NULL, );
		this->state->put(this->state, entry->key, entry);
	}
	this->mutex->unlock(this->mutex);
}

METHOD(espgw_replay_t, moved, void, private_espgw_replay_t *this, char *key,
	   char *new_key, host_t *new_dst, chunk_t update)
{
	remembered_t *entry;

	this->mutex->lock(this->mutex);
	entry = this->state->get(this->state, key);
	if (entry && entry->move_count < MAX_MOVES)
	{
		entry->moves[entry->move_count++] = chunk_clone(update);
		if (!streq(key, new_key) && !this->state->get(this->state, new_key))
		{
			this->state->remove(this->state, key);
			free(entry->key);
			entry->key = strdup(new_key);
			entry->dst->destroy(entry->dst);
			entry->dst = new_dst->clone(new_dst);
			this->state->put(this->state, entry->key, entry);
		}
	}
	this->mutex->unlock(this->mutex);
}

METHOD(espgw_replay_t, forget, void, private_espgw_replay_t *this, char *key)
{
	remembered_t *entry;

	this->mutex->lock(this->mutex);
	entry = this->state->get(this->state, key);
	if (entry && --entry->refs <= 0)
	{
		this->state->remove(this->state, key);
		destroy_remembered(entry);
	}
	this->mutex->unlock(this->mutex);
}

METHOD(espgw_replay_t, forget_all, void, private_espgw_replay_t *this, char *prefix)
{
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;

	this->mutex->lock(this->mutex);
	enumerator = this->state->create_enumerator(this->state);
	while (enumerator->enumerate(enumerator, &key, &entry))
	{
		if (strpfx(entry->key, prefix))
		{
			this->state->remove_at(this->state, enumerator);
			destroy_remembered(entry);
		}
	}
	enumerator->destroy(enumerator);
	this->mutex->unlock(this->mutex);
}

/* Sends one remembered request; TRUE if espgw accepted it. */
static bool send_one(int fd, remembered_t *entry)
{
	/* SAs go back marked: their keys were used by the previous espgw, whose counters the
	 * new one must continue (or hold the SA until the rekey asked for below). Without the
	 * mark it would take them for new keys. */
	chunk_t marked = entry->spi
						 ? evc_append_kv(entry->packet, "replayed", chunk_from_str("yes"))
						 : chunk_empty;
	chunk_t response = entry->spi
						   ? (marked.len ? espgw_io_exchange(fd, marked) : chunk_empty)
						   : espgw_io_exchange(fd, entry->packet);
	chunk_t name, message;
	uint8_t type;
	bool ok;

	chunk_clear(&marked);
	ok = response.len && evc_parse_packet(response, &type, &name, &message) &&
		 type == EVC_CMD_RESPONSE && evc_success(message);
	chunk_free(&response);
	return ok;
}

/* Sends one remembered update-sa; TRUE if espgw accepted it. */
static bool send_move(int fd, chunk_t update)
{
	chunk_t response = espgw_io_exchange(fd, update);
	chunk_t name, message;
	uint8_t type;
	bool ok;

	ok = response.len && evc_parse_packet(response, &type, &name, &message) &&
		 type == EVC_CMD_RESPONSE && evc_success(message);
	chunk_free(&response);
	return ok;
}

METHOD(espgw_replay_t, replay, void, private_espgw_replay_t *this, int fd,
	   linked_list_t *rekey)
{
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;
	int pass, i, sent = 0, failed = 0;

	this->mutex->lock(this->mutex);
	if (!this->state->get_count(this->state))
	{
		this->mutex->unlock(this->mutex);
		return;
	}
	for (pass = 0; pass < 2; pass++)
	{
		enumerator = this->state->create_enumerator(this->state);
		while (enumerator->enumerate(enumerator, &key, &entry))
		{
			if ((pass == 0) != (entry->spi == 0))
			{
				continue;
			}
			for (i = 0; i < entry->refs; i++)
			{
				if (send_one(fd, entry))
				{
					sent++;
				}
				else
				{
					failed++;
				}
			}
			/* the moves espgw made since, in order: the SA ends up where charon has it */
			for (i = 0; i < entry->move_count; i++)
			{
				if (send_move(fd, entry->moves[i]))
				{
					sent++;
				}
				else
				{
					failed++;
				}
			}
			if (entry->spi)
			{
				pending_rekey_t *pending;

				INIT(pending, .spi = entry->spi, .dst = entry->dst->clone(entry->dst), );
				rekey->insert_last(rekey, pending);
			}
		}
		enumerator->destroy(enumerator);
	}
	this->mutex->unlock(this->mutex);
	DBG1(DBG_KNL, "espgw restarted: %d SA and policy installations replayed, %d failed",
		 sent, failed);
}

void espgw_rekey_replayed(linked_list_t *rekey)
{
	pending_rekey_t *pending;

	while (rekey->remove_first(rekey, (void **)&pending) == SUCCESS)
	{
		charon->kernel->expire(charon->kernel, IPPROTO_ESP, pending->spi, pending->dst,
							   FALSE);
		pending->dst->destroy(pending->dst);
		free(pending);
	}
}

METHOD(espgw_replay_t, destroy, void, private_espgw_replay_t *this)
{
	enumerator_t *enumerator;
	remembered_t *entry;
	const void *key;

	enumerator = this->state->create_enumerator(this->state);
	while (enumerator->enumerate(enumerator, &key, &entry))
	{
		destroy_remembered(entry);
	}
	enumerator->destroy(enumerator);
	this->state->destroy(this->state);
	this->mutex->destroy(this->mutex);
	free(this);
}

espgw_replay_t *espgw_replay_create(void)
{
	private_espgw_replay_t *this;

	INIT(this,
		 .public =
			 {
				 .remember = _remember,
				 .moved = _moved,
				 .forget = _forget,
				 .forget_all = _forget_all,
				 .replay = _replay,
				 .destroy = _destroy,
			 },
		 .mutex = mutex_create(MUTEX_TYPE_DEFAULT),
		 .state = hashtable_create(hashtable_hash_str, hashtable_equals_str, 64), );
	return &this->public;
}

/* The durable record in state_dir of how far the slot has been confirmed. It is written (and fsynced)
 * before a flush position is sent to the server. So the slot's confirmed_flush_lsn can never be ahead
 * of it, unless something else moved or recreated the slot. */
#ifndef CDC_STATE_H
#define CDC_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "decoder/base/util.h"

typedef struct state {
	char system_id[32]; /* the database system identifier, decimal */
	char slot[64];
	uint64_t flushed_lsn;
	/* The server's timeline when flushed_lsn was recorded (0 if unknown, a record of an older cdc).
	 * A newer one at the next start means a promotion (or a point-in-time recovery) in between. */
	uint32_t timeline;
	/* Another process streamed the slot since flushed_lsn was recorded, while this one waited as its
	 * standby. The slot may be ahead of it, and that is no sign of a consumer cdc does not know. */
	bool shared;
} state;

/* Locks state_dir (creating it if needed) against a second cdc. Returns the lock fd or -1. */
int source_state_lock(const char *dir, char *err, size_t errlen);
/* False with err on a corrupt file. When there is no file yet, *found is false and it returns true. */
bool source_state_read(const char *dir, state *st, bool *found, char *err, size_t errlen) CDC_MUST_CHECK;
/* Replaces the file atomically with a temp file, fsync, rename, and fsync of the directory. */
bool source_state_write(const char *dir, const state *st, char *err, size_t errlen) CDC_MUST_CHECK;

/* The record written by a thread of its own, so that its two fsyncs (10 a second at most while
 * positions move) never hold the event loop. On a disk whose fsync takes 10 ms, they put the
 * exactly-once Kafka latency's p99 from 27-37 ms to 53-82 ms (bench, LD_PRELOAD). post() hands it the
 * newest record. fd() turns readable when a write is back. durable() says what is on disk, and nothing
 * may be confirmed to the slot beyond it. */
typedef struct state_writer state_writer;
state_writer *source_state_writer_new(const char *dir, char *err, size_t errlen);
void source_state_writer_free(state_writer *writer);
int source_state_writer_fd(const state_writer *writer);
/* Writes st after the write under way, if any. A newer post replaces one not yet begun. With path, the
 * same run first replaces that file with data (copied). That is what must be on disk before the
 * position (the backfills' state). A post without path keeps the file of one not yet begun. */
void source_state_writer_post(state_writer *writer, const state *st, const char *path, const void *data,
			      size_t len);
/* The newest record written (*found false before the first), after a read of fd() or at any time.
 * False with err once a write failed. cdc then stops, because the disk is not to be trusted. */
bool source_state_writer_durable(state_writer *writer, state *st, bool *found, char *err,
				 size_t errlen) CDC_MUST_CHECK;
/* Waits until nothing is posted or under way (before a write of its own, and at a stop). */
void source_state_writer_wait(state_writer *writer);

#endif

/* state.h: the durable record in state_dir of how far the slot has been confirmed.
 * It is written (and fsynced) before a flush position is sent to the server, so the slot's
 * confirmed_flush_lsn can never be ahead of it unless something else moved or recreated the slot. */
#ifndef CDC_STATE_H
#define CDC_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "decoder/util.h"

typedef struct state {
	char system_id[32]; /* the database system identifier, decimal */
	char slot[64];
	uint64_t flushed_lsn;
	/* Another process streamed the slot since flushed_lsn was recorded (this one waited as its
	 * standby): the slot may be ahead of it, and that is no sign of a consumer cdc does not know. */
	bool shared;
} state;

/* Locks state_dir (creating it if needed) against a second cdc; returns the lock fd or -1. */
int state_lock(const char *dir, char *err, size_t errlen);
/* false with err on a corrupt file; *found = false (and true returned) when there is none yet. */
bool state_read(const char *dir, state *st, bool *found, char *err, size_t errlen) CDC_MUST_CHECK;
/* Atomic replace: temp file, fsync, rename, fsync of the directory. */
bool state_write(const char *dir, const state *st, char *err, size_t errlen) CDC_MUST_CHECK;

#endif

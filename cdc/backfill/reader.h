/* reader.h: the backfills' own database connection: non-blocking libpq in the daemon's event loop.
 * It runs the statements backfill_next() hands out, one at a time and each in autocommit (a chunk's
 * snapshot and COPY share one transaction, which ends with the chunk), hands their results back, and
 * connects again with backoff when the connection drops. Connected only while a backfill runs. */
#ifndef CDC_BACKFILL_READER_H
#define CDC_BACKFILL_READER_H

#include <stdbool.h>

#include "cdc/backfill/backfill.h"

struct event_base;
typedef struct bf_reader bf_reader;

/* dsn: the source's connection string (a regular connection, not a replication one). answered(ctx)
 * is called after each statement's result or failure was handed to set (a backfill's checks may
 * have ended: backfill_verdict). */
bf_reader *backfill_reader_new(struct event_base *base, const char *dsn, bf_set *set,
			       void (*answered)(void *ctx), void *ctx);
void backfill_reader_free(bf_reader *reader);
/* Something may have become due (a backfill added or cancelled, a chunk closed by the stream):
 * runs the next statement if the connection is free, connecting first if need be. */
void backfill_reader_kick(bf_reader *reader);
/* The server to read from from now on (the primary's connection string while the source is a
 * standby: watermarks are writes, and reads on the primary between them keep the rule); a
 * connection to another one is dropped, and a statement in flight done again. */
void backfill_reader_use(bf_reader *reader, const char *dsn);
/* source.password (NULL: none), for a dsn without one; the next connection uses it. */
void backfill_reader_password(bf_reader *reader, const char *password);
/* Whether the connection is up and idle, or down with nothing to do. */
bool backfill_reader_idle(const bf_reader *reader);

#endif

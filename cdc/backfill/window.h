/* window.h: the watermark rule of one backfill chunk (DBLog): holds the rows a chunk's COPY read,
 * records the keys of the table's changes the stream delivers between the chunk's low and high
 * watermarks, and at the high watermark yields the rows whose key no such change touched, in the
 * order they were read. Chunks of a table may be open at once, each in a window of its own. Pure:
 * no libpq, no clock; memory bounded by the caller. */
#ifndef CDC_BACKFILL_WINDOW_H
#define CDC_BACKFILL_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/util.h"

/* One column value in PostgreSQL's text form, as both the chunk's SELECT and pgoutput send it. */
typedef struct bf_datum {
	const char *data;
	int32_t len; /* -1: NULL; BF_ABSENT: no value sent (unchanged TOAST) */
} bf_datum;
#define BF_ABSENT (-2)

/* Key and row bytes: per datum a 4-byte big-endian length (0xFFFFFFFF for NULL, 0xFFFFFFFE for no
 * value), then the bytes.
 * The same values encode to the same bytes wherever they came from, so a change's key compares
 * with a read row's key by memcmp. */
void backfill_encode(buf *out, const bf_datum *datum, size_t count);
/* A hash of key bytes (FNV-1a), for the sets of keys. */
uint64_t backfill_hash(const void *data, size_t count);
/* Splits bytes made by backfill_encode into count datums pointing into data. False if they do not hold count.
 */
bool backfill_decode(const void *data, size_t len, bf_datum *datum, size_t count) CDC_MUST_CHECK;

/* The snapshot a chunk's SELECT ran under (pg_current_snapshot(): "xmin:xmax:xip,..."), xids cut
 * to the 32 bits the stream carries. */
typedef struct bf_snapshot {
	uint32_t xmin, xmax;
	uint32_t *xip; /* owned */
	size_t nxip;
} bf_snapshot;

bool backfill_snapshot_parse(const char *text, size_t len, bf_snapshot *out, char *err,
			     size_t errlen) CDC_MUST_CHECK;
void backfill_snapshot_free(bf_snapshot *snapshot);
/* Whether a committed transaction's changes are visible under snapshot. */
bool backfill_snapshot_sees(const bf_snapshot *snapshot, uint32_t xid);

/* What a watermark did to the window. */
typedef enum bfw_mark {
	BFW_FOREIGN, /* not this chunk's (another nonce, a replay from before a crash): ignored */
	BFW_OPENED,  /* this chunk's low: changes count from here */
	BFW_CLOSED,  /* this chunk's high: the surviving rows are ready (backfill_window_row) */
	BFW_RETRY,   /* this chunk's high, but its rows cannot be trusted: read the chunk again */
} bfw_mark;

/* Why a closed window asks for the chunk again (backfill_window_retry_reason). */
typedef enum bfw_retry {
	BFW_RETRY_NONE,
	BFW_RETRY_MEMORY,   /* the rows and changed keys outgrew max_bytes */
	BFW_RETRY_UNKEYED,  /* a change whose key or whole row the stream did not carry */
	BFW_RETRY_SNAPSHOT, /* a transaction delivered before the low watermark that the chunk's
			     * snapshot did not see yet (its commit was still in flight) */
	BFW_RETRY_NO_LOW,   /* the high watermark came without the low one */
} bfw_retry;

/* The top-level xids of the commits that touched a table, in stream order, that some snapshot
 * taken from now on might not see yet (see backfill_window_begin). */
typedef struct bf_recent {
	uint32_t *xids;
	size_t n, cap;
	bool lost; /* some were forgotten (past the cap), from lost_min to lost_max */
	uint32_t lost_min, lost_max;
} bf_recent;

void backfill_recent_add(bf_recent *recent, uint32_t xid);
/* Forgets the commits that snapshot sees by its xmin: every snapshot taken after snapshot sees them too. */
void backfill_recent_settle(bf_recent *recent, const bf_snapshot *snapshot);
void backfill_recent_free(bf_recent *recent);

typedef struct bf_window bf_window;

/* max_bytes bounds the rows and changed keys of one chunk together. */
bf_window *backfill_window_new(size_t max_bytes);
void backfill_window_free(bf_window *window);

/* Starts a chunk: forgets the previous chunk's rows and keys and waits for the low watermark of
 * nonce (copied). seed: the table's recent commits, copied; from here on the window records every
 * commit of the table itself (backfill_window_change). A commit the chunk's snapshot does not see that
 * reached the stream before the low watermark makes the chunk read again. The seed may leave out commits that
 * a snapshot known when this is called saw by its xmin: this chunk's snapshot comes later. */
void backfill_window_begin(bf_window *window, const char *nonce, const bf_recent *seed);
/* Forgets the chunk in progress (cancel, a failed statement): its watermarks become foreign. */
void backfill_window_reset(bf_window *window);
/* The nonce of the chunk in progress, or NULL. */
const char *backfill_window_nonce(const bf_window *window);

/* A row the chunk's COPY read, its key and row bytes from backfill_encode. Both are copied, but a key
 * that lies within the row's bytes is kept once, in the row. That is the whole row or one of its
 * columns. False when it would pass max_bytes and the window holds a row already. Then a smaller
 * chunk is read. */
bool backfill_window_add_row(bf_window *window, const void *key, size_t keylen, const void *row,
			     size_t rowlen) CDC_MUST_CHECK;
/* The snapshot the SELECT ran under (takes ownership). Without one no snapshot check is made. */
void backfill_window_set_snapshot(bf_window *window, bf_snapshot *snapshot);

/* The chunk's low watermark passed in the stream: changes count from here. Another chunk's high
 * watermark may stand for it (written before this chunk's SELECT began). False if the window was
 * not waiting for it. */
bool backfill_window_open(bf_window *window);
/* A watermark of the chunk's backfill: nonce and whether it is the high one. */
bfw_mark backfill_window_watermark(bf_window *window, const char *nonce, bool high);

/* A change of the table delivered by the stream (at its transaction's commit), by top-level
 * transaction xid. key: the row's key (backfill_encode) before and, with key2 (may be NULL), after the
 * change. key NULL: the window cannot tell which row it touched, so a chunk open now is read
 * again. partial: the row's new version lacks a column's value (unchanged TOAST): its key is
 * marked, for backfill_window_partial_key. */
void backfill_window_change(bf_window *window, uint32_t xid, const void *key, size_t keylen, const void *key2,
			    size_t key2len, bool partial);
/* A truncate of the table delivered by the stream: every row of an open chunk is dropped. */
void backfill_window_truncate(bf_window *window, uint32_t xid);

/* After BFW_CLOSED: the rows read, and row i in read order with whether the rule dropped it. */
size_t backfill_window_rows(const bf_window *window);
void backfill_window_row(const bf_window *window, size_t index, const void **row, size_t *rowlen,
			 bool *dropped);
size_t backfill_window_dropped(const bf_window *window);
/* After BFW_CLOSED: the keys of the changes inside the window whose new row was partial, one by
 * one from *pos = 0; false when there are no more. */
bool backfill_window_partial_key(const bf_window *window, size_t *pos, const void **key, size_t *len);
/* Bytes of rows held in the chunk in progress. */
size_t backfill_window_bytes(const bf_window *window);
/* After BFW_RETRY: why. */
bfw_retry backfill_window_retry_reason(const bf_window *window);
const char *backfill_window_retry_name(bfw_retry retry);

#endif

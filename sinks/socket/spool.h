/* One subscription's durable event log in a directory of state_dir: append-only segment files of
 * checksummed records, group-committed fsync, count/age/bytes retention, and the acked cursor.
 * Offsets are dense, start at 1 and are never reused. */
#ifndef CDC_SPOOL_H
#define CDC_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/util.h"

/* Events become visible to readers when the transaction they belong to is durably complete
 * (socket_spool_commit + socket_spool_sync). A held transaction's events (socket_spool_hold) are written to a
 * file of their own as they arrive, before their commit is known. That file becomes a segment at the commit.
 * So they are written once, and get their offsets at the commit. */
typedef struct spool spool;

typedef struct spool_limits {
	uint64_t max_events, max_age_ms, max_bytes; /* 0 for no limit */
	bool drop_oldest;	/* else block (socket_spool_full() tells the caller to stop) */
	uint64_t segment_bytes; /* a segment is closed at this size (0 for 64 MiB) */
} spool_limits;

/* A record read back. data is valid until the next socket_spool_read or socket_spool_append on this spool. */
typedef struct spool_record {
	uint64_t offset;
	uint64_t commit_lsn;
	uint32_t tx_index;
	uint32_t key_hash;   /* a hash of the row's key for key_shared routing (0 for keyless events) */
	int64_t time_ms;     /* wall clock when appended (max_age) */
	const uint8_t *data; /* the event, a packed cdc.v1.Event */
	size_t len;
	/* The event came through socket_spool_hold, and data lacks the fields known only at its commit. These
	 * are commit_lsn, tx_index and commit_time (µs), which the reader appends. */
	bool held;
	int64_t commit_time;
} spool_record;

/* What socket_spool_open found and repaired, for the log. */
typedef struct spool_recovery {
	uint64_t torn_bytes; /* bytes cut off the last segment, a torn or corrupt tail */
	/* events after the last transaction end, cut off. The slot resends their transaction whole,
	 * since it was never confirmed. */
	uint64_t uncommitted;
} spool_recovery;

/* Opens (creating if needed, mode 0700) the spool in dir and recovers it. It scans the last segment.
 * It cuts off a torn or corrupt tail at the last good record, and the events of a transaction that did
 * not end. It finds the durable head and removes the files of held transactions. */
spool *socket_spool_open(const char *dir, const spool_limits *lim, spool_recovery *rec, char *err,
			 size_t errlen);
void socket_spool_close(spool *sp);
/* Limits may change on reload. */
void socket_spool_set_limits(spool *sp, const spool_limits *lim);
/* Removes the directory and everything in it (a deleted subscription). */
bool socket_spool_destroy(const char *dir, char *err, size_t errlen) CDC_MUST_CHECK;

/* Appends one event, buffered and not durable until socket_spool_sync. Returns its offset in *offset. */
bool socket_spool_append(spool *sp, uint64_t commit_lsn, uint32_t tx_index, uint32_t key_hash,
			 const void *data, size_t len, int64_t now_ms, uint64_t *offset, char *err,
			 size_t errlen) CDC_MUST_CHECK;
/* Ends the transaction the appended events belong to, with a marker record (nothing if none since
 * the last one). Its events become visible at the next socket_spool_sync. */
bool socket_spool_commit(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* Writes what is buffered and fsyncs it (and the cursor, if it moved). */
bool socket_spool_sync(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* socket_spool_sync in three steps, for a caller that fsyncs on a thread of its own while it goes on
 * appending:
 * - socket_spool_sync_begin writes what is buffered. It notes what is to be fsynced (descriptors of the
 *   job's own) and the offset it makes visible.
 * - socket_spool_sync_run fsyncs them, on any thread, since it touches nothing but the job.
 * - socket_spool_sync_end, back on the spool's thread, makes the events up to that offset visible. Or it
 *   reports the failure, of the segment, and the spool must be reopened.
 * what is SPOOL_SYNC_EVENTS (the appended events), SPOOL_SYNC_CURSOR, or both. SPOOL_SYNC_CURSOR is
 * the acked cursor, then the acknowledged segments retention let go, deleted once the cursor is
 * durable. A caller may fsync the cursor apart, so that the events' wait is one fsync. A spool has one
 * job at most in flight of each. */
enum { SPOOL_SYNC_EVENTS = 1, SPOOL_SYNC_CURSOR = 2 };
typedef struct spool_sync_job {
	int fd[2];	  /* the write segment, the cursor file (-1 if nothing to fsync) */
	int error[2];	  /* their fsync's errno, 0 if it succeeded */
	uint64_t head;	  /* 0 for the cursor alone */
	buf doomed;	  /* segments to delete ("PATH\0" each) */
	int dirfd;	  /* the spool's directory, fsynced after they are (-1 if none) */
	int delete_error; /* errno of the first deletion that failed */
} spool_sync_job;
bool socket_spool_sync_begin(spool *sp, spool_sync_job *job, int what, char *err,
			     size_t errlen) CDC_MUST_CHECK;
/* Whether a SPOOL_SYNC_CURSOR job has something to do. It has when the cursor moved, or segments
 * wait to be deleted. */
bool socket_spool_cursor_pending(const spool *sp);
void socket_spool_sync_run(spool_sync_job *job);
bool socket_spool_sync_end(spool *sp, spool_sync_job *job, char *err, size_t errlen) CDC_MUST_CHECK;
/* The identity of the newest appended event (after socket_spool_open, of the newest committed one). After a
 * restart the slot resends changes the spool may already hold. The caller skips those at or before
 * this. False if empty. */
bool socket_spool_last_id(const spool *sp, uint64_t *commit_lsn, uint32_t *tx_index);

/* A held (streamed or prepared) transaction's events, appended as they arrive to a file of their own
 * in the spool's directory. They are invisible until socket_spool_held_commit. It takes one write buffer of
 * memory. */
typedef struct spool_held spool_held;
/* Where a held transaction's events stood. socket_spool_held_cut goes back to it (a rolled-back
 * subtransaction). */
typedef struct spool_held_point {
	uint64_t bytes, events;
	uint32_t last_tx;
} spool_held_point;

/* Starts holding transaction xid (its file is created empty). */
spool_held *socket_spool_hold(spool *sp, uint32_t xid, char *err, size_t errlen);
/* Appends one event without its commit fields (see spool_record.held). tx_index is final. */
bool socket_spool_held_append(spool_held *held, uint32_t tx_index, uint32_t key_hash, const void *data,
			      size_t len, int64_t now_ms, char *err, size_t errlen) CDC_MUST_CHECK;
spool_held_point socket_spool_held_at(const spool_held *held);
bool socket_spool_held_cut(spool_held *held, spool_held_point at, char *err, size_t errlen) CDC_MUST_CHECK;
/* Deletes the file and frees held, because its transaction aborted or the spool holds it already. */
void socket_spool_held_discard(spool_held *held);
/* The transaction committed. Its file, made durable, becomes the next segment, and its events the
 * next offsets (visible at the next socket_spool_sync). Call it between transactions only (no
 * socket_spool_append since the last socket_spool_commit). Frees held, also on failure, and then the spool
 * must be reopened. */
bool socket_spool_held_commit(spool_held *held, uint64_t commit_lsn, int64_t commit_time, char *err,
			      size_t errlen) CDC_MUST_CHECK;

/* Reads the event at offset (first <= offset <= head). */
bool socket_spool_read(spool *sp, uint64_t offset, spool_record *record, char *err,
		       size_t errlen) CDC_MUST_CHECK;

/* The oldest retained offset (head + 1 when none is retained). */
uint64_t socket_spool_first(const spool *sp);
/* The newest visible (durable, transaction complete) offset, 0 when none. */
uint64_t socket_spool_head(const spool *sp);
/* Every offset up to this is acknowledged (or dropped, or dead). */
uint64_t socket_spool_acked(const spool *sp);
/* Moves the acked cursor forward, never back. It is recorded in the cursor file at once, with a write
 * that survives the process being killed. The next socket_spool_sync or SPOOL_SYNC_CURSOR job fsyncs it. */
bool socket_spool_set_acked(spool *sp, uint64_t acked, char *err, size_t errlen) CDC_MUST_CHECK;

/* Delivery counts, kept beside the events so that max_deliveries holds across a restart of cdc. Each
 * delivery of an offset after the acked cursor is noted, and socket_spool_save_deliveries writes it. The file
 * is written, not fsynced (only a compaction's rewrite is). It survives cdc being killed. An fsync per
 * delivery batch would cost the socket path a fifth of its throughput. After a power loss the latest
 * counts may be lower, and max_deliveries then allows a few more. Memory and file are bounded by the
 * offsets delivered and not acknowledged. */
void socket_spool_note_delivery(spool *sp, uint64_t offset, uint32_t count);
bool socket_spool_save_deliveries(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* How often offset was delivered (as last noted). 0 if never, or acknowledged. */
uint32_t socket_spool_deliveries(const spool *sp, uint64_t offset);

/* For block, whether the unacknowledged events exceed a limit. Stop reading the slot until they don't. */
bool socket_spool_full(const spool *sp, int64_t now_ms);
/* With drop_oldest, discards the oldest events beyond the limits, acknowledged or not. It returns the
 * discarded range in [*from, *to] (both 0 when nothing was). In both modes, it deletes segment files
 * that hold only acknowledged or discarded events. It keeps those holding an offset from keep on that
 * is not discarded (acknowledged events a consumer is reading again). False with err on an I/O error. */
bool socket_spool_trim(spool *sp, int64_t now_ms, uint64_t keep, uint64_t *from, uint64_t *to, char *err,
		       size_t errlen) CDC_MUST_CHECK;

typedef struct spool_stats {
	uint64_t events;  /* retained, head - first + 1 */
	uint64_t bytes;	  /* on disk */
	uint64_t dropped; /* discarded by drop_oldest since the spool was created (persisted) */
	uint64_t segments;
	int64_t oldest_ms; /* time_ms of the oldest retained event, 0 if none */
} spool_stats;
spool_stats socket_spool_get_stats(const spool *sp);

#endif

/* spool.h: one subscription's durable event log in a directory of state_dir: append-only segment
 * files of checksummed records, group-committed fsync, count/age/bytes retention, and the acked
 * cursor. Offsets are dense, start at 1 and are never reused. Events become visible to readers
 * when the transaction they belong to is durably complete (spool_commit + spool_sync). A held
 * transaction's events (spool_hold) are written to a file of their own as they arrive, before
 * their commit is known, and that file becomes a segment at the commit: written once, offsets
 * given at the commit. */
#ifndef CDC_SPOOL_H
#define CDC_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/util.h"

typedef struct spool spool;

typedef struct spool_limits {
	uint64_t max_events, max_age_ms, max_bytes; /* 0: no limit */
	bool drop_oldest;			    /* else block: spool_full() tells the caller to stop */
	uint64_t segment_bytes;			    /* a segment is closed once this large; 0: 64 MiB */
} spool_limits;

/* A record read back. data is valid until the next spool_read or spool_append on this spool. */
typedef struct spool_record {
	uint64_t offset;
	uint64_t commit_lsn;
	uint32_t tx_index;
	uint32_t key_hash;   /* key_shared routing: a hash of the row's key (0 for keyless events) */
	int64_t time_ms;     /* wall clock when appended (max_age) */
	const uint8_t *data; /* the event: a packed cdc.v1.Event */
	size_t len;
	/* held: the event came through spool_hold and data lacks the fields known only at its commit,
	 * commit_lsn, tx_index and commit_time (µs), which the reader appends. */
	bool held;
	int64_t commit_time;
} spool_record;

/* What spool_open found and repaired, for the log. */
typedef struct spool_recovery {
	uint64_t torn_bytes; /* bytes cut off the last segment: a torn or corrupt tail */
	/* events after the last transaction end, cut off: the slot resends their transaction whole,
	 * since it was never confirmed */
	uint64_t uncommitted;
} spool_recovery;

/* Opens (creating if needed, mode 0700) the spool in dir and recovers it: scans the last segment,
 * cuts off a torn or corrupt tail at the last good record and the events of a transaction that did
 * not end, finds the durable head, and removes the files of held transactions. */
spool *spool_open(const char *dir, const spool_limits *lim, spool_recovery *rec, char *err, size_t errlen);
void spool_close(spool *sp);
/* Limits may change on reload. */
void spool_set_limits(spool *sp, const spool_limits *lim);
/* Removes the directory and everything in it (a deleted subscription). */
bool spool_destroy(const char *dir, char *err, size_t errlen) CDC_MUST_CHECK;

/* Appends one event (buffered; not durable until spool_sync). Returns its offset in *offset. */
bool spool_append(spool *sp, uint64_t commit_lsn, uint32_t tx_index, uint32_t key_hash, const void *data,
		  size_t len, int64_t now_ms, uint64_t *offset, char *err, size_t errlen) CDC_MUST_CHECK;
/* Ends the transaction the appended events belong to (a marker record; nothing if none since the
 * last one). Its events become visible at the next spool_sync. */
bool spool_commit(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* Writes what is buffered and fsyncs it (and the cursor, if it moved). */
bool spool_sync(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* spool_sync in three steps, for a caller that fsyncs on a thread of its own while it goes on
 * appending: spool_sync_begin writes what is buffered and notes what is to be fsynced (descriptors
 * of the job's own) and the offset it makes visible; spool_sync_run fsyncs them (on any thread: it
 * touches nothing but the job); spool_sync_end, back on the spool's thread, makes the events up to
 * that offset visible, or reports the failure (of the segment: the spool must be reopened). what
 * is SPOOL_SYNC_EVENTS (the appended events), SPOOL_SYNC_CURSOR (the acked cursor, then the
 * acknowledged segments retention let go: deleted once the cursor is durable) or both: a caller
 * may fsync the cursor apart, so that the events' wait is one fsync. A spool has one job at most
 * in flight of each. */
enum { SPOOL_SYNC_EVENTS = 1, SPOOL_SYNC_CURSOR = 2 };
typedef struct spool_sync_job {
	int fd[2];	  /* the write segment, the cursor file (-1: nothing to fsync) */
	int error[2];	  /* their fsync's errno, 0 if it succeeded */
	uint64_t head;	  /* 0 for the cursor alone */
	buf doomed;	  /* segments to delete ("PATH\0" each) */
	int dirfd;	  /* the spool's directory, fsynced after they are (-1: none) */
	int delete_error; /* errno of the first deletion that failed */
} spool_sync_job;
bool spool_sync_begin(spool *sp, spool_sync_job *job, int what, char *err, size_t errlen) CDC_MUST_CHECK;
/* Whether a SPOOL_SYNC_CURSOR job has something to do: the cursor moved, or segments wait to be
 * deleted. */
bool spool_cursor_pending(const spool *sp);
void spool_sync_run(spool_sync_job *job);
bool spool_sync_end(spool *sp, spool_sync_job *job, char *err, size_t errlen) CDC_MUST_CHECK;
/* The identity of the newest appended event (after spool_open: of the newest committed one): after
 * a restart the slot resends changes the spool may already hold; the caller skips those at or
 * before this. false if empty. */
bool spool_last_id(const spool *sp, uint64_t *commit_lsn, uint32_t *tx_index);

/* A held (streamed or prepared) transaction's events, appended as they arrive to a file of their own
 * in the spool's directory, invisible until spool_held_commit. Memory: one write buffer. */
typedef struct spool_held spool_held;
/* Where a held transaction's events stood: spool_held_cut goes back to it (a rolled-back
 * subtransaction). */
typedef struct spool_held_point {
	uint64_t bytes, events;
	uint32_t last_tx;
} spool_held_point;

/* Starts holding transaction xid (its file is created empty). */
spool_held *spool_hold(spool *sp, uint32_t xid, char *err, size_t errlen);
/* Appends one event without its commit fields (see spool_record.held); tx_index is final. */
bool spool_held_append(spool_held *held, uint32_t tx_index, uint32_t key_hash, const void *data, size_t len,
		       int64_t now_ms, char *err, size_t errlen) CDC_MUST_CHECK;
spool_held_point spool_held_at(const spool_held *held);
bool spool_held_cut(spool_held *held, spool_held_point at, char *err, size_t errlen) CDC_MUST_CHECK;
/* Deletes the file and frees held: its transaction aborted, or the spool holds it already. */
void spool_held_discard(spool_held *held);
/* The transaction committed: its file, made durable, becomes the next segment, its events the next
 * offsets (visible at the next spool_sync), between transactions only (no spool_append since the
 * last spool_commit). Frees held, also on failure (then the spool must be reopened). */
bool spool_held_commit(spool_held *held, uint64_t commit_lsn, int64_t commit_time, char *err,
		       size_t errlen) CDC_MUST_CHECK;

/* Reads the event at offset (first <= offset <= head). */
bool spool_read(spool *sp, uint64_t offset, spool_record *record, char *err, size_t errlen) CDC_MUST_CHECK;

/* The oldest retained offset (head + 1 when none is retained). */
uint64_t spool_first(const spool *sp);
/* The newest visible (durable, transaction complete) offset; 0 when none. */
uint64_t spool_head(const spool *sp);
/* Every offset up to this is acknowledged (or dropped, or dead). */
uint64_t spool_acked(const spool *sp);
/* Moves the acked cursor forward (never back); recorded in the cursor file at once (a write that
 * survives the process being killed; fsynced by the next spool_sync or SPOOL_SYNC_CURSOR job). */
bool spool_set_acked(spool *sp, uint64_t acked, char *err, size_t errlen) CDC_MUST_CHECK;

/* Delivery counts, kept beside the events so that max_deliveries holds across a restart of cdc:
 * each delivery of an offset after the acked cursor is noted and written by spool_save_deliveries.
 * Written, not fsynced (only a compaction's rewrite is): it survives cdc being killed, and an
 * fsync per delivery batch would cost the socket path a fifth of its throughput; after a power loss
 * the latest counts may be lower (max_deliveries then allows a few more). Memory and file are
 * bounded by the offsets delivered and not acknowledged. */
void spool_note_delivery(spool *sp, uint64_t offset, uint32_t count);
bool spool_save_deliveries(spool *sp, char *err, size_t errlen) CDC_MUST_CHECK;
/* How often offset was delivered (as last noted); 0: never, or acknowledged. */
uint32_t spool_deliveries(const spool *sp, uint64_t offset);

/* block: whether the unacknowledged events exceed a limit (stop reading the slot until they don't). */
bool spool_full(const spool *sp, int64_t now_ms);
/* drop_oldest: discards the oldest events beyond the limits, acknowledged or not, and returns the
 * discarded range in [*from, *to] (both 0 when nothing was). Both modes: deletes segment files
 * that hold only acknowledged or discarded events, except those holding an offset from keep on
 * that is not discarded (acknowledged events a consumer is reading again). false with err on an
 * I/O error. */
bool spool_trim(spool *sp, int64_t now_ms, uint64_t keep, uint64_t *from, uint64_t *to, char *err,
		size_t errlen) CDC_MUST_CHECK;

typedef struct spool_stats {
	uint64_t events;  /* retained: head - first + 1 */
	uint64_t bytes;	  /* on disk */
	uint64_t dropped; /* discarded by drop_oldest since the spool was created (persisted) */
	uint64_t segments;
	int64_t oldest_ms; /* time_ms of the oldest retained event, 0 if none */
} spool_stats;
spool_stats spool_get_stats(const spool *sp);

#endif

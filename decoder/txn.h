/* txn.h: assembles the pgoutput message stream into committed transactions.
 * Plain transactions pass straight through to the handler. Streamed (in-progress) and prepared
 * transactions are "held": each change still reaches the handler as it arrives, so the handler
 * does its work (matching, rendering) while the server is still sending, and the bytes it puts in
 * the change's hold buffer go to a spill file under a directory. At Stream Commit / Commit
 * Prepared the records come back in order through replay(); on Stream Abort (whole transaction
 * or subtransaction) / Rollback Prepared they are discarded. Memory does not grow with
 * transaction size. */
#ifndef CDC_TXN_H
#define CDC_TXN_H

#include "decoder/pgoutput.h"

typedef struct txn_info {
	uint32_t xid;
	pgo_lsn commit_lsn; /* commit record (or COMMIT PREPARED record) position */
	pgo_lsn end_lsn;    /* end of that record: the position to confirm once delivered; 0 until known */
	int64_t commit_time;
	const char *origin;  /* NULL if none */
	const char *gid;     /* prepared transactions: the GID; else NULL */
	uint64_t held_bytes; /* held transactions at begin(): the size of their records; else 0 */
} txn_info;

typedef struct txn_handler {
	void *ctx;
	/* Transaction start, once the commit is known: plain transactions at Begin (end_lsn still 0
	 * then), held ones at their Stream Commit / Commit Prepared, before their replay() calls. */
	bool (*begin)(void *ctx, const txn_info *t, char *err, size_t errlen);
	/* A change (PGO_INSERT/UPDATE/DELETE/TRUNCATE/MESSAGE) at WAL position lsn, as it arrives;
	 * the relation cache is current for it. t is NULL for a non-transactional message. hold is
	 * NULL in a plain transaction: the change is committed, deliver it. In a held transaction t
	 * has only xid (the top-level one), origin and gid, and what the handler appends to hold is
	 * this change's record (possibly empty), replayed if the transaction commits. */
	bool (*change)(void *ctx, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold, char *err,
		       size_t errlen);
	/* One record of a held transaction, in the order the changes arrived. */
	bool (*replay)(void *ctx, const txn_info *t, const uint8_t *rec, size_t len, char *err,
		       size_t errlen);
	bool (*commit)(void *ctx, const txn_info *t, char *err, size_t errlen);
} txn_handler;

typedef struct txn_stats {
	uint64_t streamed_open; /* streamed transactions being held */
	uint64_t prepared_open; /* prepared transactions being held */
	uint64_t spilled_bytes; /* bytes currently in spill files */
	uint64_t aborted;	/* streamed or prepared transactions discarded */
} txn_stats;

typedef struct txn_assembler txn_assembler;

/* spill_dir must exist; stale spill files in it are removed (the slot will resend them). */
txn_assembler *txn_new(const char *spill_dir, const pgo_options *opt, pgo_relcache *rc, const txn_handler *h,
		       char *err, size_t errlen);
void txn_free(txn_assembler *a);

/* Feeds one XLogData payload received at WAL position lsn. Errors (malformed message, protocol
 * violation, handler failure, spill I/O) return false with a message naming what happened. */
bool txn_feed(txn_assembler *a, const uint8_t *data, size_t len, pgo_lsn lsn, char *err,
	      size_t errlen) CDC_MUST_CHECK;

/* True between Begin and Commit of a plain transaction or inside a stream block. */
bool txn_in_progress(const txn_assembler *a);
/* Lowest prepare LSN of the prepared transactions held, or 0 if none. The slot must not be
 * confirmed past it: the server would not send the prepared changes again. */
pgo_lsn txn_oldest_prepared(const txn_assembler *a);
txn_stats txn_get_stats(const txn_assembler *a);

#endif

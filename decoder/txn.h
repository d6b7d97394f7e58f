/* Assembles the pgoutput message stream into committed transactions. Memory does not grow with transaction
 * size. */
#ifndef CDC_TXN_H
#define CDC_TXN_H

#include "decoder/pgoutput.h"

/* Plain transactions pass straight through to the handler. Streamed (in-progress) and prepared
 * transactions are "held". Each change of those still reaches the handler as it arrives. So the
 * handler does its work (matching, rendering) while the server is still sending. The bytes it puts in
 * the change's hold buffer go to a spill file under a directory. At Stream Commit or Commit Prepared
 * the records come back in order through replay(). On Stream Abort (of the whole transaction or a
 * subtransaction) or Rollback Prepared they are discarded. The handler is then told (abort(),
 * rollback()), so that what it keeps of a held change itself goes too. */

typedef struct txn_info {
	uint32_t xid;
	pgo_lsn commit_lsn; /* commit record (or COMMIT PREPARED record) position */
	pgo_lsn end_lsn;    /* end of that record, the position to confirm once delivered, 0 until known */
	int64_t commit_time;
	const char *origin;  /* NULL if none */
	const char *gid;     /* for prepared transactions the GID, else NULL */
	uint64_t held_bytes; /* for held transactions at begin() the size of their records, else 0 */
	bool held;	     /* a held transaction, from begin() to commit() */
	/* A held change's first position (tx_index) in the transaction. It counts the positions the changes
	 * before it took (see change()), without those of rolled-back subtransactions. savepoint says whether
	 * it is the first of a subtransaction, a savepoint rollback() may return to. */
	uint32_t tx_index;
	bool savepoint;
} txn_info;

typedef struct txn_handler {
	void *ctx;
	/* Transaction start, once the commit is known. Plain transactions start at Begin (end_lsn still 0
	 * then). Held ones start at their Stream Commit / Commit Prepared, before their replay() calls. */
	bool (*begin)(void *ctx, const txn_info *info, char *err, size_t errlen);
	/* A change (PGO_INSERT/UPDATE/DELETE/TRUNCATE/MESSAGE) at WAL position lsn, as it arrives. The
	 * relation cache is current for it. info is NULL for a non-transactional message.
	 * - In a plain transaction hold is NULL. The change is committed, so deliver it.
	 * - In a held transaction info has only xid (the top-level one), origin, gid, tx_index and savepoint.
	 *   What the handler appends to hold is this change's record (possibly empty), replayed if the
	 *   transaction commits. *positions is how many tx_index values the change takes, 0 unless set.
	 * positions is NULL outside a held transaction. */
	bool (*change)(void *ctx, const txn_info *info, const pgo_msg *msg, pgo_lsn lsn, buf *hold,
		       uint32_t *positions, char *err, size_t errlen);
	/* One record of a held transaction, in the order the changes arrived. */
	bool (*replay)(void *ctx, const txn_info *info, const uint8_t *rec, size_t len, char *err,
		       size_t errlen);
	bool (*commit)(void *ctx, const txn_info *info, char *err, size_t errlen);
	/* Optional. Held transaction xid's changes from the savepoint at tx_index on are discarded (a
	 * subtransaction rolled back). The transaction goes on. */
	bool (*rollback)(void *ctx, uint32_t xid, uint32_t tx_index, char *err, size_t errlen);
	/* Optional. Held transaction xid is discarded (Stream Abort, Rollback Prepared). Not called for
	 * those pgo_txn_free() forgets. */
	void (*abort)(void *ctx, uint32_t xid);
} txn_handler;

typedef struct txn_stats {
	uint64_t streamed_open; /* streamed transactions being held */
	uint64_t prepared_open; /* prepared transactions being held */
	uint64_t spilled_bytes; /* bytes currently in spill files */
	uint64_t aborted;	/* streamed or prepared transactions discarded */
} txn_stats;

typedef struct txn_assembler txn_assembler;

/* spill_dir must exist. Stale spill files in it are removed (the slot will resend them). */
txn_assembler *pgo_txn_new(const char *spill_dir, const pgo_options *opt, pgo_relcache *rc,
			   const txn_handler *handler, char *err, size_t errlen);
void pgo_txn_free(txn_assembler *assembler);

/* Feeds one XLogData payload received at WAL position lsn. Errors (malformed message, protocol
 * violation, handler failure, spill I/O) return false with a message naming what happened. */
bool pgo_txn_feed(txn_assembler *assembler, const uint8_t *data, size_t len, pgo_lsn lsn, char *err,
		  size_t errlen) CDC_MUST_CHECK;

/* True between Begin and Commit of a plain transaction or inside a stream block. */
bool pgo_txn_in_progress(const txn_assembler *assembler);
/* Lowest prepare LSN of the prepared transactions held, or 0 if none. The slot must not be confirmed past it,
 * as the server would not send the prepared changes again. */
pgo_lsn pgo_txn_oldest_prepared(const txn_assembler *assembler);
txn_stats pgo_txn_get_stats(const txn_assembler *assembler);

#endif

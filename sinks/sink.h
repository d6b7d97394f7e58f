/* The one small interface every sink implements (stdout, Kafka, the socket spool). */
#ifndef CDC_SINK_H
#define CDC_SINK_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/util.h"

/* A sink renders an event in its own format without the fields known only at commit (commit_lsn,
 * tx_index, commit_time). So the events of a large streamed transaction are rendered while the server
 * is still sending it, and spilled as bytes. At commit they are delivered with those fields. A sink
 * that keeps such events itself until the commit (the socket spool) takes them as they arrive instead
 * (the hold operations), and they are not spilled.
 *
 * Transactions are numbered in commit order (seq). A sink reports the highest seq whose events it
 * holds safely, and those of every earlier transaction. Safely means written out, durably spooled, or
 * acknowledged by a broker. The daemon confirms a transaction to the slot only when every sink has
 * passed it. */

typedef struct sink sink;

/* The fields of an event that are known only once its transaction commits. */
typedef struct sink_commit {
	uint64_t commit_lsn;
	int64_t commit_time;
	uint32_t tx_index;
	/* A schema event. It has the tx_index of the row it precedes, and comes before that row. A sink that
	 * recognises what it holds by (commit_lsn, tx_index) orders it first. */
	bool before_change;
} sink_commit;

/* What flush() says about the sink. */
typedef enum sink_status {
	SINK_OK,
	/* Something in flight failed for good, or the sink's client failed. What it had not delivered is lost
	 * to it. The daemon forgets everything not yet confirmed and calls restart(). It then streams again
	 * from the slot's confirmed position, so the server sends those changes again. */
	SINK_RESTART,
	SINK_FATAL, /* cannot go on, and the daemon exits */
} sink_status;

typedef struct sink_ops {
	const char *name;
	/* Appends the event of subscription sub, without its commit fields, in the sink's format to out. sub
	 * is the index of the subscription in the settings the sink was bound with. */
	void (*render)(sink *sk, uint32_t sub, const Cdc__V1__Event *event, buf *out);
	/* Takes one event of subscription sub rendered by render(), of transaction seq, with its commit
	 * fields. False means a permanent, local failure, and the daemon exits. flush() reports the failures
	 * a restart can cure. */
	bool (*deliver)(sink *sk, uint32_t sub, const char *rendered, size_t len, const sink_commit *commit,
			uint64_t seq, char *err, size_t errlen);
	/* Transaction seq has no more events for this sink (and every earlier one has ended too). */
	void (*end_txn)(sink *sk, uint64_t seq);
	/* Called when the input is drained. It pushes out what is buffered and reports failures. */
	sink_status (*flush)(sink *sk, char *err, size_t errlen);
	/* The highest seq such that every transaction up to it is safely delivered. */
	uint64_t (*delivered)(const sink *sk);
	void (*free)(sink *sk);

	/* Optional, for sinks that deliver asynchronously (NULL otherwise). */
	int (*fd)(const sink *sk); /* readable when poll() has work (delivery reports) */
	void (*poll)(sink *sk);
	bool (*busy)(const sink *sk);		  /* too much in flight, so stop reading the slot for now */
	bool (*finish)(sink *sk, int timeout_ms); /* waits for everything in flight. False on timeout. */
	bool (*restart)(sink *sk, char *err, size_t errlen); /* after SINK_RESTART, a fresh client */

	/* Optional, all or none. The sink keeps the events of a held (streamed or prepared) transaction xid
	 * itself, invisible until its commit.
	 * - hold() takes one event, rendered by render(), with its final tx_index.
	 * - hold_savepoint() notes where a subtransaction starts, at tx_index.
	 * - hold_rollback() discards xid's events from the savepoint at tx_index on (the subtransaction
	 *   rolled back).
	 * - hold_abort() discards all of xid's events. With xid 0 it discards those of every held
	 *   transaction, for a new stream.
	 * - hold_commit() makes them transaction seq's, with commit's commit_lsn and commit_time, before
	 *   end_txn(seq). */
	bool (*hold)(sink *sk, uint32_t sub, uint32_t xid, uint32_t tx_index, const char *rendered,
		     size_t len, char *err, size_t errlen);
	void (*hold_savepoint)(sink *sk, uint32_t xid, uint32_t tx_index);
	bool (*hold_rollback)(sink *sk, uint32_t xid, uint32_t tx_index, char *err, size_t errlen);
	void (*hold_abort)(sink *sk, uint32_t xid);
	bool (*hold_commit)(sink *sk, uint32_t xid, const sink_commit *commit, uint64_t seq, char *err,
			    size_t errlen);
} sink_ops;

struct sink {
	const sink_ops *ops;
};

#endif

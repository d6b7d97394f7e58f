/* sink.h: the one small interface every sink implements (stdout now; socket spool and Kafka next).
 * A sink renders an event in its own format without the fields known only at commit (commit_lsn,
 * tx_index, commit_time), so the events of a large streamed transaction are rendered while the
 * server is still sending it and spilled as bytes; at commit they are delivered with those fields.
 * Transactions are numbered in commit order (seq). A sink reports the highest seq whose events
 * (and those of every earlier transaction) it holds safely: written out, durably spooled, or
 * acknowledged by a broker. The daemon confirms a transaction to the slot only when every sink
 * has passed it. */
#ifndef CDC_SINK_H
#define CDC_SINK_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/v1/event.pb-c.h"
#include "util.h"

typedef struct sink sink;

/* The fields of an event that are known only once its transaction commits. */
typedef struct sink_commit {
	uint64_t commit_lsn;
	int64_t commit_time;
	uint32_t tx_index;
} sink_commit;

typedef struct sink_ops {
	const char *name;
	/* Appends the event, without its commit fields, in the sink's format to out. */
	void (*render)(sink *s, const Cdc__V1__Event *e, buf *out);
	/* Takes one rendered event of transaction seq with its commit fields. */
	bool (*deliver)(sink *s, const char *rendered, size_t len, const sink_commit *c, uint64_t seq, char *err,
			size_t errlen);
	/* Transaction seq has no more events for this sink. */
	void (*end_txn)(sink *s, uint64_t seq);
	/* Called when the input is drained: push out what is buffered. false: a permanent failure. */
	bool (*flush)(sink *s, char *err, size_t errlen);
	/* The highest seq such that every transaction up to it is safely delivered. */
	uint64_t (*delivered)(const sink *s);
	void (*free)(sink *s);
} sink_ops;

struct sink {
	const sink_ops *ops;
};

#endif

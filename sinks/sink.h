/* sink.h: the one small interface every sink implements (stdout now; socket spool and Kafka next).
 * Transactions are numbered in commit order (seq). A sink is handed the events of transaction seq,
 * then told the transaction ended; it reports the highest seq whose events (and those of every
 * earlier transaction) it holds safely: written and flushed, durably spooled, or acknowledged by a
 * broker. The daemon confirms a transaction to the slot only when every sink has passed it. */
#ifndef CDC_SINK_H
#define CDC_SINK_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/v1/event.pb-c.h"

typedef struct sink sink;

typedef struct sink_ops {
	const char *name;
	/* Takes one event of transaction seq; the event is only valid during the call. */
	bool (*deliver)(sink *s, const Cdc__V1__Event *e, uint64_t seq, char *err, size_t errlen);
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

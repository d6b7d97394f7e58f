/* Which WAL position may be confirmed to the slot. Committed transactions are queued with their end
 * LSN in commit order. Once every sink has delivered up to a transaction, it and all before it leave
 * the queue, and its end LSN may be confirmed. One entry per transaction still in flight in a sink. */
#ifndef CDC_PROGRESS_H
#define CDC_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decoder/base/ring.h"

struct progress_entry {
	uint64_t seq, end_lsn;
};
typedef struct progress {
	ring q; /* of struct progress_entry, in seq order */
} progress;

#define PROGRESS_INIT ((progress){.q = RING_INIT(struct progress_entry)})

void pipeline_progress_push(progress *prog, uint64_t seq, uint64_t end_lsn);
/* Drops the transactions with seq <= delivered. Returns the highest end LSN dropped, or 0. */
uint64_t pipeline_progress_advance(progress *prog, uint64_t delivered);
static inline size_t progress_pending(const progress *prog)
{
	return prog->q.len;
}
void pipeline_progress_clear(progress *prog);
void pipeline_progress_free(progress *prog);

#endif

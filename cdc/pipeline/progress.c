/* See progress.h. */
#include "cdc/pipeline/progress.h"

void pipeline_progress_push(progress *p, uint64_t seq, uint64_t end_lsn)
{
	*(struct progress_entry *)ring_push(&p->q) = (struct progress_entry){seq, end_lsn};
}

uint64_t pipeline_progress_advance(progress *p, uint64_t delivered)
{
	uint64_t lsn = 0;
	size_t n = 0;
	for (; n < p->q.len; n++) {
		const struct progress_entry *e = ring_at(&p->q, n);
		if (e->seq > delivered)
			break;
		if (e->end_lsn > lsn)
			lsn = e->end_lsn;
	}
	ring_pop(&p->q, n);
	return lsn;
}

void pipeline_progress_clear(progress *p)
{
	ring_clear(&p->q);
}

void pipeline_progress_free(progress *p)
{
	ring_free(&p->q);
}

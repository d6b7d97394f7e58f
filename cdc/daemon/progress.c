/* progress.c: a ring buffer of (seq, end_lsn); see progress.h. */
#include "cdc/daemon/progress.h"

#include <stdlib.h>

#include "decoder/util.h"

void progress_push(progress *p, uint64_t seq, uint64_t end_lsn)
{
	if (p->len == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 1024;
		struct progress_entry *q = xmalloc(cap * sizeof(*q));
		for (size_t i = 0; i < p->len; i++)
			q[i] = p->q[(p->head + i) % p->cap];
		free(p->q);
		p->q = q;
		p->cap = cap;
		p->head = 0;
	}
	p->q[(p->head + p->len) % p->cap] = (struct progress_entry){seq, end_lsn};
	p->len++;
}

uint64_t progress_advance(progress *p, uint64_t delivered)
{
	uint64_t lsn = 0;
	while (p->len && p->q[p->head].seq <= delivered) {
		if (p->q[p->head].end_lsn > lsn)
			lsn = p->q[p->head].end_lsn;
		p->head = (p->head + 1) % p->cap;
		p->len--;
	}
	return lsn;
}

void progress_clear(progress *p)
{
	p->head = p->len = 0;
}

void progress_free(progress *p)
{
	free(p->q);
	*p = (progress){0};
}

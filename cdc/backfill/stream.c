/* The stream's side of backfills. The sinks' durable position finishes chunks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/backfill_internal.h"
#include "decoder/base/bytes.h"

/* A watermark opens or closes a chunk's window and emits what is left of it. Changes of a table being
 * read mark keys in its open windows. Those marks are encoded into held transactions' records and
 * decoded at their commit. A row the stream carries incomplete while a range may have missed it is
 * marked to be read again. */

/* ---- the stream ---- */

bool backfill_batch_next(const bf_batch *batch, size_t *pos, bf_datum *values)
{
	for (; *pos < backfill_window_rows(batch->w); (*pos)++) {
		const void *row;
		size_t len;
		bool dropped;
		backfill_window_row(batch->w, *pos, &row, &len, &dropped);
		if (!dropped && backfill_decode(row, len, values, batch->ncols)) {
			(*pos)++;
			return true;
		}
	}
	return false;
}

static void add_counters(counters *to, const counters *d)
{
	to->read += d->read;
	to->delivered += d->delivered;
	to->dropped += d->dropped;
	to->filtered += d->filtered;
	to->blocks += d->blocks;
}

/* Chunk c's window closed at lsn. Emit what survived, and remember the chunk until durable. Mark the keys
 * whose rows the stream left incomplete inside the window to be read again. */
static bool chunk_closed(chunk *c, uint64_t lsn, bf_emit_fn emit, void *ctx, char *err, size_t errlen)
{
	table *t = c->t;
	bf_window *w = c->w;
	size_t rows = backfill_window_rows(w), dropped = backfill_window_dropped(w);
	bf_batch batch = {.id = t->bf->id,
			  .subscription = t->bf->sub,
			  .where = t->bf->where,
			  .schema = t->schema,
			  .table = t->name,
			  .cols = t->cols,
			  .ncols = t->ncols,
			  .keys = t->keys,
			  /* a keyless table's events have the key the stream gives it. That is every column
			   * with REPLICA IDENTITY FULL, and none without. */
			  .nkeys = t->keyless && !t->full ? 0 : t->nkeys,
			  .lsn = lsn,
			  .nrows = rows - dropped,
			  .w = w};
	size_t delivered = 0;
	if (batch.nrows && !emit(ctx, &batch, &delivered, err, errlen))
		return false;
	counters d = {.read = rows,
		      .dropped = dropped,
		      .delivered = delivered,
		      .filtered = batch.nrows - delivered,
		      .blocks = c->leaf >= 0 ? c->hi - c->lo : 0};
	size_t pos = 0, len;
	const void *key;
	while (!t->keyless && backfill_window_partial_key(w, &pos, &key, &len))
		backfill_keys_add(&t->again, key, len);
	t->pend = util_xrealloc(t->pend, (t->npend + 1) * sizeof(*t->pend));
	pending *p = &t->pend[t->npend++];
	*p = (pending){.lsn = lsn, .leaf = c->leaf, .lo = c->lo, .hi = c->hi, .keys = c->keys, .delta = d};
	c->keys = (buf){0};
	add_counters(&t->done, &d);
	t->bf->set->dirty = true;
	backfill_chunk_free(c);
	return true;
}

bool backfill_on_message(bf_set *b, const char *content, size_t len, uint64_t lsn, bf_now now,
			 bf_emit_fn emit, void *ctx, char *err, size_t errlen)
{
	char id[BF_ID_SIZE], nonce[BF_ID_SIZE];
	bool high;
	(void)now;
	if (!backfill_sql_watermark_parse(content, len, id, sizeof(id), nonce, sizeof(nonce), &high))
		return true;
	backfill *f = backfill_lookup(b, id);
	for (size_t k = 0; f && k < f->ntables; k++) {
		table *t = &f->tables[k];
		if (t->state != BF_RUNNING)
			continue;
		chunk *c = NULL;
		for (size_t i = 0; i < t->nchunks && !c; i++)
			if (strcmp(t->chunks[i]->nonce, nonce) == 0)
				c = t->chunks[i];
		if (!c)
			continue;
		switch (backfill_window_watermark(c->w, nonce, high)) {
		case BFW_CLOSED:
			if (chunk_closed(c, lsn, emit, ctx, err, errlen))
				return true;
			backfill_chunk_retry(c, false);
			return false;
		case BFW_RETRY: {
			bfw_retry why = backfill_window_retry_reason(c->w);
			backfill_chunk_retry(c, why == BFW_RETRY_MEMORY || why == BFW_RETRY_UNKEYED);
			return true;
		}
		default:
			return true;
		}
	}
	return true;
}

bool backfill_watching(const bf_set *b, const char *schema, const char *table_name)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			const table *t = &b->list[i]->tables[k];
			if (t->state == BF_RUNNING && strcmp(t->name, table_name) == 0 &&
			    strcmp(t->schema, schema) == 0)
				return true;
		}
	return false;
}

/* The key of t's row in values, by column name. A value not sent is fallback's, the same row's other side,
 * when there is one. False if a key column is missing. */
static bool change_key(const table *t, const bf_change *c, const bf_datum *values, const bf_datum *fallback,
		       buf *out)
{
	bf_datum d[t->nkey_names ? t->nkey_names : 1];
	for (size_t k = 0; k < t->nkey_names; k++) {
		const char *name = t->key_names[k];
		size_t i = 0;
		while (i < c->ncols && strcmp(c->names[i], name) != 0)
			i++;
		if (i == c->ncols)
			return false;
		d[k] = values[i].len == BF_ABSENT && fallback ? fallback[i] : values[i];
		if (d[k].len == BF_ABSENT)
			return false;
	}
	backfill_encode(out, d, t->nkey_names);
	return true;
}

void backfill_on_change(bf_set *b, const bf_change *c)
{
	buf k1 = {0}, k2 = {0};
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (t->state != BF_RUNNING || strcmp(t->name, c->table) != 0 ||
			    strcmp(t->schema, c->schema) != 0)
				continue;
			backfill_recent_add(&t->recent, c->xid);
			if (c->truncate) {
				for (size_t j = 0; j < t->nchunks; j++)
					backfill_window_truncate(t->chunks[j]->w, c->xid);
				continue;
			}
			if (!t->nkey_names)
				continue; /* not described yet, so no chunk is open */
			buf_reset(&k1);
			buf_reset(&k2);
			bool partial = c->partial;
			for (size_t j = 0; c->new_values && j < c->ncols; j++)
				partial |= c->new_values[j].len == BF_ABSENT;
			bool has1 = c->old_values && change_key(t, c, c->old_values, c->new_values, &k1);
			bool has2 = c->new_values && change_key(t, c, c->new_values, c->old_values, &k2);
			/* The key before the change (or after it, for an insert), and after it if both. */
			const buf *key = has1 ? &k1 : &k2, *key2 = has1 && has2 ? &k2 : NULL;
			for (size_t j = 0; j < t->nchunks; j++)
				backfill_window_change(
				    t->chunks[j]->w, c->xid, has1 || has2 ? key->data : NULL, key->len,
				    key2 ? key2->data : NULL, key2 ? key2->len : 0, partial);
			/* The stream's copy of the row is incomplete. If the row moved out of a range not
			 * read yet into one read already, no chunk reads it whole. Read it again. Do so too
			 * when its key changed while the old key waits to be read again. That read finds
			 * nothing under the old key (the ranges may all be read by then). */
			if (partial && !t->keyless && has2 &&
			    (backfill_ranges_open(t) ||
			     (key2 && backfill_keys_has(&t->again, k1.data, k1.len)))) {
				backfill_keys_add(&t->again, k2.data, k2.len);
				b->dirty = true;
			}
		}
	buf_free(&k1);
	buf_free(&k2);
}

enum { CH_TRUNCATE = 1, CH_PARTIAL = 2, CH_OLD = 4, CH_NEW = 8 };

void backfill_change_encode(const bf_change *c, buf *out)
{
	buf_append(out, c->schema, strlen(c->schema) + 1);
	buf_append(out, c->table, strlen(c->table) + 1);
	uint8_t head[5] = {(uint8_t)((c->truncate ? CH_TRUNCATE : 0) | (c->partial ? CH_PARTIAL : 0) |
				     (c->old_values ? CH_OLD : 0) | (c->new_values ? CH_NEW : 0))};
	put_be32(head + 1, (uint32_t)c->ncols);
	buf_append(out, head, sizeof(head));
	for (size_t i = 0; i < c->ncols; i++)
		buf_append(out, c->names[i], strlen(c->names[i]) + 1);
	if (c->old_values)
		backfill_encode(out, c->old_values, c->ncols);
	if (c->new_values)
		backfill_encode(out, c->new_values, c->ncols);
}

/* A NUL-terminated string at *pos of [p, p + len). *pos moves past it. */
static const char *take_cstr(const char *p, size_t len, size_t *pos)
{
	const char *nul = *pos < len ? memchr(p + *pos, '\0', len - *pos) : NULL;
	if (!nul)
		return NULL;
	const char *s = p + *pos;
	*pos = (size_t)(nul - p) + 1;
	return s;
}

/* The length of n datums backfill_encode wrote at p, or 0 if they do not fit in len. */
static size_t encoded_len(const uint8_t *p, size_t len, size_t n)
{
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (len - off < 4)
			return 0;
		uint32_t l = get_be32(p + off);
		off += 4;
		if (l >= UINT32_MAX - 1)
			continue;
		if (len - off < l)
			return 0;
		off += l;
	}
	return off;
}

bool backfill_change_decode(const void *data, size_t len, bf_change *out)
{
	const char *p = data;
	size_t pos = 0;
	*out = (bf_change){0};
	out->schema = take_cstr(p, len, &pos);
	out->table = take_cstr(p, len, &pos);
	if (!out->table || len - pos < 5)
		return false;
	const uint8_t *h = (const uint8_t *)p + pos;
	size_t n = get_be32(h + 1);
	pos += 5;
	if (n > len - pos)
		return false; /* each name takes a byte at least */
	out->truncate = h[0] & CH_TRUNCATE;
	out->partial = h[0] & CH_PARTIAL;
	/* one block for the names, then the old and the new values */
	const char **names = util_xcalloc(1, (n + 1) * sizeof(*names) + (2 * n + 1) * sizeof(bf_datum));
	bf_datum *vals = (bf_datum *)(names + n + 1);
	out->owned = names;
	out->names = names;
	out->ncols = n;
	for (size_t i = 0; i < n; i++)
		if (!(names[i] = take_cstr(p, len, &pos)))
			goto bad;
	for (int side = 0; side < 2; side++) {
		if (!(h[0] & (side ? CH_NEW : CH_OLD)))
			continue;
		size_t used = encoded_len((const uint8_t *)p + pos, len - pos, n);
		if ((!used && n) || !backfill_decode(p + pos, used, vals + side * n, n))
			goto bad;
		*(side ? &out->new_values : &out->old_values) = vals + side * n;
		pos += used;
	}
	if (pos == len)
		return true;
bad:
	free(names);
	*out = (bf_change){0};
	return false;
}

void backfill_change_free(bf_change *c)
{
	free(c->owned);
	*c = (bf_change){0};
}

void backfill_delivered(bf_set *b, uint64_t flushed, bf_now now)
{
	for (size_t i = 0; i < b->n; i++) {
		backfill *f = b->list[i];
		for (size_t k = 0; k < f->ntables; k++) {
			table *t = &f->tables[k];
			size_t n = 0;
			while (n < t->npend && t->pend[n].lsn <= flushed) {
				pending *p = &t->pend[n++];
				if (p->leaf >= 0 && (size_t)p->leaf < t->nleaves) {
					backfill_ranges_add(&t->leaves[p->leaf].done, p->lo, p->hi);
					backfill_ranges_remove(&t->leaves[p->leaf].taken, p->lo, p->hi);
				} else {
					backfill_keys_done(&t->again, &p->keys);
				}
				add_counters(&t->done_d, &p->delta);
				buf_free(&p->keys);
			}
			if (!n)
				continue;
			memmove(t->pend, t->pend + n, (t->npend - n) * sizeof(*t->pend));
			t->npend -= n;
			b->dirty = true;
			backfill_table_progress(t, now);
		}
		backfill_settle(f, now);
	}
}

bool backfill_draining(const bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			const table *t = &b->list[i]->tables[k];
			if (t->state == BF_RUNNING && t->step == T_READ && !t->nchunks && t->npend &&
			    !t->again.waiting && !backfill_ranges_open(t))
				return true;
		}
	return false;
}

void backfill_restart(bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (t->state != BF_RUNNING)
				continue;
			backfill_drop_run(t);
			backfill_rewind_table(t);
			t->step = !t->cols ? T_DESCRIBE : !t->nleaves ? T_PLAN : T_READ;
			t->due_ms = 0;
		}
}

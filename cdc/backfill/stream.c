/* stream.c: the stream's side of backfills: a watermark closes a chunk's window and emits what is
 * left of it; changes of watched tables mark keys in open windows (encoded into held transactions'
 * records and decoded at their commit); the sinks' durable position finishes chunks in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/internal.h"

/* ---- the stream ---- */

bool bf_batch_next(const bf_batch *batch, size_t *pos, bf_datum *values)
{
	for (; *pos < bfw_rows(batch->w); (*pos)++) {
		const void *row;
		size_t len;
		bool dropped;
		bfw_row(batch->w, *pos, &row, &len, &dropped);
		if (!dropped && bf_decode(row, len, values, batch->ncols)) {
			(*pos)++;
			return true;
		}
	}
	return false;
}

/* The window of t closed at lsn: emit what survived, and remember the chunk until durable. */
static bool chunk_closed(bf_set *b, table *t, uint64_t lsn, bf_now now, bf_emit_fn emit, void *ctx, char *err,
			 size_t errlen)
{
	size_t rows = bfw_rows(t->w), dropped = bfw_dropped(t->w);
	bf_batch batch = {.id = t->bf->id,
			  .subscription = t->bf->sub,
			  .where = t->bf->where,
			  .schema = t->schema,
			  .table = t->name,
			  .cols = t->cols,
			  .ncols = t->ncols,
			  .keys = t->keys,
			  .nkeys = t->nkeys,
			  .lsn = lsn,
			  .nrows = rows - dropped,
			  .w = t->w};
	if (batch.nrows && !emit(ctx, &batch, err, errlen))
		return false;
	t->done.read += rows;
	t->done.dropped += dropped;
	t->done.emitted += rows - dropped;
	size_t keylen;
	const void *last = bfw_last_key(t->w, &keylen);
	if (last) {
		buf_reset(&t->cursor);
		buf_append(&t->cursor, last, keylen);
	}
	t->pend = xrealloc(t->pend, (t->npend + 1) * sizeof(*t->pend));
	pending *p = &t->pend[t->npend++];
	*p = (pending){.lsn = lsn,
		       .read = t->done.read,
		       .emitted = t->done.emitted,
		       .dropped = t->done.dropped,
		       .last = t->last};
	buf_append(&p->cursor, t->cursor.data, t->cursor.len);
	t->step = t->last ? S_DRAIN : S_LOW;
	/* The rate limit: the next chunk starts when this one's rows are paid for. */
	t->due_ms = now.ms;
	if (b->s.rate)
		t->due_ms = t->sent_ms + (uint64_t)rows * 1000 / b->s.rate;
	return true;
}

bool backfill_on_message(bf_set *b, const char *content, size_t len, uint64_t lsn, bf_now now,
			 bf_emit_fn emit, void *ctx, char *err, size_t errlen)
{
	char id[BF_ID_SIZE], nonce[BF_ID_SIZE];
	bool high;
	if (!bfsql_watermark_parse(content, len, id, sizeof(id), nonce, sizeof(nonce), &high))
		return true;
	backfill *f = bf_find(b, id);
	for (size_t k = 0; f && k < f->ntables; k++) {
		table *t = &f->tables[k];
		if (t->state != BF_RUNNING || !t->w || !bfw_nonce(t->w) ||
		    strcmp(bfw_nonce(t->w), nonce) != 0)
			continue;
		switch (bfw_watermark(t->w, nonce, high)) {
		case BFW_CLOSED:
			return chunk_closed(b, t, lsn, now, emit, ctx, err, errlen);
		case BFW_RETRY:
			t->retries++;
			if (bfw_retry_reason(t->w) == BFW_RETRY_MEMORY)
				t->limit = bf_clamp_rows(b, t->limit / 2);
			bf_chunk_again(t, now.ms);
			return true;
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
			if (t->w && strcmp(t->name, table_name) == 0 && strcmp(t->schema, schema) == 0)
				return true;
		}
	return false;
}

/* The key of t's row in values (by column name), or false if a key column was not sent. */
static bool change_key(const table *t, const bf_change *c, const bf_datum *values, const bf_datum *fallback,
		       buf *out)
{
	bf_datum d[t->nkeys ? t->nkeys : 1];
	for (size_t k = 0; k < t->nkeys; k++) {
		const char *name = t->cols[t->keys[k]].name;
		size_t i = 0;
		while (i < c->ncols && strcmp(c->names[i], name) != 0)
			i++;
		if (i == c->ncols)
			return false;
		d[k] = values[i].len == BF_ABSENT && fallback ? fallback[i] : values[i];
		if (d[k].len == BF_ABSENT)
			return false;
	}
	bf_encode(out, d, t->nkeys);
	return true;
}

void backfill_on_change(bf_set *b, const bf_change *c)
{
	buf k1 = {0}, k2 = {0};
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (!t->w || strcmp(t->name, c->table) != 0 || strcmp(t->schema, c->schema) != 0)
				continue;
			if (c->truncate) {
				bfw_truncate(t->w, c->xid);
				continue;
			}
			buf_reset(&k1);
			buf_reset(&k2);
			bool whole = !c->partial;
			for (size_t j = 0; c->new_values && j < c->ncols; j++)
				whole &= c->new_values[j].len != BF_ABSENT;
			bool has1 = c->old_values && change_key(t, c, c->old_values, c->new_values, &k1);
			bool has2 = c->new_values && change_key(t, c, c->new_values, NULL, &k2);
			if (!has1 && has2)
				bfw_change(t->w, c->xid, k2.data, k2.len, NULL, 0, whole);
			else
				bfw_change(t->w, c->xid, has1 ? k1.data : NULL, k1.len, has2 ? k2.data : NULL,
					   k2.len, whole);
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
				     (c->old_values ? CH_OLD : 0) | (c->new_values ? CH_NEW : 0)),
			   (uint8_t)(c->ncols >> 24), (uint8_t)(c->ncols >> 16), (uint8_t)(c->ncols >> 8),
			   (uint8_t)c->ncols};
	buf_append(out, head, sizeof(head));
	for (size_t i = 0; i < c->ncols; i++)
		buf_append(out, c->names[i], strlen(c->names[i]) + 1);
	if (c->old_values)
		bf_encode(out, c->old_values, c->ncols);
	if (c->new_values)
		bf_encode(out, c->new_values, c->ncols);
}

/* A NUL-terminated string at *pos of [p, p + len); *pos moves past it. */
static const char *take_cstr(const char *p, size_t len, size_t *pos)
{
	const char *nul = *pos < len ? memchr(p + *pos, '\0', len - *pos) : NULL;
	if (!nul)
		return NULL;
	const char *s = p + *pos;
	*pos = (size_t)(nul - p) + 1;
	return s;
}

/* The length of n datums bf_encode wrote at p, or 0 if they do not fit in len. */
static size_t encoded_len(const uint8_t *p, size_t len, size_t n)
{
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (len - off < 4)
			return 0;
		uint32_t l = (uint32_t)p[off] << 24 | (uint32_t)p[off + 1] << 16 | (uint32_t)p[off + 2] << 8 |
			     p[off + 3];
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
	size_t n = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
	pos += 5;
	if (n > len - pos)
		return false; /* each name takes a byte at least */
	out->truncate = h[0] & CH_TRUNCATE;
	out->partial = h[0] & CH_PARTIAL;
	/* one block: the names, then the old and the new values */
	const char **names = xcalloc(1, (n + 1) * sizeof(*names) + (2 * n + 1) * sizeof(bf_datum));
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
		if ((!used && n) || !bf_decode(p + pos, used, vals + side * n, n))
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

bool backfill_delivered(bf_set *b, uint64_t flushed, bf_now now, char *err, size_t errlen)
{
	for (size_t i = 0; i < b->n; i++) {
		backfill *f = b->list[i];
		for (size_t k = 0; k < f->ntables; k++) {
			table *t = &f->tables[k];
			size_t n = 0;
			while (n < t->npend && t->pend[n].lsn <= flushed) {
				pending *p = &t->pend[n++];
				buf_reset(&t->cursor_d);
				buf_append(&t->cursor_d, p->cursor.data, p->cursor.len);
				t->done_d = (counters){p->read, p->emitted, p->dropped};
				if (p->last)
					t->state = BF_DONE;
			}
			if (!n)
				continue;
			for (size_t j = 0; j < n; j++)
				buf_free(&t->pend[j].cursor);
			memmove(t->pend, t->pend + n, (t->npend - n) * sizeof(*t->pend));
			t->npend -= n;
			if (t->state == BF_DONE)
				bf_stop_run(t);
			b->dirty = true;
		}
		bf_settle(f, now);
	}
	if (!b->dirty)
		return true;
	if (!bf_save(b, err, errlen))
		return false;
	b->dirty = false;
	return true;
}

void backfill_restart(bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (t->state != BF_RUNNING)
				continue;
			bf_clear_pending(t);
			bf_rewind_table(t);
			if (t->w)
				bfw_reset(t->w);
			t->busy = false;
			t->ticket = 0;
			t->step = t->cols ? S_LOW : S_DESCRIBE;
			t->due_ms = 0;
		}
}

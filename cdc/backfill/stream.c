/* stream.c: the stream's side of backfills: a watermark closes a chunk's window and emits what is
 * left of it; changes of watched tables mark keys in open windows (encoded into held transactions'
 * records and decoded at their commit); the sinks' durable position finishes chunks in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/internal.h"
#include "decoder/base/bytes.h"

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

/* The window w of t closed at lsn: emit what survived, and remember the chunk until durable. last:
 * it was the table's last chunk. */
static bool chunk_closed(table *t, bf_window *w, bool last, uint64_t lsn, bf_emit_fn emit, void *ctx,
			 char *err, size_t errlen)
{
	size_t rows = bfw_rows(w), dropped = bfw_dropped(w);
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
			  .w = w};
	if (batch.nrows && !emit(ctx, &batch, err, errlen))
		return false;
	t->done.read += rows;
	t->done.dropped += dropped;
	t->done.emitted += rows - dropped;
	size_t keylen;
	const void *key = bfw_last_key(w, &keylen);
	if (key) {
		buf_reset(&t->cursor);
		buf_append(&t->cursor, key, keylen);
	}
	t->pend = xrealloc(t->pend, (t->npend + 1) * sizeof(*t->pend));
	pending *p = &t->pend[t->npend++];
	*p = (pending){.lsn = lsn,
		       .read = t->done.read,
		       .emitted = t->done.emitted,
		       .dropped = t->done.dropped,
		       .last = last};
	buf_append(&p->cursor, t->cursor.data, t->cursor.len);
	return true;
}

/* A high watermark asks for t's chunk in w again: the chunk read after it (if w is prev) goes too,
 * and so does any statement in flight, whose result is then ignored. */
static void chunk_retry(bf_set *b, table *t, const bf_window *w, bf_now now)
{
	t->retries++;
	if (bfw_retry_reason(w) == BFW_RETRY_MEMORY)
		t->limit = bf_clamp_rows(b, t->limit / 2);
	t->prev_open = false;
	t->busy = false;
	t->ticket = 0;
	bf_chunk_again(t, now.ms);
}

/* A watermark of t's chunk in w (prev or the one read into w): false if it is neither's. */
static bool chunk_watermark(bf_set *b, table *t, bool is_prev, const char *nonce, bool high, uint64_t lsn,
			    bf_now now, bf_emit_fn emit, void *ctx, char *err, size_t errlen, bool *ok)
{
	bf_window *w = is_prev ? t->prev : t->w;
	if ((is_prev && !t->prev_open) || !bfw_nonce(w) || strcmp(bfw_nonce(w), nonce) != 0)
		return false;
	switch (bfw_watermark(w, nonce, high)) {
	case BFW_CLOSED:
		*ok = chunk_closed(t, w, is_prev ? t->prev_last : t->last, lsn, emit, ctx, err, errlen);
		if (!is_prev) {
			/* Closed before its HIGH statement's result came back (which is then ignored). */
			t->step = t->last ? S_DRAIN : S_LOW;
		} else {
			t->prev_open = false;
			if (t->opens_at_prev)
				bfw_open(t->w);
			t->opens_at_prev = false;
			if (t->step == S_STREAM)
				bf_chunk_written(b, t, now.ms);
		}
		break;
	case BFW_RETRY:
		chunk_retry(b, t, w, now);
		break;
	default:
		break;
	}
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
	bool ok = true;
	for (size_t k = 0; f && k < f->ntables; k++) {
		table *t = &f->tables[k];
		if (t->state == BF_RUNNING && t->w &&
		    (chunk_watermark(b, t, true, nonce, high, lsn, now, emit, ctx, err, errlen, &ok) ||
		     chunk_watermark(b, t, false, nonce, high, lsn, now, emit, ctx, err, errlen, &ok)))
			break;
	}
	return ok;
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
				bfw_truncate(t->prev, c->xid);
				continue;
			}
			buf_reset(&k1);
			buf_reset(&k2);
			bool whole = !c->partial;
			for (size_t j = 0; c->new_values && j < c->ncols; j++)
				whole &= c->new_values[j].len != BF_ABSENT;
			bool has1 = c->old_values && change_key(t, c, c->old_values, c->new_values, &k1);
			bool has2 = c->new_values && change_key(t, c, c->new_values, NULL, &k2);
			/* The key before the change (or after it, for an insert), and after it if both. */
			const buf *key = has1 ? &k1 : &k2, *key2 = has1 && has2 ? &k2 : NULL;
			bf_window *both[] = {t->w, t->prev};
			for (size_t j = 0; j < 2; j++)
				bfw_change(both[j], c->xid, has1 || has2 ? key->data : NULL, key->len,
					   key2 ? key2->data : NULL, key2 ? key2->len : 0, whole);
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

bool backfill_draining(const bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			const table *t = &b->list[i]->tables[k];
			if (t->state == BF_RUNNING && t->step == S_DRAIN && !t->prev_open && t->npend)
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
			bf_clear_pending(t);
			bf_rewind_table(t);
			bf_drop_chunks(t);
			t->busy = false;
			t->ticket = 0;
			t->step = t->cols ? S_LOW : S_DESCRIBE;
			t->due_ms = 0;
		}
}

/* backfill.c: the backfills of the daemon; see backfill.h. Each table moves through
 * DESCRIBE -> LOW -> (CHUNK -> HIGH)* -> DRAIN -> done, a chunk's HIGH standing for the next one's
 * LOW when that is read while the stream closes the chunk (else LOW again: a retry, the rate limit);
 * the reader runs the statements, the stream closes each chunk's window, and the sinks' durable
 * position finishes chunks in the order they were emitted. What is durable is what the state file
 * keeps: a table's cursor (the key of the last row of its last durable chunk) and its counters at
 * that point. */
#include "cdc/backfill/internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/match/match.h"
#include "cdc/match/predicate.h"

const char *bf_state_name(bf_state s)
{
	static const char *const names[] = {"queued", "running", "done", "cancelled", "failed"};
	return s <= BF_FAILED ? names[s] : "unknown";
}

bool bf_state_parse(const char *s, bf_state *out)
{
	for (bf_state i = BF_QUEUED; i <= BF_FAILED; i++)
		if (strcmp(s, bf_state_name(i)) == 0)
			return *out = i, true;
	return false;
}

bool bf_finished(bf_state s)
{
	return s == BF_DONE || s == BF_CANCELLED || s == BF_FAILED;
}

/* xorshift64*: ids and nonces need to differ, not to be secret. */
static void random_hex(bf_set *b, char out[BF_ID_SIZE])
{
	b->rng ^= b->rng >> 12;
	b->rng ^= b->rng << 25;
	b->rng ^= b->rng >> 27;
	snprintf(out, BF_ID_SIZE, "%016" PRIx64, b->rng * 0x2545F4914F6CDD1Du);
}

static char **strv_dup(const char *const *v, size_t n)
{
	char **out = xcalloc(n ? n : 1, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		out[i] = xstrdup(v[i]);
	return out;
}

static char *dup_n(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void set_str(char **slot, const char *s)
{
	free(*slot);
	*slot = xstrdup(s);
}

/* ---- tables ---- */

static void forget_description(table *t)
{
	free(t->cols);
	free(t->keys);
	free(t->strings);
	free(t->key_index);
	t->cols = NULL;
	t->keys = NULL;
	t->strings = t->key_index = NULL;
	t->ncols = t->nkeys = 0;
}

static void clear_params(table *t)
{
	strv_free(t->params, t->nparams);
	t->params = NULL;
	t->nparams = 0;
}

void bf_clear_pending(table *t)
{
	for (size_t i = 0; i < t->npend; i++)
		buf_free(&t->pend[i].cursor);
	free(t->pend);
	t->pend = NULL;
	t->npend = 0;
}

/* Stops the table's run: nothing in flight counts any more. */
void bf_stop_run(table *t)
{
	bfw_free(t->w);
	bfw_free(t->prev);
	t->w = t->prev = NULL;
	t->prev_open = t->rows_due = false;
	clear_params(t);
	bf_clear_pending(t);
	t->step = S_NONE;
	t->busy = false;
	t->ticket = 0;
}

static void table_free(table *t)
{
	bf_stop_run(t);
	forget_description(t);
	free(t->schema);
	free(t->name);
	free(t->error);
	buf_free(&t->cursor_d);
	buf_free(&t->cursor);
	buf_free(&t->sql);
	buf_free(&t->wm);
	buf_free(&t->where_sql);
}

void bf_free(backfill *f)
{
	for (size_t i = 0; i < f->ntables; i++)
		table_free(&f->tables[i]);
	free(f->tables);
	strv_free(f->sub_pat, f->nsub_pat);
	strv_free(f->req_pat, f->nreq_pat);
	free(f->oids);
	free(f->sub);
	free(f->sub_where);
	free(f->where);
	free(f->error);
	free(f->role);
	free(f);
}

/* The live figures go back to the durable ones: what follows is read again. */
void bf_rewind_table(table *t)
{
	buf_reset(&t->cursor);
	buf_append(&t->cursor, t->cursor_d.data, t->cursor_d.len);
	t->done = t->done_d;
	t->last = false;
}

/* ---- the set ---- */

bf_set *backfill_set_new(const bf_settings *s, const char *path, uint64_t seed)
{
	bf_set *b = xcalloc(1, sizeof(*b));
	b->path = path ? xstrdup(path) : NULL;
	b->rng = seed ? seed : 0x9E3779B97F4A7C15u;
	backfill_set_settings(b, s);
	return b;
}

void backfill_set_settings(bf_set *b, const bf_settings *s)
{
	free(b->publication);
	b->s = *s;
	b->publication = xstrdup(s->publication ? s->publication : "");
	b->s.publication = b->publication;
	if (b->s.min_rows == 0)
		b->s.min_rows = 1;
	if (b->s.max_rows < b->s.min_rows)
		b->s.max_rows = b->s.min_rows;
	if (b->s.tables == 0)
		b->s.tables = 1;
}

void backfill_set_free(bf_set *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++)
		bf_free(b->list[i]);
	free(b->list);
	free(b->publication);
	free(b->path);
	free(b);
}

backfill *bf_find(const bf_set *b, const char *id)
{
	long i = backfill_find(b, id);
	return i < 0 ? NULL : b->list[i];
}

long backfill_find(const bf_set *b, const char *id)
{
	for (size_t i = 0; i < b->n; i++)
		if (strcmp(b->list[i]->id, id) == 0)
			return (long)i;
	return -1;
}

void bf_append(bf_set *b, backfill *f)
{
	b->list = xrealloc(b->list, (b->n + 1) * sizeof(*b->list));
	b->list[b->n++] = f;
}

static void remove_at(bf_set *b, size_t i)
{
	bf_free(b->list[i]);
	memmove(&b->list[i], &b->list[i + 1], (b->n - i - 1) * sizeof(*b->list));
	b->n--;
}

/* Drops the oldest finished backfills past BF_KEEP_FINISHED (never a `snapshot: true` one). */
void bf_trim_history(bf_set *b)
{
	size_t kept = 0;
	for (size_t i = b->n; i-- > 0;) {
		backfill *f = b->list[i];
		if (!bf_finished(f->state) || f->snapshot)
			continue;
		if (++kept > BF_KEEP_FINISHED)
			remove_at(b, i);
	}
}

/* ---- creating, cancelling ---- */

/* Checks a `where` as pred_parse does. */
static bool where_ok(const char *what, const char *where, char *err, size_t errlen)
{
	char perr[256];
	pred *p = where ? pred_parse(where, perr, sizeof(perr)) : NULL;
	if (where && !p)
		return errf(err, errlen, "%s: %s", what, perr);
	pred_free(p);
	return true;
}

bool backfill_add(bf_set *b, const bf_request *req, bf_now now, char id[BF_ID_SIZE], char *err, size_t errlen)
{
	if (!where_ok("where", req->where, err, errlen) ||
	    !where_ok("the subscription's where", req->sub_where, err, errlen))
		return false;
	backfill *f = xcalloc(1, sizeof(*f));
	do
		random_hex(b, f->id);
	while (bf_find(b, f->id));
	f->sub = xstrdup(req->subscription);
	f->sub_pat = strv_dup(req->sub_tables, req->nsub_tables);
	f->nsub_pat = req->nsub_tables;
	f->req_pat = strv_dup(req->tables, req->ntables);
	f->nreq_pat = req->ntables;
	f->sub_where = req->sub_where ? xstrdup(req->sub_where) : NULL;
	f->where = req->where ? xstrdup(req->where) : NULL;
	f->snapshot = req->snapshot;
	f->state = BF_QUEUED;
	f->created_ms = now.wall_ms;
	bf_append(b, f);
	memcpy(id, f->id, BF_ID_SIZE);
	return bf_save(b, err, errlen);
}

/* A backfill whose tables all finished: done, or failed if one failed. */
void bf_settle(backfill *f, bf_now now)
{
	if (bf_finished(f->state) || !f->resolved)
		return;
	bool failed = false;
	for (size_t i = 0; i < f->ntables; i++) {
		if (!bf_finished(f->tables[i].state))
			return;
		failed |= f->tables[i].state == BF_FAILED;
	}
	f->state = failed ? BF_FAILED : BF_DONE;
	f->finished_ms = now.wall_ms;
}

static void fail_table(table *t, const char *msg)
{
	bf_stop_run(t);
	t->state = BF_FAILED;
	set_str(&t->error, msg);
}

/* Ends f before its tables finished: those not finished are cancelled. msg: why it failed, NULL
 * for a cancel. */
static void end_backfill(backfill *f, const char *msg, bf_now now)
{
	for (size_t i = 0; i < f->ntables; i++)
		if (!bf_finished(f->tables[i].state)) {
			bf_stop_run(&f->tables[i]);
			f->tables[i].state = BF_CANCELLED;
		}
	f->busy = false;
	f->state = msg ? BF_FAILED : BF_CANCELLED;
	f->finished_ms = now.wall_ms;
	if (msg)
		set_str(&f->error, msg);
}

bool backfill_cancel(bf_set *b, const char *sub, const char *id, bf_now now, char *err, size_t errlen)
{
	backfill *f = bf_find(b, id);
	if (!f || strcmp(f->sub, sub) != 0)
		return errf(err, errlen, "subscription %s has no backfill %s", sub, id);
	if (bf_finished(f->state))
		return errf(err, errlen, "backfill %s has finished already (%s)", id,
			    bf_state_name(f->state));
	end_backfill(f, NULL, now);
	return bf_save(b, err, errlen);
}

bool backfill_forget(bf_set *b, const char *sub, char *err, size_t errlen)
{
	for (size_t i = b->n; i-- > 0;)
		if (strcmp(b->list[i]->sub, sub) == 0)
			remove_at(b, i);
	return bf_save(b, err, errlen);
}

bf_verdict backfill_verdict(const bf_set *b, const char *id, const char **why)
{
	const backfill *f = bf_find(b, id);
	*why = f ? f->error : "its subscription was removed meanwhile";
	if (!f || (f->state == BF_FAILED && (!f->checked || !f->vetted)))
		return BF_REFUSED;
	return (f->checked && f->vetted) || bf_finished(f->state) ? BF_PASSED : BF_CHECKING;
}

bool backfill_drop(bf_set *b, const char *id, char *err, size_t errlen)
{
	long i = backfill_find(b, id);
	if (i >= 0)
		remove_at(b, (size_t)i);
	return bf_save(b, err, errlen);
}

bool backfill_has_snapshot(const bf_set *b, const char *sub)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->list[i]->snapshot && strcmp(b->list[i]->sub, sub) == 0)
			return true;
	return false;
}

/* ---- the reader ---- */

uint64_t bf_clamp_rows(const bf_set *b, uint64_t n)
{
	return n < b->s.min_rows ? b->s.min_rows : n > b->s.max_rows ? b->s.max_rows : n;
}

/* A new chunk in w, its watermarks under a new nonce. */
static void chunk_begin(bf_set *b, table *t)
{
	random_hex(b, t->nonce);
	bfw_begin(t->w, t->nonce);
}

static void start_table(table *t, uint64_t now_ms)
{
	t->state = BF_RUNNING;
	t->step = S_DESCRIBE;
	t->bf->state = BF_RUNNING;
	t->run_ms = now_ms;
	t->run_read = t->done.read;
}

static unsigned running_tables(const bf_set *b)
{
	unsigned n = 0;
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++)
			n += b->list[i]->tables[k].state == BF_RUNNING;
	return n;
}

/* Queued tables of checked backfills start, oldest first, while fewer than s.tables run. */
static void start_tables(bf_set *b, uint64_t now_ms)
{
	unsigned running = running_tables(b);
	for (size_t i = 0; i < b->n && running < b->s.tables; i++) {
		backfill *f = b->list[i];
		if (bf_finished(f->state) || !f->checked || !f->vetted)
			continue;
		for (size_t k = 0; k < f->ntables && running < b->s.tables; k++)
			if (f->tables[k].state == BF_QUEUED) {
				start_table(&f->tables[k], now_ms);
				running++;
			}
	}
}

static void stmt(bf_set *b, bf_stmt *out, bf_stmt_kind kind, const char *sql, int nparams,
		 const char *const *params, uint64_t *ticket, bf_stmt_kind *slot)
{
	*ticket = ++b->tickets;
	*slot = kind;
	*out = (bf_stmt){.kind = kind, .sql = sql, .nparams = nparams, .params = params, .ticket = *ticket};
}

/* The chunk's watermark statement. */
static void watermark_stmt(bf_set *b, table *t, bool high, bf_stmt *out)
{
	buf_reset(&t->wm);
	bfsql_watermark_content(&t->wm, t->bf->id, t->nonce, high);
	clear_params(t);
	t->params = xcalloc(1, sizeof(*t->params));
	t->params[0] = xstrdup(t->wm.data);
	t->nparams = 1;
	stmt(b, out, high ? BF_STMT_HIGH : BF_STMT_LOW, high ? bfsql_watermark_high : bfsql_watermark, 1,
	     (const char *const *)t->params, &t->ticket, &t->kind);
}

/* The chunk query after the last key read (the open chunk's before it has closed), its values as
 * parameters. */
static void chunk_stmt(bf_set *b, table *t, bf_stmt *out)
{
	clear_params(t);
	size_t len = 0;
	const void *cursor = t->prev_open ? bfw_last_key(t->prev, &len) : NULL;
	if (!cursor) {
		cursor = t->cursor.data;
		len = t->cursor.len;
	}
	bool has_cursor = len > 0;
	if (has_cursor) {
		bf_datum *d = xcalloc(t->nkeys, sizeof(*d));
		if (!bf_decode(cursor, len, d, t->nkeys)) {
			/* A cursor of another key (the table changed since): start over. */
			buf_reset(&t->cursor);
			has_cursor = false;
		} else {
			t->params = xcalloc(t->nkeys, sizeof(*t->params));
			for (size_t i = 0; i < t->nkeys; i++)
				t->params[i] = d[i].len < 0 ? NULL : dup_n(d[i].data, (size_t)d[i].len);
			t->nparams = t->nkeys;
		}
		free(d);
	}
	buf_reset(&t->sql);
	bfsql_chunk(&t->sql, t->schema, t->name, t->cols, t->ncols, t->keys, t->nkeys, has_cursor,
		    t->where_sql.len ? t->where_sql.data : NULL, t->limit);
	stmt(b, out, BF_STMT_CHUNK, t->sql.data, (int)t->nparams, (const char *const *)t->params, &t->ticket,
	     &t->kind);
}

/* The table's next statement, if one is due. */
static bool table_next(bf_set *b, table *t, uint64_t now_ms, bf_stmt *out, uint64_t *wake_ms)
{
	if (t->state != BF_RUNNING || t->busy)
		return false;
	switch (t->step) {
	case S_DESCRIBE:
		clear_params(t);
		t->params = strv_dup((const char *const[]){t->schema, t->name, b->publication}, 3);
		t->nparams = 3;
		stmt(b, out, BF_STMT_DESCRIBE, bfsql_describe, 3, (const char *const *)t->params, &t->ticket,
		     &t->kind);
		break;
	case S_LOW:
		if (t->due_ms > now_ms) {
			if (!*wake_ms || t->due_ms < *wake_ms)
				*wake_ms = t->due_ms;
			return false;
		}
		chunk_begin(b, t);
		t->sent_ms = now_ms;
		watermark_stmt(b, t, false, out);
		break;
	case S_CHUNK:
		t->sent_ms = now_ms;
		chunk_stmt(b, t, out);
		break;
	case S_HIGH:
		watermark_stmt(b, t, true, out);
		break;
	default:
		return false;
	}
	t->busy = true;
	return true;
}

static bool backfill_step(bf_set *b, backfill *f, bf_stmt *out)
{
	if (bf_finished(f->state) || f->busy || (f->checked && f->vetted))
		return false;
	if (!f->checked) {
		stmt(b, out, BF_STMT_CHECK, bfsql_privileges, 0, NULL, &f->ticket, &f->kind);
	} else if (!f->resolved) {
		f->param[0] = b->publication;
		stmt(b, out, BF_STMT_TABLES, bfsql_tables, 1, f->param, &f->ticket, &f->kind);
	} else {
		f->param[0] = f->oids;
		stmt(b, out, BF_STMT_COLUMNS, bfsql_columns, 1, f->param, &f->ticket, &f->kind);
	}
	f->busy = true;
	return true;
}

bool backfill_next(bf_set *b, bf_now now, bf_stmt *out, uint64_t *wake_ms)
{
	*wake_ms = 0;
	for (size_t i = 0; i < b->n; i++)
		if (backfill_step(b, b->list[i], out))
			return true;
	start_tables(b, now.ms);
	/* Round robin over the backfills, so that one does not starve the others' tables. */
	for (size_t j = 0; j < b->n; j++) {
		size_t i = (b->rr + j) % b->n;
		backfill *f = b->list[i];
		for (size_t k = 0; k < f->ntables; k++)
			if (table_next(b, &f->tables[k], now.ms, out, wake_ms)) {
				b->rr = i + 1;
				return true;
			}
	}
	return false;
}

/* The datum of column c of row i of a result (text format). */
static bf_datum cell(const bf_result *r, int row, int col)
{
	if (r->isnull(r->ctx, row, col))
		return (bf_datum){.data = NULL, .len = -1};
	return (bf_datum){.data = r->value(r->ctx, row, col), .len = r->length(r->ctx, row, col)};
}

static bool cell_true(const bf_result *r, int row, int col)
{
	bf_datum d = cell(r, row, col);
	return d.len == 1 && d.data[0] == 't';
}

static void check_result(backfill *f, const bf_result *r, bf_now now)
{
	if (r->nrows != 1 || r->ncols != 3)
		return end_backfill(f, "the privileges check returned an unexpected result", now);
	set_str(&f->role, r->value(r->ctx, 0, 0));
	if (!cell_true(r, 0, 1)) {
		buf msg = {0};
		bfsql_no_emit_message(&msg, f->role, r->value(r->ctx, 0, 2));
		end_backfill(f, msg.data, now);
		buf_free(&msg);
		return;
	}
	f->checked = true;
}

static bool matches_any(char **pat, size_t n, const char *schema, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (match_table(pat[i], schema, name))
			return true;
	return false;
}

/* Why a table of the publication cannot be read (row i of bfsql_tables' result), into msg. */
static void table_problem(const backfill *f, const bf_result *r, int i, buf *msg)
{
	const char *schema = r->value(r->ctx, i, 0), *name = r->value(r->ctx, i, 1);
	bf_datum kind = cell(r, i, 3);
	if (kind.len != 1 || kind.data[0] != 'r')
		pg_not_table(msg, schema, name, kind.len == 1 ? kind.data[0] : '?');
	else if (r->isnull(r->ctx, i, 4))
		pg_no_key(msg, schema, name);
	else if (!cell_true(r, i, 5))
		bfsql_no_select(msg, f->role ? f->role : "of cdc", schema, name);
}

/* The publication's tables that the backfill reads: each asked-for pattern must match one, and each
 * must be one a backfill can read. */
static void tables_result(bf_set *b, backfill *f, const bf_result *r, bf_now now)
{
	buf msg = {0}, oids = {0};
	f->tables = xcalloc((size_t)r->nrows + 1, sizeof(*f->tables));
	for (int i = 0; i < r->nrows && r->ncols == 6; i++) {
		const char *schema = r->value(r->ctx, i, 0), *name = r->value(r->ctx, i, 1);
		if (!matches_any(f->sub_pat, f->nsub_pat, schema, name) ||
		    (f->nreq_pat && !matches_any(f->req_pat, f->nreq_pat, schema, name)))
			continue;
		table *t = &f->tables[f->ntables++];
		*t = (table){.bf = f,
			     .schema = xstrdup(schema),
			     .name = xstrdup(name),
			     .oid = (uint32_t)strtoul(r->value(r->ctx, i, 2), NULL, 10),
			     .estimate = -1};
		buf_printf(&oids, "%c%u", oids.len ? ',' : '{', t->oid);
		if (!msg.len) {
			table_problem(f, r, i, &msg);
			if (msg.len) /* the table fails (cdc_backfill_failed), the others are cancelled */
				fail_table(t, msg.data);
		}
	}
	free(f->oids);
	f->oids = oids.len ? (buf_putc(&oids, '}'), xstrdup(oids.data)) : NULL;
	buf_free(&oids);
	for (size_t k = 0; k < f->nreq_pat && !msg.len; k++) {
		bool hit = false;
		for (size_t i = 0; i < f->ntables && !hit; i++)
			hit = match_table(f->req_pat[k], f->tables[i].schema, f->tables[i].name);
		if (!hit)
			buf_printf(&msg, "table %s is not one of subscription %s's tables in publication %s",
				   f->req_pat[k], f->sub, b->publication);
	}
	if (!msg.len && !f->ntables)
		buf_printf(&msg, "subscription %s has no table in publication %s", f->sub, b->publication);
	f->resolved = true;
	f->vetted = !f->where && !msg.len;
	if (msg.len)
		end_backfill(f, msg.data, now);
	buf_free(&msg);
}

/* The request's `where` against each table's columns (bfsql_columns' rows): refused when a
 * comparison can never be true for one of them. */
static void columns_result(backfill *f, const bf_result *r, bf_now now)
{
	char perr[256], why[512];
	pred *p = pred_parse(f->where, perr, sizeof(perr));
	arena *a = arena_new(4096);
	pred_column *cols = xcalloc((size_t)r->nrows + 1, sizeof(*cols));
	buf msg = {0};
	for (size_t k = 0; p && k < f->ntables && !msg.len; k++) {
		size_t n = 0;
		for (int i = 0; i < r->nrows && r->ncols == 4; i++)
			if ((uint32_t)strtoul(r->value(r->ctx, i, 0), NULL, 10) == f->tables[k].oid)
				cols[n++] = (pred_column){r->value(r->ctx, i, 1),
							  (uint32_t)strtoul(r->value(r->ctx, i, 2), NULL, 10),
							  r->value(r->ctx, i, 3)};
		if (!pred_check_columns(p, cols, n, true, a, why, sizeof(why)))
			buf_printf(&msg, "where: in table %s.%s, %s", f->tables[k].schema, f->tables[k].name,
				   why);
	}
	f->vetted = !msg.len;
	if (msg.len)
		end_backfill(f, msg.data, now);
	buf_free(&msg);
	free(cols);
	arena_free(a);
	pred_free(p);
}

/* The parts of the subscription's and the request's `where` that translate, for the chunk query. */
static void where_pushdown(table *t)
{
	buf_reset(&t->where_sql);
	const char *wheres[] = {t->bf->sub_where, t->bf->where};
	buf part = {0};
	for (size_t i = 0; i < 2; i++) {
		pred *p = wheres[i] ? pred_parse(wheres[i], NULL, 0) : NULL;
		buf_reset(&part);
		if (p)
			bfsql_where(&part, p, t->cols, t->ncols);
		if (part.len)
			buf_printf(&t->where_sql, "%s%s", t->where_sql.len ? " AND " : "", part.data);
		pred_free(p);
	}
	buf_free(&part);
}

/* The table's columns and key from its description; false with the reason in msg. */
static bool describe_result(bf_set *b, table *t, const bf_result *r, buf *msg)
{
	if (r->nrows == 0) {
		bfsql_no_table(msg, t->schema, t->name);
		return false;
	}
	if (r->ncols != 10)
		return buf_puts(msg, "the table's description returned an unexpected result"), false;
	bf_datum kind = cell(r, 0, 6);
	if (kind.len != 1 || kind.data[0] != 'r') {
		pg_not_table(msg, t->schema, t->name, kind.len == 1 ? kind.data[0] : '?');
		return false;
	}
	if (!cell_true(r, 0, 7)) {
		bfsql_no_select(msg, t->bf->role ? t->bf->role : "of cdc", t->schema, t->name);
		return false;
	}
	if (r->isnull(r->ctx, 0, 5)) {
		pg_no_key(msg, t->schema, t->name);
		return false;
	}
	forget_description(t);
	size_t n = (size_t)r->nrows, room = 0;
	for (int i = 0; i < r->nrows; i++)
		for (int c = 0; c < 4; c++)
			room += (size_t)r->length(r->ctx, i, c) + 1;
	t->cols = xcalloc(n, sizeof(*t->cols));
	t->keys = xcalloc(n, sizeof(*t->keys));
	t->strings = xmalloc(room);
	char *p = t->strings;
	for (int i = 0; i < r->nrows; i++) {
		bfsql_col *c = &t->cols[i];
		const char **dst[4] = {&c->name, NULL, &c->type_schema, &c->type_name};
		for (int k = 0; k < 4; k++) {
			if (!dst[k])
				continue;
			size_t len = (size_t)r->length(r->ctx, i, k);
			memcpy(p, r->value(r->ctx, i, k), len);
			p[len] = '\0';
			*dst[k] = p;
			p += len + 1;
		}
		c->type_oid = (uint32_t)strtoul(r->value(r->ctx, i, 1), NULL, 10);
		c->typmod = (int32_t)strtol(r->value(r->ctx, i, 9), NULL, 10);
		if (!r->isnull(r->ctx, i, 4)) {
			unsigned long pos = strtoul(r->value(r->ctx, i, 4), NULL, 10);
			if (pos < 1 || pos > n)
				return buf_puts(msg, "the table's description names a key column twice"),
				       false;
			t->keys[pos - 1] = (size_t)i;
			t->nkeys = pos > t->nkeys ? pos : t->nkeys;
		}
	}
	t->ncols = n;
	t->key_index = xstrdup(r->value(r->ctx, 0, 5));
	where_pushdown(t);
	double est = strtod(r->value(r->ctx, 0, 8), NULL);
	t->estimate = est < 0 ? -1 : (int64_t)est;
	if (!t->w) {
		t->w = bfw_new(b->s.max_bytes);
		t->prev = bfw_new(b->s.max_bytes);
	}
	if (!t->limit)
		t->limit = bf_clamp_rows(b, 1000);
	return true;
}

/* The chunk's rows into its window; false if they do not fit (read a smaller chunk). */
static bool chunk_rows(bf_set *b, table *t, const bf_result *r, uint64_t now_ms, buf *msg)
{
	if (r->nrows && (size_t)r->ncols != t->ncols + 1) {
		buf_puts(msg, "the table's columns changed");
		return false;
	}
	bf_datum *vals = xcalloc(t->ncols + t->nkeys, sizeof(*vals)), *keyv = vals + t->ncols;
	buf key = {0}, row = {0};
	size_t bytes = 0;
	int i;
	for (i = 0; i < r->nrows; i++) {
		for (size_t c = 0; c < t->ncols; c++)
			vals[c] = cell(r, i, (int)c + 1);
		for (size_t k = 0; k < t->nkeys; k++)
			keyv[k] = vals[t->keys[k]];
		buf_reset(&key);
		buf_reset(&row);
		bf_encode(&key, keyv, t->nkeys);
		bf_encode(&row, vals, t->ncols);
		if (!bfw_add_row(t->w, key.data, key.len, row.data, row.len))
			break;
		bytes += key.len + row.len;
	}
	free(vals);
	buf_free(&key);
	buf_free(&row);
	if (i < r->nrows) {
		/* Past the memory cap: half as many rows as fitted. */
		t->limit = bf_clamp_rows(b, (uint64_t)i / 2);
		return false;
	}
	if (r->nrows) {
		bf_snapshot snap;
		bf_datum s = cell(r, 0, 0);
		if (s.len < 0 || !bf_snapshot_parse(s.data, (size_t)s.len, &snap, NULL, 0)) {
			buf_puts(msg, "the chunk's snapshot is malformed");
			return false;
		}
		bfw_set_snapshot(t->w, &snap);
	}
	t->last = (uint64_t)r->nrows < t->limit;
	/* The rate limit: the next chunk starts when this one's rows are paid for. */
	t->due_ms = b->s.rate ? t->sent_ms + (uint64_t)r->nrows * 1000 / b->s.rate : now_ms;
	if (!t->last) {
		/* Towards the target time, at most doubling or halving, and under half the byte cap
		 * (the other half is for the keys changed while the chunk is open). */
		uint64_t took = now_ms > t->sent_ms ? now_ms - t->sent_ms : 1;
		uint64_t next = t->limit * b->s.chunk_ms / took;
		next = next > 2 * t->limit ? 2 * t->limit : next < t->limit / 2 ? t->limit / 2 : next;
		uint64_t per_row = bytes / (uint64_t)r->nrows + 1, cap = b->s.max_bytes / 2 / per_row;
		t->limit = bf_clamp_rows(b, next < cap ? next : cap);
	}
	return true;
}

static table *table_of_ticket(bf_set *b, uint64_t ticket)
{
	for (size_t i = 0; ticket && i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++)
			if (b->list[i]->tables[k].busy && b->list[i]->tables[k].ticket == ticket)
				return &b->list[i]->tables[k];
	return NULL;
}

static backfill *backfill_of_ticket(bf_set *b, uint64_t ticket)
{
	for (size_t i = 0; ticket && i < b->n; i++)
		if (b->list[i]->busy && b->list[i]->ticket == ticket)
			return b->list[i];
	return NULL;
}

/* The high watermark of the chunk read into w is written: it waits for the stream to close it,
 * behind prev if that is still open; else it becomes prev, and the next chunk is read into w
 * meanwhile, prev's high watermark its low one (its SELECT starts after that is written), unless
 * the rate limit holds it back. */
void bf_chunk_written(bf_set *b, table *t, uint64_t now_ms)
{
	if (t->prev_open) {
		t->step = S_STREAM;
		return;
	}
	bf_window *free_w = t->prev;
	t->prev = t->w;
	t->w = free_w;
	t->prev_open = true;
	t->prev_last = t->last;
	t->opens_at_prev = false;
	if (t->last) {
		t->step = S_DRAIN;
	} else if (t->due_ms > now_ms) {
		t->step = S_LOW;
	} else {
		chunk_begin(b, t);
		t->opens_at_prev = true;
		t->step = S_CHUNK;
	}
}

/* The chunks in memory are forgotten (their watermarks become foreign); what follows the cursor is
 * read again. */
void bf_drop_chunks(table *t)
{
	if (t->w) {
		bfw_reset(t->w);
		bfw_reset(t->prev);
	}
	t->prev_open = t->opens_at_prev = t->rows_due = false;
}

/* The chunk starts again with a new nonce (its watermarks become foreign). */
void bf_chunk_again(table *t, uint64_t due_ms)
{
	bfw_reset(t->w);
	t->opens_at_prev = t->rows_due = false;
	t->step = S_LOW;
	t->due_ms = due_ms;
}

void backfill_result(bf_set *b, uint64_t ticket, const bf_result *r, bf_now now)
{
	backfill *f = backfill_of_ticket(b, ticket);
	if (f) {
		f->busy = false;
		if (f->kind == BF_STMT_CHECK)
			check_result(f, r, now);
		else if (f->kind == BF_STMT_TABLES)
			tables_result(b, f, r, now);
		else
			columns_result(f, r, now);
		b->dirty = true;
		return;
	}
	table *t = table_of_ticket(b, ticket);
	if (!t)
		return;
	t->busy = false;
	buf msg = {0};
	switch (t->kind) {
	case BF_STMT_DESCRIBE:
		if (!describe_result(b, t, r, &msg)) {
			fail_table(t, msg.data);
			bf_settle(t->bf, now);
			b->dirty = true;
			break;
		}
		t->step = S_LOW;
		t->due_ms = now.ms;
		break;
	case BF_STMT_LOW:
		if (t->step == S_LOW)
			t->step = S_CHUNK;
		break;
	case BF_STMT_CHUNK:
		/* Its high watermark is due; its rows come in backfill_rows. */
		t->step = S_HIGH;
		t->rows_due = true;
		t->rows_ms = now.ms;
		break;
	case BF_STMT_HIGH:
		if (t->step == S_HIGH)
			bf_chunk_written(b, t, now.ms);
		break;
	default:
		break;
	}
	buf_free(&msg);
}

void backfill_rows(bf_set *b, const bf_result *r)
{
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (!t->rows_due)
				continue;
			t->rows_due = false;
			buf msg = {0};
			if (chunk_rows(b, t, r, t->rows_ms, &msg)) {
				/* read; its high watermark is on its way */
			} else if (msg.len) {
				/* The table changed under the backfill: describe it again, and read the
				 * chunk before (in the old columns) again too. */
				bf_drop_chunks(t);
				t->step = S_DESCRIBE;
			} else {
				/* Its high watermark, if sent, becomes foreign. */
				t->retries++;
				bf_chunk_again(t, t->rows_ms);
			}
			buf_free(&msg);
			return;
		}
}

void backfill_error(bf_set *b, uint64_t ticket, const char *message, bool lost, bf_now now)
{
	backfill *f = backfill_of_ticket(b, ticket);
	if (f) {
		f->busy = false;
		if (!lost) {
			end_backfill(f, message, now);
			b->dirty = true;
		}
		return;
	}
	table *t = table_of_ticket(b, ticket);
	if (!t)
		return;
	t->busy = false;
	if (!lost) {
		fail_table(t, message);
		bf_settle(t->bf, now);
		b->dirty = true;
	} else if (t->step != S_DESCRIBE && t->step != S_STREAM && t->step != S_DRAIN) {
		bf_chunk_again(t, now.ms);
	}
}

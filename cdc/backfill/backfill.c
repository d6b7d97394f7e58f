/* backfill.c: the backfills of the daemon; see backfill.h. A backfill's checks run first; then
 * each of its tables is described (DESCRIBE), its relations listed with their sizes (LEAVES), and
 * read in chunks: a block range of a relation, or keys to read again, each LOW -> CHUNK (a COPY)
 * on one lane, a chunk's window opened before its COPY standing for the LOW of the lane's next one,
 * and its HIGH on the writer (the last lane, which writes every high watermark). The stream
 * closes each chunk's window (stream.c) and the sinks' durable position finishes chunks; what is
 * durable is what the state file keeps: the ranges read, the keys still to read again, and the
 * counters. A table is done when every range of every relation and every key is durable (a
 * partitioned table's leaves are listed once more first: one attached meanwhile is read too). */
#include "cdc/backfill/backfill_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/copy.h"
#include "cdc/match/match.h"
#include "cdc/match/predicate.h"
#include "decoder/base/bytes.h"

const char *backfill_state_name(bf_state s)
{
	static const char *const names[] = {"queued", "running", "done", "cancelled", "failed"};
	return s <= BF_FAILED ? names[s] : "unknown";
}

bool backfill_state_parse(const char *s, bf_state *out)
{
	for (bf_state i = BF_QUEUED; i <= BF_FAILED; i++)
		if (strcmp(s, backfill_state_name(i)) == 0)
			return *out = i, true;
	return false;
}

bool backfill_finished(bf_state s)
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
	char **out = util_xcalloc(n ? n : 1, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		out[i] = util_xstrdup(v[i]);
	return out;
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
	*slot = util_xstrdup(s);
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

static void clear_params(lane *L)
{
	strv_free(L->params, L->nparams);
	L->params = NULL;
	L->nparams = 0;
}

static void leaf_free(leaf *l)
{
	free(l->schema);
	free(l->name);
	backfill_ranges_free(&l->done);
	backfill_ranges_free(&l->taken);
}

static void forget_leaves(table *t)
{
	for (size_t i = 0; i < t->nleaves; i++)
		leaf_free(&t->leaves[i]);
	free(t->leaves);
	t->leaves = NULL;
	t->nleaves = 0;
}

void backfill_table_set_keys(table *t, char **names, size_t n)
{
	strv_free(t->key_names, t->nkey_names);
	t->key_names = names;
	t->nkey_names = n;
}

void backfill_chunk_free(chunk *c)
{
	table *t = c->t;
	bf_set *b = t->bf->set;
	for (unsigned i = 0; i < b->nlanes; i++)
		if (b->lanes[i].c == c)
			b->lanes[i].c = NULL;
		else if (b->lanes[i].ahead == c)
			b->lanes[i].ahead = NULL;
	for (size_t i = 0; i < t->nchunks; i++)
		if (t->chunks[i] == c) {
			t->chunks[i] = t->chunks[--t->nchunks];
			break;
		}
	backfill_window_reset(c->w);
	b->spare = util_xrealloc(b->spare, (b->nspare + 1) * sizeof(*b->spare));
	b->spare[b->nspare++] = c->w;
	buf_free(&c->keys);
	free(c->error);
	free(c);
}

void backfill_chunk_retry(chunk *c, bool half)
{
	table *t = c->t;
	t->retries++;
	if (c->leaf >= 0)
		backfill_ranges_remove(&t->leaves[c->leaf].taken, c->lo, c->hi);
	else
		backfill_keys_give_back(&t->again, &c->keys);
	if (half)
		t->limit = backfill_clamp_rows(t->bf->set, t->limit / 2);
	backfill_chunk_free(c);
}

static void clear_pending(table *t)
{
	for (size_t i = 0; i < t->npend; i++)
		buf_free(&t->pend[i].keys);
	free(t->pend);
	t->pend = NULL;
	t->npend = 0;
}

/* Forgets everything in flight: chunks (their ranges and keys back), what waits to be durable,
 * the lanes' hold on the table. The durable state stays. */
void backfill_drop_run(table *t)
{
	while (t->nchunks)
		backfill_chunk_free(t->chunks[0]);
	free(t->chunks);
	t->chunks = NULL;
	clear_pending(t);
	for (size_t i = 0; i < t->nleaves; i++)
		backfill_ranges_free(&t->leaves[i].taken);
	size_t pos = 0;
	for (const keyent *e = backfill_keys_next(&t->again, &pos, NULL); e;
	     e = backfill_keys_next(&t->again, &pos, e))
		if (e->state != KEY_WAIT) {
			((keyent *)e)->state = KEY_WAIT;
			t->again.waiting++;
		}
	bf_set *b = t->bf->set;
	for (unsigned i = 0; b && i < b->nlanes; i++) {
		if (b->lanes[i].t == t)
			b->lanes[i].t = NULL;
		if (b->lanes[i].chain_t == t)
			b->lanes[i].chain_t = NULL;
	}
	backfill_recent_free(&t->recent);
	t->busy = false;
}

/* Stops the table's run: nothing in flight counts any more. */
void backfill_stop_run(table *t)
{
	backfill_drop_run(t);
	t->step = T_NONE;
}

static void table_free(table *t)
{
	backfill_stop_run(t);
	forget_description(t);
	forget_leaves(t);
	backfill_keys_free(&t->again);
	backfill_table_set_keys(t, NULL, 0);
	free(t->schema);
	free(t->name);
	free(t->error);
	buf_free(&t->where_sql);
}

void backfill_free(backfill *f)
{
	for (size_t i = 0; i < f->ntables; i++)
		table_free(&f->tables[i]);
	for (unsigned i = 0; f->set && i < f->set->nlanes; i++)
		if (f->set->lanes[i].f == f)
			f->set->lanes[i].f = NULL;
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

/* The live figures go back to the durable ones: what is not durable is read again. */
void backfill_rewind_table(table *t)
{
	t->done = t->done_d;
}

/* ---- the set ---- */

bf_set *backfill_set_new(const bf_settings *s, const char *path, uint64_t seed)
{
	bf_set *b = util_xcalloc(1, sizeof(*b));
	b->path = path ? util_xstrdup(path) : NULL;
	b->rng = seed ? seed : 0x9E3779B97F4A7C15u;
	backfill_set_settings(b, s);
	b->nlanes = (b->s.parallel ? b->s.parallel : 1) + 1; /* and the writer */
	b->lanes = util_xcalloc(b->nlanes, sizeof(*b->lanes));
	return b;
}

void backfill_set_settings(bf_set *b, const bf_settings *s)
{
	free(b->publication);
	unsigned parallel = b->s.parallel;
	b->s = *s;
	if (b->lanes)
		b->s.parallel = parallel; /* the lanes stay as they were made */
	b->publication = util_xstrdup(s->publication ? s->publication : "");
	b->s.publication = b->publication;
	if (b->s.min_rows == 0)
		b->s.min_rows = 1;
	if (b->s.max_rows < b->s.min_rows)
		b->s.max_rows = b->s.min_rows;
	if (b->s.tables == 0)
		b->s.tables = 1;
}

unsigned backfill_lanes(const bf_set *b)
{
	return b->nlanes;
}

void backfill_set_free(bf_set *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->n; i++)
		backfill_free(b->list[i]);
	free(b->list);
	for (unsigned i = 0; i < b->nlanes; i++) {
		clear_params(&b->lanes[i]);
		buf_free(&b->lanes[i].sql);
		buf_free(&b->lanes[i].wm);
	}
	free(b->lanes);
	for (size_t i = 0; i < b->nspare; i++)
		backfill_window_free(b->spare[i]);
	free(b->spare);
	buf_free(&b->key);
	buf_free(&b->row);
	free(b->at);
	free(b->publication);
	free(b->path);
	free(b);
}

backfill *backfill_lookup(const bf_set *b, const char *id)
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

void backfill_append(bf_set *b, backfill *f)
{
	f->set = b;
	b->list = util_xrealloc(b->list, (b->n + 1) * sizeof(*b->list));
	b->list[b->n++] = f;
}

static void remove_at(bf_set *b, size_t i)
{
	backfill_free(b->list[i]);
	memmove(&b->list[i], &b->list[i + 1], (b->n - i - 1) * sizeof(*b->list));
	b->n--;
}

/* Drops the oldest finished backfills past BF_KEEP_FINISHED (never a `snapshot: true` one). */
void backfill_trim_history(bf_set *b)
{
	size_t kept = 0;
	for (size_t i = b->n; i-- > 0;) {
		backfill *f = b->list[i];
		if (!backfill_finished(f->state) || f->snapshot)
			continue;
		if (++kept > BF_KEEP_FINISHED)
			remove_at(b, i);
	}
}

/* ---- creating, cancelling ---- */

/* Checks a `where` as match_predicate_parse does. */
static bool where_ok(const char *what, const char *where, char *err, size_t errlen)
{
	char perr[256];
	pred *p = where ? match_predicate_parse(where, perr, sizeof(perr)) : NULL;
	if (where && !p)
		return util_errf(err, errlen, "%s: %s", what, perr);
	match_predicate_free(p);
	return true;
}

bool backfill_add(bf_set *b, const bf_request *req, bf_now now, char id[BF_ID_SIZE], char *err, size_t errlen)
{
	if (!where_ok("where", req->where, err, errlen) ||
	    !where_ok("the subscription's where", req->sub_where, err, errlen))
		return false;
	backfill *f = util_xcalloc(1, sizeof(*f));
	do
		random_hex(b, f->id);
	while (backfill_lookup(b, f->id));
	f->sub = util_xstrdup(req->subscription);
	f->sub_pat = strv_dup(req->sub_tables, req->nsub_tables);
	f->nsub_pat = req->nsub_tables;
	f->req_pat = strv_dup(req->tables, req->ntables);
	f->nreq_pat = req->ntables;
	f->sub_where = req->sub_where ? util_xstrdup(req->sub_where) : NULL;
	f->where = req->where ? util_xstrdup(req->where) : NULL;
	f->snapshot = req->snapshot;
	f->state = BF_QUEUED;
	f->created_ms = now.wall_ms;
	backfill_append(b, f);
	memcpy(id, f->id, BF_ID_SIZE);
	b->dirty = true;
	return true;
}

/* A backfill whose tables all finished: done, or failed if one failed. */
void backfill_settle(backfill *f, bf_now now)
{
	if (backfill_finished(f->state) || !f->resolved)
		return;
	bool failed = false;
	for (size_t i = 0; i < f->ntables; i++) {
		if (!backfill_finished(f->tables[i].state))
			return;
		failed |= f->tables[i].state == BF_FAILED;
	}
	f->state = failed ? BF_FAILED : BF_DONE;
	f->finished_ms = now.wall_ms;
}

static void fail_table(table *t, const char *msg)
{
	backfill_stop_run(t);
	t->state = BF_FAILED;
	set_str(&t->error, msg);
	t->bf->set->dirty = true;
}

/* Ends f before its tables finished: those not finished are cancelled. msg: why it failed, NULL
 * for a cancel. */
static void end_backfill(backfill *f, const char *msg, bf_now now)
{
	for (size_t i = 0; i < f->ntables; i++)
		if (!backfill_finished(f->tables[i].state)) {
			backfill_stop_run(&f->tables[i]);
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
	backfill *f = backfill_lookup(b, id);
	if (!f || strcmp(f->sub, sub) != 0)
		return util_errf(err, errlen, "subscription %s has no backfill %s", sub, id);
	if (backfill_finished(f->state))
		return util_errf(err, errlen, "backfill %s has finished already (%s)", id,
				 backfill_state_name(f->state));
	end_backfill(f, NULL, now);
	b->dirty = true;
	return true;
}

void backfill_forget(bf_set *b, const char *sub)
{
	for (size_t i = b->n; i-- > 0;)
		if (strcmp(b->list[i]->sub, sub) == 0)
			remove_at(b, i);
	b->dirty = true;
}

bf_verdict backfill_verdict(const bf_set *b, const char *id, const char **why)
{
	const backfill *f = backfill_lookup(b, id);
	*why = f ? f->error : "its subscription was removed meanwhile";
	if (!f || (f->state == BF_FAILED && (!f->checked || !f->vetted)))
		return BF_REFUSED;
	return (f->checked && f->vetted) || backfill_finished(f->state) ? BF_PASSED : BF_CHECKING;
}

void backfill_drop(bf_set *b, const char *id)
{
	long i = backfill_find(b, id);
	if (i >= 0)
		remove_at(b, (size_t)i);
	b->dirty = true;
}

bool backfill_has_snapshot(const bf_set *b, const char *sub)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->list[i]->snapshot && strcmp(b->list[i]->sub, sub) == 0)
			return true;
	return false;
}

/* ---- the lanes' statements ---- */

uint64_t backfill_clamp_rows(const bf_set *b, uint64_t n)
{
	return n < b->s.min_rows ? b->s.min_rows : n > b->s.max_rows ? b->s.max_rows : n;
}

static void start_table(table *t, uint64_t now_ms)
{
	t->state = BF_RUNNING;
	t->step = T_DESCRIBE;
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
		if (backfill_finished(f->state) || !f->checked || !f->vetted)
			continue;
		for (size_t k = 0; k < f->ntables && running < b->s.tables; k++)
			if (f->tables[k].state == BF_QUEUED) {
				start_table(&f->tables[k], now_ms);
				running++;
			}
	}
}

static void stmt(bf_set *b, lane *L, bf_stmt *out, bf_stmt_kind kind, const char *sql, int nparams,
		 const char *const *params)
{
	L->ticket = ++b->tickets;
	L->kind = kind;
	L->busy = true;
	*out = (bf_stmt){.kind = kind, .sql = sql, .nparams = nparams, .params = params, .ticket = L->ticket};
}

/* The statement with L's own copy of its parameters. */
static void stmt_params(bf_set *b, lane *L, bf_stmt *out, bf_stmt_kind kind, const char *sql,
			const char *const *params, size_t n)
{
	clear_params(L);
	L->params = strv_dup(params, n);
	L->nparams = n;
	stmt(b, L, out, kind, sql, (int)n, (const char *const *)L->params);
}

/* A watermark of L's chunk. */
static void watermark_stmt(bf_set *b, lane *L, bool high, bf_stmt *out)
{
	chunk *c = L->c;
	buf_reset(&L->wm);
	backfill_sql_watermark_content(&L->wm, c->t->bf->id, c->nonce, high);
	const char *p = L->wm.data;
	stmt_params(b, L, out, high ? BF_STMT_HIGH : BF_STMT_LOW,
		    high ? bfsql_watermark_high : bfsql_watermark, &p, 1);
}

/* L's chunk's COPY. */
static void copy_stmt(bf_set *b, lane *L, bf_stmt *out, uint64_t now_ms)
{
	chunk *c = L->c;
	table *t = c->t;
	bfsql_read r = {.schema = t->schema,
			.table = t->name,
			.cols = t->cols,
			.ncols = t->ncols,
			.where = t->where_sql.len ? t->where_sql.data : NULL};
	if (c->leaf >= 0) {
		const leaf *l = &t->leaves[c->leaf];
		r.leaf_schema = l->schema;
		r.leaf_name = l->name;
		r.leaf_oid = l->oid;
		r.root_oid = t->relkind == 'p' ? t->oid : 0;
		r.lo = c->lo;
		r.hi = c->hi;
	} else {
		r.keys = t->keys;
		r.nkeys = t->nkeys;
		r.keyvals = c->keys.data;
		r.keyvals_len = c->keys.len;
		r.nkeyvals = c->nkeys;
	}
	buf_reset(&L->sql);
	if (!backfill_sql_copy(&L->sql, &r))
		buf_puts(&L->sql, "SELECT 'cdc: a chunk's keys are malformed'::pg_catalog.int4");
	clear_params(L);
	c->sent_ms = now_ms;
	stmt(b, L, out, BF_STMT_CHUNK, L->sql.data, 0, NULL);
}

/* The next statement of L's chunk: its low watermark or its COPY. */
static void chunk_stmt(bf_set *b, lane *L, bf_stmt *out, uint64_t now_ms)
{
	L->t = L->c->t;
	if (L->c->step == C_LOW)
		watermark_stmt(b, L, false, out);
	else
		copy_stmt(b, L, out, now_ms);
}

/* The writer's next statement: the high watermark of the chunk read first of those that wait for
 * theirs. */
static bool writer_stmt(bf_set *b, lane *L, bf_stmt *out)
{
	chunk *first = NULL;
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			const table *t = &b->list[i]->tables[k];
			for (size_t j = 0; j < t->nchunks; j++) {
				chunk *c = t->chunks[j];
				if (c->step == C_HIGH && (!first || c->read_seq < first->read_seq))
					first = c;
			}
		}
	if (!first)
		return false;
	L->c = first;
	L->t = first->t;
	watermark_stmt(b, L, true, out);
	return true;
}

/* Rows a chunk of t should hold: towards chunk_time, within min_rows and max_rows, and half of
 * max_bytes (the other half is for the keys changed while it is open). */
static uint64_t chunk_rows(const bf_set *b, const table *t)
{
	uint64_t rows = t->limit ? t->limit : b->s.max_rows;
	if (t->done.read >= 100 && t->bytes_read) {
		uint64_t per_row = t->bytes_read / t->done.read + 1, cap = b->s.max_bytes / 2 / per_row;
		rows = rows < cap ? rows : cap;
	}
	return backfill_clamp_rows(b, rows);
}

/* Blocks of leaf l that hold about rows rows: by the rows per block read so far, else the
 * statistics', else one block (the first chunk measures). */
static uint32_t chunk_blocks(const table *t, const leaf *l, uint64_t rows)
{
	double per_block =
	    t->done.blocks >= 4 ? (double)t->done.read / (double)t->done.blocks : l->rows_per_block;
	if (per_block <= 0)
		return 1;
	double n = (double)rows / per_block;
	return n < 1 ? 1 : n > 1e6 ? 1000000 : (uint32_t)n;
}

static chunk *chunk_new(bf_set *b, table *t, int leaf_index)
{
	chunk *c = util_xcalloc(1, sizeof(*c));
	c->t = t;
	c->leaf = leaf_index;
	c->w = b->nspare ? b->spare[--b->nspare] : backfill_window_new(b->s.max_bytes);
	random_hex(b, c->nonce);
	backfill_window_begin(c->w, c->nonce, &t->recent);
	t->chunks = util_xrealloc(t->chunks, (t->nchunks + 1) * sizeof(*t->chunks));
	t->chunks[t->nchunks++] = c;
	return c;
}

/* The first range of t no chunk has read or is reading, or false. */
static bool range_left(const table *t, size_t *li, uint32_t max, uint32_t *lo, uint32_t *hi)
{
	for (size_t i = 0; i < t->nleaves; i++) {
		const leaf *l = &t->leaves[i];
		if (!l->gone && backfill_ranges_first_gap(&l->done, &l->taken, 0, l->blocks, max, lo, hi)) {
			*li = i;
			return true;
		}
	}
	return false;
}

bool backfill_ranges_open(const table *t)
{
	if (t->step != T_READ)
		return true;
	size_t li;
	uint32_t lo, hi;
	if (range_left(t, &li, 1, &lo, &hi))
		return true;
	for (size_t i = 0; i < t->nchunks; i++)
		if (t->chunks[i]->leaf >= 0)
			return true;
	return false;
}

/* The next chunk of t, if one is due: keys to read again once no range is left to hand out (or
 * when they pile up), else the next range. */
static chunk *pick(bf_set *b, table *t, uint64_t now_ms, uint64_t *wake_ms)
{
	if (t->state != BF_RUNNING || t->step != T_READ)
		return NULL;
	if (t->due_ms > now_ms) {
		if (!*wake_ms || t->due_ms < *wake_ms)
			*wake_ms = t->due_ms;
		return NULL;
	}
	uint64_t rows = chunk_rows(b, t);
	size_t li = 0;
	uint32_t lo = 0, hi = 0;
	bool ranges = range_left(t, &li, UINT32_MAX, &lo, &hi);
	chunk *c;
	if (t->again.waiting && (!ranges || t->again.bytes > b->s.max_bytes / 4)) {
		c = chunk_new(b, t, -1);
		c->nkeys = backfill_keys_take(&t->again, rows, &c->keys);
		c->expect = c->nkeys;
	} else if (ranges) {
		leaf *l = &t->leaves[li];
		uint32_t blocks = chunk_blocks(t, l, rows);
		range_left(t, &li, blocks, &lo, &hi);
		c = chunk_new(b, t, (int)li);
		c->lo = lo;
		c->hi = hi;
		c->expect = (uint64_t)((double)rows * (hi - lo) / blocks);
		backfill_ranges_add(&l->taken, lo, hi);
	} else {
		return NULL;
	}
	/* The rate limit, over the lanes: each chunk takes its rows' share of time before the next
	 * one may start (settled by its COPY, which knows how many it read). */
	if (b->s.rate)
		t->due_ms = (t->due_ms > now_ms ? t->due_ms : now_ms) + c->expect * 1000 / b->s.rate;
	return c;
}

/* The open chunk of t whose nonce is given, or NULL. */
static chunk *chunk_of(const table *t, const char *nonce)
{
	for (size_t i = 0; i < t->nchunks; i++)
		if (strcmp(t->chunks[i]->nonce, nonce) == 0)
			return t->chunks[i];
	return NULL;
}

/* The next chunk of t, if one is due now, with its window open from now on. */
static chunk *open_next(bf_set *b, table *t, uint64_t now_ms)
{
	uint64_t wake = 0;
	chunk *c = pick(b, t, now_ms, &wake);
	if (c)
		backfill_window_open(c->w);
	return c;
}

/* The lane read a chunk of t. When its next chunk is ahead (its window open already),
 * that chunk's COPY goes once the stream closed the lane's chunk before the last. Else the lane waits (*wait)
 * until the stream closed the last, and the next chunk's window opens then. So the reads a live change waits
 * behind are two chunks per lane at most. A window open before its chunk's COPY starts does what a low
 * watermark would do. Every change the stream brings from then on is in it. Every change it brought before
 * was committed before the COPY's snapshot. The chunk after is picked as the COPY goes, so it is ahead when
 * its turn comes. */
static bool chain(bf_set *b, lane *L, uint64_t now_ms, bf_stmt *out, bool *wait)
{
	table *t = L->chain_t;
	if (!t)
		return false;
	if (chunk_of(t, L->chain_nonce[L->ahead ? 0 : 1])) {
		*wait = true;
		return false;
	}
	chunk *c = L->ahead ? L->ahead : open_next(b, t, now_ms);
	L->ahead = NULL;
	if (!c) {
		L->chain_t = NULL;
		return false;
	}
	c->step = C_COPY;
	L->c = c;
	L->ahead = open_next(b, t, now_ms);
	chunk_stmt(b, L, out, now_ms);
	return true;
}

/* A table's own statement (its description, its relations), if one is due. */
static bool table_stmt(bf_set *b, lane *L, table *t, bf_stmt *out)
{
	if (t->state != BF_RUNNING || t->busy || (t->step != T_DESCRIBE && t->step != T_PLAN))
		return false;
	if (t->step == T_DESCRIBE) {
		const char *p[] = {t->schema, t->name, b->publication};
		stmt_params(b, L, out, BF_STMT_DESCRIBE, bfsql_describe, p, 3);
	} else {
		char oid[16];
		snprintf(oid, sizeof(oid), "%u", t->oid);
		const char *p[] = {oid};
		stmt_params(b, L, out, BF_STMT_LEAVES, bfsql_leaves, p, 1);
	}
	t->busy = true;
	L->t = t;
	return true;
}

static bool backfill_step(bf_set *b, lane *L, backfill *f, bf_stmt *out)
{
	if (backfill_finished(f->state) || f->busy || (f->checked && f->vetted))
		return false;
	if (!f->checked) {
		stmt(b, L, out, BF_STMT_CHECK, bfsql_privileges, 0, NULL);
	} else if (!f->resolved) {
		f->param[0] = b->publication;
		stmt(b, L, out, BF_STMT_TABLES, bfsql_tables, 1, f->param);
	} else {
		f->param[0] = f->oids;
		stmt(b, L, out, BF_STMT_COLUMNS, bfsql_columns, 1, f->param);
	}
	f->busy = true;
	L->f = f;
	return true;
}

bool backfill_next(bf_set *b, unsigned lane_index, bf_now now, bf_stmt *out, uint64_t *wake_ms)
{
	*wake_ms = 0;
	if (lane_index >= b->nlanes || b->lanes[lane_index].busy)
		return false;
	lane *L = &b->lanes[lane_index];
	if (lane_index == b->nlanes - 1)
		return writer_stmt(b, L, out);
	if (L->c) {
		chunk_stmt(b, L, out, now.ms);
		return true;
	}
	for (size_t i = 0; i < b->n; i++)
		if (backfill_step(b, L, b->list[i], out))
			return true;
	start_tables(b, now.ms);
	bool wait = false;
	if (chain(b, L, now.ms, out, &wait) || wait)
		return !wait;
	/* Round robin over the backfills, so that one does not starve the others' tables: their own
	 * statements first, then chunks. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t j = 0; j < b->n; j++) {
			size_t i = (b->rr + j) % b->n;
			backfill *f = b->list[i];
			for (size_t k = 0; k < f->ntables; k++) {
				table *t = &f->tables[k];
				chunk *c = NULL;
				if (pass == 0 ? table_stmt(b, L, t, out)
					      : (c = pick(b, t, now.ms, wake_ms)) != NULL) {
					if (c) {
						L->c = c;
						chunk_stmt(b, L, out, now.ms);
					}
					b->rr = i + 1;
					return true;
				}
			}
		}
	return false;
}

/* ---- results ---- */

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
		backfill_sql_no_emit_message(&msg, f->role, r->value(r->ctx, 0, 2));
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

/* What a backfill can read: a table, or a partitioned one through its leaves. */
static bool readable_kind(char relkind)
{
	return relkind == 'r' || relkind == 'p';
}

/* Why a table of the publication cannot be read (row i of bfsql_tables' result), into msg. */
static void table_problem(const backfill *f, const bf_result *r, int i, buf *msg)
{
	const char *schema = r->value(r->ctx, i, 0), *name = r->value(r->ctx, i, 1);
	bf_datum kind = cell(r, i, 3);
	if (kind.len != 1 || !readable_kind(kind.data[0]))
		backfill_sql_not_table(msg, schema, name, kind.len == 1 ? kind.data[0] : '?');
	else if (!cell_true(r, i, 5))
		backfill_sql_no_select(msg, f->role ? f->role : "of cdc", schema, name);
}

/* The publication's tables that the backfill reads: each asked-for pattern must match one, and each
 * must be one a backfill can read. */
static void tables_result(bf_set *b, backfill *f, const bf_result *r, bf_now now)
{
	buf msg = {0}, oids = {0};
	f->tables = util_xcalloc((size_t)r->nrows + 1, sizeof(*f->tables));
	for (int i = 0; i < r->nrows && r->ncols == 6; i++) {
		const char *schema = r->value(r->ctx, i, 0), *name = r->value(r->ctx, i, 1);
		if (!matches_any(f->sub_pat, f->nsub_pat, schema, name) ||
		    (f->nreq_pat && !matches_any(f->req_pat, f->nreq_pat, schema, name)))
			continue;
		table *t = &f->tables[f->ntables++];
		*t = (table){.bf = f,
			     .schema = util_xstrdup(schema),
			     .name = util_xstrdup(name),
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
	f->oids = oids.len ? (buf_putc(&oids, '}'), util_xstrdup(oids.data)) : NULL;
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
	pred *p = match_predicate_parse(f->where, perr, sizeof(perr));
	arena *a = arena_new(4096);
	pred_column *cols = util_xcalloc((size_t)r->nrows + 1, sizeof(*cols));
	buf msg = {0};
	for (size_t k = 0; p && k < f->ntables && !msg.len; k++) {
		size_t n = 0;
		for (int i = 0; i < r->nrows && r->ncols == 4; i++)
			if ((uint32_t)strtoul(r->value(r->ctx, i, 0), NULL, 10) == f->tables[k].oid)
				cols[n++] = (pred_column){r->value(r->ctx, i, 1),
							  (uint32_t)strtoul(r->value(r->ctx, i, 2), NULL, 10),
							  r->value(r->ctx, i, 3)};
		if (!match_predicate_check_columns(p, cols, n, true, a, why, sizeof(why)))
			buf_printf(&msg, "where: in table %s.%s, %s", f->tables[k].schema, f->tables[k].name,
				   why);
	}
	f->vetted = !msg.len;
	if (msg.len)
		end_backfill(f, msg.data, now);
	buf_free(&msg);
	free(cols);
	arena_free(a);
	match_predicate_free(p);
}

/* The parts of the subscription's and the request's `where` that translate, for the chunk query. */
static void where_pushdown(table *t)
{
	buf_reset(&t->where_sql);
	const char *wheres[] = {t->bf->sub_where, t->bf->where};
	buf part = {0};
	for (size_t i = 0; i < 2; i++) {
		pred *p = wheres[i] ? match_predicate_parse(wheres[i], NULL, 0) : NULL;
		buf_reset(&part);
		if (p)
			backfill_sql_where(&part, p, t->cols, t->ncols);
		if (part.len)
			buf_printf(&t->where_sql, "%s%s", t->where_sql.len ? " AND " : "", part.data);
		match_predicate_free(p);
	}
	buf_free(&part);
}

/* The table's columns and key from its description; false with the reason in msg. */
static bool describe_result(bf_set *b, table *t, const bf_result *r, buf *msg)
{
	if (r->nrows == 0) {
		backfill_sql_no_table(msg, t->schema, t->name);
		return false;
	}
	if (r->ncols != 12)
		return buf_puts(msg, "the table's description returned an unexpected result"), false;
	bf_datum kind = cell(r, 0, 6);
	if (kind.len != 1 || !readable_kind(kind.data[0])) {
		backfill_sql_not_table(msg, t->schema, t->name, kind.len == 1 ? kind.data[0] : '?');
		return false;
	}
	if (!cell_true(r, 0, 7)) {
		backfill_sql_no_select(msg, t->bf->role ? t->bf->role : "of cdc", t->schema, t->name);
		return false;
	}
	forget_description(t);
	size_t n = (size_t)r->nrows, room = 0;
	for (int i = 0; i < r->nrows; i++)
		for (int c = 0; c < 4; c++)
			room += (size_t)r->length(r->ctx, i, c) + 1;
	t->cols = util_xcalloc(n, sizeof(*t->cols));
	t->keys = util_xcalloc(n, sizeof(*t->keys));
	t->strings = util_xmalloc(room);
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
	t->relkind = kind.data[0];
	t->keyless = r->isnull(r->ctx, 0, 5);
	t->full = cell(r, 0, 10).len == 1 && cell(r, 0, 10).data[0] == 'f';
	if (t->keyless) {
		/* The whole row stands for the key: the window keys on every column. */
		t->nkeys = n;
		for (size_t i = 0; i < n; i++)
			t->keys[i] = i;
	} else {
		t->key_index = util_xstrdup(r->value(r->ctx, 0, 5));
	}
	/* The same relation with the same key goes on from what is durable; another one (the table
	 * was made again, or its key changed) is read from the start. */
	uint32_t oid = (uint32_t)strtoul(r->value(r->ctx, 0, 11), NULL, 10);
	bool same = t->oid == oid && t->nkey_names == t->nkeys;
	for (size_t k = 0; same && k < t->nkeys; k++)
		same = strcmp(t->key_names[k], t->cols[t->keys[k]].name) == 0;
	if (!same) {
		forget_leaves(t);
		backfill_keys_free(&t->again);
		char **names = util_xcalloc(t->nkeys + 1, sizeof(*names));
		for (size_t k = 0; k < t->nkeys; k++)
			names[k] = util_xstrdup(t->cols[t->keys[k]].name);
		backfill_table_set_keys(t, names, t->nkeys);
		t->oid = oid;
		b->dirty = true;
	}
	where_pushdown(t);
	if (t->estimate < 0) {
		double est = strtod(r->value(r->ctx, 0, 8), NULL);
		t->estimate = est < 0 ? -1 : (int64_t)est;
	}
	if (!t->limit)
		t->limit = b->s.max_rows;
	return true;
}

static leaf *find_leaf(table *t, uint32_t oid)
{
	for (size_t i = 0; i < t->nleaves; i++)
		if (t->leaves[i].oid == oid)
			return &t->leaves[i];
	return NULL;
}

/* The relations of the table and their sizes (bfsql_leaves' rows): new ones are added with the
 * blocks they have now, those no longer listed are gone (detached). False with the reason in msg. */
static bool leaves_result(bf_set *b, table *t, const bf_result *r, buf *msg)
{
	if (r->ncols != 7)
		return buf_puts(msg, "the list of the table's relations returned an unexpected result"),
		       false;
	for (size_t i = 0; i < t->nleaves; i++)
		t->leaves[i].gone = true;
	bool added = false;
	for (int i = 0; i < r->nrows; i++) {
		uint32_t oid = (uint32_t)strtoul(r->value(r->ctx, i, 0), NULL, 10);
		const char *schema = r->value(r->ctx, i, 1), *name = r->value(r->ctx, i, 2);
		if (!cell_true(r, i, 6)) {
			backfill_sql_no_select(msg, t->bf->role ? t->bf->role : "of cdc", schema, name);
			return false;
		}
		leaf *l = find_leaf(t, oid);
		if (l) {
			l->gone = false;
			continue;
		}
		t->leaves = util_xrealloc(t->leaves, (t->nleaves + 1) * sizeof(*t->leaves));
		l = &t->leaves[t->nleaves++];
		double pages = strtod(r->value(r->ctx, i, 4), NULL),
		       tuples = strtod(r->value(r->ctx, i, 5), NULL);
		unsigned long long blocks = strtoull(r->value(r->ctx, i, 3), NULL, 10);
		*l = (leaf){.oid = oid,
			    .schema = util_xstrdup(schema),
			    .name = util_xstrdup(name),
			    .blocks = blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks,
			    .rows_per_block = pages > 0 && tuples >= 0 ? tuples / pages : -1};
		added = true;
	}
	/* Listed again after every relation known was read: done unless one was attached meanwhile. */
	t->listed_again = t->listed_again && !added;
	b->dirty = true;
	return true;
}

/* ---- a chunk's COPY ---- */

/* The chunk lane_index reads for ticket, while its COPY runs and has not failed; else NULL. */
static chunk *copying_chunk(bf_set *b, unsigned lane_index, uint64_t ticket)
{
	if (lane_index >= b->nlanes)
		return NULL;
	lane *L = &b->lanes[lane_index];
	chunk *c = L->c;
	if (!L->busy || L->ticket != ticket || L->kind != BF_STMT_CHUNK || !c || c->overflow)
		return NULL;
	return c;
}

void backfill_copy_snapshot(bf_set *b, unsigned lane_index, uint64_t ticket, const char *text, size_t len)
{
	chunk *c = copying_chunk(b, lane_index, ticket);
	if (!c)
		return;
	char err[256];
	bf_snapshot snap;
	if (!backfill_snapshot_parse(text, len, &snap, err, sizeof(err))) {
		c->error = util_xstrdup(err);
		c->overflow = true;
		return;
	}
	backfill_recent_settle(&c->t->recent, &snap);
	backfill_window_set_snapshot(c->w, &snap);
}

void backfill_copy_row(bf_set *b, unsigned lane_index, uint64_t ticket, const char *data, size_t len)
{
	chunk *c = copying_chunk(b, lane_index, ticket);
	if (!c)
		return;
	table *t = c->t;
	size_t n = t->ncols;
	if (b->nat < n + 1) {
		b->nat = n + 1;
		b->at = util_xrealloc(b->at, b->nat * sizeof(*b->at));
	}
	char err[256];
	buf_reset(&b->row);
	if (!backfill_copy_encode(data, len, n, &b->row, b->at, err, sizeof(err))) {
		c->error = util_xstrdup(err);
		c->overflow = true;
		return;
	}
	/* The row is the encoded columns. The key is its key columns' slices of it. */
	const char *row = b->row.data;
	size_t rowlen = b->at[n];
	const char *key = row;
	size_t keylen = rowlen;
	if (!t->keyless && t->nkeys == 1) { /* the key's encoding is its column's slice of the row */
		key = row + b->at[t->keys[0]];
		keylen = b->at[t->keys[0] + 1] - b->at[t->keys[0]];
	} else if (!t->keyless) {
		buf_reset(&b->key);
		for (size_t k = 0; k < t->nkeys; k++) {
			size_t col = t->keys[k];
			buf_append(&b->key, row + b->at[col], b->at[col + 1] - b->at[col]);
		}
		key = b->key.data;
		keylen = b->key.len;
	}
	t->bytes_read += rowlen;
	if (!backfill_window_add_row(c->w, key, keylen, row, rowlen))
		c->overflow = true;
}

/* A chunk's COPY ended: its high watermark is next, or it is read again in two halves when its
 * rows did not fit. The chunk size moves towards chunk_time; the rate limit sets when the table's
 * next chunk may start. */
static void chunk_copied(bf_set *b, lane *L, bf_now now)
{
	uint64_t now_ms = now.ms;
	chunk *c = L->c;
	table *t = c->t;
	size_t rows = backfill_window_rows(c->w);
	if (c->error) {
		buf msg = {0};
		buf_printf(&msg, "a row of a chunk of %s.%s: %s", t->schema, t->name, c->error);
		fail_table(t, msg.data);
		backfill_settle(t->bf, now);
		buf_free(&msg);
		return;
	}
	if (c->overflow) {
		t->limit = backfill_clamp_rows(b, rows / 2);
		backfill_chunk_retry(c, false);
		return;
	}
	if (b->s.rate && rows != c->expect) {
		int64_t more = ((int64_t)rows - (int64_t)c->expect) * 1000 / (int64_t)b->s.rate;
		t->due_ms =
		    more < 0 && (uint64_t)-more > t->due_ms ? 0 : (uint64_t)((int64_t)t->due_ms + more);
	}
	if (rows && c->leaf >= 0) {
		uint64_t took = now_ms > c->sent_ms ? now_ms - c->sent_ms : 1;
		uint64_t next = rows * b->s.chunk_ms / took;
		next = next > 2 * t->limit ? 2 * t->limit : next < t->limit / 2 ? t->limit / 2 : next;
		t->limit = backfill_clamp_rows(b, next);
	}
	/* Its rows are all here: its high watermark is the writer's to write, and the lane reads on. */
	c->step = C_HIGH;
	c->read_seq = ++b->reads;
	L->chain_t = t;
	memcpy(L->chain_nonce[0], L->chain_nonce[1], BF_ID_SIZE);
	memcpy(L->chain_nonce[1], c->nonce, BF_ID_SIZE);
	L->c = NULL;
}

void backfill_result(bf_set *b, unsigned lane_index, uint64_t ticket, const bf_result *r, bf_now now)
{
	if (lane_index >= b->nlanes || !b->lanes[lane_index].busy || b->lanes[lane_index].ticket != ticket)
		return;
	lane *L = &b->lanes[lane_index];
	L->busy = false;
	backfill *f = L->f;
	table *t = L->t;
	buf msg = {0};
	switch (L->kind) {
	case BF_STMT_CHECK:
	case BF_STMT_TABLES:
	case BF_STMT_COLUMNS:
		L->f = NULL;
		if (!f)
			break;
		f->busy = false;
		if (L->kind == BF_STMT_CHECK)
			check_result(f, r, now);
		else if (L->kind == BF_STMT_TABLES)
			tables_result(b, f, r, now);
		else
			columns_result(f, r, now);
		b->dirty = true;
		break;
	case BF_STMT_DESCRIBE:
	case BF_STMT_LEAVES:
		L->t = NULL;
		if (!t)
			break;
		t->busy = false;
		if (L->kind == BF_STMT_DESCRIBE ? !describe_result(b, t, r, &msg)
						: !leaves_result(b, t, r, &msg)) {
			fail_table(t, msg.data);
			backfill_settle(t->bf, now);
			break;
		}
		t->step = L->kind == BF_STMT_DESCRIBE && !t->nleaves ? T_PLAN : T_READ;
		if (t->step == T_READ)
			backfill_table_progress(t, now);
		break;
	case BF_STMT_LOW:
		if (L->c)
			L->c->step = C_COPY;
		break;
	case BF_STMT_CHUNK:
		if (L->c)
			chunk_copied(b, L, now);
		break;
	case BF_STMT_HIGH: /* it waits for the stream to bring it (NULL: brought already) */
		if (L->c)
			L->c->step = C_WRITTEN;
		L->c = NULL;
		break;
	}
	if (!L->c)
		L->t = NULL;
	buf_free(&msg);
}

void backfill_error(bf_set *b, unsigned lane_index, uint64_t ticket, const char *message, bool lost,
		    bool retry, bf_now now)
{
	if (lane_index >= b->nlanes || !b->lanes[lane_index].busy || b->lanes[lane_index].ticket != ticket)
		return;
	lane *L = &b->lanes[lane_index];
	L->busy = false;
	backfill *f = L->f;
	table *t = L->c ? L->c->t : L->t;
	chunk *c = L->c;
	L->f = NULL;
	L->t = NULL;
	L->c = NULL;
	if (f) {
		f->busy = false;
		if (!lost) {
			end_backfill(f, message, now);
			b->dirty = true;
		}
		return;
	}
	if (!t)
		return;
	t->busy = false;
	if (c && (lost || retry))
		backfill_chunk_retry(c, false);
	if (retry) {
		/* The table changed under the backfill: described again, what is not durable read again. */
		backfill_drop_run(t);
		t->step = T_DESCRIBE;
	} else if (!lost) {
		fail_table(t, message);
		backfill_settle(t->bf, now);
	}
}

/* Whether t read and made durable every range of its relations and every key. */
static bool all_durable(const table *t)
{
	if (t->step != T_READ || t->nchunks || t->npend || t->again.n)
		return false;
	for (size_t i = 0; i < t->nleaves; i++)
		if (!t->leaves[i].gone &&
		    backfill_ranges_blocks(&t->leaves[i].done, t->leaves[i].blocks) < t->leaves[i].blocks)
			return false;
	return true;
}

void backfill_table_progress(table *t, bf_now now)
{
	if (t->state != BF_RUNNING || !all_durable(t))
		return;
	if (t->relkind == 'p' && !t->listed_again) {
		/* Its leaves once more: one attached meanwhile is read too. */
		t->listed_again = true;
		t->step = T_PLAN;
		return;
	}
	t->state = BF_DONE;
	backfill_stop_run(t);
	backfill_settle(t->bf, now);
	t->bf->set->dirty = true;
}

/* backfill.c: the backfills of the daemon; see backfill.h. Each table moves through
 * DESCRIBE -> (LOW -> CHUNK -> HIGH -> STREAM)* -> DRAIN -> done; the reader runs the statements,
 * the stream closes each chunk's window, and the sinks' durable position finishes chunks in the
 * order they were emitted. What is durable is what the state file keeps: a table's cursor (the key
 * of the last row of its last durable chunk) and its counters at that point. */
#include "cdc/backfill/backfill.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/config/config.h"
#include "cdc/config/predicate.h"
#include "decoder/fsutil.h"
#include "decoder/json.h"

#define BF_FILE_VERSION 1
/* Finished backfills kept for GET /backfills; the `snapshot: true` ones are always kept, since
 * they say the subscription had its snapshot. */
#define BF_KEEP_FINISHED 50

enum step { S_NONE, S_DESCRIBE, S_LOW, S_CHUNK, S_HIGH, S_STREAM, S_DRAIN };

/* A chunk emitted at its high watermark, finished once the sinks made lsn durable. */
typedef struct pending {
	uint64_t lsn;
	buf cursor; /* the key of its last row; empty if it read none */
	uint64_t read, emitted, dropped;
	bool last;
} pending;

typedef struct counters {
	uint64_t read, emitted, dropped;
} counters;

typedef struct table {
	struct backfill *bf;
	char *schema, *name, *error, *key_index;
	bf_state state;
	int64_t estimate;
	/* durable, persisted */
	buf cursor_d;
	counters done_d;
	/* live: includes chunks emitted but not yet durable */
	buf cursor;
	counters done;
	uint64_t retries;
	/* the description */
	bfsql_col *cols;
	size_t ncols;
	size_t *keys;
	size_t nkeys;
	char *strings; /* the names the cols point to */
	buf where_sql; /* the `where`s' parts that translate (bfsql_where) */
	/* the run */
	enum step step;
	bool busy;
	bf_stmt_kind kind; /* of the statement in flight */
	uint64_t ticket, due_ms, sent_ms, limit;
	uint64_t run_ms, run_read; /* when this run started, and the rows read before it */
	bool last;
	bf_window *w;
	char nonce[BF_ID_SIZE];
	buf sql, wm;
	char **params;
	size_t nparams;
	pending *pend;
	size_t npend;
} table;

typedef struct backfill {
	char id[BF_ID_SIZE];
	char *sub, *sub_where, *where, *error, *role;
	char **sub_pat, **req_pat;
	size_t nsub_pat, nreq_pat;
	bool snapshot, resolved;
	bf_state state;
	int64_t created_ms, finished_ms;
	table *tables;
	size_t ntables;
	/* the checks: CHECK, then TABLES until resolved */
	bool checked, busy;
	bf_stmt_kind kind;
	uint64_t ticket;
	const char *param[1];
} backfill;

struct bf_set {
	bf_settings s;
	char *publication, *path;
	uint64_t rng, tickets;
	backfill **list;
	size_t n;
	size_t rr;  /* where backfill_next's round starts */
	bool dirty; /* changed since the state file was written */
};

const char *bf_state_name(bf_state s)
{
	static const char *const names[] = {"queued", "running", "done", "cancelled", "failed"};
	return s <= BF_FAILED ? names[s] : "unknown";
}

static bool state_parse(const char *s, bf_state *out)
{
	for (bf_state i = BF_QUEUED; i <= BF_FAILED; i++)
		if (strcmp(s, bf_state_name(i)) == 0)
			return *out = i, true;
	return false;
}

static bool finished(bf_state s)
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

static void clear_pending(table *t)
{
	for (size_t i = 0; i < t->npend; i++)
		buf_free(&t->pend[i].cursor);
	free(t->pend);
	t->pend = NULL;
	t->npend = 0;
}

/* Stops the table's run: nothing in flight counts any more. */
static void stop_run(table *t)
{
	bfw_free(t->w);
	t->w = NULL;
	clear_params(t);
	clear_pending(t);
	t->step = S_NONE;
	t->busy = false;
	t->ticket = 0;
}

static void table_free(table *t)
{
	stop_run(t);
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

static void backfill_free(backfill *f)
{
	for (size_t i = 0; i < f->ntables; i++)
		table_free(&f->tables[i]);
	free(f->tables);
	strv_free(f->sub_pat, f->nsub_pat);
	strv_free(f->req_pat, f->nreq_pat);
	free(f->sub);
	free(f->sub_where);
	free(f->where);
	free(f->error);
	free(f->role);
	free(f);
}

/* The live figures go back to the durable ones: what follows is read again. */
static void rewind_table(table *t)
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
		backfill_free(b->list[i]);
	free(b->list);
	free(b->publication);
	free(b->path);
	free(b);
}

static backfill *find(const bf_set *b, const char *id)
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

static void append(bf_set *b, backfill *f)
{
	b->list = xrealloc(b->list, (b->n + 1) * sizeof(*b->list));
	b->list[b->n++] = f;
}

static void remove_at(bf_set *b, size_t i)
{
	backfill_free(b->list[i]);
	memmove(&b->list[i], &b->list[i + 1], (b->n - i - 1) * sizeof(*b->list));
	b->n--;
}

/* Drops the oldest finished backfills past BF_KEEP_FINISHED (never a `snapshot: true` one). */
static void trim_history(bf_set *b)
{
	size_t kept = 0;
	for (size_t i = b->n; i-- > 0;) {
		backfill *f = b->list[i];
		if (!finished(f->state) || f->snapshot)
			continue;
		if (++kept > BF_KEEP_FINISHED)
			remove_at(b, i);
	}
}

/* ---- persistence ---- */

static void json_hex(buf *out, bool *first, const char *key, const buf *bytes)
{
	json_key(out, first, key);
	if (!bytes->len) {
		json_null(out);
		return;
	}
	buf_putc(out, '"');
	for (size_t i = 0; i < bytes->len; i++)
		buf_printf(out, "%02x", (unsigned char)bytes->data[i]);
	buf_putc(out, '"');
}

static void json_strv(buf *out, bool *first, const char *key, char **v, size_t n)
{
	json_key(out, first, key);
	buf_putc(out, '[');
	bool f = true;
	for (size_t i = 0; i < n; i++) {
		json_sep(out, &f);
		json_str(out, v[i]);
	}
	buf_putc(out, ']');
}

static void save_table(buf *out, const table *t)
{
	bool first = true;
	buf_putc(out, '{');
	json_key_str(out, &first, "schema", t->schema);
	json_key_str(out, &first, "table", t->name);
	json_key_str(out, &first, "state", bf_state_name(t->state));
	json_key_str(out, &first, "error", t->error);
	json_hex(out, &first, "cursor", &t->cursor_d);
	json_key_u64(out, &first, "read", t->done_d.read);
	json_key_u64(out, &first, "emitted", t->done_d.emitted);
	json_key_u64(out, &first, "dropped", t->done_d.dropped);
	json_key(out, &first, "estimate");
	json_i64(out, t->estimate);
	buf_putc(out, '}');
}

static void save_backfill(buf *out, const backfill *f)
{
	bool first = true;
	buf_putc(out, '{');
	json_key_str(out, &first, "id", f->id);
	json_key_str(out, &first, "subscription", f->sub);
	json_strv(out, &first, "subscription_tables", f->sub_pat, f->nsub_pat);
	json_strv(out, &first, "tables_asked", f->req_pat, f->nreq_pat);
	json_key_str(out, &first, "subscription_where", f->sub_where);
	json_key_str(out, &first, "where", f->where);
	json_key_boolean(out, &first, "snapshot", f->snapshot);
	json_key_str(out, &first, "state", bf_state_name(f->state));
	json_key_str(out, &first, "error", f->error);
	json_key(out, &first, "created");
	json_i64(out, f->created_ms);
	json_key(out, &first, "finished");
	json_i64(out, f->finished_ms);
	json_key_boolean(out, &first, "resolved", f->resolved);
	json_key(out, &first, "tables");
	buf_putc(out, '[');
	bool tf = true;
	for (size_t i = 0; i < f->ntables; i++) {
		json_sep(out, &tf);
		save_table(out, &f->tables[i]);
	}
	buf_puts(out, "]}");
}

static bool save(bf_set *b, char *err, size_t errlen)
{
	if (!b->path)
		return true;
	trim_history(b);
	buf out = {0};
	bool first = true;
	buf_putc(&out, '{');
	json_key_u64(&out, &first, "version", BF_FILE_VERSION);
	json_key(&out, &first, "backfills");
	buf_putc(&out, '[');
	bool bf = true;
	for (size_t i = 0; i < b->n; i++) {
		json_sep(&out, &bf);
		save_backfill(&out, b->list[i]);
	}
	buf_puts(&out, "]}\n");
	bool ok = file_replace(b->path, out.data, out.len, 0600, err, errlen);
	buf_free(&out);
	return ok;
}

/* Members of the state file, by type; NULL when absent or of another type. */
static json_object *member(json_object *o, const char *key, json_type type)
{
	json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

static char *member_str(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_string);
	return v ? xstrdup(json_object_get_string(v)) : NULL;
}

static int64_t member_i64(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_int);
	return v ? json_object_get_int64(v) : 0;
}

static char **member_strv(json_object *o, const char *key, size_t *n)
{
	json_object *a = member(o, key, json_type_array);
	*n = a ? json_object_array_length(a) : 0;
	char **v = xcalloc(*n ? *n : 1, sizeof(*v));
	for (size_t i = 0; i < *n; i++) {
		json_object *s = json_object_array_get_idx(a, i);
		v[i] = xstrdup(json_object_is_type(s, json_type_string) ? json_object_get_string(s) : "");
	}
	return v;
}

static bool hex_bytes(const char *s, buf *out)
{
	size_t n = strlen(s);
	if (n % 2)
		return false;
	for (size_t i = 0; i < n; i += 2) {
		unsigned v;
		if (sscanf(s + i, "%2x", &v) != 1)
			return false;
		buf_putc(out, (char)v);
	}
	return true;
}

static bool load_table(json_object *o, table *t)
{
	t->schema = member_str(o, "schema");
	t->name = member_str(o, "table");
	t->error = member_str(o, "error");
	json_object *st = member(o, "state", json_type_string), *cur = member(o, "cursor", json_type_string);
	if (!t->schema || !t->name || !st || !state_parse(json_object_get_string(st), &t->state))
		return false;
	if (cur && !hex_bytes(json_object_get_string(cur), &t->cursor_d))
		return false;
	t->done_d = (counters){(uint64_t)member_i64(o, "read"), (uint64_t)member_i64(o, "emitted"),
			       (uint64_t)member_i64(o, "dropped")};
	t->estimate = member(o, "estimate", json_type_int) ? member_i64(o, "estimate") : -1;
	rewind_table(t);
	return true;
}

static backfill *load_backfill(json_object *o)
{
	backfill *f = xcalloc(1, sizeof(*f));
	json_object *id = member(o, "id", json_type_string), *st = member(o, "state", json_type_string);
	json_object *tables = member(o, "tables", json_type_array);
	f->sub = member_str(o, "subscription");
	f->sub_where = member_str(o, "subscription_where");
	f->where = member_str(o, "where");
	f->error = member_str(o, "error");
	f->sub_pat = member_strv(o, "subscription_tables", &f->nsub_pat);
	f->req_pat = member_strv(o, "tables_asked", &f->nreq_pat);
	json_object *snap = member(o, "snapshot", json_type_boolean),
		    *res = member(o, "resolved", json_type_boolean);
	f->snapshot = snap && json_object_get_boolean(snap);
	f->resolved = res && json_object_get_boolean(res);
	f->created_ms = member_i64(o, "created");
	f->finished_ms = member_i64(o, "finished");
	if (!id || strlen(json_object_get_string(id)) != BF_ID_SIZE - 1 || !f->sub || !st ||
	    !state_parse(json_object_get_string(st), &f->state) || !tables)
		goto bad;
	snprintf(f->id, sizeof(f->id), "%s", json_object_get_string(id));
	f->ntables = json_object_array_length(tables);
	f->tables = xcalloc(f->ntables ? f->ntables : 1, sizeof(*f->tables));
	for (size_t i = 0; i < f->ntables; i++) {
		f->tables[i].bf = f;
		if (!load_table(json_object_array_get_idx(tables, i), &f->tables[i]))
			goto bad;
	}
	return f;
bad:
	backfill_free(f);
	return NULL;
}

bool backfill_set_load(bf_set *b, char *err, size_t errlen)
{
	if (!b->path)
		return true;
	FILE *fp = fopen(b->path, "r");
	if (!fp)
		return errno == ENOENT ? true
				       : errf(err, errlen, "cannot read %s: %s", b->path, strerror(errno));
	buf text = {0};
	char chunk[8192];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0)
		buf_append(&text, chunk, n);
	bool ok = !ferror(fp);
	fclose(fp);
	json_object *root = ok && text.data ? json_tokener_parse(text.data) : NULL;
	json_object *ver = root ? member(root, "version", json_type_int) : NULL;
	json_object *list = root ? member(root, "backfills", json_type_array) : NULL;
	ok = ver && json_object_get_int64(ver) == BF_FILE_VERSION && list;
	for (size_t i = 0; ok && i < json_object_array_length(list); i++) {
		backfill *f = load_backfill(json_object_array_get_idx(list, i));
		if (f)
			append(b, f);
		ok = f != NULL;
	}
	json_object_put(root);
	buf_free(&text);
	if (!ok)
		return errf(err, errlen, "%s: not a backfill state file of version %d", b->path,
			    BF_FILE_VERSION);
	/* Running tables start again at their durable cursor; the checks run again. */
	for (size_t i = 0; i < b->n; i++)
		for (size_t k = 0; k < b->list[i]->ntables; k++) {
			table *t = &b->list[i]->tables[k];
			if (t->state == BF_RUNNING)
				t->step = S_DESCRIBE;
		}
	return true;
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
	while (find(b, f->id));
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
	append(b, f);
	memcpy(id, f->id, BF_ID_SIZE);
	return save(b, err, errlen);
}

/* A backfill whose tables all finished: done, or failed if one failed. */
static void settle(backfill *f, bf_now now)
{
	if (finished(f->state) || !f->resolved)
		return;
	bool failed = false;
	for (size_t i = 0; i < f->ntables; i++) {
		if (!finished(f->tables[i].state))
			return;
		failed |= f->tables[i].state == BF_FAILED;
	}
	f->state = failed ? BF_FAILED : BF_DONE;
	f->finished_ms = now.wall_ms;
}

static void fail_table(table *t, const char *msg)
{
	stop_run(t);
	t->state = BF_FAILED;
	set_str(&t->error, msg);
}

/* Ends f before its tables finished: those not finished are cancelled. msg: why it failed, NULL
 * for a cancel. */
static void end_backfill(backfill *f, const char *msg, bf_now now)
{
	for (size_t i = 0; i < f->ntables; i++)
		if (!finished(f->tables[i].state)) {
			stop_run(&f->tables[i]);
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
	backfill *f = find(b, id);
	if (!f || strcmp(f->sub, sub) != 0)
		return errf(err, errlen, "subscription %s has no backfill %s", sub, id);
	if (finished(f->state))
		return errf(err, errlen, "backfill %s has finished already (%s)", id,
			    bf_state_name(f->state));
	end_backfill(f, NULL, now);
	return save(b, err, errlen);
}

bool backfill_forget(bf_set *b, const char *sub, char *err, size_t errlen)
{
	for (size_t i = b->n; i-- > 0;)
		if (strcmp(b->list[i]->sub, sub) == 0)
			remove_at(b, i);
	return save(b, err, errlen);
}

bool backfill_has_snapshot(const bf_set *b, const char *sub)
{
	for (size_t i = 0; i < b->n; i++)
		if (b->list[i]->snapshot && strcmp(b->list[i]->sub, sub) == 0)
			return true;
	return false;
}

/* ---- the reader ---- */

static uint64_t clamp_rows(const bf_set *b, uint64_t n)
{
	return n < b->s.min_rows ? b->s.min_rows : n > b->s.max_rows ? b->s.max_rows : n;
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
		if (finished(f->state) || !f->checked || !f->resolved)
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
	stmt(b, out, high ? BF_STMT_HIGH : BF_STMT_LOW, bfsql_watermark, 1, (const char *const *)t->params,
	     &t->ticket, &t->kind);
}

/* The chunk query after the cursor, its values as parameters. */
static void chunk_stmt(bf_set *b, table *t, bf_stmt *out)
{
	clear_params(t);
	bool has_cursor = t->cursor.len > 0;
	if (has_cursor) {
		bf_datum *d = xcalloc(t->nkeys, sizeof(*d));
		if (!bf_decode(t->cursor.data, t->cursor.len, d, t->nkeys)) {
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
		t->params = strv_dup((const char *const[]){t->schema, t->name}, 2);
		t->nparams = 2;
		stmt(b, out, BF_STMT_DESCRIBE, bfsql_describe, 2, (const char *const *)t->params, &t->ticket,
		     &t->kind);
		break;
	case S_LOW:
		if (t->due_ms > now_ms) {
			if (!*wake_ms || t->due_ms < *wake_ms)
				*wake_ms = t->due_ms;
			return false;
		}
		random_hex(b, t->nonce);
		bfw_begin(t->w, t->nonce);
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
	if (finished(f->state) || f->busy || (f->checked && f->resolved))
		return false;
	if (!f->checked) {
		stmt(b, out, BF_STMT_CHECK, bfsql_privileges, 0, NULL, &f->ticket, &f->kind);
	} else {
		f->param[0] = b->publication;
		stmt(b, out, BF_STMT_TABLES, bfsql_tables, 1, f->param, &f->ticket, &f->kind);
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
	if (r->nrows != 1 || r->ncols != 2)
		return end_backfill(f, "the privileges check returned an unexpected result", now);
	set_str(&f->role, r->value(r->ctx, 0, 0));
	if (!cell_true(r, 0, 1)) {
		buf msg = {0};
		bfsql_no_emit_message(&msg, f->role);
		end_backfill(f, msg.data, now);
		buf_free(&msg);
		return;
	}
	f->checked = true;
}

static bool matches_any(char **pat, size_t n, const char *schema, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (cfg_table_match(pat[i], schema, name))
			return true;
	return false;
}

/* The publication's tables that the backfill reads; each asked-for pattern must match one. */
static void tables_result(bf_set *b, backfill *f, const bf_result *r, bf_now now)
{
	buf msg = {0};
	f->tables = xcalloc((size_t)r->nrows + 1, sizeof(*f->tables));
	for (int i = 0; i < r->nrows && r->ncols == 2; i++) {
		const char *schema = r->value(r->ctx, i, 0), *name = r->value(r->ctx, i, 1);
		if (!matches_any(f->sub_pat, f->nsub_pat, schema, name) ||
		    (f->nreq_pat && !matches_any(f->req_pat, f->nreq_pat, schema, name)))
			continue;
		table *t = &f->tables[f->ntables++];
		*t = (table){.bf = f, .schema = xstrdup(schema), .name = xstrdup(name), .estimate = -1};
	}
	for (size_t k = 0; k < f->nreq_pat && !msg.len; k++) {
		bool hit = false;
		for (size_t i = 0; i < f->ntables && !hit; i++)
			hit = cfg_table_match(f->req_pat[k], f->tables[i].schema, f->tables[i].name);
		if (!hit)
			buf_printf(&msg, "table %s is not one of subscription %s's tables in publication %s",
				   f->req_pat[k], f->sub, b->publication);
	}
	if (!msg.len && !f->ntables)
		buf_printf(&msg, "subscription %s has no table in publication %s", f->sub, b->publication);
	f->resolved = true;
	if (msg.len)
		end_backfill(f, msg.data, now);
	buf_free(&msg);
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
	if (r->ncols != 9)
		return buf_puts(msg, "the table's description returned an unexpected result"), false;
	bf_datum kind = cell(r, 0, 6);
	if (kind.len != 1 || kind.data[0] != 'r') {
		bfsql_not_table(msg, t->schema, t->name, kind.len == 1 ? kind.data[0] : '?');
		return false;
	}
	if (!cell_true(r, 0, 7)) {
		bfsql_no_select(msg, t->bf->role ? t->bf->role : "of cdc", t->schema, t->name);
		return false;
	}
	if (r->isnull(r->ctx, 0, 5)) {
		bfsql_no_key(msg, t->schema, t->name);
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
	if (!t->w)
		t->w = bfw_new(b->s.max_bytes);
	if (!t->limit)
		t->limit = clamp_rows(b, 1000);
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
		t->limit = clamp_rows(b, (uint64_t)i / 2);
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
	if (!t->last) {
		/* Towards the target time, at most doubling or halving, and under half the byte cap
		 * (the other half is for the keys changed while the chunk is open). */
		uint64_t took = now_ms > t->sent_ms ? now_ms - t->sent_ms : 1;
		uint64_t next = t->limit * b->s.chunk_ms / took;
		next = next > 2 * t->limit ? 2 * t->limit : next < t->limit / 2 ? t->limit / 2 : next;
		uint64_t per_row = bytes / (uint64_t)r->nrows + 1, cap = b->s.max_bytes / 2 / per_row;
		t->limit = clamp_rows(b, next < cap ? next : cap);
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

/* The chunk starts again with a new nonce (its watermarks become foreign). */
static void chunk_again(table *t, uint64_t due_ms)
{
	bfw_reset(t->w);
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
		else
			tables_result(b, f, r, now);
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
			settle(t->bf, now);
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
		if (chunk_rows(b, t, r, now.ms, &msg)) {
			t->step = S_HIGH;
		} else if (msg.len) {
			/* The table changed under the backfill: describe it again. */
			bfw_reset(t->w);
			t->step = S_DESCRIBE;
		} else {
			t->retries++;
			chunk_again(t, now.ms);
		}
		break;
	case BF_STMT_HIGH:
		if (t->step == S_HIGH)
			t->step = S_STREAM;
		break;
	default:
		break;
	}
	buf_free(&msg);
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
		settle(t->bf, now);
		b->dirty = true;
	} else if (t->step != S_DESCRIBE && t->step != S_STREAM && t->step != S_DRAIN) {
		chunk_again(t, now.ms);
	}
}

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
	backfill *f = find(b, id);
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
				t->limit = clamp_rows(b, t->limit / 2);
			chunk_again(t, now.ms);
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
				stop_run(t);
			b->dirty = true;
		}
		settle(f, now);
	}
	if (!b->dirty)
		return true;
	if (!save(b, err, errlen))
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
			clear_pending(t);
			rewind_table(t);
			if (t->w)
				bfw_reset(t->w);
			t->busy = false;
			t->ticket = 0;
			t->step = t->cols ? S_LOW : S_DESCRIBE;
			t->due_ms = 0;
		}
}

/* ---- progress ---- */

static void table_progress(const table *t, uint64_t now_ms, bf_progress *p)
{
	*p = (bf_progress){.read = t->done.read,
			   .emitted = t->done.emitted,
			   .dropped = t->done.dropped,
			   .retries = t->retries,
			   .estimate = t->estimate,
			   .eta_s = -1};
	if (t->state == BF_DONE) {
		p->estimate = (int64_t)t->done.read;
		p->eta_s = 0;
		return;
	}
	if (p->estimate >= 0 && (uint64_t)p->estimate < p->read)
		p->estimate = (int64_t)p->read;
	if (t->state == BF_RUNNING && now_ms > t->run_ms && t->done.read > t->run_read)
		p->rate = (double)(t->done.read - t->run_read) * 1000.0 / (double)(now_ms - t->run_ms);
	if (p->rate > 0 && p->estimate >= 0)
		p->eta_s = (int64_t)((double)((uint64_t)p->estimate - p->read) / p->rate + 0.5);
}

size_t backfill_count(const bf_set *b)
{
	return b->n;
}

bool backfill_active(const bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		if (!finished(b->list[i]->state))
			return true;
	return false;
}

void backfill_info(const bf_set *b, size_t i, bf_now now, bf_info *out)
{
	const backfill *f = b->list[i];
	*out = (bf_info){.id = f->id,
			 .subscription = f->sub,
			 .where = f->where,
			 .error = f->error,
			 .state = f->state,
			 .created_ms = f->created_ms,
			 .finished_ms = f->finished_ms,
			 .ntables = f->ntables,
			 .p = {.estimate = f->resolved ? 0 : -1, .eta_s = -1}};
	double remaining = 0;
	for (size_t k = 0; k < f->ntables; k++) {
		bf_progress tp;
		table_progress(&f->tables[k], now.ms, &tp);
		out->p.read += tp.read;
		out->p.emitted += tp.emitted;
		out->p.dropped += tp.dropped;
		out->p.retries += tp.retries;
		out->p.rate += tp.rate;
		bool open = !finished(f->tables[k].state);
		if (tp.estimate < 0 && open)
			out->p.estimate = -1;
		else if (out->p.estimate >= 0)
			out->p.estimate += tp.estimate < 0 ? (int64_t)tp.read : tp.estimate;
		if (open && tp.estimate >= 0)
			remaining += (double)((uint64_t)tp.estimate - tp.read);
	}
	if (finished(f->state))
		out->p.eta_s = f->state == BF_DONE ? 0 : -1;
	else if (out->p.estimate >= 0 && out->p.rate > 0)
		out->p.eta_s = (int64_t)(remaining / out->p.rate + 0.5);
}

void backfill_table_info(const bf_set *b, size_t i, size_t k, bf_now now, bf_table_info *out)
{
	const table *t = &b->list[i]->tables[k];
	*out = (bf_table_info){
	    .schema = t->schema, .table = t->name, .key = t->key_index, .error = t->error, .state = t->state};
	table_progress(t, now.ms, &out->p);
}

static void progress_json(buf *out, bool *first, const bf_progress *p)
{
	json_key_u64(out, first, "rows_read", p->read);
	json_key_u64(out, first, "rows_emitted", p->emitted);
	json_key_u64(out, first, "rows_dropped", p->dropped);
	json_key_u64(out, first, "chunks_retried", p->retries);
	json_key(out, first, "estimate");
	if (p->estimate < 0)
		json_null(out);
	else
		json_i64(out, p->estimate);
	json_key(out, first, "rows_per_second");
	json_u64(out, (uint64_t)(p->rate + 0.5));
	json_key(out, first, "eta_seconds");
	if (p->eta_s < 0)
		json_null(out);
	else
		json_i64(out, p->eta_s);
}

void backfill_json(const bf_set *b, buf *out, const char *sub, bf_now now)
{
	buf_putc(out, '[');
	bool first = true;
	for (size_t i = 0; i < b->n; i++) {
		if (sub && strcmp(b->list[i]->sub, sub) != 0)
			continue;
		bf_info f;
		backfill_info(b, i, now, &f);
		json_sep(out, &first);
		bool m = true;
		buf_putc(out, '{');
		json_key_str(out, &m, "id", f.id);
		json_key_str(out, &m, "subscription", f.subscription);
		json_key_str(out, &m, "state", bf_state_name(f.state));
		json_key_str(out, &m, "where", f.where);
		json_key_str(out, &m, "error", f.error);
		json_key(out, &m, "created_ms");
		json_i64(out, f.created_ms);
		json_key(out, &m, "finished_ms");
		if (f.finished_ms)
			json_i64(out, f.finished_ms);
		else
			json_null(out);
		progress_json(out, &m, &f.p);
		json_key(out, &m, "tables");
		buf_putc(out, '[');
		bool tf = true;
		for (size_t k = 0; k < f.ntables; k++) {
			bf_table_info t;
			backfill_table_info(b, i, k, now, &t);
			json_sep(out, &tf);
			bool n = true;
			buf_putc(out, '{');
			json_key_str(out, &n, "schema", t.schema);
			json_key_str(out, &n, "table", t.table);
			json_key_str(out, &n, "state", bf_state_name(t.state));
			json_key_str(out, &n, "key", t.key);
			json_key_str(out, &n, "error", t.error);
			progress_json(out, &n, &t.p);
			buf_putc(out, '}');
		}
		buf_puts(out, "]}");
	}
	buf_putc(out, ']');
}

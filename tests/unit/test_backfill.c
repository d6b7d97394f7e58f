/* test_backfill.c: the backfill state machine (cdc/backfill/backfill.c) driven as the daemon drives
 * it: a fake reader answers its statements, a fake stream delivers its watermarks and changes, a
 * fake sink records the reads. The whole life of a backfill, the watermark rule through it,
 * adaptive chunk sizes, the rate limit, failures with their messages, cancelling, the state file
 * and resuming from it after a crash. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdc/backfill/backfill.h"
#include "cdc/backfill/request.h"
#include "cdc/cli/backfill_cmd.h"
#include "test.h"

/* A result: nrows x ncols cells, NULL for SQL NULL. */
typedef struct res {
	int nrows, ncols;
	const char *const *cells;
} res;

static const char *res_value(void *ctx, int row, int col)
{
	const res *r = ctx;
	const char *v = r->cells[row * r->ncols + col];
	return v ? v : "";
}

static int res_length(void *ctx, int row, int col)
{
	return (int)strlen(res_value(ctx, row, col));
}

static bool res_isnull(void *ctx, int row, int col)
{
	const res *r = ctx;
	return r->cells[row * r->ncols + col] == NULL;
}

static void answer(bf_set *b, const bf_stmt *s, int nrows, int ncols, const char *const *cells, bf_now now)
{
	res r = {nrows, ncols, cells};
	bf_result br = {nrows, ncols, &r, res_value, res_length, res_isnull};
	backfill_result(b, s->ticket, &br, now);
	backfill_rows(b, &br);
}

/* A statement and, for a watermark, its content (the statement's parameters last only until the
 * table's next statement). */
typedef struct st {
	bf_stmt s;
	char wm[64];
} wmstmt;

/* The next statement, which must be of kind. */
static bf_stmt next(bf_set *b, bf_stmt_kind kind, bf_now now)
{
	bf_stmt s = {0};
	uint64_t wake;
	bool ok = backfill_next(b, now, &s, &wake);
	CHECK(ok);
	if (ok && s.kind != kind)
		fprintf(stderr, "statement %d, want %d: %s\n", s.kind, kind, s.sql);
	CHECK_INT(s.kind, kind);
	return s;
}

static void nothing_due(bf_set *b, bf_now now, uint64_t want_wake)
{
	bf_stmt s;
	uint64_t wake = 1;
	CHECK(!backfill_next(b, now, &s, &wake));
	CHECK_INT(wake, want_wake);
}

/* The reads emitted, as "schema.table:id=v,...;" per row; a row whose second column is filter is
 * left out, as a `where` would. */
typedef struct fake_sink {
	buf got;
	uint64_t lsn;
	int batches;
	bool fail;
	const char *filter;
} fake_sink;

static bool emit(void *ctx, const bf_batch *batch, size_t *delivered, char *err, size_t errlen)
{
	fake_sink *s = ctx;
	if (s->fail)
		return errf(err, errlen, "the sink is full");
	s->batches++;
	s->lsn = batch->lsn;
	bf_datum v[8];
	size_t pos = 0, n = 0;
	while (bf_batch_next(batch, &pos, v)) {
		n++;
		if (s->filter && v[1].len == (int32_t)strlen(s->filter) &&
		    memcmp(v[1].data, s->filter, strlen(s->filter)) == 0)
			continue;
		(*delivered)++;
		buf_printf(&s->got, "%s.%s:", batch->schema, batch->table);
		for (size_t i = 0; i < batch->ncols; i++)
			buf_printf(&s->got, "%s%s=%.*s", i ? "," : "", batch->cols[i].name,
				   v[i].len < 0 ? 4 : v[i].len, v[i].len < 0 ? "null" : v[i].data);
		buf_putc(&s->got, ';');
	}
	CHECK_INT(n, batch->nrows);
	return true;
}

/* The next statement, a watermark, with its content kept. */
static wmstmt next_wm(bf_set *b, bf_stmt_kind kind, bf_now now)
{
	wmstmt w = {.s = next(b, kind, now)};
	if (w.s.nparams == 1)
		snprintf(w.wm, sizeof(w.wm), "%s", w.s.params[0]);
	return w;
}

/* A chunk's result in the reader's order: the result, the high watermark's statement sent, then the
 * rows taken. */
static wmstmt answer_chunk(bf_set *b, const bf_stmt *s, int nrows, int ncols, const char *const *cells,
			   bf_now now)
{
	res r = {nrows, ncols, cells};
	bf_result br = {nrows, ncols, &r, res_value, res_length, res_isnull};
	backfill_result(b, s->ticket, &br, now);
	wmstmt high = next_wm(b, BF_STMT_HIGH, now);
	backfill_rows(b, &br);
	return high;
}

/* The watermark w writes, delivered by the stream at lsn. */
static void deliver(bf_set *b, const wmstmt *w, uint64_t lsn, fake_sink *k, bf_now now)
{
	char err[256];
	CHECK(backfill_on_message(b, w->wm, strlen(w->wm), lsn, now, emit, k, err, sizeof(err)));
}

/* An update of table public.a's row id (whole), by xid. */
static void update(bf_set *b, const char *table, const char *id, const char *new_id, uint32_t xid)
{
	const char *names[] = {"id", "v"};
	bf_datum oldv[] = {{id, (int32_t)strlen(id)}, {NULL, BF_ABSENT}};
	bf_datum newv[] = {{new_id, (int32_t)strlen(new_id)}, {"new", 3}};
	bf_change c = {.schema = "public",
		       .table = table,
		       .xid = xid,
		       .ncols = 2,
		       .names = names,
		       .old_values = strcmp(id, new_id) ? oldv : NULL,
		       .new_values = newv};
	backfill_on_change(b, &c);
}

static const bf_settings settings = {
    .chunk_ms = 250, .min_rows = 2, .max_rows = 2, .max_bytes = 1 << 20, .tables = 1, .publication = "pub"};

static const char *describe_a[] = {
    "id", "23", "pg_catalog", "int4", "1",  "a_pkey", "r", "t", "3", "-1",
    "v",  "25", "pg_catalog", "text", NULL, "a_pkey", "r", "t", "3", "-1",
};

static char *state_path(void)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/test_backfill.%d.json", (int)getpid());
	unlink(path);
	return path;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	static char text[8192];
	size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[n] = '\0';
	if (f)
		fclose(f);
	return text;
}

/* A backfill over two tables: one read in two chunks with a change between the first chunk's
 * watermarks, a crash before the second chunk is durable, a resume from the first, and a second
 * table without a key. */
static void test_life(void)
{
	char *path = state_path(), err[512], id[BF_ID_SIZE];
	bf_now now = {1000, 1700000000000};
	bf_set *b = backfill_set_new(&settings, path, 42);
	const char *pats[] = {"public.*"};
	bf_request req = {.subscription = "s", .sub_tables = pats, .nsub_tables = 1, .snapshot = true};
	CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
	CHECK_INT(strlen(id), 16);
	CHECK(backfill_has_snapshot(b, "s"));
	CHECK(!backfill_has_snapshot(b, "t"));

	bf_stmt s = next(b, BF_STMT_CHECK, now);
	answer(b, &s, 1, 3, (const char *[]){"cdc", "t", "pg_logical_emit_message(boolean,text,text)"}, now);
	s = next(b, BF_STMT_TABLES, now);
	CHECK_STR(s.params[0], "pub");
	/* b has a key at the checks; it is gone when b's turn comes (below) */
	answer(b, &s, 3, 6,
	       (const char *[]){"other", "c", "16380", "r", "c_pkey", "t", "public", "a", "16384", "r",
				"a_pkey", "t", "public", "b", "16390", "r", "b_pkey", "t"},
	       now);
	/* one table at a time: a first */
	s = next(b, BF_STMT_DESCRIBE, now);
	CHECK_STR(s.params[0], "public");
	CHECK_STR(s.params[1], "a");
	answer(b, &s, 2, 10, describe_a, now);
	CHECK(backfill_watching(b, "public", "a"));
	CHECK(!backfill_watching(b, "public", "b"));

	/* chunk 1: rows 1 and 2; row 2 changes between the watermarks */
	wmstmt low1 = next_wm(b, BF_STMT_LOW, now);
	char nonce1[64];
	snprintf(nonce1, sizeof(nonce1), "%s", low1.wm);
	CHECK(strncmp(low1.wm, id, 16) == 0 && strstr(low1.wm, ":low") != NULL);
	answer(b, &low1.s, 1, 1, (const char *[]){"0/10"}, now);
	bf_stmt c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.sql,
		  "SELECT (SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text), \"id\", \"v\" FROM "
		  "\"public\".\"a\" ORDER BY \"id\" LIMIT 2");
	CHECK_INT(c.nparams, 0);
	fake_sink k = {.filter = "z"}; /* a where that leaves row 3 (v = 'z') out */
	update(b, "a", "1", "1", 90);  /* before the low watermark */
	deliver(b, &low1, 10, &k, now);
	update(b, "a", "2", "2", 91);
	answer(b, &c, 2, 3, (const char *[]){"95:95:", "1", "x", "95:95:", "2", "y"}, now);
	wmstmt high1 = next_wm(b, BF_STMT_HIGH, now);
	CHECK(strstr(high1.wm, ":high") != NULL);
	answer(b, &high1.s, 1, 1, (const char *[]){"0/20"}, now);

	/* chunk 2 is read while the stream has yet to deliver chunk 1's high watermark, which stands
	 * for chunk 2's low one: after the last key read, row 3, the last (fewer rows than the limit) */
	c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.sql,
		  "SELECT (SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text), \"id\", \"v\" FROM "
		  "\"public\".\"a\" WHERE \"id\" > $1::\"pg_catalog\".\"int4\" ORDER BY \"id\" LIMIT 2");
	CHECK_INT(c.nparams, 1);
	CHECK_STR(c.params[0], "2");
	update(b, "a", "3", "3", 92); /* in chunk 1's window, before chunk 2's */
	deliver(b, &high1, 20, &k, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=x;");
	CHECK_INT(k.lsn, 20);
	answer(b, &c, 1, 3, (const char *[]){"96:96:", "3", "z"}, now);
	wmstmt high2 = next_wm(b, BF_STMT_HIGH, now);
	CHECK(strcmp(high2.wm, high1.wm) != 0);
	CHECK(!backfill_draining(b));
	/* the stream's high watermark may come before the reader hears back */
	deliver(b, &high2, 40, &k, now);
	answer(b, &high2.s, 1, 1, (const char *[]){"0/40"}, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=x;");
	CHECK(backfill_draining(b)); /* all read and emitted: only durability is missing */

	/* only chunk 1 is durable when cdc dies */
	CHECK(backfill_delivered(b, 25, now, err, sizeof(err)));
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.state, BF_RUNNING);
	/* read = delivered (row 1) + dropped (row 2, changed in the window) + filtered (row 3) */
	CHECK_INT(info.p.read, 3);
	CHECK_INT(info.p.delivered, 1);
	CHECK_INT(info.p.dropped, 1);
	CHECK_INT(info.p.filtered, 1);
	CHECK(strstr(slurp(path), "\"cursor\":\"0000000132\"") != NULL); /* the key "2" */
	backfill_set_free(b);

	/* the restarted daemon resumes after row 2, and ignores the watermarks replayed from before */
	b = backfill_set_new(&settings, path, 7);
	CHECK(backfill_set_load(b, err, sizeof(err)));
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.p.read, 2);
	buf_reset(&k.got);
	s = next(b, BF_STMT_CHECK, now);
	answer(b, &s, 1, 3, (const char *[]){"cdc", "t", "pg_logical_emit_message(boolean,text,text)"}, now);
	s = next(b, BF_STMT_DESCRIBE, now);
	answer(b, &s, 2, 10, describe_a, now);
	wmstmt low3 = next_wm(b, BF_STMT_LOW, now);
	CHECK(strcmp(low3.wm, high2.wm) != 0);
	answer(b, &low3.s, 1, 1, (const char *[]){"0/50"}, now);
	c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.params[0], "2");
	deliver(b, &high1, 20, &k, now); /* replayed from before the crash */
	deliver(b, &low3, 50, &k, now);
	answer(b, &c, 1, 3, (const char *[]){"97:97:", "3", "z2"}, now);
	wmstmt high3 = next_wm(b, BF_STMT_HIGH, now);
	answer(b, &high3.s, 1, 1, (const char *[]){"0/60"}, now);
	deliver(b, &high2, 40, &k, now);
	CHECK_STR(k.got.data, "");
	deliver(b, &high3, 60, &k, now);
	CHECK_STR(k.got.data, "public.a:id=3,v=z2;");
	CHECK(backfill_delivered(b, 61, now, err, sizeof(err)));
	CHECK(!backfill_draining(b));
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_STR(ti.key, "a_pkey");
	CHECK(!backfill_watching(b, "public", "a"));

	/* table b has no key: it fails with the message, and with it the backfill */
	s = next(b, BF_STMT_DESCRIBE, now);
	CHECK_STR(s.params[1], "b");
	answer(b, &s, 1, 10,
	       (const char *[]){"x", "23", "pg_catalog", "int4", NULL, NULL, "r", "t", "-1", "-1"}, now);
	CHECK(backfill_delivered(b, 61, now, err, sizeof(err)));
	backfill_table_info(b, 0, 1, now, &ti);
	CHECK_INT(ti.state, BF_FAILED);
	CHECK_STR(ti.error,
		  "public.b has neither a primary key nor a unique index on NOT NULL columns, and a "
		  "backfill reads a table in key order: add one (ALTER TABLE \"public\".\"b\" ADD "
		  "PRIMARY KEY (...))");
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.state, BF_FAILED);
	CHECK(info.finished_ms == now.wall_ms);
	nothing_due(b, now, 0);

	/* finished: never runs again, also after a restart */
	backfill_set_free(b);
	b = backfill_set_new(&settings, path, 8);
	CHECK(backfill_set_load(b, err, sizeof(err)));
	nothing_due(b, now, 0);
	CHECK(backfill_has_snapshot(b, "s"));
	buf j = {0};
	backfill_json(b, &j, "s", now);
	char want[2048];
	snprintf(
	    want, sizeof(want),
	    "[{\"id\":\"%s\",\"subscription\":\"s\",\"state\":\"failed\",\"where\":null,\"error\":null,"
	    "\"created_ms\":1700000000000,\"finished_ms\":1700000000000,\"rows_read\":3,\"rows_delivered\":2,"
	    "\"rows_dropped\":1,\"rows_filtered\":0,\"chunks_retried\":0,\"estimate\":3,\"rows_per_second\":"
	    "0,\"eta_seconds\":"
	    "null,"
	    "\"tables\":[{\"schema\":\"public\",\"table\":\"a\",\"state\":\"done\",\"key\":null,\"error\":"
	    "null,"
	    "\"rows_read\":3,\"rows_delivered\":2,\"rows_dropped\":1,\"rows_filtered\":0,\"chunks_retried\":"
	    "0,\"estimate\":3,"
	    "\"rows_per_second\":0,\"eta_seconds\":0},{\"schema\":\"public\",\"table\":\"b\",\"state\":"
	    "\"failed\","
	    "\"key\":null,\"error\":\"public.b has neither a primary key nor a unique index on NOT NULL "
	    "columns, and a backfill reads a table in key order: add one (ALTER TABLE "
	    "\\\"public\\\".\\\"b\\\" "
	    "ADD PRIMARY KEY "
	    "(...))\",\"rows_read\":0,\"rows_delivered\":0,\"rows_dropped\":0,\"rows_filtered\":0,\"chunks_"
	    "retried\":0,"
	    "\"estimate\":null,\"rows_per_second\":0,\"eta_seconds\":null}]}]",
	    id);
	CHECK_STR(j.data, want);
	buf_reset(&j);
	backfill_json(b, &j, "other", now);
	CHECK_STR(j.data, "[]");
	CHECK(backfill_forget(b, "s", err, sizeof(err)));
	CHECK(!backfill_has_snapshot(b, "s"));
	CHECK_INT(backfill_count(b), 0);
	buf_free(&j);
	buf_free(&k.got);
	backfill_set_free(b);
	unlink(path);
}

static const char *only_a[] = {"public.a"};

/* Starts backfill req (of public.a) and runs it to its first chunk statement. */
static bf_set *start_request(const bf_settings *st, const bf_request *req, bf_now now, char id[BF_ID_SIZE])
{
	char err[256];
	bf_set *b = backfill_set_new(st, NULL, 1);
	CHECK(backfill_add(b, req, now, id, err, sizeof(err)));
	bf_stmt s = next(b, BF_STMT_CHECK, now);
	answer(b, &s, 1, 3, (const char *[]){"cdc", "t", "pg_logical_emit_message(boolean,text,text)"}, now);
	s = next(b, BF_STMT_TABLES, now);
	answer(b, &s, 1, 6, (const char *[]){"public", "a", "16384", "r", "a_pkey", "t"}, now);
	const char *why;
	if (req->where) {
		CHECK_INT(backfill_verdict(b, id, &why), BF_CHECKING);
		s = next(b, BF_STMT_COLUMNS, now);
		answer(b, &s, 2, 4, (const char *[]){"16384", "id", "23", "int4", "16384", "v", "25", "text"},
		       now);
	}
	CHECK_INT(backfill_verdict(b, id, &why), BF_PASSED);
	s = next(b, BF_STMT_DESCRIBE, now);
	answer(b, &s, 2, 10, describe_a, now);
	return b;
}

/* A backfill of public.a, every row. */
static bf_set *started(const bf_settings *st, bf_now now, char id[BF_ID_SIZE])
{
	bf_request req = {.subscription = "s", .sub_tables = only_a, .nsub_tables = 1};
	return start_request(st, &req, now, id);
}

/* n rows "i", "v" after snapshot text. */
static const char **rows(int n)
{
	static const char *cells[3 * 5000];
	static char ids[5000][8];
	for (int i = 0; i < n; i++) {
		snprintf(ids[i], sizeof(ids[i]), "%d", i + 1);
		cells[3 * i] = "1:1:";
		cells[3 * i + 1] = ids[i];
		cells[3 * i + 2] = "v";
	}
	return cells;
}

/* A chunk of n rows read: its low watermark written, its SELECT answered (taking took ms), its
 * high watermark asked for, not yet answered. */
static void read_chunk(bf_set *b, int n, uint64_t took, bf_now *now, wmstmt *low, wmstmt *high)
{
	*low = next_wm(b, BF_STMT_LOW, *now);
	answer(b, &low->s, 1, 1, (const char *[]){"0/1"}, *now);
	bf_stmt c = next(b, BF_STMT_CHUNK, *now);
	now->ms += took;
	*high = answer_chunk(b, &c, n, 3, rows(n), *now);
}

/* One chunk of n rows whose SELECT takes took ms; returns the next chunk's limit. */
static uint64_t chunk_of(bf_set *b, int n, uint64_t took, bf_now *now)
{
	fake_sink k = {0};
	wmstmt low, high;
	read_chunk(b, n, took, now, &low, &high);
	answer(b, &high.s, 1, 1, (const char *[]){"0/2"}, *now);
	deliver(b, &low, 1, &k, *now);
	deliver(b, &high, 2, &k, *now);
	buf_free(&k.got);
	bf_stmt c = next(b, BF_STMT_CHUNK, *now); /* its low watermark is high */
	return strtoull(strrchr(c.sql, ' ') + 1, NULL, 10);
}

static void test_chunk_size(void)
{
	static const struct {
		uint64_t took, want;
	} cases[] = {
	    {250, 1000}, /* on target */
	    {500, 500},	 /* twice as slow: half */
	    {2000, 500}, /* far slower: half at most */
	    {100, 2000}, /* faster: double at most */
	    {200, 1250},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_settings st = settings;
		st.min_rows = 10;
		st.max_rows = 100000;
		bf_now now = {1000, 0};
		char id[BF_ID_SIZE];
		bf_set *b = started(&st, now, id);
		CHECK_INT(chunk_of(b, 1000, cases[i].took, &now), cases[i].want);
		backfill_set_free(b);
	}
	/* the byte cap */
	bf_settings st = settings;
	st.min_rows = 10;
	st.max_rows = 100000;
	st.max_bytes = 8000;
	bf_now now = {1000, 0};
	char id[BF_ID_SIZE];
	bf_set *b = started(&st, now, id);
	/* a chunk of 1000 rows does not fit: read again with half as many as fitted */
	wmstmt low = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low.s, 1, 1, (const char *[]){"0/1"}, now);
	bf_stmt c = next(b, BF_STMT_CHUNK, now);
	wmstmt high = answer_chunk(b, &c, 1000, 3, rows(1000), now);
	answer(b, &high.s, 1, 1, (const char *[]){"0/2"}, now); /* too late: ignored */
	low = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low.s, 1, 1, (const char *[]){"0/1"}, now);
	c = next(b, BF_STMT_CHUNK, now);
	/* rows 1-9 take 15 bytes, 10-99 17, 100-999 19: 432 fit in 8000 */
	CHECK(strstr(c.sql, "LIMIT 216") != NULL);
	answer(b, &c, 216, 3, rows(216), now);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.p.retries, 1);
	backfill_set_free(b);
}

static void test_rate_limit(void)
{
	bf_settings st = settings;
	st.rate = 10; /* 2 rows per chunk: one chunk per 200 ms */
	bf_now now = {1000, 0};
	char id[BF_ID_SIZE];
	bf_set *b = started(&st, now, id);
	fake_sink k = {0};
	wmstmt low, high;
	read_chunk(b, 2, 20, &now, &low, &high);
	answer(b, &high.s, 1, 1, (const char *[]){"0/1"}, now);
	deliver(b, &low, 1, &k, now);
	deliver(b, &high, 2, &k, now);
	nothing_due(b, now, 1200);
	now.ms = 1200;
	next(b, BF_STMT_LOW, now);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT((int64_t)info.p.rate, 10); /* 2 rows in 200 ms */
	CHECK_INT(info.p.estimate, 3);
	CHECK_INT(info.p.eta_s, 0); /* (3 - 2) / 10 s, rounded */
	buf_free(&k.got);
	backfill_set_free(b);
}

/* The next chunk is read while the stream has yet to close the one before, whose high watermark is
 * its low one: its own high watermark waits for that one to close; a retry of that one drops it
 * (its statement in flight is ignored) and reads that one again. */
static void test_read_ahead(void)
{
	bf_now now = {1000, 0};
	char id[BF_ID_SIZE];
	bf_set *b = started(&settings, now, id);
	fake_sink k = {0};
	wmstmt low1, high1;
	read_chunk(b, 2, 10, &now, &low1, &high1);
	answer(b, &high1.s, 1, 1, (const char *[]){"0/2"}, now);
	deliver(b, &low1, 1, &k, now);
	/* chunk 2 is read and its high watermark written before chunk 1 closes */
	bf_stmt c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.params[0], "2");
	answer(b, &c, 2, 3, (const char *[]){"10:10:", "3", "v", "10:10:", "4", "v"}, now);
	wmstmt high2 = next_wm(b, BF_STMT_HIGH, now);
	answer(b, &high2.s, 1, 1, (const char *[]){"0/4"}, now);
	nothing_due(b, now, 0);	     /* two chunks at most */
	update(b, "a", "3", "3", 5); /* before chunk 2's window */
	deliver(b, &high1, 3, &k, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=v;public.a:id=2,v=v;");
	update(b, "a", "4", "4", 6); /* in chunk 2's window */
	/* chunk 3 is read meanwhile, after chunk 2's last key */
	c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.params[0], "4");
	deliver(b, &high2, 5, &k, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=v;public.a:id=2,v=v;public.a:id=3,v=v;");
	answer(b, &c, 2, 3, (const char *[]){"10:10:", "5", "v", "10:10:", "6", "v"}, now);
	wmstmt high3 = next_wm(b, BF_STMT_HIGH, now);
	answer(b, &high3.s, 1, 1, (const char *[]){"0/6"}, now);
	bf_stmt c4 = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c4.params[0], "6");
	/* a change chunk 3's window cannot key: chunk 3 is read again, chunk 4 is dropped */
	const char *names[] = {"v"};
	bf_datum v = {"w", 1};
	bf_change unkeyed = {
	    .schema = "public", .table = "a", .xid = 7, .ncols = 1, .names = names, .new_values = &v};
	backfill_on_change(b, &unkeyed);
	deliver(b, &high3, 7, &k, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=v;public.a:id=2,v=v;public.a:id=3,v=v;");
	answer(b, &c4, 1, 3, (const char *[]){"10:10:", "7", "v"}, now); /* ignored */
	wmstmt low3 = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low3.s, 1, 1, (const char *[]){"0/8"}, now);
	c = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(c.params[0], "4");
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.p.retries, 1);
	CHECK_INT(info.p.read, 4);
	CHECK_INT(info.p.dropped, 1);
	buf_free(&k.got);
	backfill_set_free(b);
}

/* One row of bfsql_tables' result for public.NAME: its oid, relkind, key and SELECT privilege. */
#define TABLE_ROW(name, oid, relkind, key, select) "public", name, oid, relkind, key, select

static void test_failures(void)
{
	char err[512], id[BF_ID_SIZE];
	bf_now now = {1000, 5};
	const char *pats[] = {"public.*"}, *asked[] = {"public.nope"};
	/* Refused by its checks (backfill_error, before any table runs), or failed at a table's own
	 * description (table_error: the table changed after the checks). */
	static const struct {
		const char *check[3];
		const char *tables[6];
		int ntables;
		const char *describe[10];
		int ndescribe;
		const char *backfill_error, *table_error;
	} cases[] = {
	    {{"cdc", "f", "pg_logical_emit_message(boolean,text,text,boolean)"},
	     {0},
	     0,
	     {0},
	     0,
	     "role cdc may not execute pg_logical_emit_message, which writes a backfill's watermarks: run "
	     "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean,text,text,boolean) TO "
	     "\"cdc\"",
	     NULL},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {0},
	     0,
	     {0},
	     0,
	     "subscription s has no table in publication pub",
	     NULL},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {TABLE_ROW("a", "16384", "r", "a_pkey", "f")},
	     1,
	     {0},
	     0,
	     "role cdc may not read public.a: run GRANT SELECT ON \"public\".\"a\" TO \"cdc\"",
	     NULL},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {TABLE_ROW("a", "16384", "r", NULL, "t")},
	     1,
	     {0},
	     0,
	     "public.a has neither a primary key nor a unique index on NOT NULL columns, and a backfill "
	     "reads a table in key order: add one (ALTER TABLE \"public\".\"a\" ADD PRIMARY KEY (...))",
	     NULL},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {TABLE_ROW("a", "16384", "p", "a_pkey", "t")},
	     1,
	     {0},
	     0,
	     "public.a is a partitioned table: backfill its partitions",
	     NULL},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {TABLE_ROW("a", "16384", "r", "a_pkey", "t")},
	     1,
	     {"id", "23", "pg_catalog", "int4", "1", "a_pkey", "r", "f", "1", "-1"},
	     1,
	     NULL,
	     "role cdc may not read public.a: run GRANT SELECT ON \"public\".\"a\" TO \"cdc\""},
	    {{"cdc", "t", "pg_logical_emit_message(boolean,text,text)"},
	     {TABLE_ROW("a", "16384", "r", "a_pkey", "t")},
	     1,
	     {0},
	     0,
	     NULL,
	     "table public.a does not exist"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_set *b = backfill_set_new(&settings, NULL, 1);
		bf_request req = {.subscription = "s", .sub_tables = pats, .nsub_tables = 1};
		CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
		const char *why;
		CHECK_INT(backfill_verdict(b, id, &why), BF_CHECKING);
		bf_stmt s = next(b, BF_STMT_CHECK, now);
		answer(b, &s, 1, 3, cases[i].check, now);
		if (!cases[i].backfill_error || cases[i].check[1][0] == 't') {
			s = next(b, BF_STMT_TABLES, now);
			answer(b, &s, cases[i].ntables, 6, cases[i].tables, now);
		}
		if (cases[i].table_error) {
			CHECK_INT(backfill_verdict(b, id, &why), BF_PASSED);
			s = next(b, BF_STMT_DESCRIBE, now);
			answer(b, &s, cases[i].ndescribe, 10, cases[i].describe, now);
		} else {
			CHECK_INT(backfill_verdict(b, id, &why), BF_REFUSED);
			CHECK_STR(why, cases[i].backfill_error);
		}
		bf_info info;
		backfill_info(b, 0, now, &info);
		CHECK_INT(info.state, BF_FAILED);
		if (cases[i].backfill_error)
			CHECK_STR(info.error, cases[i].backfill_error);
		bf_table_info ti;
		if (cases[i].table_error) {
			backfill_table_info(b, 0, 0, now, &ti);
			CHECK_STR(ti.error, cases[i].table_error);
		} else if (info.ntables) {
			/* refused for a table: that table failed (cdc_backfill_failed), with the reason */
			backfill_table_info(b, 0, 0, now, &ti);
			CHECK_INT(ti.state, BF_FAILED);
			CHECK_STR(ti.error, cases[i].backfill_error);
		}
		nothing_due(b, now, 0);
		backfill_set_free(b);
	}
	/* an asked-for table that is not the subscription's: refused, and gone once dropped */
	bf_set *b = backfill_set_new(&settings, NULL, 1);
	bf_request req = {
	    .subscription = "s", .sub_tables = pats, .nsub_tables = 1, .tables = asked, .ntables = 1};
	CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
	bf_stmt s = next(b, BF_STMT_CHECK, now);
	answer(b, &s, 1, 3, (const char *[]){"cdc", "t", "pg_logical_emit_message(boolean,text,text)"}, now);
	s = next(b, BF_STMT_TABLES, now);
	answer(b, &s, 1, 6, (const char *[]){TABLE_ROW("a", "16384", "r", "a_pkey", "t")}, now);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_STR(info.error, "table public.nope is not one of subscription s's tables in publication pub");
	const char *why;
	CHECK_INT(backfill_verdict(b, id, &why), BF_REFUSED);
	CHECK(backfill_drop(b, id, err, sizeof(err)));
	CHECK_INT(backfill_count(b), 0);
	CHECK_INT(backfill_verdict(b, id, &why), BF_REFUSED);
	CHECK_STR(why, "its subscription was removed meanwhile");
	/* a request's where that can never be true for a table's columns: refused after COLUMNS */
	const char *only[] = {"public.a"};
	req = (bf_request){
	    .subscription = "s", .sub_tables = only, .nsub_tables = 1, .where = "new.id >= 1 and new.v = 5"};
	CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
	s = next(b, BF_STMT_CHECK, now);
	answer(b, &s, 1, 3, (const char *[]){"cdc", "t", "pg_logical_emit_message(boolean,text,text)"}, now);
	s = next(b, BF_STMT_TABLES, now);
	answer(b, &s, 2, 6,
	       (const char *[]){TABLE_ROW("a", "16384", "r", "a_pkey", "t"),
				TABLE_ROW("b", "16390", "r", NULL, "t")},
	       now);
	CHECK_INT(backfill_verdict(b, id, &why), BF_CHECKING);
	s = next(b, BF_STMT_COLUMNS, now);
	CHECK_STR(s.params[0], "{16384}");
	answer(b, &s, 2, 4, (const char *[]){"16384", "id", "23", "int4", "16384", "v", "25", "text"}, now);
	CHECK_INT(backfill_verdict(b, id, &why), BF_REFUSED);
	CHECK_STR(why,
		  "where: in table public.a, new.v = 5 is never true: column v is of type text and 5 is a "
		  "number; write '5'");
	nothing_due(b, now, 0);
	CHECK(backfill_drop(b, id, err, sizeof(err)));
	/* a where that does not parse */
	req = (bf_request){.subscription = "s", .sub_tables = pats, .nsub_tables = 1, .where = "new.a = "};
	CHECK(!backfill_add(b, &req, now, id, err, sizeof(err)));
	CHECK_STR(err, "where: position 7: expected a value after '='");
	backfill_set_free(b);

	/* a statement that fails fails its table; a lost connection reads the chunk again */
	b = started(&settings, now, id);
	wmstmt low = next_wm(b, BF_STMT_LOW, now);
	backfill_error(b, low.s.ticket, "server closed the connection", true, now);
	wmstmt low2 = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low2.s, 1, 1, (const char *[]){"0/1"}, now);
	bf_stmt c = next(b, BF_STMT_CHUNK, now);
	backfill_error(b, c.ticket, "ERROR:  permission denied for table a", false, now);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_FAILED);
	CHECK_STR(ti.error, "ERROR:  permission denied for table a");
	backfill_set_free(b);

	/* the sink's failure comes back from the stream's watermark */
	b = started(&settings, now, id);
	fake_sink k = {.fail = true};
	low = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low.s, 1, 1, (const char *[]){"0/1"}, now);
	c = next(b, BF_STMT_CHUNK, now);
	answer(b, &c, 1, 3, rows(1), now);
	wmstmt high = next_wm(b, BF_STMT_HIGH, now);
	deliver(b, &low, 1, &k, now);
	CHECK(!backfill_on_message(b, high.wm, strlen(high.wm), 2, now, emit, &k, err, sizeof(err)));
	CHECK_STR(err, "the sink is full");
	backfill_set_free(b);
}

static void test_cancel_restart(void)
{
	char err[256], id[BF_ID_SIZE];
	bf_now now = {1000, 9};
	bf_set *b = started(&settings, now, id);
	fake_sink k = {0};
	/* chunk 1 emitted, not durable; the stream reconnects: chunk 1 is read again */
	wmstmt low, high;
	read_chunk(b, 2, 0, &now, &low, &high);
	answer(b, &high.s, 1, 1, (const char *[]){"0/1"}, now);
	deliver(b, &low, 1, &k, now);
	deliver(b, &high, 2, &k, now);
	CHECK_STR(k.got.data, "public.a:id=1,v=v;public.a:id=2,v=v;");
	backfill_restart(b);
	low = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low.s, 1, 1, (const char *[]){"0/1"}, now);
	bf_stmt c = next(b, BF_STMT_CHUNK, now);
	CHECK_INT(c.nparams, 0);
	/* cancelled: its watermarks are ignored, it never runs again */
	CHECK(!backfill_cancel(b, "other", id, now, err, sizeof(err)));
	CHECK(backfill_cancel(b, "s", id, now, err, sizeof(err)));
	CHECK(!backfill_cancel(b, "s", id, now, err, sizeof(err)));
	CHECK(strstr(err, " has finished already (cancelled)") != NULL);
	answer(b, &c, 1, 3, rows(1), now);
	nothing_due(b, now, 0);
	buf_reset(&k.got);
	deliver(b, &low, 3, &k, now);
	CHECK(k.got.len == 0);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.state, BF_CANCELLED);
	CHECK(!backfill_watching(b, "public", "a"));
	buf_free(&k.got);
	backfill_set_free(b);
}

/* Changes the stream reports: the key by column name, from the old tuple when there is one; a key
 * change drops both rows; a change lacking a column reads the chunk again. */
static void test_changes(void)
{
	static const struct {
		const char *from, *to;
		const char *survivors;
	} cases[] = {
	    {"1", "1", "2 3"},
	    {"3", "7", "1 2"},
	    {"7", "2", "1 3"},
	    {"9", "9", "1 2 3"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_settings st = settings;
		st.max_rows = 3;
		st.min_rows = 3;
		char id[BF_ID_SIZE];
		bf_now now = {1000, 9};
		bf_set *b = started(&st, now, id);
		fake_sink k = {0};
		wmstmt low, high;
		read_chunk(b, 3, 0, &now, &low, &high);
		deliver(b, &low, 1, &k, now);
		update(b, "a", cases[i].from, cases[i].to, 5);
		update(b, "other", "2", "2", 5);
		deliver(b, &high, 2, &k, now);
		buf want = {0};
		char *copy = strdup(cases[i].survivors), *save = NULL;
		for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
			buf_printf(&want, "public.a:id=%s,v=v;", t);
		CHECK_STR(k.got.data ? k.got.data : "", want.data ? want.data : "");
		free(copy);
		buf_free(&want);
		buf_free(&k.got);
		backfill_set_free(b);
	}
	/* unchanged TOAST in the new row: the chunk is read again */
	char id[BF_ID_SIZE];
	bf_now now = {1000, 9};
	bf_set *b = started(&settings, now, id);
	fake_sink k = {0};
	wmstmt low, high;
	read_chunk(b, 2, 0, &now, &low, &high);
	deliver(b, &low, 1, &k, now);
	const char *names[] = {"id", "v"};
	bf_datum newv[] = {{"1", 1}, {NULL, BF_ABSENT}};
	bf_change ch = {
	    .schema = "public", .table = "a", .xid = 9, .ncols = 2, .names = names, .new_values = newv};
	backfill_on_change(b, &ch);
	answer(b, &high.s, 1, 1, (const char *[]){"0/2"}, now);
	deliver(b, &high, 2, &k, now);
	CHECK(k.got.len == 0);
	next(b, BF_STMT_LOW, now);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.p.retries, 1);
	backfill_set_free(b);
}

/* The translatable parts of the subscription's and the request's `where` go into the chunk query. */
static void test_where(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 9};
	bf_request req = {.subscription = "s",
			  .sub_tables = only_a,
			  .nsub_tables = 1,
			  .sub_where = "new.v = 'x'",
			  .where = "new.id > 1 and new.v <> new.id"};
	bf_set *b = start_request(&settings, &req, now, id);
	wmstmt low = next_wm(b, BF_STMT_LOW, now);
	answer(b, &low.s, 1, 1, (const char *[]){"0/1"}, now);
	bf_stmt s = next(b, BF_STMT_CHUNK, now);
	CHECK_STR(s.sql,
		  "SELECT (SELECT pg_catalog.pg_current_snapshot()::pg_catalog.text), \"id\", \"v\" FROM "
		  "\"public\".\"a\" WHERE ((\"v\" COLLATE \"C\" = 'x') AND (\"id\" > 1)) ORDER BY "
		  "\"id\" LIMIT 2");
	backfill_set_free(b);
}

/* The POST body: what is accepted, and the message of each refusal. */
static void test_request(void)
{
	static const struct {
		const char *body, *err, *json;
	} cases[] = {
	    {"", NULL, "{\"tables\":[],\"where\":null}"},
	    {" \n", NULL, "{\"tables\":[],\"where\":null}"},
	    {"{}", NULL, "{\"tables\":[],\"where\":null}"},
	    {"{\"tables\":[\"public.orders\",\"app.*\"],\"where\":\"new.id > 5\"}\n", NULL,
	     "{\"tables\":[\"public.orders\",\"app.*\"],\"where\":\"new.id > 5\"}"},
	    {"{\"tables\":[\"\\\"Odd.Name\\\".t\"],\"where\":null}", NULL,
	     "{\"tables\":[\"\\\"Odd.Name\\\".t\"],\"where\":null}"},
	    {"[1]", "body: expected an object with \"tables\" and \"where\""},
	    {"{\"tables\":", "body: not JSON (unexpected end of data)"},
	    {"{} {}", "body: not JSON (bytes after the object)"},
	    {"{\"tables\":\"public.a\"}", "tables: expected an array of \"schema.table\" strings"},
	    {"{\"tables\":[\"public.a\",2]}", "tables[1]: expected a string"},
	    {"{\"tables\":[\"public\"]}", "tables[0]: not of the form schema.table"},
	    {"{\"tables\":[\"a.b.c\"]}", "tables[0]: not of the form schema.table"},
	    {"{\"tables\":[\".t\"]}", "tables[0]: not of the form schema.table"},
	    {"{\"where\":5}", "where: expected a string"},
	    {"{\"where\":\"new.a =\"}", "where: position 7: expected a value after '='"},
	    {"{\"table\":[]}", "unknown key 'table' (a backfill takes \"tables\" and \"where\")"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bf_request_body r;
		char err[256] = "";
		bool ok = bf_request_parse(cases[i].body, strlen(cases[i].body), &r, err, sizeof(err));
		CHECK_INT(ok, cases[i].err == NULL);
		if (!ok) {
			CHECK_STR(err, cases[i].err);
			continue;
		}
		buf j = {0};
		bf_request_json(&r, &j);
		CHECK_STR(j.data, cases[i].json);
		buf_free(&j);
		bf_request_free(&r);
	}
}

/* cdc backfill --wait's lines, from the JSON of GET /backfills: while it runs the share of the
 * estimate, once it is over what was read and delivered (never a share: "failed, 0 of 0 rows
 * (100%)" was printed). */
static void test_progress(void)
{
	static const char json[] =
	    "[{\"id\":\"aa\",\"subscription\":\"s\",\"state\":\"done\",\"rows_read\":1696,"
	    "\"rows_delivered\":83,\"rows_filtered\":1613,\"estimate\":1696,\"eta_seconds\":0},"
	    "{\"id\":\"bb\",\"subscription\":\"s\",\"state\":\"failed\",\"error\":\"no table\","
	    "\"rows_read\":0,\"rows_delivered\":0,\"estimate\":0,\"eta_seconds\":null,\"tables\":[]},"
	    "{\"id\":\"4f2a\",\"subscription\":\"orders\",\"state\":\"running\",\"where\":null,"
	    "\"error\":null,\"rows_read\":12345,\"rows_delivered\":12000,\"rows_dropped\":345,\"chunks_"
	    "retried\":0,"
	    "\"estimate\":50000,\"rows_per_second\":1234,\"eta_seconds\":31,\"tables\":["
	    "{\"schema\":\"public\",\"table\":\"orders\",\"state\":\"running\",\"key\":\"orders_pkey\","
	    "\"error\":null,\"rows_read\":12345,\"rows_delivered\":12000,\"estimate\":50000,"
	    "\"rows_per_second\":1234,\"eta_seconds\":31},"
	    "{\"schema\":\"public\",\"table\":\"items\",\"state\":\"queued\",\"key\":null,\"error\":null,"
	    "\"rows_read\":0,\"estimate\":null,\"rows_per_second\":0,\"eta_seconds\":null},"
	    "{\"schema\":\"public\",\"table\":\"log\",\"state\":\"failed\",\"key\":null,"
	    "\"error\":\"no key\",\"rows_read\":0,\"estimate\":7200000,\"rows_per_second\":0,"
	    "\"eta_seconds\":null}]}]";
	buf out = {0};
	char state[32], err[128];
	CHECK(backfill_progress(json, strlen(json), "4f2a", false, &out, state, sizeof(state), err,
				sizeof(err)));
	CHECK_STR(state, "running");
	CHECK_STR(
	    out.data,
	    "backfill 4f2a of orders: running, 12,345 of 50,000 rows read (24%), 12,000 delivered, "
	    "1,234 rows/s, ETA 0:31\n"
	    "  public.orders  running, 12,345 of 50,000 rows read (24%), 12,000 delivered, 1,234 rows/s, "
	    "ETA 0:31\n"
	    "  public.items  queued, 0 rows read, 0 delivered\n"
	    "  public.log  failed, 0 rows read, 0 delivered\n"
	    "    no key\n");
	buf_reset(&out);
	CHECK(
	    backfill_progress(json, strlen(json), "aa", false, &out, state, sizeof(state), err, sizeof(err)));
	CHECK_STR(state, "done");
	CHECK_STR(out.data, "backfill aa of s: done, 1,696 rows read, 83 delivered\n");
	buf_reset(&out);
	CHECK(
	    backfill_progress(json, strlen(json), "bb", false, &out, state, sizeof(state), err, sizeof(err)));
	CHECK_STR(out.data, "backfill bb of s: failed, 0 rows read, 0 delivered\n  no table\n");
	buf_reset(&out);
	CHECK(backfill_progress(json, strlen(json), "4f2a", true, &out, state, sizeof(state), err,
				sizeof(err)));
	CHECK(strstr(out.data, "  public.orders  [#######.......................] running") != NULL);
	CHECK(strstr(out.data, "  public.items  [..............................] queued") != NULL);
	buf_reset(&out);
	CHECK(backfill_progress(json, strlen(json), "gone", false, &out, state, sizeof(state), err,
				sizeof(err)));
	CHECK_STR(state, "");
	CHECK(!backfill_progress("{}", 2, "x", false, &out, state, sizeof(state), err, sizeof(err)));
	CHECK_STR(err, "GET /backfills: not a JSON array");
	buf_free(&out);
}

/* A change through a spill record and back. */
static void test_change_encoding(void)
{
	const char *names[] = {"id", "v"};
	bf_datum oldv[] = {{"1", 1}, {NULL, BF_ABSENT}}, newv[] = {{"2", 1}, {NULL, -1}};
	bf_change in[] = {
	    {.schema = "public",
	     .table = "a",
	     .ncols = 2,
	     .names = names,
	     .old_values = oldv,
	     .new_values = newv,
	     .partial = true},
	    {.schema = "s", .table = "t", .ncols = 2, .names = names, .new_values = newv},
	    {.schema = "s", .table = "t", .truncate = true},
	};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		buf b = {0};
		backfill_change_encode(&in[i], &b);
		bf_change out;
		CHECK(backfill_change_decode(b.data, b.len, &out));
		CHECK_STR(out.schema, in[i].schema);
		CHECK_STR(out.table, in[i].table);
		CHECK_INT(out.ncols, in[i].ncols);
		CHECK_INT(out.truncate, in[i].truncate);
		CHECK_INT(out.partial, in[i].partial);
		CHECK_INT(out.old_values != NULL, in[i].old_values != NULL);
		CHECK_INT(out.new_values != NULL, in[i].new_values != NULL);
		for (size_t k = 0; k < out.ncols; k++) {
			CHECK_STR(out.names[k], names[k]);
			if (out.old_values)
				CHECK_INT(out.old_values[k].len, in[i].old_values[k].len);
			if (out.new_values)
				CHECK_INT(out.new_values[k].len, in[i].new_values[k].len);
		}
		backfill_change_free(&out);
		/* every cut is refused */
		for (size_t cut = 0; cut < b.len; cut++)
			CHECK(!backfill_change_decode(b.data, cut, &out));
		buf_free(&b);
	}
}

int main(void)
{
	test_change_encoding();
	test_progress();
	test_request();
	test_where();
	test_life();
	test_chunk_size();
	test_rate_limit();
	test_read_ahead();
	test_failures();
	test_cancel_restart();
	test_changes();
	return TEST_SUMMARY("test_backfill");
}

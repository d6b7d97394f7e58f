/* test_backfill.c: the backfill state machine (cdc/backfill/backfill.c) driven as the daemon drives
 * it: fake lanes answer its statements (COPY rows one by one), a fake stream delivers its
 * watermarks and changes, a fake sink records the reads. Block ranges read on two lanes at once,
 * the watermark rule through them, a crash and the resume from the durable ranges, a keyless table,
 * rows read again by key after an incomplete change, retries (a change without its key, rows past
 * max_bytes, a snapshot race), chained watermarks, estimates, failures with their messages; the
 * range and key sets underneath. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdc/backfill/backfill.h"
#include "cdc/backfill/backfill_internal.h"
#include "cdc/backfill/request.h"
#include "cdc/cli/backfill_cmd.h"
#include "decoder/base/fsutil.h"
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

/* A statement handed to a lane, with its watermark's content kept (the parameters live only until
 * the lane's next statement). */
typedef struct st {
	bf_stmt s;
	unsigned lane;
	char wm[64];
	char sql[2048];
} st;

static st next_on(bf_set *b, unsigned ln, bf_stmt_kind kind, bf_now now)
{
	st x = {.lane = ln};
	uint64_t wake;
	bool ok = backfill_next(b, ln, now, &x.s, &wake);
	CHECK(ok);
	if (ok && x.s.kind != kind)
		fprintf(stderr, "lane %u: statement %d, want %d: %s\n", ln, x.s.kind, kind, x.s.sql);
	CHECK_INT(x.s.kind, kind);
	if (ok && (x.s.kind == BF_STMT_LOW || x.s.kind == BF_STMT_HIGH))
		snprintf(x.wm, sizeof(x.wm), "%s", x.s.params[0]);
	if (ok)
		snprintf(x.sql, sizeof(x.sql), "%s", x.s.sql);
	return x;
}

/* The lane that writes the high watermarks: the last. */
static unsigned writer(const bf_set *b)
{
	return backfill_lanes(b) - 1;
}

static void nothing_on(bf_set *b, unsigned ln, bf_now now)
{
	bf_stmt s;
	uint64_t wake;
	bool got = backfill_next(b, ln, now, &s, &wake);
	if (got)
		fprintf(stderr, "lane %u: unexpected statement %d: %s\n", ln, s.kind, s.sql);
	CHECK(!got);
}

static void answer(bf_set *b, const st *x, int nrows, int ncols, const char *const *cells, bf_now now)
{
	res r = {nrows, ncols, cells};
	bf_result br = {nrows, ncols, &r, res_value, res_length, res_isnull};
	backfill_result(b, x->lane, x->s.ticket, &br, now);
}

/* A watermark statement's result (its LSN, which the backfill does not use). */
static void written(bf_set *b, const st *x, bf_now now)
{
	answer(b, x, 1, 1, (const char *[]){"0/1"}, now);
}

/* A chunk's snapshot and rows, then its end. Each line is "\\N\t" and a row in COPY's text format,
 * or the snapshot and a tab. */
static void copy(bf_set *b, const st *x, const char *const *lines, bf_now now)
{
	for (size_t i = 0; lines && lines[i]; i++) {
		const char *l = lines[i];
		if (strncmp(l, "\\N\t", 3) == 0)
			backfill_copy_row(b, x->lane, x->s.ticket, l + 3, strlen(l + 3));
		else
			backfill_copy_snapshot(b, x->lane, x->s.ticket, l, strcspn(l, "\t"));
	}
	answer(b, x, 0, 0, NULL, now);
}

/* The reads emitted, as "table:id=v,...;" per row; a row whose second column is filter is left
 * out, as a `where` would. */
typedef struct fake_sink {
	buf got;
	uint64_t lsn;
	const char *filter;
	size_t nkeys;
} fake_sink;

static bool emit(void *ctx, const bf_batch *batch, size_t *delivered, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	fake_sink *s = ctx;
	s->lsn = batch->lsn;
	s->nkeys = batch->nkeys;
	bf_datum v[8];
	size_t pos = 0, n = 0;
	while (backfill_batch_next(batch, &pos, v)) {
		n++;
		if (s->filter && v[1].len == (int32_t)strlen(s->filter) &&
		    memcmp(v[1].data, s->filter, strlen(s->filter)) == 0)
			continue;
		(*delivered)++;
		buf_printf(&s->got, "%s:", batch->table);
		for (size_t i = 0; i < batch->ncols; i++)
			buf_printf(&s->got, "%s%s=%.*s", i ? "," : "", batch->cols[i].name,
				   v[i].len < 0 ? 4 : v[i].len, v[i].len < 0 ? "null" : v[i].data);
		buf_putc(&s->got, ';');
	}
	CHECK_INT(n, batch->nrows);
	return true;
}

static void deliver(bf_set *b, const char *wm, uint64_t lsn, fake_sink *k, bf_now now)
{
	char err[256];
	CHECK(backfill_on_message(b, wm, strlen(wm), lsn, now, emit, k, err, sizeof(err)));
}

/* A change of table's row id (to new_id; new_id NULL: a delete) by xid; partial: its new row lacks
 * column v (unchanged TOAST). */
static void change(bf_set *b, const char *tbl, const char *id, const char *new_id, uint32_t xid, bool partial)
{
	const char *names[] = {"id", "v"};
	bf_datum oldv[] = {{id, (int32_t)strlen(id)}, {NULL, BF_ABSENT}};
	bf_datum newv[] = {{new_id, new_id ? (int32_t)strlen(new_id) : 0}, {"new", partial ? BF_ABSENT : 3}};
	bool moved = !new_id || strcmp(id, new_id) != 0;
	bf_change c = {.schema = "public",
		       .table = tbl,
		       .xid = xid,
		       .ncols = 2,
		       .names = names,
		       .old_values = moved ? oldv : NULL,
		       .new_values = new_id ? newv : NULL};
	backfill_on_change(b, &c);
}

static const bf_settings settings = {.chunk_ms = 250,
				     .min_rows = 1,
				     .max_rows = 2,
				     .max_bytes = 1 << 20,
				     .tables = 1,
				     .parallel = 2,
				     .publication = "pub"};

static const char *const check_ok[] = {"cdc", "t", "pg_logical_emit_message(boolean,text,text)"};

/* Table public.NAME (oid) as bfsql_tables lists it. */
#define TABLE_ROW(name, oid, relkind, key, select) "public", name, oid, relkind, key, select

/* public.a's description: id int4 (the key), v text; reltuples 4. */
static const char *const describe_a[] = {
    "id", "23", "pg_catalog", "int4", "1",  "a_pkey", "r", "t", "4", "-1", "d", "16384",
    "v",  "25", "pg_catalog", "text", NULL, "a_pkey", "r", "t", "4", "-1", "d", "16384",
};

/* public.a: 4 blocks, one row each by its statistics. */
static const char *const leaves_a[] = {"16384", "public", "a", "4", "4", "4", "t"};

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
	static char text[16384];
	size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[n] = '\0';
	if (f)
		fclose(f);
	return text;
}

/* The sinks made everything up to flushed durable; the state file written as the daemon does (when
 * path is given). */
static void delivered(bf_set *b, uint64_t flushed, bf_now now, const char *path)
{
	backfill_delivered(b, flushed, now);
	buf state = {0};
	char err[256];
	if (backfill_state(b, &state) && path)
		CHECK(fsutil_replace(path, state.data, state.len, 0600, err, sizeof(err)));
	buf_free(&state);
}

/* A set with one backfill of subscription s over public.a (or what pats says), its checks
 * answered with tables (ntables rows of bfsql_tables). */
static bf_set *started(const bf_settings *s, const char *path, const char *const *pats, size_t npats,
		       const char *const *tables, int ntables, bf_now now, char id[BF_ID_SIZE])
{
	char err[256];
	bf_set *b = backfill_set_new(s, path, 42);
	bf_request req = {.subscription = "s", .sub_tables = pats, .nsub_tables = npats, .snapshot = true};
	CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
	st x = next_on(b, 0, BF_STMT_CHECK, now);
	answer(b, &x, 1, 3, check_ok, now);
	x = next_on(b, 0, BF_STMT_TABLES, now);
	answer(b, &x, ntables, 6, tables, now);
	return b;
}

static const char *const only_a[] = {"public.a"};
static const char *const table_a[] = {TABLE_ROW("a", "16384", "r", "a_pkey", "t")};

/* public.a described and listed on lane 0, its one relation as rel (bfsql_leaves' row) says. */
static bf_set *listed_a(const bf_settings *s, const char *path, bf_now now, char id[BF_ID_SIZE],
			const char *const *rel)
{
	bf_set *b = started(s, path, only_a, 1, table_a, 1, now, id);
	st x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	CHECK_STR(x.s.params[1], "a");
	answer(b, &x, 2, 12, describe_a, now);
	x = next_on(b, 0, BF_STMT_LEAVES, now);
	CHECK_STR(x.s.params[0], "16384");
	answer(b, &x, 1, 7, rel, now);
	return b;
}

static bf_set *reading_a(const bf_settings *s, const char *path, bf_now now, char id[BF_ID_SIZE])
{
	return listed_a(s, path, now, id, leaves_a);
}

/* public.a read on one lane, in chunks of max_rows rows at most and max_bytes. */
static bf_set *one_lane(uint64_t max_rows, size_t max_bytes, bf_now now, char id[BF_ID_SIZE])
{
	bf_settings s = settings;
	s.parallel = 1;
	s.max_rows = max_rows;
	s.max_bytes = max_bytes;
	return reading_a(&s, NULL, now, id);
}

/* Lane 0's first chunk: its low watermark written and brought by the stream at lsn, its COPY sent. */
static st first_chunk(bf_set *b, uint64_t lsn, fake_sink *k, bf_now now)
{
	st low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	st c = next_on(b, 0, BF_STMT_CHUNK, now);
	deliver(b, low.wm, lsn, k, now);
	return c;
}

/* Two block ranges of public.a read at once on two lanes, each between its own watermarks; a change
 * inside both windows; a crash with one range durable, and the resume that reads only the other. */
static void test_life(void)
{
	char *path = state_path(), err[512], id[BF_ID_SIZE];
	bf_now now = {1000, 1700000000000};
	bf_set *b = reading_a(&settings, path, now, id);
	CHECK(backfill_watching(b, "public", "a"));
	CHECK(!backfill_watching(b, "public", "b"));
	CHECK_INT(backfill_lanes(b), 3); /* two read, one writes the high watermarks */
	nothing_on(b, writer(b), now);

	st low0 = next_on(b, 0, BF_STMT_LOW, now), low1 = next_on(b, 1, BF_STMT_LOW, now);
	CHECK(strncmp(low0.wm, id, 16) == 0 && strstr(low0.wm, ":low") != NULL);
	CHECK(strcmp(low0.wm, low1.wm) != 0);
	nothing_on(b, 0, now); /* busy */
	written(b, &low0, now);
	written(b, &low1, now);
	st c0 = next_on(b, 0, BF_STMT_CHUNK, now), c1 = next_on(b, 1, BF_STMT_CHUNK, now);
	CHECK_STR(
	    c0.sql,
	    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT "
	    "pg_catalog.pg_current_snapshot()::pg_catalog.text; COPY (SELECT \"id\", \"v\" FROM ONLY "
	    "\"public\".\"a\" WHERE ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(2,0)'::pg_catalog.tid) TO "
	    "STDOUT");
	CHECK(strstr(c1.sql, "ctid >= '(2,0)'::pg_catalog.tid AND ctid < '(4,0)'::pg_catalog.tid") != NULL);
	CHECK_INT(c0.s.nparams, 0);
	fake_sink k = {.filter = "z"};	     /* a where that leaves v = 'z' out */
	change(b, "a", "1", "1", 90, false); /* before the low watermarks: nothing to drop */
	deliver(b, low0.wm, 10, &k, now);
	deliver(b, low1.wm, 11, &k, now);
	change(b, "a", "2", "2", 91, false); /* inside both windows: row 2 is dropped */
	copy(b, &c0, (const char *[]){"\\N\t1\tx\n", "95:95:\t\\N\t\\N\n", "\\N\t2\ty\n", NULL}, now);
	copy(b, &c1, (const char *[]){"95:95:\t\\N\t\\N\n", "\\N\t3\tz\n", "\\N\t4\tw\\tx\n", NULL}, now);
	/* the writer writes the high watermarks one at a time, of the chunk read first first */
	st h0 = next_on(b, writer(b), BF_STMT_HIGH, now);
	CHECK(strstr(h0.wm, ":high") != NULL);
	CHECK(strncmp(h0.wm, low0.wm, 33) == 0); /* the id and lane 0's chunk's nonce */
	nothing_on(b, writer(b), now);		 /* busy */
	written(b, &h0, now);
	st h1 = next_on(b, writer(b), BF_STMT_HIGH, now);
	/* lane 1's reaches the stream first (a stream that replays from before, say); lane 0's before
	 * its statement returns */
	deliver(b, h1.wm, 20, &k, now);
	CHECK_STR(k.got.data, "a:id=4,v=w\tx;");
	CHECK_INT(k.lsn, 20);
	CHECK_INT(k.nkeys, 1);
	deliver(b, h0.wm, 21, &k, now);
	written(b, &h1, now);
	CHECK_STR(k.got.data, "a:id=4,v=w\tx;a:id=1,v=x;");
	nothing_on(b, writer(b), now);
	nothing_on(b, 0, now);
	nothing_on(b, 1, now);
	CHECK(backfill_draining(b));

	/* only lane 1's range is durable when cdc dies */
	delivered(b, 20, now, path);
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.state, BF_RUNNING);
	/* read = delivered (rows 1, 4) + dropped (row 2) + filtered (row 3) */
	CHECK_INT(info.p.read, 4);
	CHECK_INT(info.p.delivered, 2);
	CHECK_INT(info.p.dropped, 1);
	CHECK_INT(info.p.filtered, 1);
	CHECK_INT(info.p.blocks, 4);
	CHECK_INT(info.p.blocks_read, 4);
	CHECK(strstr(slurp(path),
		     "\"blocks\":4,\"rows_per_block_milli\":1000,\"gone\":false,\"done\":[2,4]") != NULL);
	CHECK(strstr(slurp(path), "\"key\":[\"id\"]") != NULL);
	backfill_set_free(b);

	/* the restarted daemon reads blocks 0 and 1 only, and ignores the watermarks replayed */
	b = backfill_set_new(&settings, path, 7);
	CHECK(backfill_set_load(b, err, sizeof(err)));
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.p.read, 2);
	CHECK(backfill_watching(b, "public", "a")); /* before it is described again */
	buf_reset(&k.got);
	st x = next_on(b, 0, BF_STMT_CHECK, now);
	answer(b, &x, 1, 3, check_ok, now);
	x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	answer(b, &x, 2, 12, describe_a, now);
	st low = next_on(b, 0, BF_STMT_LOW, now);
	nothing_on(b, 1, now);
	written(b, &low, now);
	st c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c.sql, "ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(2,0)'::pg_catalog.tid") != NULL);
	deliver(b, h0.wm, 21, &k, now); /* replayed from before the crash */
	deliver(b, low.wm, 30, &k, now);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", "\\N\t2\ty2\n", "97:97:\t\\N\t\\N\n", NULL}, now);
	st h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	deliver(b, h.wm, 40, &k, now);
	CHECK_STR(k.got.data, "a:id=1,v=x;a:id=2,v=y2;");
	delivered(b, 40, now, path);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_STR(ti.key, "a_pkey");
	CHECK_INT(ti.p.read, 4);
	CHECK(!backfill_watching(b, "public", "a"));
	CHECK(!backfill_active(b));
	buf_free(&k.got);
	backfill_set_free(b);
}

/* A table without a key: the whole row is the key of its window; its events have every column as
 * their key with REPLICA IDENTITY FULL, none without. */
static void test_keyless(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 1};
	static const char *const pats[] = {"public.k"}, *const tables[] = {
							    TABLE_ROW("k", "16400", "r", NULL, "t")};
	for (int full = 0; full < 2; full++) {
		const char *ri = full ? "f" : "d";
		const char *describe[] = {
		    "id", "23", "pg_catalog", "int4", NULL, NULL, "r", "t", "2", "-1", ri, "16400",
		    "v",  "25", "pg_catalog", "text", NULL, NULL, "r", "t", "2", "-1", ri, "16400",
		};
		bf_settings s = settings;
		s.parallel = 1;
		s.max_rows = 10;
		bf_set *b = started(&s, NULL, pats, 1, tables, 1, now, id);
		st x = next_on(b, 0, BF_STMT_DESCRIBE, now);
		answer(b, &x, 2, 12, describe, now);
		x = next_on(b, 0, BF_STMT_LEAVES, now);
		answer(b, &x, 1, 7, (const char *[]){"16400", "public", "k", "1", "1", "2", "t"}, now);
		st low = next_on(b, 0, BF_STMT_LOW, now);
		written(b, &low, now);
		st c = next_on(b, 0, BF_STMT_CHUNK, now);
		fake_sink k = {0};
		deliver(b, low.wm, 10, &k, now);
		/* the row (1, x) changes inside the window (its old row whole): that read is dropped; (1, y)
		 * is another row */
		const char *names[] = {"id", "v"};
		bf_datum oldv[] = {{"1", 1}, {"x", 1}}, newv[] = {{"1", 1}, {"x2", 2}};
		bf_change ch = {.schema = "public",
				.table = "k",
				.xid = 5,
				.ncols = 2,
				.names = names,
				.old_values = oldv,
				.new_values = newv};
		backfill_on_change(b, &ch);
		copy(b, &c, (const char *[]){"\\N\t1\tx\n", "\\N\t1\ty\n", "4:4:\t\\N\t\\N\n", NULL}, now);
		st h = next_on(b, writer(b), BF_STMT_HIGH, now);
		written(b, &h, now);
		deliver(b, h.wm, 20, &k, now);
		CHECK_STR(k.got.data, "k:id=1,v=y;");
		CHECK_INT(k.nkeys, full ? 2 : 0);
		bf_table_info ti;
		backfill_table_info(b, 0, 0, now, &ti);
		CHECK(ti.key == NULL);
		CHECK_INT(ti.p.dropped, 1);
		buf_free(&k.got);
		backfill_set_free(b);
	}
}

/* A row the stream carries incomplete (unchanged TOAST) while a range is still to be read may have
 * moved into a range read already: its key is read again once the ranges are read, kept in the
 * state file until then. A change inside that chunk's window marks it once more. */
static void test_read_again(void)
{
	char *path = state_path(), err[512], id[BF_ID_SIZE];
	bf_now now = {1000, 1};
	bf_settings s = settings;
	s.parallel = 1;
	bf_set *b = reading_a(&s, path, now, id);
	fake_sink k = {0};
	/* range [0, 2) read */
	st c = first_chunk(b, 10, &k, now);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", "\\N\t2\ty\n", "9:9:\t\\N\t\\N\n", NULL}, now);
	st h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	/* the lane waits for the stream to bring its high watermark, then reads its next range at
	 * once: that watermark stands for the next chunk's low one */
	nothing_on(b, 0, now);
	deliver(b, h.wm, 20, &k, now);
	st c2 = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c2.sql, "ctid >= '(2,0)'") != NULL);
	delivered(b, 20, now, path);
	/* row 3, not read yet, moves (say into block 0) with its v unchanged, and 9 with it */
	change(b, "a", "3", "3", 30, true);
	change(b, "a", "9", "9", 31, true);
	delivered(b, 21, now, path);
	CHECK(strstr(slurp(path), "\"read_again\":[") != NULL);
	CHECK(strstr(slurp(path), "\"0000000133\"") != NULL && strstr(slurp(path), "\"0000000139\"") != NULL);
	copy(b, &c2, (const char *[]){"\\N\t4\tw\n", "9:9:\t\\N\t\\N\n", NULL}, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	deliver(b, h.wm, 40, &k, now);
	CHECK_STR(k.got.data, "a:id=1,v=x;a:id=2,v=y;a:id=4,v=w;");
	delivered(b, 40, now, path);
	/* every range read: the keys come next, and a change after that needs no reading again */
	change(b, "a", "4", "4", 41, true);
	c = next_on(b, 0, BF_STMT_CHUNK, now); /* the lane's last high watermark came: open at once */
	CHECK(strstr(c.sql, "FROM \"public\".\"a\" WHERE \"id\" IN (VALUES ('") != NULL);
	CHECK(strstr(c.sql, "'3'::\"pg_catalog\".\"int4\"") != NULL &&
	      strstr(c.sql, "'9'::\"pg_catalog\".\"int4\"") != NULL);
	CHECK(strstr(c.sql, "'4'") == NULL);
	change(b, "a", "9", "9", 51, true); /* inside this chunk's window: 9 once more */
	copy(b, &c, (const char *[]){"\\N\t3\tz\n", "\\N\t9\tq\n", "50:50:\t\\N\t\\N\n", NULL}, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	buf_reset(&k.got);
	deliver(b, h.wm, 60, &k, now);
	CHECK_STR(k.got.data, "a:id=3,v=z;");
	delivered(b, 60, now, path);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_RUNNING);
	CHECK(strstr(slurp(path), "\"read_again\":[\"0000000139\"]") != NULL);
	/* a crash now: the key is read again after the restart */
	backfill_set_free(b);
	b = backfill_set_new(&s, path, 9);
	CHECK(backfill_set_load(b, err, sizeof(err)));
	st x = next_on(b, 0, BF_STMT_CHECK, now);
	answer(b, &x, 1, 3, check_ok, now);
	x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	answer(b, &x, 2, 12, describe_a, now);
	st kc = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &kc, now);
	c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c.sql, "\"id\" IN (VALUES ('9'::\"pg_catalog\".\"int4\"))") != NULL);
	deliver(b, kc.wm, 70, &k, now);
	copy(b, &c, (const char *[]){"\\N\t9\tq2\n", "60:60:\t\\N\t\\N\n", NULL}, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	buf_reset(&k.got);
	deliver(b, h.wm, 80, &k, now);
	CHECK_STR(k.got.data, "a:id=9,v=q2;");
	delivered(b, 80, now, path);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_INT(ti.p.read, 6);
	buf_free(&k.got);
	backfill_set_free(b);
}

/* One lane, a chunk a block: the lane's next chunk is ahead, its window open from the moment the COPY
 * before it went. Its COPY goes as soon as the chunk before it is read, once the stream brought the
 * high watermark of the one before that (the writer writes them). A change that comes while it waits
 * drops its row. */
static void test_ahead(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 1};
	bf_set *b = one_lane(1, settings.max_bytes, now, id);
	const unsigned w = writer(b);
	fake_sink k = {0};
	st c0 = first_chunk(b, 10, &k, now);
	CHECK(strstr(c0.sql, "ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(1,0)'") != NULL);
	copy(b, &c0, (const char *[]){"\\N\t1\tx\n", NULL}, now);
	nothing_on(b, 0, now); /* no chunk ahead yet: the stream brings c0's high watermark first */
	st h0 = next_on(b, w, BF_STMT_HIGH, now);
	written(b, &h0, now);
	nothing_on(b, 0, now);
	deliver(b, h0.wm, 20, &k, now);
	CHECK_STR(k.got.data, "a:id=1,v=x;");
	st c1 = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c1.sql, "ctid >= '(1,0)'::pg_catalog.tid AND ctid < '(2,0)'") != NULL);
	change(b, "a", "3", "3", 91, false); /* in the window of the chunk ahead, blocks 2 to 3 */
	copy(b, &c1, (const char *[]){"\\N\t2\ty\n", NULL}, now);
	st c2 = next_on(b, 0, BF_STMT_CHUNK, now); /* at once: c0 is through, c1's high watermark due */
	CHECK(strstr(c2.sql, "ctid >= '(2,0)'::pg_catalog.tid AND ctid < '(3,0)'") != NULL);
	st h1 = next_on(b, w, BF_STMT_HIGH, now);
	written(b, &h1, now);
	copy(b, &c2, (const char *[]){"\\N\t3\tz\n", NULL}, now);
	nothing_on(b, 0, now); /* c1 is not through: two chunks the stream has yet to close at most */
	st h2 = next_on(b, w, BF_STMT_HIGH, now);
	written(b, &h2, now);
	deliver(b, h1.wm, 30, &k, now);
	st c3 = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c3.sql, "ctid >= '(3,0)'::pg_catalog.tid AND ctid < '(4,0)'") != NULL);
	deliver(b, h2.wm, 40, &k, now);
	CHECK_STR(k.got.data, "a:id=1,v=x;a:id=2,v=y;"); /* row 3 dropped: the stream carries it */
	copy(b, &c3, (const char *[]){"\\N\t4\tw\n", NULL}, now);
	nothing_on(b, 0, now); /* nothing left to read */
	st h3 = next_on(b, w, BF_STMT_HIGH, now);
	written(b, &h3, now);
	deliver(b, h3.wm, 50, &k, now);
	CHECK_STR(k.got.data, "a:id=1,v=x;a:id=2,v=y;a:id=4,v=w;");
	delivered(b, 50, now, NULL);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_INT(ti.p.read, 4);
	CHECK_INT(ti.p.dropped, 1);
	buf_free(&k.got);
	backfill_set_free(b);
}

/* A chunk is read again: a change without its key in its window (in halves), rows past max_bytes
 * (no high watermark: its range goes back), a commit its snapshot did not see that the stream
 * brought before its low watermark. */
static void test_retries(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 1};
	bf_set *b = one_lane(4, settings.max_bytes, now, id);
	fake_sink k = {0};

	/* a change without its key */
	st c = first_chunk(b, 10, &k, now);
	CHECK(strstr(c.sql, "ctid < '(4,0)'") != NULL);
	const char *names[] = {"v"};
	bf_datum newv[] = {{"x", 1}};
	bf_change nokey = {
	    .schema = "public", .table = "a", .xid = 5, .ncols = 1, .names = names, .new_values = newv};
	backfill_on_change(b, &nokey);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", "9:9:\t\\N\t\\N\n", NULL}, now);
	st h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	deliver(b, h.wm, 20, &k, now);
	CHECK_STR(k.got.data ? k.got.data : "", "");
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.retries, 1);
	CHECK_INT(ti.p.read, 0);

	/* read again in halves (blocks 0 and 1 first), at once after the high watermark; a commit the
	 * stream brought before it that the chunk's snapshot still saw in progress */
	change(b, "a", "7", "7", 95, false);
	st again = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(again.sql, "ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(2,0)'") != NULL);
	copy(b, &again, (const char *[]){"\\N\t1\tx\n", "90:100:95\t\\N\t\\N\n", NULL}, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	deliver(b, h.wm, 30, &k, now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.retries, 2);
	/* the chunk ahead (picked as the retried one's COPY went) first, then the retried range */
	st third = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(third.sql, "ctid >= '(2,0)'") != NULL);
	copy(b, &third, NULL, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	st fourth = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(fourth.sql, "ctid >= '(0,0)'") != NULL);
	backfill_set_free(b);

	/* rows past max_bytes: no high watermark, smaller next time */
	b = one_lane(4, 40, now, id);
	c = first_chunk(b, 10, &k, now);
	copy(b, &c,
	     (const char *[]){"\\N\t1\txxxxxxxxxxxxxxxx\n", "\\N\t2\tyyyyyyyyyyyyyyyyyy\n", "\\N\t3\tz\n",
			      NULL},
	     now);
	st low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c.sql, "ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(1,0)'") != NULL);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.retries, 1);
	backfill_set_free(b);
}

/* Failures: a statement that fails (the table with it), one that loses its connection (done again),
 * one whose table changed under it (described again), rows that are not what the COPY asked for,
 * a leaf the role may not read. */
static void test_failures(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 5};
	bf_settings s = settings;
	s.parallel = 1;
	bf_set *b = reading_a(&s, NULL, now, id);
	st low = next_on(b, 0, BF_STMT_LOW, now);
	backfill_error(b, 0, low.s.ticket, "server closed the connection", true, false, now);
	low = next_on(b, 0, BF_STMT_LOW, now);
	CHECK(strstr(low.wm, ":low") != NULL);
	written(b, &low, now);
	st c = next_on(b, 0, BF_STMT_CHUNK, now);
	backfill_error(b, 0, c.s.ticket, "column \"v\" does not exist", false, true, now);
	st x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	answer(b, &x, 2, 12, describe_a, now);
	low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c.sql, "ctid >= '(0,0)'") != NULL);
	backfill_error(b, 0, c.s.ticket, "ERROR:  canceling statement due to statement timeout", false, false,
		       now);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_FAILED);
	CHECK_STR(ti.error, "ERROR:  canceling statement due to statement timeout");
	bf_info info;
	backfill_info(b, 0, now, &info);
	CHECK_INT(info.state, BF_FAILED);
	nothing_on(b, 0, now);
	backfill_set_free(b);

	/* the writer loses its connection writing a chunk's high watermark: the chunk is read again;
	 * a high watermark that fails otherwise fails the table */
	b = reading_a(&s, NULL, now, id);
	low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	c = next_on(b, 0, BF_STMT_CHUNK, now);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", NULL}, now);
	st h = next_on(b, writer(b), BF_STMT_HIGH, now);
	backfill_error(b, writer(b), h.s.ticket, "server closed the connection", true, false, now);
	nothing_on(b, writer(b), now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_RUNNING);
	CHECK_INT(ti.p.retries, 1);
	c = next_on(b, 0, BF_STMT_CHUNK, now); /* at once, its window open before the COPY */
	CHECK(strstr(c.sql, "ctid >= '(0,0)'") != NULL);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", NULL}, now);
	h = next_on(b, writer(b), BF_STMT_HIGH, now);
	backfill_error(b, writer(b), h.s.ticket,
		       "ERROR:  permission denied for function pg_logical_emit_message", false, false, now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_FAILED);
	CHECK_STR(ti.error, "ERROR:  permission denied for function pg_logical_emit_message");
	nothing_on(b, writer(b), now);
	backfill_set_free(b);

	/* a row of three fields where two were asked for */
	b = reading_a(&s, NULL, now, id);
	low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	c = next_on(b, 0, BF_STMT_CHUNK, now);
	copy(b, &c, (const char *[]){"\\N\t1\tx\tmore\n", NULL}, now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_FAILED);
	CHECK_STR(ti.error, "a row of a chunk of public.a: the row has more than 2 fields");
	backfill_set_free(b);

	/* a leaf the role may not read */
	b = listed_a(&s, NULL, now, id, (const char *[]){"16384", "public", "a_2026", "4", "4", "4", "f"});
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_STR(
	    ti.error,
	    "role cdc may not read public.a_2026: run GRANT SELECT ON \"public\".\"a_2026\" TO \"cdc\"");
	backfill_set_free(b);

	/* refused by the checks */
	static const struct {
		const char *tables[6];
		int n;
		const char *error;
	} refused[] = {
	    {{0}, 0, "subscription s has no table in publication pub"},
	    {{TABLE_ROW("a", "16384", "r", "a_pkey", "f")},
	     1,
	     "role cdc may not read public.a: run GRANT SELECT ON \"public\".\"a\" TO \"cdc\""},
	    {{TABLE_ROW("a", "16384", "v", NULL, "t")}, 1, "public.a is not a table (relkind 'v')"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		b = started(&s, NULL, only_a, 1, refused[i].tables, refused[i].n, now, id);
		const char *why;
		CHECK_INT(backfill_verdict(b, id, &why), BF_REFUSED);
		CHECK_STR(why, refused[i].error);
		backfill_set_free(b);
	}
}

/* Estimates: from the statistics (rows per page times the blocks now), from the rows read per block
 * read (a table never analyzed: after its first chunk), and none before that. */
static void test_estimates(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 5};
	bf_settings s = settings;
	s.parallel = 1;
	s.max_rows = 1000;
	bf_set *b = started(&s, NULL, only_a, 1, table_a, 1, now, id);
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.estimate, -1);
	CHECK(ti.p.estimate_from == NULL);
	st x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	static const char *const never[] = {
	    "id", "23", "pg_catalog", "int4", "1",  "a_pkey", "r", "t", "-1", "-1", "d", "16384",
	    "v",  "25", "pg_catalog", "text", NULL, "a_pkey", "r", "t", "-1", "-1", "d", "16384",
	};
	answer(b, &x, 2, 12, never, now);
	x = next_on(b, 0, BF_STMT_LEAVES, now);
	answer(b, &x, 1, 7, (const char *[]){"16384", "public", "a", "1000", "0", "-1", "t"}, now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.estimate, -1);
	CHECK_INT(ti.p.blocks, 1000);
	/* the first chunk is one block (how many rows a block holds is not known yet) */
	st low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	st c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK(strstr(c.sql, "ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(1,0)'") != NULL);
	fake_sink k = {0};
	deliver(b, low.wm, 10, &k, now);
	copy(b, &c, (const char *[]){"\\N\t1\tx\n", "\\N\t2\tx\n", "\\N\t3\tx\n", "9:9:\t\\N\t\\N\n", NULL},
	     now);
	st h = next_on(b, writer(b), BF_STMT_HIGH, now);
	written(b, &h, now);
	deliver(b, h.wm, 20, &k, now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.estimate, 3000);
	CHECK_STR(ti.p.estimate_from, "size");
	buf j = {0};
	backfill_json(b, &j, NULL, now);
	CHECK(strstr(j.data,
		     "\"estimate\":3000,\"estimate_from\":\"size\",\"blocks\":1000,\"blocks_read\":1") !=
	      NULL);
	buf_free(&j);
	delivered(b, 20, now, NULL);
	buf_free(&k.got);
	backfill_set_free(b);

	/* with statistics: 4 rows in 2 pages, the table 10 blocks now */
	b = listed_a(&s, NULL, now, id, (const char *[]){"16384", "public", "a", "10", "2", "4", "t"});
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.p.estimate, 20);
	CHECK_STR(ti.p.estimate_from, "statistics");
	backfill_set_free(b);

	/* an empty table: nothing to read, done at once */
	b = listed_a(&s, NULL, now, id, (const char *[]){"16384", "public", "a", "0", "0", "-1", "t"});
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_INT(ti.p.estimate, 0);
	backfill_set_free(b);
}

/* A partitioned table: read by its leaves' block ranges, each COPY only while the leaf is still one
 * of its partitions, the rows under the root's name; its leaves listed once more when all it knew
 * are read (one attached meanwhile is read too, one detached is not). */
static void test_partitioned(void)
{
	char id[BF_ID_SIZE];
	bf_now now = {1000, 5};
	bf_settings s = settings;
	s.parallel = 1;
	s.max_rows = 10;
	static const char *const pats[] = {"public.ev"};
	static const char *const tables[] = {TABLE_ROW("ev", "16500", "p", "ev_pkey", "t")};
	static const char *const describe[] = {
	    "id", "23", "pg_catalog", "int4", "1",  "ev_pkey", "p", "t", "0", "-1", "d", "16500",
	    "v",  "25", "pg_catalog", "text", NULL, "ev_pkey", "p", "t", "0", "-1", "d", "16500",
	};
	bf_set *b = started(&s, NULL, pats, 1, tables, 1, now, id);
	st x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	answer(b, &x, 2, 12, describe, now);
	x = next_on(b, 0, BF_STMT_LEAVES, now);
	CHECK_STR(x.s.params[0], "16500");
	answer(b, &x, 2, 7,
	       (const char *[]){"16501", "part", "ev_1", "1", "1", "5", "t", "16502", "part", "ev_2", "1",
				"1", "5", "t"},
	       now);
	fake_sink k = {0};
	uint64_t lsn = 10;
	static const char *const expect[] = {"ev_1", "ev_2", "ev_3"};
	for (int i = 0; i < 3; i++) {
		if (i == 2) {
			/* all it knew is durable: its leaves once more; ev_3 was attached, ev_2 detached */
			x = next_on(b, 0, BF_STMT_LEAVES, now);
			answer(b, &x, 2, 7,
			       (const char *[]){"16501", "part", "ev_1", "1", "1", "5", "t", "16503", "part",
						"ev_3", "1", "1", "5", "t"},
			       now);
		}
		/* the second chunk is the lane's next after a high watermark that came: no low one */
		st low = {0};
		if (i != 1) {
			low = next_on(b, 0, BF_STMT_LOW, now);
			written(b, &low, now);
		}
		st c = next_on(b, 0, BF_STMT_CHUNK, now);
		char want[512];
		snprintf(want, sizeof(want),
			 "FROM ONLY \"part\".\"%s\" WHERE ctid >= '(0,0)'::pg_catalog.tid AND ctid < "
			 "'(1,0)'::pg_catalog.tid AND EXISTS (WITH RECURSIVE up(rel) AS (SELECT "
			 "%d::pg_catalog.oid",
			 expect[i], 16501 + i);
		CHECK(strstr(c.sql, want) != NULL);
		CHECK(strstr(c.sql, "WHERE up.rel = 16500::pg_catalog.oid)") != NULL);
		if (i != 1)
			deliver(b, low.wm, lsn++, &k, now);
		char row[32];
		snprintf(row, sizeof(row), "\\N\t%d\tx\n", i + 1);
		copy(b, &c, (const char *[]){row, "9:9:\t\\N\t\\N\n", NULL}, now);
		st h = next_on(b, writer(b), BF_STMT_HIGH, now);
		written(b, &h, now);
		deliver(b, h.wm, lsn, &k, now);
		delivered(b, lsn++, now, NULL);
	}
	/* the rows under the root's name */
	CHECK_STR(k.got.data, "ev:id=1,v=x;ev:id=2,v=x;ev:id=3,v=x;");
	bf_table_info ti;
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_RUNNING); /* listed once more after ev_3 */
	CHECK_INT(ti.p.blocks, 3);	 /* ev_2's one block read before it went */
	x = next_on(b, 0, BF_STMT_LEAVES, now);
	answer(b, &x, 2, 7,
	       (const char *[]){"16501", "part", "ev_1", "1", "1", "5", "t", "16503", "part", "ev_3", "1",
				"1", "5", "t"},
	       now);
	backfill_table_info(b, 0, 0, now, &ti);
	CHECK_INT(ti.state, BF_DONE);
	CHECK_INT(ti.p.read, 3);
	buf_free(&k.got);
	backfill_set_free(b);
}

/* The sets underneath: block ranges and keys. */
static void test_sets(void)
{
	rset a = {0}, t = {0};
	backfill_ranges_add(&a, 4, 6);
	backfill_ranges_add(&a, 0, 2);
	backfill_ranges_add(&a, 2, 3); /* joins [0, 2) */
	CHECK_INT(a.n, 4);
	CHECK_INT(a.v[0], 0);
	CHECK_INT(a.v[1], 3);
	CHECK_INT(backfill_ranges_blocks(&a, 10), 5);
	CHECK_INT(backfill_ranges_blocks(&a, 5), 4);
	uint32_t lo, hi;
	CHECK(backfill_ranges_first_gap(&a, &t, 0, 10, 100, &lo, &hi));
	CHECK_INT(lo, 3);
	CHECK_INT(hi, 4);
	backfill_ranges_add(&t, 3, 4);
	CHECK(backfill_ranges_first_gap(&a, &t, 0, 10, 2, &lo, &hi));
	CHECK_INT(lo, 6);
	CHECK_INT(hi, 8);
	CHECK(!backfill_ranges_first_gap(&a, &t, 0, 6, 2, &lo, &hi));
	backfill_ranges_remove(&a, 1, 5); /* [0, 1) and [5, 6) stay */
	CHECK_INT(a.n, 4);
	CHECK_INT(a.v[1], 1);
	CHECK_INT(a.v[2], 5);
	backfill_ranges_free(&a);
	backfill_ranges_free(&t);

	keyset ks = {0};
	CHECK(!backfill_keys_has(&ks, "k1", 2)); /* an empty set has no table yet */
	for (int i = 0; i < 200; i++) {
		char key[8];
		int n = snprintf(key, sizeof(key), "k%d", i);
		backfill_keys_add(&ks, key, (size_t)n);
		backfill_keys_add(&ks, key, (size_t)n);
	}
	CHECK_INT(ks.n, 200);
	CHECK_INT(ks.waiting, 200);
	CHECK(backfill_keys_has(&ks, "k199", 4) && !backfill_keys_has(&ks, "k200", 4) &&
	      !backfill_keys_has(&ks, "k1", 1));
	buf taken = {0};
	CHECK_INT(backfill_keys_take(&ks, 150, &taken), 150);
	CHECK_INT(ks.waiting, 50);
	backfill_keys_give_back(&ks, &taken);
	CHECK_INT(ks.waiting, 200);
	buf_reset(&taken);
	CHECK_INT(backfill_keys_take(&ks, 500, &taken), 200);
	backfill_keys_add(&ks, "k7", 2); /* marked again while taken: it stays */
	backfill_keys_done(&ks, &taken);
	CHECK_INT(ks.n, 1);
	CHECK_INT(ks.waiting, 1);
	CHECK(backfill_keys_has(&ks, "k7", 2) &&
	      !backfill_keys_has(&ks, "k8", 2)); /* taken and done: forgotten */
	buf_free(&taken);
	backfill_keys_free(&ks);
}

/* The `where`s' parts that translate go into the COPY. */
static void test_where(void)
{
	char id[BF_ID_SIZE], err[256];
	bf_now now = {1000, 9};
	bf_settings s = settings;
	s.parallel = 1;
	bf_set *b = backfill_set_new(&s, NULL, 3);
	bf_request req = {.subscription = "s",
			  .sub_tables = only_a,
			  .nsub_tables = 1,
			  .sub_where = "new.v = 'x'",
			  .where = "new.id > 1 and new.v <> new.id"};
	CHECK(backfill_add(b, &req, now, id, err, sizeof(err)));
	st x = next_on(b, 0, BF_STMT_CHECK, now);
	answer(b, &x, 1, 3, check_ok, now);
	x = next_on(b, 0, BF_STMT_TABLES, now);
	answer(b, &x, 1, 6, table_a, now);
	x = next_on(b, 0, BF_STMT_COLUMNS, now);
	answer(b, &x, 2, 4, (const char *[]){"16384", "id", "23", "int4", "16384", "v", "25", "text"}, now);
	x = next_on(b, 0, BF_STMT_DESCRIBE, now);
	answer(b, &x, 2, 12, describe_a, now);
	x = next_on(b, 0, BF_STMT_LEAVES, now);
	answer(b, &x, 1, 7, leaves_a, now);
	st low = next_on(b, 0, BF_STMT_LOW, now);
	written(b, &low, now);
	st c = next_on(b, 0, BF_STMT_CHUNK, now);
	CHECK_STR(
	    c.sql,
	    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; SELECT "
	    "pg_catalog.pg_current_snapshot()::pg_catalog.text; COPY (SELECT \"id\", \"v\" FROM ONLY "
	    "\"public\".\"a\" WHERE ctid >= '(0,0)'::pg_catalog.tid AND ctid < '(2,0)'::pg_catalog.tid AND "
	    "((\"v\" COLLATE \"C\" = 'x') AND (\"id\" > 1))) TO STDOUT");
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
		bool ok = backfill_request_parse(cases[i].body, strlen(cases[i].body), &r, err, sizeof(err));
		CHECK_INT(ok, cases[i].err == NULL);
		if (!ok) {
			CHECK_STR(err, cases[i].err);
			continue;
		}
		buf j = {0};
		backfill_request_json(&r, &j);
		CHECK_STR(j.data, cases[i].json);
		buf_free(&j);
		backfill_request_free(&r);
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
	    "\"estimate\":50000,\"estimate_from\":\"size\",\"rows_per_second\":1234,\"eta_seconds\":31,"
	    "\"tables\":["
	    "{\"schema\":\"public\",\"table\":\"orders\",\"state\":\"running\",\"key\":\"orders_pkey\","
	    "\"error\":null,\"rows_read\":12345,\"rows_delivered\":12000,\"estimate\":50000,"
	    "\"estimate_from\":\"size\","
	    "\"rows_per_second\":1234,\"eta_seconds\":31},"
	    "{\"schema\":\"public\",\"table\":\"items\",\"state\":\"queued\",\"key\":null,\"error\":null,"
	    "\"rows_read\":0,\"estimate\":null,\"rows_per_second\":0,\"eta_seconds\":null},"
	    "{\"schema\":\"public\",\"table\":\"log\",\"state\":\"failed\",\"key\":null,"
	    "\"error\":\"no key\",\"rows_read\":0,\"estimate\":7200000,\"rows_per_second\":0,"
	    "\"eta_seconds\":null}]}]";
	buf out = {0};
	char state[32], err[128];
	CHECK(cli_backfill_progress(json, strlen(json), "4f2a", false, &out, state, sizeof(state), err,
				    sizeof(err)));
	CHECK_STR(state, "running");
	CHECK_STR(
	    out.data,
	    "backfill 4f2a of orders: running, 12,345 of about 50,000 rows read (24%), 12,000 delivered, "
	    "1,234 rows/s, ETA 0:31\n"
	    "  public.orders  running, 12,345 of about 50,000 rows read (24%), 12,000 delivered, 1,234 "
	    "rows/s, ETA 0:31\n"
	    "  public.items  queued, 0 rows read, 0 delivered\n"
	    "  public.log  failed, 0 rows read, 0 delivered\n"
	    "    no key\n");
	buf_reset(&out);
	CHECK(cli_backfill_progress(json, strlen(json), "aa", false, &out, state, sizeof(state), err,
				    sizeof(err)));
	CHECK_STR(state, "done");
	CHECK_STR(out.data, "backfill aa of s: done, 1,696 rows read, 83 delivered\n");
	buf_reset(&out);
	CHECK(cli_backfill_progress(json, strlen(json), "bb", false, &out, state, sizeof(state), err,
				    sizeof(err)));
	CHECK_STR(out.data, "backfill bb of s: failed, 0 rows read, 0 delivered\n  no table\n");
	buf_reset(&out);
	CHECK(cli_backfill_progress(json, strlen(json), "4f2a", true, &out, state, sizeof(state), err,
				    sizeof(err)));
	CHECK(strstr(out.data, "  public.orders  [#######.......................] running") != NULL);
	CHECK(strstr(out.data, "  public.items  [..............................] queued") != NULL);
	buf_reset(&out);
	CHECK(cli_backfill_progress(json, strlen(json), "gone", false, &out, state, sizeof(state), err,
				    sizeof(err)));
	CHECK_STR(state, "");
	CHECK(!cli_backfill_progress("{}", 2, "x", false, &out, state, sizeof(state), err, sizeof(err)));
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
	test_sets();
	test_change_encoding();
	test_progress();
	test_request();
	test_where();
	test_life();
	test_keyless();
	test_read_again();
	test_ahead();
	test_retries();
	test_failures();
	test_estimates();
	test_partitioned();
	return TEST_SUMMARY("test_backfill");
}

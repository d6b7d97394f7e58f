/* test_txn.c: unit tests for the transaction assembler. Feeds hand-built pgoutput messages
 * (encoded as PostgreSQL's proto.c writes them) and asserts the exact handler calls. */
#include "decoder/txn.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"

/* ---- encoding pgoutput messages ---- */

typedef struct msg {
	uint8_t d[4096];
	size_t n;
} msg;

static msg M; /* the message being built: every enc_* fills it and returns it */

static msg *m_start(char type)
{
	M.n = 0;
	M.d[M.n++] = (uint8_t)type;
	return &M;
}

static void p8(uint8_t v)
{
	M.d[M.n++] = v;
}

static void p16(uint16_t v)
{
	p8((uint8_t)(v >> 8));
	p8((uint8_t)v);
}

static void p32(uint32_t v)
{
	p16((uint16_t)(v >> 16));
	p16((uint16_t)v);
}

static void p64(uint64_t v)
{
	p32((uint32_t)(v >> 32));
	p32((uint32_t)v);
}

/* Times are given in microseconds since the Unix epoch; the wire counts from 2000-01-01. */
static void ptime(int64_t unix_us)
{
	p64((uint64_t)(unix_us - PGO_EPOCH_OFFSET_US));
}

static void pstr(const char *s)
{
	size_t n = strlen(s) + 1;
	memcpy(M.d + M.n, s, n);
	M.n += n;
}

/* sx: the xid a message inside a stream block carries first; 0 outside stream blocks. */
static void pxid(uint32_t sx)
{
	if (sx)
		p32(sx);
}

/* A tuple of text columns; "~" is sent as NULL. */
static void ptuple(int n, const char *const *vals)
{
	p16((uint16_t)n);
	for (int i = 0; i < n; i++) {
		if (strcmp(vals[i], "~") == 0) {
			p8('n');
			continue;
		}
		p8('t');
		p32((uint32_t)strlen(vals[i]));
		memcpy(M.d + M.n, vals[i], strlen(vals[i]));
		M.n += strlen(vals[i]);
	}
}

static msg *enc_begin(pgo_lsn final_lsn, int64_t time, uint32_t xid)
{
	m_start('B');
	p64(final_lsn);
	ptime(time);
	p32(xid);
	return &M;
}

static msg *enc_commit(pgo_lsn commit_lsn, pgo_lsn end_lsn, int64_t time)
{
	m_start('C');
	p8(0);
	p64(commit_lsn);
	p64(end_lsn);
	ptime(time);
	return &M;
}

static msg *enc_origin(pgo_lsn lsn, const char *name)
{
	m_start('O');
	p64(lsn);
	pstr(name);
	return &M;
}

/* A relation in schema public whose columns are all text; the first is the key. */
static msg *enc_relation(uint32_t sx, uint32_t relid, const char *name, int ncols, const char *const *cols)
{
	m_start('R');
	pxid(sx);
	p32(relid);
	pstr("public");
	pstr(name);
	p8('d');
	p16((uint16_t)ncols);
	for (int i = 0; i < ncols; i++) {
		p8(i == 0 ? 1 : 0);
		pstr(cols[i]);
		p32(25);
		p32(UINT32_MAX); /* typmod -1 */
	}
	return &M;
}

static msg *enc_type(uint32_t sx, uint32_t oid, const char *nsp, const char *name)
{
	m_start('Y');
	pxid(sx);
	p32(oid);
	pstr(nsp);
	pstr(name);
	return &M;
}

/* Insert and Update carry the new row ('N'), Delete the key ('K'): one tuple after the relation id. */
static msg *enc_row(char type, char kind, uint32_t sx, uint32_t relid, int n, const char *const *vals)
{
	m_start(type);
	pxid(sx);
	p32(relid);
	p8((uint8_t)kind);
	ptuple(n, vals);
	return &M;
}
#define enc_insert(sx, relid, ...) enc_row('I', 'N', (sx), (relid), __VA_ARGS__)
#define enc_update(sx, relid, ...) enc_row('U', 'N', (sx), (relid), __VA_ARGS__)
#define enc_delete(sx, relid, ...) enc_row('D', 'K', (sx), (relid), __VA_ARGS__)

static msg *enc_truncate(uint32_t sx, uint32_t rel1, uint32_t rel2)
{
	m_start('T');
	pxid(sx);
	p32(2);
	p8(1); /* CASCADE */
	p32(rel1);
	p32(rel2);
	return &M;
}

static msg *enc_message(uint32_t sx, bool transactional, pgo_lsn lsn, const char *prefix, const char *content)
{
	m_start('M');
	pxid(sx);
	p8(transactional ? 1 : 0);
	p64(lsn);
	pstr(prefix);
	p32((uint32_t)strlen(content));
	memcpy(M.d + M.n, content, strlen(content));
	M.n += strlen(content);
	return &M;
}

static msg *enc_stream_start(uint32_t xid, bool first)
{
	m_start('S');
	p32(xid);
	p8(first ? 1 : 0);
	return &M;
}

static msg *enc_stream_stop(void)
{
	return m_start('E');
}

static msg *enc_stream_commit(uint32_t xid, pgo_lsn commit_lsn, pgo_lsn end_lsn, int64_t time)
{
	m_start('c');
	p32(xid);
	p8(0);
	p64(commit_lsn);
	p64(end_lsn);
	ptime(time);
	return &M;
}

static msg *enc_stream_abort(uint32_t xid, uint32_t subxid)
{
	m_start('A');
	p32(xid);
	p32(subxid);
	return &M;
}

/* Begin Prepare ('b', no flags), Prepare ('P') and Stream Prepare ('p') share one layout. */
static msg *enc_prepare(char type, pgo_lsn prepare_lsn, pgo_lsn end_lsn, int64_t time, uint32_t xid,
			const char *gid)
{
	m_start(type);
	if (type != 'b')
		p8(0);
	p64(prepare_lsn);
	p64(end_lsn);
	ptime(time);
	p32(xid);
	pstr(gid);
	return &M;
}

static msg *enc_commit_prepared(pgo_lsn commit_lsn, pgo_lsn end_lsn, int64_t time, uint32_t xid,
				const char *gid)
{
	m_start('K');
	p8(0);
	p64(commit_lsn);
	p64(end_lsn);
	ptime(time);
	p32(xid);
	pstr(gid);
	return &M;
}

static msg *enc_rollback_prepared(pgo_lsn prepare_end_lsn, pgo_lsn rollback_end_lsn, uint32_t xid,
				  const char *gid)
{
	m_start('r');
	p8(0);
	p64(prepare_end_lsn);
	p64(rollback_end_lsn);
	ptime(10);
	ptime(20);
	p32(xid);
	pstr(gid);
	return &M;
}

/* One-column and two-column rows. */
/* clang-format off */
#define ROW1(a) 1, (const char *const[]){a}
#define ROW2(a, b) 2, (const char *const[]){a, b}
/* clang-format on */

/* ---- a handler that logs every call ---- */

typedef struct fixture {
	char dir[64];
	pgo_relcache *rc;
	txn_assembler *a;
	buf log;
	/* Large-transaction mode: changes are checked, not logged. */
	bool big;
	long next_row;
	pgo_lsn last_lsn;
	long bad_rows;
	long replayed; /* large-transaction mode: records replayed in order */
	pgo_lsn last_replayed;
	/* Held changes' positions (each takes one: "<tx_index>", "s" if a savepoint), rollback()
	 * ("R<tx_index>") and abort() ("A<xid>") calls, in order. */
	buf calls;
} fixture;

static void log_info_tail(buf *b, const txn_info *t)
{
	if (t->origin)
		buf_printf(b, " o=%s", t->origin);
	if (t->gid)
		buf_printf(b, " g=%s", t->gid);
	buf_putc(b, '\n');
}

static bool h_begin(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	fixture *f = ctx;
	char c[LSN_STRLEN], e[LSN_STRLEN];
	(void)err;
	(void)errlen;
	util_lsn_format(t->commit_lsn, c);
	util_lsn_format(t->end_lsn, e);
	buf_printf(&f->log, "B%u c%s e%s t%lld", t->xid, c, e, (long long)t->commit_time);
	log_info_tail(&f->log, t);
	return true;
}

static bool h_commit(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	fixture *f = ctx;
	char c[LSN_STRLEN], e[LSN_STRLEN];
	(void)err;
	(void)errlen;
	util_lsn_format(t->commit_lsn, c);
	util_lsn_format(t->end_lsn, e);
	buf_printf(&f->log, "C%u c%s e%s", t->xid, c, e);
	log_info_tail(&f->log, t);
	return true;
}

static void log_tuple(buf *b, const pgo_tuple *t)
{
	for (int i = 0; i < t->ncols; i++) {
		if (i)
			buf_putc(b, ',');
		if (t->cols[i].kind == PGO_NULL)
			buf_puts(b, "~");
		else
			buf_append(b, t->cols[i].data, t->cols[i].len);
	}
}

/* Large-transaction mode: each change is checked as it arrives; its record is its LSN. */
static bool big_change(fixture *f, const pgo_msg *m, pgo_lsn lsn, buf *hold)
{
	char want[32];
	snprintf(want, sizeof(want), "%ld", f->next_row);
	if (m->type != PGO_INSERT || m->change.new.ncols != 2 || m->change.new.cols[1].len != 100 ||
	    m->change.new.cols[0].len != strlen(want) ||
	    memcmp(m->change.new.cols[0].data, want, strlen(want)) != 0 || lsn <= f->last_lsn)
		f->bad_rows++;
	f->next_row++;
	f->last_lsn = lsn;
	if (hold)
		buf_append(hold, &lsn, sizeof(lsn));
	return true;
}

/* Rows "fail" and "silent" make the handler fail when they are delivered (not while held). */
static bool refuse(const char *row, size_t len, char *err, size_t errlen, bool *refused)
{
	*refused = true;
	if (len == 4 && memcmp(row, "fail", 4) == 0)
		return util_errf(err, errlen, "handler refuses row 'fail'");
	if (len == 6 && memcmp(row, "silent", 6) == 0)
		return false;
	*refused = false;
	return true;
}

/* Logs the change; in a held transaction the log line is the change's record, logged at replay. */
static bool h_change(void *ctx, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold,
		     uint32_t *positions, char *err, size_t errlen)
{
	fixture *f = ctx;
	buf *b = hold ? hold : &f->log;
	char l[LSN_STRLEN];
	bool refused;

	if (hold) {
		*positions = 1;
		buf_printf(&f->calls, "%u%s ", t->tx_index, t->savepoint ? "s" : "");
	}
	if (f->big)
		return big_change(f, m, lsn, hold);
	if (!hold && m->type == PGO_INSERT && m->change.new.ncols == 1) {
		const pgo_datum *d = &m->change.new.cols[0];
		bool ok = refuse(d->data, d->len, err, errlen, &refused);
		if (refused)
			return ok;
	}
	util_lsn_format(lsn, l);
	buf_puts(b, t ? "  " : "");
	switch (m->type) {
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE: {
		const pgo_rel *r = pgo_relcache_get(f->rc, m->change.relid);
		const pgo_tuple *tp = m->type == PGO_DELETE ? &m->change.old : &m->change.new;
		buf_printf(b, "%c r%u %u/%d ", (char)m->type, m->change.relid, tp->ncols, r ? r->ncols : -1);
		log_tuple(b, tp);
		break;
	}
	case PGO_TRUNCATE:
		buf_printf(b, "T r%u,r%u", pgo_truncate_relid(m, 0), pgo_truncate_relid(m, 1));
		break;
	case PGO_MESSAGE:
		buf_printf(b, "M%s %s:%.*s", t ? "" : "-", m->message.prefix, (int)m->message.len,
			   m->message.content);
		break;
	default:
		buf_printf(b, "?%c", (char)m->type);
		break;
	}
	buf_printf(b, " @%s", l);
	if (t && t->origin)
		buf_printf(b, " o=%s", t->origin);
	buf_putc(b, '\n');
	return true;
}

static bool h_replay(void *ctx, const txn_info *t, const uint8_t *rec, size_t len, char *err, size_t errlen)
{
	fixture *f = ctx;
	bool refused;
	(void)t;
	if (f->big) {
		pgo_lsn lsn;
		if (len != sizeof(lsn))
			return util_errf(err, errlen, "record of %zu bytes", len);
		memcpy(&lsn, rec, sizeof(lsn));
		if (lsn <= f->last_replayed)
			f->bad_rows++;
		f->last_replayed = lsn;
		f->replayed++;
		return true;
	}
	/* A record is "  I r1 1/1 <row> @<lsn>\n": the row sits between the fourth space and " @". */
	const char *row = memchr(rec, '/', len), *end = memmem(rec, len, " @", 2);
	if (row && end && row < end && (row = memchr(row, ' ', (size_t)(end - row))) != NULL) {
		bool ok = refuse(row + 1, (size_t)(end - row - 1), err, errlen, &refused);
		if (refused)
			return ok;
	}
	buf_append(&f->log, rec, len);
	return true;
}

static bool h_rollback(void *ctx, uint32_t xid, uint32_t tx_index, char *err, size_t errlen)
{
	fixture *f = ctx;
	(void)xid, (void)err, (void)errlen;
	buf_printf(&f->calls, "R%u ", tx_index);
	return true;
}

static void h_abort(void *ctx, uint32_t xid)
{
	fixture *f = ctx;
	buf_printf(&f->calls, "A%u ", xid);
}

static const txn_handler handler = {.begin = h_begin,
				    .change = h_change,
				    .replay = h_replay,
				    .commit = h_commit,
				    .rollback = h_rollback,
				    .abort = h_abort};
static const pgo_options opts = {.proto_version = 4};

static void fx_init(fixture *f)
{
	char err[256];
	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_txn.XXXXXX");
	if (!mkdtemp(f->dir)) {
		perror("mkdtemp");
		exit(2);
	}
	f->rc = pgo_relcache_new();
	txn_handler h = handler;
	h.ctx = f;
	f->a = pgo_txn_new(f->dir, &opts, f->rc, &h, err, sizeof(err));
	if (!f->a) {
		fprintf(stderr, "txn_new: %s\n", err);
		exit(2);
	}
}

/* Number of spill files in the fixture's directory. */
static int fx_files(const fixture *f)
{
	int n = 0;
	struct dirent *e;
	DIR *d = opendir(f->dir);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "txn-", 4) == 0)
			n++;
	closedir(d);
	return n;
}

/* What the daemon does after a reconnect: a new assembler on the same directory and cache. */
static void fx_restart(fixture *f)
{
	char err[256];
	pgo_txn_free(f->a);
	txn_handler h = handler;
	h.ctx = f;
	f->a = pgo_txn_new(f->dir, &opts, f->rc, &h, err, sizeof(err));
	if (!f->a) {
		fprintf(stderr, "txn_new: %s\n", err);
		exit(2);
	}
}

static void fx_done(fixture *f)
{
	pgo_txn_free(f->a);
	pgo_relcache_free(f->rc);
	buf_free(&f->log);
	buf_free(&f->calls);
	if (rmdir(f->dir) != 0)
		fprintf(stderr, "rmdir %s: directory not empty after txn_free\n", f->dir);
}

/* The log so far, then cleared. */
static const char *fx_log(fixture *f)
{
	static char copy[1 << 16];
	snprintf(copy, sizeof(copy), "%s", f->log.data ? f->log.data : "");
	buf_reset(&f->log);
	return copy;
}

static bool feed_at(fixture *f, const msg *m, pgo_lsn lsn, int line)
{
	char err[512];
	if (pgo_txn_feed(f->a, m->d, m->n, lsn, err, sizeof(err)))
		return true;
	fprintf(stderr, "%s:%d: txn_feed failed: %s\n", __FILE__, line, err);
	return false;
}

#define FEED(f, lsn, m) CHECK(feed_at((f), (m), (lsn), __LINE__))

/* Feeds a message that must fail; returns the error. */
static const char *feed_err(fixture *f, const msg *m, pgo_lsn lsn)
{
	static char err[512];
	if (pgo_txn_feed(f->a, m->d, m->n, lsn, err, sizeof(err)))
		return "(succeeded)";
	return err;
}

static const char *const COLS2[] = {"id", "v"};

/* ---- tests ---- */

static void test_plain(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_begin(0x200, 1000, 700));
	CHECK(pgo_txn_in_progress(f.a));
	FEED(&f, 0x108, enc_relation(0, 1, "t1", 2, COLS2));
	FEED(&f, 0x110, enc_insert(0, 1, ROW2("1", "a")));
	FEED(&f, 0x120, enc_update(0, 1, ROW2("1", "~")));
	FEED(&f, 0x130, enc_delete(0, 1, ROW1("1")));
	FEED(&f, 0x140, enc_truncate(0, 1, 2));
	FEED(&f, 0x150, enc_message(0, true, 0x150, "app", "hello"));
	FEED(&f, 0x200, enc_commit(0x200, 0x208, 1000));
	CHECK(!pgo_txn_in_progress(f.a));
	CHECK_STR(fx_log(&f), "B700 c0/200 e0/0 t1000\n"
			      "  I r1 2/2 1,a @0/110\n"
			      "  U r1 2/2 1,~ @0/120\n"
			      "  D r1 1/2 1 @0/130\n"
			      "  T r1,r2 @0/140\n"
			      "  M app:hello @0/150\n"
			      "C700 c0/200 e0/208\n");
	/* A Type message is applied to the cache. */
	FEED(&f, 0x300, enc_begin(0x400, 2000, 701));
	FEED(&f, 0x308, enc_type(0, 90001, "public", "mood"));
	FEED(&f, 0x400, enc_commit(0x400, 0x408, 2000));
	CHECK_STR(pgo_type_name_of(f.rc, 90001), "public.mood");
	CHECK_STR(fx_log(&f), "B701 c0/400 e0/0 t2000\nC701 c0/400 e0/408\n");
	CHECK_INT(fx_files(&f), 0);
	fx_done(&f);
}

static void test_origin_and_nontx_message(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_begin(0x200, 1000, 700));
	FEED(&f, 0x101, enc_origin(0x5000, "node1"));
	FEED(&f, 0x108, enc_relation(0, 1, "t1", 2, COLS2));
	FEED(&f, 0x110, enc_insert(0, 1, ROW2("1", "a")));
	FEED(&f, 0x200, enc_commit(0x200, 0x208, 1000));
	/* A non-transactional message outside a transaction goes straight out with t == NULL. */
	FEED(&f, 0x210, enc_message(0, false, 0x210, "audit", "ping"));
	/* The origin does not leak into the next transaction. */
	FEED(&f, 0x300, enc_begin(0x400, 2000, 701));
	FEED(&f, 0x310, enc_insert(0, 1, ROW2("2", "b")));
	FEED(&f, 0x400, enc_commit(0x400, 0x408, 2000));
	CHECK_STR(fx_log(&f), "B700 c0/200 e0/0 t1000\n"
			      "  I r1 2/2 1,a @0/110 o=node1\n"
			      "C700 c0/200 e0/208 o=node1\n"
			      "M- audit:ping @0/210\n"
			      "B701 c0/400 e0/0 t2000\n"
			      "  I r1 2/2 2,b @0/310\n"
			      "C701 c0/400 e0/408\n");
	fx_done(&f);
}

/* Two streamed transactions, interleaved with each other and with a plain one, committed in the
 * opposite order of their start. */
static void test_streams_interleaved(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_stream_start(701, true));
	FEED(&f, 0x101, enc_origin(0x9000, "up"));
	FEED(&f, 0x108, enc_relation(701, 1, "t1", 2, COLS2));
	FEED(&f, 0x110, enc_insert(701, 1, ROW2("1", "a")));
	CHECK(pgo_txn_in_progress(f.a));
	FEED(&f, 0x118, enc_stream_stop());
	CHECK(!pgo_txn_in_progress(f.a));
	FEED(&f, 0x120, enc_stream_start(702, true));
	FEED(&f, 0x128, enc_relation(702, 1, "t1", 2, COLS2));
	FEED(&f, 0x130, enc_insert(702, 1, ROW2("2", "b")));
	FEED(&f, 0x138, enc_stream_stop());
	FEED(&f, 0x140, enc_begin(0x180, 1500, 703));
	FEED(&f, 0x150, enc_insert(0, 1, ROW2("3", "plain")));
	FEED(&f, 0x180, enc_commit(0x180, 0x188, 1500));
	FEED(&f, 0x190, enc_stream_start(701, false));
	FEED(&f, 0x198, enc_update(701, 1, ROW2("1", "aa")));
	FEED(&f, 0x1a0, enc_stream_stop());
	FEED(&f, 0x1a8, enc_stream_start(702, false));
	FEED(&f, 0x1b0, enc_delete(702, 1, ROW1("2")));
	FEED(&f, 0x1b8, enc_message(702, true, 0x1b8, "p", "x"));
	FEED(&f, 0x1c0, enc_stream_stop());
	CHECK_STR(fx_log(&f), "B703 c0/180 e0/0 t1500\n"
			      "  I r1 2/2 3,plain @0/150\n"
			      "C703 c0/180 e0/188\n");
	txn_stats s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.streamed_open, 2);
	CHECK_INT(s.prepared_open, 0);
	CHECK(s.spilled_bytes > 0);
	CHECK_INT(fx_files(&f), 2);

	FEED(&f, 0x500, enc_stream_commit(702, 0x4f0, 0x500, 3000));
	FEED(&f, 0x600, enc_stream_commit(701, 0x5f0, 0x600, 4000));
	CHECK_STR(fx_log(&f), "B702 c0/4F0 e0/500 t3000\n"
			      "  I r1 2/2 2,b @0/130\n"
			      "  D r1 1/2 2 @0/1B0\n"
			      "  M p:x @0/1B8\n"
			      "C702 c0/4F0 e0/500\n"
			      "B701 c0/5F0 e0/600 t4000 o=up\n"
			      "  I r1 2/2 1,a @0/110 o=up\n"
			      "  U r1 2/2 1,aa @0/198 o=up\n"
			      "C701 c0/5F0 e0/600 o=up\n");
	s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.streamed_open, 0);
	CHECK_INT(s.spilled_bytes, 0);
	CHECK_INT(fx_files(&f), 0);
	fx_done(&f);
}

static void test_stream_abort(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_stream_start(710, true));
	FEED(&f, 0x108, enc_relation(710, 1, "t1", 2, COLS2));
	FEED(&f, 0x110, enc_insert(710, 1, ROW2("1", "a")));
	FEED(&f, 0x118, enc_stream_stop());
	CHECK_INT(fx_files(&f), 1);
	FEED(&f, 0x200, enc_stream_abort(710, 710));
	CHECK_STR(fx_log(&f), "");
	buf_putc(&f.calls, '\0');
	CHECK_STR(f.calls.data, "0 A710 ");
	CHECK_INT(fx_files(&f), 0);
	txn_stats s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.streamed_open, 0);
	CHECK_INT(s.aborted, 1);
	CHECK_INT(s.spilled_bytes, 0);
	/* The relation stays known: the server will not send it again. */
	CHECK(pgo_relcache_get(f.rc, 1) != NULL);
	/* A transaction PostgreSQL marked streamed without streaming any of it (found aborted
	 * before its first change): its Stream Abort comes alone, and nothing is held for it. */
	size_t calls = f.calls.len;
	FEED(&f, 0x300, enc_stream_abort(711, 711));
	FEED(&f, 0x308, enc_stream_abort(712, 713));
	CHECK_STR(fx_log(&f), "");
	CHECK_INT(f.calls.len, calls);
	CHECK_INT(pgo_txn_get_stats(f.a).aborted, 1);
	/* the stream goes on */
	FEED(&f, 0x400, enc_stream_start(714, true));
	FEED(&f, 0x408, enc_insert(714, 1, ROW2("2", "b")));
	FEED(&f, 0x410, enc_stream_stop());
	FEED(&f, 0x500, enc_stream_abort(714, 714));
	CHECK_INT(pgo_txn_get_stats(f.a).aborted, 2);
	fx_done(&f);
}

/* T=720: INSERT a; SAVEPOINT s1; INSERT b (721); SAVEPOINT s2; INSERT c (722); ROLLBACK TO s2;
 * INSERT d (721); ROLLBACK TO s1; INSERT e; SAVEPOINT s3; INSERT f (723); RELEASE s3; INSERT g. */
static void test_subxact_abort(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_stream_start(720, true));
	FEED(&f, 0x108, enc_relation(720, 1, "t1", 1, COLS2));
	FEED(&f, 0x110, enc_insert(720, 1, ROW1("a")));
	FEED(&f, 0x120, enc_insert(721, 1, ROW1("b")));
	FEED(&f, 0x130, enc_insert(722, 1, ROW1("c")));
	FEED(&f, 0x138, enc_stream_stop());
	uint64_t before = pgo_txn_get_stats(f.a).spilled_bytes;
	FEED(&f, 0x140, enc_stream_abort(720, 722));
	CHECK(pgo_txn_get_stats(f.a).spilled_bytes < before);
	FEED(&f, 0x150, enc_stream_start(720, false));
	FEED(&f, 0x160, enc_insert(721, 1, ROW1("d")));
	FEED(&f, 0x168, enc_stream_stop());
	FEED(&f, 0x170, enc_stream_abort(720, 721));
	/* A subtransaction that sent nothing: nothing to discard. */
	FEED(&f, 0x178, enc_stream_abort(720, 799));
	FEED(&f, 0x180, enc_stream_start(720, false));
	FEED(&f, 0x190, enc_insert(720, 1, ROW1("e")));
	FEED(&f, 0x1a0, enc_insert(723, 1, ROW1("f")));
	FEED(&f, 0x1b0, enc_insert(720, 1, ROW1("g")));
	FEED(&f, 0x1b8, enc_stream_stop());
	CHECK_STR(fx_log(&f), "");
	FEED(&f, 0x300, enc_stream_commit(720, 0x2f0, 0x300, 5000));
	CHECK_STR(fx_log(&f), "B720 c0/2F0 e0/300 t5000\n"
			      "  I r1 1/1 a @0/110\n"
			      "  I r1 1/1 e @0/190\n"
			      "  I r1 1/1 f @0/1A0\n"
			      "  I r1 1/1 g @0/1B0\n"
			      "C720 c0/2F0 e0/300\n");
	/* positions count only what is kept; each subtransaction's first change is a savepoint */
	buf_putc(&f.calls, '\0');
	CHECK_STR(f.calls.data, "0 1s 2s R2 2 R1 1 2s 3 ");
	CHECK_INT(pgo_txn_get_stats(f.a).aborted, 0);
	CHECK_INT(fx_files(&f), 0);
	fx_done(&f);
}

/* T=730: INSERT a; SAVEPOINT s1; INSERT b (731); SAVEPOINT s2; INSERT c (732); RELEASE s2;
 * INSERT d (731); ROLLBACK TO s1 (aborts 731 and, with it, 732); INSERT e. The parent's abort
 * removes its nested child's changes too, and the child's own abort, arriving after or before
 * its parent's, finds nothing left or truncates less. Both orders are tested. */
static void test_subxact_nested_parent_abort(void)
{
	for (int order = 0; order < 2; order++) {
		fixture f;
		fx_init(&f);
		FEED(&f, 0x100, enc_stream_start(730, true));
		FEED(&f, 0x108, enc_relation(730, 1, "t1", 1, COLS2));
		FEED(&f, 0x110, enc_insert(730, 1, ROW1("a")));
		FEED(&f, 0x118, enc_relation(731, 2, "t2", 1, COLS2)); /* sent for the subxact's change */
		FEED(&f, 0x120, enc_insert(731, 2, ROW1("b2")));
		FEED(&f, 0x120, enc_insert(731, 1, ROW1("b")));
		FEED(&f, 0x130, enc_insert(732, 1, ROW1("c")));
		FEED(&f, 0x140, enc_stream_stop());
		FEED(&f, 0x150, enc_stream_start(730, false));
		FEED(&f, 0x160, enc_insert(731, 1, ROW1("d")));
		FEED(&f, 0x170, enc_stream_stop());
		if (order == 0) {
			FEED(&f, 0x180, enc_stream_abort(730, 731));
			FEED(&f, 0x188, enc_stream_abort(730, 732));
		} else {
			FEED(&f, 0x180, enc_stream_abort(730, 732));
			FEED(&f, 0x188, enc_stream_abort(730, 731));
		}
		/* pgoutput resends a schema after a subtransaction abort. */
		FEED(&f, 0x190, enc_stream_start(730, false));
		FEED(&f, 0x198, enc_relation(730, 2, "t2", 1, COLS2));
		FEED(&f, 0x1a0, enc_insert(730, 2, ROW1("e")));
		FEED(&f, 0x1b0, enc_stream_stop());
		FEED(&f, 0x300, enc_stream_commit(730, 0x2f0, 0x300, 6000));
		CHECK_STR(fx_log(&f), "B730 c0/2F0 e0/300 t6000\n"
				      "  I r1 1/1 a @0/110\n"
				      "  I r2 1/1 e @0/1A0\n"
				      "C730 c0/2F0 e0/300\n");
		fx_done(&f);
	}
}

/* T=735: INSERT a; SAVEPOINT p; SAVEPOINT c; INSERT b (737); RELEASE c; INSERT d (736);
 * ROLLBACK TO p. The released child's first change comes before its parent's; the abort record
 * lists the child, so both get a Stream Abort (child first, as DecodeAbort sends them; the other
 * order is tested too). */
static void test_subxact_released_child(void)
{
	for (int order = 0; order < 2; order++) {
		fixture f;
		fx_init(&f);
		FEED(&f, 0x100, enc_stream_start(735, true));
		FEED(&f, 0x108, enc_relation(735, 1, "t1", 1, COLS2));
		FEED(&f, 0x110, enc_insert(735, 1, ROW1("a")));
		FEED(&f, 0x120, enc_insert(737, 1, ROW1("b")));
		FEED(&f, 0x130, enc_insert(736, 1, ROW1("d")));
		FEED(&f, 0x140, enc_stream_stop());
		FEED(&f, 0x150, enc_stream_abort(735, order == 0 ? 737 : 736));
		FEED(&f, 0x158, enc_stream_abort(735, order == 0 ? 736 : 737));
		FEED(&f, 0x160, enc_stream_start(735, false));
		FEED(&f, 0x170, enc_insert(735, 1, ROW1("e")));
		FEED(&f, 0x180, enc_stream_stop());
		FEED(&f, 0x300, enc_stream_commit(735, 0x2f0, 0x300, 6000));
		CHECK_STR(fx_log(&f), "B735 c0/2F0 e0/300 t6000\n"
				      "  I r1 1/1 a @0/110\n"
				      "  I r1 1/1 e @0/170\n"
				      "C735 c0/2F0 e0/300\n");
		fx_done(&f);
	}
}

/* ALTER TABLE ADD COLUMN inside a streamed transaction: each held change is decoded with the
 * schema that was current when it was sent. */
static void test_add_column_in_stream(void)
{
	static const char *const cols3[] = {"id", "v", "extra"};
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_stream_start(750, true));
	FEED(&f, 0x108, enc_relation(750, 3, "t3", 2, COLS2));
	FEED(&f, 0x110, enc_insert(750, 3, ROW2("1", "a")));
	FEED(&f, 0x118, enc_relation(750, 3, "t3", 3, cols3));
	FEED(&f, 0x120, enc_insert(750, 3, 3, (const char *const[]){"2", "b", "x"}));
	FEED(&f, 0x128, enc_stream_stop());
	/* Applied at once too: the cache holds the newest schema. */
	CHECK_INT(pgo_relcache_get(f.rc, 3)->ncols, 3);
	FEED(&f, 0x200, enc_stream_commit(750, 0x1f0, 0x200, 7000));
	CHECK_STR(fx_log(&f), "B750 c0/1F0 e0/200 t7000\n"
			      "  I r3 2/2 1,a @0/110\n"
			      "  I r3 3/3 2,b,x @0/120\n"
			      "C750 c0/1F0 e0/200\n");
	CHECK_INT(pgo_relcache_get(f.rc, 3)->ncols, 3);
	fx_done(&f);
}

static void test_prepared(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_relation(0, 1, "t1", 1, COLS2));
	/* Prepared, then committed. */
	FEED(&f, 0x700, enc_prepare('b', 0x700, 0x708, 100, 760, "g1"));
	CHECK(pgo_txn_in_progress(f.a));
	FEED(&f, 0x701, enc_origin(0x42, "far"));
	FEED(&f, 0x710, enc_insert(0, 1, ROW1("p1")));
	FEED(&f, 0x720, enc_insert(0, 1, ROW1("p2")));
	FEED(&f, 0x730, enc_prepare('P', 0x700, 0x708, 100, 760, "g1"));
	CHECK(!pgo_txn_in_progress(f.a));
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0x700);
	/* Prepared, to be rolled back. */
	FEED(&f, 0x900, enc_prepare('b', 0x900, 0x908, 200, 761, "g2"));
	FEED(&f, 0x910, enc_insert(0, 1, ROW1("r1")));
	FEED(&f, 0x920, enc_prepare('P', 0x900, 0x908, 200, 761, "g2"));
	/* Streamed, then prepared. */
	FEED(&f, 0xa00, enc_stream_start(762, true));
	FEED(&f, 0xa10, enc_insert(762, 1, ROW1("s1")));
	FEED(&f, 0xa18, enc_stream_stop());
	FEED(&f, 0xb00, enc_prepare('p', 0xb00, 0xb08, 300, 762, "g3"));
	CHECK_STR(fx_log(&f), "");
	txn_stats s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.prepared_open, 3);
	CHECK_INT(s.streamed_open, 0);
	CHECK_INT(fx_files(&f), 3);
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0x700);

	FEED(&f, 0xc00, enc_commit_prepared(0xbf0, 0xc00, 400, 760, "g1"));
	CHECK_STR(fx_log(&f), "B760 c0/BF0 e0/C00 t400 o=far g=g1\n"
			      "  I r1 1/1 p1 @0/710 o=far\n"
			      "  I r1 1/1 p2 @0/720 o=far\n"
			      "C760 c0/BF0 e0/C00 o=far g=g1\n");
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0x900);
	FEED(&f, 0xd00, enc_rollback_prepared(0x908, 0xd00, 761, "g2"));
	CHECK_STR(fx_log(&f), "");
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0xb00);
	/* A rollback of a transaction never seen prepared: nothing to discard. */
	FEED(&f, 0xd10, enc_rollback_prepared(0x100, 0xd10, 4242, "gx"));
	FEED(&f, 0xe00, enc_commit_prepared(0xdf0, 0xe00, 500, 762, "g3"));
	CHECK_STR(fx_log(&f), "B762 c0/DF0 e0/E00 t500 g=g3\n"
			      "  I r1 1/1 s1 @0/A10\n"
			      "C762 c0/DF0 e0/E00 g=g3\n");
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0);
	s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.prepared_open, 0);
	CHECK_INT(s.aborted, 1);
	CHECK_INT(fx_files(&f), 0);
	fx_done(&f);
}

/* Each case: messages that must succeed, then one that must fail with exactly this error. */
static void test_protocol_errors(void)
{
	fixture f;
	fx_init(&f);

	FEED(&f, 0x100, enc_begin(0x200, 1, 800));
	CHECK_STR(feed_err(&f, enc_begin(0x300, 1, 801), 0x110),
		  "Begin for transaction 801 while transaction 800 is in progress");
	CHECK_STR(feed_err(&f, enc_commit(0x210, 0x218, 1), 0x210),
		  "Commit of transaction 800 at 0/210 does not match the final LSN 0/200 of its Begin");
	CHECK_STR(feed_err(&f, enc_stream_start(5, true), 0x120),
		  "Stream Start for transaction 5 while transaction 800 is in progress");
	fx_restart(&f);
	CHECK(!pgo_txn_in_progress(f.a));

	CHECK_STR(feed_err(&f, enc_commit(0x200, 0x208, 1), 0x200), "Commit without Begin");
	CHECK_STR(feed_err(&f, enc_insert(0, 1, ROW1("x")), 0x200), "Insert outside a transaction");
	CHECK_STR(feed_err(&f, enc_truncate(0, 1, 2), 0x200), "Truncate outside a transaction");
	CHECK_STR(feed_err(&f, enc_message(0, true, 1, "p", "c"), 0x200), "Message outside a transaction");
	CHECK_STR(feed_err(&f, enc_origin(1, "o"), 0x200), "Origin outside a transaction");
	CHECK_STR(feed_err(&f, enc_stream_commit(1234, 0x300, 0x308, 1), 0x300),
		  "Stream Commit for transaction 1234 that was never streamed");
	CHECK_STR(feed_err(&f, enc_stream_stop(), 0x300), "Stream Stop outside a stream block");
	CHECK_STR(feed_err(&f, enc_stream_start(9, false), 0x300),
		  "Stream Start for transaction 9 whose first segment was never received");
	CHECK_STR(feed_err(&f, enc_commit_prepared(0x300, 0x308, 1, 9, "g"), 0x300),
		  "Commit Prepared for transaction 9 that was never prepared");
	CHECK_STR(feed_err(&f, enc_prepare('P', 0x300, 0x308, 1, 9, "g"), 0x300),
		  "Prepare for transaction 9 without Begin Prepare");

	/* Inside a stream block. */
	FEED(&f, 0x400, enc_stream_start(4, true));
	CHECK_STR(feed_err(&f, enc_begin(0x500, 1, 5), 0x410),
		  "Begin for transaction 5 inside the stream block of transaction 4");
	CHECK_STR(feed_err(&f, enc_stream_start(6, true), 0x410),
		  "Stream Start for transaction 6 inside the stream block of transaction 4");
	CHECK_STR(feed_err(&f, enc_stream_commit(4, 0x500, 0x508, 1), 0x410),
		  "Stream Commit for transaction 4 inside the stream block of transaction 4");
	CHECK_STR(feed_err(&f, enc_commit(0x500, 0x508, 1), 0x410),
		  "Commit inside the stream block of transaction 4");
	/* Without its xid, an Insert's relid is read as the xid and its tuple tag is wrong. */
	CHECK_STR(feed_err(&f, enc_insert(0, 1, ROW1("x")), 0x410),
		  "Insert message at offset 9: tuple tag 0x00, expected N");
	FEED(&f, 0x420, enc_stream_stop());
	CHECK_STR(feed_err(&f, enc_stream_start(4, true), 0x430),
		  "Stream Start (first segment) for transaction 4 that is already held");

	/* Two-phase. */
	FEED(&f, 0x500, enc_prepare('b', 0x600, 0x608, 1, 50, "ga"));
	CHECK_STR(feed_err(&f, enc_prepare('P', 0x600, 0x608, 1, 51, "ga"), 0x510),
		  "Prepare for transaction 51 inside prepared transaction 50");
	CHECK_STR(feed_err(&f, enc_commit(0x600, 0x608, 1), 0x510),
		  "Commit inside prepared transaction 50 (expected Prepare)");
	CHECK_STR(feed_err(&f, enc_begin(0x700, 1, 52), 0x510),
		  "Begin for transaction 52 while prepared transaction 50 is in progress (no Prepare yet)");
	FEED(&f, 0x600, enc_prepare('P', 0x600, 0x608, 1, 50, "ga"));
	CHECK_STR(feed_err(&f, enc_commit_prepared(0x700, 0x708, 1, 50, "gb"), 0x700),
		  "Commit Prepared for transaction 50 with GID \"gb\", but it was prepared as \"ga\"");
	CHECK_STR(feed_err(&f, enc_stream_commit(50, 0x700, 0x708, 1), 0x700),
		  "Stream Commit for transaction 50 that is prepared, not streaming");
	CHECK_STR(feed_err(&f, enc_prepare('b', 0x600, 0x608, 1, 50, "ga"), 0x700),
		  "Begin Prepare for transaction 50 that is already held");

	/* Malformed messages: the parser's error. */
	msg *z = m_start('Z');
	p16(0);
	CHECK_STR(feed_err(&f, z, 0x800), "unknown message type 'Z' (0x5a) at offset 0");
	msg *b = enc_begin(0x900, 1, 60);
	b->n -= 2;
	CHECK_STR(feed_err(&f, b, 0x800), "Begin message at offset 17: truncated xid: 2 of 4 bytes");
	CHECK(!pgo_txn_in_progress(f.a));

	CHECK_INT(fx_files(&f), 2);
	fx_restart(&f);
	CHECK_INT(fx_files(&f), 0);
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0);
	CHECK_STR(fx_log(&f), "B800 c0/200 e0/0 t1\n");
	fx_done(&f);
}

static void test_handler_errors(void)
{
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_relation(0, 1, "t1", 1, COLS2));
	FEED(&f, 0x110, enc_begin(0x200, 1, 900));
	CHECK_STR(feed_err(&f, enc_insert(0, 1, ROW1("fail")), 0x120), "handler refuses row 'fail'");
	CHECK_STR(feed_err(&f, enc_insert(0, 1, ROW1("silent")), 0x130),
		  "handler change failed for transaction 900");
	fx_restart(&f);
	/* A failure during replay is reported the same way. */
	FEED(&f, 0x200, enc_stream_start(901, true));
	FEED(&f, 0x210, enc_insert(901, 1, ROW1("ok")));
	FEED(&f, 0x220, enc_insert(901, 1, ROW1("fail")));
	FEED(&f, 0x230, enc_stream_stop());
	CHECK_STR(feed_err(&f, enc_stream_commit(901, 0x300, 0x308, 1), 0x300), "handler refuses row 'fail'");
	CHECK_STR(fx_log(&f), "B900 c0/200 e0/0 t1\nB901 c0/300 e0/308 t1\n  I r1 1/1 ok @0/210\n");
	fx_done(&f);
}

/* Spill files: stale ones removed by pgo_txn_new (only those matching the naming), none left after
 * commit, abort, reset or free. */
static void test_spill_files(void)
{
	char err[256], path[128];
	fixture f;
	fx_init(&f);
	pgo_txn_free(f.a);
	static const char *const names[] = {"txn-99.spill", "txn-abc.spill", "keep.txt", "txn-1.spill.bak"};
	for (int i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", f.dir, names[i]);
		FILE *fp = fopen(path, "w");
		CHECK(fp != NULL);
		if (fp)
			fclose(fp);
	}
	txn_handler h = handler;
	h.ctx = &f;
	f.a = pgo_txn_new(f.dir, &opts, f.rc, &h, err, sizeof(err));
	CHECK(f.a != NULL);
	if (!f.a)
		return;
	snprintf(path, sizeof(path), "%s/txn-99.spill", f.dir);
	CHECK(access(path, F_OK) != 0);
	CHECK(pgo_txn_new("/nonexistent/spill", &opts, f.rc, &h, err, sizeof(err)) == NULL);
	CHECK_STR(err, "spill directory /nonexistent/spill: No such file or directory");
	CHECK_INT(fx_files(&f), 2); /* txn-abc.spill and txn-1.spill.bak are not ours */
	for (int i = 1; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", f.dir, names[i]);
		CHECK(unlink(path) == 0);
	}

	/* reset: a streamed transaction mid-block, another between blocks, a prepared one. */
	FEED(&f, 0x100, enc_stream_start(1, true));
	FEED(&f, 0x110, enc_stream_stop());
	FEED(&f, 0x120, enc_prepare('b', 0x200, 0x208, 1, 2, "g"));
	FEED(&f, 0x130, enc_prepare('P', 0x200, 0x208, 1, 2, "g"));
	FEED(&f, 0x140, enc_stream_start(3, true));
	FEED(&f, 0x148, enc_relation(3, 1, "t1", 1, COLS2));
	CHECK_INT(fx_files(&f), 3);
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0x200);
	fx_restart(&f);
	CHECK_INT(fx_files(&f), 0);
	CHECK(!pgo_txn_in_progress(f.a));
	CHECK_INT(pgo_txn_oldest_prepared(f.a), 0);
	txn_stats s = pgo_txn_get_stats(f.a);
	CHECK_INT(s.streamed_open + s.prepared_open + s.spilled_bytes, 0);
	/* After a reset the server resends from the start: the same xids are held again. */
	FEED(&f, 0x100, enc_stream_start(1, true));
	FEED(&f, 0x108, enc_insert(1, 1, ROW1("again")));
	FEED(&f, 0x110, enc_stream_stop());
	FEED(&f, 0x200, enc_stream_commit(1, 0x1f0, 0x200, 1));
	CHECK_STR(fx_log(&f), "B1 c0/1F0 e0/200 t1\n  I r1 1/1 again @0/108\nC1 c0/1F0 e0/200\n");

	/* free: everything held is removed (fx_done checks the directory is empty). */
	FEED(&f, 0x300, enc_stream_start(7, true));
	FEED(&f, 0x308, enc_insert(7, 1, ROW1("x")));
	FEED(&f, 0x310, enc_stream_stop());
	FEED(&f, 0x320, enc_stream_start(8, true));
	FEED(&f, 0x328, enc_insert(8, 1, ROW1("y")));
	CHECK_INT(fx_files(&f), 2);
	fx_done(&f);
}

/* A write error (here: the file size limit) fails the feed with the file and the cause, and the
 * transaction can never be replayed from the incomplete file. */
static void test_spill_write_error(void)
{
	char want[256];
	const char *err = NULL;
	struct rlimit old, small;
	fixture f;
	fx_init(&f);
	FEED(&f, 0x100, enc_relation(0, 1, "t1", 1, COLS2));
	getrlimit(RLIMIT_FSIZE, &old);
	small = old;
	small.rlim_cur = 100 * 1024;
	signal(SIGXFSZ, SIG_IGN);
	CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
	FEED(&f, 0x1000, enc_stream_start(950, true));
	for (long i = 0; i < 20000 && !err; i++) {
		char v[32];
		snprintf(v, sizeof(v), "%ld", i);
		msg *m = enc_insert(950, 1, ROW1(v));
		char e[512];
		static char saved[512];
		if (!pgo_txn_feed(f.a, m->d, m->n, 0x2000 + (pgo_lsn)i, e, sizeof(e))) {
			snprintf(saved, sizeof(saved), "%s", e);
			err = saved;
		}
	}
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, SIG_DFL);
	snprintf(want, sizeof(want), "spill file %s/txn-950.spill: write: File too large", f.dir);
	CHECK_STR(err, want);
	snprintf(want, sizeof(want),
		 "spill file %s/txn-950.spill: an earlier write failed, transaction 950 cannot be held",
		 f.dir);
	CHECK_STR(feed_err(&f, enc_insert(950, 1, ROW1("more")), 0x90000), want);
	FEED(&f, 0x90010, enc_stream_stop());
	snprintf(want, sizeof(want),
		 "spill file %s/txn-950.spill: an earlier write failed, transaction 950 cannot be replayed",
		 f.dir);
	CHECK_STR(feed_err(&f, enc_stream_commit(950, 0x90020, 0x90028, 1), 0x90028), want);
	CHECK_STR(fx_log(&f), "");
	fx_done(&f);
}

static long peak_rss_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* 200,000 rows of about 110 bytes streamed in 20 blocks, interleaved with
 * plain transactions: replayed in order through bounded buffers. */
static void test_large_stream(void)
{
	enum { ROWS = 200000, BLOCK = 10000 };
	fixture f;
	fx_init(&f);
	char pad[101];
	memset(pad, 'p', 100);
	pad[100] = '\0';
	FEED(&f, 0x10, enc_relation(0, 1, "t1", 2, COLS2));
	long before = peak_rss_kib();
	pgo_lsn lsn = 0x1000;
	bool ok = true;
	f.big = true; /* rows are checked as they arrive and as they are replayed, not logged */
	for (long i = 0; i < ROWS && ok; i++) {
		char v[32];
		if (i % BLOCK == 0) {
			ok = ok && feed_at(&f, enc_stream_start(960, i == 0), lsn++, __LINE__);
			if (i == 0)
				ok = ok && feed_at(&f, enc_relation(960, 1, "t1", 2, COLS2), lsn++, __LINE__);
		}
		snprintf(v, sizeof(v), "%ld", i);
		ok = ok && feed_at(&f, enc_insert(960, 1, ROW2(v, pad)), lsn++, __LINE__);
		if (i % BLOCK == BLOCK - 1) {
			ok = ok && feed_at(&f, enc_stream_stop(), lsn++, __LINE__);
			ok = ok && feed_at(&f, enc_begin(lsn + 2, 1, 961), lsn, __LINE__);
			ok = ok && feed_at(&f, enc_commit(lsn + 2, lsn + 3, 1), lsn + 2, __LINE__);
			lsn += 4;
		}
	}
	CHECK(ok);
	/* One record a row: a 4-byte length and the handler's 8 bytes. */
	CHECK_INT(pgo_txn_get_stats(f.a).spilled_bytes, (uint64_t)ROWS * 12);
	int plain = 0;
	for (const char *p = f.log.data; (p = strstr(p, "C961 ")) != NULL; p++)
		plain++;
	CHECK_INT(plain, ROWS / BLOCK);
	buf_reset(&f.log);
	FEED(&f, lsn + 0x10, enc_stream_commit(960, lsn, lsn + 0x10, 1));
	f.big = false;
	long growth = peak_rss_kib() - before;
	CHECK_INT(f.next_row, ROWS);
	CHECK_INT(f.replayed, ROWS);
	CHECK_INT(f.bad_rows, 0);
	char c[LSN_STRLEN], e[LSN_STRLEN], want[128];
	util_lsn_format(lsn, c);
	util_lsn_format(lsn + 0x10, e);
	snprintf(want, sizeof(want), "B960 c%s e%s t1\nC960 c%s e%s\n", c, e, c, e);
	CHECK_STR(fx_log(&f), want);
	if (growth >= 8 * 1024 || getenv("TEST_VERBOSE"))
		fprintf(stderr, "test_large_stream: peak RSS grew by %ld KiB\n", growth);
	CHECK(growth < 8 * 1024);
	CHECK_INT(fx_files(&f), 0);
	fx_done(&f);
}

int main(void)
{
	test_large_stream(); /* first: its peak RSS is measured against the smallest baseline */
	test_plain();
	test_origin_and_nontx_message();
	test_streams_interleaved();
	test_stream_abort();
	test_subxact_abort();
	test_subxact_nested_parent_abort();
	test_subxact_released_child();
	test_add_column_in_stream();
	test_prepared();
	test_protocol_errors();
	test_handler_errors();
	test_spill_files();
	test_spill_write_error();
	return TEST_SUMMARY("test_txn");
}

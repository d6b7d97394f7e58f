/* test_pipeline.c: the data path of `cdc run` without PostgreSQL or the event loop. A fake source
 * turns a small script into pgoutput messages for pipeline_feed(); recording sinks (sinks/sink.h)
 * log every event they are given; each case asserts the exact deliveries and the flushed position
 * (the slot moves past a change only once every sink that wants it has it). */
#include "cdc/pipeline/pipeline.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "cdc/config/config.h"
#include "cdc/daemon/setup.h"
#include "test.h"

/* ---- the recording sink ---- */

/* render() writes "SUBSCRIPTION OP TABLE new(col=value,...) old(...)" (a schema event: its
 * columns, "name<renamed_from" and "!" for NOT NULL, a DDL event: its command tag and object);
 * deliver() logs "SINK#SUB seq=N commit=LSN tx=I: RENDERED" ("tx=I<" for an event before the
 * change at I). delivered() reports the last ended transaction; a
 * sink told to hold keeps what it is given in flight, like a broker that has not acknowledged it,
 * and reports delivered only the transactions before the first of those. */
typedef struct rec_sink {
	sink base;
	const char *name;
	buf *log; /* shared by the sinks of a case, so the order across sinks shows */
	uint64_t ended;
	bool hold;
	uint64_t in_flight; /* the lowest seq held in flight; 0: none */
} rec_sink;

static const char *op_name(int op)
{
	static const char *names[] = {"?",	 "insert", "update", "delete", "truncate",
				      "message", "read",   "schema", "ddl"};
	return op >= 1 && op <= 8 ? names[op] : "?";
}

static void put_row(buf *out, const char *label, const Cdc__V1__Row *r)
{
	if (!r)
		return;
	buf_printf(out, " %s(", label);
	for (size_t i = 0; i < r->n_columns; i++) {
		const Cdc__V1__Value *v = r->columns[i]->value;
		buf_printf(out, "%s%s=%s", i ? "," : "", r->columns[i]->name,
			   v->kind_case == CDC__V1__VALUE__KIND_TEXT_VALUE ? v->text_value : "~");
	}
	buf_putc(out, ')');
}

static void rec_render(sink *s, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	(void)s, (void)sub;
	buf_printf(out, "%s %s %s", e->subscription, op_name(e->op), e->table);
	put_row(out, "new", e->new_row);
	put_row(out, "old", e->old_row);
	for (size_t i = 0; e->table_schema && i < e->table_schema->n_columns; i++) {
		const Cdc__V1__Schema__Column *c = e->table_schema->columns[i];
		buf_printf(out, "%s%s%s%s%s%s", i ? "," : " cols(", c->name, c->renamed_from[0] ? "<" : "",
			   c->renamed_from, c->nullable_present_case && !c->nullable ? "!" : "",
			   i + 1 == e->table_schema->n_columns ? ")" : "");
	}
	if (e->ddl)
		buf_printf(out, " %s %s", e->ddl->command_tag, e->ddl->object_identity);
}

static bool rec_deliver(sink *s, uint32_t sub, const char *rendered, size_t len, const sink_commit *c,
			uint64_t seq, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	rec_sink *r = (rec_sink *)s;
	if (r->hold && !r->in_flight)
		r->in_flight = seq;
	char lsn[LSN_STRLEN];
	util_lsn_format(c->commit_lsn, lsn);
	buf_printf(r->log, "%s#%u seq=%llu commit=%s tx=%u%s: %.*s\n", r->name, sub, (unsigned long long)seq,
		   lsn, c->tx_index, c->before_change ? "<" : "", (int)len, rendered);
	return true;
}

static void rec_end_txn(sink *s, uint64_t seq)
{
	((rec_sink *)s)->ended = seq;
}

static sink_status rec_flush(sink *s, char *err, size_t errlen)
{
	(void)s, (void)err, (void)errlen;
	return SINK_OK;
}

static uint64_t rec_delivered(const sink *s)
{
	const rec_sink *r = (const rec_sink *)s;
	return r->in_flight ? r->in_flight - 1 : r->ended;
}

static void rec_free(sink *s)
{
	(void)s;
}

/* Sink B holds held transactions' events itself (as the socket spool does): each hold operation
 * logs "B hold xid=X tx=I: RENDERED", "B savepoint xid=X tx=I", "B rollback xid=X tx=I", "B abort
 * xid=X", "B commit xid=X seq=N commit=LSN". */
static bool rec_hold(sink *s, uint32_t sub, uint32_t xid, uint32_t tx_index, const char *rendered, size_t len,
		     char *err, size_t errlen)
{
	(void)sub, (void)err, (void)errlen;
	rec_sink *r = (rec_sink *)s;
	buf_printf(r->log, "%s hold xid=%u tx=%u: %.*s\n", r->name, xid, tx_index, (int)len, rendered);
	return true;
}

static void rec_hold_savepoint(sink *s, uint32_t xid, uint32_t tx_index)
{
	rec_sink *r = (rec_sink *)s;
	buf_printf(r->log, "%s savepoint xid=%u tx=%u\n", r->name, xid, tx_index);
}

static bool rec_hold_rollback(sink *s, uint32_t xid, uint32_t tx_index, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	rec_sink *r = (rec_sink *)s;
	buf_printf(r->log, "%s rollback xid=%u tx=%u\n", r->name, xid, tx_index);
	return true;
}

static void rec_hold_abort(sink *s, uint32_t xid)
{
	rec_sink *r = (rec_sink *)s;
	buf_printf(r->log, "%s abort xid=%u\n", r->name, xid);
}

static bool rec_hold_commit(sink *s, uint32_t xid, const sink_commit *c, uint64_t seq, char *err,
			    size_t errlen)
{
	(void)err, (void)errlen;
	rec_sink *r = (rec_sink *)s;
	char lsn[LSN_STRLEN];
	util_lsn_format(c->commit_lsn, lsn);
	buf_printf(r->log, "%s commit xid=%u seq=%llu commit=%s\n", r->name, xid, (unsigned long long)seq,
		   lsn);
	return true;
}

static const sink_ops rec_ops = {.name = "rec",
				 .render = rec_render,
				 .deliver = rec_deliver,
				 .end_txn = rec_end_txn,
				 .flush = rec_flush,
				 .delivered = rec_delivered,
				 .free = rec_free};
static const sink_ops rec_hold_ops = {.name = "rec_hold",
				      .render = rec_render,
				      .deliver = rec_deliver,
				      .end_txn = rec_end_txn,
				      .flush = rec_flush,
				      .delivered = rec_delivered,
				      .free = rec_free,
				      .hold = rec_hold,
				      .hold_savepoint = rec_hold_savepoint,
				      .hold_rollback = rec_hold_rollback,
				      .hold_abort = rec_hold_abort,
				      .hold_commit = rec_hold_commit};

/* ---- the fake source: a script of pgoutput messages ---- */

/* One message on the wire, big-endian as PostgreSQL's proto.c writes it. fmt: 'c' one byte, 'h'
 * u16, 'i' u32, 'q' u64, 's' a NUL-terminated string, 'x' the xid of a stream block if in one. */
static void wire(buf *m, uint32_t stream_xid, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	for (const char *f = fmt; *f; f++) {
		uint64_t v = 0;
		int bytes = 0;
		switch (*f) {
		case 'c':
			v = (uint64_t)va_arg(ap, int), bytes = 1;
			break;
		case 'h':
			v = (uint64_t)va_arg(ap, int), bytes = 2;
			break;
		case 'i':
			v = va_arg(ap, uint32_t), bytes = 4;
			break;
		case 'q':
			v = va_arg(ap, uint64_t), bytes = 8;
			break;
		case 'x':
			v = stream_xid, bytes = stream_xid ? 4 : 0;
			break;
		case 's': {
			const char *s = va_arg(ap, const char *);
			buf_append(m, s, strlen(s) + 1);
			break;
		}
		}
		while (bytes--)
			buf_putc(m, (char)(v >> (8 * bytes)));
	}
	va_end(ap);
}

/* A tuple of text columns "a,b,c"; "~" is NULL. */
static void wire_tuple(buf *m, char kind, const char *vals)
{
	char copy[256];
	snprintf(copy, sizeof(copy), "%s", vals);
	int n = 1;
	for (const char *p = vals; *p; p++)
		n += *p == ',';
	wire(m, 0, "ch", kind, n);
	for (char *save, *v = strtok_r(copy, ",", &save); v; v = strtok_r(NULL, ",", &save)) {
		if (strcmp(v, "~") == 0) {
			wire(m, 0, "c", 'n');
			continue;
		}
		wire(m, 0, "ci", 't', (uint32_t)strlen(v));
		buf_append(m, v, strlen(v));
	}
}

typedef struct fixture {
	char dir[64];
	cfg *cfg;
	pipeline *p;
	rec_sink sinks[2]; /* A: sink stdout, B: sink socket (it holds held transactions' events) */
	buf log;
	uint32_t stream_xid; /* inside a stream block */
	uint64_t lsn;	     /* of the next message */
	int boundaries;
} fixture;

/* ---- the backfills' hooks, faked: every change reported to them is logged ---- */

static void put_key(buf *log, const char *label, const bf_change *c, const bf_datum *v)
{
	if (!v)
		return;
	buf_printf(log, " %s(", label);
	for (size_t i = 0; i < c->ncols; i++)
		buf_printf(log, "%s%s=%.*s", i ? "," : "", c->names[i], v[i].len < 0 ? 0 : (int)v[i].len,
			   v[i].len < 0 ? "" : v[i].data);
	buf_printf(log, ")");
}

/* Logs "backfills: xid=X TABLE [truncate] [partial] old(KEYS) new(KEYS)". */
static void bf_log_change(void *ctx, const bf_change *c)
{
	buf *log = &((fixture *)ctx)->log;
	buf_printf(log, "backfills: xid=%u %s.%s%s%s", c->xid, c->schema, c->table,
		   c->truncate ? " truncate" : "", c->partial ? " partial" : "");
	put_key(log, "old", c, c->old_values);
	put_key(log, "new", c, c->new_values);
	buf_printf(log, "\n");
}

static bool bf_log_replay(void *ctx, const void *data, size_t len, uint32_t xid)
{
	bf_change c;
	if (!backfill_change_decode(data, len, &c))
		return false;
	c.xid = xid;
	bf_log_change(ctx, &c);
	backfill_change_free(&c);
	return true;
}

static bool bf_log_watermark(void *ctx, const char *content, size_t len, uint64_t lsn, bf_emit_fn emit,
			     void *emit_ctx, char *err, size_t errlen)
{
	(void)emit, (void)emit_ctx, (void)err, (void)errlen;
	buf_printf(&((fixture *)ctx)->log, "backfills: watermark at 0x%llx: %.*s\n", (unsigned long long)lsn,
		   (int)len, content);
	return true;
}

/* Logs "signal: commit=LSN tx=I id=.. type=.. data=.." (~ for NULL). */
static void log_signal(void *ctx, const pipeline_signal *s)
{
	buf *log = &((fixture *)ctx)->log;
	buf_printf(log, "signal: commit=0x%llx tx=%u id=%.*s type=%.*s data=%.*s\n",
		   (unsigned long long)s->commit_lsn, s->tx_index, s->id ? (int)s->id_len : 1,
		   s->id ? s->id : "~", s->type ? (int)s->type_len : 1, s->type ? s->type : "~",
		   s->data ? (int)s->data_len : 1, s->data ? s->data : "~");
}

static void count_boundary(void *ctx)
{
	((fixture *)ctx)->boundaries++;
}

static bool setup(fixture *f, const char *subscriptions)
{
	*f = (fixture){.lsn = 0x10};
	snprintf(f->dir, sizeof(f->dir), "/tmp/cdc-test-pipeline-XXXXXX");
	char yaml[4096], err[256];
	snprintf(yaml, sizeof(yaml), "subscriptions:\n%s", subscriptions);
	buf errors = {0};
	f->cfg = cfg_parse("test.yaml", yaml, strlen(yaml), &errors);
	if (!f->cfg || !mkdtemp(f->dir)) {
		fprintf(stderr, "setup: %s\n", errors.data ? errors.data : "mkdtemp failed");
		buf_free(&errors);
		return false;
	}
	buf_free(&errors);
	rules *r = daemon_setup_rules(f->cfg, err, sizeof(err));
	if (!r) {
		fprintf(stderr, "setup: %s\n", err);
		return false;
	}
	for (int i = 0; i < 2; i++)
		f->sinks[i] = (rec_sink){
		    .base.ops = i ? &rec_hold_ops : &rec_ops, .name = i ? "B" : "A", .log = &f->log};
	pipeline_sub subs[8];
	for (size_t i = 0; i < f->cfg->nsubs; i++)
		subs[i] = (pipeline_sub){
		    f->cfg->subs[i].name, f->cfg->subs[i].tag,
		    &f->sinks[strcmp(cfg_sink_name(f->cfg->subs[i].sink), "socket") == 0].base};
	sink *all[] = {&f->sinks[0].base, &f->sinks[1].base};
	f->p = pipeline_new(f->dir, 0, count_boundary, f);
	pipeline_deliver_ddl(f->p, true);
	pipeline_bind(f->p, r, subs, f->cfg->nsubs, all, 2);
	pgo_options opt = {.proto_version = 4};
	if (!pipeline_start(f->p, &opt, 0x10, err, sizeof(err))) {
		fprintf(stderr, "setup: %s\n", err);
		return false;
	}
	CHECK_STR(f->log.data, "B abort xid=0\n"); /* a new stream: nothing held is kept */
	buf_reset(&f->log);
	return true;
}

static void teardown(fixture *f)
{
	pipeline_free(f->p);
	cfg_free(f->cfg);
	buf_free(&f->log);
	rmdir(f->dir);
}

static void feed(fixture *f, const buf *m, int line)
{
	char err[512];
	if (!pipeline_feed(f->p, (const uint8_t *)m->data, m->len, f->lsn++, err, sizeof(err))) {
		test_failed++;
		fprintf(stderr, "script line %d: %s\n", line, err);
	}
}

/* Runs one script line (see the cases below); false when it is not understood. */
static bool step(fixture *f, const char *line, int no)
{
	char op[4], a[128] = "", b[128] = "", c[128] = "", d[128] = "";
	if (sscanf(line, "%3s %127s %127s %127s %127s", op, a, b, c, d) < 1)
		return false;
	uint64_t x = strtoull(a, NULL, 0), y = strtoull(b, NULL, 0), z = strtoull(c, NULL, 0);
	buf m = {0};
	uint32_t sx = f->stream_xid;
	switch (op[0]) {
	case 'R': { /* R RELID TABLE COLS: replica identity full, text columns, the first is the key */
		wire(&m, sx, "cxissc", 'R', (uint32_t)x, "public", b, 'f');
		buf cols = {0};
		int n = 0;
		for (char *save, *col = strtok_r(c, ",", &save); col; col = strtok_r(NULL, ",", &save), n++)
			wire(&cols, 0, "csii", n == 0, col, 25u, UINT32_MAX);
		wire(&m, 0, "h", n);
		buf_append(&m, cols.data, cols.len);
		buf_free(&cols);
		break;
	}
	case 'B': /* B FINAL_LSN XID */
		wire(&m, 0, "cqqi", 'B', x, (uint64_t)0, (uint32_t)y);
		break;
	case 'C': /* C COMMIT_LSN END_LSN */
		wire(&m, 0, "ccqqq", 'C', 0, x, y, (uint64_t)0);
		break;
	case 'I': /* I RELID NEW */
		wire(&m, sx, "cxi", 'I', (uint32_t)x);
		wire_tuple(&m, 'N', b);
		break;
	case 'U': /* U RELID NEW [OLD] */
		wire(&m, sx, "cxi", 'U', (uint32_t)x);
		if (c[0])
			wire_tuple(&m, 'O', c);
		wire_tuple(&m, 'N', b);
		break;
	case 'D': /* D RELID OLD */
		wire(&m, sx, "cxi", 'D', (uint32_t)x);
		wire_tuple(&m, 'O', b);
		break;
	case 'T': /* T RELID: a truncate of one table */
		wire(&m, sx, "cxici", 'T', 1, 0, (uint32_t)x);
		break;
	case 'S': /* S XID FIRST: stream start */
		wire(&m, 0, "cic", 'S', (uint32_t)x, (int)y);
		f->stream_xid = (uint32_t)x;
		break;
	case 'X': /* X XID: the next changes of the stream block are subtransaction XID's */
		f->stream_xid = (uint32_t)x;
		return true;
	case 'E': /* stream stop */
		wire(&m, 0, "c", 'E');
		f->stream_xid = 0;
		break;
	case 's': /* s XID COMMIT_LSN END_LSN: stream commit */
		wire(&m, 0, "cicqqq", 'c', (uint32_t)x, 0, y, z, (uint64_t)0);
		break;
	case 'A': /* A XID SUBXID: stream abort */
		wire(&m, 0, "cii", 'A', (uint32_t)x, (uint32_t)y);
		break;
	case 'b': /* b PREPARE_LSN END_LSN XID GID: begin prepare */
		wire(&m, 0, "cqqqis", 'b', x, y, (uint64_t)0, (uint32_t)z, d);
		break;
	case 'P': /* P PREPARE_LSN END_LSN XID GID: prepare */
		wire(&m, 0, "ccqqqis", 'P', 0, x, y, (uint64_t)0, (uint32_t)z, d);
		break;
	case 'K': /* K COMMIT_LSN END_LSN XID GID: commit prepared */
		wire(&m, 0, "ccqqqis", 'K', 0, x, y, (uint64_t)0, (uint32_t)z, d);
		break;
	case 'r': /* r PREPARE_END ROLLBACK_END XID GID: rollback prepared */
		wire(&m, 0, "ccqqqqis", 'r', 0, x, y, (uint64_t)0, (uint64_t)0, (uint32_t)z, d);
		break;
	case 'M':   /* M PREFIX CONTENT...: a transactional logical message (content: the rest of the line) */
	case 'm': { /* m PREFIX CONTENT...: a non-transactional one */
		const char *content = strchr(strchr(line, ' ') + 1, ' ');
		content = content ? content + 1 : "";
		wire(&m, sx, "cxcqsi", 'M', op[0] == 'M', f->lsn, a, (uint32_t)strlen(content));
		buf_append(&m, content, strlen(content));
		break;
	}
	case 'W': /* W: backfills from now on (their hooks log what they are told) */
		pipeline_set_backfills(f->p, &(pipeline_backfills){.ctx = f,
								   .change = bf_log_change,
								   .hold = backfill_change_encode,
								   .replay = bf_log_replay,
								   .watermark = bf_log_watermark,
								   .next_read = backfill_batch_next});
		return true;
	case 'G': /* G: public.sig is the signal table from now on */
		pipeline_set_signals(f->p, "public.sig", log_signal, f);
		return true;
	case 'O': /* O: without source.ddl */
		pipeline_deliver_ddl(f->p, false);
		return true;
	case 'N': { /* N: a new stream (a reconnect) */
		pgo_options opt = {.proto_version = 4};
		char err[256];
		CHECK(pipeline_start(f->p, &opt, f->lsn, err, sizeof(err)));
		return true;
	}
	case 'k': /* k WAL_END: keepalive */
		pipeline_keepalive(f->p, x);
		return true;
	case 'H': /* H SINK: the sink holds what it is given in flight from now on */
		f->sinks[a[0] == 'B'].hold = true;
		return true;
	case 'Y': /* Y SINK: the sink has delivered everything it holds */
		f->sinks[a[0] == 'B'].hold = false;
		f->sinks[a[0] == 'B'].in_flight = 0;
		return true;
	case 'F': { /* F FLUSHED: flush the sinks, then the flushed position must be FLUSHED */
		sink *failed = NULL;
		char err[256];
		CHECK(pipeline_flush(f->p, &failed, err, sizeof(err)) == SINK_OK);
		if (pipeline_flushed(f->p) != x) {
			test_failed++;
			fprintf(stderr, "script line %d: flushed 0x%llx, want 0x%llx\n", no,
				(unsigned long long)pipeline_flushed(f->p), (unsigned long long)x);
		} else {
			test_passed++;
		}
		return true;
	}
	default:
		return false;
	}
	feed(f, &m, no);
	buf_free(&m);
	return true;
}

/* ---- the cases ---- */

/* Two relations: orders (id, status, amount) and items (id, name). */
#define RELATIONS "R 1 orders id,status,amount\nR 2 items id,name\n"

static const struct pipeline_case {
	const char *name;
	const char *subscriptions; /* YAML: the items of subscriptions: */
	const char *script;	   /* one step a line, see step() */
	const char *deliveries;	   /* what the sinks were given, in order */
	int boundaries;		   /* at_boundary calls */
} cases[] = {
    /* clang-format off */
	{"matching across subscriptions",
	 "  - {name: all, tables: [public.*], sink: stdout}\n"
	 "  - {name: new_orders, tables: [public.orders], operations: [insert], sink: socket}\n"
	 "  - {name: none, tables: [app.*], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nI 1 1,new,10\nU 1 1,paid,10\nI 2 5,pen\nD 2 5,pen\nC 0x100 0x108\nF 0x108\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "B#1 seq=1 commit=0/100 tx=0: new_orders insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=1 commit=0/100 tx=1: all update orders new(id=1,status=paid,amount=10)\n"
	 "A#0 seq=1 commit=0/100 tx=2<: all schema items cols(id,name)\n"
	 "A#0 seq=1 commit=0/100 tx=2: all insert items new(id=5,name=pen)\n"
	 "A#0 seq=1 commit=0/100 tx=3: all delete items old(id=5,name=pen)\n",
	 1},
	{"columns: a projection that keeps the key",
	 "  - {name: slim, tables: [public.orders], columns: [status], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nI 1 1,new,10\nU 1 1,paid,20 1,new,10\nC 0x100 0x108\n",
	 "A#0 seq=1 commit=0/100 tx=0<: slim schema orders cols(id,status)\n"
	 "A#0 seq=1 commit=0/100 tx=0: slim insert orders new(id=1,status=new)\n"
	 "A#0 seq=1 commit=0/100 tx=1: slim update orders new(id=1,status=paid) old(id=1,status=new)\n",
	 1},
	{"where: only rows the predicate holds for",
	 "  - {name: paid, tables: [public.orders], where: \"new.status = 'paid'\", sink: stdout}\n"
	 "  - {name: every, tables: [public.orders], sink: socket}\n",
	 RELATIONS "B 0x100 7\nI 1 1,new,10\nI 1 2,paid,30\nC 0x100 0x108\n",
	 "B#1 seq=1 commit=0/100 tx=0<: every schema orders cols(id,status,amount)\n"
	 "B#1 seq=1 commit=0/100 tx=0: every insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=1 commit=0/100 tx=1<: paid schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=1: paid insert orders new(id=2,status=paid,amount=30)\n"
	 "B#1 seq=1 commit=0/100 tx=1: every insert orders new(id=2,status=paid,amount=30)\n",
	 1},
	{"changed: an update matches only if a listed column changed",
	 "  - {name: status, tables: [public.orders], operations: [update], changed: [status], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nU 1 1,paid,10 1,new,10\nU 1 1,paid,20 1,paid,10\nU 1 1,sent,20\n"
		   "C 0x100 0x108\n",
	 "A#0 seq=1 commit=0/100 tx=0: status update orders new(id=1,status=paid,amount=10) "
	 "old(id=1,status=new,amount=10)\n",
	 1},
	{"streamed: delivered at stream commit, in commit order, with its commit fields",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 "S 9 1\n" RELATIONS "I 1 1,new,10\nE\nB 0x100 7\nI 2 5,pen\nC 0x100 0x108\nS 9 0\nI 1 2,new,20\nE\n"
	 "s 9 0x200 0x208\nF 0x208\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema items cols(id,name)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert items new(id=5,name=pen)\n"
	 "A#0 seq=2 commit=0/200 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=2 commit=0/200 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=2 commit=0/200 tx=1: all insert orders new(id=2,status=new,amount=20)\n"
	 "B commit xid=9 seq=2 commit=0/200\n",
	 2},
	{"streamed: an aborted transaction delivers nothing",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 "S 9 1\n" RELATIONS "I 1 1,new,10\nE\nA 9 9\nB 0x100 7\nI 2 5,pen\nC 0x100 0x108\nF 0x108\n",
	 "B abort xid=9\nA#0 seq=1 commit=0/100 tx=0<: all schema items cols(id,name)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert items new(id=5,name=pen)\n", 1},
	{"two-phase: held from prepare to commit prepared; the slot never passes a prepared one",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 RELATIONS "b 0x100 0x108 7 g1\nI 1 1,new,10\nP 0x100 0x108 7 g1\nk 0x300\nF 0x10\n"
		   "K 0x200 0x208 7 g1\nF 0x208\nk 0x300\nF 0x300\n",
	 "A#0 seq=1 commit=0/200 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/200 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "B commit xid=7 seq=1 commit=0/200\n", 1},
	{"two-phase: rollback prepared delivers nothing",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 RELATIONS "b 0x100 0x108 7 g1\nI 1 1,new,10\nP 0x100 0x108 7 g1\nr 0x108 0x208 7 g1\nk 0x300\n"
		   "F 0x300\n",
	 "B abort xid=7\n", 0},
	{"flushed position: a sink that delivers later holds the slot back",
	 "  - {name: fast, tables: [public.orders], sink: stdout}\n"
	 "  - {name: slow, tables: [public.items], sink: socket}\n",
	 RELATIONS "H B\nB 0x100 7\nI 1 1,new,10\nC 0x100 0x108\nF 0x108\n"
		   "B 0x200 8\nI 2 5,pen\nC 0x200 0x208\nB 0x300 9\nI 1 2,new,20\nC 0x300 0x308\n"
		   "F 0x108\nk 0x400\nF 0x108\nY B\nF 0x308\nk 0x400\nF 0x400\n",
	 "A#0 seq=1 commit=0/100 tx=0<: fast schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: fast insert orders new(id=1,status=new,amount=10)\n"
	 "B#1 seq=2 commit=0/200 tx=0<: slow schema items cols(id,name)\n"
	 "B#1 seq=2 commit=0/200 tx=0: slow insert items new(id=5,name=pen)\n"
	 "A#0 seq=3 commit=0/300 tx=0: fast insert orders new(id=2,status=new,amount=20)\n",
	 3},
	{"streamed: a sink that holds events gets them as they arrive, with savepoints, rollbacks, the "
	 "commit after the others' replay, and aborts",
	 "  - {name: all, tables: [public.*], sink: stdout}\n"
	 "  - {name: sock, tables: [public.*], sink: socket}\n",
	 "S 9 1\n" RELATIONS "I 1 1,new,10\nX 10\nI 1 2,new,20\nX 11\nI 2 5,pen\nE\nA 9 11\n"
	 "S 9 0\nX 10\nI 1 3,new,30\nE\nA 9 10\nS 9 0\nI 1 4,new,40\nE\ns 9 0x200 0x208\nF 0x208\n"
	 "S 12 1\nI 1 9,new,90\nE\nA 12 12\nF 0x208\n",
	 "B hold xid=9 tx=0: sock schema orders cols(id,status,amount)\n"
	 "B hold xid=9 tx=0: sock insert orders new(id=1,status=new,amount=10)\n"
	 "B savepoint xid=9 tx=1\n"
	 "B hold xid=9 tx=1: sock insert orders new(id=2,status=new,amount=20)\n"
	 "B savepoint xid=9 tx=2\n"
	 "B hold xid=9 tx=2: sock schema items cols(id,name)\n"
	 "B hold xid=9 tx=2: sock insert items new(id=5,name=pen)\n"
	 "B rollback xid=9 tx=2\n"
	 "B hold xid=9 tx=2: sock insert orders new(id=3,status=new,amount=30)\n"
	 "B rollback xid=9 tx=1\n"
	 "B hold xid=9 tx=1: sock insert orders new(id=4,status=new,amount=40)\n"
	 "A#0 seq=1 commit=0/200 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/200 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=1 commit=0/200 tx=1: all insert orders new(id=4,status=new,amount=40)\n"
	 "B commit xid=9 seq=1 commit=0/200\n"
	 "B hold xid=12 tx=0: sock schema orders cols(id,status,amount)\n"
	 "B hold xid=12 tx=0: sock insert orders new(id=9,status=new,amount=90)\n"
	 "B abort xid=12\n",
	 1},
	{"schema events: before a subscription's first row of a table, again only when the columns it "
	 "delivers change, and after a new stream",
	 "  - {name: all, tables: [public.*], sink: stdout}\n"
	 "  - {name: slim, tables: [public.orders], columns: [status], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nI 1 1,new,10\nC 0x100 0x108\n"
	 "R 1 orders id,status,amount\nB 0x200 8\nI 1 2,new,20\nC 0x200 0x208\n"
	 "R 1 orders id,status,amount,note\nB 0x300 9\nI 1 3,new,30,x\nC 0x300 0x308\n"
	 "R 1 orders id,state,amount,note\nB 0x400 10\nI 1 4,new,40,y\nC 0x400 0x408\n"
	 "N\nB 0x500 11\nI 1 5,new,50,z\nC 0x500 0x508\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#1 seq=1 commit=0/100 tx=0<: slim schema orders cols(id,status)\n"
	 "A#1 seq=1 commit=0/100 tx=0: slim insert orders new(id=1,status=new)\n"
	 "A#0 seq=2 commit=0/200 tx=0: all insert orders new(id=2,status=new,amount=20)\n"
	 "A#1 seq=2 commit=0/200 tx=0: slim insert orders new(id=2,status=new)\n"
	 "A#0 seq=3 commit=0/300 tx=0<: all schema orders cols(id,status,amount,note)\n"
	 "A#0 seq=3 commit=0/300 tx=0: all insert orders new(id=3,status=new,amount=30,note=x)\n"
	 "A#1 seq=3 commit=0/300 tx=0: slim insert orders new(id=3,status=new)\n"
	 "A#0 seq=4 commit=0/400 tx=0<: all schema orders cols(id,state,amount,note)\n"
	 "A#0 seq=4 commit=0/400 tx=0: all insert orders new(id=4,state=new,amount=40,note=y)\n"
	 "A#1 seq=4 commit=0/400 tx=0<: slim schema orders cols(id)\n"
	 "A#1 seq=4 commit=0/400 tx=0: slim insert orders new(id=4)\n"
	 "B abort xid=0\n"
	 "A#0 seq=5 commit=0/500 tx=0<: all schema orders cols(id,state,amount,note)\n"
	 "A#0 seq=5 commit=0/500 tx=0: all insert orders new(id=5,state=new,amount=50,note=z)\n"
	 "A#1 seq=5 commit=0/500 tx=0<: slim schema orders cols(id)\n"
	 "A#1 seq=5 commit=0/500 tx=0: slim insert orders new(id=5)\n",
	 5},
	{"truncates: a schema event before a subscription's first truncate of a table (the truncate names "
	 "none), none before the next truncate or row",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nT 1\nC 0x100 0x108\nB 0x200 8\nT 1\nI 1 1,new,10\nC 0x200 0x208\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all truncate orders\n"
	 "A#0 seq=2 commit=0/200 tx=0: all truncate orders\n"
	 "A#0 seq=2 commit=0/200 tx=1: all insert orders new(id=1,status=new,amount=10)\n",
	 2},
	{"DDL events: delivered in the transaction's order to its table's subscriptions; a rename, and a "
	 "column dropped and one of the old name added, told apart by column number; NOT NULL",
	 "  - {name: all, tables: [public.*], sink: stdout}\n"
	 "  - {name: ddl, tables: [public.orders], operations: [ddl], sink: socket}\n"
	 "  - {name: other, tables: [public.items], sink: stdout}\n",
	 RELATIONS "B 0x100 7\nI 1 1,new,10\nC 0x100 0x108\n"
	 "B 0x200 8\nM cdc.ddl {\"v\":1,\"event\":\"ddl_command_end\",\"tag\":\"ALTER TABLE\",\"object_type\":\"table column\",\"identity\":\"public.orders.state\",\"schema\":\"public\",\"table\":\"orders\",\"relid\":1,\"subid\":2,\"statement\":\"ALTER TABLE orders RENAME status TO state\",\"columns\":[{\"attnum\":1,\"name\":\"id\",\"type\":\"text\",\"type_oid\":25,\"not_null\":true},{\"attnum\":2,\"name\":\"state\",\"type\":\"text\",\"type_oid\":25},{\"attnum\":3,\"name\":\"amount\",\"type\":\"text\",\"type_oid\":25}]}\nR 1 orders id,state,amount\nI 1 2,new,20\nC 0x200 0x208\n"
	 "B 0x300 9\nM cdc.ddl {\"v\":1,\"event\":\"ddl_command_end\",\"tag\":\"ALTER TABLE\",\"object_type\":\"table\",\"identity\":\"public.orders\",\"schema\":\"public\",\"table\":\"orders\",\"relid\":1,\"columns\":[{\"attnum\":1,\"name\":\"id\",\"type_oid\":25,\"not_null\":true},{\"attnum\":2,\"name\":\"state\",\"type_oid\":25},{\"attnum\":3,\"name\":\"amount\",\"type_oid\":25},{\"attnum\":5,\"name\":\"status\",\"type_oid\":25}]}\nR 1 orders id,state,amount,status\nI 1 3,new,30,x\nC 0x300 0x308\n"
	 "B 0x400 10\nM cdc.ddl {not json\nI 1 4,new,40,y\nC 0x400 0x408\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=2 commit=0/200 tx=0: all ddl orders ALTER TABLE public.orders.state\n"
	 "B#1 seq=2 commit=0/200 tx=0: ddl ddl orders ALTER TABLE public.orders.state\n"
	 "A#0 seq=2 commit=0/200 tx=1<: all schema orders cols(id!,state<status,amount)\n"
	 "A#0 seq=2 commit=0/200 tx=1: all insert orders new(id=2,state=new,amount=20)\n"
	 "A#0 seq=3 commit=0/300 tx=0: all ddl orders ALTER TABLE public.orders\n"
	 "B#1 seq=3 commit=0/300 tx=0: ddl ddl orders ALTER TABLE public.orders\n"
	 "A#0 seq=3 commit=0/300 tx=1<: all schema orders cols(id!,state,amount,status)\n"
	 "A#0 seq=3 commit=0/300 tx=1: all insert orders new(id=3,state=new,amount=30,status=x)\n"
	 "A#0 seq=4 commit=0/400 tx=1: all insert orders new(id=4,state=new,amount=40,status=y)\n",
	 4},
	{"held transactions announce their tables' schemas; what a plain one after their commit "
	 "delivers follows them",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 "S 9 1\n" RELATIONS "I 1 1,new,10\nE\nB 0x100 7\nI 1 2,new,20\nC 0x100 0x108\nS 9 0\n"
	 "R 1 orders id,status,amount,note\nI 1 3,new,30,x\nE\ns 9 0x200 0x208\n"
	 "B 0x300 8\nI 1 4,new,40,y\nC 0x300 0x308\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=2,status=new,amount=20)\n"
	 "A#0 seq=2 commit=0/200 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=2 commit=0/200 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=2 commit=0/200 tx=1<: all schema orders cols(id,status,amount,note)\n"
	 "A#0 seq=2 commit=0/200 tx=1: all insert orders new(id=3,status=new,amount=30,note=x)\n"
	 "B commit xid=9 seq=2 commit=0/200\n"
	 "A#0 seq=3 commit=0/300 tx=0: all insert orders new(id=4,status=new,amount=40,note=y)\n",
	 3},
	{"without source.ddl: the trigger's messages are no events, but what they tell is used",
	 "  - {name: all, tables: [public.*], sink: stdout}\n"
	 "  - {name: msgs, tables: [public.*], operations: [message], sink: stdout}\n",
	 "O\n" RELATIONS "B 0x100 7\nI 1 1,new,10\nC 0x100 0x108\n"
	 "B 0x200 8\nM cdc.ddl {\"v\":1,\"event\":\"ddl_command_end\",\"tag\":\"ALTER TABLE\",\"object_type\":\"table column\",\"identity\":\"public.orders.state\",\"schema\":\"public\",\"table\":\"orders\",\"relid\":1,\"subid\":2,\"statement\":\"ALTER TABLE orders RENAME status TO state\",\"columns\":[{\"attnum\":1,\"name\":\"id\",\"type\":\"text\",\"type_oid\":25,\"not_null\":true},{\"attnum\":2,\"name\":\"state\",\"type\":\"text\",\"type_oid\":25},{\"attnum\":3,\"name\":\"amount\",\"type\":\"text\",\"type_oid\":25}]}\nR 1 orders id,state,amount\nI 1 2,new,20\nC 0x200 0x208\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "A#0 seq=2 commit=0/200 tx=1<: all schema orders cols(id!,state<status,amount)\n"
	 "A#0 seq=2 commit=0/200 tx=1: all insert orders new(id=2,state=new,amount=20)\n",
	 2},
	{"the backfills hear of every delivered change, a held one at its commit",
	 "  - {name: all, tables: [public.*], sink: stdout}\n",
	 RELATIONS "W\nB 0x100 7\nI 1 1,new,10\nD 2 5,pen\nC 0x100 0x108\n"
	 "S 9 1\nU 1 1,paid,10 1,new,10\nE\nS 10 1\nI 2 6,ink\nE\nA 10 10\nm cdc.backfill wm\ns 9 0x200 0x208\n",
	 "backfills: xid=7 public.orders new(id=1)\n"
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "backfills: xid=7 public.items old(id=5)\n"
	 "A#0 seq=1 commit=0/100 tx=1<: all schema items cols(id,name)\n"
	 "A#0 seq=1 commit=0/100 tx=1: all delete items old(id=5,name=pen)\n"
	 "B abort xid=10\n"
	 "backfills: watermark at 0x1d: wm\n"
	 "backfills: xid=9 public.orders old(id=1) new(id=1)\n"
	 "A#0 seq=3 commit=0/200 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=3 commit=0/200 tx=0: all update orders new(id=1,status=paid,amount=10) old(id=1,status=new,amount=10)\n"
	 "B commit xid=9 seq=3 commit=0/200\n",
	 2},
	{"signals: each insert into the signal table at its commit, a held one's at its replay, never an aborted one's",
	 "  - {name: all, tables: [public.orders], sink: stdout}\n",
	 RELATIONS "G\nR 3 sig id,type,data\nB 0x100 7\nI 1 1,new,10\nI 3 a,execute-snapshot,{}\nU 3 a,x,y\n"
	 "I 3 b,stop-snapshot,~\nC 0x100 0x108\n"
	 "S 9 1\nI 3 c,execute-snapshot,d\nE\nS 10 1\nI 3 lost,execute-snapshot,d\nE\nA 10 10\ns 9 0x200 0x208\n"
	 "R 4 sig id,type\nB 0x300 11\nI 4 e,stop-snapshot\nC 0x300 0x308\n",
	 "A#0 seq=1 commit=0/100 tx=0<: all schema orders cols(id,status,amount)\n"
	 "A#0 seq=1 commit=0/100 tx=0: all insert orders new(id=1,status=new,amount=10)\n"
	 "signal: commit=0x100 tx=1 id=a type=execute-snapshot data={}\n"
	 "signal: commit=0x100 tx=3 id=b type=stop-snapshot data=~\n"
	 "B abort xid=10\n"
	 "signal: commit=0x200 tx=0 id=c type=execute-snapshot data=d\n"
	 "B commit xid=9 seq=2 commit=0/200\n"
	 "signal: commit=0x300 tx=0 id=e type=stop-snapshot data=~\n",
	 3},
    /* clang-format on */
};

static void run(const struct pipeline_case *t)
{
	fixture f;
	if (!setup(&f, t->subscriptions)) {
		test_failed++;
		fprintf(stderr, "case \"%s\": setup failed\n", t->name);
		return;
	}
	char script[8192];
	snprintf(script, sizeof(script), "%s", t->script);
	int no = 0;
	for (char *save, *line = strtok_r(script, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (!step(&f, line, ++no)) {
			test_failed++;
			fprintf(stderr, "case \"%s\": script line %d not understood: %s\n", t->name, no,
				line);
		}
	}
	if (strcmp(f.log.data ? f.log.data : "", t->deliveries) != 0) {
		test_failed++;
		fprintf(stderr, "case \"%s\":\n  got:\n%s  want:\n%s", t->name, f.log.data ? f.log.data : "",
			t->deliveries);
	} else {
		test_passed++;
	}
	CHECK_INT(f.boundaries, t->boundaries);
	teardown(&f);
}

int main(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run(&cases[i]);
	return TEST_SUMMARY("test_pipeline");
}

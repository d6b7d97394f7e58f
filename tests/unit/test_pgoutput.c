/* test_pgoutput.c: unit tests of the pgoutput parser and relation cache: hand-built messages of
 * every type with exact field values, every prefix and a table of malformed inputs with their
 * errors, relation cache replacement, and the messages a real PostgreSQL 15 sent (the fixture). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/pgoutput.h"
#include "test.h"

#define FIXTURE "tests/fixtures/pgoutput/pg15.bin"

/* A pgo_msg holds two full tuples: too big for the stack of every test. */
static pgo_msg msg;
static char err[512];

/* ---- building messages ---- */

typedef struct mb {
	uint8_t b[16384];
	size_t n;
} mb;

static void u8(mb *m, unsigned v)
{
	m->b[m->n++] = (uint8_t)v;
}

static void u16(mb *m, unsigned v)
{
	u8(m, v >> 8);
	u8(m, v);
}

static void u32(mb *m, uint32_t v)
{
	u16(m, v >> 16);
	u16(m, v & 0xffff);
}

static void u64(mb *m, uint64_t v)
{
	u32(m, (uint32_t)(v >> 32));
	u32(m, (uint32_t)v);
}

static void str(mb *m, const char *s)
{
	size_t n = strlen(s) + 1;
	memcpy(m->b + m->n, s, n);
	m->n += n;
}

static void text(mb *m, const char *s)
{
	u8(m, 't');
	u32(m, (uint32_t)strlen(s));
	memcpy(m->b + m->n, s, strlen(s));
	m->n += strlen(s);
}

/* Wire times count from 2000-01-01; parsed ones from 1970-01-01. */
#define T1 INT64_C(830000000123456)
#define T2 INT64_C(830000001000000)
#define UNIX(t) ((t) + PGO_EPOCH_OFFSET_US)

static bool datum_is(const pgo_datum *d, const char *s)
{
	return d->kind == PGO_TEXT && d->len == strlen(s) && memcmp(d->data, s, d->len) == 0;
}

/* ---- valid messages: one builder and one checker per case ---- */

static void b_begin(mb *m)
{
	u8(m, 'B');
	u64(m, 0x16B374D848);
	u64(m, T1);
	u32(m, 750);
}
static void c_begin(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_BEGIN);
	CHECK_INT(g->begin.final_lsn, 0x16B374D848);
	CHECK_INT(g->begin.commit_time, UNIX(T1));
	CHECK_INT(g->xid, 750);
}

static void b_commit(mb *m)
{
	u8(m, 'C');
	u8(m, 0);
	u64(m, 0x1A2B3C8);
	u64(m, 0x1A2B400);
	u64(m, T2);
}
static void c_commit(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_COMMIT);
	CHECK_INT(g->xid, 0);
	CHECK_INT(g->commit.flags, 0);
	CHECK_INT(g->commit.commit_lsn, 0x1A2B3C8);
	CHECK_INT(g->commit.end_lsn, 0x1A2B400);
	CHECK_INT(g->commit.commit_time, UNIX(T2));
}

static void b_origin(mb *m)
{
	u8(m, 'O');
	u64(m, 0x500);
	str(m, "pg_16399");
}
static void c_origin(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_ORIGIN);
	CHECK_INT(g->origin.lsn, 0x500);
	CHECK_STR(g->origin.name, "pg_16399");
}

static void relation_body(mb *m)
{
	u32(m, 16384);
	str(m, "public");
	str(m, "orders");
	u8(m, 'd');
	u16(m, 3);
	u8(m, 1), str(m, "id"), u32(m, 23), u32(m, 0xffffffff);
	u8(m, 0), str(m, "status"), u32(m, 1043), u32(m, 36);
	u8(m, 0), str(m, "amount"), u32(m, 1700), u32(m, (10 << 16 | 2) + 4);
}
static void b_relation(mb *m)
{
	u8(m, 'R');
	relation_body(m);
}
static void b_relation_stream(mb *m)
{
	u8(m, 'R');
	u32(m, 901);
	relation_body(m);
}
static void c_relation(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_RELATION);
	CHECK_INT(g->relation.relid, 16384);
	CHECK_STR(g->relation.nspname, "public");
	CHECK_STR(g->relation.relname, "orders");
	CHECK_INT(g->relation.replident, 'd');
	CHECK_INT(g->relation.ncols, 3);
	CHECK_INT(g->relation.cols[0].flags, 1);
	CHECK_STR(g->relation.cols[0].name, "id");
	CHECK_INT(g->relation.cols[0].type_oid, 23);
	CHECK_INT(g->relation.cols[0].typmod, -1);
	CHECK_INT(g->relation.cols[1].flags, 0);
	CHECK_STR(g->relation.cols[1].name, "status");
	CHECK_INT(g->relation.cols[1].type_oid, 1043);
	CHECK_INT(g->relation.cols[1].typmod, 36);
	CHECK_STR(g->relation.cols[2].name, "amount");
	CHECK_INT(g->relation.cols[2].type_oid, 1700);
	CHECK_INT(g->relation.cols[2].typmod, (10 << 16 | 2) + 4);
}
static void c_relation_nostream(const pgo_msg *g)
{
	c_relation(g);
	CHECK_INT(g->xid, 0);
}
static void c_relation_stream(const pgo_msg *g)
{
	c_relation(g);
	CHECK_INT(g->xid, 901);
}

/* A relation of pg_catalog: the namespace is sent empty. */
static void b_relation_catalog(mb *m)
{
	u8(m, 'R');
	u32(m, 1259);
	str(m, "");
	str(m, "pg_class");
	u8(m, 'n');
	u16(m, 0);
}
static void c_relation_catalog(const pgo_msg *g)
{
	CHECK_STR(g->relation.nspname, "pg_catalog");
	CHECK_STR(g->relation.relname, "pg_class");
	CHECK_INT(g->relation.replident, 'n');
	CHECK_INT(g->relation.ncols, 0);
}

static void b_type(mb *m)
{
	u8(m, 'Y');
	u32(m, 16401);
	str(m, "public");
	str(m, "mood");
}
static void b_type_stream(mb *m)
{
	u8(m, 'Y');
	u32(m, 902);
	u32(m, 16401);
	str(m, "public");
	str(m, "mood");
}
static void c_type(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_TYPE);
	CHECK_INT(g->typ.oid, 16401);
	CHECK_STR(g->typ.nspname, "public");
	CHECK_STR(g->typ.typname, "mood");
}
static void c_type_stream(const pgo_msg *g)
{
	c_type(g);
	CHECK_INT(g->xid, 902);
}

/* Insert with one column of every kind. */
static void insert_body(mb *m)
{
	u32(m, 16384);
	u8(m, 'N');
	u16(m, 4);
	text(m, "42");
	u8(m, 'n');
	u8(m, 'u');
	u8(m, 'b'), u32(m, 3), u8(m, 0), u8(m, 0xff), u8(m, 't');
}
static void b_insert(mb *m)
{
	u8(m, 'I');
	insert_body(m);
}
static void b_insert_stream(mb *m)
{
	u8(m, 'I');
	u32(m, 903);
	insert_body(m);
}
static void c_insert(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_INSERT);
	CHECK_INT(g->change.relid, 16384);
	CHECK_INT(g->change.old_kind, 0);
	CHECK_INT(g->change.old.ncols, 0);
	CHECK_INT(g->change.new.ncols, 4);
	CHECK(datum_is(&g->change.new.cols[0], "42"));
	CHECK_INT(g->change.new.cols[1].kind, PGO_NULL);
	CHECK_INT(g->change.new.cols[2].kind, PGO_TOAST);
	CHECK_INT(g->change.new.cols[3].kind, PGO_BINARY);
	CHECK_INT(g->change.new.cols[3].len, 3);
	CHECK(memcmp(g->change.new.cols[3].data, "\0\xfft", 3) == 0);
}
static void c_insert_nostream(const pgo_msg *g)
{
	c_insert(g);
	CHECK_INT(g->xid, 0);
}
static void c_insert_stream(const pgo_msg *g)
{
	c_insert(g);
	CHECK_INT(g->xid, 903);
}

/* An empty text value and a tuple of zero columns are legal. */
static void b_insert_empty(mb *m)
{
	u8(m, 'I');
	u32(m, 7);
	u8(m, 'N');
	u16(m, 1);
	text(m, "");
}
static void c_insert_empty(const pgo_msg *g)
{
	CHECK_INT(g->change.new.ncols, 1);
	CHECK_INT(g->change.new.cols[0].kind, PGO_TEXT);
	CHECK_INT(g->change.new.cols[0].len, 0);
}

static void b_update_plain(mb *m)
{
	u8(m, 'U');
	u32(m, 16384);
	u8(m, 'N');
	u16(m, 2);
	text(m, "7");
	text(m, "paid");
}
static void c_update_plain(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_UPDATE);
	CHECK_INT(g->change.relid, 16384);
	CHECK_INT(g->change.old_kind, 0);
	CHECK_INT(g->change.old.ncols, 0);
	CHECK_INT(g->change.new.ncols, 2);
	CHECK(datum_is(&g->change.new.cols[0], "7"));
	CHECK(datum_is(&g->change.new.cols[1], "paid"));
}

static void b_update_key(mb *m)
{
	u8(m, 'U');
	u32(m, 16384);
	u8(m, 'K');
	u16(m, 2);
	text(m, "7");
	u8(m, 'n');
	u8(m, 'N');
	u16(m, 2);
	text(m, "8");
	text(m, "new");
}
static void c_update_key(const pgo_msg *g)
{
	CHECK_INT(g->change.old_kind, 'K');
	CHECK_INT(g->change.old.ncols, 2);
	CHECK(datum_is(&g->change.old.cols[0], "7"));
	CHECK_INT(g->change.old.cols[1].kind, PGO_NULL);
	CHECK_INT(g->change.new.ncols, 2);
	CHECK(datum_is(&g->change.new.cols[0], "8"));
	CHECK(datum_is(&g->change.new.cols[1], "new"));
}

static void b_update_old_stream(mb *m)
{
	u8(m, 'U');
	u32(m, 904);
	u32(m, 16384);
	u8(m, 'O');
	u16(m, 2);
	text(m, "7");
	text(m, "new");
	u8(m, 'N');
	u16(m, 2);
	text(m, "7");
	u8(m, 'u');
}
static void c_update_old_stream(const pgo_msg *g)
{
	CHECK_INT(g->xid, 904);
	CHECK_INT(g->change.relid, 16384);
	CHECK_INT(g->change.old_kind, 'O');
	CHECK(datum_is(&g->change.old.cols[1], "new"));
	CHECK(datum_is(&g->change.new.cols[0], "7"));
	CHECK_INT(g->change.new.cols[1].kind, PGO_TOAST);
}

static void b_delete_key(mb *m)
{
	u8(m, 'D');
	u32(m, 16384);
	u8(m, 'K');
	u16(m, 1);
	text(m, "9");
}
static void c_delete_key(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_DELETE);
	CHECK_INT(g->change.relid, 16384);
	CHECK_INT(g->change.old_kind, 'K');
	CHECK_INT(g->change.old.ncols, 1);
	CHECK(datum_is(&g->change.old.cols[0], "9"));
	CHECK_INT(g->change.new.ncols, 0);
}

static void b_delete_old_stream(mb *m)
{
	u8(m, 'D');
	u32(m, 905);
	u32(m, 16384);
	u8(m, 'O');
	u16(m, 2);
	text(m, "9");
	u8(m, 'n');
}
static void c_delete_old_stream(const pgo_msg *g)
{
	CHECK_INT(g->xid, 905);
	CHECK_INT(g->change.old_kind, 'O');
	CHECK_INT(g->change.old.ncols, 2);
	CHECK_INT(g->change.old.cols[1].kind, PGO_NULL);
}

static void b_truncate(mb *m)
{
	u8(m, 'T');
	u32(m, 2);
	u8(m, 3);
	u32(m, 16384);
	u32(m, 0x80000001);
}
static void c_truncate(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_TRUNCATE);
	CHECK_INT(g->truncate.flags, 3);
	CHECK_INT(g->truncate.nrels, 2);
	CHECK_INT(pgo_truncate_relid(g, 0), 16384);
	CHECK_INT(pgo_truncate_relid(g, 1), 0x80000001);
	CHECK_INT(pgo_truncate_relid(g, 2), 0);
}

static void b_truncate_stream(mb *m)
{
	u8(m, 'T');
	u32(m, 906);
	u32(m, 1);
	u8(m, 2);
	u32(m, 16390);
}
static void c_truncate_stream(const pgo_msg *g)
{
	CHECK_INT(g->xid, 906);
	CHECK_INT(g->truncate.flags, 2);
	CHECK_INT(g->truncate.nrels, 1);
	CHECK_INT(pgo_truncate_relid(g, 0), 16390);
}

static void b_message(mb *m)
{
	u8(m, 'M');
	u8(m, 1);
	u64(m, 0x1A2B000);
	str(m, "cdc");
	u32(m, 5);
	memcpy(m->b + m->n, "he\0lo", 5);
	m->n += 5;
}
static void c_message(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_MESSAGE);
	CHECK_INT(g->xid, 0);
	CHECK_INT(g->message.flags, 1);
	CHECK_INT(g->message.lsn, 0x1A2B000);
	CHECK_STR(g->message.prefix, "cdc");
	CHECK_INT(g->message.len, 5);
	CHECK(memcmp(g->message.content, "he\0lo", 5) == 0);
}

static void b_message_stream(mb *m)
{
	u8(m, 'M');
	u32(m, 907);
	u8(m, 0);
	u64(m, 0x1A2B000);
	str(m, "");
	u32(m, 0);
}
static void c_message_stream(const pgo_msg *g)
{
	CHECK_INT(g->xid, 907);
	CHECK_INT(g->message.flags, 0);
	CHECK_STR(g->message.prefix, "");
	CHECK_INT(g->message.len, 0);
}

static void b_stream_start(mb *m)
{
	u8(m, 'S');
	u32(m, 908);
	u8(m, 1);
}
static void c_stream_start(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_STREAM_START);
	CHECK_INT(g->xid, 908);
	CHECK(g->stream_start.first_segment);
}

static void b_stream_start_next(mb *m)
{
	u8(m, 'S');
	u32(m, 908);
	u8(m, 0);
}
static void c_stream_start_next(const pgo_msg *g)
{
	CHECK_INT(g->xid, 908);
	CHECK(!g->stream_start.first_segment);
}

static void b_stream_stop(mb *m)
{
	u8(m, 'E');
}
static void c_stream_stop(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_STREAM_STOP);
	CHECK_INT(g->xid, 0);
}

static void b_stream_commit(mb *m)
{
	u8(m, 'c');
	u32(m, 908);
	u8(m, 0);
	u64(m, 0x2000);
	u64(m, 0x2040);
	u64(m, T1);
}
static void c_stream_commit(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_STREAM_COMMIT);
	CHECK_INT(g->xid, 908);
	CHECK_INT(g->commit.flags, 0);
	CHECK_INT(g->commit.commit_lsn, 0x2000);
	CHECK_INT(g->commit.end_lsn, 0x2040);
	CHECK_INT(g->commit.commit_time, UNIX(T1));
}

static void b_stream_abort(mb *m)
{
	u8(m, 'A');
	u32(m, 908);
	u32(m, 909);
}
static void c_stream_abort(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_STREAM_ABORT);
	CHECK_INT(g->xid, 908);
	CHECK_INT(g->stream_abort.subxid, 909);
	CHECK(!g->stream_abort.has_abort_info);
	CHECK_INT(g->stream_abort.abort_lsn, 0);
}

static void b_stream_abort_v4(mb *m)
{
	u8(m, 'A');
	u32(m, 908);
	u32(m, 908);
	u64(m, 0x3000);
	u64(m, T2);
}
static void c_stream_abort_v4(const pgo_msg *g)
{
	CHECK_INT(g->xid, 908);
	CHECK_INT(g->stream_abort.subxid, 908);
	CHECK(g->stream_abort.has_abort_info);
	CHECK_INT(g->stream_abort.abort_lsn, 0x3000);
	CHECK_INT(g->stream_abort.abort_time, UNIX(T2));
}

static void prepare_tail(mb *m, const char *gid)
{
	u64(m, 0x4000);
	u64(m, 0x4080);
	u64(m, T1);
	u32(m, 910);
	str(m, gid);
}
static void b_begin_prepare(mb *m)
{
	u8(m, 'b');
	prepare_tail(m, "gid-1");
}
static void b_prepare(mb *m)
{
	u8(m, 'P');
	u8(m, 0);
	prepare_tail(m, "gid-1");
}
static void b_stream_prepare(mb *m)
{
	u8(m, 'p');
	u8(m, 0);
	prepare_tail(m, "gid-2");
}
static void c_prepare_common(const pgo_msg *g)
{
	CHECK_INT(g->xid, 910);
	CHECK_INT(g->prepare.flags, 0);
	CHECK_INT(g->prepare.prepare_lsn, 0x4000);
	CHECK_INT(g->prepare.end_lsn, 0x4080);
	CHECK_INT(g->prepare.prepare_time, UNIX(T1));
}
static void c_begin_prepare(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_BEGIN_PREPARE);
	c_prepare_common(g);
	CHECK_STR(g->prepare.gid, "gid-1");
}
static void c_prepare(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_PREPARE);
	c_prepare_common(g);
	CHECK_STR(g->prepare.gid, "gid-1");
}
static void c_stream_prepare(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_STREAM_PREPARE);
	c_prepare_common(g);
	CHECK_STR(g->prepare.gid, "gid-2");
}

static void b_commit_prepared(mb *m)
{
	u8(m, 'K');
	u8(m, 0);
	u64(m, 0x5000);
	u64(m, 0x5080);
	u64(m, T2);
	u32(m, 910);
	str(m, "gid-1");
}
static void c_commit_prepared(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_COMMIT_PREPARED);
	CHECK_INT(g->xid, 910);
	CHECK_INT(g->commit_prepared.flags, 0);
	CHECK_INT(g->commit_prepared.commit_lsn, 0x5000);
	CHECK_INT(g->commit_prepared.end_lsn, 0x5080);
	CHECK_INT(g->commit_prepared.commit_time, UNIX(T2));
	CHECK_STR(g->commit_prepared.gid, "gid-1");
}

static void b_rollback_prepared(mb *m)
{
	u8(m, 'r');
	u8(m, 0);
	u64(m, 0x4080);
	u64(m, 0x6000);
	u64(m, T1);
	u64(m, T2);
	u32(m, 911);
	str(m, "gid-3");
}
static void c_rollback_prepared(const pgo_msg *g)
{
	CHECK_INT(g->type, PGO_ROLLBACK_PREPARED);
	CHECK_INT(g->xid, 911);
	CHECK_INT(g->rollback_prepared.flags, 0);
	CHECK_INT(g->rollback_prepared.prepare_end_lsn, 0x4080);
	CHECK_INT(g->rollback_prepared.rollback_end_lsn, 0x6000);
	CHECK_INT(g->rollback_prepared.prepare_time, UNIX(T1));
	CHECK_INT(g->rollback_prepared.rollback_time, UNIX(T2));
	CHECK_STR(g->rollback_prepared.gid, "gid-3");
}

/* A negative wire time (before 2000) is a real time too. */
static void b_begin_1999(mb *m)
{
	u8(m, 'B');
	u64(m, 1);
	u64(m, (uint64_t)INT64_C(-1000000));
	u32(m, 1);
}
static void c_begin_1999(const pgo_msg *g)
{
	CHECK_INT(g->begin.commit_time, PGO_EPOCH_OFFSET_US - 1000000);
}

/* The largest tuple PostgreSQL can send. */
static void b_insert_max(mb *m)
{
	u8(m, 'I');
	u32(m, 1);
	u8(m, 'N');
	u16(m, PGO_MAX_COLUMNS);
	for (int i = 0; i < PGO_MAX_COLUMNS; i++)
		u8(m, i % 2 ? 'n' : 'u');
}
static void c_insert_max(const pgo_msg *g)
{
	CHECK_INT(g->change.new.ncols, PGO_MAX_COLUMNS);
	CHECK_INT(g->change.new.cols[PGO_MAX_COLUMNS - 1].kind, PGO_NULL);
	CHECK_INT(g->change.new.cols[PGO_MAX_COLUMNS - 2].kind, PGO_TOAST);
}

typedef struct valid_case {
	const char *name;
	int version;
	bool abort_info;
	bool in_stream;
	void (*build)(mb *);
	void (*check)(const pgo_msg *);
} valid_case;

static const valid_case valid_cases[] = {
    {"begin", 1, false, false, b_begin, c_begin},
    {"begin before 2000", 1, false, false, b_begin_1999, c_begin_1999},
    {"commit", 1, false, false, b_commit, c_commit},
    {"origin", 1, false, false, b_origin, c_origin},
    {"relation", 1, false, false, b_relation, c_relation_nostream},
    {"relation in stream", 2, false, true, b_relation_stream, c_relation_stream},
    {"relation of pg_catalog", 1, false, false, b_relation_catalog, c_relation_catalog},
    {"type", 1, false, false, b_type, c_type},
    {"type in stream", 4, false, true, b_type_stream, c_type_stream},
    {"insert, every kind", 1, false, false, b_insert, c_insert_nostream},
    {"insert in stream", 2, false, true, b_insert_stream, c_insert_stream},
    {"insert of an empty text", 1, false, false, b_insert_empty, c_insert_empty},
    {"insert of 1664 columns", 1, false, false, b_insert_max, c_insert_max},
    {"update, no old tuple", 1, false, false, b_update_plain, c_update_plain},
    {"update, old key", 1, false, false, b_update_key, c_update_key},
    {"update in stream, old row", 3, false, true, b_update_old_stream, c_update_old_stream},
    {"delete, old key", 1, false, false, b_delete_key, c_delete_key},
    {"delete in stream, old row", 2, false, true, b_delete_old_stream, c_delete_old_stream},
    {"truncate", 1, false, false, b_truncate, c_truncate},
    {"truncate in stream", 2, false, true, b_truncate_stream, c_truncate_stream},
    {"message", 1, false, false, b_message, c_message},
    {"message in stream", 2, false, true, b_message_stream, c_message_stream},
    {"stream start, first", 2, false, false, b_stream_start, c_stream_start},
    {"stream start, next", 2, false, false, b_stream_start_next, c_stream_start_next},
    {"stream stop", 2, false, true, b_stream_stop, c_stream_stop},
    {"stream commit", 2, false, false, b_stream_commit, c_stream_commit},
    {"stream abort", 2, false, false, b_stream_abort, c_stream_abort},
    {"stream abort v4, no abort info", 4, false, false, b_stream_abort, c_stream_abort},
    {"stream abort v4, abort info", 4, true, false, b_stream_abort_v4, c_stream_abort_v4},
    {"begin prepare", 3, false, false, b_begin_prepare, c_begin_prepare},
    {"prepare", 3, false, false, b_prepare, c_prepare},
    {"commit prepared", 3, false, false, b_commit_prepared, c_commit_prepared},
    {"rollback prepared", 3, false, false, b_rollback_prepared, c_rollback_prepared},
    {"stream prepare", 3, false, false, b_stream_prepare, c_stream_prepare},
};

static bool parse(const uint8_t *p, size_t n, int version, bool abort_info, bool in_stream)
{
	pgo_options opt = {.proto_version = version, .stream_abort_info = abort_info};
	err[0] = '\0';
	return pgo_parse(p, n, &opt, in_stream, &msg, err, sizeof(err));
}

static bool starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void test_valid(void)
{
	for (size_t i = 0; i < sizeof(valid_cases) / sizeof(valid_cases[0]); i++) {
		const valid_case *c = &valid_cases[i];
		static mb m;
		m.n = 0;
		c->build(&m);
		bool ok = parse(m.b, m.n, c->version, c->abort_info, c->in_stream);
		if (!ok)
			fprintf(stderr, "case %s: %s\n", c->name, err);
		CHECK(ok);
		if (ok)
			c->check(&msg);

		/* Every strict prefix is an error naming the message type (a zero-length one has none). */
		char want[64];
		snprintf(want, sizeof(want), "%s message at offset ", pgo_type_name(m.b[0]));
		int bad = 0;
		for (size_t n = 0; n < m.n; n++) {
			if (parse(m.b, n, c->version, c->abort_info, c->in_stream) ||
			    !starts_with(err, n ? want : "empty message at offset 0")) {
				if (!bad++)
					fprintf(stderr, "case %s: prefix of %zu bytes: %s\n", c->name, n,
						err);
			}
		}
		CHECK_INT(bad, 0);

		/* One byte more is an error too. */
		m.b[m.n] = 0;
		CHECK(!parse(m.b, m.n + 1, c->version, c->abort_info, c->in_stream));
		snprintf(want, sizeof(want), "%s message at offset %zu: 1 trailing bytes",
			 pgo_type_name(m.b[0]), m.n);
		CHECK_STR(err, want);
	}
}

/* ---- malformed inputs ---- */

typedef struct bad_case {
	const char *name;
	int version;
	bool in_stream;
	void (*build)(mb *);
	const char *err;
} bad_case;

static void x_unknown(mb *m)
{
	u8(m, 'x');
	u32(m, 1);
}
static void x_unknown_unprintable(mb *m)
{
	u8(m, 0x01);
}
static void x_commit_flags(mb *m)
{
	b_commit(m);
	m->b[1] = 1;
}
static void x_truncate_flags(mb *m)
{
	b_truncate(m);
	m->b[5] = 4;
}
static void x_truncate_nrels(mb *m)
{
	u8(m, 'T');
	u32(m, 0xffffffff);
	u8(m, 0);
	u32(m, 1);
}
static void x_message_flags(mb *m)
{
	b_message(m);
	m->b[1] = 3;
}
static void x_message_len(mb *m)
{
	b_message(m);
	m->b[m->n - 6] = 6; /* low byte of the content length: 6 > 5 left */
}
static void x_prepare_flags(mb *m)
{
	b_prepare(m);
	m->b[1] = 0x80;
}
static void x_commit_prepared_flags(mb *m)
{
	b_commit_prepared(m);
	m->b[1] = 2;
}
static void x_rollback_prepared_flags(mb *m)
{
	b_rollback_prepared(m);
	m->b[1] = 1;
}
static void x_stream_commit_flags(mb *m)
{
	b_stream_commit(m);
	m->b[5] = 1;
}
static void x_first_segment(mb *m)
{
	b_stream_start(m);
	m->b[5] = 2;
}
static void x_insert_tag(mb *m)
{
	b_insert(m);
	m->b[5] = 'K';
}
static void x_insert_kind(mb *m)
{
	b_insert(m);
	m->b[15] = 'z'; /* the second column's kind, after 't' "42" */
}
static void x_insert_kind_unprintable(mb *m)
{
	b_insert(m);
	m->b[15] = 0;
}
static void x_insert_len(mb *m)
{
	u8(m, 'I');
	u32(m, 1);
	u8(m, 'N');
	u16(m, 1);
	u8(m, 't');
	u32(m, 0xffffffff);
	u8(m, 'a');
}
static void x_insert_ncols(mb *m)
{
	u8(m, 'I');
	u32(m, 1);
	u8(m, 'N');
	u16(m, PGO_MAX_COLUMNS + 1);
	for (int i = 0; i <= PGO_MAX_COLUMNS; i++)
		u8(m, 'n');
}
static void x_update_tag(mb *m)
{
	b_update_plain(m);
	m->b[5] = 'X';
}
static void x_update_second_tag(mb *m)
{
	b_update_key(m);
	m->b[15] = 'K'; /* 'N' expected after the old key tuple */
}
static void x_delete_tag(mb *m)
{
	b_delete_key(m);
	m->b[5] = 'N';
}
static void x_relation_ncols(mb *m)
{
	u8(m, 'R');
	u32(m, 1);
	str(m, "public");
	str(m, "t");
	u8(m, 'd');
	u16(m, 0xffff);
}
static void x_relation_replident(mb *m)
{
	b_relation(m);
	m->b[19] = 'x'; /* after 'R', relid, "public\0", "orders\0" */
}
static void x_relation_colflags(mb *m)
{
	b_relation(m);
	m->b[22] = 2; /* the first column's flags */
}
static void x_relation_nul(mb *m)
{
	u8(m, 'R');
	u32(m, 1);
	str(m, "public");
	memcpy(m->b + m->n, "orders", 6);
	m->n += 6;
}
static void x_origin_nul(mb *m)
{
	u8(m, 'O');
	u64(m, 1);
	u8(m, 'a');
}
static void x_time_range(mb *m)
{
	u8(m, 'B');
	u64(m, 1);
	u64(m, (uint64_t)INT64_MAX);
	u32(m, 1);
}
static void x_trailing(mb *m)
{
	b_stream_stop(m);
	u8(m, 0);
	u8(m, 0);
}

static const bad_case bad_cases[] = {
    {"unknown type", 4, false, x_unknown, "unknown message type 'x' (0x78) at offset 0"},
    {"unknown unprintable type", 4, false, x_unknown_unprintable, "unknown message type 0x01 at offset 0"},
    {"commit flags", 1, false, x_commit_flags, "Commit message at offset 1: unknown flags 0x01"},
    {"truncate flags", 1, false, x_truncate_flags, "Truncate message at offset 5: unknown flags 0x04"},
    {"truncate relation count", 1, false, x_truncate_nrels,
     "Truncate message at offset 6: truncated relids: 4 of 17179869180 bytes"},
    {"message flags", 1, false, x_message_flags, "Message message at offset 1: unknown flags 0x03"},
    {"message content length", 1, false, x_message_len,
     "Message message at offset 14: content length 6 exceeds the 5 bytes left"},
    {"prepare flags", 3, false, x_prepare_flags, "Prepare message at offset 1: unknown flags 0x80"},
    {"commit prepared flags", 3, false, x_commit_prepared_flags,
     "Commit Prepared message at offset 1: unknown flags 0x02"},
    {"rollback prepared flags", 3, false, x_rollback_prepared_flags,
     "Rollback Prepared message at offset 1: unknown flags 0x01"},
    {"stream commit flags", 2, false, x_stream_commit_flags,
     "Stream Commit message at offset 5: unknown flags 0x01"},
    {"first_segment", 2, false, x_first_segment,
     "Stream Start message at offset 5: first_segment is 2, not 0 or 1"},
    {"insert tag", 1, false, x_insert_tag, "Insert message at offset 5: tuple tag 'K' (0x4b), expected N"},
    {"insert kind", 1, false, x_insert_kind,
     "Insert message at offset 15: column 1: unknown kind 'z' (0x7a)"},
    {"insert kind NUL", 1, false, x_insert_kind_unprintable,
     "Insert message at offset 15: column 1: unknown kind 0x00"},
    {"insert length", 1, false, x_insert_len,
     "Insert message at offset 9: column 0 length 4294967295 exceeds the 1 bytes left"},
    {"insert ncols", 1, false, x_insert_ncols, "Insert message at offset 6: 1665 columns, more than 1664"},
    {"update tag", 1, false, x_update_tag,
     "Update message at offset 5: tuple tag 'X' (0x58), expected K, O or N"},
    {"update second tag", 1, false, x_update_second_tag,
     "Update message at offset 15: tuple tag 'K' (0x4b), expected N"},
    {"delete tag", 1, false, x_delete_tag,
     "Delete message at offset 5: tuple tag 'N' (0x4e), expected K or O"},
    {"relation ncols", 1, false, x_relation_ncols,
     "Relation message at offset 15: 65535 columns, more than 1664"},
    {"relation replica identity", 1, false, x_relation_replident,
     "Relation message at offset 19: unknown replica identity 0x78"},
    {"relation column flags", 1, false, x_relation_colflags,
     "Relation message at offset 22: unknown flags 0x02"},
    {"relation name without NUL", 1, false, x_relation_nul,
     "Relation message at offset 12: unterminated relation name"},
    {"origin name without NUL", 1, false, x_origin_nul,
     "Origin message at offset 9: unterminated origin name"},
    {"time out of range", 1, false, x_time_range, "Begin message at offset 9: commit_time out of range"},
    {"trailing bytes", 2, true, x_trailing, "Stream Stop message at offset 1: 2 trailing bytes"},
    {"stream start on protocol 1", 1, false, b_stream_start,
     "Stream Start message at offset 0: needs protocol version 2, the session uses 1"},
    {"stream prepare on protocol 2", 2, false, b_stream_prepare,
     "Stream Prepare message at offset 0: needs protocol version 3, the session uses 2"},
    {"protocol 5", 5, false, b_begin, "Begin message at offset 0: unsupported protocol version 5"},
    {"protocol 0", 0, false, b_begin, "Begin message at offset 0: unsupported protocol version 0"},
    /* The same bytes mean different things in and out of a stream. */
    {"insert without its stream xid", 2, true, b_insert,
     "Insert message at offset 9: tuple tag 0x00, expected N"},
    {"insert with an xid outside a stream", 2, false, b_insert_stream,
     "Insert message at offset 5: tuple tag 0x00, expected N"},
    {"abort info missing", 4, false, b_stream_abort, NULL},
};

static void test_bad(void)
{
	static mb m;
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const bad_case *c = &bad_cases[i];
		m.n = 0;
		c->build(&m);
		/* The last case needs abort info: every other case parses the same either way. */
		bool abort_info = strcmp(c->name, "abort info missing") == 0;
		bool ok = parse(m.b, m.n, c->version, abort_info, c->in_stream);
		if (ok)
			fprintf(stderr, "bad case %s parsed\n", c->name);
		CHECK(!ok);
		if (c->err)
			CHECK_STR(err, c->err);
		else
			CHECK(err[0] != '\0');
	}
	CHECK(!parse((const uint8_t *)"", 0, 1, false, false));
	CHECK_STR(err, "empty message at offset 0");
	/* A truncated in-stream xid names the field. */
	CHECK(!parse((const uint8_t *)"I\0\0", 3, 2, false, true));
	CHECK_STR(err, "Insert message at offset 1: truncated xid: 2 of 4 bytes");
	m.n = 0;
	b_stream_abort(&m);
	CHECK(!parse(m.b, m.n, 4, true, false));
	CHECK_STR(err, "Stream Abort message at offset 9: truncated abort_lsn: 0 of 8 bytes");
	/* Abort info is a protocol 4 feature: asked for on protocol 2, it is not read. */
	CHECK(parse(m.b, m.n, 2, true, false));
	CHECK(!msg.stream_abort.has_abort_info);
	/* A small error buffer truncates the text, never overflows. */
	char small[16];
	pgo_options opt = {.proto_version = 1};
	memset(small, 'X', sizeof(small));
	CHECK(!pgo_parse((const uint8_t *)"C\1", 2, &opt, false, &msg, small, 8));
	CHECK_STR(small, "Commit ");
	CHECK(small[8] == 'X');
}

/* ---- type names ---- */

static void test_type_names(void)
{
	CHECK_STR(pgo_type_name(PGO_INSERT), "Insert");
	CHECK_STR(pgo_type_name(PGO_STREAM_COMMIT), "Stream Commit");
	CHECK_STR(pgo_type_name(PGO_ROLLBACK_PREPARED), "Rollback Prepared");
	CHECK_STR(pgo_type_name('x'), "unknown");
	CHECK_STR(pgo_type_name(-1), "unknown");
}

/* ---- relation cache ---- */

static void relation_msg(mb *m, uint32_t relid, const char *relname, int ncols, const char *const *names)
{
	m->n = 0;
	u8(m, 'R');
	u32(m, relid);
	str(m, "public");
	str(m, relname);
	u8(m, 'd');
	u16(m, (unsigned)ncols);
	for (int i = 0; i < ncols; i++) {
		u8(m, i == 0);
		str(m, names[i]);
		u32(m, i == 0 ? 23 : 25);
		u32(m, 0xffffffff);
	}
}

static char *col_names(const pgo_rel *r)
{
	static char s[256];
	s[0] = '\0';
	for (int i = 0; r && i < r->ncols; i++) {
		if (i)
			strcat(s, ",");
		strcat(s, r->cols[i].name);
	}
	return s;
}

/* A FULL relation: the server flags every column as identity. */
static const pgo_rel *put_full(pgo_relcache *c, mb *m, uint32_t relid, const char *const *cols)
{
	relation_msg(m, relid, "full", 3, cols);
	CHECK(parse(m->b, m->n, 1, false, false));
	msg.relation.replident = 'f';
	for (int i = 0; i < 3; i++)
		msg.relation.cols[i].flags = 1;
	pgo_relcache_put(c, &msg);
	return pgo_relcache_get(c, relid);
}

/* Under REPLICA IDENTITY FULL the key is the primary key, when the cache was told it. */
static void test_primary_key(void)
{
	static mb m;
	pgo_relcache *c = pgo_relcache_new();
	const char *cols[] = {"id", "region", "v"}, *pk[] = {"region", "id"}, *pk2[] = {"v"};

	pgo_relcache_set_primary_key(c, 500, pk, 2); /* known before the Relation message */
	const pgo_rel *r = put_full(c, &m, 500, cols);
	CHECK_INT(r->nkeys, 2);
	CHECK_INT(r->cols[0].flags + 2 * r->cols[1].flags + 4 * r->cols[2].flags, 3);

	r = put_full(c, &m, 501, cols); /* no primary key known: the server's flags stand */
	CHECK_INT(r->nkeys, 3);
	pgo_relcache_set_primary_key(c, 501, pk2, 1); /* learnt later: applied at once */
	r = pgo_relcache_get(c, 501);
	CHECK_INT(r->nkeys, 1);
	CHECK_INT(r->cols[0].flags + 2 * r->cols[1].flags + 4 * r->cols[2].flags, 4);
	CHECK_INT(r->version, 2);

	relation_msg(&m, 502, "dflt", 3, cols); /* not FULL: untouched */
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put(c, &msg);
	pgo_relcache_set_primary_key(c, 502, pk2, 1);
	r = pgo_relcache_get(c, 502);
	CHECK_INT(r->nkeys, 1);
	CHECK_INT(r->cols[0].flags, 1);
	CHECK_INT(r->version, 1);
	pgo_relcache_free(c);
}

static void test_relcache(void)
{
	static mb m;
	pgo_relcache *c = pgo_relcache_new();
	CHECK(pgo_relcache_get(c, 16384) == NULL);

	const char *v1[] = {"id", "name"};
	relation_msg(&m, 16384, "items", 2, v1);
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put(c, &msg);
	memset(m.b, 0, m.n); /* the entry owns copies of its strings */
	const pgo_rel *r = pgo_relcache_get(c, 16384);
	CHECK(r != NULL);
	if (!r)
		goto out;
	CHECK_INT(r->relid, 16384);
	CHECK_STR(r->nspname, "public");
	CHECK_STR(r->relname, "items");
	CHECK_INT(r->replident, 'd');
	CHECK_INT(r->ncols, 2);
	CHECK_INT(r->nkeys, 1);
	CHECK_STR(col_names(r), "id,name");
	CHECK_INT(r->cols[0].type_oid, 23);
	CHECK_INT(r->cols[1].typmod, -1);
	CHECK_INT(r->version, 1);

	/* ADD COLUMN: the same relid, replaced, version bumped. */
	const char *v2[] = {"id", "name", "color"};
	relation_msg(&m, 16384, "items", 3, v2);
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put(c, &msg);
	r = pgo_relcache_get(c, 16384);
	CHECK_STR(col_names(r), "id,name,color");
	CHECK_INT(r->version, 2);
	CHECK_INT(r->ncols, 3);

	/* DROP COLUMN. */
	const char *v3[] = {"id", "color"};
	relation_msg(&m, 16384, "items", 2, v3);
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put(c, &msg);
	r = pgo_relcache_get(c, 16384);
	CHECK_STR(col_names(r), "id,color");
	CHECK_INT(r->version, 3);

	/* Many relations: the table grows, every entry stays findable. */
	for (uint32_t id = 20000; id < 22000; id++) {
		char name[32];
		snprintf(name, sizeof(name), "t%" PRIu32, id);
		relation_msg(&m, id, name, 1, v1);
		CHECK(parse(m.b, m.n, 1, false, false));
		pgo_relcache_put(c, &msg);
	}
	int found = 0;
	for (uint32_t id = 20000; id < 22000; id++) {
		char name[32];
		snprintf(name, sizeof(name), "t%" PRIu32, id);
		const pgo_rel *e = pgo_relcache_get(c, id);
		found += e && strcmp(e->relname, name) == 0 && e->version == 1;
	}
	CHECK_INT(found, 2000);
	CHECK_STR(pgo_relcache_get(c, 16384)->relname, "items");
	CHECK(pgo_relcache_get(c, 22000) == NULL);

	/* A relation without columns. */
	relation_msg(&m, 5, "empty", 0, NULL);
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put(c, &msg);
	CHECK_INT(pgo_relcache_get(c, 5)->ncols, 0);
	CHECK_INT(pgo_relcache_get(c, 5)->nkeys, 0);

	/* Type names: from Type messages, else built in, else unknown. */
	CHECK_STR(pgo_type_name_of(c, 23), "int4");
	CHECK_STR(pgo_type_name_of(c, 1007), "_int4");
	CHECK(pgo_type_name_of(c, 16401) == NULL);
	m.n = 0;
	b_type(&m);
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put_type(c, &msg);
	memset(m.b, 0, m.n);
	CHECK_STR(pgo_type_name_of(c, 16401), "public.mood");
	m.n = 0;
	u8(&m, 'Y');
	u32(&m, 16401);
	str(&m, "");
	str(&m, "mood2");
	CHECK(parse(m.b, m.n, 1, false, false));
	pgo_relcache_put_type(c, &msg);
	CHECK_STR(pgo_type_name_of(c, 16401), "pg_catalog.mood2");
	for (uint32_t oid = 30000; oid < 30200; oid++) {
		m.n = 0;
		u8(&m, 'Y');
		u32(&m, oid);
		str(&m, "s");
		str(&m, "t");
		CHECK(parse(m.b, m.n, 1, false, false));
		pgo_relcache_put_type(c, &msg);
	}
	CHECK_STR(pgo_type_name_of(c, 30199), "s.t");
	CHECK_STR(pgo_type_name_of(c, 16401), "pg_catalog.mood2");
	CHECK(pgo_type_name_of(NULL, 25) != NULL);
out:
	pgo_relcache_free(c);
	pgo_relcache_free(NULL);
}

/* ---- the fixture: what PostgreSQL 15 really sent for tests/fixtures/capture.py's workload ---- */

typedef struct record {
	uint64_t lsn;
	const uint8_t *p;
	uint32_t len;
} record;

static uint8_t *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	uint8_t *data = NULL;
	size_t cap = 0, n = 0, got;
	do {
		if (cap - n < 65536)
			data = realloc(data, cap = cap ? cap * 2 : 262144);
		got = fread(data + n, 1, cap - n, f);
		n += got;
	} while (got > 0);
	fclose(f);
	*len = n;
	return data;
}

static uint64_t get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Run-length form of the sequence of message types: "BRI2C" is Begin, Relation, 2 Inserts, Commit. */
static void rle_append(char *s, size_t cap, char type, int count)
{
	size_t n = strlen(s);
	if (count == 1)
		snprintf(s + n, cap - n, "%c", type);
	else if (count > 1)
		snprintf(s + n, cap - n, "%c%d", type, count);
}

static const char *datum_text(const pgo_datum *d)
{
	static char s[4][64];
	static int k;
	char *out = s[k++ % 4];
	if (d->kind != PGO_TEXT)
		snprintf(out, 64, "<%c>", d->kind);
	else
		snprintf(out, 64, "%.*s", (int)(d->len < 60 ? d->len : 60), d->data);
	return out;
}

static void test_fixture(void)
{
	size_t size;
	uint8_t *data = read_file(FIXTURE, &size);
	CHECK(data != NULL);
	if (!data) {
		fprintf(stderr, "cannot read %s (run the tests from the repository root)\n", FIXTURE);
		return;
	}
	pgo_options opt = {.proto_version = 3};
	pgo_relcache *c = pgo_relcache_new();
	char seq[1024] = "", rels[1024] = "";
	char last = 0;
	int run = 0, nrec = 0, failures = 0;
	bool in_stream = false;

	/* Facts gathered in one pass, asserted below. */
	uint32_t items = 0, t2 = 0, full_t = 0, docs = 0, moods = 0, mood_oid = 0, big = 0;
	uint64_t begin_final_lsn = 0, items_versions = 0;
	int64_t begin_time = 0;
	int begin_commit_match = 0, commits = 0, key_update = 0, key_delete = 0, full_update = 0,
	    full_delete = 0;
	int toast_update = 0, toast_insert = 0, plain_update = 0, plum = 0, fig = 0, truncates = 0,
	    messages = 0;
	int relation_wal_nonzero = 0, moods_insert = 0, stream_inserts = 0, wrong_stream_xid = 0,
	    sub_inserts = 0;
	uint32_t stream_xid = 0, sub_xid = 0;
	uint32_t stream_starts[8], nstarts = 0, firsts = 0;
	uint32_t commit_xid = 0, abort_xid[2] = {0}, abort_sub[2] = {0}, naborts = 0;
	uint32_t prep_xid[3] = {0}, nprep = 0, cp_xid[2] = {0}, ncp = 0, rp_xid = 0, sp_xid = 0;
	char gids[256] = "";
	uint64_t bp_lsn = 0, prep_lsn = 0, prep_end = 0;
	int64_t prep_time = 0, rp_prep_time = 0;

	for (size_t off = 0; off < size;) {
		if (size - off < 12) {
			failures++;
			break;
		}
		record rec = {.lsn = get_be(data + off, 8),
			      .len = (uint32_t)get_be(data + off + 8, 4),
			      .p = data + off + 12};
		if (rec.len > size - off - 12) {
			failures++;
			break;
		}
		off += 12 + rec.len;
		nrec++;
		if (!pgo_parse(rec.p, rec.len, &opt, in_stream, &msg, err, sizeof(err))) {
			fprintf(stderr, "record %d: %s\n", nrec, err);
			failures++;
			continue;
		}
		if ((char)msg.type == last) {
			run++;
		} else {
			rle_append(seq, sizeof(seq), last, run);
			last = (char)msg.type;
			run = 1;
		}
		/* Changes inside a stream name their transaction; outside they carry no xid. */
		if (in_stream != (msg.xid != 0) &&
		    (msg.type == PGO_INSERT || msg.type == PGO_RELATION || msg.type == PGO_TRUNCATE))
			wrong_stream_xid++;

		const pgo_rel *r;
		const pgo_tuple *o = &msg.change.old, *n = &msg.change.new;
		switch (msg.type) {
		case PGO_BEGIN:
			begin_final_lsn = msg.begin.final_lsn;
			begin_time = msg.begin.commit_time;
			break;
		case PGO_COMMIT:
			commits++;
			begin_commit_match += msg.commit.commit_lsn == begin_final_lsn &&
					      msg.commit.commit_time == begin_time &&
					      msg.commit.end_lsn > begin_final_lsn &&
					      rec.lsn == msg.commit.end_lsn;
			break;
		case PGO_RELATION:
			relation_wal_nonzero += rec.lsn != 0;
			pgo_relcache_put(c, &msg);
			snprintf(rels + strlen(rels), sizeof(rels) - strlen(rels), "%s%s.%s",
				 rels[0] ? "," : "", msg.relation.nspname, msg.relation.relname);
			if (!strcmp(msg.relation.relname, "items"))
				items = msg.relation.relid;
			else if (!strcmp(msg.relation.relname, "t2"))
				t2 = msg.relation.relid;
			else if (!strcmp(msg.relation.relname, "full_t"))
				full_t = msg.relation.relid;
			else if (!strcmp(msg.relation.relname, "docs"))
				docs = msg.relation.relid;
			else if (!strcmp(msg.relation.relname, "moods"))
				moods = msg.relation.relid;
			else if (!strcmp(msg.relation.relname, "big"))
				big = msg.relation.relid;
			break;
		case PGO_TYPE:
			pgo_relcache_put_type(c, &msg);
			mood_oid = msg.typ.oid;
			break;
		case PGO_INSERT:
			r = pgo_relcache_get(c, msg.change.relid);
			CHECK(r != NULL);
			if (!r)
				break;
			if (r->relid == items && datum_is(&n->cols[0], "3")) {
				plum++;
				CHECK_STR(col_names(r), "id,name,qty,color");
				CHECK_STR(datum_text(&n->cols[3]), "purple");
				items_versions = r->version;
			}
			if (r->relid == items && datum_is(&n->cols[0], "4")) {
				fig++;
				CHECK_STR(col_names(r), "id,name,color");
				CHECK_STR(datum_text(&n->cols[2]), "green");
				CHECK_INT(r->version, items_versions + 1);
			}
			if (r->relid == docs) {
				toast_insert++;
				CHECK_INT(n->cols[2].kind, PGO_TEXT);
				CHECK_INT(n->cols[2].len, 6400);
			}
			if (r->relid == moods) {
				moods_insert++;
				CHECK_STR(datum_text(&n->cols[1]), "happy");
				CHECK_INT(r->cols[1].type_oid, mood_oid);
				CHECK_STR(pgo_type_name_of(c, r->cols[1].type_oid), "public.mood");
				CHECK_STR(pgo_type_name_of(c, r->cols[0].type_oid), "int4");
			}
			if (r->relid == big && in_stream) {
				stream_inserts++;
				if (msg.xid != stream_xid) {
					sub_inserts++;
					sub_xid = msg.xid;
				}
			}
			break;
		case PGO_UPDATE:
			if (msg.change.relid == items && msg.change.old_kind == 'K') {
				key_update++;
				CHECK_INT(o->ncols, 3);
				CHECK_STR(datum_text(&o->cols[0]), "2");
				CHECK_INT(o->cols[1].kind, PGO_NULL);
				CHECK_INT(o->cols[2].kind, PGO_NULL);
				CHECK_STR(datum_text(&n->cols[0]), "10");
				CHECK_STR(datum_text(&n->cols[1]), "pear");
			} else if (msg.change.relid == items) {
				plain_update++;
				CHECK_INT(msg.change.old_kind, 0);
				CHECK_STR(datum_text(&n->cols[2]), "4");
			}
			if (msg.change.relid == full_t) {
				full_update++;
				CHECK_INT(msg.change.old_kind, 'O');
				CHECK_STR(datum_text(&o->cols[0]), "1");
				CHECK_STR(datum_text(&o->cols[1]), "a");
				CHECK_STR(datum_text(&n->cols[1]), "c");
			}
			if (msg.change.relid == docs) {
				toast_update++;
				CHECK_INT(msg.change.old_kind, 0);
				CHECK_STR(datum_text(&n->cols[1]), "second");
				CHECK_INT(n->cols[2].kind, PGO_TOAST);
			}
			break;
		case PGO_DELETE:
			if (msg.change.relid == items) {
				key_delete++;
				CHECK_INT(msg.change.old_kind, 'K');
				CHECK_STR(datum_text(&o->cols[0]), "1");
				CHECK_INT(o->cols[1].kind, PGO_NULL);
			}
			if (msg.change.relid == full_t) {
				full_delete++;
				CHECK_INT(msg.change.old_kind, 'O');
				CHECK_STR(datum_text(&o->cols[0]), "2");
				CHECK_STR(datum_text(&o->cols[1]), "b");
			}
			break;
		case PGO_TRUNCATE:
			truncates++;
			CHECK_INT(msg.truncate.flags, 2);
			CHECK_INT(msg.truncate.nrels, 2);
			CHECK_INT(pgo_truncate_relid(&msg, 0), items);
			CHECK_INT(pgo_truncate_relid(&msg, 1), t2);
			break;
		case PGO_MESSAGE:
			messages++;
			CHECK_INT(msg.xid, 0);
			if (messages == 1) {
				CHECK_INT(msg.message.flags, 1);
				CHECK_STR(msg.message.prefix, "cdc");
				CHECK(msg.message.len == 19 &&
				      !memcmp(msg.message.content, "transactional hello", 19));
			} else if (messages == 2) {
				CHECK_INT(msg.message.flags, 0);
				CHECK_STR(msg.message.prefix, "cdc");
				CHECK(msg.message.len == 23 &&
				      !memcmp(msg.message.content, "non-transactional hello", 23));
			} else {
				CHECK_INT(msg.message.flags, 0);
				CHECK_STR(msg.message.prefix, "cdc-fixture-end");
			}
			break;
		case PGO_STREAM_START:
			in_stream = true;
			if (msg.stream_start.first_segment) {
				firsts++;
				stream_xid = msg.xid;
			}
			CHECK_INT(msg.xid, stream_xid);
			if (nstarts < 8)
				stream_starts[nstarts++] = msg.xid;
			break;
		case PGO_STREAM_STOP:
			in_stream = false;
			break;
		case PGO_STREAM_COMMIT:
			commit_xid = msg.xid;
			CHECK(msg.commit.end_lsn > msg.commit.commit_lsn);
			break;
		case PGO_STREAM_ABORT:
			if (naborts < 2) {
				abort_xid[naborts] = msg.xid;
				abort_sub[naborts] = msg.stream_abort.subxid;
			}
			naborts++;
			CHECK(!msg.stream_abort.has_abort_info);
			break;
		case PGO_BEGIN_PREPARE:
			bp_lsn = msg.prepare.prepare_lsn;
			if (nprep < 3)
				prep_xid[nprep++] = msg.xid;
			snprintf(gids + strlen(gids), sizeof(gids) - strlen(gids), "b:%s ", msg.prepare.gid);
			break;
		case PGO_PREPARE:
			CHECK_INT(msg.prepare.prepare_lsn, bp_lsn);
			CHECK_INT(msg.xid, prep_xid[nprep - 1]);
			prep_lsn = msg.prepare.prepare_lsn;
			prep_end = msg.prepare.end_lsn;
			prep_time = msg.prepare.prepare_time;
			snprintf(gids + strlen(gids), sizeof(gids) - strlen(gids), "P:%s ", msg.prepare.gid);
			break;
		case PGO_COMMIT_PREPARED:
			if (ncp < 2)
				cp_xid[ncp++] = msg.xid;
			CHECK(msg.commit_prepared.commit_lsn > prep_lsn);
			snprintf(gids + strlen(gids), sizeof(gids) - strlen(gids), "K:%s ",
				 msg.commit_prepared.gid);
			break;
		case PGO_ROLLBACK_PREPARED:
			rp_xid = msg.xid;
			rp_prep_time = msg.rollback_prepared.prepare_time;
			CHECK_INT(msg.rollback_prepared.prepare_end_lsn, prep_end);
			CHECK(msg.rollback_prepared.rollback_time >= msg.rollback_prepared.prepare_time);
			snprintf(gids + strlen(gids), sizeof(gids) - strlen(gids), "r:%s ",
				 msg.rollback_prepared.gid);
			break;
		case PGO_STREAM_PREPARE:
			sp_xid = msg.xid;
			snprintf(gids + strlen(gids), sizeof(gids) - strlen(gids), "p:%s ", msg.prepare.gid);
			break;
		default:
			break;
		}
	}
	rle_append(seq, sizeof(seq), last, run);

	CHECK_INT(failures, 0);
	CHECK_INT(nrec, 1885);
	CHECK(!in_stream);
	/* The whole conversation, in order (see capture.py's WORKLOAD for what each part is). */
	CHECK_STR(seq, "BRI2CBUCBUCBDC"	    /* items: insert 2, update, update of the key, delete */
		       "BRI2CBUCBDC"	    /* full_t, replica identity full */
		       "BRICBUC"	    /* docs: insert, update leaving the TOASTed body */
		       "BRICBRIC"	    /* items after ADD COLUMN, after DROP COLUMN */
		       "BRICBR2TC"	    /* t2; TRUNCATE items, t2 */
		       "BRIMCM"		    /* transactional message in a transaction, then not */
		       "BYRIC"		    /* enum type, then its table */
		       "SRI398ESI102Ec"	    /* streamed, committed */
		       "SRI398ESI398EA2"    /* streamed, subtransaction rolled back, then all aborted */
		       "bIPKbIPr"	    /* two-phase: commit prepared, rollback prepared */
		       "SRI398ESI102EpKM"); /* streamed two-phase; the end marker */
	CHECK_STR(rels, "public.items,public.full_t,public.docs,public.items,public.items,public.t2,"
			"public.items,public.t2,public.items,public.moods,public.big,public.big,public.big");
	CHECK_INT(commits, 15);
	CHECK_INT(begin_commit_match, 15);
	/* The walsender stamps a Commit's XLogData with the end LSN, a Relation's with 0. */
	CHECK_INT(relation_wal_nonzero, 0);
	/* Commit times are 2020s Unix times: the epoch was converted. */
	CHECK(begin_time > INT64_C(1577836800000000) && begin_time < INT64_C(4102444800000000));
	CHECK_INT(wrong_stream_xid, 0);
	CHECK_INT(plain_update, 1);
	CHECK_INT(key_update, 1);
	CHECK_INT(key_delete, 1);
	CHECK_INT(full_update, 1);
	CHECK_INT(full_delete, 1);
	CHECK_INT(toast_insert, 1);
	CHECK_INT(toast_update, 1);
	CHECK_INT(plum, 1);
	CHECK_INT(fig, 1);
	CHECK_INT(pgo_relcache_get(c, items)->version, 5); /* sent again at the TRUNCATE and after it */
	CHECK_INT(truncates, 1);
	CHECK_INT(messages, 3);
	CHECK(mood_oid >= 16384);
	CHECK_INT(moods_insert, 1);

	/* Streams: three transactions of two segments each, the first flagged. */
	CHECK_INT(nstarts, 6);
	CHECK_INT(firsts, 3);
	CHECK(stream_starts[0] == stream_starts[1] && stream_starts[2] == stream_starts[3] &&
	      stream_starts[4] == stream_starts[5]);
	CHECK(stream_starts[0] != stream_starts[2] && stream_starts[2] != stream_starts[4]);
	CHECK_INT(commit_xid, stream_starts[0]);
	CHECK_INT(stream_inserts, 398 + 102 + 398 + 102 + 296 + 398 + 102);
	/* The subtransaction's changes carry its own xid, not the top-level one... */
	CHECK_INT(sub_inserts, 296);
	CHECK(sub_xid != 0 && sub_xid != stream_starts[2]);
	/* ...and ROLLBACK TO SAVEPOINT aborts just it: Stream Abort (xid, subxid), then the whole. */
	CHECK_INT(naborts, 2);
	CHECK_INT(abort_xid[0], stream_starts[2]);
	CHECK_INT(abort_sub[0], sub_xid);
	CHECK(abort_sub[0] != abort_xid[0]);
	CHECK_INT(abort_xid[1], stream_starts[2]);
	CHECK_INT(abort_sub[1], stream_starts[2]);

	/* Two-phase. */
	CHECK_STR(gids, "b:cdc_fx_commit P:cdc_fx_commit K:cdc_fx_commit b:cdc_fx_rollback P:cdc_fx_rollback "
			"r:cdc_fx_rollback p:cdc_fx_stream K:cdc_fx_stream ");
	CHECK_INT(nprep, 2);
	CHECK_INT(cp_xid[0], prep_xid[0]);
	CHECK_INT(rp_xid, prep_xid[1]);
	CHECK_INT(rp_prep_time, prep_time);
	CHECK_INT(sp_xid, stream_starts[4]);
	CHECK_INT(cp_xid[1], stream_starts[4]);

	pgo_relcache_free(c);
	free(data);
}

int main(void)
{
	test_primary_key();
	test_type_names();
	test_valid();
	test_bad();
	test_relcache();
	test_fixture();
	return TEST_SUMMARY("test_pgoutput");
}

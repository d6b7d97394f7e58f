/* See pgoutput.h. A parser for pgoutput logical replication messages (protocol versions 1 to 4), and the
 * relation cache that maps relation and type ids to their latest Relation/Type message. The parser is the hot
 * path. It allocates nothing and checks every length before reading. */
#include "decoder/pgoutput.h"
#include "decoder/base/bytes.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/pgtypes.h"

/* ---- the reader ---- */

/* A cursor over one message. Every read checks the bytes left first. On failure the reader writes the error,
 * naming the message type and the offset of the field that could not be read. */
typedef struct pgo_reader {
	const uint8_t *p;
	size_t pos, len;
	int type;
	char *err;
	size_t errlen;
} pgo_reader;

__attribute__((cold, noinline, format(printf, 3, 4))) static void rd_error(pgo_reader *r, size_t at,
									   const char *fmt, ...)
{
	char what[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	util_errf(r->err, r->errlen, "%s message at offset %zu: %s", pgo_type_name(r->type), at, what);
}

/* The error paths are out of line. The macro's visible false lets the compiler see that nothing read is used
 * after a failure. */
#define rd_fail(r, at, ...) (rd_error((r), (at), __VA_ARGS__), false)
#define rd_short(r, field, need)                                                                             \
	rd_fail((r), (r)->pos, "truncated %s: %zu of %zu bytes", (field), (r)->len - (r)->pos, (size_t)(need))

/* A byte for an error message, e.g. 'x' (0x78) when printable, else 0x01. */
typedef struct byte_text {
	char s[16];
} byte_text;

static byte_text show_byte(uint8_t b)
{
	byte_text t;
	if (b >= 0x20 && b < 0x7f)
		snprintf(t.s, sizeof(t.s), "'%c' (0x%02x)", b, b);
	else
		snprintf(t.s, sizeof(t.s), "0x%02x", b);
	return t;
}

static inline bool rd_u8(pgo_reader *r, const char *field, uint8_t *v)
{
	if (r->pos >= r->len)
		return rd_short(r, field, 1);
	*v = r->p[r->pos++];
	return true;
}

static inline bool rd_u16(pgo_reader *r, const char *field, uint16_t *v)
{
	if (r->len - r->pos < 2)
		return rd_short(r, field, 2);
	*v = get_be16(r->p + r->pos);
	r->pos += 2;
	return true;
}

static inline bool rd_u32(pgo_reader *r, const char *field, uint32_t *v)
{
	if (r->len - r->pos < 4)
		return rd_short(r, field, 4);
	*v = get_be32(r->p + r->pos);
	r->pos += 4;
	return true;
}

static inline bool rd_u64(pgo_reader *r, const char *field, uint64_t *v)
{
	if (r->len - r->pos < 8)
		return rd_short(r, field, 8);
	*v = get_be64(r->p + r->pos);
	r->pos += 8;
	return true;
}

/* A TimestampTz (microseconds since 2000-01-01), converted to microseconds since the Unix epoch. Values so
 * large that the conversion would overflow are no real timestamp, and are rejected. */
static inline bool rd_time(pgo_reader *r, const char *field, int64_t *v)
{
	size_t at = r->pos;
	uint64_t u;
	if (!rd_u64(r, field, &u))
		return false;
	int64_t t = (int64_t)u;
	if (t > INT64_MAX - PGO_EPOCH_OFFSET_US)
		return rd_fail(r, at, "%s out of range", field);
	*v = t + PGO_EPOCH_OFFSET_US;
	return true;
}

/* A NUL-terminated string. The terminator must lie inside the message. */
static inline bool rd_str(pgo_reader *r, const char *field, const char **s)
{
	const uint8_t *start = r->p + r->pos;
	const uint8_t *nul = memchr(start, '\0', r->len - r->pos);
	if (!nul)
		return rd_fail(r, r->pos, "unterminated %s", field);
	*s = (const char *)start;
	r->pos += (size_t)(nul - start) + 1;
	return true;
}

/* pgoutput sends an empty namespace for pg_catalog, to save space. */
static inline bool rd_nsp(pgo_reader *r, const char **s)
{
	if (!rd_str(r, "namespace", s))
		return false;
	if (**s == '\0')
		*s = "pg_catalog";
	return true;
}

static inline bool rd_flags(pgo_reader *r, uint8_t allowed, uint8_t *flags)
{
	size_t at = r->pos;
	if (!rd_u8(r, "flags", flags))
		return false;
	if (*flags & ~allowed)
		return rd_fail(r, at, "unknown flags 0x%02x", *flags);
	return true;
}

/* ---- message bodies, one function per message, in the order of the protocol docs ---- */

static bool read_begin(pgo_reader *r, pgo_msg *m)
{
	return rd_u64(r, "final_lsn", &m->begin.final_lsn) &&
	       rd_time(r, "commit_time", &m->begin.commit_time) && rd_u32(r, "xid", &m->xid);
}

/* Commit and Stream Commit share their body. The flags are unused so far and must be 0. */
static bool read_commit(pgo_reader *r, pgo_msg *m)
{
	return rd_flags(r, 0, &m->commit.flags) && rd_u64(r, "commit_lsn", &m->commit.commit_lsn) &&
	       rd_u64(r, "end_lsn", &m->commit.end_lsn) && rd_time(r, "commit_time", &m->commit.commit_time);
}

static bool read_origin(pgo_reader *r, pgo_msg *m)
{
	return rd_u64(r, "origin_lsn", &m->origin.lsn) && rd_str(r, "origin name", &m->origin.name);
}

static bool read_relation(pgo_reader *r, pgo_msg *m)
{
	size_t at;
	uint8_t ident;
	if (!rd_u32(r, "relid", &m->relation.relid) || !rd_nsp(r, &m->relation.nspname) ||
	    !rd_str(r, "relation name", &m->relation.relname))
		return false;
	at = r->pos;
	if (!rd_u8(r, "replica identity", &ident))
		return false;
	if (ident != 'd' && ident != 'n' && ident != 'f' && ident != 'i')
		return rd_fail(r, at, "unknown replica identity 0x%02x", ident);
	m->relation.replident = (char)ident;
	at = r->pos;
	if (!rd_u16(r, "column count", &m->relation.ncols))
		return false;
	if (m->relation.ncols > PGO_MAX_COLUMNS)
		return rd_fail(r, at, "%u columns, more than %d", m->relation.ncols, PGO_MAX_COLUMNS);
	for (uint16_t i = 0; i < m->relation.ncols; i++) {
		pgo_relcol *c = &m->relation.cols[i];
		uint32_t typmod;
		if (!rd_flags(r, 1, &c->flags) || !rd_str(r, "column name", &c->name) ||
		    !rd_u32(r, "column type", &c->type_oid) || !rd_u32(r, "column typmod", &typmod))
			return false;
		c->typmod = (int32_t)typmod;
	}
	return true;
}

static bool read_type(pgo_reader *r, pgo_msg *m)
{
	return rd_u32(r, "type oid", &m->typ.oid) && rd_nsp(r, &m->typ.nspname) &&
	       rd_str(r, "type name", &m->typ.typname);
}

static bool read_tuple(pgo_reader *r, pgo_tuple *t)
{
	size_t at = r->pos;
	if (!rd_u16(r, "column count", &t->ncols))
		return false;
	if (t->ncols > PGO_MAX_COLUMNS)
		return rd_fail(r, at, "%u columns, more than %d", t->ncols, PGO_MAX_COLUMNS);
	for (uint16_t i = 0; i < t->ncols; i++) {
		pgo_datum *d = &t->cols[i];
		at = r->pos;
		if (at >= r->len)
			return rd_fail(r, at, "truncated column %u kind: 0 of 1 bytes", i);
		uint8_t kind = r->p[r->pos++];
		switch (kind) {
		case PGO_NULL:
		case PGO_TOAST:
			d->kind = (pgo_datum_kind)kind;
			d->len = 0;
			d->data = NULL;
			break;
		case PGO_TEXT:
		case PGO_BINARY:
			d->kind = (pgo_datum_kind)kind;
			at = r->pos;
			if (r->len - at < 4)
				return rd_fail(r, at, "truncated column %u length: %zu of 4 bytes", i,
					       r->len - at);
			d->len = get_be32(r->p + at);
			r->pos += 4;
			if (d->len > r->len - r->pos)
				return rd_fail(r, at,
					       "column %u length %" PRIu32 " exceeds the %zu bytes left", i,
					       d->len, r->len - r->pos);
			d->data = (const char *)r->p + r->pos;
			r->pos += d->len;
			break;
		default:
			return rd_fail(r, at, "column %u: unknown kind %s", i, show_byte(kind).s);
		}
	}
	return true;
}

/* The tag byte before a tuple, 'N' new, 'K' old key or 'O' old row. */
static bool rd_tag(pgo_reader *r, const char *allowed, const char *expect, uint8_t *tag)
{
	size_t at = r->pos;
	if (!rd_u8(r, "tuple tag", tag))
		return false;
	if (*tag == 0 || !strchr(allowed, *tag))
		return rd_fail(r, at, "tuple tag %s, expected %s", show_byte(*tag).s, expect);
	return true;
}

static bool read_insert(pgo_reader *r, pgo_msg *m)
{
	uint8_t tag;
	m->change.old_kind = 0;
	m->change.old.ncols = 0;
	return rd_u32(r, "relid", &m->change.relid) && rd_tag(r, "N", "N", &tag) &&
	       read_tuple(r, &m->change.new);
}

static bool read_update(pgo_reader *r, pgo_msg *m)
{
	uint8_t tag;
	if (!rd_u32(r, "relid", &m->change.relid) || !rd_tag(r, "KON", "K, O or N", &tag))
		return false;
	m->change.old_kind = 0;
	m->change.old.ncols = 0;
	if (tag != 'N') {
		m->change.old_kind = (char)tag;
		if (!read_tuple(r, &m->change.old) || !rd_tag(r, "N", "N", &tag))
			return false;
	}
	return read_tuple(r, &m->change.new);
}

static bool read_delete(pgo_reader *r, pgo_msg *m)
{
	uint8_t tag;
	m->change.new.ncols = 0;
	if (!rd_u32(r, "relid", &m->change.relid) || !rd_tag(r, "KO", "K or O", &tag))
		return false;
	m->change.old_kind = (char)tag;
	return read_tuple(r, &m->change.old);
}

static bool read_truncate(pgo_reader *r, pgo_msg *m)
{
	uint32_t n;
	if (!rd_u32(r, "relation count", &n) || !rd_flags(r, 1 | 2, &m->truncate.flags))
		return false;
	if (n > (r->len - r->pos) / 4)
		return rd_fail(r, r->pos, "truncated relids: %zu of %" PRIu64 " bytes", r->len - r->pos,
			       (uint64_t)n * 4);
	m->truncate.nrels = n;
	m->truncate.relids = r->p + r->pos;
	r->pos += (size_t)n * 4;
	return true;
}

static bool read_message(pgo_reader *r, pgo_msg *m)
{
	size_t at;
	if (!rd_flags(r, 1, &m->message.flags) || !rd_u64(r, "lsn", &m->message.lsn) ||
	    !rd_str(r, "prefix", &m->message.prefix))
		return false;
	at = r->pos;
	if (!rd_u32(r, "content length", &m->message.len))
		return false;
	if (m->message.len > r->len - r->pos)
		return rd_fail(r, at, "content length %" PRIu32 " exceeds the %zu bytes left", m->message.len,
			       r->len - r->pos);
	m->message.content = (const char *)r->p + r->pos;
	r->pos += m->message.len;
	return true;
}

static bool read_stream_start(pgo_reader *r, pgo_msg *m)
{
	uint8_t first;
	size_t at;
	if (!rd_u32(r, "xid", &m->xid))
		return false;
	at = r->pos;
	if (!rd_u8(r, "first_segment", &first))
		return false;
	if (first > 1)
		return rd_fail(r, at, "first_segment is %u, not 0 or 1", first);
	m->stream_start.first_segment = first == 1;
	return true;
}

static bool read_stream_commit(pgo_reader *r, pgo_msg *m)
{
	return rd_u32(r, "xid", &m->xid) && read_commit(r, m);
}

static bool read_stream_abort(pgo_reader *r, pgo_msg *m, bool abort_info)
{
	m->stream_abort.has_abort_info = abort_info;
	m->stream_abort.abort_lsn = 0;
	m->stream_abort.abort_time = 0;
	if (!rd_u32(r, "xid", &m->xid) || !rd_u32(r, "subxid", &m->stream_abort.subxid))
		return false;
	if (!abort_info)
		return true;
	return rd_u64(r, "abort_lsn", &m->stream_abort.abort_lsn) &&
	       rd_time(r, "abort_time", &m->stream_abort.abort_time);
}

/* Begin Prepare has no flags byte. Prepare and Stream Prepare have one, unused so far. */
static bool read_prepare(pgo_reader *r, pgo_msg *m, bool has_flags)
{
	m->prepare.flags = 0;
	return (!has_flags || rd_flags(r, 0, &m->prepare.flags)) &&
	       rd_u64(r, "prepare_lsn", &m->prepare.prepare_lsn) &&
	       rd_u64(r, "end_lsn", &m->prepare.end_lsn) &&
	       rd_time(r, "prepare_time", &m->prepare.prepare_time) && rd_u32(r, "xid", &m->xid) &&
	       rd_str(r, "gid", &m->prepare.gid);
}

static bool read_commit_prepared(pgo_reader *r, pgo_msg *m)
{
	return rd_flags(r, 0, &m->commit_prepared.flags) &&
	       rd_u64(r, "commit_lsn", &m->commit_prepared.commit_lsn) &&
	       rd_u64(r, "end_lsn", &m->commit_prepared.end_lsn) &&
	       rd_time(r, "commit_time", &m->commit_prepared.commit_time) && rd_u32(r, "xid", &m->xid) &&
	       rd_str(r, "gid", &m->commit_prepared.gid);
}

static bool read_rollback_prepared(pgo_reader *r, pgo_msg *m)
{
	return rd_flags(r, 0, &m->rollback_prepared.flags) &&
	       rd_u64(r, "prepare_end_lsn", &m->rollback_prepared.prepare_end_lsn) &&
	       rd_u64(r, "rollback_end_lsn", &m->rollback_prepared.rollback_end_lsn) &&
	       rd_time(r, "prepare_time", &m->rollback_prepared.prepare_time) &&
	       rd_time(r, "rollback_time", &m->rollback_prepared.rollback_time) &&
	       rd_u32(r, "xid", &m->xid) && rd_str(r, "gid", &m->rollback_prepared.gid);
}

const char *pgo_type_name(int type)
{
	switch (type) {
	case PGO_BEGIN:
		return "Begin";
	case PGO_COMMIT:
		return "Commit";
	case PGO_ORIGIN:
		return "Origin";
	case PGO_RELATION:
		return "Relation";
	case PGO_TYPE:
		return "Type";
	case PGO_INSERT:
		return "Insert";
	case PGO_UPDATE:
		return "Update";
	case PGO_DELETE:
		return "Delete";
	case PGO_TRUNCATE:
		return "Truncate";
	case PGO_MESSAGE:
		return "Message";
	case PGO_STREAM_START:
		return "Stream Start";
	case PGO_STREAM_STOP:
		return "Stream Stop";
	case PGO_STREAM_COMMIT:
		return "Stream Commit";
	case PGO_STREAM_ABORT:
		return "Stream Abort";
	case PGO_BEGIN_PREPARE:
		return "Begin Prepare";
	case PGO_PREPARE:
		return "Prepare";
	case PGO_COMMIT_PREPARED:
		return "Commit Prepared";
	case PGO_ROLLBACK_PREPARED:
		return "Rollback Prepared";
	case PGO_STREAM_PREPARE:
		return "Stream Prepare";
	default:
		return "unknown";
	}
}

/* The protocol version that introduced a message type. Streaming came with 2, two-phase with 3. */
static int min_version(int type)
{
	switch (type) {
	case PGO_STREAM_START:
	case PGO_STREAM_STOP:
	case PGO_STREAM_COMMIT:
	case PGO_STREAM_ABORT:
		return 2;
	case PGO_BEGIN_PREPARE:
	case PGO_PREPARE:
	case PGO_COMMIT_PREPARED:
	case PGO_ROLLBACK_PREPARED:
	case PGO_STREAM_PREPARE:
		return 3;
	default:
		return 1;
	}
}

bool pgo_parse(const uint8_t *data, size_t len, const pgo_options *opt, bool in_stream, pgo_msg *out,
	       char *err, size_t errlen)
{
	if (len == 0)
		return util_errf(err, errlen, "empty message at offset 0");
	pgo_reader r = {.p = data, .pos = 1, .len = len, .type = data[0], .err = err, .errlen = errlen};
	int ver = opt->proto_version;
	bool ok;

	if (ver < 1 || ver > 4)
		return rd_fail(&r, 0, "unsupported protocol version %d", ver);
	if (ver < min_version(r.type))
		return rd_fail(&r, 0, "needs protocol version %d, the session uses %d", min_version(r.type),
			       ver);
	out->type = (pgo_type)r.type;
	out->xid = 0;
	switch (r.type) {
	case PGO_RELATION:
	case PGO_TYPE:
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE:
	case PGO_TRUNCATE:
	case PGO_MESSAGE:
		/* Inside a stream block these name the (sub)transaction they belong to. */
		if (in_stream && !rd_u32(&r, "xid", &out->xid))
			return false;
		break;
	default:
		break;
	}

	switch (r.type) {
	case PGO_BEGIN:
		ok = read_begin(&r, out);
		break;
	case PGO_COMMIT:
		ok = read_commit(&r, out);
		break;
	case PGO_ORIGIN:
		ok = read_origin(&r, out);
		break;
	case PGO_RELATION:
		ok = read_relation(&r, out);
		break;
	case PGO_TYPE:
		ok = read_type(&r, out);
		break;
	case PGO_INSERT:
		ok = read_insert(&r, out);
		break;
	case PGO_UPDATE:
		ok = read_update(&r, out);
		break;
	case PGO_DELETE:
		ok = read_delete(&r, out);
		break;
	case PGO_TRUNCATE:
		ok = read_truncate(&r, out);
		break;
	case PGO_MESSAGE:
		ok = read_message(&r, out);
		break;
	case PGO_STREAM_START:
		ok = read_stream_start(&r, out);
		break;
	case PGO_STREAM_STOP:
		ok = true;
		break;
	case PGO_STREAM_COMMIT:
		ok = read_stream_commit(&r, out);
		break;
	case PGO_STREAM_ABORT:
		ok = read_stream_abort(&r, out, ver >= 4 && opt->stream_abort_info);
		break;
	case PGO_BEGIN_PREPARE:
		ok = read_prepare(&r, out, false);
		break;
	case PGO_PREPARE:
	case PGO_STREAM_PREPARE:
		ok = read_prepare(&r, out, true);
		break;
	case PGO_COMMIT_PREPARED:
		ok = read_commit_prepared(&r, out);
		break;
	case PGO_ROLLBACK_PREPARED:
		ok = read_rollback_prepared(&r, out);
		break;
	default:
		return util_errf(err, errlen, "unknown message type %s at offset 0", show_byte(data[0]).s);
	}
	if (!ok)
		return false;
	if (r.pos != len)
		return rd_fail(&r, r.pos, "%zu trailing bytes", len - r.pos);
	return true;
}

uint32_t pgo_truncate_relid(const pgo_msg *m, uint32_t i)
{
	if (i >= m->truncate.nrels)
		return 0;
	return get_be32(m->truncate.relids + (size_t)i * 4);
}

/* ---- the relation cache ---- */

/* An open-addressing map from a 32-bit id to a pointer, with linear probing. Entries are never
 * removed (a dropped relation just stops being used), so no tombstones are needed. */
typedef struct pgo_map {
	uint32_t *keys;
	void **vals; /* NULL for an empty slot */
	size_t cap, n;
} pgo_map;

static size_t map_slot(const pgo_map *m, uint32_t key)
{
	/* Fibonacci hashing spreads the mostly sequential OIDs across the table. */
	return (size_t)((key * UINT32_C(2654435769)) & (uint32_t)(m->cap - 1));
}

/* The value slot holding key, or NULL. */
static void **map_find(const pgo_map *m, uint32_t key)
{
	if (m->cap == 0)
		return NULL;
	for (size_t i = map_slot(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (!m->vals[i])
			return NULL;
		if (m->keys[i] == key)
			return &m->vals[i];
	}
}

static void *map_get(const pgo_map *m, uint32_t key)
{
	void **v = map_find(m, key);
	return v ? *v : NULL;
}

static void map_put_new(pgo_map *m, uint32_t key, void *val);

static void map_grow(pgo_map *m)
{
	pgo_map bigger = {.cap = m->cap ? m->cap * 2 : 64};
	bigger.keys = util_xcalloc(bigger.cap, sizeof(*bigger.keys));
	bigger.vals = util_xcalloc(bigger.cap, sizeof(*bigger.vals));
	for (size_t i = 0; i < m->cap; i++)
		if (m->vals[i])
			map_put_new(&bigger, m->keys[i], m->vals[i]);
	free(m->keys);
	free(m->vals);
	*m = bigger;
}

/* Inserts a key known to be absent. */
static void map_put_new(pgo_map *m, uint32_t key, void *val)
{
	if ((m->n + 1) * 4 > m->cap * 3)
		map_grow(m);
	size_t i = map_slot(m, key);
	while (m->vals[i])
		i = (i + 1) & (m->cap - 1);
	m->keys[i] = key;
	m->vals[i] = val;
	m->n++;
}

static void map_free(pgo_map *m, void (*free_val)(void *))
{
	for (size_t i = 0; i < m->cap; i++)
		if (m->vals[i])
			free_val(m->vals[i]);
	free(m->keys);
	free(m->vals);
}

/* The column array and all strings of an entry live in one allocation, pointed to by rel.cols
 * (or by strings when there are no columns). */
typedef struct relent {
	pgo_rel rel;
	void *mem;
} relent;

struct pgo_relcache {
	pgo_map rels;  /* relid -> relent */
	pgo_map types; /* type oid -> "nspname.typname" */
	pgo_map pkeys; /* relid -> primary key column names, each NUL-terminated, then an empty one */
};

pgo_relcache *pgo_relcache_new(void)
{
	return util_xcalloc(1, sizeof(pgo_relcache));
}

static void relent_free(void *p)
{
	relent *e = p;
	free(e->mem);
	free(e);
}

void pgo_relcache_free(pgo_relcache *c)
{
	if (!c)
		return;
	map_free(&c->rels, relent_free);
	map_free(&c->types, free);
	map_free(&c->pkeys, free);
	free(c);
}

static void relent_fill(relent *e, const pgo_msg *m)
{
	uint16_t ncols = m->relation.ncols;
	size_t nsplen = strlen(m->relation.nspname) + 1, rellen = strlen(m->relation.relname) + 1;
	size_t size = (size_t)ncols * sizeof(pgo_relcol) + nsplen + rellen;
	for (uint16_t i = 0; i < ncols; i++)
		size += strlen(m->relation.cols[i].name) + 1;

	char *mem = util_xmalloc(size);
	pgo_relcol *cols = (pgo_relcol *)mem;
	char *s = mem + (size_t)ncols * sizeof(pgo_relcol);
	e->mem = mem;
	e->rel.relid = m->relation.relid;
	e->rel.nspname = memcpy(s, m->relation.nspname, nsplen);
	s += nsplen;
	e->rel.relname = memcpy(s, m->relation.relname, rellen);
	s += rellen;
	e->rel.replident = m->relation.replident;
	e->rel.ncols = ncols;
	e->rel.cols = cols;
	e->rel.nkeys = 0;
	for (uint16_t i = 0; i < ncols; i++) {
		size_t n = strlen(m->relation.cols[i].name) + 1;
		cols[i] = m->relation.cols[i];
		cols[i].name = memcpy(s, m->relation.cols[i].name, n);
		s += n;
		if (cols[i].flags & 1)
			e->rel.nkeys++;
	}
}

/* Under REPLICA IDENTITY FULL the server flags every column as identity. The key is then the primary key,
 * when one was given with pgo_relcache_set_primary_key(). */
static void apply_primary_key(const pgo_relcache *c, relent *e)
{
	const char *names = e->rel.replident == 'f' ? map_get(&c->pkeys, e->rel.relid) : NULL;
	if (!names)
		return;
	e->rel.nkeys = 0;
	for (uint16_t i = 0; i < e->rel.ncols; i++) {
		bool key = false;
		for (const char *n = names; *n && !key; n += strlen(n) + 1)
			key = strcmp(n, e->rel.cols[i].name) == 0;
		e->rel.cols[i].flags = key ? 1 : 0;
		e->rel.nkeys += key;
	}
}

void pgo_relcache_put(pgo_relcache *c, const pgo_msg *relation)
{
	relent *e = map_get(&c->rels, relation->relation.relid);
	if (e) {
		/* Replaced in place, so pointers callers hold stay valid. The version tells them that what
		 * they derived from the old columns is stale. */
		uint64_t version = e->rel.version + 1;
		free(e->mem);
		relent_fill(e, relation);
		apply_primary_key(c, e);
		e->rel.version = version;
		return;
	}
	e = util_xcalloc(1, sizeof(*e));
	relent_fill(e, relation);
	apply_primary_key(c, e);
	e->rel.version = 1;
	map_put_new(&c->rels, relation->relation.relid, e);
}

void pgo_relcache_set_primary_key(pgo_relcache *c, uint32_t relid, const char *const *names, size_t n)
{
	size_t size = 1;
	for (size_t i = 0; i < n; i++)
		size += strlen(names[i]) + 1;
	char *list = util_xmalloc(size), *p = list;
	for (size_t i = 0; i < n; i++)
		p = stpcpy(p, names[i]) + 1;
	*p = '\0';
	void **slot = map_find(&c->pkeys, relid);
	if (slot) {
		free(*slot);
		*slot = list;
	} else {
		map_put_new(&c->pkeys, relid, list);
	}
	relent *e = map_get(&c->rels, relid);
	if (e && e->rel.replident == 'f') {
		apply_primary_key(c, e);
		e->rel.version++;
	}
}

const pgo_rel *pgo_relcache_get(const pgo_relcache *c, uint32_t relid)
{
	const relent *e = map_get(&c->rels, relid);
	return e ? &e->rel : NULL;
}

const pgo_rel *pgo_relcache_find(const pgo_relcache *c, const char *nspname, const char *relname)
{
	for (size_t i = 0; i < c->rels.cap; i++) {
		const relent *e = c->rels.vals[i];
		if (e && strcmp(e->rel.nspname, nspname) == 0 && strcmp(e->rel.relname, relname) == 0)
			return &e->rel;
	}
	return NULL;
}

void pgo_relcache_put_type(pgo_relcache *c, const pgo_msg *type)
{
	/* "nspname.typname", then the name as format_type() prints it */
	buf b = {0};
	buf_puts(&b, type->typ.nspname);
	buf_putc(&b, '.');
	buf_puts(&b, type->typ.typname);
	buf_putc(&b, '\0');
	pgo_types_format_named(&b, type->typ.nspname, type->typ.typname);
	char *name = b.data;

	void **slot = map_find(&c->types, type->typ.oid);
	if (slot) {
		free(*slot);
		*slot = name;
		return;
	}
	map_put_new(&c->types, type->typ.oid, name);
}

void pgo_format_type(const pgo_relcache *c, uint32_t oid, int32_t typmod, buf *out)
{
	const char *name = c ? map_get(&c->types, oid) : NULL;
	if (name)
		buf_puts(out, name + strlen(name) + 1);
	else if (!pgo_types_format(out, oid, typmod))
		buf_puts(out, "???"); /* as format_type() says of a type it does not know */
}

const char *pgo_type_name_of(const pgo_relcache *c, uint32_t oid)
{
	const char *name = c ? map_get(&c->types, oid) : NULL;
	return name ? name : pgo_types_builtin_name(oid);
}

/* See avro.h. The schemas follow Confluent's AvroData (fromConnectSchema) with its defaults. The binary
 * follows the Avro specification. Ints and longs are zigzag varints, and floats and doubles are
 * little-endian. Bytes and strings come after their length, and a union's branch index before its value.
 * Arrays are one block and an empty one. tests/fuzz/fuzz_avro.c checks every record byte for byte against
 * Apache Avro's C library. */
#include "sinks/kafka/avro.h"

#include <stdio.h>
#include <string.h>

#include "decoder/base/json.h"

#define LIT(b, s) buf_append((b), (s), sizeof(s) - 1)

/* The binary ------------------------------------------------------------------------------------- */

/* Written in place, with room made first. A record is many small values, and a call per byte was a tenth of
 * cdc's CPU on a large transaction (perf). The buf stays NUL-terminated, as util.c's. */
static inline char *room(buf *b, size_t n)
{
	if (b->cap - b->len <= n)
		buf_reserve(b, n);
	return b->data + b->len;
}

static inline void done(buf *b, const char *end)
{
	b->len = (size_t)(end - b->data);
	b->data[b->len] = '\0';
}

static inline char *varint(char *w, uint64_t z)
{
	while (z >= 0x80) {
		*w++ = (char)(z | 0x80);
		z >>= 7;
	}
	*w++ = (char)z;
	return w;
}

/* An int or a long, zigzag and then a varint. */
static void put_long(buf *b, int64_t v)
{
	done(b, varint(room(b, 10), ((uint64_t)v << 1) ^ (uint64_t)(v >> 63)));
}

static void put_bytes(buf *b, const void *p, size_t len)
{
	char *w = varint(room(b, len + 10), (uint64_t)len << 1);
	if (len)
		memcpy(w, p, len);
	done(b, w + len);
}

static void put_str(buf *b, const char *s)
{
	put_bytes(b, s, strlen(s));
}

static void put_double(buf *b, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	uint8_t tmp[8];
	for (int i = 0; i < 8; i++)
		tmp[i] = (uint8_t)(u >> (8 * i));
	buf_append(b, tmp, 8);
}

static void put_float(buf *b, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	uint8_t tmp[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
	buf_append(b, tmp, 4);
}

/* An optional value, as the union ["null", T]'s branch. */
static inline void put_byte(buf *b, char c)
{
	char *w = room(b, 1);
	*w++ = c;
	done(b, w);
}

static void put_null(buf *b)
{
	put_byte(b, 0);
}

static void put_some(buf *b)
{
	put_byte(b, 2); /* branch 1, zigzag */
}

static void put_opt_long(buf *b, int64_t v)
{
	put_some(b);
	put_long(b, v);
}

static void put_opt_str(buf *b, const char *s)
{
	put_some(b);
	put_str(b, s);
}

/* A value, with its union branch first when the field is optional. Then the value as its kind says. Array
 * elements are optional (Debezium's array schemas). false for a required field without a value. */
static bool put_datum(buf *b, dbz_scratch *s, const dbz_datum *d, bool optional)
{
	if (d->kind == DD_NULL) {
		if (optional)
			put_null(b);
		return optional;
	}
	if (optional)
		put_some(b);
	switch (d->kind) {
	case DD_NULL:
		break;
	case DD_BOOL:
		put_byte(b, d->i ? 1 : 0);
		break;
	case DD_INT:
		put_long(b, d->i);
		break;
	case DD_REAL:
		if (d->single)
			put_float(b, (float)d->x);
		else
			put_double(b, d->x);
		break;
	case DD_STRING:
	case DD_BYTES:
		put_bytes(b, d->p, d->len);
		break;
	case DD_VDECIMAL:
		put_long(b, d->i);
		put_bytes(b, d->p, d->len);
		break;
	case DD_POINT:
		put_double(b, d->x);
		put_double(b, d->y);
		put_some(b);
		put_bytes(b, d->p, d->len);
		put_null(b); /* srid */
		break;
	case DD_ARRAY:
		if (d->n) {
			put_long(b, (int64_t)d->n);
			for (size_t i = 0; i < d->n; i++) {
				dbz_datum e;
				sink_debezium_element(s, d, i, &e);
				put_datum(b, s, &e, true);
			}
		}
		put_long(b, 0);
		break;
	}
	return true;
}

void kafka_avro_header(buf *out, uint32_t id)
{
	uint8_t h[DBZ_AVRO_HEADER] = {0, (uint8_t)(id >> 24), (uint8_t)(id >> 16), (uint8_t)(id >> 8),
				      (uint8_t)id};
	buf_append(out, h, sizeof(h));
}

/* Rows ------------------------------------------------------------------------------------------- */

/* The column of row r named name (at i when the row has the schema's order), or NULL. */
static const Cdc__V1__Column *column(Cdc__V1__Column *const *cols, size_t n, size_t i, const char *name)
{
	if (i < n && cols[i] && strcmp(cols[i]->name, name) == 0)
		return cols[i];
	for (size_t j = 0; j < n; j++)
		if (cols[j] && strcmp(cols[j]->name, name) == 0)
			return cols[j];
	return NULL;
}

static bool missing(const dbz_column *c, const char *what, char *err, size_t errlen)
{
	return util_errf(err, errlen, "column %s has no value in the %s, but its Avro field is required",
			 c->name, what);
}

/* A row as the schema's record, with every column in the schema's order. A column the row does not carry is
 * null. An unchanged TOASTed one gets the other row's value, else the placeholder. */
static bool put_row(buf *b, dbz_scratch *s, const dbz_column *cols, size_t n, const Cdc__V1__Row *r,
		    const Cdc__V1__Row *other, bool key, const char *what, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (key && !cols[i].key)
			continue;
		dbz_type t = sink_debezium_type_of(cols[i].type_oid, cols[i].typmod);
		const Cdc__V1__Column *c = r ? column(r->columns, r->n_columns, i, cols[i].name) : NULL;
		dbz_datum d = {.kind = DD_NULL};
		if (c && sink_debezium_unchanged(c)) {
			const Cdc__V1__Column *o =
			    other ? column(other->columns, other->n_columns, i, cols[i].name) : NULL;
			if (o && !sink_debezium_unchanged(o))
				sink_debezium_convert(s, t, o->value, &d);
			else
				sink_debezium_placeholder(t, &d);
		} else if (c) {
			sink_debezium_convert(s, t, c->value, &d);
		}
		if (!put_datum(b, s, &d, !key && !cols[i].key))
			return missing(&cols[i], what, err, errlen);
	}
	return true;
}

bool kafka_avro_key(buf *out, dbz_scratch *s, const dbz_column *cols, size_t n, Cdc__V1__Column *const *vals,
		    size_t nvals, char *err, size_t errlen)
{
	Cdc__V1__Row r = CDC__V1__ROW__INIT;
	r.columns = (Cdc__V1__Column **)vals;
	r.n_columns = nvals;
	return put_row(out, s, cols, n, &r, NULL, true, "key", err, errlen);
}

void kafka_avro_message_key(buf *out, const char *prefix)
{
	put_opt_str(out, prefix);
}

/* Values, as parts, and the fields filled at the commit ------------------------------------------ */

/* A rendered value is parts, up to F_END. Each is a u32 length, that many bytes, then a fill (F_SEQUENCE
 * followed by the event's LSN as a u64). */
enum {
	F_END,
	F_SOURCE_MS,
	F_SEQUENCE,
	F_SOURCE_US,
	F_SOURCE_NS,
	F_TRANSACTION,
	F_NOW_MS,
	F_NOW_US,
	F_NOW_NS
};

/* Closes the part that started at *part with fill, and starts the next. */
static void part_end(buf *b, size_t *part, int fill, uint64_t lsn)
{
	uint32_t len = (uint32_t)(b->len - *part - sizeof(len));
	memcpy(b->data + *part, &len, sizeof(len));
	buf_putc(b, (char)fill);
	if (fill == F_SEQUENCE)
		buf_append(b, &lsn, sizeof(lsn));
	*part = b->len;
	if (fill != F_END)
		buf_append(b, &len, sizeof(len)); /* the next part's length, set when it ends */
}

/* The source block, up to the transaction (which follows it in both records). */
static void put_source(buf *b, size_t *part, const dbz_options *o, const Cdc__V1__Event *e)
{
	bool read = e->op == CDC__V1__OP__OP_READ;
	put_str(b, "cdc-" CDC_VERSION);
	put_str(b, "postgresql");
	put_str(b, o->server_name);
	part_end(b, part, F_SOURCE_MS, 0);
	buf_putc(b, 0); /* snapshot is ["string", "null"], and it has a default */
	put_str(b, read ? "incremental" : "false");
	put_str(b, o->database ? o->database : "");
	part_end(b, part, F_SEQUENCE, e->lsn);
	part_end(b, part, F_SOURCE_US, 0);
	part_end(b, part, F_SOURCE_NS, 0);
	put_str(b, e->schema);
	put_str(b, e->table);
	if (e->xid && !read)
		put_opt_long(b, e->xid);
	else
		put_null(b);
	if (read)
		put_null(b);
	else
		put_opt_long(b, (int64_t)e->lsn);
	put_null(b); /* xmin */
	if (e->origin && *e->origin)
		put_opt_str(b, e->origin);
	else
		put_null(b);
	put_null(b); /* origin_lsn */
	if (o->transaction)
		part_end(b, part, F_TRANSACTION, 0);
	else
		put_null(b);
}

bool kafka_avro_value(buf *out, dbz_scratch *s, const dbz_options *o, const dbz_column *cols, size_t n,
		      const Cdc__V1__Event *e, char op, const Cdc__V1__Row *before, const Cdc__V1__Row *after,
		      char *err, size_t errlen)
{
	size_t at = out->len, part = out->len;
	uint32_t len = 0;
	buf_append(out, &len, sizeof(len));
	if (op == DBZ_MESSAGE) {
		put_str(out, "m");
		part_end(out, &part, F_NOW_MS, 0);
		put_source(out, &part, o, e);
		put_opt_str(out, e->message ? e->message->prefix : "");
		put_some(out);
		if (e->message)
			put_bytes(out, e->message->content.data, e->message->content.len);
		else
			put_long(out, 0);
		part_end(out, &part, F_END, 0);
		return true;
	}
	const Cdc__V1__Row *rows[2] = {before, after};
	for (int i = 0; i < 2; i++) {
		if (!rows[i]) {
			put_null(out);
			continue;
		}
		put_some(out);
		if (!put_row(out, s, cols, n, rows[i], i ? before : NULL, false,
			     i ? "row after" : "row before", err, errlen)) {
			out->len = at;
			return false;
		}
	}
	put_source(out, &part, o, e);
	char code[2] = {op, '\0'};
	put_str(out, code);
	part_end(out, &part, F_NOW_MS, 0);
	part_end(out, &part, F_NOW_US, 0);
	part_end(out, &part, F_NOW_NS, 0);
	part_end(out, &part, F_END, 0);
	return true;
}

/* A string of at most 63 bytes written in place. Its length is one byte of varint, set when it ends (no
 * printf per record). short_begin returns where the length goes. */
static size_t short_begin(buf *b)
{
	buf_putc(b, 0);
	return b->len;
}

static void short_end(buf *b, size_t at)
{
	b->data[at - 1] = (char)((b->len - at) << 1); /* zigzag of a length below 64 */
}

/* "xid:commit LSN", Debezium's transaction id. */
static void put_txn_id(buf *b, uint32_t xid, uint64_t commit_lsn)
{
	size_t at = short_begin(b);
	json_u64(b, xid);
	buf_putc(b, ':');
	json_u64(b, commit_lsn);
	short_end(b, at);
}

void kafka_avro_complete(buf *out, uint32_t id, const char *r, size_t len, const dbz_fill *f)
{
	int64_t src = f->commit_time ? f->commit_time : f->now;
	const char *end = r + len;
	kafka_avro_header(out, id);
	for (;;) {
		uint32_t n;
		if ((size_t)(end - r) < sizeof(n) + 1)
			return;
		memcpy(&n, r, sizeof(n));
		r += sizeof(n);
		if ((size_t)(end - r) < (size_t)n + 1)
			return;
		buf_append(out, r, n);
		r += n;
		uint64_t lsn = 0;
		size_t at;
		switch (*r++) {
		case F_END:
			return;
		case F_SOURCE_MS:
			put_long(out, util_floor_div(src, 1000));
			break;
		case F_SEQUENCE:
			if ((size_t)(end - r) < sizeof(lsn))
				return;
			memcpy(&lsn, r, sizeof(lsn));
			r += sizeof(lsn);
			put_some(out); /* ["<commit LSN>","<LSN>"] */
			at = short_begin(out);
			LIT(out, "[\"");
			json_u64(out, f->commit_lsn);
			LIT(out, "\",\"");
			json_u64(out, lsn);
			LIT(out, "\"]");
			short_end(out, at);
			break;
		case F_SOURCE_US:
			put_opt_long(out, src);
			break;
		case F_SOURCE_NS:
			put_opt_long(out, src * 1000);
			break;
		case F_TRANSACTION:
			if (!f->xid) {
				put_null(out);
				break;
			}
			put_some(out);
			put_txn_id(out, f->xid, f->commit_lsn);
			put_long(out, (int64_t)f->total_order);
			put_long(out, (int64_t)f->collection_order);
			break;
		case F_NOW_MS:
			put_opt_long(out, util_floor_div(f->now, 1000));
			break;
		case F_NOW_US:
			put_opt_long(out, f->now);
			break;
		case F_NOW_NS:
			put_opt_long(out, f->now * 1000);
			break;
		}
	}
}

/* Transaction metadata --------------------------------------------------------------------------- */

void kafka_avro_txn_key(buf *out, uint32_t xid, uint64_t commit_lsn)
{
	put_txn_id(out, xid, commit_lsn);
}

void kafka_avro_txn_value(buf *out, bool end, uint32_t xid, uint64_t commit_lsn, int64_t time_us,
			  uint64_t events, const dbz_count *tables, size_t ntables)
{
	put_str(out, end ? "END" : "BEGIN");
	put_txn_id(out, xid, commit_lsn);
	if (!end) {
		put_null(out); /* event_count */
		put_null(out); /* data_collections */
	} else {
		put_opt_long(out, (int64_t)events);
		put_some(out);
		if (ntables)
			put_long(out, (int64_t)ntables);
		for (size_t i = 0; i < ntables; i++) {
			size_t schema = strlen(tables[i].schema), table = strlen(tables[i].table);
			put_some(out);				      /* the items are optional */
			put_long(out, (int64_t)(schema + 1 + table)); /* "schema.table" */
			buf_append(out, tables[i].schema, schema);
			buf_putc(out, '.');
			buf_append(out, tables[i].table, table);
			put_long(out, (int64_t)tables[i].events);
		}
		put_long(out, 0);
	}
	put_long(out, util_floor_div(time_us, 1000));
}

/* Schemas ---------------------------------------------------------------------------------------- */

/* Debezium's ReplacementFunction. It wants [A-Za-z_] first, then [A-Za-z0-9_] (and '.' in a full name). A
 * replaced digit that opens a name is kept after the '_', as Debezium keeps it. */
static bool name_char(unsigned char c, bool first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

/* name made valid, as a full name when full is set ('.' separates its parts), else as a field's name. Java's
 * chars are UTF-16 units, so a character outside the BMP (4 bytes in UTF-8) is two. */
static void put_adjusted(buf *out, const char *name, bool full)
{
	const unsigned char *p = (const unsigned char *)name;
	bool first = true;
	while (*p) {
		unsigned char c = *p;
		if (full && c == '.' && !first) {
			buf_putc(out, '.');
			p++;
			first = true; /* each part is a name, as Avro parses them */
			continue;
		}
		if (c < 0x80) {
			if (name_char(c, first))
				buf_putc(out, (char)c);
			else if (first && c >= '0' && c <= '9')
				buf_printf(out, "_%c", c);
			else
				buf_putc(out, '_');
			p++;
		} else {
			size_t skip, n = util_utf8_seq(p, strlen((const char *)p), &skip);
			buf_puts(out, n == 4 ? "__" : "_"); /* past the BMP, a surrogate pair */
			p += n ? n : skip;
		}
		first = false;
	}
}

void kafka_avro_fullname(buf *out, const char *name)
{
	put_adjusted(out, name, true);
}

/* The named types written so far in one schema (Avro names each once, then refers to it). */
typedef struct names {
	buf text; /* full names, NUL-terminated */
	size_t n;
} names;

static bool seen(names *ns, const char *full)
{
	for (size_t i = 0, off = 0; i < ns->n; i++, off += strlen(ns->text.data + off) + 1)
		if (strcmp(ns->text.data + off, full) == 0)
			return true;
	buf_append(&ns->text, full, strlen(full) + 1);
	ns->n++;
	return false;
}

/* AvroData's connect.* properties of a schema, after what its type wrote. */
static void put_meta(buf *b, const dbz_schema *s, const char *adjusted_name)
{
	if (s->doc) {
		LIT(b, ",\"connect.doc\":");
		json_str(b, s->doc);
	}
	if (s->version) {
		LIT(b, ",\"connect.version\":");
		json_i64(b, s->version);
	}
	if (s->parameters) {
		LIT(b, ",\"connect.parameters\":{");
		buf_puts(b, s->parameters);
		buf_putc(b, '}');
	}
	if (s->def) {
		LIT(b, ",\"connect.default\":");
		buf_puts(b, s->def);
	}
	if (s->name) {
		LIT(b, ",\"connect.name\":");
		json_str(b, adjusted_name);
	}
	if (strcmp(s->type, "int8") == 0 || strcmp(s->type, "int16") == 0) {
		LIT(b, ",\"connect.type\":\"");
		buf_puts(b, s->type);
		buf_putc(b, '"');
	}
}

static const char *avro_primitive(const char *connect)
{
	static const struct {
		const char *connect, *avro;
	} map[] = {{"int8", "int"},	   {"int16", "int"},	 {"int32", "int"},
		   {"int64", "long"},	   {"float", "float"},	 {"double", "double"},
		   {"boolean", "boolean"}, {"string", "string"}, {"bytes", "bytes"}};
	for (size_t i = 0; i < sizeof(map) / sizeof(*map); i++)
		if (strcmp(map[i].connect, connect) == 0)
			return map[i].avro;
	return NULL;
}

#define DECIMAL_NAME "org.apache.kafka.connect.data.Decimal"
/* AvroData's precision when Connect's Decimal gives none. */
#define DECIMAL_PRECISION_DEFAULT 64

static void put_schema(buf *b, names *ns, const dbz_schema *s, bool optional);

static void put_type(buf *b, names *ns, const dbz_schema *s)
{
	buf adjusted = {0};
	if (s->name)
		put_adjusted(&adjusted, s->name, true);
	const char *name = adjusted.data;
	const char *prim = avro_primitive(s->type);
	bool decimal = s->name && strcmp(s->name, DECIMAL_NAME) == 0;
	if (prim && !s->name && !s->doc && !s->version && !s->parameters && !s->def &&
	    strcmp(s->type, "int8") != 0 && strcmp(s->type, "int16") != 0) {
		buf_putc(b, '"');
		buf_puts(b, prim);
		buf_putc(b, '"');
	} else if (prim) {
		LIT(b, "{\"type\":\"");
		buf_puts(b, prim);
		buf_putc(b, '"');
		if (decimal)
			buf_printf(b, ",\"scale\":%d,\"precision\":%d", s->scale,
				   s->precision ? s->precision : DECIMAL_PRECISION_DEFAULT);
		put_meta(b, s, name);
		if (decimal)
			LIT(b, ",\"logicalType\":\"decimal\"");
		buf_putc(b, '}');
	} else if (strcmp(s->type, "array") == 0) {
		LIT(b, "{\"type\":\"array\",\"items\":");
		put_schema(b, ns, s->items, s->items->optional);
		put_meta(b, s, name);
		buf_putc(b, '}');
	} else if (seen(ns, name)) { /* a struct written before, by its name */
		json_str(b, name);
	} else {
		const char *dot = strrchr(name, '.');
		LIT(b, "{\"type\":\"record\",\"name\":");
		json_str(b, dot ? dot + 1 : name);
		if (dot) {
			LIT(b, ",\"namespace\":");
			json_string(b, name, (size_t)(dot - name));
		}
		LIT(b, ",\"fields\":[");
		for (size_t i = 0; i < s->nfields; i++) {
			const dbz_schema *f = s->fields[i].schema;
			if (i)
				buf_putc(b, ',');
			LIT(b, "{\"name\":\"");
			put_adjusted(b, s->fields[i].name, false);
			LIT(b, "\",\"type\":");
			put_schema(b, ns, f, f->optional);
			if (f->def) {
				LIT(b, ",\"default\":");
				buf_puts(b, f->def);
			} else if (f->optional) {
				LIT(b, ",\"default\":null");
			}
			buf_putc(b, '}');
		}
		buf_putc(b, ']');
		put_meta(b, s, name);
		buf_putc(b, '}');
	}
	buf_free(&adjusted);
}

/* An optional schema is a union with null. null comes first, unless it has a default (which must be the
 * union's first branch's). */
static void put_schema(buf *b, names *ns, const dbz_schema *s, bool optional)
{
	if (!optional) {
		put_type(b, ns, s);
		return;
	}
	if (s->def) {
		buf_putc(b, '[');
		put_type(b, ns, s);
		LIT(b, ",\"null\"]");
	} else {
		LIT(b, "[\"null\",");
		put_type(b, ns, s);
		buf_putc(b, ']');
	}
}

void kafka_avro_schema(buf *out, const dbz_schema *schema)
{
	names ns = {0};
	put_schema(out, &ns, schema, false);
	buf_free(&ns.text);
}

/* See pbread.h. Field numbers are those of proto/cdc/v1/event.proto and subscriber.proto. Every reader
 * returns false to decline. */
#include "sinks/socket/pbread.h"

#include <stdbool.h>
#include <string.h>

#include "sinks/pbwire.h"

typedef struct reader {
	const uint8_t *p, *end;
	arena *a;
} reader;

/* A varint of 2 to 10 bytes whose value fits 64 bits. */
static bool varint_long(reader *r, uint64_t *v)
{
	uint64_t x = 0;
	for (unsigned shift = 0; r->p < r->end; shift += 7) {
		uint8_t b = *r->p++;
		if (shift == 63 && (b & 0x7e))
			return false;
		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return true;
		}
		if (shift == 63)
			return false;
	}
	return false;
}

/* A varint. Tags, small numbers and lengths take one byte, read here. */
static inline bool varint(reader *r, uint64_t *v)
{
	if (r->p < r->end && *r->p < 0x80) {
		*v = *r->p++;
		return true;
	}
	return varint_long(r, v);
}

/* A field's tag, with field numbers up to 2^25 (4 bytes), never 0. */
static bool tag(reader *r, unsigned *field, unsigned *wire)
{
	const uint8_t *start = r->p;
	uint64_t v;
	if (!varint(r, &v) || r->p - start > 4 || v >> 3 == 0)
		return false;
	*field = (unsigned)(v >> 3);
	*wire = (unsigned)(v & 7);
	return true;
}

/* A length-delimited field's bytes (its length in at most 5 bytes, as protobuf-c reads it). */
static bool bytes_of(reader *r, unsigned wire, reader *out)
{
	const uint8_t *start = r->p;
	uint64_t n;
	if (wire != PB_WIRE_LEN || !varint(r, &n) || r->p - start > 5 || n > (uint64_t)(r->end - r->p))
		return false;
	*out = (reader){r->p, r->p + n, r->a};
	r->p += n;
	return true;
}

static bool skip(reader *r, unsigned wire)
{
	uint64_t v;
	reader s;
	size_t n = wire == PB_WIRE_I64 ? 8 : 4;
	switch (wire) {
	case PB_WIRE_VARINT:
		return varint(r, &v);
	case PB_WIRE_LEN:
		return bytes_of(r, wire, &s);
	case PB_WIRE_I64:
	case PB_WIRE_I32:
		if ((size_t)(r->end - r->p) < n)
			return false;
		r->p += n;
		return true;
	}
	return false; /* groups and wire types that do not exist */
}

static bool u64(reader *r, unsigned wire, uint64_t *v)
{
	return wire == PB_WIRE_VARINT && varint(r, v);
}

/* The other varint fields, the value as the field's type. 32-bit ones take its low 32 bits, as protobuf-c
 * does. A bool is any bit set. */
#define VARINT_FIELD(name, type, value)                                                                      \
	static bool name(reader *r, unsigned wire, type *v)                                                  \
	{                                                                                                    \
		uint64_t x;                                                                                  \
		if (!u64(r, wire, &x))                                                                       \
			return false;                                                                        \
		*v = (value);                                                                                \
		return true;                                                                                 \
	}
VARINT_FIELD(i64, int64_t, (int64_t)x)
VARINT_FIELD(u32, uint32_t, (uint32_t)x)
VARINT_FIELD(i32, int32_t, (int32_t)(uint32_t)x)
VARINT_FIELD(boolean, protobuf_c_boolean, x != 0)

static bool fixed64(reader *r, unsigned wire, uint64_t *v)
{
	if (wire != PB_WIRE_I64 || r->end - r->p < 8)
		return false;
	uint64_t x = 0;
	for (int i = 7; i >= 0; i--)
		x = x << 8 | r->p[i];
	r->p += 8;
	*v = x;
	return true;
}

static bool dbl(reader *r, unsigned wire, double *v)
{
	uint64_t x;
	if (!fixed64(r, wire, &x))
		return false;
	memcpy(v, &x, sizeof(*v));
	return true;
}

static bool str(reader *r, unsigned wire, char **v)
{
	reader s;
	if (!bytes_of(r, wire, &s))
		return false;
	*v = arena_strndup(r->a, (const char *)s.p, (size_t)(s.end - s.p));
	return true;
}

static bool binary(reader *r, unsigned wire, ProtobufCBinaryData *v)
{
	reader s;
	if (!bytes_of(r, wire, &s))
		return false;
	v->len = (size_t)(s.end - s.p);
	v->data = v->len ? memcpy(arena_alloc(r->a, v->len), s.p, v->len) : NULL;
	return true;
}

/* Messages ---------------------------------------------------------------------------------- */

typedef bool (*field_fn)(reader *r, void *msg, unsigned field, unsigned wire);

/* How to read one message type. It gives its size and INIT value, its known fields 1..known, the one that
 * repeats (0 if none), and what reads a known field. */
typedef struct kind {
	size_t size;
	const void *init;
	unsigned known, repeated;
	field_fn field;
} kind;

/* A length-delimited field holding a message of kind k. */
static void *message(reader *r, unsigned wire, const kind *k)
{
	reader s;
	if (!bytes_of(r, wire, &s))
		return NULL;
	void *m = memcpy(arena_alloc(r->a, k->size), k->init, k->size);
	uint32_t seen = 0;
	while (s.p < s.end) {
		unsigned f, w;
		if (!tag(&s, &f, &w))
			return NULL;
		if (f > k->known) {
			if (!skip(&s, w))
				return NULL;
			continue;
		}
		/* protobuf-c's rules for a field set twice (the last wins, messages merge) are left to it */
		if (f != k->repeated && (seen & 1u << f))
			return NULL;
		seen |= 1u << f;
		if (!k->field(&s, m, f, w))
			return NULL;
	}
	return m;
}

/* The array of a repeated field with room for one more than its n items. It grows in powers of two from 4
 * (the arena keeps the old one until its reset). */
static void *grow(arena *a, void *items, size_t n, size_t size)
{
	if (n && (n < 4 || (n & (n - 1))))
		return items;
	void *v = arena_alloc(a, (n ? 2 * n : 4) * size);
	return n ? memcpy(v, items, n * size) : v;
}

static bool timestamp_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Timestamp *t = msg;
	return f == 1 ? i64(r, w, &t->micros) : boolean(r, w, &t->with_zone);
}
static const Cdc__V1__Timestamp timestamp_init = CDC__V1__TIMESTAMP__INIT;
static const kind timestamp_kind = {sizeof(Cdc__V1__Timestamp), &timestamp_init, 2, 0, timestamp_field};

static bool other_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Other *o = msg;
	return str(r, w, f == 1 ? &o->type_name : &o->text);
}
static const Cdc__V1__Other other_init = CDC__V1__OTHER__INIT;
static const kind other_kind = {sizeof(Cdc__V1__Other), &other_init, 2, 0, other_field};

static bool value_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Value *v = msg;
	if (v->kind_case != CDC__V1__VALUE__KIND__NOT_SET)
		return false; /* a second member of the oneof */
	v->kind_case = (Cdc__V1__Value__KindCase)f;
	switch (f) {
	case CDC__V1__VALUE__KIND_NULL_VALUE:
		return boolean(r, w, &v->null_value);
	case CDC__V1__VALUE__KIND_UNCHANGED_TOAST:
		return boolean(r, w, &v->unchanged_toast);
	case CDC__V1__VALUE__KIND_INT_VALUE:
		return i64(r, w, &v->int_value);
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		return dbl(r, w, &v->float_value);
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		return boolean(r, w, &v->bool_value);
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		return str(r, w, &v->numeric_value);
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		return str(r, w, &v->text_value);
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		return binary(r, w, &v->bytes_value);
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		return binary(r, w, &v->uuid_value);
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		return i32(r, w, &v->date_value);
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		return i64(r, w, &v->time_value);
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		return (v->timestamp_value = message(r, w, &timestamp_kind)) != NULL;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		return str(r, w, &v->json_value);
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		return (v->other_value = message(r, w, &other_kind)) != NULL;
	default: /* CDC__V1__VALUE__KIND_BINARY_VALUE */
		return binary(r, w, &v->binary_value);
	}
}
static const Cdc__V1__Value value_init = CDC__V1__VALUE__INIT;
static const kind value_kind = {sizeof(Cdc__V1__Value), &value_init, 15, 0, value_field};

static bool column_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Column *c = msg;
	switch (f) {
	case 1:
		return str(r, w, &c->name);
	case 2:
		return u32(r, w, &c->type_oid);
	default:
		return (c->value = message(r, w, &value_kind)) != NULL;
	}
}
static const Cdc__V1__Column column_init = CDC__V1__COLUMN__INIT;
static const kind column_kind = {sizeof(Cdc__V1__Column), &column_init, 3, 0, column_field};

static bool row_field(reader *r, void *msg, unsigned f, unsigned w)
{
	(void)f;
	Cdc__V1__Row *row = msg;
	Cdc__V1__Column *c = message(r, w, &column_kind);
	if (!c)
		return false;
	row->columns = grow(r->a, row->columns, row->n_columns, sizeof(*row->columns));
	row->columns[row->n_columns++] = c;
	return true;
}
static const Cdc__V1__Row row_init = CDC__V1__ROW__INIT;
static const kind row_kind = {sizeof(Cdc__V1__Row), &row_init, 1, 1, row_field};

static bool truncate_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Truncate *t = msg;
	return boolean(r, w, f == 1 ? &t->cascade : &t->restart_identity);
}
static const Cdc__V1__Truncate truncate_init = CDC__V1__TRUNCATE__INIT;
static const kind truncate_kind = {sizeof(Cdc__V1__Truncate), &truncate_init, 2, 0, truncate_field};

static bool lmessage_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__LogicalMessage *m = msg;
	switch (f) {
	case 1:
		return str(r, w, &m->prefix);
	case 2:
		return binary(r, w, &m->content);
	default:
		return boolean(r, w, &m->transactional);
	}
}
static const Cdc__V1__LogicalMessage lmessage_init = CDC__V1__LOGICAL_MESSAGE__INIT;
static const kind lmessage_kind = {sizeof(Cdc__V1__LogicalMessage), &lmessage_init, 3, 0, lmessage_field};

static bool row(reader *r, unsigned w, Cdc__V1__Row **out)
{
	return (*out = message(r, w, &row_kind)) != NULL;
}

static bool event_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Event *e = msg;
	int32_t op;
	switch (f) {
	case 1:
		return str(r, w, &e->subscription);
	case 2:
		e->offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT_OFFSET;
		return u64(r, w, &e->offset);
	case 3:
		e->tag_present_case = CDC__V1__EVENT__TAG_PRESENT_TAG;
		return str(r, w, &e->tag);
	case 4:
		if (!i32(r, w, &op))
			return false;
		e->op = (Cdc__V1__Op)op;
		return true;
	case 5:
		return str(r, w, &e->schema);
	case 6:
		return str(r, w, &e->table);
	case 7:
		return u32(r, w, &e->relation_id);
	case 8:
		return u64(r, w, &e->lsn);
	case 9:
		return u64(r, w, &e->commit_lsn);
	case 10:
		return u32(r, w, &e->xid);
	case 11:
		return u32(r, w, &e->tx_index);
	case 12:
		return i64(r, w, &e->commit_time);
	case 13:
		return row(r, w, &e->key);
	case 14:
		return row(r, w, &e->new_row);
	case 15:
		return row(r, w, &e->old_row);
	case 16:
		return u32(r, w, &e->delivery_count);
	case 17:
		return (e->truncate = message(r, w, &truncate_kind)) != NULL;
	case 18:
		return (e->message = message(r, w, &lmessage_kind)) != NULL;
	case 19:
		return str(r, w, &e->origin);
	case 22:
		return fixed64(r, w, &e->schema_id);
	default: /* 20 and 21, a schema or DDL event (rare), are protobuf-c's */
		return false;
	}
}
static const Cdc__V1__Event event_init = CDC__V1__EVENT__INIT;
static const kind event_kind = {sizeof(Cdc__V1__Event), &event_init, 22, 0, event_field};

/* Events only. Dead letters (field 2) are protobuf-c's. */
static bool delivery_field(reader *r, void *msg, unsigned f, unsigned w)
{
	Cdc__V1__Delivery *d = msg;
	if (f != DELIVERY_EVENTS)
		return false;
	Cdc__V1__Event *e = message(r, w, &event_kind);
	if (!e)
		return false;
	d->events = grow(r->a, d->events, d->n_events, sizeof(*d->events));
	d->events[d->n_events++] = e;
	return true;
}
static const Cdc__V1__Delivery delivery_init = CDC__V1__DELIVERY__INIT;
static const kind delivery_kind = {sizeof(Cdc__V1__Delivery), &delivery_init, 2, 1, delivery_field};

Cdc__V1__ServerFrame *socket_pb_read_delivery(const uint8_t *msg, size_t len, arena *a)
{
	reader r = {msg, msg + len, a};
	unsigned f, w;
	if (!tag(&r, &f, &w) || f != SF_DELIVERY)
		return NULL;
	Cdc__V1__Delivery *d = message(&r, w, &delivery_kind);
	if (!d || r.p != r.end) /* anything after it is protobuf-c's */
		return NULL;
	Cdc__V1__ServerFrame *sf = arena_alloc(a, sizeof(*sf));
	*sf = (Cdc__V1__ServerFrame)CDC__V1__SERVER_FRAME__INIT;
	sf->kind_case = CDC__V1__SERVER_FRAME__KIND_DELIVERY;
	sf->delivery = d;
	return sf;
}

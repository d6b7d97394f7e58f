/* See pbwire.h. */
#include "sinks/pbwire.h"

#include <string.h>

size_t sink_pb_varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void sink_pb_put_varint(buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (uint8_t)v;
	buf_append(b, tmp, n);
}

static uint64_t tag(unsigned field, unsigned wire)
{
	return (uint64_t)field << 3 | wire;
}

void sink_pb_put_varint_field(buf *b, unsigned field, uint64_t v)
{
	sink_pb_put_varint(b, tag(field, PB_WIRE_VARINT));
	sink_pb_put_varint(b, v);
}

size_t sink_pb_varint_field_size(unsigned field, uint64_t v)
{
	return sink_pb_varint_size(tag(field, PB_WIRE_VARINT)) + sink_pb_varint_size(v);
}

void sink_pb_put_len_header(buf *b, unsigned field, size_t len)
{
	sink_pb_put_varint(b, tag(field, PB_WIRE_LEN));
	sink_pb_put_varint(b, len);
}

size_t sink_pb_len_header_size(unsigned field, size_t len)
{
	return sink_pb_varint_size(tag(field, PB_WIRE_LEN)) + sink_pb_varint_size(len);
}

void sink_pb_put_commit(buf *b, const sink_commit *c)
{
	sink_pb_put_varint_field(b, EVENT_COMMIT_LSN, c->commit_lsn);
	sink_pb_put_varint_field(b, EVENT_TX_INDEX, c->tx_index);
	sink_pb_put_varint_field(b, EVENT_COMMIT_TIME, (uint64_t)c->commit_time);
}

size_t sink_pb_commit_size(const sink_commit *c)
{
	return sink_pb_varint_field_size(EVENT_COMMIT_LSN, c->commit_lsn) +
	       sink_pb_varint_field_size(EVENT_TX_INDEX, c->tx_index) +
	       sink_pb_varint_field_size(EVENT_COMMIT_TIME, (uint64_t)c->commit_time);
}

/* Events, keys and rows, written as protobuf-c's pack writes them, byte for byte (fuzz_pbwire checks it).
 * They are written in one pass instead of protobuf-c's two generic walks (its size, then its bytes), which
 * took a quarter of the Kafka sink's thread. The proto3 rules are applied as protobuf-c applies them.
 * - A plain field is left out at its zero value (a string empty or NULL, bytes empty, a message NULL).
 * - A oneof member is written whenever it is the one set. The exceptions are a string that is NULL or
 *   protobuf-c's own empty default, and a NULL message. */

/* A varint at p, which has room for ten bytes. Returns the byte after it. It is inline, with the one-byte
 * case first. An event of four columns writes about 60 varints, most of them tags and short lengths, and the
 * calls were a tenth of the Kafka sink's thread (callgrind). */
static inline __attribute__((always_inline)) uint8_t *w_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline __attribute__((always_inline)) void put_varint(buf *b, uint64_t v)
{
	buf_reserve(b, 10);
	uint8_t *p = (uint8_t *)b->data + b->len;
	b->len = (size_t)((char *)w_varint(p, v) - b->data);
}

static inline void put_tag(buf *b, unsigned field, unsigned wire)
{
	put_varint(b, tag(field, wire));
}

/* int32 as protobuf-c writes it. A negative one is sign-extended to ten bytes. */
static void put_int32(buf *b, unsigned field, int32_t v)
{
	put_tag(b, field, PB_WIRE_VARINT);
	put_varint(b, (uint64_t)(int64_t)v);
}

static void put_u64(buf *b, unsigned field, uint64_t v)
{
	put_tag(b, field, PB_WIRE_VARINT);
	put_varint(b, v);
}

static void put_bytes(buf *b, unsigned field, const void *p, size_t n)
{
	put_tag(b, field, PB_WIRE_LEN);
	put_varint(b, n);
	buf_append(b, p, n);
}

static void put_string(buf *b, unsigned field, const char *s)
{
	put_bytes(b, field, s, strlen(s));
}

/* Plain (proto3) fields, nothing at the zero value. */
static void opt_u64(buf *b, unsigned field, uint64_t v)
{
	if (v)
		put_u64(b, field, v);
}

static void opt_string(buf *b, unsigned field, const char *s)
{
	if (s && *s)
		put_string(b, field, s);
}

/* A oneof string, written unless NULL or protobuf-c's default (its empty string). */
static void oneof_string(buf *b, unsigned field, const char *s)
{
	if (s && s != protobuf_c_empty_string)
		put_string(b, field, s);
}

/* A message field is its tag and a one-byte length, then its contents. msg_end fixes the length, and moves
 * the contents if the length needs more bytes. */
static size_t msg_begin(buf *b, unsigned field)
{
	put_tag(b, field, PB_WIRE_LEN);
	buf_putc(b, 0);
	return b->len;
}

static void msg_end(buf *b, size_t start)
{
	size_t len = b->len - start, n = sink_pb_varint_size(len);
	if (n > 1) {
		buf_reserve(b, n - 1);
		memmove(b->data + start + n - 1, b->data + start, len);
		b->len += n - 1;
	}
	uint8_t *p = (uint8_t *)b->data + start - 1;
	for (; len >= 0x80; len >>= 7)
		*p++ = (uint8_t)(len | 0x80);
	*p = (uint8_t)len;
}

static void put_value(buf *b, const Cdc__V1__Value *v)
{
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_NULL_VALUE:
		put_u64(b, 1, v->null_value != 0);
		break;
	case CDC__V1__VALUE__KIND_UNCHANGED_TOAST:
		put_u64(b, 2, v->unchanged_toast != 0);
		break;
	case CDC__V1__VALUE__KIND_INT_VALUE:
		put_u64(b, 3, (uint64_t)v->int_value);
		break;
	case CDC__V1__VALUE__KIND_FLOAT_VALUE: {
		uint64_t bits;
		memcpy(&bits, &v->float_value, sizeof(bits));
		put_tag(b, 4, PB_WIRE_I64);
		uint8_t le[8];
		for (int i = 0; i < 8; i++)
			le[i] = (uint8_t)(bits >> (8 * i));
		buf_append(b, le, sizeof(le));
		break;
	}
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		put_u64(b, 5, v->bool_value != 0);
		break;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		oneof_string(b, 6, v->numeric_value);
		break;
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		oneof_string(b, 7, v->text_value);
		break;
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		put_bytes(b, 8, v->bytes_value.data, v->bytes_value.len);
		break;
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		put_bytes(b, 9, v->uuid_value.data, v->uuid_value.len);
		break;
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		put_int32(b, 10, v->date_value);
		break;
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		put_u64(b, 11, (uint64_t)v->time_value);
		break;
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		if (v->timestamp_value) {
			size_t at = msg_begin(b, 12);
			opt_u64(b, 1, (uint64_t)v->timestamp_value->micros);
			opt_u64(b, 2, v->timestamp_value->with_zone != 0);
			msg_end(b, at);
		}
		break;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		oneof_string(b, 13, v->json_value);
		break;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		if (v->other_value) {
			size_t at = msg_begin(b, 14);
			opt_string(b, 1, v->other_value->type_name);
			opt_string(b, 2, v->other_value->text);
			msg_end(b, at);
		}
		break;
	case CDC__V1__VALUE__KIND_BINARY_VALUE:
		put_bytes(b, 15, v->binary_value.data, v->binary_value.len);
		break;
	default:
		break;
	}
}

/* A column's tag, name and type written with one reservation (they were most of the columns'
 * cost, field by field), then its value and type modifier. */
static void put_column(buf *b, unsigned field, const Cdc__V1__Column *c)
{
	size_t name_len = c->name ? strlen(c->name) : 0;
	buf_reserve(b, name_len + 32);
	uint8_t *p = w_varint((uint8_t *)b->data + b->len, tag(field, PB_WIRE_LEN));
	*p++ = 0; /* the column's length, fixed by msg_end */
	size_t at = (size_t)((char *)p - b->data);
	if (name_len) {
		p = w_varint(p, tag(1, PB_WIRE_LEN));
		p = w_varint(p, name_len);
		memcpy(p, c->name, name_len);
		p += name_len;
	}
	if (c->type_oid) {
		p = w_varint(p, tag(2, PB_WIRE_VARINT));
		p = w_varint(p, c->type_oid);
	}
	b->len = (size_t)((char *)p - b->data);
	if (c->value) {
		size_t v = msg_begin(b, 3);
		put_value(b, c->value);
		msg_end(b, v);
	}
	if (c->type_modifier_present_case == CDC__V1__COLUMN__TYPE_MODIFIER_PRESENT_TYPE_MODIFIER)
		put_int32(b, 4, c->type_modifier);
	msg_end(b, at);
}

static void put_columns(buf *b, unsigned field, Cdc__V1__Column *const *cols, size_t n)
{
	for (size_t i = 0; i < n; i++)
		put_column(b, field, cols[i]);
}

void sink_pb_put_row(buf *b, const Cdc__V1__Row *r)
{
	put_columns(b, 1, r->columns, r->n_columns);
}

static void packed_field(buf *b, unsigned field, const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	put_tag(b, field, PB_WIRE_LEN);
	put_varint(b, n);
	buf_reserve(b, n);
	b->len += protobuf_c_message_pack(m, (uint8_t *)b->data + b->len);
}

static void row_field(buf *b, unsigned field, const Cdc__V1__Row *r)
{
	if (!r)
		return;
	size_t at = msg_begin(b, field);
	sink_pb_put_row(b, r);
	msg_end(b, at);
}

void sink_pb_put_key(buf *b, const Cdc__V1__Key *k)
{
	opt_string(b, 1, k->schema);
	opt_string(b, 2, k->table);
	put_columns(b, 3, k->columns, k->n_columns);
}

void sink_pb_put_event(buf *b, const Cdc__V1__Event *e)
{
	opt_string(b, 1, e->subscription);
	if (e->offset_present_case == CDC__V1__EVENT__OFFSET_PRESENT_OFFSET)
		put_u64(b, 2, e->offset);
	if (e->tag_present_case == CDC__V1__EVENT__TAG_PRESENT_TAG)
		oneof_string(b, 3, e->tag);
	if (e->op)
		put_int32(b, 4, (int32_t)e->op);
	opt_string(b, 5, e->schema);
	opt_string(b, 6, e->table);
	opt_u64(b, 7, e->relation_id);
	opt_u64(b, 8, e->lsn);
	opt_u64(b, 9, e->commit_lsn);
	opt_u64(b, 10, e->xid);
	opt_u64(b, 11, e->tx_index);
	opt_u64(b, 12, (uint64_t)e->commit_time);
	row_field(b, 13, e->key);
	row_field(b, 14, e->new_row);
	row_field(b, 15, e->old_row);
	opt_u64(b, 16, e->delivery_count);
	if (e->truncate) {
		size_t at = msg_begin(b, 17);
		opt_u64(b, 1, e->truncate->cascade != 0);
		opt_u64(b, 2, e->truncate->restart_identity != 0);
		msg_end(b, at);
	}
	if (e->message) {
		size_t at = msg_begin(b, 18);
		opt_string(b, 1, e->message->prefix);
		if (e->message->content.len)
			put_bytes(b, 2, e->message->content.data, e->message->content.len);
		opt_u64(b, 3, e->message->transactional != 0);
		msg_end(b, at);
	}
	opt_string(b, 19, e->origin);
	/* Schema and DDL events are rare, so their messages go through protobuf-c. */
	if (e->table_schema)
		packed_field(b, 20, &e->table_schema->base);
	if (e->ddl)
		packed_field(b, 21, &e->ddl->base);
	if (e->schema_id) {
		put_tag(b, 22, PB_WIRE_I64);
		buf_reserve(b, 8);
		for (int i = 0; i < 8; i++)
			((uint8_t *)b->data)[b->len++] = (uint8_t)(e->schema_id >> (8 * i));
	}
}

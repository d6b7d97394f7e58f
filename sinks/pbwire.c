/* pbwire.c: see pbwire.h. */
#include "sinks/pbwire.h"

size_t pb_varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

void pb_put_varint(buf *b, uint64_t v)
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

void pb_put_varint_field(buf *b, unsigned field, uint64_t v)
{
	pb_put_varint(b, tag(field, PB_WIRE_VARINT));
	pb_put_varint(b, v);
}

size_t pb_varint_field_size(unsigned field, uint64_t v)
{
	return pb_varint_size(tag(field, PB_WIRE_VARINT)) + pb_varint_size(v);
}

void pb_put_len_header(buf *b, unsigned field, size_t len)
{
	pb_put_varint(b, tag(field, PB_WIRE_LEN));
	pb_put_varint(b, len);
}

size_t pb_len_header_size(unsigned field, size_t len)
{
	return pb_varint_size(tag(field, PB_WIRE_LEN)) + pb_varint_size(len);
}

void pb_put_commit(buf *b, const sink_commit *c)
{
	pb_put_varint_field(b, EVENT_COMMIT_LSN, c->commit_lsn);
	pb_put_varint_field(b, EVENT_TX_INDEX, c->tx_index);
	pb_put_varint_field(b, EVENT_COMMIT_TIME, (uint64_t)c->commit_time);
}

size_t pb_commit_size(const sink_commit *c)
{
	return pb_varint_field_size(EVENT_COMMIT_LSN, c->commit_lsn) +
	       pb_varint_field_size(EVENT_TX_INDEX, c->tx_index) +
	       pb_varint_field_size(EVENT_COMMIT_TIME, (uint64_t)c->commit_time);
}

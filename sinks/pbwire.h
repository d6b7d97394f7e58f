/* The few protobuf wire-format pieces sinks write by hand. Some are fields appended to an already packed
 * message, as protobuf merges the fields of a message that arrive in any order. Others are the headers
 * of length-delimited fields whose contents are copied as bytes instead of packed again. */
#ifndef CDC_PBWIRE_H
#define CDC_PBWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "decoder/base/util.h"
#include "sinks/sink.h"

/* Wire types, and the field numbers (proto/cdc/v1/event.proto, subscriber.proto) of what the socket sink
 * writes and cdc tail reads by hand (pbread.c). The other fields go through protobuf-c. */
enum { PB_WIRE_VARINT = 0, PB_WIRE_I64 = 1, PB_WIRE_LEN = 2, PB_WIRE_I32 = 5 };
enum {
	SF_DELIVERY = 2,
	DELIVERY_EVENTS = 1,
	DELIVERY_DEAD_LETTERS = 2,
	DEAD_LETTER_OFFSET = 1,
	EVENT_OFFSET = 2,
	EVENT_COMMIT_LSN = 9,
	EVENT_TX_INDEX = 11,
	EVENT_COMMIT_TIME = 12,
	EVENT_DELIVERY_COUNT = 16
};

/* Bytes of value as a varint. */
size_t sink_pb_varint_size(uint64_t value);
void sink_pb_put_varint(buf *buffer, uint64_t value);
/* A varint field (wire type 0), and its size. */
void sink_pb_put_varint_field(buf *buffer, unsigned field, uint64_t value);
size_t sink_pb_varint_field_size(unsigned field, uint64_t value);
/* The tag and length of a length-delimited field (wire type 2) of len bytes, and their size. */
void sink_pb_put_len_header(buf *buffer, unsigned field, size_t len);
size_t sink_pb_len_header_size(unsigned field, size_t len);
/* An Event, a Key, a Row appended as protobuf-c's pack writes them (pbwire.c says why). */
void sink_pb_put_event(buf *buffer, const Cdc__V1__Event *event);
void sink_pb_put_key(buf *buffer, const Cdc__V1__Key *key);
void sink_pb_put_row(buf *buffer, const Cdc__V1__Row *row);
/* Completes an Event packed without its commit fields (commit_lsn, tx_index, commit_time). */
void sink_pb_put_commit(buf *buffer, const sink_commit *commit);
size_t sink_pb_commit_size(const sink_commit *commit);

#endif

/* fuzz_pbwire.c: libFuzzer harness for the sinks' own protobuf writer of events (pbwire.c): the
 * bytes are read by protobuf-c as an Event, a Key and a Row; wherever it reads one (without fields
 * it does not know, which protobuf-c writes back and the sinks never have), sink_pb_put_event,
 * sink_pb_put_key and sink_pb_put_row must write exactly the bytes protobuf-c's pack does. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/pbwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* No unknown fields in m or any message in it. */
static int all_known(const ProtobufCMessage *m)
{
	if (m->n_unknown_fields)
		return 0;
	const ProtobufCMessageDescriptor *d = m->descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if (f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		const char *base = (const char *)m;
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
		    *(const uint32_t *)(base + f->quantifier_offset) != f->id)
			continue;
		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			ProtobufCMessage *const *sub = *(ProtobufCMessage *const *const *)(base + f->offset);
			for (size_t k = 0; k < n; k++)
				if (!all_known(sub[k]))
					return 0;
		} else {
			const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)(base + f->offset);
			if (sub && !all_known(sub))
				return 0;
		}
	}
	return 1;
}

static void same(const char *what, const ProtobufCMessage *m, const buf *mine)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *ref = malloc(n ? n : 1);
	protobuf_c_message_pack(m, ref);
	if (n != mine->len || memcmp(ref, mine->data, n) != 0) {
		fprintf(stderr, "%s: pbwire wrote %zu bytes, protobuf-c %zu\n", what, mine->len, n);
		abort();
	}
	free(ref);
}

static void put_event(buf *b, const void *m)
{
	sink_pb_put_event(b, m);
}

static void put_key(buf *b, const void *m)
{
	sink_pb_put_key(b, m);
}

static void put_row(buf *b, const void *m)
{
	sink_pb_put_row(b, m);
}

static const struct {
	const ProtobufCMessageDescriptor *desc;
	void (*put)(buf *b, const void *m);
} types[] = {
    {&cdc__v1__event__descriptor, put_event},
    {&cdc__v1__key__descriptor, put_key},
    {&cdc__v1__row__descriptor, put_row},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		ProtobufCMessage *m = protobuf_c_message_unpack(types[i].desc, NULL, size, data);
		if (m && all_known(m)) {
			buf b = {0};
			types[i].put(&b, m);
			same(types[i].desc->short_name, m, &b);
			buf_free(&b);
		}
		if (m)
			protobuf_c_message_free_unpacked(m, NULL);
	}
	return 0;
}

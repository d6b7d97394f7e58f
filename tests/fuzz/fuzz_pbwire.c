/* fuzz_pbwire.c: libFuzzer harness for the sinks' own protobuf writer of events (pbwire.c): the
 * bytes are read by protobuf-c as an Event, a Key and a Row; wherever it reads one (without fields
 * it does not know, which protobuf-c writes back and the sinks never have), pb_put_event,
 * pb_put_key and pb_put_row must write exactly the bytes protobuf-c's pack does. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	buf b = {0};
	Cdc__V1__Event *e = cdc__v1__event__unpack(NULL, size, data);
	if (e && all_known(&e->base)) {
		pb_put_event(&b, e);
		same("Event", &e->base, &b);
	}
	cdc__v1__event__free_unpacked(e, NULL);
	Cdc__V1__Key *k = cdc__v1__key__unpack(NULL, size, data);
	if (k && all_known(&k->base)) {
		buf_reset(&b);
		pb_put_key(&b, k);
		same("Key", &k->base, &b);
	}
	cdc__v1__key__free_unpacked(k, NULL);
	Cdc__V1__Row *r = cdc__v1__row__unpack(NULL, size, data);
	if (r && all_known(&r->base)) {
		buf_reset(&b);
		pb_put_row(&b, r);
		same("Row", &r->base, &b);
	}
	cdc__v1__row__free_unpacked(r, NULL);
	buf_free(&b);
	return 0;
}

/* fuzz_frame.c: libFuzzer harness for the subscriber socket's framing: arbitrary bytes as a client
 * would send them, cut into frames by socket_frame_next and decoded by socket_frame_decode_client (Subscribe,
 * Ack, Nack, Progress) in a loop as the socket sink does, until a bad frame (which closes a connection) or
 * the bytes run out. The same bytes as a server's message: protobuf-c and socket_pb_read_delivery (cdc tail's
 * reader of Deliveries) must agree wherever the latter reads one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/event_json.h"
#include "sinks/socket/frame.h"
#include "sinks/socket/pbread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *err)
{
	fprintf(stderr, "%s: \"%s\"\n", what, err);
	abort();
}

/* What validation lets through in an Ack, Nack or Progress. */
static void check_offsets(const char *what, const uint64_t *offsets, size_t n)
{
	if (n == 0 || n > 65536)
		fail(what, "offset count");
	for (size_t i = 0; i < n; i++)
		if (offsets[i] == 0)
			fail(what, "offset 0");
}

/* The offsets of the Ack, Nack or Progress in f (NULL for a Subscribe). */
static const uint64_t *offsets_of(const Cdc__V1__ClientFrame *f, size_t *n)
{
	switch (f->kind_case) {
	case CDC__V1__CLIENT_FRAME__KIND_ACK:
		*n = f->ack->n_offsets;
		return f->ack->offsets;
	case CDC__V1__CLIENT_FRAME__KIND_NACK:
		*n = f->nack->n_offsets;
		return f->nack->offsets;
	case CDC__V1__CLIENT_FRAME__KIND_PROGRESS:
		*n = f->progress->n_offsets;
		return f->progress->offsets;
	default:
		*n = 0;
		return NULL;
	}
}

/* The server side of the same bytes (cdc tail decodes them): protobuf-c must not crash, and
 * where socket_pb_read_delivery reads a Delivery, protobuf-c reads the same events (as JSON). */
static void server_side(const uint8_t *msg, size_t len)
{
	char err[128];
	Cdc__V1__ServerFrame *ref = socket_frame_decode_server(msg, len, NULL, err, sizeof(err));
	arena *a = arena_new(4096);
	const Cdc__V1__ServerFrame *fast = socket_pb_read_delivery(msg, len, a);
	if (fast) {
		if (!ref || ref->kind_case != CDC__V1__SERVER_FRAME__KIND_DELIVERY ||
		    ref->delivery->n_events != fast->delivery->n_events || ref->delivery->n_dead_letters)
			fail("pb_read_delivery", "read a Delivery protobuf-c reads otherwise");
		buf x = {0}, y = {0};
		for (size_t i = 0; i < fast->delivery->n_events; i++) {
			buf_reset(&x);
			buf_reset(&y);
			sink_json_event(&x, ref->delivery->events[i]);
			sink_json_event(&y, fast->delivery->events[i]);
			if (x.len != y.len || memcmp(x.data, y.data, x.len) != 0)
				fail("pb_read_delivery", "an event differs from protobuf-c's");
		}
		buf_free(&x);
		buf_free(&y);
	}
	arena_free(a);
	socket_frame_server_free(ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0;
	for (;;) {
		const uint8_t *msg;
		size_t msglen, consumed;
		char err[128] = "";
		frame_result r = socket_frame_next(data + pos, size - pos, FRAME_MAX, &msg, &msglen,
						   &consumed, err, sizeof(err));
		if (r == FRAME_MORE)
			break;
		if (r == FRAME_BAD) {
			if (!strstr(err, "over the 16 MiB limit"))
				fail("bad frame with an unexpected message", err);
			break;
		}
		if (consumed != FRAME_HEADER + msglen || consumed > size - pos || msglen > FRAME_MAX)
			fail("frame_next", "inconsistent sizes");
		Cdc__V1__ClientFrame *f = socket_frame_decode_client(msg, msglen, err, sizeof(err));
		if (!f) {
			if (!err[0])
				fail("rejected without a message", err);
			break;
		}
		/* What validation lets through is what the socket sink relies on. */
		if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE) {
			size_t n = strlen(f->subscribe->subscription);
			if (n == 0 || n > 255 || strlen(f->subscribe->consumer) > 255 ||
			    (unsigned)f->subscribe->start > CDC__V1__START_FROM__START_OFFSET)
				fail("accepted an invalid Subscribe", f->subscribe->subscription);
		} else if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK ||
			   f->kind_case == CDC__V1__CLIENT_FRAME__KIND_PROGRESS) {
			size_t n;
			const uint64_t *o = offsets_of(f, &n);
			check_offsets("accepted an invalid Ack or Progress", o, n);
		} else if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK) {
			check_offsets("accepted an invalid Nack", f->nack->offsets, f->nack->n_offsets);
			if (f->nack->delay_ms > FRAME_NACK_MAX_DELAY_MS ||
			    strlen(f->nack->reason) > FRAME_REASON_MAX_BYTES)
				fail("accepted an invalid Nack", f->nack->reason);
		} else {
			fail("accepted a frame without a kind", "");
		}
		/* What was accepted survives a round trip. Built afresh rather than re-packed: protobuf-c
		 * keeps unknown fields and would re-pack an overlong tag of field 0 as one it rejects. */
		Cdc__V1__ClientFrame c = CDC__V1__CLIENT_FRAME__INIT;
		Cdc__V1__Subscribe sub = CDC__V1__SUBSCRIBE__INIT;
		Cdc__V1__Ack ack = CDC__V1__ACK__INIT;
		Cdc__V1__Nack nack = CDC__V1__NACK__INIT;
		Cdc__V1__Progress progress = CDC__V1__PROGRESS__INIT;
		c.kind_case = f->kind_case;
		if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE) {
			sub = *f->subscribe;
			sub.base.n_unknown_fields = 0;
			c.subscribe = &sub;
		} else if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK) {
			ack = *f->ack;
			ack.base.n_unknown_fields = 0;
			c.ack = &ack;
		} else if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK) {
			nack = *f->nack;
			nack.base.n_unknown_fields = 0;
			c.nack = &nack;
		} else {
			progress = *f->progress;
			progress.base.n_unknown_fields = 0;
			c.progress = &progress;
		}
		buf b = {0};
		socket_frame_put_client(&b, &c);
		const uint8_t *m2;
		size_t l2, c2;
		if (socket_frame_next((const uint8_t *)b.data, b.len, FRAME_MAX, &m2, &l2, &c2, err,
				      sizeof(err)) != FRAME_OK ||
		    c2 != b.len)
			fail("re-encoded frame", err);
		Cdc__V1__ClientFrame *g = socket_frame_decode_client(m2, l2, err, sizeof(err));
		if (!g || g->kind_case != f->kind_case)
			fail("re-encoded frame does not decode", err);
		size_t n1, n2;
		const uint64_t *o1 = offsets_of(f, &n1), *o2 = offsets_of(g, &n2);
		if (g->kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE
			? strcmp(g->subscribe->subscription, sub.subscription) != 0 ||
			      strcmp(g->subscribe->consumer, sub.consumer) != 0 ||
			      g->subscribe->start != sub.start ||
			      g->subscribe->start_offset != sub.start_offset ||
			      g->subscribe->max_unacked != sub.max_unacked
			: n1 != n2 || memcmp(o1, o2, n1 * sizeof(uint64_t)) != 0 ||
			      (g->kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK &&
			       (g->nack->delay_ms != nack.delay_ms ||
				strcmp(g->nack->reason, nack.reason) != 0)))
			fail("re-encoded frame differs", "");
		socket_frame_client_free(g);
		buf_free(&b);
		socket_frame_client_free(f);
		pos += consumed;
	}
	if (size >= FRAME_HEADER)
		server_side(data + FRAME_HEADER, size - FRAME_HEADER);
	return 0;
}

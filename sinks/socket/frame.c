/* The subscriber socket's framing and client-frame validation (see frame.h). Bytes from a peer are untrusted.
 * The length is checked before the body is awaited. A decoded ClientFrame is checked field by field, so the
 * socket sink only ever sees well-formed requests. */
#include <string.h>

#include "decoder/base/bytes.h"
#include "sinks/socket/frame.h"
#include "sinks/socket/pbread.h"

#define NAME_MAX_BYTES 255     /* subscription and consumer names */
#define ACK_MAX_OFFSETS 65536u /* bounds the work one Ack can ask of the server */

void socket_frame_put_header(uint8_t *hdr, size_t n)
{
	put_be32(hdr, (uint32_t)n);
}

size_t socket_frame_size(const uint8_t *hdr)
{
	return FRAME_HEADER + (size_t)get_be32(hdr);
}

frame_result socket_frame_next(const uint8_t *data, size_t len, uint32_t max, const uint8_t **msg,
			       size_t *msglen, size_t *consumed, char *err, size_t errlen)
{
	if (len < FRAME_HEADER)
		return FRAME_MORE;
	uint32_t n = get_be32(data);
	/* Checked before waiting for the body. A peer must not make us buffer more than max. */
	if (n > max) {
		util_errf(err, errlen, "frame of %u bytes is over the %u MiB limit", n, max >> 20);
		return FRAME_BAD;
	}
	if (len - FRAME_HEADER < n)
		return FRAME_MORE;
	*msg = data + FRAME_HEADER;
	*msglen = n;
	*consumed = FRAME_HEADER + (size_t)n;
	return FRAME_OK;
}

static bool check_subscribe(const Cdc__V1__Subscribe *s, char *err, size_t errlen)
{
	size_t n = strlen(s->subscription);
	if (n == 0)
		return util_errf(err, errlen, "Subscribe: subscription name is empty");
	if (n > NAME_MAX_BYTES)
		return util_errf(err, errlen, "Subscribe: subscription name of %zu bytes is over %d", n,
				 NAME_MAX_BYTES);
	n = strlen(s->consumer);
	if (n > NAME_MAX_BYTES)
		return util_errf(err, errlen, "Subscribe: consumer name of %zu bytes is over %d", n,
				 NAME_MAX_BYTES);
	/* proto3 enums are open, so protobuf-c keeps any number it reads. */
	switch (s->start) {
	case CDC__V1__START_FROM__START_ACKED:
	case CDC__V1__START_FROM__START_EARLIEST:
	case CDC__V1__START_FROM__START_LATEST:
	case CDC__V1__START_FROM__START_OFFSET:
		break;
	default:
		return util_errf(err, errlen, "Subscribe: unknown start %d", (int)s->start);
	}
	return true;
}

/* The offsets of an Ack, Nack or Progress. */
static bool check_offsets(const char *what, const uint64_t *offsets, size_t n, char *err, size_t errlen)
{
	if (n == 0)
		return util_errf(err, errlen, "%s: no offsets", what);
	if (n > ACK_MAX_OFFSETS)
		return util_errf(err, errlen, "%s: %zu offsets, at most %u in one frame", what, n,
				 ACK_MAX_OFFSETS);
	for (size_t i = 0; i < n; i++)
		if (offsets[i] == 0)
			return util_errf(err, errlen, "%s: offset 0", what);
	return true;
}

static bool check_nack(const Cdc__V1__Nack *n, char *err, size_t errlen)
{
	if (!check_offsets("Nack", n->offsets, n->n_offsets, err, errlen))
		return false;
	if (n->delay_ms > FRAME_NACK_MAX_DELAY_MS)
		return util_errf(err, errlen, "Nack: delay_ms %u is over %u", n->delay_ms,
				 FRAME_NACK_MAX_DELAY_MS);
	size_t len = strlen(n->reason);
	if (len > FRAME_REASON_MAX_BYTES)
		return util_errf(err, errlen, "Nack: reason of %zu bytes is over %d", len,
				 FRAME_REASON_MAX_BYTES);
	/* protobuf-c does not check it, and the reason goes out again in a dead letter's string field,
	 * which other clients' parsers reject if it is not UTF-8 */
	const unsigned char *p = (const unsigned char *)n->reason;
	for (size_t i = 0, seq, skip; i < len; i += seq)
		if (!(seq = p[i] < 0x80 ? 1 : util_utf8_seq(p + i, len - i, &skip)))
			return util_errf(err, errlen, "Nack: reason is not UTF-8 (byte %zu)", i);
	return true;
}

Cdc__V1__ClientFrame *socket_frame_decode_client(const uint8_t *msg, size_t len, char *err, size_t errlen)
{
	Cdc__V1__ClientFrame *f = cdc__v1__client_frame__unpack(NULL, len, msg);
	if (!f) {
		util_errf(err, errlen, "malformed ClientFrame protobuf");
		return NULL;
	}
	bool ok;
	switch (f->kind_case) {
	case CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE:
		ok = check_subscribe(f->subscribe, err, errlen);
		break;
	case CDC__V1__CLIENT_FRAME__KIND_ACK:
		ok = check_offsets("Ack", f->ack->offsets, f->ack->n_offsets, err, errlen);
		break;
	case CDC__V1__CLIENT_FRAME__KIND_NACK:
		ok = check_nack(f->nack, err, errlen);
		break;
	case CDC__V1__CLIENT_FRAME__KIND_PROGRESS:
		ok = check_offsets("Progress", f->progress->offsets, f->progress->n_offsets, err, errlen);
		break;
	default:
		ok = util_errf(err, errlen, "frame has no message kind");
		break;
	}
	if (!ok) {
		socket_frame_client_free(f);
		return NULL;
	}
	return f;
}

void socket_frame_client_free(Cdc__V1__ClientFrame *f)
{
	if (f)
		cdc__v1__client_frame__free_unpacked(f, NULL);
}

static void *arena_pb_alloc(void *a, size_t size)
{
	return arena_alloc(a, size);
}

static void arena_pb_free(void *a, void *p)
{
	(void)a, (void)p; /* freed with the arena */
}

Cdc__V1__ServerFrame *socket_frame_decode_server(const uint8_t *msg, size_t len, arena *a, char *err,
						 size_t errlen)
{
	Cdc__V1__ServerFrame *f = a ? socket_pb_read_delivery(msg, len, a) : NULL;
	if (f)
		return f;
	ProtobufCAllocator in_arena = {arena_pb_alloc, arena_pb_free, a};
	f = cdc__v1__server_frame__unpack(a ? &in_arena : NULL, len, msg);
	if (!f)
		util_errf(err, errlen, "malformed ServerFrame protobuf");
	return f;
}

void socket_frame_server_free(Cdc__V1__ServerFrame *f)
{
	if (f)
		cdc__v1__server_frame__free_unpacked(f, NULL);
}

/* Packs msg straight into out behind its header, with one reservation and no intermediate copy. */
static void put_frame(buf *out, const ProtobufCMessage *msg)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	buf_reserve(out, FRAME_HEADER + n);
	uint8_t *p = (uint8_t *)out->data + out->len;
	socket_frame_put_header(p, n);
	protobuf_c_message_pack(msg, p + FRAME_HEADER);
	out->len += FRAME_HEADER + n;
	out->data[out->len] = '\0';
}

void socket_frame_put_client(buf *out, const Cdc__V1__ClientFrame *f)
{
	put_frame(out, &f->base);
}

void socket_frame_put_server(buf *out, const Cdc__V1__ServerFrame *f)
{
	put_frame(out, &f->base);
}

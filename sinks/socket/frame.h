/* Framing of the subscriber socket (proto/cdc/v1/subscriber.proto), a 4-byte big-endian length and
 * then one protobuf message. The daemon's socket sink and `cdc tail` use it. Every length is checked
 * before it is trusted. */
#ifndef CDC_FRAME_H
#define CDC_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/v1/subscriber.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/base/util.h"

#define FRAME_HEADER 4
#define FRAME_MAX (16u * 1024 * 1024)	       /* the largest message a client may send */
#define FRAME_SERVER_MAX (1024u * 1024 * 1024) /* a Delivery of one event larger than FRAME_MAX */

typedef enum frame_result { FRAME_OK, FRAME_MORE, FRAME_BAD } frame_result;

/* Looks at the first len bytes received. FRAME_OK puts the message in [*msg, *msg + *msglen) and
 * the frame's whole size in *consumed. FRAME_MORE says the frame is not complete yet. FRAME_BAD (with
 * err) says its length is over max, which is FRAME_MAX for what clients send. The server splits
 * batches at FRAME_MAX, but one event can be larger. So clients accept up to FRAME_SERVER_MAX. */
frame_result socket_frame_next(const uint8_t *data, size_t len, uint32_t max, const uint8_t **msg,
			       size_t *msglen, size_t *consumed, char *err, size_t errlen);

#define FRAME_NACK_MAX_DELAY_MS 3600000u /* a Nack's delay, an hour at most */
#define FRAME_REASON_MAX_BYTES 1024	 /* a Nack's reason, kept with the event */

/* The FRAME_HEADER bytes before a message of count bytes (count at most FRAME_SERVER_MAX). */
void socket_frame_put_header(uint8_t *hdr, size_t count);
/* The whole size of the frame whose first FRAME_HEADER bytes are hdr. */
size_t socket_frame_size(const uint8_t *hdr);

/* Decodes and validates a client's message. It must have exactly one kind set. Subscribe needs a
 * subscription name of 1..255 bytes, a consumer name under 256 bytes, and a known start. Ack, Nack and
 * Progress need 1..65536 offsets, none 0. A Nack's delay and reason must be within the limits above.
 * NULL with err naming the problem otherwise. Free with socket_frame_client_free. */
Cdc__V1__ClientFrame *socket_frame_decode_client(const uint8_t *msg, size_t len, char *err, size_t errlen);
void socket_frame_client_free(Cdc__V1__ClientFrame *ClientFrame);
/* Decodes a server's message, for clients (cdc tail, tests). NULL with err if malformed. Free with
 * socket_frame_server_free. Or decode into arena ar and free with arena_reset. That serves a client decoding
 * one Delivery after another, without a malloc and free per message. Then socket_pb_read_delivery
 * (sinks/socket/pbread.h) reads a Delivery of events, and protobuf-c the rest. */
Cdc__V1__ServerFrame *socket_frame_decode_server(const uint8_t *msg, size_t len, arena *ar, char *err,
						 size_t errlen);
void socket_frame_server_free(Cdc__V1__ServerFrame *ServerFrame);

/* Appends one whole frame (header and message). */
void socket_frame_put_client(buf *out, const Cdc__V1__ClientFrame *ClientFrame);
void socket_frame_put_server(buf *out, const Cdc__V1__ServerFrame *ServerFrame);

#endif

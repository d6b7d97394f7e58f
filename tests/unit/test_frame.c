/* test_frame.c: unit tests for the subscriber socket's framing (sinks/socket/frame.c): partial and
 * oversized frames, every validation error of socket_frame_decode_client with its exact message, and
 * round trips of every ClientFrame and ServerFrame kind through frame_put_* and the decoders, and
 * socket_pb_read_delivery (sinks/socket/pbread.c) against protobuf-c on the same Deliveries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/event_json.h"
#include "sinks/pbwire.h"
#include "sinks/socket/frame.h"
#include "sinks/socket/pbread.h"
#include "test.h"

/* Strings and offset arrays of the cases below are built in these and live for the whole run. */
static char name255[256], name256[257];
static uint64_t many_offsets[65537];

/* One whole frame of f, as a client would send it. */
static buf client_bytes(const Cdc__V1__ClientFrame *f)
{
	buf b = {0};
	socket_frame_put_client(&b, f);
	return b;
}

/* Runs socket_frame_next on one complete frame: must be OK and span all of it. Returns the message. */
static const uint8_t *whole(const buf *b, size_t *msglen)
{
	const uint8_t *msg = NULL;
	size_t consumed = 0;
	char err[128] = "";
	frame_result r = socket_frame_next((const uint8_t *)b->data, b->len, FRAME_MAX, &msg, msglen,
					   &consumed, err, sizeof(err));
	CHECK_INT(r, FRAME_OK);
	CHECK_INT(consumed, b->len);
	CHECK_INT(*msglen, b->len - FRAME_HEADER);
	return msg;
}

/* Every prefix of a frame is FRAME_MORE, the whole frame FRAME_OK, and bytes after it are left. */
static void test_partial(void)
{
	Cdc__V1__Ack ack = CDC__V1__ACK__INIT;
	uint64_t offs[] = {1, 2, 300};
	ack.offsets = offs;
	ack.n_offsets = 3;
	Cdc__V1__ClientFrame f = CDC__V1__CLIENT_FRAME__INIT;
	f.kind_case = CDC__V1__CLIENT_FRAME__KIND_ACK;
	f.ack = &ack;
	buf b = client_bytes(&f);
	size_t n = b.len;
	for (size_t len = 0; len < n; len++) {
		const uint8_t *msg = NULL;
		size_t msglen = 0, consumed = 0;
		char err[128] = "";
		CHECK_INT(socket_frame_next((const uint8_t *)b.data, len, FRAME_MAX, &msg, &msglen, &consumed,
					    err, sizeof(err)),
			  FRAME_MORE);
		CHECK_STR(err, "");
	}
	/* Two frames back to back, then half a third: the server's read loop. */
	socket_frame_put_client(&b, &f);
	buf_append(&b, b.data, 5);
	size_t pos = 0;
	int frames = 0;
	for (;;) {
		const uint8_t *msg;
		size_t msglen, consumed;
		char err[128];
		frame_result r = socket_frame_next((const uint8_t *)b.data + pos, b.len - pos, FRAME_MAX,
						   &msg, &msglen, &consumed, err, sizeof(err));
		if (r != FRAME_OK) {
			CHECK_INT(r, FRAME_MORE);
			break;
		}
		CHECK_INT(consumed, n);
		Cdc__V1__ClientFrame *d = socket_frame_decode_client(msg, msglen, err, sizeof(err));
		CHECK(d && d->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK && d->ack->n_offsets == 3 &&
		      d->ack->offsets[2] == 300);
		socket_frame_client_free(d);
		pos += consumed;
		frames++;
	}
	CHECK_INT(frames, 2);
	CHECK_INT(b.len - pos, 5);
	buf_free(&b);
}

/* The length is judged from the header alone, before any of the body has arrived. */
static void test_length(void)
{
	static const struct {
		uint8_t header[4];
		frame_result want;
		const char *err;
	} cases[] = {
	    {{0x00, 0x00, 0x00, 0x00}, FRAME_OK, ""},
	    {{0x00, 0x00, 0x00, 0x01}, FRAME_MORE, ""},
	    {{0x01, 0x00, 0x00, 0x00}, FRAME_MORE, ""}, /* exactly FRAME_MAX */
	    {{0x01, 0x00, 0x00, 0x01}, FRAME_BAD, "frame of 16777217 bytes is over the 16 MiB limit"},
	    {{0x7f, 0xff, 0xff, 0xff}, FRAME_BAD, "frame of 2147483647 bytes is over the 16 MiB limit"},
	    {{0xff, 0xff, 0xff, 0xff}, FRAME_BAD, "frame of 4294967295 bytes is over the 16 MiB limit"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const uint8_t *msg = NULL;
		size_t msglen = 99, consumed = 99;
		char err[128] = "";
		CHECK_INT(socket_frame_next(cases[i].header, 4, FRAME_MAX, &msg, &msglen, &consumed, err,
					    sizeof(err)),
			  cases[i].want);
		CHECK_STR(err, cases[i].err);
		if (cases[i].want == FRAME_OK) {
			CHECK_INT(msglen, 0);
			CHECK_INT(consumed, 4);
		}
	}
}

typedef struct client_case {
	const char *what;
	Cdc__V1__ClientFrame frame;
	Cdc__V1__Subscribe sub;
	Cdc__V1__Ack ack;
	Cdc__V1__Nack nack;
	Cdc__V1__Progress progress;
	const char *err; /* NULL: accepted */
} client_case;

static client_case subscribe_case(const char *what, const char *name, const char *consumer, int start,
				  const char *err)
{
	client_case c = {.what = what, .err = err};
	c.frame = (Cdc__V1__ClientFrame)CDC__V1__CLIENT_FRAME__INIT;
	c.sub = (Cdc__V1__Subscribe)CDC__V1__SUBSCRIBE__INIT;
	c.sub.subscription = (char *)name;
	c.sub.consumer = (char *)consumer;
	c.sub.start = (Cdc__V1__StartFrom)start;
	c.frame.kind_case = CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE;
	return c;
}

/* An Ack, or with progress a Progress (the same offsets field). */
static client_case offsets_case(const char *what, bool progress, uint64_t *offsets, size_t n, const char *err)
{
	client_case c = {.what = what, .err = err};
	c.frame = (Cdc__V1__ClientFrame)CDC__V1__CLIENT_FRAME__INIT;
	c.ack = (Cdc__V1__Ack)CDC__V1__ACK__INIT;
	c.progress = (Cdc__V1__Progress)CDC__V1__PROGRESS__INIT;
	c.ack.offsets = c.progress.offsets = offsets;
	c.ack.n_offsets = c.progress.n_offsets = n;
	c.frame.kind_case = progress ? CDC__V1__CLIENT_FRAME__KIND_PROGRESS : CDC__V1__CLIENT_FRAME__KIND_ACK;
	return c;
}

static client_case ack_case(const char *what, uint64_t *offsets, size_t n, const char *err)
{
	return offsets_case(what, false, offsets, n, err);
}

static client_case nack_case(const char *what, uint64_t *offsets, size_t n, uint32_t delay_ms,
			     const char *reason, const char *err)
{
	client_case c = {.what = what, .err = err};
	c.frame = (Cdc__V1__ClientFrame)CDC__V1__CLIENT_FRAME__INIT;
	c.nack = (Cdc__V1__Nack)CDC__V1__NACK__INIT;
	c.nack.offsets = offsets;
	c.nack.n_offsets = n;
	c.nack.delay_ms = delay_ms;
	c.nack.reason = (char *)reason;
	c.frame.kind_case = CDC__V1__CLIENT_FRAME__KIND_NACK;
	return c;
}

static client_case progress_case(const char *what, uint64_t *offsets, size_t n, const char *err)
{
	return offsets_case(what, true, offsets, n, err);
}

static void test_client_validation(void)
{
	static char reason1024[1025], reason1025[1026];
	memset(reason1024, 'r', 1024);
	memset(reason1025, 'r', 1025);
	static uint64_t ok3[] = {5, 6, 7}, zero_mid[] = {5, 0, 7}, zero[] = {0};
	client_case none = {.what = "no kind", .err = "frame has no message kind"};
	none.frame = (Cdc__V1__ClientFrame)CDC__V1__CLIENT_FRAME__INIT;
	client_case cases[] = {
	    none,
	    subscribe_case("minimal", "jobs", "", 0, NULL),
	    subscribe_case("empty name", "", "w1", 0, "Subscribe: subscription name is empty"),
	    subscribe_case("255-byte name", name255, "w1", 0, NULL),
	    subscribe_case("256-byte name", name256, "w1", 0,
			   "Subscribe: subscription name of 256 bytes is over 255"),
	    subscribe_case("255-byte consumer", "jobs", name255, 0, NULL),
	    subscribe_case("256-byte consumer", "jobs", name256, 0,
			   "Subscribe: consumer name of 256 bytes is over 255"),
	    subscribe_case("start offset", "jobs", "w1", CDC__V1__START_FROM__START_OFFSET, NULL),
	    subscribe_case("start 4", "jobs", "w1", 4, "Subscribe: unknown start 4"),
	    subscribe_case("start -1", "jobs", "w1", -1, "Subscribe: unknown start -1"),
	    ack_case("ack", ok3, 3, NULL),
	    ack_case("empty ack", NULL, 0, "Ack: no offsets"),
	    ack_case("ack of 0", zero, 1, "Ack: offset 0"),
	    ack_case("ack with a 0", zero_mid, 3, "Ack: offset 0"),
	    ack_case("65536 offsets", many_offsets, 65536, NULL),
	    ack_case("65537 offsets", many_offsets, 65537, "Ack: 65537 offsets, at most 65536 in one frame"),
	    nack_case("nack", ok3, 3, 0, "", NULL),
	    nack_case("nack, an hour, 1024-byte reason", ok3, 3, 3600000, reason1024, NULL),
	    nack_case("empty nack", NULL, 0, 0, "", "Nack: no offsets"),
	    nack_case("nack with a 0", zero_mid, 3, 0, "", "Nack: offset 0"),
	    nack_case("nack over an hour", ok3, 3, 3600001, "", "Nack: delay_ms 3600001 is over 3600000"),
	    nack_case("nack, 1025-byte reason", ok3, 1, 0, reason1025,
		      "Nack: reason of 1025 bytes is over 1024"),
	    nack_case("65537 nacks", many_offsets, 65537, 0, "",
		      "Nack: 65537 offsets, at most 65536 in one frame"),
	    progress_case("progress", ok3, 3, NULL),
	    progress_case("empty progress", NULL, 0, "Progress: no offsets"),
	    progress_case("progress of 0", zero, 1, "Progress: offset 0"),
	    progress_case("65537 progress", many_offsets, 65537,
			  "Progress: 65537 offsets, at most 65536 in one frame"),
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		client_case *c = &cases[i];
		/* the pointers are set here: the table's structs have moved since they were built */
		if (c->frame.kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE)
			c->frame.subscribe = &c->sub;
		else if (c->frame.kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK)
			c->frame.ack = &c->ack;
		else if (c->frame.kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK)
			c->frame.nack = &c->nack;
		else if (c->frame.kind_case == CDC__V1__CLIENT_FRAME__KIND_PROGRESS)
			c->frame.progress = &c->progress;
		buf b = client_bytes(&c->frame);
		size_t msglen;
		const uint8_t *msg = whole(&b, &msglen);
		char err[128] = "";
		Cdc__V1__ClientFrame *d = socket_frame_decode_client(msg, msglen, err, sizeof(err));
		if (c->err) {
			if (d)
				fprintf(stderr, "case \"%s\": accepted\n", c->what);
			CHECK(!d);
			CHECK_STR(err, c->err);
		} else {
			if (!d)
				fprintf(stderr, "case \"%s\": %s\n", c->what, err);
			CHECK(d && d->kind_case == c->frame.kind_case);
		}
		socket_frame_client_free(d);
		buf_free(&b);
	}
}

/* Hand-written protobuf bytes: what protobuf-c rejects, and what it accepts that matters. */
static void test_client_bytes(void)
{
	static const struct {
		const char *what;
		const char *bytes;
		size_t len;
		const char *err; /* NULL: accepted */
		int kind;
	} cases[] = {
	    {"empty message", "", 0, "frame has no message kind", 0},
	    {"only an unknown field", "\x78\x01", 2, "frame has no message kind", 0},
	    {"truncated subscribe", "\x0a\x05\x0a\x01", 4, "malformed ClientFrame protobuf", 0},
	    {"subscribe as a varint", "\x08\x01", 2, "malformed ClientFrame protobuf", 0},
	    {"invalid tag", "\xff", 1, "malformed ClientFrame protobuf", 0},
	    {"field number 0", "\x00\x01", 2, "malformed ClientFrame protobuf", 0},
	    {"overlong varint", "\x12\x0b\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 13,
	     "malformed ClientFrame protobuf", 0},
	    {"ack, packed", "\x12\x04\x0a\x02\x01\x02", 6, NULL, CDC__V1__CLIENT_FRAME__KIND_ACK},
	    {"ack, unpacked", "\x12\x04\x08\x01\x08\x02", 6, NULL, CDC__V1__CLIENT_FRAME__KIND_ACK},
	    {"ack packed with a 0", "\x12\x04\x0a\x02\x01\x00", 6, "Ack: offset 0", 0},
	    {"nack, reason not UTF-8", "\x1a\x05\x08\x01\x1a\x01\xff", 7,
	     "Nack: reason is not UTF-8 (byte 0)", 0},
	    {"nack, reason cut short", "\x1a\x05\x08\x01\x1a\x05a", 7, "malformed ClientFrame protobuf", 0},
	    {"progress, packed", "\x22\x04\x0a\x02\x01\x02", 6, NULL, CDC__V1__CLIENT_FRAME__KIND_PROGRESS},
	    {"progress without offsets", "\x22\x00", 2, "Progress: no offsets", 0},
	    {"subscribe with unknown field", "\x0a\x08\x0a\x04jobs\x78\x01", 10, NULL,
	     CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE},
	    /* a oneof keeps the last member on the wire, so "exactly one kind" holds by construction */
	    {"subscribe then ack", "\x0a\x06\x0a\x04jobs\x12\x02\x08\x01", 12, NULL,
	     CDC__V1__CLIENT_FRAME__KIND_ACK},
	    {"ack then empty subscribe", "\x12\x02\x08\x01\x0a\x00", 6,
	     "Subscribe: subscription name is empty", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[128] = "";
		Cdc__V1__ClientFrame *d = socket_frame_decode_client((const uint8_t *)cases[i].bytes,
								     cases[i].len, err, sizeof(err));
		if (cases[i].err) {
			if (d)
				fprintf(stderr, "case \"%s\": accepted\n", cases[i].what);
			CHECK(!d);
			CHECK_STR(err, cases[i].err);
		} else {
			if (!d)
				fprintf(stderr, "case \"%s\": %s\n", cases[i].what, err);
			CHECK(d && (int)d->kind_case == cases[i].kind);
		}
		socket_frame_client_free(d);
	}
	char err[128] = "";
	CHECK(!socket_frame_decode_server((const uint8_t *)"\x0a\x05\x08", 3, NULL, err, sizeof(err)));
	CHECK_STR(err, "malformed ServerFrame protobuf");
}

/* Packs f, decodes it and packs the result again: the same bytes (protobuf-c packs
 * deterministically), so nothing was lost on the way. */
static Cdc__V1__ServerFrame *server_round_trip(const Cdc__V1__ServerFrame *f)
{
	buf b = {0};
	socket_frame_put_server(&b, f);
	size_t msglen;
	const uint8_t *msg = whole(&b, &msglen);
	char err[128] = "";
	Cdc__V1__ServerFrame *d = socket_frame_decode_server(msg, msglen, NULL, err, sizeof(err));
	CHECK_STR(err, "");
	if (d) {
		CHECK_INT(d->kind_case, f->kind_case);
		buf again = {0};
		socket_frame_put_server(&again, d);
		CHECK(again.len == b.len && memcmp(again.data, b.data, b.len) == 0);
		buf_free(&again);
	}
	buf_free(&b);
	return d;
}

static void test_server_round_trips(void)
{
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;

	Cdc__V1__Subscribed sd = CDC__V1__SUBSCRIBED__INIT;
	sd.subscription = "jobs";
	sd.mode = CDC__V1__CONSUMER_MODE__KEY_SHARED;
	sd.first_offset = 3;
	sd.head_offset = 1ull << 40;
	sd.acked_offset = 2;
	sd.next_offset = 3;
	sd.max_unacked = 1000;
	sd.active = true;
	sd.batch_transaction = true;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_SUBSCRIBED;
	f.subscribed = &sd;
	Cdc__V1__ServerFrame *d = server_round_trip(&f);
	CHECK(d && strcmp(d->subscribed->subscription, "jobs") == 0 &&
	      d->subscribed->mode == CDC__V1__CONSUMER_MODE__KEY_SHARED &&
	      d->subscribed->head_offset == 1ull << 40 && d->subscribed->max_unacked == 1000 &&
	      d->subscribed->active && d->subscribed->batch_transaction);
	socket_frame_server_free(d);

	/* A delivery of two events; the JSON a client prints from them carries offset and count. */
	Cdc__V1__Column col = CDC__V1__COLUMN__INIT;
	Cdc__V1__Value val = CDC__V1__VALUE__INIT;
	col.name = "id";
	col.type_oid = 23;
	val.kind_case = CDC__V1__VALUE__KIND_INT_VALUE;
	val.int_value = 7;
	col.value = &val;
	Cdc__V1__Column *cols[] = {&col};
	Cdc__V1__Row row = CDC__V1__ROW__INIT;
	row.columns = cols;
	row.n_columns = 1;
	Cdc__V1__Event ev[2];
	Cdc__V1__Event *evs[2] = {&ev[0], &ev[1]};
	for (int i = 0; i < 2; i++) {
		ev[i] = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
		ev[i].subscription = "jobs";
		ev[i].offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT_OFFSET;
		ev[i].offset = 41 + (uint64_t)i;
		ev[i].op = CDC__V1__OP__OP_INSERT;
		ev[i].schema = "public";
		ev[i].table = "jobs";
		ev[i].lsn = 0x1A2B3C8;
		ev[i].commit_lsn = 0x1A2B400;
		ev[i].xid = 750;
		ev[i].tx_index = (uint32_t)i;
		ev[i].key = &row;
		ev[i].new_row = &row;
		ev[i].delivery_count = 2;
	}
	Cdc__V1__Delivery dl = CDC__V1__DELIVERY__INIT;
	dl.events = evs;
	dl.n_events = 2;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_DELIVERY;
	f.delivery = &dl;
	d = server_round_trip(&f);
	CHECK(d && d->delivery->n_events == 2);
	if (d && d->delivery->n_events == 2) {
		Cdc__V1__Event *e = d->delivery->events[1];
		CHECK_INT(e->offset_present_case, CDC__V1__EVENT__OFFSET_PRESENT_OFFSET);
		CHECK_INT(e->offset, 42);
		CHECK_INT(e->delivery_count, 2);
		CHECK_INT(e->new_row->columns[0]->value->int_value, 7);
	}
	socket_frame_server_free(d);

	Cdc__V1__Heartbeat hb = CDC__V1__HEARTBEAT__INIT;
	hb.head_offset = 99;
	hb.acked_offset = 98;
	hb.active = true;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_HEARTBEAT;
	f.heartbeat = &hb;
	d = server_round_trip(&f);
	CHECK(d && d->heartbeat->head_offset == 99 && d->heartbeat->acked_offset == 98 &&
	      d->heartbeat->active);
	socket_frame_server_free(d);

	Cdc__V1__Error er = CDC__V1__ERROR__INIT;
	er.code = CDC__V1__ERROR__CODE__UNKNOWN_SUBSCRIPTION;
	er.message = "no subscription \"nope\"";
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_ERROR;
	f.error = &er;
	d = server_round_trip(&f);
	CHECK(d && d->error->code == CDC__V1__ERROR__CODE__UNKNOWN_SUBSCRIPTION &&
	      strcmp(d->error->message, "no subscription \"nope\"") == 0);
	socket_frame_server_free(d);

	Cdc__V1__Dropped dr = CDC__V1__DROPPED__INIT;
	dr.from_offset = 10;
	dr.to_offset = 20;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_DROPPED;
	f.dropped = &dr;
	d = server_round_trip(&f);
	CHECK(d && d->dropped->from_offset == 10 && d->dropped->to_offset == 20);
	socket_frame_server_free(d);
}

static void test_client_round_trips(void)
{
	Cdc__V1__Subscribe s = CDC__V1__SUBSCRIBE__INIT;
	s.subscription = "jobs";
	s.consumer = "tail-42";
	s.start = CDC__V1__START_FROM__START_OFFSET;
	s.start_offset = 1ull << 50;
	s.max_unacked = 17;
	s.dead_letters = true;
	s.heartbeat_ms = 250;
	Cdc__V1__ClientFrame f = CDC__V1__CLIENT_FRAME__INIT;
	f.kind_case = CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE;
	f.subscribe = &s;
	buf b = client_bytes(&f);
	size_t msglen;
	const uint8_t *msg = whole(&b, &msglen);
	char err[128] = "";
	Cdc__V1__ClientFrame *d = socket_frame_decode_client(msg, msglen, err, sizeof(err));
	CHECK(d && d->kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE);
	if (d) {
		Cdc__V1__Subscribe *g = d->subscribe;
		CHECK_STR(g->subscription, "jobs");
		CHECK_STR(g->consumer, "tail-42");
		CHECK_INT(g->start, CDC__V1__START_FROM__START_OFFSET);
		CHECK(g->start_offset == 1ull << 50);
		CHECK_INT(g->max_unacked, 17);
		CHECK(g->dead_letters);
		CHECK_INT(g->heartbeat_ms, 250);
	}
	socket_frame_client_free(d);
	buf_free(&b);

	uint64_t offs[] = {UINT64_MAX, 1, 1ull << 33};
	Cdc__V1__Ack a = CDC__V1__ACK__INIT;
	a.offsets = offs;
	a.n_offsets = 3;
	f.kind_case = CDC__V1__CLIENT_FRAME__KIND_ACK;
	f.ack = &a;
	b = client_bytes(&f);
	msg = whole(&b, &msglen);
	d = socket_frame_decode_client(msg, msglen, err, sizeof(err));
	CHECK(d && d->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK && d->ack->n_offsets == 3);
	if (d && d->ack->n_offsets == 3)
		CHECK(d->ack->offsets[0] == UINT64_MAX && d->ack->offsets[1] == 1 &&
		      d->ack->offsets[2] == 1ull << 33);
	socket_frame_client_free(d);
	buf_free(&b);
}

/* Every Value kind, both oneofs of Event, every Row and submessage: three events in one Delivery. */
static Cdc__V1__ServerFrame *sample_delivery(void)
{
	static uint8_t bytes[] = {0, 1, 0xff}, uuid[16] = {0x12, 0x34}, content[] = "hi\0there";
	static Cdc__V1__Timestamp ts = CDC__V1__TIMESTAMP__INIT;
	static Cdc__V1__Other other = CDC__V1__OTHER__INIT;
	static Cdc__V1__Value v[15];
	static Cdc__V1__Column c[15], *cp[15], kc = CDC__V1__COLUMN__INIT, *kcp[1] = {&kc};
	static Cdc__V1__Row row = CDC__V1__ROW__INIT, key = CDC__V1__ROW__INIT, old = CDC__V1__ROW__INIT;
	static Cdc__V1__Truncate tr = CDC__V1__TRUNCATE__INIT;
	static Cdc__V1__LogicalMessage lm = CDC__V1__LOGICAL_MESSAGE__INIT;
	static Cdc__V1__Event e[3], *ep[3];
	static Cdc__V1__Delivery d = CDC__V1__DELIVERY__INIT;
	static Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	static char names[15][8];
	ts.micros = -1234567890123;
	ts.with_zone = true;
	other.type_name = "point";
	other.text = "(1,2)";
	for (int i = 0; i < 15; i++) {
		v[i] = (Cdc__V1__Value)CDC__V1__VALUE__INIT;
		v[i].kind_case = (Cdc__V1__Value__KindCase)(i + 1);
		c[i] = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
		snprintf(names[i], sizeof(names[i]), "c%d", i + 1);
		c[i].name = names[i];
		c[i].type_oid = 16 + (uint32_t)i * 1000;
		c[i].value = &v[i];
		cp[i] = &c[i];
	}
	v[0].null_value = true;
	v[1].unchanged_toast = true;
	v[2].int_value = INT64_MIN;
	v[3].float_value = -0.15625;
	v[4].bool_value = true;
	v[5].numeric_value = "-12.50";
	v[6].text_value = "tab\there \"quoted\" é";
	v[7].bytes_value = (ProtobufCBinaryData){sizeof(bytes), bytes};
	v[8].uuid_value = (ProtobufCBinaryData){sizeof(uuid), uuid};
	v[9].date_value = -719528;
	v[10].time_value = 86399999999;
	v[11].timestamp_value = &ts;
	v[12].json_value = "{\"a\": [1, 2]}";
	v[13].other_value = &other;
	v[14].binary_value = (ProtobufCBinaryData){0, NULL};
	row.n_columns = 15;
	row.columns = cp;
	kc.name = "id";
	kc.type_oid = 20;
	kc.value = &v[2];
	key.n_columns = 1;
	key.columns = kcp;
	old.n_columns = 15;
	old.columns = cp;
	tr.cascade = true;
	lm.prefix = "app";
	lm.content = (ProtobufCBinaryData){sizeof(content), content};
	lm.transactional = true;
	for (int i = 0; i < 3; i++) {
		e[i] = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
		e[i].subscription = "jobs";
		e[i].offset_present_case = CDC__V1__EVENT__OFFSET_PRESENT_OFFSET;
		e[i].offset = (1ull << 40) + (uint64_t)i;
		e[i].schema = "public";
		e[i].table = "t";
		e[i].relation_id = 16384;
		e[i].lsn = 0x1A2B400 + (uint64_t)i;
		e[i].commit_lsn = 0x1A2B500;
		e[i].xid = 4000000000u;
		e[i].tx_index = (uint32_t)i;
		e[i].commit_time = 1795640000000000;
		e[i].delivery_count = 2;
		ep[i] = &e[i];
	}
	e[0].op = CDC__V1__OP__OP_UPDATE;
	e[0].key = &key;
	e[0].new_row = &row;
	e[0].old_row = &old;
	e[0].tag_present_case = CDC__V1__EVENT__TAG_PRESENT_TAG;
	e[0].tag = "billing";
	e[0].origin = "node2";
	e[0].schema_id = 0x9f86d081884c7d65;
	e[1].op = CDC__V1__OP__OP_TRUNCATE;
	e[1].truncate = &tr;
	e[2].op = CDC__V1__OP__OP_MESSAGE;
	e[2].message = &lm;
	d.n_events = 3;
	d.events = ep;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_DELIVERY;
	f.delivery = &d;
	return &f;
}

/* The events of a and b render to the same JSON. */
static void check_same_events(const Cdc__V1__ServerFrame *a, const Cdc__V1__ServerFrame *b)
{
	CHECK(a && b && a->kind_case == CDC__V1__SERVER_FRAME__KIND_DELIVERY && b->kind_case == a->kind_case);
	if (!a || !b || a->kind_case != b->kind_case)
		return;
	CHECK_INT(b->delivery->n_events, a->delivery->n_events);
	for (size_t i = 0; i < a->delivery->n_events && i < b->delivery->n_events; i++) {
		buf ja = {0}, jb = {0};
		sink_json_event(&ja, a->delivery->events[i]);
		sink_json_event(&jb, b->delivery->events[i]);
		buf_append(&ja, "", 1);
		buf_append(&jb, "", 1);
		CHECK_STR(jb.data, ja.data);
		buf_free(&ja);
		buf_free(&jb);
	}
}

/* A ServerFrame whose Delivery holds one event, given as bytes. */
static void wrap_event(buf *out, const buf *event)
{
	buf d = {0};
	sink_pb_put_len_header(&d, 1, event->len);
	buf_append(&d, event->data, event->len);
	buf_reset(out);
	sink_pb_put_len_header(out, 2, d.len);
	buf_append(out, d.data, d.len);
	buf_free(&d);
}

/* socket_pb_read_delivery reads what cdc sends as protobuf-c does, and declines what it leaves to it. */
static void test_delivery_read(void)
{
	arena *a = arena_new(4096);
	char err[128] = "";
	const Cdc__V1__ServerFrame *sample = sample_delivery();
	buf b = {0};
	buf_reserve(&b, cdc__v1__server_frame__get_packed_size(sample));
	b.len = cdc__v1__server_frame__pack(sample, (uint8_t *)b.data);
	Cdc__V1__ServerFrame *ref =
	    socket_frame_decode_server((const uint8_t *)b.data, b.len, NULL, err, sizeof(err));
	Cdc__V1__ServerFrame *fast = socket_pb_read_delivery((const uint8_t *)b.data, b.len, a);
	check_same_events(ref, fast);
	CHECK(fast && fast->delivery->events[0]->new_row->n_columns == 15 &&
	      fast->delivery->events[0]->offset == (1ull << 40) &&
	      fast->delivery->events[2]->message->content.len == 9);
	/* a truncated frame: both refuse */
	CHECK(!socket_pb_read_delivery((const uint8_t *)b.data, b.len - 1, a));
	CHECK(!socket_frame_decode_server((const uint8_t *)b.data, b.len - 1, a, err, sizeof(err)));

	buf ev = {0}, frame = {0};
	const Cdc__V1__Event *e0 = sample->delivery->events[0];
	buf_reserve(&ev, cdc__v1__event__get_packed_size(e0));
	ev.len = cdc__v1__event__pack(e0, (uint8_t *)ev.data);
	size_t packed = ev.len;
	/* fields a newer server may add (30: varint, 31: bytes) are skipped, as protobuf-c keeps them aside
	 */
	buf_append(&ev, "\xf0\x01\x07\xfa\x01\x02hi", 8);
	wrap_event(&frame, &ev);
	Cdc__V1__ServerFrame *r2 =
	    socket_frame_decode_server((const uint8_t *)frame.data, frame.len, NULL, err, sizeof(err));
	check_same_events(r2, socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a));
	socket_frame_server_free(r2);
	/* a field set twice is protobuf-c's (the last one wins): declined, and socket_frame_decode_server
	 * still decodes it */
	ev.len = packed;
	buf_append(&ev, "\x0a\x05other", 7);
	wrap_event(&frame, &ev);
	CHECK(!socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a));
	Cdc__V1__ServerFrame *r3 =
	    socket_frame_decode_server((const uint8_t *)frame.data, frame.len, a, err, sizeof(err));
	CHECK(r3 && r3->delivery->n_events == 1 &&
	      strcmp(r3->delivery->events[0]->subscription, "other") == 0);
	/* declined: two members of Value's oneof (new_row: a column: null and bool), a group (field 23),
	 * field number 0, a varint past 64 bits (op) */
	const char *bad[] = {"\x72\x08\x0a\x06\x1a\x04\x08\x01\x28\x01", "\xbb\x01", "\x02\x00",
			     "\x20\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02"};
	const size_t badlen[] = {10, 2, 2, 11};
	for (size_t i = 0; i < 4; i++) {
		ev.len = 0;
		buf_append(&ev, bad[i], badlen[i]);
		wrap_event(&frame, &ev);
		CHECK(!socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a));
	}
	/* and the same oneof member by itself is read */
	ev.len = 0;
	buf_append(&ev, "\x72\x06\x0a\x04\x1a\x02\x08\x01", 8);
	wrap_event(&frame, &ev);
	Cdc__V1__ServerFrame *one = socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a);
	CHECK(one && one->delivery->events[0]->new_row->columns[0]->value->kind_case ==
			 CDC__V1__VALUE__KIND_NULL_VALUE);
	/* a schema event is protobuf-c's, which reads its columns */
	Cdc__V1__Schema__Column sc = CDC__V1__SCHEMA__COLUMN__INIT, *scp = &sc;
	sc.name = "id";
	sc.type = "integer";
	sc.type_oid = 23;
	sc.typmod = -1;
	sc.key = true;
	Cdc__V1__Schema schema = CDC__V1__SCHEMA__INIT;
	schema.n_columns = 1;
	schema.columns = &scp;
	schema.replica_identity = "default";
	Cdc__V1__Event se = *e0;
	se.op = CDC__V1__OP__OP_SCHEMA;
	se.key = se.new_row = se.old_row = NULL;
	se.table_schema = &schema;
	ev.len = 0;
	buf_reserve(&ev, cdc__v1__event__get_packed_size(&se));
	ev.len = cdc__v1__event__pack(&se, (uint8_t *)ev.data);
	wrap_event(&frame, &ev);
	CHECK(!socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a));
	Cdc__V1__ServerFrame *r4 =
	    socket_frame_decode_server((const uint8_t *)frame.data, frame.len, a, err, sizeof(err));
	CHECK(r4 && r4->delivery->events[0]->table_schema &&
	      r4->delivery->events[0]->table_schema->n_columns == 1 &&
	      r4->delivery->events[0]->schema_id == 0x9f86d081884c7d65);
	/* a Delivery of dead letters is protobuf-c's */
	Cdc__V1__DeadLetter dl = CDC__V1__DEAD_LETTER__INIT, *dlp = &dl;
	Cdc__V1__Delivery dd = *sample->delivery;
	dd.n_dead_letters = 1;
	dd.dead_letters = &dlp;
	Cdc__V1__ServerFrame df = *sample;
	df.delivery = &dd;
	buf_reserve(&frame, cdc__v1__server_frame__get_packed_size(&df));
	frame.len = cdc__v1__server_frame__pack(&df, (uint8_t *)frame.data);
	CHECK(!socket_pb_read_delivery((const uint8_t *)frame.data, frame.len, a));
	socket_frame_server_free(ref);
	buf_free(&ev);
	buf_free(&frame);
	buf_free(&b);
	arena_free(a);
}

int main(void)
{
	memset(name255, 'a', 255);
	memset(name256, 'b', 256);
	for (size_t i = 0; i < sizeof(many_offsets) / sizeof(many_offsets[0]); i++)
		many_offsets[i] = i + 1;
	test_partial();
	test_length();
	test_client_validation();
	test_client_bytes();
	test_server_round_trips();
	test_client_round_trips();
	test_delivery_read();
	return TEST_SUMMARY("test_frame");
}

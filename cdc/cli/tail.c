/* `cdc tail`, a client of the subscriber socket. It subscribes and prints every delivered event as one JSON
 * line on stdout. It acknowledges an event only once the line is written (and synced when stdout is a file).
 * So no event is acknowledged that did not reach its reader. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdc/cli/cli.h"
#include "cdc/cli/tail.h"
#include "sinks/event_json.h"
#include "sinks/socket/frame.h"
#include "sinks/socket/socket_sink.h"

#define TAIL_MAX_UNACKED 1000 /* events in flight to us, enough to stream and few to redeliver */
#define TAIL_NAME_MAX 255     /* what socket_frame_decode_client accepts for names */
#define TAIL_ACK_MAX 65536    /* offsets one Ack frame may carry */
#define TAIL_ARENA_CHUNK 65536
#define TAIL_WAIT_MS 10000 /* --wait's default. cdc makes its sockets before it connects to PostgreSQL. */

static const char usage_tail[] =
    "usage: cdc tail [-c FILE | -s SOCKET] SUBSCRIPTION [OPTIONS]\n"
    "\n"
    "Attaches to a socket subscription of a running cdc and prints its events on stdout, one JSON\n"
    "object per line. Each event is acknowledged once its line is written (and synced, when stdout is\n"
    "a file); an interrupted tail leaves the rest pending for the next consumer.\n"
    "\n"
    "  -c, --config FILE       take the socket from FILE's subscribers.socket\n"
    "  -s, --socket SOCKET     the subscriber socket (default: $CDC_SUBSCRIBER_SOCKET,\n"
    "                          else " SOCKET_DEFAULT_PATH ")\n"
    "      --from POSITION     acked (default: after the acknowledged offset, unacked events first),\n"
    "                          earliest, latest, or an offset (1 or more)\n"
    "      --count N           exit 0 after N events\n"
    "      --timeout SECONDS   exit 0 after SECONDS without an event (heartbeats do not count)\n"
    "      --wait SECONDS      wait up to SECONDS for a subscriber socket that is not there yet (cdc\n"
    "                          is starting; default 10, 0: fail at once)\n"
    "      --no-ack            print without acknowledging: the events stay pending\n"
    "      --consumer NAME     this consumer's name in cdc's logs and status (default tail-PID)\n"
    "      --dead              read the subscription's dead letters instead of its events, each\n"
    "                          with its history: \"dead_letter\": original_offset, deliveries,\n"
    "                          reason, dead_time\n";

typedef struct tail_opts {
	const char *subscription, *consumer;
	Cdc__V1__StartFrom start;
	uint64_t start_offset;
	uint64_t count; /* 0 for no limit */
	int timeout_ms; /* -1 for none */
	int wait_ms;	/* for a subscriber socket that is not there yet */
	bool no_ack, dead;
} tail_opts;

/* One connection's state. */
typedef struct tail {
	const tail_opts *o;
	const char *path;
	int fd;
	buf in;	    /* bytes received, [in_pos, in.len) not yet a whole frame */
	arena *mem; /* the frame being handled, decoded (reset after each) */
	size_t in_pos;
	buf out;	 /* scratch space for an outgoing frame */
	bool cumulative; /* acks name the highest offset (failover, dead letters) */
	bool sync_out;	 /* stdout is a regular file, to fdatasync before acking */
	uint64_t printed;
	int64_t deadline_ms; /* monotonic, -1 for none */
	/* The deliveries read since the last flush (tail_flush). These are their JSON lines, not written yet,
	 * and the offsets to acknowledge once they are. They are at most what cdc keeps in flight to us. */
	buf lines;
	json_commit commit; /* the commit fields, rendered once per transaction */
	uint64_t *offsets;
	size_t noffsets, cap_offsets;
} tail;

/* A decimal of 1 or more, digits only. */
static bool parse_positive(const char *s, uint64_t *v)
{
	if (!*s)
		return false;
	uint64_t n = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
			return false;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	*v = n;
	return n > 0;
}

/* tail's own options and its operand, SUBSCRIPTION. */
static int tail_option(const cli_command *cmd, void *ctx, int ch, const char *arg)
{
	tail_opts *o = ctx;
	switch (ch) {
	case 1:
		if (o->subscription)
			return cli_usage(cmd, "unexpected argument %s", arg);
		o->subscription = arg;
		break;
	case 'F':
		if (strcmp(arg, "acked") == 0) {
			o->start = CDC__V1__START_FROM__START_ACKED;
		} else if (strcmp(arg, "earliest") == 0) {
			o->start = CDC__V1__START_FROM__START_EARLIEST;
		} else if (strcmp(arg, "latest") == 0) {
			o->start = CDC__V1__START_FROM__START_LATEST;
		} else if (parse_positive(arg, &o->start_offset)) {
			o->start = CDC__V1__START_FROM__START_OFFSET;
		} else {
			return cli_usage(
			    cmd, "--from: \"%s\" is not acked, earliest, latest or an offset of 1 or more",
			    arg);
		}
		break;
	case 'N':
		if (!parse_positive(arg, &o->count))
			return cli_usage(cmd, "--count: \"%s\" is not a number of 1 or more", arg);
		break;
	case 'T':
		if (!cli_seconds(arg, false, &o->timeout_ms))
			return cli_usage(cmd, "--timeout: \"%s\" is not a number of seconds above 0", arg);
		break;
	case 'W':
		if (!cli_seconds(arg, true, &o->wait_ms))
			return cli_usage(cmd, "--wait: \"%s\" is not a number of seconds (0 or more)", arg);
		break;
	case 'A':
		o->no_ack = true;
		break;
	case 'C':
		if (!*arg || strlen(arg) > TAIL_NAME_MAX)
			return cli_usage(cmd, "--consumer: a name of 1 to 255 bytes, not \"%s\"", arg);
		o->consumer = arg;
		break;
	case 'D':
		o->dead = true;
		break;
	}
	return CLI_GO_ON;
}

static const struct option tail_longopts[] = {
    CLI_OPT_CONFIG,
    CLI_OPT_SOCKET,
    {"from", required_argument, NULL, 'F'},
    {"count", required_argument, NULL, 'N'},
    {"timeout", required_argument, NULL, 'T'},
    {"wait", required_argument, NULL, 'W'},
    {"no-ack", no_argument, NULL, 'A'},
    {"consumer", required_argument, NULL, 'C'},
    {"dead", no_argument, NULL, 'D'},
    CLI_OPT_HELP,
    {NULL, 0, NULL, 0},
};

static const cli_command tail_command = {.name = "cdc tail",
					 .usage = usage_tail,
					 .shortopts = "c:s:h",
					 .longopts = tail_longopts,
					 .operands = true,
					 .option = tail_option};

/* Returns CLI_GO_ON, else an exit status. */
static int parse_tail_options(int argc, char **argv, cli_args *args, tail_opts *o)
{
	int rc = cli_parse(&tail_command, argc, argv, args, o);
	if (rc != CLI_GO_ON)
		return rc;
	if (!o->subscription)
		return cli_usage(&tail_command, "%s", "missing SUBSCRIPTION");
	if (!*o->subscription || strlen(o->subscription) > TAIL_NAME_MAX)
		return cli_usage(&tail_command, "a subscription name has 1 to 255 bytes, not \"%s\"",
				 o->subscription);
	return CLI_GO_ON;
}

static bool write_all(int fd, const char *p, size_t n, bool socket)
{
	while (n > 0) {
		/* With MSG_NOSIGNAL, a daemon gone away is an error to report, not a SIGPIPE. */
		ssize_t w = socket ? send(fd, p, n, MSG_NOSIGNAL) : write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static bool send_frame(tail *t, const Cdc__V1__ClientFrame *f)
{
	buf_reset(&t->out);
	socket_frame_put_client(&t->out, f);
	if (write_all(t->fd, t->out.data, t->out.len, true))
		return true;
	fprintf(stderr, "cdc tail: sending to %s: %s\n", t->path, strerror(errno));
	return false;
}

static bool send_subscribe(tail *t)
{
	const tail_opts *o = t->o;
	char consumer[32];
	snprintf(consumer, sizeof(consumer), "tail-%ld", (long)getpid());
	uint64_t max_unacked = TAIL_MAX_UNACKED;
	/* No more in flight than we will print. The rest stays free for other consumers. */
	if (o->count && o->count < max_unacked)
		max_unacked = o->count;
	Cdc__V1__Subscribe s = CDC__V1__SUBSCRIBE__INIT;
	s.subscription = (char *)o->subscription;
	s.consumer = (char *)(o->consumer ? o->consumer : consumer);
	s.start = o->start;
	s.start_offset = o->start_offset;
	s.max_unacked = (uint32_t)max_unacked;
	s.dead_letters = o->dead;
	Cdc__V1__ClientFrame f = CDC__V1__CLIENT_FRAME__INIT;
	f.kind_case = CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE;
	f.subscribe = &s;
	return send_frame(t, &f);
}

/* Acknowledges the offsets of t->offsets. That is the highest one when acks are cumulative, else every one.
 * It sends as many frames as the per-frame limit needs. */
static bool send_ack(tail *t)
{
	size_t k = t->noffsets;
	if (t->cumulative && k) {
		for (size_t i = 1; i < k; i++)
			if (t->offsets[i] > t->offsets[0])
				t->offsets[0] = t->offsets[i];
		k = 1;
	}
	bool ok = true;
	for (size_t from = 0; ok && from < k; from += TAIL_ACK_MAX) {
		Cdc__V1__Ack a = CDC__V1__ACK__INIT;
		a.offsets = t->offsets + from;
		a.n_offsets = k - from < TAIL_ACK_MAX ? k - from : TAIL_ACK_MAX;
		Cdc__V1__ClientFrame f = CDC__V1__CLIENT_FRAME__INIT;
		f.kind_case = CDC__V1__CLIENT_FRAME__KIND_ACK;
		f.ack = &a;
		ok = send_frame(t, &f);
	}
	return ok;
}

/* Writes the lines of the deliveries read so far, then acknowledges their events. It acknowledges once per
 * batch of frames that arrived together rather than once per delivery. A consumer that commits its work in
 * batches does the same, since a send and an fdatasync per event cost more than printing it. */
static bool tail_flush(tail *t)
{
	if (!t->lines.len && !t->noffsets)
		return true;
	if (!write_all(STDOUT_FILENO, t->lines.data, t->lines.len, false)) {
		fprintf(stderr, "cdc tail: writing to stdout: %s\n", strerror(errno));
		return false;
	}
	buf_reset(&t->lines);
	/* Acking tells cdc it may forget the events. Into a file, that is only once they are on disk. */
	if (t->sync_out && fdatasync(STDOUT_FILENO) != 0) {
		fprintf(stderr, "cdc tail: syncing stdout: %s\n", strerror(errno));
		return false;
	}
	bool ok = t->o->no_ack || send_ack(t);
	t->noffsets = 0;
	return ok;
}

typedef enum next_result { NEXT_FRAME, NEXT_TIMEOUT, NEXT_FAIL } next_result;

/* Waits for the next whole frame until the deadline. */
static next_result next_frame(tail *t, Cdc__V1__ServerFrame **out)
{
	for (;;) {
		const uint8_t *msg;
		size_t msglen, consumed;
		char err[128];
		frame_result r =
		    socket_frame_next((const uint8_t *)t->in.data + t->in_pos, t->in.len - t->in_pos,
				      FRAME_SERVER_MAX, &msg, &msglen, &consumed, err, sizeof(err));
		if (r == FRAME_BAD) {
			fprintf(stderr, "cdc tail: bad frame from %s: %s\n", t->path, err);
			return NEXT_FAIL;
		}
		if (r == FRAME_OK) {
			*out = socket_frame_decode_server(msg, msglen, t->mem, err, sizeof(err));
			t->in_pos += consumed;
			if (!*out) {
				fprintf(stderr, "cdc tail: bad frame from %s: %s\n", t->path, err);
				return NEXT_FAIL;
			}
			return NEXT_FRAME;
		}
		/* Everything that arrived is handled. Print and acknowledge it before waiting for more. */
		if (!tail_flush(t))
			return NEXT_FAIL;
		/* Keep the partial frame at the front so the buffer never grows past one frame. */
		if (t->in_pos > 0) {
			memmove(t->in.data, t->in.data + t->in_pos, t->in.len - t->in_pos);
			t->in.len -= t->in_pos;
			t->in_pos = 0;
		}
		int wait = -1;
		if (t->deadline_ms >= 0) {
			int64_t left = t->deadline_ms - (int64_t)util_now_ms();
			if (left <= 0)
				return NEXT_TIMEOUT;
			wait = (int)left;
		}
		struct pollfd p = {.fd = t->fd, .events = POLLIN};
		int n = poll(&p, 1, wait);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "cdc tail: poll: %s\n", strerror(errno));
			return NEXT_FAIL;
		}
		if (n == 0)
			continue; /* the deadline check above decides */
		buf_reserve(&t->in, 65536);
		ssize_t got = read(t->fd, t->in.data + t->in.len, t->in.cap - t->in.len - 1);
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			fprintf(stderr, "cdc tail: connection to %s lost: %s\n", t->path, strerror(errno));
			return NEXT_FAIL;
		}
		if (got == 0) {
			fprintf(stderr, "cdc tail: cdc closed the connection on %s\n", t->path);
			return NEXT_FAIL;
		}
		t->in.len += (size_t)got;
	}
}

/* Reading dead letters gives the history of the event at index i (one DeadLetter per event, in order). */
static const Cdc__V1__DeadLetter *dead_letter_of(const Cdc__V1__Delivery *d, size_t i, uint64_t offset)
{
	if (i < d->n_dead_letters && d->dead_letters[i]->offset == offset)
		return d->dead_letters[i];
	for (size_t k = 0; k < d->n_dead_letters; k++)
		if (d->dead_letters[k]->offset == offset)
			return d->dead_letters[k];
	return NULL;
}

/* Takes up to the events still wanted. Their lines and offsets wait for the next tail_flush. */
static bool handle_delivery(tail *t, const Cdc__V1__Delivery *d)
{
	size_t n = d->n_events;
	if (t->o->count && n > t->o->count - t->printed)
		n = (size_t)(t->o->count - t->printed);
	if (t->noffsets + n > t->cap_offsets) {
		t->cap_offsets = t->noffsets + n > 2 * t->cap_offsets ? t->noffsets + n : 2 * t->cap_offsets;
		t->offsets = util_xrealloc(t->offsets, t->cap_offsets * sizeof(*t->offsets));
	}
	for (size_t i = 0; i < n; i++) {
		const Cdc__V1__Event *e = d->events[i];
		/* without an offset the event could never be acknowledged */
		if (e->offset_present_case != CDC__V1__EVENT__OFFSET_PRESENT_OFFSET) {
			fprintf(stderr, "cdc tail: %s delivered an event without an offset\n", t->path);
			return false;
		}
		sink_json_event_head(&t->lines, NULL, e);
		const Cdc__V1__DeadLetter *dl = t->o->dead ? dead_letter_of(d, i, e->offset) : NULL;
		if (dl)
			sink_json_dead_letter(&t->lines, dl);
		sink_json_event_tail(&t->lines, &t->commit, e->commit_lsn, e->tx_index, e->commit_time);
		t->offsets[t->noffsets++] = e->offset;
	}
	t->printed += n;
	return true;
}

static void reset_deadline(tail *t)
{
	t->deadline_ms = t->o->timeout_ms >= 0 ? (int64_t)util_now_ms() + t->o->timeout_ms : -1;
}

static int tail_run(tail *t)
{
	const tail_opts *o = t->o;
	if (!send_subscribe(t))
		return 1;
	reset_deadline(t);
	bool subscribed = false;
	for (;;) {
		Cdc__V1__ServerFrame *f = NULL;
		next_result r = next_frame(t, &f);
		if (r == NEXT_TIMEOUT) {
			if (subscribed)
				return 0;
			fprintf(stderr, "cdc tail: no answer from %s within the timeout\n", t->path);
			return 1;
		}
		if (r == NEXT_FAIL)
			return 1;
		int rc = -1;
		switch (f->kind_case) {
		case CDC__V1__SERVER_FRAME__KIND_SUBSCRIBED: {
			const Cdc__V1__Subscribed *s = f->subscribed;
			subscribed = true;
			t->cumulative = o->dead || s->mode == CDC__V1__CONSUMER_MODE__FAILOVER;
			if (s->mode == CDC__V1__CONSUMER_MODE__FAILOVER && !s->active && !o->dead)
				fprintf(stderr,
					"cdc tail: another consumer of %s is active; waiting until it goes "
					"away\n",
					o->subscription);
			break;
		}
		case CDC__V1__SERVER_FRAME__KIND_DELIVERY:
			if (!subscribed) {
				fprintf(stderr, "cdc tail: %s sent a delivery before answering Subscribe\n",
					t->path);
				rc = 1;
			} else if (!handle_delivery(t, f->delivery)) {
				rc = 1;
			} else if (o->count && t->printed >= o->count) {
				rc = tail_flush(t) ? 0 : 1;
			} else if (f->delivery->n_events > 0) {
				reset_deadline(t);
			}
			break;
		case CDC__V1__SERVER_FRAME__KIND_DROPPED:
			fprintf(stderr, "cdc tail: events %llu..%llu were dropped by retention\n",
				(unsigned long long)f->dropped->from_offset,
				(unsigned long long)f->dropped->to_offset);
			break;
		case CDC__V1__SERVER_FRAME__KIND_ERROR: {
			const char *m = f->error->message;
			if (!*m) {
				const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
				    &cdc__v1__error__code__descriptor, f->error->code);
				m = v ? v->name : "unknown error";
			}
			/* what arrived before it is printed (and acknowledged, if cdc still listens) */
			(void)tail_flush(t);
			fprintf(stderr, "cdc tail: %s\n", m);
			rc = 1;
			break;
		}
		default:
			break; /* heartbeats, and kinds newer than this client */
		}
		arena_reset(t->mem);
		if (rc >= 0)
			return rc;
	}
}

int cli_tail_main(int argc, char **argv)
{
	tail_opts o = {.start = CDC__V1__START_FROM__START_ACKED, .timeout_ms = -1, .wait_ms = TAIL_WAIT_MS};
	cli_args args = {0};
	int rc = parse_tail_options(argc, argv, &args, &o);
	if (rc != CLI_GO_ON)
		return rc;
	char *path = cli_socket_path(&args, CLI_SUBSCRIBER_SOCKET);
	if (!path)
		return 2;
	tail t = {.o = &o, .path = path, .fd = -1, .mem = arena_new(TAIL_ARENA_CHUNK)};
	struct stat st;
	t.sync_out = fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode);
	char err[512];
	t.fd = cli_connect_wait("cdc tail", path, CLI_SUBSCRIBER_SOCKET, 0, o.wait_ms, err, sizeof(err));
	if (t.fd < 0)
		fprintf(stderr, "cdc tail: %s\n", err);
	rc = t.fd < 0 ? 1 : tail_run(&t);
	if (t.fd >= 0)
		close(t.fd);
	buf_free(&t.in);
	buf_free(&t.out);
	buf_free(&t.lines);
	sink_json_commit_free(&t.commit);
	arena_free(t.mem);
	free(t.offsets);
	free(path);
	return rc;
}

/* socket_sink.c: see socket_sink.h. Per subscription two queues, its events and its dead letters,
 * each a spool plus the consumers attached to it and a window of per-offset delivery state for the
 * offsets from the first unacknowledged one to the first never sent. */
#include "sinks/socket_sink.h"

#include <errno.h>
#include <event2/buffer.h>
#include <ftw.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sinks/frame.h"
#include "decoder/log.h"
#include "decoder/net.h"
#include "sinks/pbwire.h"
#include "sinks/spool.h"

#define MAX_CONSUMERS 1024
#define TICK_MS 100
#define TRIM_EVERY_MS 1000
#define HEARTBEAT_DEFAULT_MS 5000
#define KEY_BUCKETS 256
#define RENDER_HEADER 4 /* [u32 key hash] before the packed event */
/* A connection must send its Subscribe this soon after it is accepted (a config key to come:
 * subscribers.first_frame_timeout), so connections that never subscribe cannot fill the table. */
#define FIRST_FRAME_TIMEOUT_MS 10000
/* A connection closed with an Error stays this long (at most, between reads or writes) to let the
 * client finish sending and read the Error, instead of meeting a reset or a broken pipe. */
#define CLOSE_LINGER_MS 2000
/* Closing connections beyond MAX_CONSUMERS; past this a new connection is closed without a word. */
#define MAX_CLOSING 256
/* Output buffered for one connection: above the high mark nothing more is dispatched to it (nor a
 * heartbeat) until it drains to the low mark. */
#define OUT_HIGH_WATER (1u << 20)
#define OUT_LOW_WATER (256u << 10)
/* shared and key_shared: a consumer is handed at most what it can start on before its deadline,
 * its window: the acks it made per ack_timeout / 2, measured over RATE_PERIOD_MS (at most
 * max_unacked, at least WINDOW_MIN); a new consumer starts at WINDOW_START. */
#define WINDOW_START 16
#define WINDOW_MIN 1
#define RATE_PERIOD_MS 500

/* ServerFrame, Delivery and DeadLetter field numbers (subscriber.proto), and the Event's offset fields. */
enum {
	SF_SUBSCRIBED = 1,
	SF_DELIVERY = 2,
	DELIVERY_EVENTS = 1,
	DELIVERY_DEAD_LETTERS = 2,
	DEAD_LETTER_OFFSET = 1,
	EVENT_OFFSET = 2,
	EVENT_DELIVERY_COUNT = 16
};
/* A dead letter's record in the dead letters' spool: a 0 byte (never the first byte of a packed
 * Event, whose field numbers start at 1: records from before have the Event alone), the length of
 * the packed DeadLetter (u32, little-endian), the DeadLetter without its offset (known only once
 * it is read), then the Event. */
#define DEAD_HEADER 5
/* Refused offsets one Acked lists at most; more are answered but not listed. */
#define REPLY_MAX_REFUSED 65536

typedef struct consumer consumer;
typedef struct subscription subscription;
typedef struct socket_sink socket_sink;

enum slot_state { SLOT_UNSENT, SLOT_SENT, SLOT_ACKED };

/* Why a delivery was given back, for the dead letter it may become. */
enum back_why { BACK_NONE, BACK_TIMEOUT, BACK_GONE, BACK_NACK };

typedef struct slot {
	uint64_t deadline_ms; /* SENT: redelivered after this; UNSENT: not delivered before this */
	consumer *c;          /* SENT: to whom; UNSENT: who had it last (NULL if nobody, or gone) */
	char *reason;	      /* BACK_NACK: the Nack's reason (owned) */
	uint32_t deliveries;
	uint8_t state;
	uint8_t why; /* enum back_why: why it was last given back */
} slot;

/* Delivery state of the offsets [base, next): a ring that grows by doubling. */
typedef struct window {
	slot *v;
	size_t cap, head; /* v[head] is base's slot */
	uint64_t base;
} window;

typedef struct queue {
	subscription *sub;
	bool dead_letters;
	spool *sp;
	consumer *consumers; /* in attach order; failover: the first one is active */
	size_t nconsumers;
	window w;
	uint64_t next;       /* the lowest offset not sent yet (offsets from here on are implicitly unsent) */
	uint64_t returned;   /* slots in the window back to UNSENT, waiting for redelivery */
	uint64_t min_deadline;
	uint64_t drop_from, drop_to; /* a discarded range the next consumer is told of (drop_to 0: none) */
	consumer *bucket[KEY_BUCKETS];
	size_t rr;
} queue;

struct subscription {
	socket_sink *s;
	char *name;
	const socket_sub_settings *set; /* NULL: no longer bound */
	queue q, dead;
	bool in_txn, dirty, have_last;
	uint64_t last_lsn;
	uint32_t last_txi;
	uint64_t matched, delivered, redelivered;
};

struct consumer {
	socket_sink *s;
	queue *q; /* NULL until subscribed */
	consumer *next;
	struct bufferevent *bev;
	char name[256];
	uid_t uid;
	pid_t pid;
	uint32_t max_unacked, in_flight;
	uint32_t window; /* shared modes: in flight at most (see WINDOW_START) */
	uint32_t acks;	 /* of its deliveries since rate_since_ms */
	uint64_t rate_since_ms;
	bool window_full; /* in_flight reached the window since rate_since_ms */
	uint64_t heartbeat_ms, last_send_ms;
	uint64_t accepted_ms;
	bool closing;
	bool stalled; /* its output reached OUT_HIGH_WATER: dispatch waits for the drain */
	/* The Acked owed for the Ack, Nack and Progress frames read since the last one. */
	struct reply {
		uint32_t answered;
		size_t n, cap;
		uint64_t *offsets;
		uint8_t *reasons; /* Cdc__V1__Refused__Reason */
	} reply;
};

struct socket_sink {
	sink base;
	char *state_dir;
	struct event_base *evb;
	struct evconnlistener *listener;
	struct event *ev_tick;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	void (*wake)(void *);
	void *wake_ctx;
	subscription **subs; /* every subscription ever bound, by name */
	size_t nsubs;
	socket_sub_settings *settings; /* copies of the last bind's, by subscription index */
	subscription **by_index;       /* subscription index -> subscription (NULL: not a socket one) */
	size_t nindex;
	consumer *pending; /* connected, not subscribed yet (and closing ones), oldest first */
	size_t nconnections, nclosing;
	uint64_t ended_seq, durable_seq, last_trim_ms;
	buf scratch, events;
	/* commit times (µs) of the events appended since the last sync, for the latency histogram: one
	 * run per transaction, since its events share their commit time */
	struct commit_run {
		int64_t commit_time;
		uint64_t events;
	} *runs;
	size_t nruns, runs_cap;
	hist latency;
	char err[512];
};

static uint32_t get_u32(const void *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Window ------------------------------------------------------------------------------- */

static slot *window_at(window *w, uint64_t off)
{
	return &w->v[(w->head + (off - w->base)) & (w->cap - 1)];
}

/* Makes room for the slots up to off (exclusive end: off + 1), new ones unsent. */
static void window_extend(window *w, uint64_t next, uint64_t end)
{
	size_t need = (size_t)(end - w->base);
	if (need > w->cap) {
		size_t cap = w->cap ? w->cap : 64;
		while (cap < need)
			cap *= 2;
		slot *v = xcalloc(cap, sizeof(slot));
		for (uint64_t o = w->base; o < next; o++)
			v[o - w->base] = *window_at(w, o);
		free(w->v);
		w->v = v;
		w->cap = cap;
		w->head = 0;
	}
	for (uint64_t o = next; o < end; o++)
		*window_at(w, o) = (slot){0};
}

static void window_reset(window *w, uint64_t base)
{
	w->base = base;
	w->head = 0;
}

/* Consumers ---------------------------------------------------------------------------- */

static socket_consumers mode(const queue *q)
{
	return q->dead_letters || !q->sub->set ? SOCKET_FAILOVER : q->sub->set->consumers;
}

/* A connection is on exactly one list: the pending ones (not subscribed) or one queue's consumers.
 * Both share c->next, so a connection leaves a list with its link cleared: a stale link would make
 * the connection after it on the old list a member of the new one. */
static void unlink_consumer(consumer **list, consumer *c)
{
	for (consumer **p = list; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->next = NULL;
}

static void append_consumer(consumer **list, consumer *c)
{
	while (*list)
		list = &(*list)->next;
	*list = c;
	c->next = NULL;
}

/* failover: only the first consumer receives; the others wait their turn. */
static bool is_active(const consumer *c)
{
	return mode(c->q) != SOCKET_FAILOVER || c->q->consumers == c;
}

static void send_frame(consumer *c, const Cdc__V1__ServerFrame *f)
{
	buf b = {0};
	frame_put_server(&b, f);
	bufferevent_write(c->bev, b.data, b.len);
	buf_free(&b);
	c->last_send_ms = now_ms();
}

static void consumer_free(consumer *c);
static void detach(consumer *c);

/* A closing connection: what the client still sends is read and dropped, so that it is not met
 * with a broken pipe before it reads the Error, and so that closing with unread input does not
 * reset the connection; within CLOSE_LINGER_MS. */
static void on_closing_read(struct bufferevent *bev, void *arg)
{
	consumer *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
	if (now_ms() - c->last_send_ms >= CLOSE_LINGER_MS)
		consumer_free(c);
}

/* The Error is written: the client reads it, then the end of the stream. */
static void on_closing_written(struct bufferevent *bev, void *arg)
{
	(void)arg;
	shutdown(bufferevent_getfd(bev), SHUT_WR);
}

/* The client closed too, or the linger ran out (no progress reading or writing). */
static void on_closing_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev, (void)what;
	consumer_free(arg);
}

static void on_consumer_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		consumer_free(arg);
}

/* Answers with an Error frame and closes once the client has had it; this connection only. It
 * leaves its queue at once, so what it holds goes to the others now rather than when (if ever) its
 * peer reads the Error; and a peer that hangs up first still frees it (on_closing_event): a closing
 * connection that stayed forever, as the failover's active consumer, stalled the subscription. */
static void consumer_error(consumer *c, Cdc__V1__Error__Code code, const char *msg)
{
	if (c->closing)
		return;
	log_warn("closing a subscriber connection", "consumer=%s pid=%ld uid=%ld subscription=%s error=\"%s\"", c->name,
		 (long)c->pid, (long)c->uid, c->q ? c->q->sub->name : "-", msg);
	Cdc__V1__Error e = CDC__V1__ERROR__INIT;
	e.code = code;
	e.message = (char *)msg;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_ERROR;
	f.error = &e;
	send_frame(c, &f);
	c->closing = true;
	c->s->nclosing++;
	if (c->q) {
		detach(c);
		append_consumer(&c->s->pending, c);
	}
	struct timeval linger = {.tv_sec = CLOSE_LINGER_MS / 1000, .tv_usec = CLOSE_LINGER_MS % 1000 * 1000};
	bufferevent_setcb(c->bev, on_closing_read, on_closing_written, on_closing_event, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	bufferevent_set_timeouts(c->bev, &linger, &linger);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

static void heartbeat(consumer *c)
{
	Cdc__V1__Heartbeat h = CDC__V1__HEARTBEAT__INIT;
	h.head_offset = spool_head(c->q->sp);
	h.acked_offset = spool_acked(c->q->sp);
	h.active = is_active(c);
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_HEARTBEAT;
	f.heartbeat = &h;
	send_frame(c, &f);
}

/* Dispatch ------------------------------------------------------------------------------ */

/* Whether c's output is over the high-water mark; then it waits (stalled) until it drains. */
static bool out_full(consumer *c)
{
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) < OUT_HIGH_WATER)
		return false;
	c->stalled = true;
	return true;
}

/* How many deliveries c may hold now: its window in the shared modes, else max_unacked. */
static uint32_t limit(const consumer *c)
{
	return mode(c->q) == SOCKET_FAILOVER || c->window > c->max_unacked ? c->max_unacked : c->window;
}

static bool has_room(consumer *c)
{
	if (c->closing || out_full(c))
		return false;
	if (c->in_flight < limit(c))
		return true;
	c->window_full = true;
	return false;
}

/* The consumer with the most room (the first of equals after the round-robin position). */
static consumer *most_room(queue *q, const consumer *avoid)
{
	consumer *best = NULL, *c = q->consumers;
	uint32_t room = 0;
	for (size_t k = q->rr % q->nconsumers; k--;)
		c = c->next;
	for (size_t i = 0; i < q->nconsumers; i++, c = c->next ? c->next : q->consumers)
		if (c != avoid && has_room(c) && (!best || limit(c) - c->in_flight > room)) {
			best = c;
			room = limit(c) - c->in_flight;
		}
	return best;
}

static consumer *least_loaded(queue *q)
{
	return most_room(q, NULL);
}

/* Every RATE_PERIOD_MS: a shared consumer's window becomes what it acknowledged per
 * ack_timeout / 2, so that what it is handed can be started on before its deadline, however slow
 * or fast its work. It grows with the consumer's pace; it shrinks only if the consumer was held
 * by its window (a consumer that had little to do says nothing of its pace). */
static void update_window(consumer *c, uint64_t now)
{
	uint64_t elapsed = now - c->rate_since_ms;
	if (elapsed < RATE_PERIOD_MS)
		return;
	uint64_t target = (uint64_t)c->acks * (c->q->sub->set->ack_timeout_ms / 2) / elapsed;
	if (target < WINDOW_MIN)
		target = WINDOW_MIN;
	if (target > c->max_unacked)
		target = c->max_unacked;
	if (target > c->window || c->window_full)
		c->window = (uint32_t)target;
	c->acks = 0;
	c->window_full = false;
	c->rate_since_ms = now;
}

/* Whom a group of events starting with a record of key hash h goes to; NULL: nobody can take it
 * now. shared: round robin, but a redelivery goes to another consumer than the last one if any
 * has room. */
static consumer *choose(queue *q, uint32_t key_hash, consumer *last)
{
	switch (mode(q)) {
	case SOCKET_FAILOVER:
		return q->consumers;
	case SOCKET_SHARED: {
		/* the most room first; the round robin decides between equals */
		consumer *c = most_room(q, last);
		if (!c && last && has_room(last))
			c = last;
		q->rr = (q->rr + 1) % q->nconsumers;
		return c;
	}
	case SOCKET_KEY_SHARED: {
		/* A key's bucket keeps its consumer while it is connected: per-key order holds. */
		consumer **b = &q->bucket[key_hash % KEY_BUCKETS];
		if (!*b)
			*b = least_loaded(q);
		return *b;
	}
	}
	return NULL;
}

/* key_shared: whether c may take an event of this key hash (its bucket is c's, or nobody's and
 * now c's). */
static bool claim_key(queue *q, uint32_t key_hash, consumer *c)
{
	consumer **b = &q->bucket[key_hash % KEY_BUCKETS];
	if (!*b)
		*b = c;
	return *b == c;
}

/* Where the next delivery comes from: returned offsets first, then those never sent. */
static uint64_t resume_at(const queue *q)
{
	return q->returned ? q->w.base : q->next;
}

/* Whether off can be delivered now: never sent, or given back and not held back by a Nack's delay. */
static bool slot_ready(queue *q, uint64_t off, uint64_t now)
{
	if (off >= q->next)
		return true;
	const slot *sl = window_at(&q->w, off);
	return sl->state == SLOT_UNSENT && sl->deadline_ms <= now;
}

/* The next time check_timeouts has something to do. */
static void note_deadline(queue *q, uint64_t t)
{
	if (!q->min_deadline || t < q->min_deadline)
		q->min_deadline = t;
}

/* A dead letter's record (see dead_record): the packed DeadLetter and the Event. A record from
 * before dead letters had a history is the Event alone (no DeadLetter). false if the lengths do
 * not add up (then the record is taken as an Event). */
static bool dead_split(const spool_record *r, const uint8_t **dead, size_t *deadlen, const uint8_t **ev,
		       size_t *evlen)
{
	if (r->len == 0 || r->data[0] != 0)
		return true;
	if (r->len < DEAD_HEADER)
		return false;
	size_t n = (size_t)r->data[1] | (size_t)r->data[2] << 8 | (size_t)r->data[3] << 16 |
		   (size_t)r->data[4] << 24;
	if (n > r->len - DEAD_HEADER)
		return false;
	*dead = r->data + DEAD_HEADER;
	*deadlen = n;
	*ev = *dead + n;
	*evlen = r->len - DEAD_HEADER - n;
	return true;
}

/* Takes the offsets up to off into the window, unsent, with the delivery counts the spool kept
 * (from before a restart). */
static void extend_to(queue *q, uint64_t off)
{
	window_extend(&q->w, q->next, off + 1);
	for (uint64_t o = q->next; o <= off; o++)
		window_at(&q->w, o)->deliveries = spool_deliveries(q->sp, o);
	q->next = off + 1;
}

/* Marks off sent to c; appends its Event to s->events (the Delivery's repeated field). */
static void put_event(socket_sink *s, queue *q, consumer *c, const spool_record *r, uint64_t now)
{
	if (r->offset >= q->next)
		extend_to(q, r->offset);
	else
		q->returned--;
	slot *sl = window_at(&q->w, r->offset);
	sl->state = SLOT_SENT;
	sl->c = c;
	sl->deliveries++;
	spool_note_delivery(q->sp, r->offset, sl->deliveries);
	sl->deadline_ms = now + q->sub->set->ack_timeout_ms;
	note_deadline(q, sl->deadline_ms);
	c->in_flight++;
	if (!q->dead_letters) {
		q->sub->delivered++;
		q->sub->redelivered += sl->deliveries > 1;
	}
	const uint8_t *ev = r->data, *dead = NULL;
	size_t evlen = r->len, deadlen = 0;
	if (q->dead_letters && !dead_split(r, &dead, &deadlen, &ev, &evlen))
		log_warn("a dead letter's history is unreadable; it is delivered without",
			 "subscription=%s offset=%llu", q->sub->name, (unsigned long long)r->offset);
	size_t len = evlen + pb_varint_field_size(EVENT_OFFSET, r->offset) +
		     pb_varint_field_size(EVENT_DELIVERY_COUNT, sl->deliveries);
	pb_put_len_header(&s->events, DELIVERY_EVENTS, len);
	buf_append(&s->events, ev, evlen);
	pb_put_varint_field(&s->events, EVENT_OFFSET, r->offset);
	pb_put_varint_field(&s->events, EVENT_DELIVERY_COUNT, sl->deliveries);
	if (q->dead_letters) {
		/* one DeadLetter per Event, in the same order; its offset goes last (any order is valid) */
		pb_put_len_header(&s->events, DELIVERY_DEAD_LETTERS,
				  deadlen + pb_varint_field_size(DEAD_LETTER_OFFSET, r->offset));
		buf_append(&s->events, dead, deadlen);
		pb_put_varint_field(&s->events, DEAD_LETTER_OFFSET, r->offset);
	}
}

/* Writes the Delivery gathered in s->events to c (after any discarded range it must hear of). */
static void push_delivery(socket_sink *s, queue *q, consumer *c)
{
	if (q->drop_to) {
		Cdc__V1__Dropped dr = CDC__V1__DROPPED__INIT;
		dr.from_offset = q->drop_from;
		dr.to_offset = q->drop_to;
		Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
		f.kind_case = CDC__V1__SERVER_FRAME__KIND_DROPPED;
		f.dropped = &dr;
		send_frame(c, &f);
		q->drop_from = q->drop_to = 0;
	}
	size_t len = pb_len_header_size(SF_DELIVERY, s->events.len) + s->events.len;
	uint8_t hdr[FRAME_HEADER] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
	buf_reset(&s->scratch);
	buf_append(&s->scratch, hdr, sizeof(hdr));
	pb_put_len_header(&s->scratch, SF_DELIVERY, s->events.len);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evbuffer_add(out, s->scratch.data, s->scratch.len);
	evbuffer_add(out, s->events.data, s->events.len);
	buf_reset(&s->events);
	c->last_send_ms = now_ms();
}

static void fatal_read(socket_sink *s, queue *q)
{
	log_error("cannot read a spooled event; its consumers wait until cdc restarts", "subscription=%s error=\"%s\"",
		  q->sub->name, s->err);
}

/* Sends one delivery starting at off if someone can take it. Returns the offset after the group,
 * or 0 when nothing more can be sent now (stop scanning). */
static uint64_t send_group(socket_sink *s, queue *q, uint64_t off, uint64_t head, uint64_t now)
{
	consumer *last = off < q->next ? window_at(&q->w, off)->c : NULL;
	bool by_key = mode(q) == SOCKET_KEY_SHARED;
	/* Who takes it, before reading it: only key_shared needs the event (its key) to choose. */
	consumer *c = by_key ? NULL : choose(q, 0, last);
	if (!by_key && (!c || !has_room(c)))
		return 0;
	spool_record r;
	if (!spool_read(q->sp, off, &r, s->err, sizeof(s->err))) {
		fatal_read(s, q);
		return 0;
	}
	if (by_key && (!(c = choose(q, r.key_hash, last)) || !has_room(c))) {
		/* This key's consumer is full; other keys may go on. */
		if (!least_loaded(q))
			return 0;
		if (off >= q->next) {
			extend_to(q, off);
			q->returned++;
		}
		return off + 1;
	}
	bool batch = !q->dead_letters && q->sub->set->batch_transaction;
	uint64_t commit_lsn = r.commit_lsn;
	put_event(s, q, c, &r, now);
	for (off++; batch && off <= head && slot_ready(q, off, now); off++) {
		if (!spool_read(q->sp, off, &r, s->err, sizeof(s->err))) {
			fatal_read(s, q);
			break;
		}
		/* A transaction's batch is split where a frame would pass FRAME_MAX, and in key_shared
		 * where the next event's key is another consumer's: sending it along to c put one key in
		 * flight to two consumers (c received a row's later change while the other still held
		 * an earlier one). The rest of the transaction is dispatched key by key. */
		if (r.commit_lsn != commit_lsn || s->events.len + r.len + 64 > FRAME_MAX ||
		    (by_key && !claim_key(q, r.key_hash, c)))
			break;
		put_event(s, q, c, &r, now);
	}
	push_delivery(s, q, c);
	return off;
}

/* Pushes what the consumers have room for: returned offsets first (in order), then new ones. */
static void dispatch(socket_sink *s, queue *q)
{
	if (!q->sub->set || !q->consumers || (mode(q) == SOCKET_FAILOVER && q->consumers->closing))
		return; /* removed from the configuration: nothing more is sent */
	uint64_t head = spool_head(q->sp), now = now_ms();
	uint64_t off = resume_at(q);
	while (off && off <= head) {
		if (!slot_ready(q, off, now)) {
			off++;
			continue;
		}
		off = send_group(s, q, off, head, now);
	}
	/* the counts go to disk before the deliveries go out (written when the loop runs again) */
	if (!spool_save_deliveries(q->sp, s->err, sizeof(s->err)))
		log_error("cannot record delivery counts; after a restart they may start again from 1",
			  "subscription=%s error=\"%s\"", q->sub->name, s->err);
}

/* Acknowledgement and redelivery ------------------------------------------------------- */

static void wake(socket_sink *s)
{
	if (s->wake)
		s->wake(s->wake_ctx);
}

/* Moves the acked cursor over the acknowledged slots at the window's start. */
static void advance_base(socket_sink *s, queue *q)
{
	window *w = &q->w;
	while (w->base < q->next && window_at(w, w->base)->state == SLOT_ACKED) {
		w->base++;
		w->head = (w->head + 1) & (w->cap - 1);
	}
	if (w->base == q->next)
		window_reset(w, q->next);
	if (w->base - 1 > spool_acked(q->sp) && !spool_set_acked(q->sp, w->base - 1, s->err, sizeof(s->err)))
		log_error("cannot record acknowledged offsets; they may be delivered again after a restart",
			  "subscription=%s error=\"%s\"", q->sub->name, s->err);
}

static void slot_forget_reason(slot *sl)
{
	free(sl->reason);
	sl->reason = NULL;
}

static void ack_slot(queue *q, slot *sl)
{
	if (sl->state == SLOT_SENT)
		sl->c->in_flight--;
	else if (sl->state == SLOT_UNSENT)
		q->returned--;
	sl->state = SLOT_ACKED;
	sl->c = NULL;
	slot_forget_reason(sl);
}

static void move_to_dead(socket_sink *s, queue *q, uint64_t off, slot *sl);

/* A delivery that was not acknowledged in time, whose consumer went away or that it gave back
 * (why): sent again from not_before on, or moved to the dead letters once it was delivered
 * max_deliveries times. */
static void return_slot(socket_sink *s, queue *q, uint64_t off, slot *sl, enum back_why why,
			uint64_t not_before)
{
	sl->c->in_flight--;
	sl->state = SLOT_UNSENT;
	sl->why = (uint8_t)why;
	sl->deadline_ms = not_before;
	if (not_before)
		note_deadline(q, not_before);
	q->returned++;
	uint32_t max = q->sub->set ? q->sub->set->max_deliveries : 0; /* no settings: being removed */
	if (!q->dead_letters && max && sl->deliveries >= max)
		move_to_dead(s, q, off, sl);
}

static const char *back_reason(const slot *sl)
{
	switch ((enum back_why)sl->why) {
	case BACK_TIMEOUT:
		return "ack timeout";
	case BACK_GONE:
		return "consumer went away";
	case BACK_NACK:
		return sl->reason;
	case BACK_NONE:
		break;
	}
	return "";
}

/* The dead letters' record of event r (off in the subscription) given back as sl says. */
static void dead_record(buf *out, const spool_record *r, uint64_t off, const slot *sl)
{
	Cdc__V1__DeadLetter d = CDC__V1__DEAD_LETTER__INIT;
	d.original_offset = off;
	d.deliveries = sl->deliveries;
	d.reason = (char *)back_reason(sl);
	d.dead_time = wall_ms() * 1000;
	uint32_t n = (uint32_t)cdc__v1__dead_letter__get_packed_size(&d);
	uint8_t hdr[DEAD_HEADER] = {0, (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
	buf_reset(out);
	buf_append(out, hdr, sizeof(hdr));
	buf_reserve(out, n);
	out->len += cdc__v1__dead_letter__pack(&d, (uint8_t *)out->data + out->len);
	buf_append(out, r->data, r->len);
}

static void move_to_dead(socket_sink *s, queue *q, uint64_t off, slot *sl)
{
	subscription *sub = q->sub;
	spool_record r;
	uint64_t dead_off;
	buf rec = {0};
	bool ok = spool_read(q->sp, off, &r, s->err, sizeof(s->err));
	if (ok)
		dead_record(&rec, &r, off, sl);
	if (!ok ||
	    !spool_append(sub->dead.sp, r.commit_lsn, r.tx_index, r.key_hash, rec.data, rec.len, wall_ms(),
			  &dead_off, s->err, sizeof(s->err)) ||
	    !spool_commit(sub->dead.sp, s->err, sizeof(s->err)) ||
	    !spool_sync(sub->dead.sp, s->err, sizeof(s->err))) {
		log_error("cannot move an event to the dead letters; it stays in the subscription",
			  "subscription=%s offset=%llu error=\"%s\"", sub->name, (unsigned long long)off, s->err);
		buf_free(&rec);
		return;
	}
	buf_free(&rec);
	log_warn("moved an event to the dead letters",
		 "subscription=%s offset=%llu deliveries=%u dead_offset=%llu reason=\"%s\"", sub->name,
		 (unsigned long long)off, sl->deliveries, (unsigned long long)dead_off, back_reason(sl));
	ack_slot(q, sl);
	dispatch(s, &sub->dead);
}

/* Returns every delivery c holds (it went away, or lost the failover). */
static void return_all(socket_sink *s, queue *q, consumer *c, enum back_why why)
{
	for (uint64_t o = q->w.base; o < q->next && c->in_flight; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state == SLOT_SENT && sl->c == c) {
			slot_forget_reason(sl);
			return_slot(s, q, o, sl, why, 0);
		}
	}
	advance_base(s, q);
}

/* Acks, Nacks and Progress ---------------------------------------------------------------- */

/* Whether off is in flight to c (0), else why an Ack, Nack or Progress of it has no effect. An
 * Ack (late_ok) also counts for a delivery given back after c's ack timeout that nobody else has
 * had since: the work is done, sending it again would only repeat it. */
static Cdc__V1__Refused__Reason refusal(queue *q, const consumer *c, uint64_t off, bool late_ok)
{
	if (off < q->w.base)
		return CDC__V1__REFUSED__REASON__ALREADY_ACKED;
	if (off >= q->next)
		return CDC__V1__REFUSED__REASON__NOT_DELIVERED;
	const slot *sl = window_at(&q->w, off);
	switch (sl->state) {
	case SLOT_ACKED:
		return CDC__V1__REFUSED__REASON__ALREADY_ACKED;
	case SLOT_SENT:
		return sl->c == c ? 0 : CDC__V1__REFUSED__REASON__OTHER_CONSUMER;
	default:
		return late_ok && sl->c == c ? 0 : CDC__V1__REFUSED__REASON__NOT_DELIVERED;
	}
}

static void refuse(consumer *c, uint64_t off, Cdc__V1__Refused__Reason why)
{
	struct reply *r = &c->reply;
	if (r->n == REPLY_MAX_REFUSED)
		return;
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 16;
		r->offsets = xrealloc(r->offsets, r->cap * sizeof(*r->offsets));
		r->reasons = xrealloc(r->reasons, r->cap * sizeof(*r->reasons));
	}
	r->offsets[r->n] = off;
	r->reasons[r->n++] = (uint8_t)why;
}

/* Sends the Acked owed, unless c's output is over the high-water mark (then once it drains). */
static void flush_reply(consumer *c)
{
	struct reply *r = &c->reply;
	if (!r->answered || !c->q || c->closing || out_full(c))
		return;
	Cdc__V1__Refused *v = xcalloc(r->n ? r->n : 1, sizeof(*v));
	Cdc__V1__Refused **pv = xcalloc(r->n ? r->n : 1, sizeof(*pv));
	for (size_t i = 0; i < r->n; i++) {
		v[i] = (Cdc__V1__Refused)CDC__V1__REFUSED__INIT;
		v[i].offset = r->offsets[i];
		v[i].reason = (Cdc__V1__Refused__Reason)r->reasons[i];
		pv[i] = &v[i];
	}
	Cdc__V1__Acked a = CDC__V1__ACKED__INIT;
	a.acked_offset = spool_acked(c->q->sp);
	a.answered = r->answered;
	a.n_refused = r->n;
	a.refused = pv;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_ACKED;
	f.acked = &a;
	send_frame(c, &f);
	free(v);
	free(pv);
	r->answered = 0;
	r->n = 0;
}

/* failover (and dead letters): cumulative, from the active consumer only; shared modes: each offset. */
static void handle_ack(socket_sink *s, consumer *c, const Cdc__V1__Ack *a)
{
	queue *q = c->q;
	bool cumulative = mode(q) == SOCKET_FAILOVER;
	for (size_t i = 0; i < a->n_offsets; i++) {
		uint64_t off = a->offsets[i];
		Cdc__V1__Refused__Reason why = cumulative && !is_active(c)
						   ? CDC__V1__REFUSED__REASON__NOT_ACTIVE
						   : refusal(q, c, off, true);
		if (why) {
			refuse(c, off, why);
			continue;
		}
		for (uint64_t o = cumulative ? q->w.base : off; o <= off; o++) {
			slot *sl = window_at(&q->w, o);
			c->acks += sl->c == c;
			if (sl->state != SLOT_ACKED)
				ack_slot(q, sl);
		}
	}
	advance_base(s, q);
	dispatch(s, q);
	wake(s);
}

static void handle_nack(socket_sink *s, consumer *c, const Cdc__V1__Nack *n)
{
	queue *q = c->q;
	uint64_t now = now_ms();
	for (size_t i = 0; i < n->n_offsets; i++) {
		uint64_t off = n->offsets[i];
		Cdc__V1__Refused__Reason why = refusal(q, c, off, false);
		if (why) {
			refuse(c, off, why);
			continue;
		}
		slot *sl = window_at(&q->w, off);
		slot_forget_reason(sl);
		sl->reason = xstrdup(n->reason[0] ? n->reason : "nack");
		return_slot(s, q, off, sl, BACK_NACK, n->delay_ms ? now + n->delay_ms : 0);
	}
	advance_base(s, q);
	dispatch(s, q);
	wake(s);
}

static void handle_progress(consumer *c, const Cdc__V1__Progress *p)
{
	queue *q = c->q;
	uint64_t deadline = now_ms() + q->sub->set->ack_timeout_ms;
	for (size_t i = 0; i < p->n_offsets; i++) {
		Cdc__V1__Refused__Reason why = refusal(q, c, p->offsets[i], false);
		if (why)
			refuse(c, p->offsets[i], why);
		else
			window_at(&q->w, p->offsets[i])->deadline_ms = deadline;
	}
}

/* failover: the active consumer held a delivery past its deadline; the next one takes over. */
static void hand_over(socket_sink *s, queue *q, uint64_t now)
{
	consumer *active = q->consumers;
	if (!active->next) {
		note_deadline(q, now + q->sub->set->ack_timeout_ms); /* nobody to hand over to */
		return;
	}
	log_warn("the active consumer did not acknowledge in time; the next one takes over",
		 "subscription=%s consumer=%s next=%s", q->sub->name, active->name, active->next->name);
	unlink_consumer(&q->consumers, active);
	append_consumer(&q->consumers, active);
	return_all(s, q, active, BACK_TIMEOUT);
}

/* ack_timeout: shared modes redeliver the late event; failover hands over to a waiting consumer.
 * Deliveries held back by a Nack's delay are dispatched once it has passed. */
static void check_timeouts(socket_sink *s, queue *q, uint64_t now)
{
	if (!q->min_deadline || q->min_deadline > now)
		return;
	q->min_deadline = 0;
	bool failover = mode(q) == SOCKET_FAILOVER, late = false;
	for (uint64_t o = q->w.base; o < q->next; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state == SLOT_ACKED)
			continue;
		if (sl->state == SLOT_SENT && sl->deadline_ms <= now && failover) {
			late = true;
		} else if (sl->state == SLOT_SENT && sl->deadline_ms <= now) {
			slot_forget_reason(sl);
			return_slot(s, q, o, sl, BACK_TIMEOUT, 0);
		} else if (sl->deadline_ms > now) {
			note_deadline(q, sl->deadline_ms);
		}
	}
	if (late && q->consumers)
		hand_over(s, q, now);
	advance_base(s, q);
	dispatch(s, q);
}

/* Retention: drop_oldest discards; both modes delete segments nobody needs any more. */
static void trim(socket_sink *s, queue *q)
{
	uint64_t from, to;
	if (!spool_trim(q->sp, wall_ms(), &from, &to, s->err, sizeof(s->err))) {
		log_error("cannot apply retention", "subscription=%s error=\"%s\"", q->sub->name, s->err);
		return;
	}
	if (!to)
		return;
	log_warn("retention discarded events nobody acknowledged", "subscription=%s from_offset=%llu to_offset=%llu",
		 q->sub->name, (unsigned long long)from, (unsigned long long)to);
	q->drop_from = q->drop_to ? q->drop_from : from;
	q->drop_to = to;
	/* Deliveries in flight of discarded events are forgotten: acks for them change nothing. */
	for (uint64_t o = q->w.base; o < q->next && o <= to; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state != SLOT_ACKED)
			ack_slot(q, sl);
	}
	if (q->next <= to) {
		q->next = to + 1;
		window_reset(&q->w, q->next);
	} else {
		advance_base(s, q);
	}
}

/* Connections --------------------------------------------------------------------------- */

static void detach(consumer *c)
{
	queue *q = c->q;
	if (!q) {
		unlink_consumer(&c->s->pending, c);
		return;
	}
	bool was_active = q->consumers == c;
	unlink_consumer(&q->consumers, c);
	q->nconsumers--;
	q->rr = 0;
	for (size_t i = 0; i < KEY_BUCKETS; i++)
		if (q->bucket[i] == c)
			q->bucket[i] = NULL;
	return_all(c->s, q, c, BACK_GONE);
	for (uint64_t o = q->w.base; o < q->next; o++) /* it is gone: nobody had those last */
		if (window_at(&q->w, o)->c == c)
			window_at(&q->w, o)->c = NULL;
	c->q = NULL;
	if (was_active && q->consumers && mode(q) == SOCKET_FAILOVER)
		log_info("failover: another consumer is active now", "subscription=%s consumer=%s from_offset=%llu",
			 q->sub->name, q->consumers->name, (unsigned long long)q->w.base);
	dispatch(c->s, q);
}

/* The connection and what the consumer owns; nothing else is told. */
static void consumer_release(consumer *c)
{
	bufferevent_free(c->bev);
	free(c->reply.offsets);
	free(c->reply.reasons);
	free(c);
}

static void consumer_free(consumer *c)
{
	log_info("subscriber disconnected", "consumer=%s pid=%ld subscription=%s in_flight=%u", c->name, (long)c->pid,
		 c->q ? c->q->sub->name : "-", c->in_flight);
	socket_sink *s = c->s;
	detach(c);
	s->nconnections--;
	s->nclosing -= c->closing;
	consumer_release(c);
}

/* Positions a queue for a consumer that attaches while no other is: the start it asked for. */
static uint64_t position(socket_sink *s, queue *q, const Cdc__V1__Subscribe *sub)
{
	uint64_t first = spool_first(q->sp), head = spool_head(q->sp), acked = spool_acked(q->sp);
	uint64_t start;
	switch (sub->start) {
	case CDC__V1__START_FROM__START_EARLIEST:
		start = first;
		break;
	case CDC__V1__START_FROM__START_LATEST:
		start = head + 1;
		break;
	case CDC__V1__START_FROM__START_OFFSET:
		start = sub->start_offset < first ? first : sub->start_offset > head + 1 ? head + 1 : sub->start_offset;
		break;
	default:
		if (q->w.base > acked)
			return resume_at(q);
		start = acked + 1; /* after a replay that did not get that far */
		break;
	}
	/* Skipping forward acknowledges what is skipped; going back replays acknowledged events. */
	if (start - 1 > acked && !spool_set_acked(q->sp, start - 1, s->err, sizeof(s->err)))
		log_error("cannot record acknowledged offsets", "subscription=%s error=\"%s\"", q->sub->name, s->err);
	for (uint64_t o = q->w.base; o < q->next; o++)
		slot_forget_reason(window_at(&q->w, o));
	q->next = start;
	q->returned = 0;
	window_reset(&q->w, start);
	return start;
}

static subscription *find(socket_sink *s, const char *name)
{
	for (size_t i = 0; i < s->nsubs; i++)
		if (s->subs[i]->set && strcmp(s->subs[i]->name, name) == 0)
			return s->subs[i];
	return NULL;
}

static void handle_subscribe(socket_sink *s, consumer *c, const Cdc__V1__Subscribe *m)
{
	subscription *sub = find(s, m->subscription);
	if (!sub) {
		bool other = false;
		for (size_t i = 0; i < s->nindex && !other; i++)
			other = strcmp(s->settings[i].name, m->subscription) == 0;
		char msg[512];
		snprintf(msg, sizeof(msg), other ? "subscription %s does not deliver to the socket (its sink is another)" :
						   "no subscription named %s",
			 m->subscription);
		consumer_error(c,
			       other ? CDC__V1__ERROR__CODE__NOT_A_SOCKET_SUBSCRIPTION :
				       CDC__V1__ERROR__CODE__UNKNOWN_SUBSCRIPTION,
			       msg);
		return;
	}
	queue *q = m->dead_letters ? &sub->dead : &sub->q;
	if (m->consumer && m->consumer[0])
		snprintf(c->name, sizeof(c->name), "%s", m->consumer);
	uint32_t max = m->dead_letters ? 1000 : sub->set->max_unacked;
	c->max_unacked = m->max_unacked && m->max_unacked < max ? m->max_unacked : max;
	c->heartbeat_ms = m->heartbeat_ms ? m->heartbeat_ms : HEARTBEAT_DEFAULT_MS;
	c->window = WINDOW_START;
	c->rate_since_ms = now_ms();
	unlink_consumer(&s->pending, c);
	uint64_t next = q->consumers ? resume_at(q) : position(s, q, m);
	c->q = q;
	append_consumer(&q->consumers, c);
	q->nconsumers++;

	Cdc__V1__Subscribed a = CDC__V1__SUBSCRIBED__INIT;
	a.subscription = sub->name;
	a.mode = (Cdc__V1__ConsumerMode)mode(q);
	a.first_offset = spool_first(q->sp);
	a.head_offset = spool_head(q->sp);
	a.acked_offset = spool_acked(q->sp);
	a.next_offset = next;
	a.max_unacked = c->max_unacked;
	a.active = is_active(c);
	a.batch_transaction = !q->dead_letters && sub->set->batch_transaction;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_SUBSCRIBED;
	f.subscribed = &a;
	send_frame(c, &f);
	log_info("subscriber attached", "consumer=%s pid=%ld uid=%ld subscription=%s dead_letters=%s next_offset=%llu active=%s",
		 c->name, (long)c->pid, (long)c->uid, sub->name, m->dead_letters ? "true" : "false",
		 (unsigned long long)next, a.active ? "true" : "false");
	dispatch(s, q);
}

static bool handle_frame(socket_sink *s, consumer *c, const uint8_t *msg, size_t len)
{
	char err[256];
	Cdc__V1__ClientFrame *f = frame_decode_client(msg, len, err, sizeof(err));
	if (!f) {
		consumer_error(c, CDC__V1__ERROR__CODE__BAD_FRAME, err);
		return false;
	}
	bool subscribe = f->kind_case == CDC__V1__CLIENT_FRAME__KIND_SUBSCRIBE;
	if (subscribe == (c->q != NULL)) {
		char why[128];
		snprintf(why, sizeof(why),
			 subscribe ? "already subscribed: one Subscribe per connection"
				   : "%s before Subscribe: the first frame must be a Subscribe",
			 f->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK    ? "Ack"
			 : f->kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK ? "Nack"
									    : "Progress");
		consumer_error(c, CDC__V1__ERROR__CODE__BAD_FRAME, why);
	} else if (subscribe) {
		handle_subscribe(s, c, f->subscribe);
	} else {
		c->reply.answered++;
		if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK)
			handle_ack(s, c, f->ack);
		else if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_NACK)
			handle_nack(s, c, f->nack);
		else
			handle_progress(c, f->progress);
	}
	frame_client_free(f);
	return !c->closing;
}

static void on_consumer_read(struct bufferevent *bev, void *arg)
{
	consumer *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char err[256];
	while (!c->closing && evbuffer_get_length(in) >= FRAME_HEADER) {
		const uint8_t *msg;
		size_t msglen, consumed, avail = evbuffer_get_length(in);
		/* The length is checked before the frame is waited for: an oversized one is refused now. */
		frame_result r = frame_next(evbuffer_pullup(in, FRAME_HEADER), FRAME_HEADER, FRAME_MAX, &msg, &msglen, &consumed, err,
					    sizeof(err));
		if (r == FRAME_MORE) {
			const uint8_t *h = evbuffer_pullup(in, FRAME_HEADER);
			size_t whole = FRAME_HEADER + ((size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3]);
			if (avail < whole)
				return;
			r = frame_next(evbuffer_pullup(in, (ssize_t)whole), whole, FRAME_MAX, &msg, &msglen, &consumed, err, sizeof(err));
		}
		if (r != FRAME_OK) {
			consumer_error(c, CDC__V1__ERROR__CODE__BAD_FRAME, err);
			return;
		}
		bool go_on = handle_frame(c->s, c, msg, msglen);
		evbuffer_drain(in, consumed);
		if (!go_on)
			return;
	}
	flush_reply(c);
}

/* The output drained to OUT_LOW_WATER: a stalled consumer is dispatched to again. Its input is
 * read all along: a client that waits to send its acks before it reads must not deadlock. */
static void on_consumer_written(struct bufferevent *bev, void *arg)
{
	(void)bev;
	consumer *c = arg;
	if (!c->stalled)
		return;
	c->stalled = false;
	flush_reply(c);
	if (c->q && !c->closing)
		dispatch(c->s, c->q);
}

/* Closing connections fill their share of the table: one of them loses the rest of its linger
 * (its Error is written, or as much of it as it would read), a new connection counts more. */
static void shed_closing(socket_sink *s)
{
	consumer *c = s->pending; /* a closing connection has left its queue */
	while (c && !c->closing)
		c = c->next;
	if (!c)
		return;
	/* What is still buffered (the Error, usually) gets the one write the socket takes now; the
	 * bufferevent keeps its output to itself (frozen: no evbuffer_write), but it can be peeked. */
	struct evbuffer_iovec v[4]; /* the same layout as struct iovec where there is one */
	struct msghdr m = {.msg_iov = (struct iovec *)v};
	m.msg_iovlen = (size_t)evbuffer_peek(bufferevent_get_output(c->bev), -1, NULL, v, 4);
	if (m.msg_iovlen > 4)
		m.msg_iovlen = 4;
	if (m.msg_iovlen && sendmsg(bufferevent_getfd(c->bev), &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("could not write a closing connection's last bytes", "error=\"%s\"",
			  strerror(errno));
	consumer_free(c);
}

/* The table is full: the oldest connection that has not subscribed yet gives way to c; if every
 * other one has subscribed, c is refused. Either is told so in an Error it can read. */
static void make_room(socket_sink *s, consumer *c)
{
	consumer *old = s->pending;
	while (old && (old->closing || old == c))
		old = old->next;
	if (old)
		consumer_error(old, CDC__V1__ERROR__CODE__CONNECTION_LIMIT,
			       "too many subscriber connections: closed to make room (no Subscribe yet)");
	else
		consumer_error(c, CDC__V1__ERROR__CODE__CONNECTION_LIMIT, "too many subscriber connections");
}

/* Connections that did not subscribe within FIRST_FRAME_TIMEOUT_MS are closed. */
static void check_first_frames(socket_sink *s, uint64_t now)
{
	char msg[64];
	snprintf(msg, sizeof(msg), "no Subscribe within %d s", FIRST_FRAME_TIMEOUT_MS / 1000);
	for (consumer *c = s->pending; c; c = c->next)
		if (!c->closing && now - c->accepted_ms >= FIRST_FRAME_TIMEOUT_MS)
			consumer_error(c, CDC__V1__ERROR__CODE__SUBSCRIBE_TIMEOUT, msg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr, int len, void *arg)
{
	(void)l, (void)addr, (void)len;
	socket_sink *s = arg;
	struct ucred cred = {0};
	socklen_t cl = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
		cred.pid = 0;
	if (s->nconnections >= MAX_CONSUMERS + MAX_CLOSING)
		shed_closing(s);
	consumer *c = xcalloc(1, sizeof(*c));
	c->s = s;
	c->uid = cred.uid;
	c->pid = cred.pid;
	c->accepted_ms = c->last_send_ms = now_ms();
	snprintf(c->name, sizeof(c->name), "pid-%ld", (long)cred.pid);
	c->bev = bufferevent_socket_new(s->evb, fd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(c->bev, on_consumer_read, on_consumer_written, on_consumer_event, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, OUT_LOW_WATER, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	append_consumer(&s->pending, c);
	s->nconnections++;
	log_info("subscriber connected", "pid=%ld uid=%ld gid=%ld", (long)cred.pid, (long)cred.uid, (long)cred.gid);
	if (s->nconnections - s->nclosing > MAX_CONSUMERS)
		make_room(s, c);
}

/* Timer: ack timeouts, heartbeats, retention. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what;
	socket_sink *s = arg;
	uint64_t now = now_ms();
	bool trim_now = now - s->last_trim_ms >= TRIM_EVERY_MS;
	if (trim_now)
		s->last_trim_ms = now;
	check_first_frames(s, now);
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (!sub->set)
			continue;
		queue *qs[2] = {&sub->q, &sub->dead};
		for (int k = 0; k < 2; k++) {
			check_timeouts(s, qs[k], now);
			for (consumer *c = qs[k]->consumers; c; c = c->next) {
				if (!c->closing && now - c->last_send_ms >= c->heartbeat_ms && !out_full(c))
					heartbeat(c);
				update_window(c, now);
			}
			if (trim_now)
				trim(s, qs[k]);
		}
	}
	if (trim_now)
		wake(s);
}

/* Subscriptions ------------------------------------------------------------------------- */

static bool open_queue(socket_sink *s, subscription *sub, queue *q, bool dead, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool/%s/%s", s->state_dir, sub->name, dead ? "dead" : "events");
	spool_limits none = {0};
	spool_recovery rec = {0};
	q->sub = sub;
	q->dead_letters = dead;
	if (!(q->sp = spool_open(dir, dead ? &none : &sub->set->retention, &rec, err, errlen)))
		return false;
	if (rec.torn_bytes || rec.uncommitted)
		log_warn("spool recovered", "subscription=%s dir=%s torn_bytes_cut=%llu uncommitted_events=%llu", sub->name,
			 dir, (unsigned long long)rec.torn_bytes, (unsigned long long)rec.uncommitted);
	q->next = spool_acked(q->sp) + 1;
	window_reset(&q->w, q->next);
	return true;
}

static bool make_dir(const char *path, char *err, size_t errlen)
{
	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return errf(err, errlen, "cannot create %s: %s", path, strerror(errno));
	return true;
}

static subscription *open_subscription(socket_sink *s, const socket_sub_settings *c, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool", s->state_dir);
	if (!make_dir(dir, err, errlen))
		return NULL;
	snprintf(dir, sizeof(dir), "%s/spool/%s", s->state_dir, c->name);
	if (!make_dir(dir, err, errlen))
		return NULL;
	subscription *sub = xcalloc(1, sizeof(*sub));
	sub->s = s;
	sub->name = xstrdup(c->name);
	sub->set = c;
	if (!open_queue(s, sub, &sub->q, false, err, errlen) || !open_queue(s, sub, &sub->dead, true, err, errlen)) {
		spool_close(sub->q.sp);
		free(sub->name);
		free(sub);
		return NULL;
	}
	sub->have_last = spool_last_id(sub->q.sp, &sub->last_lsn, &sub->last_txi);
	return sub;
}

static void close_consumers(queue *q, const char *why)
{
	while (q->consumers)
		consumer_error(q->consumers, CDC__V1__ERROR__CODE__SUBSCRIPTION_REMOVED, why); /* detaches it */
}

static void free_settings(socket_sink *s)
{
	for (size_t i = 0; i < s->nindex; i++)
		free((char *)s->settings[i].name);
	free(s->settings);
	free(s->by_index);
}

bool socket_sink_bind(sink *base, const socket_sub_settings *subs, size_t nsubs, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++)
		s->subs[i]->set = NULL;
	free_settings(s);
	s->nindex = nsubs;
	s->settings = xcalloc(nsubs ? nsubs : 1, sizeof(*s->settings));
	s->by_index = xcalloc(nsubs ? nsubs : 1, sizeof(subscription *));
	for (size_t i = 0; i < nsubs; i++) {
		s->settings[i] = subs[i];
		s->settings[i].name = xstrdup(subs[i].name);
	}
	for (size_t i = 0; i < nsubs; i++) {
		const socket_sub_settings *set = &s->settings[i];
		if (!set->serve)
			continue;
		subscription *sub = NULL;
		for (size_t k = 0; k < s->nsubs && !sub; k++)
			if (strcmp(s->subs[k]->name, set->name) == 0)
				sub = s->subs[k];
		if (!sub) {
			if (!(sub = open_subscription(s, set, err, errlen)))
				return false;
			s->subs = xrealloc(s->subs, (s->nsubs + 1) * sizeof(subscription *));
			s->subs[s->nsubs++] = sub;
		}
		sub->set = set;
		spool_set_limits(sub->q.sp, &set->retention);
		s->by_index[i] = sub;
	}
	for (size_t i = 0; i < s->nsubs; i++)
		if (!s->subs[i]->set) {
			close_consumers(&s->subs[i]->q, "the subscription was removed from the configuration");
			close_consumers(&s->subs[i]->dead, "the subscription was removed from the configuration");
		}
	return true;
}

/* The sink interface --------------------------------------------------------------------- */

/* FNV-1a over the packed key: the same row key always lands in the same bucket. */
static uint32_t key_hash(const Cdc__V1__Event *e)
{
	if (!e->key)
		return 0;
	size_t n = cdc__v1__row__get_packed_size(e->key);
	uint8_t stack[512], *p = n <= sizeof(stack) ? stack : xmalloc(n);
	cdc__v1__row__pack(e->key, p);
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	if (p != stack)
		free(p);
	return h;
}

static void socket_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	socket_sink *s = (socket_sink *)base;
	uint32_t h = sub < s->nindex && s->settings[sub].consumers == SOCKET_KEY_SHARED ? key_hash(e) : 0;
	buf_reserve(out, RENDER_HEADER);
	memcpy(out->data + out->len, &h, 4);
	out->len += RENDER_HEADER;
	size_t n = cdc__v1__event__get_packed_size(e);
	buf_reserve(out, n);
	out->len += cdc__v1__event__pack(e, (uint8_t *)out->data + out->len);
}

/* One more event committed at commit_time (µs), for the latency histogram at the next sync. */
static void count_commit(socket_sink *s, int64_t commit_time)
{
	if (s->nruns && s->runs[s->nruns - 1].commit_time == commit_time) {
		s->runs[s->nruns - 1].events++;
		return;
	}
	if (s->nruns == s->runs_cap) {
		s->runs_cap = s->runs_cap ? 2 * s->runs_cap : 64;
		s->runs = xrealloc(s->runs, s->runs_cap * sizeof(*s->runs));
	}
	s->runs[s->nruns++] = (struct commit_run){commit_time, 1};
}

static bool socket_deliver(sink *base, uint32_t idx, const char *rendered, size_t len, const sink_commit *c,
			   uint64_t seq, char *err, size_t errlen)
{
	(void)seq;
	socket_sink *s = (socket_sink *)base;
	if (len < RENDER_HEADER || idx >= s->nindex || !s->by_index[idx])
		return errf(err, errlen, "socket sink: rendered event for an unknown subscription");
	subscription *sub = s->by_index[idx];
	/* After a restart the slot resends what the spool may already hold: skip that. */
	if (sub->have_last && (c->commit_lsn < sub->last_lsn ||
			       (c->commit_lsn == sub->last_lsn && c->tx_index <= sub->last_txi)))
		return true;
	buf_reset(&s->scratch);
	buf_append(&s->scratch, rendered + RENDER_HEADER, len - RENDER_HEADER);
	pb_put_commit(&s->scratch, c);
	uint64_t off;
	if (!spool_append(sub->q.sp, c->commit_lsn, c->tx_index, get_u32(rendered), s->scratch.data, s->scratch.len,
			  wall_ms(), &off, err, errlen))
		return false;
	sub->have_last = true;
	sub->last_lsn = c->commit_lsn;
	sub->last_txi = c->tx_index;
	sub->in_txn = sub->dirty = true;
	sub->matched++;
	if (c->commit_time > 0)
		count_commit(s, c->commit_time);
	return true;
}

static void socket_end_txn(sink *base, uint64_t seq)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (sub->in_txn && !spool_commit(sub->q.sp, s->err, sizeof(s->err)))
			log_error("cannot end a transaction in the spool", "subscription=%s error=\"%s\"", sub->name, s->err);
		sub->in_txn = false;
	}
	s->ended_seq = seq;
}

static sink_status socket_flush(sink *base, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	uint64_t ended = s->ended_seq;
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (!sub->dirty)
			continue;
		if (!spool_sync(sub->q.sp, err, errlen))
			return SINK_FATAL;
		sub->dirty = sub->in_txn;
		dispatch(s, &sub->q);
	}
	s->durable_seq = ended;
	int64_t now_us = wall_ms() * 1000;
	for (size_t i = 0; i < s->nruns; i++)
		hist_add_n(&s->latency, now_us > s->runs[i].commit_time ? (uint64_t)(now_us - s->runs[i].commit_time) : 0,
			   s->runs[i].events);
	s->nruns = 0;
	return SINK_OK;
}

static uint64_t socket_delivered(const sink *base)
{
	return ((const socket_sink *)base)->durable_seq;
}

static bool socket_busy(const sink *base)
{
	const socket_sink *s = (const socket_sink *)base;
	int64_t now = wall_ms();
	for (size_t i = 0; i < s->nsubs; i++) {
		const subscription *sub = s->subs[i];
		if (sub->set && !sub->set->retention.drop_oldest && spool_full(sub->q.sp, now))
			return true;
	}
	return false;
}

static void free_queue(queue *q)
{
	while (q->consumers) {
		consumer *c = q->consumers;
		q->consumers = c->next;
		consumer_release(c);
	}
	spool_close(q->sp);
	for (uint64_t o = q->w.base; o < q->next; o++)
		slot_forget_reason(window_at(&q->w, o));
	free(q->w.v);
}

static void socket_free(sink *base)
{
	socket_sink *s = (socket_sink *)base;
	while (s->pending) {
		consumer *c = s->pending;
		s->pending = c->next;
		consumer_release(c);
	}
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		free_queue(&sub->q);
		free_queue(&sub->dead);
		free(sub->name);
		free(sub);
	}
	free(s->subs);
	free_settings(s);
	free(s->state_dir);
	if (s->listener) {
		evconnlistener_free(s->listener);
		unlink(s->path);
	}
	if (s->ev_tick)
		event_free(s->ev_tick);
	buf_free(&s->scratch);
	buf_free(&s->events);
	free(s->runs);
	free(s);
}

static const sink_ops socket_ops = {
	.name = "socket",
	.render = socket_render,
	.deliver = socket_deliver,
	.end_txn = socket_end_txn,
	.flush = socket_flush,
	.delivered = socket_delivered,
	.busy = socket_busy,
	.free = socket_free,
};

sink *socket_sink_new(const socket_sink_settings *settings, const socket_sub_settings *subs, size_t nsubs,
		      struct event_base *base, void (*wake_fn)(void *), void *ctx, char *err, size_t errlen)
{
	socket_sink *s = xcalloc(1, sizeof(*s));
	s->base.ops = &socket_ops;
	s->state_dir = xstrdup(settings->state_dir);
	s->evb = base;
	s->wake = wake_fn;
	s->wake_ctx = ctx;
	snprintf(s->path, sizeof(s->path), "%s", settings->socket_path);
	char why[512];
	int fd = net_unix_listen(settings->socket_path, settings->mode, 128, why, sizeof(why));
	if (fd < 0) {
		errf(err, errlen, "subscribers.socket %s", why);
		goto fail;
	}
	evutil_make_socket_nonblocking(fd);
	s->listener = evconnlistener_new(base, on_accept, s, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!s->listener) {
		close(fd);
		errf(err, errlen, "subscribers.socket %s: cannot listen", settings->socket_path);
		goto fail;
	}
	s->ev_tick = event_new(base, -1, EV_PERSIST, on_tick, s);
	struct timeval tv = {.tv_sec = 0, .tv_usec = TICK_MS * 1000};
	event_add(s->ev_tick, &tv);
	if (!socket_sink_bind(&s->base, subs, nsubs, err, errlen))
		goto fail;
	log_info("serving subscribers", "socket=%s mode=%04o", settings->socket_path, (unsigned)settings->mode);
	return &s->base;
fail:
	socket_free(&s->base);
	return NULL;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

bool socket_sink_forget(sink *base, const char *name, char *err, size_t errlen)
{
	socket_sink *s = (socket_sink *)base;
	for (size_t i = 0; i < s->nsubs; i++) {
		subscription *sub = s->subs[i];
		if (sub->set || strcmp(sub->name, name) != 0)
			continue;
		free_queue(&sub->q);
		free_queue(&sub->dead);
		free(sub->name);
		free(sub);
		memmove(&s->subs[i], &s->subs[i + 1], (s->nsubs - i - 1) * sizeof(*s->subs));
		s->nsubs--;
		break;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool/%s", s->state_dir, name);
	if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
		return errf(err, errlen, "cannot remove %s: %s", dir, strerror(errno));
	log_info("removed the spool of a deleted subscription", "subscription=%s dir=%s", name, dir);
	return true;
}

const hist *socket_sink_latency(const sink *base)
{
	return &((const socket_sink *)base)->latency;
}

bool socket_sink_stats(const sink *base, uint32_t i, socket_sub_stats *out)
{
	const socket_sink *s = (const socket_sink *)base;
	const subscription *sub = i < s->nindex ? s->by_index[i] : NULL;
	if (!sub)
		return false;
	spool_stats st = spool_get_stats(sub->q.sp);
	*out = (socket_sub_stats){
			.matched = sub->matched,
			.delivered = sub->delivered,
			.redelivered = sub->redelivered,
			.head_offset = spool_head(sub->q.sp),
			.acked_offset = spool_acked(sub->q.sp),
			.first_offset = spool_first(sub->q.sp),
			.consumers = sub->q.nconsumers,
			.dead = spool_head(sub->dead.sp) - spool_acked(sub->dead.sp),
			.dropped = st.dropped,
			.spool_bytes = st.bytes,
			.full = !sub->set->retention.drop_oldest && spool_full(sub->q.sp, wall_ms()),
		};
	return true;
}

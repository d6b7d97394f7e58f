/* The delivery state of one queue of the socket sink (a subscription's events or its dead letters). It holds
 * the window of per-offset state and dispatches to the attached consumers (fair windows for shared and
 * key_shared). It handles acks, Nacks and Progress, ack timeouts and consumers that stop reading, redelivery,
 * dead letters and retention. */
#include "decoder/base/bytes.h"
#include "sinks/socket/socket_internal.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>

#include "decoder/base/log.h"
#include "sinks/pbwire.h"
#include "sinks/socket/frame.h"

/* A dead letter's record in the dead letters' spool. It starts with a 0 byte, never the first byte of a
 * packed Event, whose field numbers start at 1 (records from before have the Event alone). Then come the
 * length of the packed DeadLetter (u32, little-endian), the DeadLetter without its offset (known only once it
 * is read), and the Event. */
#define DEAD_HEADER 5
/* Refused offsets one Acked lists at most. More are answered but not listed. */
#define REPLY_MAX_REFUSED 65536

enum slot_state { SLOT_UNSENT, SLOT_SENT, SLOT_ACKED };

/* Why a delivery was given back, for the dead letter it may become. After a timeout (or a consumer
 * that stopped reading) the event does not go back to that consumer while another can take it. */
enum back_why { BACK_NONE, BACK_TIMEOUT, BACK_GONE, BACK_NACK, BACK_NOT_READING };

/* What a slot's fields mean depends on its state.
 * - When SENT, it is redelivered after deadline_ms. When UNSENT, it is not delivered before then.
 * - When SENT, pos is where its Delivery frame starts in c's output (socket_conn_write_frame).
 * - When SENT, c is to whom it went. When UNSENT, c is who had it last (NULL if nobody, or gone).
 * - With BACK_NACK, reason is the Nack's reason (owned).
 * - why is why it was last given back (an enum back_why).
 * - With key_shared, bucket is its key's bucket. */
struct slot {
	uint64_t deadline_ms;
	uint64_t pos;
	consumer *c;
	char *reason;
	uint32_t deliveries;
	uint8_t state;
	uint8_t why;
	uint8_t bucket;
};

/* A deadline ms from now, rounded up. It is never before ms have passed (util_now_ms() truncates). */
static uint64_t deadline_in(uint64_t ms)
{
	return util_now_ms() + ms + 1;
}

/* Window ------------------------------------------------------------------------------- */

static slot *window_at(window *w, uint64_t off)
{
	return &w->v[(w->head + (off - w->base)) & (w->cap - 1)];
}

/* Makes room for the slots up to off (exclusive end off + 1), new ones unsent. */
static void window_extend(window *w, uint64_t next, uint64_t end)
{
	size_t need = (size_t)(end - w->base);
	if (need > w->cap) {
		size_t cap = w->cap ? w->cap : 64;
		while (cap < need)
			cap *= 2;
		slot *v = util_xcalloc(cap, sizeof(slot));
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

socket_consumers socket_queue_mode(const queue *q)
{
	return q->dead_letters || !q->sub->set ? SOCKET_FAILOVER : q->sub->set->consumers;
}

/* A connection is on exactly one list, the pending ones (not subscribed) or one queue's consumers. Both share
 * c->next, so a connection leaves a list with its link cleared. A stale link would make the connection after
 * it on the old list a member of the new one. */
void socket_queue_unlink_consumer(consumer **list, consumer *c)
{
	for (consumer **p = list; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->next = NULL;
}

void socket_queue_append_consumer(consumer **list, consumer *c)
{
	while (*list)
		list = &(*list)->next;
	*list = c;
	c->next = NULL;
}

/* With failover, only the first consumer receives. The others wait their turn. */
bool socket_queue_is_active(const consumer *c)
{
	return socket_queue_mode(c->q) != SOCKET_FAILOVER || c->q->consumers == c;
}

/* Whether a consumer other than c could take events (one that reads its socket). */
static bool another_can_take(const queue *q, const consumer *c)
{
	for (const consumer *x = q->consumers; x; x = x->next)
		if (x != c && !x->not_reading)
			return true;
	return false;
}

/* Dispatch ------------------------------------------------------------------------------ */

/* Whether c's output is over the high-water mark. Then it waits (stalled) until it drains. */
bool socket_queue_out_full(consumer *c)
{
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) < c->s->out_high)
		return false;
	c->stalled = true;
	return true;
}

/* How many deliveries c may hold now. That is its window in the shared modes, else max_unacked. */
static uint32_t limit(const consumer *c)
{
	return socket_queue_mode(c->q) == SOCKET_FAILOVER || c->window > c->max_unacked ? c->max_unacked
											: c->window;
}

static bool has_room(consumer *c)
{
	if (c->closing || c->not_reading || c->stalled || socket_queue_out_full(c))
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

/* The consumer with the most room other than avoid. avoid itself if it has room and nobody else does. But
 * after a timeout (hard), avoid only if nobody else could take the event at all. */
static consumer *pick(queue *q, consumer *avoid, bool hard)
{
	consumer *c = most_room(q, avoid);
	if (!c && avoid && has_room(avoid) && (!hard || !another_can_take(q, avoid)))
		c = avoid;
	return c;
}

/* Whether a redelivery may avoid its last consumer only while another has room (a Nack), or
 * while another can take it at all (it timed out there, or that consumer stopped reading). */
static bool hard_avoid(enum back_why why)
{
	return why == BACK_TIMEOUT || why == BACK_NOT_READING;
}

/* Whether a given-back slot must not go to c now. That is when it timed out there (or c stopped reading) and
 * another consumer can take it. */
static bool kept_from(const queue *q, const slot *sl, const consumer *c)
{
	return sl->state == SLOT_UNSENT && sl->c == c && hard_avoid((enum back_why)sl->why) &&
	       another_can_take(q, c);
}

/* Every RATE_PERIOD_MS, a shared consumer's window becomes what it acknowledged per ack_timeout / 2. So what
 * it is handed can be started on before its deadline, however slow or fast its work. It grows with the
 * consumer's pace. It shrinks only if the consumer was held by its window, since a consumer that had little
 * to do says nothing of its pace. */
void socket_queue_update_window(consumer *c, uint64_t now)
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

/* Whom a group of events starting with a record of key hash h goes to. NULL if nobody can take it now. shared
 * gives the most room first (the round robin decides between equals). A redelivery goes to another consumer
 * than the last one (pick says why it came back). */
static consumer *choose(queue *q, uint32_t key_hash, consumer *last, enum back_why why)
{
	switch (socket_queue_mode(q)) {
	case SOCKET_FAILOVER:
		return q->consumers;
	case SOCKET_SHARED: {
		consumer *c = pick(q, last, hard_avoid(why));
		q->rr = (q->rr + 1) % q->nconsumers;
		return c;
	}
	case SOCKET_KEY_SHARED: {
		/* A key's bucket keeps its consumer while it is connected (and reads, and acknowledges in
		 * time). So per-key order holds. */
		size_t b = key_hash % KEY_BUCKETS;
		if (!q->bucket[b])
			q->bucket[b] = pick(q, q->avoid[b], true);
		return q->bucket[b];
	}
	}
	return NULL;
}

/* With key_shared, whether c may take an event of this key hash. It may if its bucket is c's, or nobody's and
 * now c's. It may not if the bucket was taken from c and another can take it. */
static bool claim_key(queue *q, uint32_t key_hash, consumer *c)
{
	size_t b = key_hash % KEY_BUCKETS;
	if (!q->bucket[b] && !(q->avoid[b] == c && another_can_take(q, c)))
		q->bucket[b] = c;
	return q->bucket[b] == c;
}

/* Where the next delivery comes from, returned offsets first, then those never sent. */
uint64_t socket_queue_resume_at(const queue *q)
{
	return q->returned ? q->w.base : q->next;
}

/* Whether off can be delivered now. It can if never sent, or given back and not held back by a Nack's
 * delay. */
static bool slot_ready(queue *q, uint64_t off, uint64_t now)
{
	if (off >= q->next)
		return true;
	const slot *sl = window_at(&q->w, off);
	return sl->state == SLOT_UNSENT && sl->deadline_ms <= now;
}

/* The next time socket_queue_check_timeouts has something to do. */
static void note_deadline(queue *q, uint64_t t)
{
	if (!q->min_deadline || t < q->min_deadline)
		q->min_deadline = t;
}

/* A dead letter's record (see dead_record), the packed DeadLetter and the Event. A record from before dead
 * letters had a history is the Event alone (no DeadLetter). false if the lengths do not add up (then the
 * record is taken as an Event). */
static bool dead_split(const spool_record *r, const uint8_t **dead, size_t *deadlen, const uint8_t **ev,
		       size_t *evlen)
{
	if (r->len == 0 || r->data[0] != 0)
		return true;
	if (r->len < DEAD_HEADER)
		return false;
	size_t n = get_le32((const uint8_t *)r->data + 1);
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
		window_at(&q->w, o)->deliveries = socket_spool_deliveries(q->sp, o);
	q->next = off + 1;
}

/* The commit fields a held transaction's event lacks in the spool (spool_record.held), and their size. */
static void put_commit(buf *b, const spool_record *r)
{
	if (r->held)
		sink_pb_put_commit(b, &(sink_commit){r->commit_lsn, r->commit_time, r->tx_index});
}

static size_t commit_size(const spool_record *r)
{
	return r->held ? sink_pb_commit_size(&(sink_commit){r->commit_lsn, r->commit_time, r->tx_index}) : 0;
}

/* Marks off sent to c in the Delivery frame that starts at c's out_added. Appends its Event to s->events (the
 * Delivery's repeated field). */
static void put_event(socket_sink *s, queue *q, consumer *c, const spool_record *r, uint64_t deadline)
{
	if (r->offset >= q->next)
		extend_to(q, r->offset);
	else
		q->returned--;
	slot *sl = window_at(&q->w, r->offset);
	sl->state = SLOT_SENT;
	sl->c = c;
	sl->pos = c->out_added;
	sl->bucket = (uint8_t)(r->key_hash % KEY_BUCKETS);
	sl->deliveries++;
	socket_spool_note_delivery(q->sp, r->offset, sl->deliveries);
	sl->deadline_ms = deadline;
	note_deadline(q, sl->deadline_ms);
	c->in_flight++;
	c->delivered++;
	if (!q->dead_letters) {
		q->sub->delivered++;
		q->sub->redelivered += sl->deliveries > 1;
	}
	const uint8_t *ev = r->data, *dead = NULL;
	size_t evlen = r->len, deadlen = 0;
	if (q->dead_letters && !dead_split(r, &dead, &deadlen, &ev, &evlen))
		log_warn("a dead letter's history is unreadable; it is delivered without",
			 "subscription=%s offset=%llu", q->sub->name, (unsigned long long)r->offset);
	size_t len = evlen + commit_size(r) + sink_pb_varint_field_size(EVENT_OFFSET, r->offset) +
		     sink_pb_varint_field_size(EVENT_DELIVERY_COUNT, sl->deliveries);
	sink_pb_put_len_header(&s->events, DELIVERY_EVENTS, len);
	buf_append(&s->events, ev, evlen);
	put_commit(&s->events, r);
	sink_pb_put_varint_field(&s->events, EVENT_OFFSET, r->offset);
	sink_pb_put_varint_field(&s->events, EVENT_DELIVERY_COUNT, sl->deliveries);
	if (q->dead_letters) {
		/* one DeadLetter per Event, in the same order. Its offset goes last (any order is valid). */
		sink_pb_put_len_header(&s->events, DELIVERY_DEAD_LETTERS,
				       deadlen + sink_pb_varint_field_size(DEAD_LETTER_OFFSET, r->offset));
		buf_append(&s->events, dead, deadlen);
		sink_pb_put_varint_field(&s->events, DEAD_LETTER_OFFSET, r->offset);
	}
}

/* A discarded range goes to the consumer of the next Delivery, before it. It also goes before its events are
 * marked sent, since their Delivery frame starts after this one. */
static void tell_dropped(queue *q, consumer *c)
{
	if (!q->drop_to)
		return;
	Cdc__V1__Dropped dr = CDC__V1__DROPPED__INIT;
	dr.from_offset = q->drop_from;
	dr.to_offset = q->drop_to;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_DROPPED;
	f.dropped = &dr;
	socket_conn_send_frame(c, &f);
	q->drop_from = q->drop_to = 0;
}

/* Writes the Delivery gathered in s->events to c. */
static void push_delivery(socket_sink *s, consumer *c)
{
	size_t len = sink_pb_len_header_size(SF_DELIVERY, s->events.len) + s->events.len;
	uint8_t hdr[FRAME_HEADER];
	socket_frame_put_header(hdr, len);
	buf_reset(&s->scratch);
	buf_append(&s->scratch, hdr, sizeof(hdr));
	sink_pb_put_len_header(&s->scratch, SF_DELIVERY, s->events.len);
	socket_conn_write_frame(c, s->scratch.data, s->scratch.len, s->events.data, s->events.len);
	buf_reset(&s->events);
}

static void fatal_read(socket_sink *s, queue *q)
{
	log_error("cannot read a spooled event; its consumers wait until cdc restarts",
		  "subscription=%s error=\"%s\"", q->sub->name, s->err);
}

/* Sends one delivery starting at off if someone can take it. Returns the offset after the group,
 * or 0 when nothing more can be sent now (stop scanning). */
static uint64_t send_group(socket_sink *s, queue *q, uint64_t off, uint64_t head, uint64_t now)
{
	const slot *was = off < q->next ? window_at(&q->w, off) : NULL;
	bool by_key = socket_queue_mode(q) == SOCKET_KEY_SHARED;
	/* Who takes it, before reading it. Only key_shared needs the event (its key) to choose. */
	consumer *c = by_key ? NULL : choose(q, 0, was ? was->c : NULL, was ? was->why : BACK_NONE);
	if (!by_key && (!c || !has_room(c)))
		/* With shared, a redelivery kept from its last consumer waits for another. Later offsets may
		 * go on (failover keeps the order). */
		return was && socket_queue_mode(q) == SOCKET_SHARED && least_loaded(q) ? off + 1 : 0;
	spool_record r;
	if (!socket_spool_read(q->sp, off, &r, s->err, sizeof(s->err))) {
		fatal_read(s, q);
		return 0;
	}
	if (by_key && (!(c = choose(q, r.key_hash, NULL, BACK_NONE)) || !has_room(c))) {
		/* This key's consumer is full. Other keys may go on. */
		if (!least_loaded(q))
			return 0;
		if (off >= q->next) {
			extend_to(q, off);
			q->returned++;
		}
		return off + 1;
	}
	bool batch = !q->dead_letters && q->sub->set->batch_transaction;
	uint64_t commit_lsn = r.commit_lsn, deadline = deadline_in(q->sub->set->ack_timeout_ms);
	tell_dropped(q, c);
	put_event(s, q, c, &r, deadline);
	for (off++; batch && off <= head && slot_ready(q, off, now); off++) {
		if (!socket_spool_read(q->sp, off, &r, s->err, sizeof(s->err))) {
			fatal_read(s, q);
			break;
		}
		/* A transaction's batch is split where a frame would pass FRAME_MAX. In key_shared it is also
		 * split where the next event's key is another consumer's. Sending it along to c put one key
		 * in flight to two consumers (c received a row's later change while the other still held an
		 * earlier one). The rest of the transaction is dispatched key by key. */
		if (r.commit_lsn != commit_lsn || s->events.len + r.len + 64 > FRAME_MAX ||
		    (by_key && !claim_key(q, r.key_hash, c)) ||
		    (off < q->next && kept_from(q, window_at(&q->w, off), c)))
			break;
		put_event(s, q, c, &r, deadline);
	}
	push_delivery(s, c);
	return off;
}

/* Pushes what the consumers have room for, returned offsets first (in order), then new ones. */
void socket_queue_dispatch(socket_sink *s, queue *q)
{
	if (!q->sub->set || !q->consumers ||
	    (socket_queue_mode(q) == SOCKET_FAILOVER && q->consumers->closing))
		return; /* removed from the configuration, so nothing more is sent */
	uint64_t head = socket_spool_head(q->sp), now = util_now_ms();
	uint64_t off = socket_queue_resume_at(q);
	while (off && off <= head) {
		if (!slot_ready(q, off, now)) {
			off++;
			continue;
		}
		off = send_group(s, q, off, head, now);
	}
	/* the counts go to disk before the deliveries go out (written when the loop runs again) */
	if (!socket_spool_save_deliveries(q->sp, s->err, sizeof(s->err)))
		log_error("cannot record delivery counts; after a restart they may start again from 1",
			  "subscription=%s error=\"%s\"", q->sub->name, s->err);
}

/* Acknowledgement and redelivery ------------------------------------------------------- */

void socket_queue_wake(socket_sink *s)
{
	if (s->wake)
		s->wake(s->wake_ctx);
}

/* Moves the window's start over the acknowledged slots there (in memory, see advance_base). */
static void window_advance(queue *q)
{
	window *w = &q->w;
	while (w->base < q->next && window_at(w, w->base)->state == SLOT_ACKED) {
		w->base++;
		w->head = (w->head + 1) & (w->cap - 1);
	}
	if (w->base == q->next)
		window_reset(w, q->next);
}

/* Moves the window's start, and the spool's acked cursor with it. */
static void advance_base(socket_sink *s, queue *q)
{
	window_advance(q);
	window *w = &q->w;
	if (w->base - 1 > socket_spool_acked(q->sp) &&
	    !socket_spool_set_acked(q->sp, w->base - 1, s->err, sizeof(s->err)))
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

/* A delivery that was not acknowledged in time, whose consumer went away, or that it gave back (why). It is
 * sent again from not_before on. It moves to the dead letters once it was delivered max_deliveries times. */
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
	uint32_t max = q->sub->set ? q->sub->set->max_deliveries : 0; /* no settings when being removed */
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
	case BACK_NOT_READING:
		return "consumer stopped reading";
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
	d.dead_time = util_wall_ms() * 1000;
	uint32_t n = (uint32_t)cdc__v1__dead_letter__get_packed_size(&d);
	uint8_t hdr[DEAD_HEADER] = {0};
	put_le32(hdr + 1, n);
	buf_reset(out);
	buf_append(out, hdr, sizeof(hdr));
	buf_reserve(out, n);
	out->len += cdc__v1__dead_letter__pack(&d, (uint8_t *)out->data + out->len);
	buf_append(out, r->data, r->len);
	put_commit(out, r);
}

static void move_to_dead(socket_sink *s, queue *q, uint64_t off, slot *sl)
{
	subscription *sub = q->sub;
	spool_record r;
	uint64_t dead_off;
	buf rec = {0};
	bool ok = socket_spool_read(q->sp, off, &r, s->err, sizeof(s->err));
	if (ok)
		dead_record(&rec, &r, off, sl);
	if (!ok ||
	    !socket_spool_append(sub->dead.sp, r.commit_lsn, r.tx_index, r.key_hash, rec.data, rec.len,
				 util_wall_ms(), &dead_off, s->err, sizeof(s->err)) ||
	    !socket_spool_commit(sub->dead.sp, s->err, sizeof(s->err)) ||
	    !socket_spool_sync(sub->dead.sp, s->err, sizeof(s->err))) {
		log_error("cannot move an event to the dead letters; it stays in the subscription",
			  "subscription=%s offset=%llu error=\"%s\"", sub->name, (unsigned long long)off,
			  s->err);
		buf_free(&rec);
		return;
	}
	buf_free(&rec);
	log_warn("moved an event to the dead letters",
		 "subscription=%s offset=%llu deliveries=%u dead_offset=%llu reason=\"%s\"", sub->name,
		 (unsigned long long)off, sl->deliveries, (unsigned long long)dead_off, back_reason(sl));
	ack_slot(q, sl);
	socket_queue_dispatch(s, &sub->dead);
}

/* The Deliveries to c not written to its socket yet leave its output. Their events were never delivered, so
 * they go back without counting (nobody had them). */
static void withdraw(socket_sink *s, queue *q, consumer *c)
{
	uint64_t from = socket_conn_withdraw(c);
	for (uint64_t o = q->w.base; o < q->next && from != UINT64_MAX; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state != SLOT_SENT || sl->c != c || sl->pos < from)
			continue;
		sl->deliveries--;
		socket_spool_note_delivery(q->sp, o, sl->deliveries);
		c->in_flight--;
		c->delivered--;
		if (!q->dead_letters) {
			q->sub->delivered--;
			q->sub->redelivered -= sl->deliveries > 0;
		}
		sl->state = SLOT_UNSENT;
		sl->c = NULL;
		sl->deadline_ms = 0;
		q->returned++;
	}
	if (from != UINT64_MAX && !socket_spool_save_deliveries(q->sp, s->err, sizeof(s->err)))
		log_error("cannot record delivery counts; after a restart they may be higher",
			  "subscription=%s error=\"%s\"", q->sub->name, s->err);
}

/* Takes back every delivery c holds (it went away, lost the failover or stopped reading). Those not written
 * yet are withdrawn, and the others given back as delivered. */
static void take_back(socket_sink *s, queue *q, consumer *c, enum back_why why)
{
	withdraw(s, q, c);
	for (uint64_t o = q->w.base; o < q->next && c->in_flight; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state == SLOT_SENT && sl->c == c) {
			slot_forget_reason(sl);
			return_slot(s, q, o, sl, why, 0);
		}
	}
	advance_base(s, q);
}

/* With key_shared, c loses a bucket (it timed out on an event of it, or stopped reading). Its other
 * deliveries of that bucket come back with it, so that a key is never in flight to two consumers. The bucket
 * goes to another consumer while one can take it. */
static void lose_bucket(socket_sink *s, queue *q, consumer *c, uint8_t b, enum back_why why)
{
	withdraw(s, q, c);
	if (q->bucket[b] == c)
		q->bucket[b] = NULL;
	q->avoid[b] = c;
	for (uint64_t o = q->w.base; o < q->next; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state == SLOT_SENT && sl->c == c && sl->bucket == b) {
			slot_forget_reason(sl);
			return_slot(s, q, o, sl, why, 0);
		}
	}
}

/* Acks, Nacks and Progress ---------------------------------------------------------------- */

/* Whether off is in flight to c (0), else why an Ack, Nack or Progress of it has no effect. An Ack (late_ok)
 * also counts for a delivery given back after c's ack timeout that nobody else has had since. The work is
 * done, and sending it again would only repeat it. */
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
	c->q->sub->refused++;
	if (r->n == REPLY_MAX_REFUSED)
		return;
	if (r->n == r->cap) {
		r->cap = r->cap ? 2 * r->cap : 16;
		r->offsets = util_xrealloc(r->offsets, r->cap * sizeof(*r->offsets));
		r->reasons = util_xrealloc(r->reasons, r->cap * sizeof(*r->reasons));
	}
	r->offsets[r->n] = off;
	r->reasons[r->n++] = (uint8_t)why;
}

/* Acknowledges the offsets from..to (in the window) for c. */
static void ack_range(consumer *c, uint64_t from, uint64_t to)
{
	queue *q = c->q;
	for (uint64_t o = from; o <= to; o++) {
		slot *sl = window_at(&q->w, o);
		c->acks += sl->c == c;
		if (sl->state != SLOT_ACKED) {
			c->acked++;
			ack_slot(q, sl);
			q->sub->acked++;
		}
	}
}

/* With failover (and dead letters), one request acknowledges every offset up to the highest listed, from the
 * active consumer only. It takes effect whole or not at all. An offset of it may be refused for another
 * reason than ALREADY_ACKED (never delivered, another consumer's, not active). Then nothing is acknowledged.
 * Each such offset is listed with its own reason, the others as IN_REFUSED_ACK. */
static void ack_cumulative(consumer *c, const Cdc__V1__Ack *a)
{
	queue *q = c->q;
	bool active = socket_queue_is_active(c), whole = true;
	uint64_t top = 0;
	for (size_t i = 0; i < a->n_offsets; i++) {
		uint64_t off = a->offsets[i];
		Cdc__V1__Refused__Reason why =
		    active ? refusal(q, c, off, true) : CDC__V1__REFUSED__REASON__NOT_ACTIVE;
		if (why && why != CDC__V1__REFUSED__REASON__ALREADY_ACKED)
			whole = false;
		else if (!why && off > top)
			top = off;
	}
	for (size_t i = 0; i < a->n_offsets; i++) {
		uint64_t off = a->offsets[i];
		Cdc__V1__Refused__Reason why =
		    active ? refusal(q, c, off, true) : CDC__V1__REFUSED__REASON__NOT_ACTIVE;
		if (why)
			refuse(c, off, why);
		else if (!whole)
			refuse(c, off, CDC__V1__REFUSED__REASON__IN_REFUSED_ACK);
	}
	if (whole && top)
		ack_range(c, q->w.base, top);
}

/* Failover (and dead letters) acknowledge cumulatively. Shared modes acknowledge each offset by itself. */
void socket_queue_handle_ack(consumer *c, const Cdc__V1__Ack *a)
{
	queue *q = c->q;
	if (socket_queue_mode(q) == SOCKET_FAILOVER) {
		ack_cumulative(c, a);
	} else {
		for (size_t i = 0; i < a->n_offsets; i++) {
			Cdc__V1__Refused__Reason why = refusal(q, c, a->offsets[i], true);
			if (why)
				refuse(c, a->offsets[i], why);
			else
				ack_range(c, a->offsets[i], a->offsets[i]);
		}
	}
	window_advance(q);
}

void socket_queue_handle_nack(socket_sink *s, consumer *c, const Cdc__V1__Nack *n)
{
	queue *q = c->q;
	for (size_t i = 0; i < n->n_offsets; i++) {
		uint64_t off = n->offsets[i];
		Cdc__V1__Refused__Reason why = refusal(q, c, off, false);
		if (why) {
			refuse(c, off, why);
			continue;
		}
		slot *sl = window_at(&q->w, off);
		slot_forget_reason(sl);
		sl->reason = util_xstrdup(n->reason[0] ? n->reason : "nack");
		return_slot(s, q, off, sl, BACK_NACK, n->delay_ms ? deadline_in(n->delay_ms) : 0);
		q->sub->nacked++;
	}
	window_advance(q);
}

/* After the Acks and Nacks of one read, the acked cursor is written once for all of them. It is not written
 * per frame, since a consumer acking event by event made a write per event. Then what they freed is
 * dispatched, and the daemon is told that a full spool may have room again. */
void socket_queue_settle(socket_sink *s, queue *q)
{
	advance_base(s, q);
	socket_queue_dispatch(s, q);
	socket_queue_wake(s);
}

void socket_queue_handle_progress(consumer *c, const Cdc__V1__Progress *p)
{
	queue *q = c->q;
	uint64_t deadline = deadline_in(q->sub->set->ack_timeout_ms);
	for (size_t i = 0; i < p->n_offsets; i++) {
		Cdc__V1__Refused__Reason why = refusal(q, c, p->offsets[i], false);
		if (why)
			refuse(c, p->offsets[i], why);
		else {
			window_at(&q->w, p->offsets[i])->deadline_ms = deadline;
			q->sub->progressed++;
		}
	}
}

/* With failover, the active consumer held a delivery past its deadline, or stopped reading (why). The next
 * one that reads takes over. false if there is none. */
static bool hand_over(socket_sink *s, queue *q, enum back_why why)
{
	consumer *active = q->consumers;
	if (!another_can_take(q, active))
		return false;
	do { /* the active one goes last, and so does each one that does not read */
		consumer *first = q->consumers;
		socket_queue_unlink_consumer(&q->consumers, first);
		socket_queue_append_consumer(&q->consumers, first);
	} while (q->consumers->not_reading);
	log_warn(why == BACK_TIMEOUT
		     ? "the active consumer did not acknowledge in time; the next one takes over"
		     : "the active consumer stopped reading its socket; the next one takes over",
		 "subscription=%s consumer=%s next=%s", q->sub->name, active->name, q->consumers->name);
	take_back(s, q, active, why);
	return true;
}

/* On ack_timeout, each mode acts as follows.
 * - shared redelivers the late event (to another consumer while one can take it).
 * - key_shared moves the late event's bucket, with what the consumer holds of it, to another one. It
 *   redelivers it to the same one if none can take it.
 * - failover hands over to a waiting consumer.
 * A late Delivery not even written to the consumer's socket is withdrawn (with the others not
 * written), not counted. Deliveries held back by a Nack's delay are dispatched once it has passed. */
void socket_queue_check_timeouts(socket_sink *s, queue *q, uint64_t now)
{
	socket_consumers mode = socket_queue_mode(q);
	if (mode == SOCKET_FAILOVER && q->consumers && q->consumers->not_reading &&
	    hand_over(s, q, BACK_NOT_READING))
		socket_queue_dispatch(s, q);
	if (!q->min_deadline || q->min_deadline > now)
		return;
	q->min_deadline = 0;
	bool late = false;
	for (uint64_t o = q->w.base; o < q->next; o++) {
		slot *sl = window_at(&q->w, o);
		if (sl->state == SLOT_SENT && sl->deadline_ms <= now) {
			if (mode == SOCKET_FAILOVER) {
				late = true;
			} else if (sl->pos >= socket_conn_written(sl->c)) {
				withdraw(s, q, sl->c);
			} else if (mode == SOCKET_KEY_SHARED && another_can_take(q, sl->c)) {
				lose_bucket(s, q, sl->c, sl->bucket, BACK_TIMEOUT);
			} else {
				slot_forget_reason(sl);
				return_slot(s, q, o, sl, BACK_TIMEOUT, 0);
			}
		}
		if (sl->state != SLOT_ACKED && sl->deadline_ms > now)
			note_deadline(q, sl->deadline_ms);
	}
	if (late && q->consumers && !hand_over(s, q, BACK_TIMEOUT))
		note_deadline(q, now + q->sub->set->ack_timeout_ms); /* nobody to hand over to */
	advance_base(s, q);
	socket_queue_dispatch(s, q);
}

void socket_queue_not_reading(socket_sink *s, consumer *c)
{
	queue *q = c->q;
	uint32_t held = c->in_flight;
	uint64_t delivered = c->delivered; /* what is withdrawn is no delivery */
	size_t unsent = evbuffer_get_length(bufferevent_get_output(c->bev));
	switch (socket_queue_mode(q)) {
	case SOCKET_FAILOVER:
		if (q->consumers == c)
			hand_over(s, q, BACK_NOT_READING);
		break;
	case SOCKET_KEY_SHARED:
		for (size_t b = 0; b < KEY_BUCKETS; b++)
			if (q->bucket[b] == c)
				lose_bucket(s, q, c, (uint8_t)b, BACK_NOT_READING);
		take_back(s, q, c, BACK_NOT_READING);
		break;
	case SOCKET_SHARED:
		take_back(s, q, c, BACK_NOT_READING);
		break;
	}
	log_warn(
	    "a consumer has not read its socket for ack_timeout; it gets nothing until it reads",
	    "consumer=%s pid=%ld subscription=%s in_flight=%u taken_back=%u withdrawn=%llu unsent_bytes=%zu",
	    c->name, (long)c->pid, q->sub->name, held, held - c->in_flight,
	    (unsigned long long)(delivered - c->delivered), unsent);
	advance_base(s, q);
	socket_queue_dispatch(s, q);
}

/* Retention. drop_oldest discards. Both modes delete segments nobody needs any more. Those from the window's
 * start on stay. A consumer that started from `earliest` or an offset reads acknowledged events again, and
 * the spool must not delete them under it. */
void socket_queue_trim(socket_sink *s, queue *q)
{
	uint64_t from, to;
	if (!socket_spool_trim(q->sp, util_wall_ms(), q->w.base, &from, &to, s->err, sizeof(s->err))) {
		log_error("cannot apply retention", "subscription=%s error=\"%s\"", q->sub->name, s->err);
		return;
	}
	if (!to)
		return;
	log_warn("retention discarded events nobody acknowledged",
		 "subscription=%s from_offset=%llu to_offset=%llu", q->sub->name, (unsigned long long)from,
		 (unsigned long long)to);
	q->drop_from = q->drop_to ? q->drop_from : from;
	q->drop_to = to;
	/* Deliveries in flight of discarded events are forgotten. Acks for them change nothing. */
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

/* Queues ---------------------------------------------------------------------------------- */

void socket_queue_detach(consumer *c)
{
	queue *q = c->q;
	if (!q) {
		socket_queue_unlink_consumer(&c->s->pending, c);
		return;
	}
	bool was_active = q->consumers == c;
	socket_queue_unlink_consumer(&q->consumers, c);
	q->nconsumers--;
	q->rr = 0;
	for (size_t i = 0; i < KEY_BUCKETS; i++) {
		if (q->bucket[i] == c)
			q->bucket[i] = NULL;
		if (q->avoid[i] == c)
			q->avoid[i] = NULL;
	}
	take_back(c->s, q, c, BACK_GONE);
	for (uint64_t o = q->w.base; o < q->next; o++) /* it is gone, and nobody had those last */
		if (window_at(&q->w, o)->c == c)
			window_at(&q->w, o)->c = NULL;
	c->q = NULL;
	if (was_active && q->consumers && socket_queue_mode(q) == SOCKET_FAILOVER)
		log_info("failover: another consumer is active now",
			 "subscription=%s consumer=%s from_offset=%llu", q->sub->name, q->consumers->name,
			 (unsigned long long)q->w.base);
	socket_queue_dispatch(c->s, q);
}

/* Positions a queue for a consumer that attaches while no other is, at the start it asked for. */
uint64_t socket_queue_position(socket_sink *s, queue *q, const Cdc__V1__Subscribe *sub)
{
	uint64_t first = socket_spool_first(q->sp), head = socket_spool_head(q->sp),
		 acked = socket_spool_acked(q->sp);
	uint64_t start;
	switch (sub->start) {
	case CDC__V1__START_FROM__START_EARLIEST:
		start = first;
		break;
	case CDC__V1__START_FROM__START_LATEST:
		start = head + 1;
		break;
	case CDC__V1__START_FROM__START_OFFSET:
		start = sub->start_offset < first      ? first
			: sub->start_offset > head + 1 ? head + 1
						       : sub->start_offset;
		/* Offsets are given as events are spooled. None past the next one can be skipped yet. */
		if (start != sub->start_offset)
			log_warn("start_offset is out of the spool's range; starting at its nearest end",
				 "subscription=%s start_offset=%llu first_offset=%llu head_offset=%llu "
				 "next_offset=%llu",
				 q->sub->name, (unsigned long long)sub->start_offset,
				 (unsigned long long)first, (unsigned long long)head,
				 (unsigned long long)start);
		break;
	default:
		if (q->w.base > acked)
			return socket_queue_resume_at(q);
		start = acked + 1; /* after a replay that did not get that far */
		break;
	}
	/* Skipping forward acknowledges what is skipped. Going back replays acknowledged events. */
	if (start - 1 > acked && !socket_spool_set_acked(q->sp, start - 1, s->err, sizeof(s->err)))
		log_error("cannot record acknowledged offsets", "subscription=%s error=\"%s\"", q->sub->name,
			  s->err);
	for (uint64_t o = q->w.base; o < q->next; o++)
		slot_forget_reason(window_at(&q->w, o));
	q->next = start;
	q->returned = 0;
	window_reset(&q->w, start);
	return start;
}

bool socket_queue_open(socket_sink *s, subscription *sub, queue *q, bool dead, char *err, size_t errlen)
{
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/spool/%s/%s", s->state_dir, sub->name, dead ? "dead" : "events");
	spool_limits none = {0};
	spool_recovery rec = {0};
	q->sub = sub;
	q->dead_letters = dead;
	if (!(q->sp = socket_spool_open(dir, dead ? &none : &sub->set->retention, &rec, err, errlen)))
		return false;
	if (rec.torn_bytes || rec.uncommitted)
		log_warn("spool recovered",
			 "subscription=%s dir=%s torn_bytes_cut=%llu uncommitted_events=%llu", sub->name, dir,
			 (unsigned long long)rec.torn_bytes, (unsigned long long)rec.uncommitted);
	q->next = socket_spool_acked(q->sp) + 1;
	window_reset(&q->w, q->next);
	return true;
}

void socket_queue_free(queue *q)
{
	while (q->consumers) {
		consumer *c = q->consumers;
		q->consumers = c->next;
		socket_conn_consumer_release(c);
	}
	socket_spool_close(q->sp);
	for (uint64_t o = q->w.base; o < q->next; o++)
		slot_forget_reason(window_at(&q->w, o));
	free(q->w.v);
}

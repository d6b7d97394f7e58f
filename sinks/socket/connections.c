/* The connections of the socket sink's subscribers. It accepts them and keeps the first-frame deadline. It
 * makes room when the table is full, and closes with a readable Error and draining. It bounds the output (and
 * withdraws Deliveries not written yet), and watches that the peer reads. It reads frames, and handles the
 * Subscribe handshake, Acked answers and heartbeats. */
#include "sinks/socket/socket_internal.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "decoder/base/log.h"
#include "decoder/base/net.h"
#include "sinks/pbwire.h"
#include "sinks/socket/frame.h"

#define HEARTBEAT_DEFAULT_MS 5000
/* A connection closed with an Error stays this long (at most, between reads or writes) to let the
 * client finish sending and read the Error, instead of meeting a reset or a broken pipe. */
#define CLOSE_LINGER_MS 2000
/* Closing connections beyond subscribers.max_connections. Past this, a new connection is closed without a
 * word. */
#define MAX_CLOSING 256

/* The first byte of a Delivery frame's message, ServerFrame's delivery field, length-delimited. */
#define DELIVERY_TAG (SF_DELIVERY << 3 | PB_WIRE_LEN)

/* Output ------------------------------------------------------------------------------------ */

static uint64_t *start_at(struct frame_starts *f, size_t i)
{
	return &f->v[(f->head + i) & (f->cap - 1)];
}

uint64_t socket_conn_written(consumer *c)
{
	return c->out_added - evbuffer_get_length(bufferevent_get_output(c->bev));
}

/* Forgets the frames wholly written. The first one kept is the one being written, if any. */
static void forget_written(consumer *c)
{
	struct frame_starts *f = &c->starts;
	uint64_t written = socket_conn_written(c);
	while (f->n && (f->n > 1 ? *start_at(f, 1) : c->out_added) <= written) {
		f->head = (f->head + 1) & (f->cap - 1);
		f->n--;
	}
}

void socket_conn_write_frame(consumer *c, const void *a, size_t alen, const void *b, size_t blen)
{
	struct frame_starts *f = &c->starts;
	forget_written(c);
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		uint64_t *v = util_xmalloc(cap * sizeof(*v));
		for (size_t i = 0; i < f->n; i++)
			v[i] = *start_at(f, i);
		free(f->v);
		*f = (struct frame_starts){v, 0, f->n, cap};
	}
	*start_at(f, f->n++) = c->out_added;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evbuffer_add(out, a, alen);
	if (blen)
		evbuffer_add(out, b, blen);
	c->out_added += alen + blen;
	c->last_send_ms = util_now_ms();
}

void socket_conn_send_frame(consumer *c, const Cdc__V1__ServerFrame *f)
{
	buf b = {0};
	socket_frame_put_server(&b, f);
	socket_conn_write_frame(c, b.data, b.len, NULL, 0);
	buf_free(&b);
}

uint64_t socket_conn_withdraw(consumer *c)
{
	struct frame_starts *f = &c->starts;
	forget_written(c);
	uint64_t written = socket_conn_written(c), from = UINT64_MAX, pos;
	size_t k = 0, kept;
	while (k < f->n && *start_at(f, k) < written)
		k++; /* the frame being written stays whole */
	if (k == f->n)
		return UINT64_MAX;
	struct evbuffer *out = bufferevent_get_output(c->bev), *keep = evbuffer_new();
	/* The bufferevent keeps its output's front frozen but while it writes (its own
	 * bufferevent_writecb does the same). */
	evbuffer_unfreeze(out, 1);
	pos = *start_at(f, k);
	evbuffer_remove_buffer(out, keep, (size_t)(pos - written));
	kept = k;
	for (size_t i = k; i < f->n; i++) {
		size_t len = (size_t)((i + 1 < f->n ? *start_at(f, i + 1) : c->out_added) - *start_at(f, i));
		uint8_t head[FRAME_HEADER + 1];
		if (evbuffer_copyout(out, head, sizeof(head)) == (ssize_t)sizeof(head) &&
		    head[FRAME_HEADER] == DELIVERY_TAG) {
			if (from == UINT64_MAX)
				from = *start_at(f, i);
			evbuffer_drain(out, len);
			continue;
		}
		evbuffer_remove_buffer(out, keep, len);
		*start_at(f, kept++) = pos;
		pos += len;
	}
	f->n = kept;
	evbuffer_add_buffer(out, keep);
	evbuffer_freeze(out, 1);
	evbuffer_free(keep);
	c->out_added = pos;
	if (evbuffer_get_length(out) <= c->s->out_low)
		c->stalled = false; /* drained by the withdrawal, and no write will say so */
	return from;
}

/* Whether the peer reads. It did since the last check if what it has not read grew by less than cdc wrote
 * meanwhile. The kernel counts the size of its buffers, at least the bytes in them. Its frames show it alive
 * too, since a worker busy with a long job sends Progress without reading. Only a peer that neither reads nor
 * sends for ack_timeout is taken for one that stopped reading. It is dispatched to again once it reads. */
void socket_conn_watch_reading(consumer *c, uint64_t now, uint64_t timeout_ms)
{
	int unread = 0;
	if (ioctl(bufferevent_getfd(c->bev), SIOCOUTQ, &unread) != 0)
		unread = 0;
	uint64_t written = socket_conn_written(c);
	bool reads = unread == 0 || (int64_t)unread - c->seen_unread < (int64_t)(written - c->seen_written);
	c->seen_unread = unread;
	c->seen_written = written;
	if (reads) {
		c->read_ms = now;
		if (c->not_reading) {
			c->not_reading = false;
			log_info("a consumer reads its socket again", "consumer=%s pid=%ld subscription=%s",
				 c->name, (long)c->pid, c->q->sub->name);
			socket_queue_dispatch(c->s, c->q);
		}
	} else if (!c->not_reading &&
		   now - (c->read_ms > c->heard_ms ? c->read_ms : c->heard_ms) >= timeout_ms) {
		c->not_reading = true;
		socket_queue_not_reading(c->s, c);
	}
}

static void consumer_free(consumer *c);

/* A closing connection, within CLOSE_LINGER_MS. What the client still sends is read and dropped. So it is not
 * met with a broken pipe before it reads the Error. And closing with unread input does not reset the
 * connection. */
static void on_closing_read(struct bufferevent *bev, void *arg)
{
	consumer *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
	if (util_now_ms() - c->last_send_ms >= CLOSE_LINGER_MS)
		consumer_free(c);
}

/* The Error is written. The client reads it, then the end of the stream. */
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
	consumer *c = arg;
	size_t partial = evbuffer_get_length(bufferevent_get_input(bev));
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	/* Every whole frame before it was handled. The start of a frame cannot be. */
	if (partial)
		log_warn(
		    "a subscriber's connection ended in the middle of a frame; the partial frame is dropped",
		    "consumer=%s pid=%ld bytes=%zu", c->name, (long)c->pid, partial);
	consumer_free(c);
}

/* Answers with an Error frame and closes once the client has had it, on this connection only. It leaves its
 * queue at once, so what it holds goes to the others now. Otherwise that would wait until (if ever) its peer
 * reads the Error. A peer that hangs up first still frees it (on_closing_event). A closing connection that
 * stayed forever, as the failover's active consumer, stalled the subscription. */
static void consumer_error(consumer *c, Cdc__V1__Error__Code code, const char *msg)
{
	if (c->closing)
		return;
	log_warn("closing a subscriber connection",
		 "consumer=%s pid=%ld uid=%ld subscription=%s error=\"%s\"", c->name, (long)c->pid,
		 (long)c->uid, c->q ? c->q->sub->name : "-", msg);
	Cdc__V1__Error e = CDC__V1__ERROR__INIT;
	e.code = code;
	e.message = (char *)msg;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_ERROR;
	f.error = &e;
	socket_conn_send_frame(c, &f);
	c->closing = true;
	c->s->nclosing++;
	if (c->q) {
		socket_queue_detach(c);
		socket_queue_append_consumer(&c->s->pending, c);
	}
	struct timeval linger = {.tv_sec = CLOSE_LINGER_MS / 1000, .tv_usec = CLOSE_LINGER_MS % 1000 * 1000};
	bufferevent_setcb(c->bev, on_closing_read, on_closing_written, on_closing_event, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	bufferevent_set_timeouts(c->bev, &linger, &linger);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

void socket_conn_heartbeat(consumer *c)
{
	Cdc__V1__Heartbeat h = CDC__V1__HEARTBEAT__INIT;
	h.head_offset = socket_spool_head(c->q->sp);
	h.acked_offset = socket_spool_acked(c->q->sp);
	h.active = socket_queue_is_active(c);
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_HEARTBEAT;
	f.heartbeat = &h;
	socket_conn_send_frame(c, &f);
}

/* Sends the Acked owed, unless c's output is over the high-water mark (then once it drains). */
void socket_conn_flush_reply(consumer *c)
{
	struct reply *r = &c->reply;
	if (!r->answered || !c->q || c->closing || socket_queue_out_full(c))
		return;
	Cdc__V1__Refused *v = util_xcalloc(r->n ? r->n : 1, sizeof(*v));
	Cdc__V1__Refused **pv = util_xcalloc(r->n ? r->n : 1, sizeof(*pv));
	for (size_t i = 0; i < r->n; i++) {
		v[i] = (Cdc__V1__Refused)CDC__V1__REFUSED__INIT;
		v[i].offset = r->offsets[i];
		v[i].reason = (Cdc__V1__Refused__Reason)r->reasons[i];
		pv[i] = &v[i];
	}
	Cdc__V1__Acked a = CDC__V1__ACKED__INIT;
	a.acked_offset = socket_spool_acked(c->q->sp);
	a.answered = r->answered;
	a.n_refused = r->n;
	a.refused = pv;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_ACKED;
	f.acked = &a;
	socket_conn_send_frame(c, &f);
	free(v);
	free(pv);
	r->answered = 0;
	r->n = 0;
}

/* The connection and what the consumer owns. Nothing else is told. */
void socket_conn_consumer_release(consumer *c)
{
	bufferevent_free(c->bev);
	free(c->starts.v);
	free(c->reply.offsets);
	free(c->reply.reasons);
	free(c);
}

static void consumer_free(consumer *c)
{
	log_info("subscriber disconnected", "consumer=%s pid=%ld subscription=%s in_flight=%u", c->name,
		 (long)c->pid, c->q ? c->q->sub->name : "-", c->in_flight);
	socket_sink *s = c->s;
	socket_queue_detach(c);
	s->nconnections--;
	s->nclosing -= c->closing;
	socket_conn_consumer_release(c);
}

static subscription *find(socket_sink *s, const char *name)
{
	for (size_t i = 0; i < s->nsubs; i++)
		if (s->subs[i]->set && strcmp(s->subs[i]->name, name) == 0)
			return s->subs[i];
	return NULL;
}

/* Whether c's peer may read sub's events (its dead letters with dead_letters). It always may without an allow
 * list. Else it may when its uid or one of its groups is listed (again, after a reload). A peer refused gets
 * PERMISSION_DENIED naming its uid and the subscription, and is counted. */
static bool admitted(consumer *c, subscription *sub, bool dead_letters, bool again)
{
	const socket_sub_settings *set = sub->set;
	net_peer peer;
	if (!set->restricted)
		return true;
	net_peer_of(bufferevent_getfd(c->bev), &peer);
	if (net_peer_in(&peer, &set->allow_uids, &set->allow_gids))
		return true;
	sub->denied += !again;
	buf msg = {0};
	net_peer_text(&peer, &msg);
	buf_printf(&msg,
		   " %s read %ssubscription %s: neither its uid nor its groups are in the subscription's "
		   "allow list (allow: uids, gids)",
		   again ? "no longer may" : "may not", dead_letters ? "the dead letters of " : "",
		   sub->name);
	consumer_error(c, CDC__V1__ERROR__CODE__PERMISSION_DENIED, msg.data);
	buf_free(&msg);
	return false;
}

void socket_conn_recheck_access(queue *q)
{
	for (consumer *c = q->consumers, *next; c; c = next) {
		next = c->next; /* a refused one leaves the list */
		admitted(c, q->sub, q->dead_letters, true);
	}
}

static void handle_subscribe(socket_sink *s, consumer *c, const Cdc__V1__Subscribe *m)
{
	subscription *sub = find(s, m->subscription);
	if (!sub) {
		bool other = false;
		for (size_t i = 0; i < s->nindex && !other; i++)
			other = strcmp(s->settings[i].name, m->subscription) == 0;
		char msg[512];
		snprintf(msg, sizeof(msg),
			 other ? "subscription %s does not deliver to the socket (its sink is another)"
			       : "no subscription named %s",
			 m->subscription);
		consumer_error(c,
			       other ? CDC__V1__ERROR__CODE__NOT_A_SOCKET_SUBSCRIPTION
				     : CDC__V1__ERROR__CODE__UNKNOWN_SUBSCRIPTION,
			       msg);
		return;
	}
	if (!admitted(c, sub, m->dead_letters, false))
		return;
	queue *q = m->dead_letters ? &sub->dead : &sub->q;
	if (m->consumer && m->consumer[0])
		snprintf(c->name, sizeof(c->name), "%s", m->consumer);
	uint32_t max = m->dead_letters ? 1000 : sub->set->max_unacked;
	c->max_unacked = m->max_unacked && m->max_unacked < max ? m->max_unacked : max;
	c->heartbeat_ms = m->heartbeat_ms ? m->heartbeat_ms : HEARTBEAT_DEFAULT_MS;
	c->window = WINDOW_START;
	c->rate_since_ms = util_now_ms();
	socket_queue_unlink_consumer(&s->pending, c);
	uint64_t next = q->consumers ? socket_queue_resume_at(q) : socket_queue_position(s, q, m);
	c->q = q;
	socket_queue_append_consumer(&q->consumers, c);
	q->nconsumers++;

	Cdc__V1__Subscribed a = CDC__V1__SUBSCRIBED__INIT;
	a.subscription = sub->name;
	a.mode = (Cdc__V1__ConsumerMode)socket_queue_mode(q);
	a.first_offset = socket_spool_first(q->sp);
	a.head_offset = socket_spool_head(q->sp);
	a.acked_offset = socket_spool_acked(q->sp);
	a.next_offset = next;
	a.max_unacked = c->max_unacked;
	a.active = socket_queue_is_active(c);
	a.batch_transaction = !q->dead_letters && sub->set->batch_transaction;
	Cdc__V1__ServerFrame f = CDC__V1__SERVER_FRAME__INIT;
	f.kind_case = CDC__V1__SERVER_FRAME__KIND_SUBSCRIBED;
	f.subscribed = &a;
	socket_conn_send_frame(c, &f);
	log_info("subscriber attached",
		 "consumer=%s pid=%ld uid=%ld subscription=%s dead_letters=%s next_offset=%llu active=%s",
		 c->name, (long)c->pid, (long)c->uid, sub->name, m->dead_letters ? "true" : "false",
		 (unsigned long long)next, a.active ? "true" : "false");
	socket_queue_dispatch(s, q);
}

/* *settle gets the queue an Ack or Nack changed, for socket_queue_settle once the read's frames are handled.
 */
static bool handle_frame(socket_sink *s, consumer *c, const uint8_t *msg, size_t len, queue **settle)
{
	char err[256];
	Cdc__V1__ClientFrame *f = socket_frame_decode_client(msg, len, err, sizeof(err));
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
		if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_PROGRESS) {
			socket_queue_handle_progress(c, f->progress);
		} else {
			*settle = c->q;
			if (f->kind_case == CDC__V1__CLIENT_FRAME__KIND_ACK)
				socket_queue_handle_ack(c, f->ack);
			else
				socket_queue_handle_nack(s, c, f->nack);
		}
	}
	socket_frame_client_free(f);
	return !c->closing;
}

static void on_consumer_read(struct bufferevent *bev, void *arg)
{
	consumer *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	char err[256];
	queue *settle = NULL;
	c->heard_ms = util_now_ms();
	while (!c->closing && evbuffer_get_length(in) >= FRAME_HEADER) {
		const uint8_t *msg;
		size_t msglen, consumed, avail = evbuffer_get_length(in);
		/* The length is checked before the frame is waited for. An oversized one is refused now. */
		frame_result r = socket_frame_next(evbuffer_pullup(in, FRAME_HEADER), FRAME_HEADER, FRAME_MAX,
						   &msg, &msglen, &consumed, err, sizeof(err));
		if (r == FRAME_MORE) {
			size_t whole = socket_frame_size(evbuffer_pullup(in, FRAME_HEADER));
			if (avail < whole)
				break;
			r = socket_frame_next(evbuffer_pullup(in, (ssize_t)whole), whole, FRAME_MAX, &msg,
					      &msglen, &consumed, err, sizeof(err));
		}
		if (r != FRAME_OK) {
			consumer_error(c, CDC__V1__ERROR__CODE__BAD_FRAME, err);
			break;
		}
		bool go_on = handle_frame(c->s, c, msg, msglen, &settle);
		evbuffer_drain(in, consumed);
		if (!go_on)
			break;
	}
	/* Also when c closed after its acks, since the queue outlives the connection. */
	if (settle)
		socket_queue_settle(c->s, settle);
	if (c->closing)
		return;
	/* Answered at once when the consumer may be waiting for it (nothing else in flight to it, or
	 * something refused). Else it is answered with the next tick. A consumer acking a stream of events
	 * one by one would otherwise be sent an Acked per ack, a fifth of the socket path's throughput. */
	if (!c->in_flight || c->reply.n)
		socket_conn_flush_reply(c);
}

/* The output drained to out_low, so a stalled consumer is dispatched to again. Its input is read all along. A
 * client that waits to send its acks before it reads must not deadlock. */
static void on_consumer_written(struct bufferevent *bev, void *arg)
{
	(void)bev;
	consumer *c = arg;
	if (!c->stalled)
		return;
	c->stalled = false;
	socket_conn_flush_reply(c);
	if (c->q && !c->closing)
		socket_queue_dispatch(c->s, c->q);
}

/* Closing connections fill their share of the table. One of them loses the rest of its linger (its Error is
 * written, or as much of it as it would read). A new connection counts more. */
static void shed_closing(socket_sink *s)
{
	consumer *c = s->pending; /* a closing connection has left its queue */
	while (c && !c->closing)
		c = c->next;
	if (!c)
		return;
	/* What is still buffered (the Error, usually) gets the one write the socket takes now. The
	 * bufferevent keeps its output to itself (frozen, so no evbuffer_write), but it can be peeked. */
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

/* The table is full. The oldest connection that has not subscribed yet gives way to c. If every other one has
 * subscribed, c is refused. Either is told so in an Error it can read. */
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

/* Connections that did not subscribe within subscribers.first_frame_timeout are closed, so
 * connections that never subscribe cannot fill the table. */
void socket_conn_check_first_frames(socket_sink *s, uint64_t now)
{
	char msg[96];
	snprintf(msg, sizeof(msg), "no Subscribe within %llu ms (subscribers.first_frame_timeout)",
		 (unsigned long long)s->first_frame_timeout_ms);
	for (consumer *c = s->pending; c; c = c->next)
		if (!c->closing && now - c->accepted_ms >= s->first_frame_timeout_ms)
			consumer_error(c, CDC__V1__ERROR__CODE__SUBSCRIBE_TIMEOUT, msg);
}

void socket_conn_on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr, int len,
			   void *arg)
{
	(void)l, (void)addr, (void)len;
	socket_sink *s = arg;
	net_peer cred;
	net_peer_of(fd, &cred); /* unknown is uid and gid (uid_t)-1, which no allow list holds */
	if (s->nconnections >= s->max_connections + MAX_CLOSING)
		shed_closing(s);
	consumer *c = util_xcalloc(1, sizeof(*c));
	c->s = s;
	c->uid = cred.uid;
	c->pid = cred.pid;
	c->accepted_ms = c->last_send_ms = c->read_ms = c->heard_ms = util_now_ms();
	c->connected_us = util_wall_us();
	snprintf(c->name, sizeof(c->name), "pid-%ld", (long)cred.pid);
	c->bev = bufferevent_socket_new(s->evb, fd, BEV_OPT_CLOSE_ON_FREE);
	bufferevent_setcb(c->bev, on_consumer_read, on_consumer_written, on_consumer_event, c);
	bufferevent_setwatermark(c->bev, EV_WRITE, s->out_low, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	socket_queue_append_consumer(&s->pending, c);
	s->nconnections++;
	log_info("subscriber connected", "pid=%ld uid=%ld gid=%ld", (long)cred.pid, (long)cred.uid,
		 (long)cred.gid);
	if (s->nconnections - s->nclosing > s->max_connections)
		make_room(s, c);
}

void socket_conn_close_consumers(queue *q, const char *why)
{
	while (q->consumers)
		consumer_error(q->consumers, CDC__V1__ERROR__CODE__SUBSCRIPTION_REMOVED,
			       why); /* detaches it */
}

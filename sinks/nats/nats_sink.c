/* The NATS JetStream sink (see nats_sink.h). libnats acknowledges publishes on its own threads. The
 * acknowledgements queue up under a mutex, and a pipe wakes the event loop. The loop counts them (poll)
 * against the transactions in flight, in commit order. */
#include "sinks/nats/nats_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nats/nats.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "decoder/base/ring.h"
#include "decoder/event.h"
#include "sinks/debezium.h"
#include "sinks/event_json.h"
#include "sinks/pbwire.h"

/* A transaction with publishes awaiting acknowledgement. */
typedef struct nats_txn {
	uint64_t seq, commit_lsn, outstanding;
	int64_t commit_time; /* for the commit-to-acknowledgement latency */
	uint64_t sent_ms;    /* its last publish, for ack_timeout */
} nats_txn;

/* One acknowledgement, as libnats' thread hands it over. */
typedef struct nats_ack {
	uint64_t commit_lsn;
	bool ok, duplicate;
	char error[200];
} nats_ack;

/* One connection's closure. Acknowledgements of an older connection are not counted. */
typedef struct nats_link {
	struct nats_sink *k;
	uint64_t generation;
} nats_link;

typedef struct nats_sub {
	char *name, *tag, *subject;
	int format;
	bool mine;	  /* a NATS subscription (the others' are never published) */
	bool cdc_headers; /* nats_sub_conf.cdc_headers */
	/* for format debezium */
	char *server_name;
	bool schemas, placeholder, context_headers;
} nats_sub;

typedef struct nats_sink {
	sink base;
	nats_conf conf; /* copies */
	nats_sub *subs;
	size_t nsubs;
	natsConnection *nc;
	natsStatistics *ncstats; /* nc's, read before each publish (same_connection) */
	jsCtx *js;
	nats_link *link; /* the connection's, while older ones are kept until free */
	nats_link **links;
	size_t nlinks;
	bool stream_ready; /* the stream was checked (or created) on this connection */
	int pipe[2];	   /* acknowledgements and connection events wake the loop */
	pthread_mutex_t mu;
	/* Under mu, what libnats' threads hand over. */
	nats_ack *acks;
	size_t nacks, capacks;
	bool connected, ever_connected;
	uint64_t reconnects;
	/* the loop's */
	ring q; /* of nats_txn, in seq order */
	uint64_t last_ended;
	/* After a restart, floor is what was delivered before it. That holds until a transaction after it
	 * ends (last_ended > restart_seq). The slot sends the rest again under new numbers. */
	uint64_t floor, restart_seq;
	bool failed;
	char failure[600];
	nats_stats stats;
	buf subject, value, msgid;
	struct {
		bool set;
		uint64_t commit_lsn;
		uint32_t xid_value;
		char lsn[LSN_STRLEN], xid[11];
	} commit; /* commit_texts */
	json_commit jcommit;
	json_cache json;
	/* for format debezium */
	dbz_scratch dbz;
	char *database; /* source.db */
} nats_sink;

/* The rendered form of an event. It is this header, the subject, the subscription's name, then count
 * messages. With count 0, nothing is published. */
typedef struct nats_rendered {
	uint32_t subject_len, sub_len;
	uint64_t lsn, schema_id;
	uint32_t xid;
	uint8_t op, format, count;
	bool cdc_headers;
} nats_rendered;
/* One message of a rendered event. It is this, its value without the commit's fields, then its own headers
 * ("NAME\0VALUE\0" each). */
typedef struct nats_part {
	uint32_t value_len, headers_len;
} nats_part;

static const char *const content_types[] = {[NATS_PROTOBUF] =
						"application/x-protobuf; messageType=cdc.v1.Event",
					    [NATS_JSON] = "application/json",
					    [NATS_DEBEZIUM] = "application/json"};

/* ---- subjects ---- */

/* What replaces a placeholder. The bytes a token cannot hold become '_', and so does nothing (a logical
 * message has no table). */
static void put_token(buf *out, const char *s)
{
	if (!s || !*s)
		buf_putc(out, '_');
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
		buf_putc(out,
			 *p <= ' ' || *p == '.' || *p == '*' || *p == '>' || *p == 0x7f ? '_' : (char)*p);
}

void nats_subject_name(buf *out, const char *tmpl, const char *schema, const char *table,
		       const char *subscription, const char *tag)
{
	static const char *const names[] = {"{schema}", "{table}", "{subscription}", "{tag}"};
	const char *values[] = {schema, table, subscription, tag};
	for (const char *p = tmpl; *p;) {
		size_t i;
		for (i = 0; i < 4 && strncmp(p, names[i], strlen(names[i])) != 0; i++)
			;
		if (i < 4) {
			put_token(out, values[i]);
			p += strlen(names[i]);
		} else
			buf_putc(out, *p++);
	}
}

bool nats_subject_covers(const char *stream_filter, const char *filter)
{
	const char *a = stream_filter, *b = filter;
	while (*a && *b) {
		size_t na = strcspn(a, "."), nb = strcspn(b, ".");
		if (na == 1 && *a == '>')
			return true;
		if (!(na == 1 && *a == '*') && (na != nb || strncmp(a, b, na) != 0))
			return false;
		a += na + (a[na] == '.');
		b += nb + (b[nb] == '.');
	}
	return !*a && !*b;
}

void nats_subject_filter(buf *out, const char *tmpl)
{
	for (const char *p = tmpl; *p;) {
		size_t n = strcspn(p, ".");
		buf_append(out, memchr(p, '{', n) ? "*" : p, memchr(p, '{', n) ? 1 : n);
		p += n;
		if (*p == '.')
			buf_putc(out, *p++);
	}
}

/* ---- what libnats' threads call ---- */

static void wake(nats_sink *k)
{
	ssize_t n = write(k->pipe[1], "", 1);
	(void)n; /* a full pipe wakes the loop already */
}

/* The commit LSN of a published message, from its Nats-Msg-Id (publish), which every message has; 0 if
 * none. */
static uint64_t published_commit(natsMsg *m)
{
	const char *id = NULL, *from, *to;
	char lsn[LSN_STRLEN];
	uint64_t v;
	if (natsMsgHeader_Get(m, "Nats-Msg-Id", &id) != NATS_OK || !(from = strchr(id, ':')) ||
	    !(to = strchr(++from, ':')) || (size_t)(to - from) >= sizeof(lsn))
		return 0;
	memcpy(lsn, from, (size_t)(to - from));
	lsn[to - from] = '\0';
	return util_lsn_parse(lsn, &v) ? v : 0;
}

static void on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	(void)js;
	nats_link *link = closure;
	nats_sink *k = link->k;
	nats_ack a = {
	    .ok = pa != NULL, .duplicate = pa && pa->Duplicate, .commit_lsn = published_commit(msg)};
	if (pae)
		snprintf(a.error, sizeof(a.error), "%s%s(%s, error code %d)",
			 pae->ErrText ? pae->ErrText : "", pae->ErrText ? " " : "",
			 natsStatus_GetText(pae->Err), (int)pae->ErrCode);
	natsMsg_Destroy(msg);
	bool first = false;
	pthread_mutex_lock(&k->mu);
	if (link == k->link) {
		if (k->nacks == k->capacks) {
			k->capacks = k->capacks ? 2 * k->capacks : 256;
			k->acks = util_xrealloc(k->acks, k->capacks * sizeof(*k->acks));
		}
		k->acks[k->nacks++] = a;
		first = k->nacks == 1;
	}
	pthread_mutex_unlock(&k->mu);
	/* Only the first of those the loop has not taken wakes it. A wake-up for each cost a write, a read
	 * and often a switch (perf stat, 200,000 publishes, three runs each: cdc's CPU 3.79-4.09 s against
	 * 3.52-3.68 s). */
	if (first)
		wake(k);
}

static void on_connection(natsConnection *nc, void *closure, bool up)
{
	(void)nc;
	nats_link *link = closure;
	nats_sink *k = link->k;
	pthread_mutex_lock(&k->mu);
	if (link == k->link) {
		k->reconnects += up && !k->connected && k->ever_connected;
		k->ever_connected |= up;
		k->connected = up;
	}
	pthread_mutex_unlock(&k->mu);
	wake(k);
}

static void on_connected(natsConnection *nc, void *closure)
{
	on_connection(nc, closure, true);
}

static void on_disconnected(natsConnection *nc, void *closure)
{
	on_connection(nc, closure, false);
}

/* ---- the connection ---- */

static void fail(nats_sink *k, const char *what, const char *why)
{
	if (!k->failed)
		snprintf(k->failure, sizeof(k->failure), "%s: %.500s", what, why);
	k->failed = true;
	k->stats.errors++;
	snprintf(k->stats.error, sizeof(k->stats.error), "%.100s: %.400s", what, why);
}

/* libnats' own words for status s (and its last error, which says more). */
static const char *status_text(natsStatus s, char *out, size_t n)
{
	const char *last = nats_GetLastError(NULL);
	snprintf(out, n, "%s%s%s", natsStatus_GetText(s), last && *last ? ": " : "", last ? last : "");
	return out;
}

natsStatus nats_set_access(natsOptions *opts, const nats_conf *conf)
{
	natsStatus s = NATS_OK;
	if (conf->credentials)
		s = natsOptions_SetUserCredentialsFromFiles(opts, conf->credentials, NULL);
	if (s == NATS_OK && conf->nkey_seed)
		s = natsOptions_SetNKeyFromSeed(opts, NULL, conf->nkey_seed);
	if (s == NATS_OK && conf->user)
		s = natsOptions_SetUserInfo(opts, conf->user, conf->password);
	if (s == NATS_OK && conf->token)
		s = natsOptions_SetToken(opts, conf->token);
	if (s == NATS_OK && (conf->tls || conf->tls_ca || conf->tls_cert))
		s = natsOptions_SetSecure(opts, true);
	if (s == NATS_OK && conf->tls_ca)
		s = natsOptions_LoadCATrustedCertificates(opts, conf->tls_ca);
	if (s == NATS_OK && conf->tls_cert)
		s = natsOptions_LoadCertificatesChain(opts, conf->tls_cert, conf->tls_key);
	return s;
}

static natsStatus set_options(nats_sink *k, natsOptions *o)
{
	const nats_conf *c = &k->conf;
	natsStatus s = natsOptions_SetURL(o, c->servers);
	if (s == NATS_OK)
		s = natsOptions_SetName(o, "cdc");
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(o, -1); /* for ever, while the slot waits */
	if (s == NATS_OK)
		s = natsOptions_SetReconnectWait(o, 1000);
	if (s == NATS_OK) /* a publish while reconnecting fails rather than waits for the next
			   * connection (see same_connection) */
		s = natsOptions_SetReconnectBufSize(o, 1);
	if (s == NATS_OK)
		s = natsOptions_SetRetryOnFailedConnect(o, true, on_connected, k->link);
	if (s == NATS_OK)
		s = natsOptions_SetReconnectedCB(o, on_connected, k->link);
	if (s == NATS_OK)
		s = natsOptions_SetDisconnectedCB(o, on_disconnected, k->link);
	return s == NATS_OK ? nats_set_access(o, c) : s;
}

static bool connect_nats(nats_sink *k, char *err, size_t errlen)
{
	char why[512];
	nats_link *link = util_xcalloc(1, sizeof(*link));
	*link = (nats_link){k, k->nlinks};
	k->links = util_xrealloc(k->links, (k->nlinks + 1) * sizeof(*k->links));
	k->links[k->nlinks++] = link;
	pthread_mutex_lock(&k->mu);
	k->link = link;
	k->connected = false;
	k->nacks = 0;
	pthread_mutex_unlock(&k->mu);
	natsOptions *o = NULL;
	natsStatus s = natsOptions_Create(&o);
	if (s == NATS_OK)
		s = set_options(k, o);
	if (s == NATS_OK) {
		s = natsConnection_Connect(&k->nc, o);
		if (s == NATS_NOT_YET_CONNECTED)
			s = NATS_OK; /* it goes on trying in the background */
	}
	if (s == NATS_OK) {
		jsOptions jo;
		jsOptions_Init(&jo);
		jo.PublishAsync.AckHandler = on_ack;
		jo.PublishAsync.AckHandlerClosure = link;
		/* room for what one delivery may send past busy() before it waits (deliver) */
		jo.PublishAsync.MaxPending = (int64_t)k->conf.max_in_flight * 2;
		s = natsConnection_JetStream(&k->js, k->nc, &jo);
	}
	natsOptions_Destroy(o);
	if (s == NATS_OK) {
		k->stream_ready = false;
		if (natsConnection_Status(k->nc) == NATS_CONN_STATUS_CONNECTED)
			on_connection(k->nc, link, true);
		return true;
	}
	util_errf(err, errlen, "nats: cannot set up the connection to %s: %s", k->conf.servers,
		  status_text(s, why, sizeof(why)));
	return false;
}

/* Drops the connection and whatever waits in it (the slot sends it again). */
static void disconnect(nats_sink *k)
{
	pthread_mutex_lock(&k->mu);
	k->link = NULL;
	k->connected = false;
	k->nacks = 0;
	pthread_mutex_unlock(&k->mu);
	if (k->js) {
		/* libnats 3.4 crashes in this call on a context that never published */
		natsMsgList pending = {0};
		if (k->stats.in_flight && js_PublishAsyncGetPendingList(&pending, k->js) == NATS_OK)
			natsMsgList_Destroy(&pending);
		jsCtx_Destroy(k->js);
	}
	if (k->nc) {
		natsConnection_Close(k->nc);
		natsConnection_Destroy(k->nc);
	}
	k->js = NULL;
	k->nc = NULL;
}

/* The stream must hold what cdc publishes. It is created when asked (create), else it must exist. */
static bool ensure_stream(nats_sink *k)
{
	if (k->stream_ready)
		return true;
	char why[512];
	jsErrCode code = 0;
	jsStreamInfo *si = NULL;
	natsStatus s = js_GetStreamInfo(&si, k->js, k->conf.stream, NULL, &code);
	if (s == NATS_OK) {
		jsStreamInfo_Destroy(si);
		k->stream_ready = true;
		return true;
	}
	if (code != JSStreamNotFoundErr && s != NATS_NOT_FOUND) {
		fail(k, "cannot read the stream's information", status_text(s, why, sizeof(why)));
		return false;
	}
	if (!k->conf.create) {
		snprintf(why, sizeof(why),
			 "stream %s does not exist: create it (nats stream add), or set nats.create: true",
			 k->conf.stream);
		fail(k, "the stream is missing", why);
		return false;
	}
	/* Its subjects are each subscription's template and the schemas subject, each once. A filter another
	 * one covers is left out, since JetStream refuses overlapping subjects. */
	buf filters = {0};
	size_t n = 0, all = 0;
	const char **subjects = util_xcalloc(k->nsubs + 2, sizeof(*subjects));
	size_t *at = util_xcalloc(k->nsubs + 2, sizeof(*at));
	for (size_t i = 0; i <= k->nsubs; i++) {
		const char *tmpl = i == k->nsubs     ? k->conf.schemas_subject
				   : k->subs[i].mine ? k->subs[i].subject
						     : NULL;
		if (!tmpl)
			continue;
		at[all++] = filters.len;
		nats_subject_filter(&filters, tmpl);
		buf_putc(&filters, '\0');
	}
	for (size_t i = 0; i < all; i++) {
		const char *f = filters.data + at[i];
		bool covered = false;
		for (size_t j = 0; j < all && !covered; j++)
			covered = j != i && nats_subject_covers(filters.data + at[j], f) &&
				  (!nats_subject_covers(f, filters.data + at[j]) || j < i);
		if (!covered)
			subjects[n++] = f;
	}
	jsStreamConfig cfg;
	jsStreamConfig_Init(&cfg);
	cfg.Name = k->conf.stream;
	cfg.Subjects = subjects;
	cfg.SubjectsLen = (int)n;
	cfg.Duplicates = (int64_t)k->conf.duplicate_window_ms * 1000000;
	cfg.Storage = js_FileStorage;
	s = js_AddStream(&si, k->js, &cfg, NULL, &code);
	free(subjects);
	free(at);
	buf_free(&filters);
	if (s != NATS_OK) {
		fail(k, "cannot create the stream", status_text(s, why, sizeof(why)));
		return false;
	}
	log_info("nats: created the stream", "stream=%s duplicate_window_ms=%" PRIu64, k->conf.stream,
		 k->conf.duplicate_window_ms);
	jsStreamInfo_Destroy(si);
	k->stream_ready = true;
	return true;
}

static void fail_lost(nats_sink *k)
{
	fail(k, "the connection to the NATS server was lost",
	     "what was in flight may be lost with it: cdc sends again from what JetStream acknowledged");
}

/* Whether a publish now goes out on the connection the ones before it went out on. libnats reconnects on its
 * own. Publishes in flight when a connection is lost may be lost with it, while later ones, sent on the next
 * connection, are stored. A key's changes would then be out of order. So nothing is published on a connection
 * that was lost once (libnats counts its reconnections). The sink restarts and the slot sends again from what
 * JetStream acknowledged. */
static bool same_connection(nats_sink *k)
{
	uint64_t reconnects = 0;
	return natsConnection_Status(k->nc) == NATS_CONN_STATUS_CONNECTED &&
	       natsConnection_GetStats(k->nc, k->ncstats) == NATS_OK &&
	       natsStatistics_GetCounts(k->ncstats, NULL, NULL, NULL, NULL, &reconnects) == NATS_OK &&
	       reconnects == 0;
}

/* ---- transactions in flight ---- */

static nats_txn *txn_for(nats_sink *k, uint64_t seq, const sink_commit *c)
{
	nats_txn *last = k->q.len ? ring_at(&k->q, k->q.len - 1) : NULL;
	if (last && last->seq == seq)
		return last;
	nats_txn *t = ring_push(&k->q);
	*t = (nats_txn){.seq = seq, .commit_lsn = c->commit_lsn, .commit_time = c->commit_time};
	return t;
}

/* Drops the transactions at the front that are acknowledged and ended. */
static void settle(nats_sink *k)
{
	size_t n = 0;
	while (n < k->q.len) {
		const nats_txn *t = ring_at(&k->q, n);
		if (t->outstanding || t->seq > k->last_ended)
			break;
		n++;
	}
	ring_pop(&k->q, n);
}

static void count_ack(nats_sink *k, const nats_ack *a)
{
	nats_txn *t = NULL;
	for (size_t i = 0; i < k->q.len && !t; i++) {
		nats_txn *u = ring_at(&k->q, i);
		if (u->commit_lsn == a->commit_lsn && u->outstanding)
			t = u;
	}
	if (!t)
		return; /* of a transaction a restart forgot */
	k->stats.in_flight--;
	if (!a->ok) { /* the transaction stays undelivered */
		fail(k, "JetStream refused a message", a->error);
		return;
	}
	t->outstanding--;
	k->stats.delivered++;
	k->stats.duplicates += a->duplicate;
	k->stats.error[0] = '\0';
	int64_t us = util_wall_us() - t->commit_time;
	hist_add(&k->stats.latency, us > 0 ? (uint64_t)us : 0);
}

/* Counts what libnats' threads handed over. */
static void take_acks(nats_sink *k)
{
	char drain[64];
	while (read(k->pipe[0], drain, sizeof(drain)) > 0)
		;
	pthread_mutex_lock(&k->mu);
	nats_ack *acks = k->acks;
	size_t n = k->nacks;
	k->acks = NULL;
	k->nacks = k->capacks = 0;
	k->stats.connected = k->connected;
	k->stats.reconnects = k->reconnects;
	pthread_mutex_unlock(&k->mu);
	for (size_t i = 0; i < n; i++)
		count_ack(k, &acks[i]);
	free(acks);
	if (!k->stats.connected && k->stats.in_flight && !k->failed)
		fail_lost(k); /* rather than wait ack_timeout for what it took */
	settle(k);
}

/* An acknowledgement that takes longer than ack_timeout fails the publish. The server may have lost it (a
 * restart sends it again, and the duplicate window drops a copy it kept). */
static void check_timeouts(nats_sink *k)
{
	const nats_txn *t = k->q.len ? ring_at(&k->q, 0) : NULL;
	if (!t || !t->outstanding || k->failed || util_now_ms() - t->sent_ms < k->conf.ack_timeout_ms)
		return;
	char why[160];
	snprintf(why, sizeof(why), "%" PRIu64 " publish%s not acknowledged within %" PRIu64 " ms%s",
		 t->outstanding, t->outstanding == 1 ? "" : "es", k->conf.ack_timeout_ms,
		 k->stats.connected ? "" : " (not connected to any server)");
	fail(k, "JetStream did not answer", why);
}

/* Waits until fewer than max_in_flight publishes are unacknowledged, counting acknowledgements. */
static void wait_room(nats_sink *k)
{
	while (!k->failed && k->stats.in_flight >= k->conf.max_in_flight) {
		struct pollfd p = {.fd = k->pipe[0], .events = POLLIN};
		poll(&p, 1, 100);
		take_acks(k);
		check_timeouts(k);
	}
}

/* ---- the sink ---- */

/* Starts a message of a rendered event, and its value follows. Returns where it starts. */
static size_t part_begin(buf *out)
{
	size_t at = out->len;
	nats_part part = {0};
	buf_append(out, &part, sizeof(part));
	return at;
}

/* A header of the message being rendered, after its value. */
static void part_header(buf *out, const char *name, const char *value, size_t len)
{
	buf_append(out, name, strlen(name) + 1);
	buf_append(out, value, len);
	buf_putc(out, '\0');
}

/* Ends the message started at at. Its value ends at value_end, and its headers follow. */
static void part_end(buf *out, size_t at, size_t value_end)
{
	nats_part part = {.value_len = (uint32_t)(value_end - at - sizeof(part)),
			  .headers_len = (uint32_t)(out->len - value_end)};
	memcpy(out->data + at, &part, sizeof(part));
}

/* Debezium's records of an event as messages, with their values and Debezium's headers. NATS has no keys and
 * no compaction. So the key is in no message, and there are no tombstones. Returns how many messages. */
static uint8_t render_debezium(nats_sink *k, const nats_sub *s, const Cdc__V1__Event *e, buf *out)
{
	dbz_options o = {.server_name = s->server_name ? s->server_name : "cdc",
			 .database = k->database ? k->database : "",
			 .topic = k->subject.data,
			 .schemas = s->schemas,
			 .placeholder = s->placeholder};
	dbz_record recs[DBZ_RECORDS_MAX];
	size_t n = sink_debezium_records(&k->dbz, e, false, recs);
	dbz_header context[DBZ_CONTEXT_HEADERS];
	size_t ncontext = s->context_headers ? sink_debezium_context_headers(e, o.server_name, context) : 0;
	for (size_t i = 0; i < n; i++) {
		size_t at = part_begin(out);
		sink_debezium_value(out, &k->dbz, &o, e, recs[i].op, recs[i].before, recs[i].after);
		size_t value_end = out->len;
		if (recs[i].key_header)
			part_header(out, recs[i].key_header, recs[i].key_header_value->data,
				    recs[i].key_header_value->len);
		for (size_t j = 0; j < ncontext; j++)
			part_header(out, context[j].name, context[j].value, strlen(context[j].value));
		part_end(out, at, value_end);
	}
	return (uint8_t)n;
}

static void nats_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	nats_sink *k = (nats_sink *)base;
	static const nats_sub defaults = {.subject = NATS_DEFAULT_SUBJECT};
	const nats_sub *s = sub < k->nsubs ? &k->subs[sub] : &defaults;
	bool table_event = e->op == CDC__V1__OP__OP_SCHEMA || e->op == CDC__V1__OP__OP_DDL;
	buf_reset(&k->subject);
	/* Debezium's records carry their schemas. So its subscriptions publish no schema or DDL events. */
	if (table_event && k->conf.schemas_subject && s->format != NATS_DEBEZIUM)
		nats_subject_name(&k->subject, k->conf.schemas_subject, e->schema, e->table, e->subscription,
				  e->tag);
	else if (!table_event)
		nats_subject_name(&k->subject, s->subject ? s->subject : NATS_DEFAULT_SUBJECT, e->schema,
				  e->table, e->subscription, e->tag);
	nats_rendered r = {.subject_len = (uint32_t)k->subject.len,
			   .sub_len = (uint32_t)strlen(e->subscription),
			   .lsn = e->lsn,
			   .schema_id = e->schema_id,
			   .xid = e->xid,
			   .op = (uint8_t)e->op,
			   .format = (uint8_t)s->format,
			   .cdc_headers = s->cdc_headers};
	size_t at = out->len;
	buf_append(out, &r, sizeof(r));
	buf_append(out, k->subject.data, k->subject.len);
	buf_append(out, e->subscription, r.sub_len);
	if (!r.subject_len)
		return;
	if (s->format == NATS_DEBEZIUM) {
		r.count = render_debezium(k, s, e, out);
	} else {
		size_t part = part_begin(out);
		if (s->format == NATS_JSON)
			sink_json_event_head(out, &k->json, e);
		else
			sink_pb_put_event(out, e);
		part_end(out, part, out->len);
		r.count = 1;
	}
	memcpy(out->data + at, &r, sizeof(r));
}

/* The cdc-* headers and content-type, as Kafka's records have them. */
static natsStatus set_cdc_headers(nats_sink *k, natsMsg *m, const nats_rendered *r, const char *sub)
{
	char lsn[LSN_STRLEN], id[17], name[128];
	const char *op = pgo_event_op_name((Cdc__V1__Op)r->op);
	util_lsn_format(r->lsn, lsn);
	size_t n = r->sub_len < sizeof(name) - 1 ? r->sub_len : sizeof(name) - 1;
	memcpy(name, sub, n);
	name[n] = '\0';
	natsStatus s = natsMsgHeader_Set(m, "cdc-op", op ? op : "unknown");
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "cdc-lsn", lsn);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "cdc-subscription", name);
	if (s == NATS_OK && r->schema_id) {
		util_hex64(r->schema_id, id);
		s = natsMsgHeader_Set(m, "cdc-schema-id", id);
	}
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "cdc-commit-lsn", k->commit.lsn);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "cdc-xid", k->commit.xid);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, "content-type", content_types[r->format]);
	return s;
}

/* The message's headers: cdc's (unless the subscription has cdc_headers off), then its own ("NAME\0VALUE\0"
 * each, checked by deliver). */
static natsStatus set_headers(nats_sink *k, natsMsg *m, const nats_rendered *r, const char *sub,
			      const char *own, size_t own_len)
{
	natsStatus s = r->cdc_headers ? set_cdc_headers(k, m, r, sub) : NATS_OK;
	for (const char *p = own, *end = own + own_len; s == NATS_OK && p < end;) {
		const char *value = p + strlen(p) + 1;
		s = natsMsgHeader_Set(m, p, value);
		p = value + strlen(value) + 1;
	}
	return s;
}

/* Whether a message's own headers are whole, as pairs of NUL-terminated names and values. */
static bool headers_whole(const char *p, size_t len)
{
	size_t nuls = 0;
	for (size_t i = 0; i < len; i++)
		nuls += p[i] == '\0';
	return len == 0 || (p[len - 1] == '\0' && nuls % 2 == 0);
}

/* The value of a message with the commit's fields, in k->value. */
static void complete_value(nats_sink *k, int format, const char *head, size_t len, const nats_rendered *r,
			   const sink_commit *c)
{
	buf_reset(&k->value);
	if (format == NATS_DEBEZIUM) {
		dbz_fill fill = {.commit_lsn = c->commit_lsn,
				 .commit_time = c->commit_time,
				 .now = util_wall_us(),
				 .xid = r->xid};
		sink_debezium_complete(&k->value, head, len, &fill);
		return;
	}
	buf_append(&k->value, head, len);
	if (format == NATS_JSON) {
		sink_json_event_tail(&k->value, &k->jcommit, c->commit_lsn, c->tx_index, c->commit_time);
		k->value.len--; /* one object, not a line */
	} else {
		sink_pb_put_commit(&k->value, c);
	}
}

/* The commit's fields as header values, formatted once per transaction. With the message id's, printf was 7%
 * of the NATS path's instructions (callgrind). */
static void commit_texts(nats_sink *k, const sink_commit *c, uint32_t xid)
{
	if (k->commit.set && k->commit.commit_lsn == c->commit_lsn && k->commit.xid_value == xid)
		return;
	k->commit.set = true;
	k->commit.commit_lsn = c->commit_lsn;
	k->commit.xid_value = xid;
	util_lsn_format(c->commit_lsn, k->commit.lsn);
	snprintf(k->commit.xid, sizeof(k->commit.xid), "%" PRIu32, xid);
}

/* Publishes message nth (0 first) of an event. Its id is the change's position, so the same change sent again
 * after a restart has the same id: SUBSCRIPTION:COMMIT_LSN:TX_INDEX[:schema][:N]. */
static bool publish(nats_sink *k, const nats_rendered *r, const char *sub, const sink_commit *c, unsigned nth,
		    const char *own, size_t own_len)
{
	if (!same_connection(k)) {
		fail_lost(k);
		return false;
	}
	commit_texts(k, c, r->xid);
	buf_reset(&k->msgid);
	buf_append(&k->msgid, sub, r->sub_len);
	buf_putc(&k->msgid, ':');
	buf_puts(&k->msgid, k->commit.lsn);
	buf_putc(&k->msgid, ':');
	json_u64(&k->msgid, c->tx_index);
	if (c->before_change)
		buf_puts(&k->msgid, ":schema");
	if (nth) {
		buf_putc(&k->msgid, ':');
		json_u64(&k->msgid, nth + 1);
	}
	natsMsg *m = NULL;
	natsStatus s = natsMsg_Create(&m, k->subject.data, NULL, k->value.data, (int)k->value.len);
	if (s == NATS_OK)
		s = set_headers(k, m, r, sub, own, own_len);
	jsPubOptions po;
	jsPubOptions_Init(&po);
	po.MsgId = k->msgid.data;
	if (s == NATS_OK)
		s = js_PublishMsgAsync(k->js, &m, &po);
	natsMsg_Destroy(m); /* NULL once libnats took it */
	if (s != NATS_OK) {
		char why[512];
		fail(k, "a message could not be published", status_text(s, why, sizeof(why)));
		return false;
	}
	return true;
}

static bool nats_deliver(sink *base, uint32_t subscription, const char *data, size_t len,
			 const sink_commit *c, uint64_t seq, char *err, size_t errlen)
{
	(void)subscription;
	nats_sink *k = (nats_sink *)base;
	nats_rendered r;
	if (k->failed)
		return true; /* a restart is coming, and the slot sends this again */
	if (len < sizeof(r))
		return util_errf(err, errlen, "nats sink: rendered event of %zu bytes", len);
	memcpy(&r, data, sizeof(r));
	if (sizeof(r) + (size_t)r.subject_len + r.sub_len > len || r.format > NATS_DEBEZIUM)
		return util_errf(err, errlen, "nats sink: rendered event is corrupt");
	if (!r.count)
		return true; /* a schema or DDL event without nats.schemas_subject */
	const char *subject = data + sizeof(r), *sub = subject + r.subject_len, *p = sub + r.sub_len;
	const char *end = data + len;
	if (!ensure_stream(k))
		return true;
	buf_reset(&k->subject);
	buf_append(&k->subject, subject, r.subject_len);
	for (unsigned i = 0; i < r.count; i++) {
		wait_room(k); /* each message counts against max_in_flight */
		if (k->failed)
			return true;
		nats_part part;
		if ((size_t)(end - p) < sizeof(part))
			return util_errf(err, errlen, "nats sink: rendered event is corrupt");
		memcpy(&part, p, sizeof(part));
		const char *value = p + sizeof(part), *own = value + part.value_len;
		if ((size_t)(end - value) < (size_t)part.value_len + part.headers_len ||
		    !headers_whole(own, part.headers_len))
			return util_errf(err, errlen, "nats sink: rendered event is corrupt");
		p = own + part.headers_len;
		complete_value(k, r.format, value, part.value_len, &r, c);
		if (!publish(k, &r, sub, c, i, own, part.headers_len))
			return true;
		nats_txn *t = txn_for(k, seq, c);
		t->outstanding++;
		t->sent_ms = util_now_ms();
		k->stats.in_flight++;
	}
	return true;
}

static void nats_end_txn(sink *base, uint64_t seq)
{
	nats_sink *k = (nats_sink *)base;
	if (seq > k->last_ended)
		k->last_ended = seq;
	settle(k);
}

static sink_status nats_flush(sink *base, char *err, size_t errlen)
{
	nats_sink *k = (nats_sink *)base;
	take_acks(k);
	check_timeouts(k);
	if (!k->failed)
		return SINK_OK;
	util_errf(err, errlen, "nats: %s", k->failure);
	return SINK_RESTART;
}

/* Every transaction up to the one before the first unacknowledged is delivered. */
static uint64_t delivered_now(const nats_sink *k)
{
	const nats_txn *first = k->q.len ? ring_at(&k->q, 0) : NULL;
	return first && first->seq <= k->last_ended ? first->seq - 1 : k->last_ended;
}

static uint64_t nats_delivered(const sink *base)
{
	const nats_sink *k = (const nats_sink *)base;
	if (k->failed)
		return 0;
	return k->last_ended <= k->restart_seq ? k->floor : delivered_now(k);
}

static int nats_fd(const sink *base)
{
	return ((const nats_sink *)base)->pipe[0];
}

static void nats_poll(sink *base)
{
	take_acks((nats_sink *)base);
}

static bool nats_busy(const sink *base)
{
	const nats_sink *k = (const nats_sink *)base;
	return k->stats.in_flight >= k->conf.max_in_flight;
}

static bool nats_finish(sink *base, int timeout_ms)
{
	nats_sink *k = (nats_sink *)base;
	for (uint64_t until = util_now_ms() + (uint64_t)timeout_ms;
	     k->stats.in_flight && !k->failed && util_now_ms() < until;) {
		struct pollfd p = {.fd = k->pipe[0], .events = POLLIN};
		poll(&p, 1, 50);
		take_acks(k);
	}
	return !k->stats.in_flight && !k->failed;
}

static bool nats_restart(sink *base, char *err, size_t errlen)
{
	nats_sink *k = (nats_sink *)base;
	/* What was not acknowledged is not delivered. Not even when a keepalive comes before the slot sends
	 * it again. */
	if (k->last_ended > k->restart_seq)
		k->floor = delivered_now(k);
	k->restart_seq = k->last_ended;
	disconnect(k);
	ring_clear(&k->q);
	k->failed = false;
	k->stats.in_flight = 0;
	k->stats.restarts++;
	return connect_nats(k, err, errlen);
}

static void conf_copy(nats_conf *to, const nats_conf *from)
{
	*to = *from;
	char **strings[] = {&to->servers,   &to->stream,   &to->schemas_subject, &to->credentials,
			    &to->nkey_seed, &to->user,	   &to->password,	 &to->token,
			    &to->tls_ca,    &to->tls_cert, &to->tls_key};
	for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
		*strings[i] = *strings[i] ? util_xstrdup(*strings[i]) : NULL;
}

static void conf_free(nats_conf *c)
{
	char *strings[] = {c->servers,	c->stream, c->schemas_subject, c->credentials, c->nkey_seed, c->user,
			   c->password, c->token,  c->tls_ca,	       c->tls_cert,    c->tls_key};
	for (size_t i = 0; i < sizeof strings / sizeof *strings; i++)
		free(strings[i]);
}

static void subs_free(nats_sink *k)
{
	for (size_t i = 0; i < k->nsubs; i++) {
		free(k->subs[i].name);
		free(k->subs[i].tag);
		free(k->subs[i].subject);
		free(k->subs[i].server_name);
	}
	free(k->subs);
	k->subs = NULL;
	k->nsubs = 0;
}

static void nats_free(sink *base)
{
	nats_sink *k = (nats_sink *)base;
	disconnect(k);
	for (size_t i = 0; i < k->nlinks; i++)
		free(k->links[i]);
	free(k->links);
	subs_free(k);
	conf_free(&k->conf);
	ring_free(&k->q);
	free(k->acks);
	buf_free(&k->subject);
	buf_free(&k->value);
	buf_free(&k->msgid);
	sink_json_commit_free(&k->jcommit);
	sink_debezium_scratch_free(&k->dbz);
	free(k->database);
	if (k->ncstats)
		natsStatistics_Destroy(k->ncstats);
	close(k->pipe[0]);
	close(k->pipe[1]);
	pthread_mutex_destroy(&k->mu);
	free(k);
}

static const sink_ops nats_ops = {
    .name = "nats",
    .render = nats_render,
    .deliver = nats_deliver,
    .end_txn = nats_end_txn,
    .flush = nats_flush,
    .delivered = nats_delivered,
    .free = nats_free,
    .fd = nats_fd,
    .poll = nats_poll,
    .busy = nats_busy,
    .finish = nats_finish,
    .restart = nats_restart,
};

void nats_sink_bind(sink *s, const sink_sub *subs, size_t nsubs)
{
	nats_sink *k = (nats_sink *)s;
	subs_free(k);
	k->subs = util_xcalloc(nsubs ? nsubs : 1, sizeof(*k->subs));
	k->nsubs = nsubs;
	for (size_t i = 0; i < nsubs; i++) {
		const nats_sub_conf *c = subs[i].settings;
		k->subs[i] =
		    (nats_sub){.name = util_xstrdup(subs[i].name),
			       .tag = subs[i].tag ? util_xstrdup(subs[i].tag) : NULL,
			       .subject = util_xstrdup(c->subject ? c->subject : NATS_DEFAULT_SUBJECT),
			       .format = c->format,
			       .mine = subs[i].mine,
			       .cdc_headers = c->cdc_headers,
			       .server_name = c->dbz.server_name ? util_xstrdup(c->dbz.server_name) : NULL,
			       .schemas = c->dbz.schemas,
			       .placeholder = c->dbz.unchanged_toast == DBZ_TOAST_PLACEHOLDER,
			       .context_headers = c->dbz.context_headers};
	}
	k->stream_ready = false; /* new subjects, so the stream is checked again */
}

sink *nats_sink_new(const nats_conf *conf, const sink_sub *subs, size_t nsubs, char *err, size_t errlen)
{
	nats_sink *k = util_xcalloc(1, sizeof(*k));
	k->base.ops = &nats_ops;
	k->q = RING_INIT(nats_txn);
	conf_copy(&k->conf, conf);
	pthread_mutex_init(&k->mu, NULL);
	nats_sink_bind(&k->base, subs, nsubs);
	if (natsStatistics_Create(&k->ncstats) != NATS_OK) {
		util_errf(err, errlen, "nats sink: out of memory");
		k->pipe[0] = k->pipe[1] = -1;
		nats_free(&k->base);
		return NULL;
	}
	if (pipe2(k->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		util_errf(err, errlen, "nats sink: pipe: %s", strerror(errno));
		k->pipe[0] = k->pipe[1] = -1;
		nats_free(&k->base);
		return NULL;
	}
	if (!connect_nats(k, err, errlen)) {
		nats_free(&k->base);
		return NULL;
	}
	return &k->base;
}

void nats_sink_set_database(sink *sk, const char *name)
{
	nats_sink *k = (nats_sink *)sk;
	free(k->database);
	k->database = name ? util_xstrdup(name) : NULL;
}

const nats_stats *nats_sink_stats(const sink *s)
{
	return &((const nats_sink *)s)->stats;
}

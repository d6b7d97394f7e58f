/* kafka_sink.c: the Kafka sink; see kafka_sink.h. Delivery reports come through librdkafka's
 * main queue, which signals a pipe the daemon's event loop watches: no thread, no busy poll.
 * Transactions in flight are tracked in commit order with a count of unacknowledged messages. */
#include "sinks/kafka_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/log.h"
#include "decoder/pgoutput.h"
#include "decoder/ring.h"
#include "sinks/kafka_position.h"
#include "sinks/pbwire.h"

/* Stop reading the slot once this share of librdkafka's queue (queue.buffering.max.messages or
 * queue.buffering.max.kbytes) is in use; a transaction being delivered may still fill the rest. */
#define BUSY_SHARE 2

/* cdc's producer defaults (kafka.properties override each): a queue bounded in messages and bytes,
 * so memory stays flat whatever the size of a transaction (librdkafka's own limits, 100,000
 * messages and 1 GiB, let one large transaction take hundreds of MiB), and a short linger, so a
 * busy stream fills batches while a quiet one is not held back. No compression: lz4 cost 2.5 CPU
 * seconds per million events on the broker threads, the bottleneck of a large transaction's
 * delivery (bench, mock cluster). README "Kafka" documents them. */
static const kafka_property producer_defaults[] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {"client.id", "cdc"},
    {"linger.ms", "5"},
    {"batch.num.messages", "10000"},
    {"queue.buffering.max.messages", "10000"},
    {"queue.buffering.max.kbytes", "16384"},
};

/* Exactly once: added to the defaults. A Kafka transaction holds at least one whole source
 * transaction, so its timeout bounds the largest one; the brokers' transaction.max.timeout.ms
 * (15 minutes by default) must allow it. */
static const kafka_property transactional_defaults[] = {
    {"transaction.timeout.ms", "600000"},
};

/* Exactly once: the blocking calls' limits. A commit call returns after COMMIT_CALL_MS at most and
 * resumes at the next flush (the event loop is never held longer); the start waits for the
 * brokers as long as a producer would for a message. */
#define INIT_TIMEOUT_MS 30000
#define COMMIT_CALL_MS 100
#define ABORT_TIMEOUT_MS 30000

/* A transaction with messages in flight. */
typedef struct kafka_txn {
	uint64_t seq;
	uint64_t outstanding;
	int64_t commit_time; /* for the commit-to-delivery latency */
} kafka_txn;

typedef struct table_count {
	char *schema, *table;
	uint64_t events;
} table_count;

typedef struct kafka_sink {
	sink base;
	/* copies of the settings last bound */
	kafka_sink_settings set;
	kafka_sub_settings *subs;
	size_t nsubs;
	rd_kafka_t *rk;
	int pipe[2]; /* the main queue's event signal */
	size_t busy_at, busy_bytes;
	uint64_t queued_bytes; /* keys and values in librdkafka's queue, as its kbytes limit counts */
	bool own_gapless;      /* cdc set enable.gapless.guarantee, not kafka.properties */

	ring q; /* of kafka_txn, in seq order */
	uint64_t last_ended;

	bool failed;
	char failure[1100];
	kafka_stats stats;

	/* The transaction being delivered, for its transactions_topic record. */
	uint64_t cur_seq;
	uint32_t cur_xid;
	sink_commit cur_commit;
	table_count *tables;
	size_t ntables, captables;
	uint64_t cur_events;

	buf value; /* one message value: rendered head + commit tail */

	/* Exactly once (set.exactly_once). */
	char tid[256]; /* the producer's transactional.id */
	buf held;      /* what arrived while a commit was under way (held_hdr, data), in order */
	struct kafka_eo {
		bool ready;		/* transactions initialised, position read back */
		bool open;		/* a Kafka transaction is open */
		bool committing;	/* its commit is under way: nothing may be produced */
		bool position_sent;	/* ... and its position record is produced */
		uint64_t position;	/* commit LSN of the newest source transaction Kafka holds */
		uint64_t committed_seq; /* every seq up to it is committed (or had nothing for Kafka) */
		uint64_t commit_seq;	/* last_ended when the commit began */
		uint64_t opened_ms, events;
		/* the newest source transaction in the open Kafka transaction */
		uint64_t last_seq;
		sink_commit last;
		uint32_t last_xid;
		uint64_t skipped_seq;
		bool skip_logged;
		/* per source transaction in the open Kafka transaction: the latency is to its commit */
		struct eo_source {
			int64_t commit_time;
			uint64_t events;
		} * sources;
		size_t nsources, capsources;
	} eo;
} kafka_sink;

/* The rendered form (sink-private, may be spilled to disk): a header, then the fields, then the
 * packed cdc.v1.Event without its commit fields. */
typedef struct rendered {
	uint32_t topic_len, key_len, prev_key_len, sub_len, schema_len, table_len;
	uint32_t xid;
	uint64_t lsn;
	uint8_t op, tombstone; /* tombstone: after a delete; for prev_key when an update changed the key */
} rendered;

/* Exactly once: one delivery (or, with end set, one end_txn) held while a commit is under way. */
typedef struct held_hdr {
	uint64_t seq;
	sink_commit c;
	uint32_t sub, len;
	bool end;
} held_hdr;

/* ---- small helpers ---- */

static const char *op_header(int op)
{
	switch (op) {
	case CDC__V1__OP__OP_INSERT:
		return "insert";
	case CDC__V1__OP__OP_UPDATE:
		return "update";
	case CDC__V1__OP__OP_DELETE:
		return "delete";
	case CDC__V1__OP__OP_TRUNCATE:
		return "truncate";
	case CDC__V1__OP__OP_MESSAGE:
		return "message";
	case CDC__V1__OP__OP_READ:
		return "read";
	}
	return "unknown";
}

/* Kafka topic names allow [A-Za-z0-9._-]; other bytes of schema or table names become '_'. */
static void put_topic_part(buf *b, const char *s)
{
	for (; *s; s++) {
		char c = *s;
		bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '_' || c == '-';
		buf_putc(b, ok ? c : '_');
	}
}

static void expand_topic(buf *b, const char *tmpl, const Cdc__V1__Event *e)
{
	static const struct {
		const char *name;
		size_t len;
	} vars[] = {{"{schema}", 8}, {"{table}", 7}, {"{subscription}", 14}, {"{tag}", 5}};
	while (*tmpl) {
		size_t i;
		for (i = 0; i < 4; i++)
			if (strncmp(tmpl, vars[i].name, vars[i].len) == 0)
				break;
		if (i == 4) {
			buf_putc(b, *tmpl++);
			continue;
		}
		const char *v = i == 0	 ? e->schema
				: i == 1 ? e->table
				: i == 2 ? e->subscription
				: e->tag ? e->tag
					 : "";
		put_topic_part(b, v);
		tmpl += vars[i].len;
	}
}

/* ---- in-flight transactions ---- */

/* The in-flight entry of transaction seq. Entries are in seq order: producing appends to the
 * newest, delivery reports mostly come for the oldest, so look at both ends, then bisect. */
static kafka_txn *txn_find(kafka_sink *k, uint64_t seq)
{
	size_t lo = 0, hi = k->q.len;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		kafka_txn *t = ring_at(&k->q, mid);
		if (t->seq == seq)
			return t;
		if (t->seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static kafka_txn *txn_entry(kafka_sink *k, uint64_t seq)
{
	kafka_txn *last = k->q.len ? ring_at(&k->q, k->q.len - 1) : NULL;
	if (last && last->seq == seq)
		return last;
	kafka_txn *t = ring_push(&k->q);
	*t = (kafka_txn){.seq = seq, .commit_time = k->cur_commit.commit_time};
	return t;
}

static void settle(kafka_sink *k)
{
	size_t n = 0;
	while (n < k->q.len) {
		const kafka_txn *t = ring_at(&k->q, n);
		if (t->outstanding || t->seq > k->last_ended)
			break;
		n++;
	}
	ring_pop(&k->q, n);
}

/* ---- librdkafka callbacks ---- */

static void fail(kafka_sink *k, const char *what, const char *reason)
{
	if (!k->failed)
		snprintf(k->failure, sizeof(k->failure), "%s: %s", what, reason);
	k->failed = true;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	kafka_sink *k = opaque;
	uint64_t seq = (uint64_t)(uintptr_t)m->_private;
	kafka_txn *first = k->q.len ? ring_at(&k->q, 0) : NULL;
	kafka_txn *t = first && first->seq == seq ? first : txn_find(k, seq);
	if (t && t->outstanding)
		t->outstanding--;
	k->stats.in_flight--;
	k->queued_bytes -= m->len + m->key_len;
	if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT)
		return; /* an aborted Kafka transaction's: the slot sends it again */
	if (m->err) {
		/* librdkafka has retried already: this message is lost to the broker. */
		k->stats.errors++;
		fail(k, "a message could not be delivered", rd_kafka_err2str(m->err));
		return;
	}
	k->stats.delivered++;
	k->stats.brokers_down = false;
	if (t && !k->set.exactly_once) { /* exactly once: visible at the Kafka commit, counted there */
		int64_t us = wall_us() - t->commit_time;
		hist_add(&k->stats.latency, us > 0 ? (uint64_t)us : 0);
	}
	settle(k);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	kafka_sink *k = opaque;
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		char why[512];
		/* A failed batch stops the producer by design (enable.gapless.guarantee): say so. */
		bool gap = rd_kafka_fatal_error(rk, why, sizeof(why)) == RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE;
		fail(k, gap ? "a message could not be delivered" : "fatal producer error", why);
		return;
	}
	/* Transient (brokers down, ...): librdkafka retries; the slot waits for delivery reports. */
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		k->stats.brokers_down = true;
	log_warn("kafka", "error=%s reason=\"%s\"", rd_kafka_err2name(err), reason);
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *text)
{
	const kafka_sink *k = rd_kafka_opaque(rk);
	/* librdkafka 2.0.2 calls every set experimental property out at each start. cdc sets
	 * enable.gapless.guarantee itself, on purpose (see producer_new and the README): a warning the
	 * user can do nothing about is noise. Set in kafka.properties, it is the user's, and warned. */
	if (k && k->own_gapless && strcmp(fac, "CONFWARN") == 0 &&
	    strstr(text, "enable.gapless.guarantee is experimental"))
		return;
	if (level <= 4)
		log_warn("kafka client", "facility=%s message=\"%s\"", fac, text);
	else
		log_debug("kafka client", "facility=%s message=\"%s\"", fac, text);
}

/* ---- producer lifecycle ---- */

static bool set(rd_kafka_conf_t *conf, const char *key, const char *value, char *err, size_t errlen)
{
	char why[512];
	if (rd_kafka_conf_set(conf, key, value, why, sizeof(why)) == RD_KAFKA_CONF_OK)
		return true;
	/* The value is not repeated: it may be a secret. */
	return errf(err, errlen, "kafka property %s: %s", key, why);
}

static bool producer_new(kafka_sink *k, char *err, size_t errlen)
{
	char why[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	/* cdc's defaults first; kafka.properties override them. */
	bool ok = set(conf, "bootstrap.servers", k->set.brokers, err, errlen);
	for (size_t i = 0; ok && i < sizeof(producer_defaults) / sizeof(producer_defaults[0]); i++)
		ok = set(conf, producer_defaults[i].key, producer_defaults[i].value, err, errlen);
	if (k->set.exactly_once) {
		ok = ok && set(conf, "transactional.id", k->set.transactional_id, err, errlen);
		for (size_t i = 0;
		     ok && i < sizeof(transactional_defaults) / sizeof(transactional_defaults[0]); i++)
			ok = set(conf, transactional_defaults[i].key, transactional_defaults[i].value, err,
				 errlen);
	}
	bool gapless_set = false;
	for (size_t i = 0; ok && i < k->set.nproperties; i++) {
		ok = set(conf, k->set.properties[i].key, k->set.properties[i].value, err, errlen);
		gapless_set |= strcmp(k->set.properties[i].key, "enable.gapless.guarantee") == 0;
	}
	/* A batch that fails for good must stop the producer (a fatal error: the sink restarts and the
	 * slot sends the failed messages again). Otherwise librdkafka goes on delivering the batches
	 * queued behind it, and the failed messages, sent again, land after later changes of the same
	 * rows: a row's versions would go backwards in its partition. A transactional producer aborts
	 * instead. */
	char idem[16];
	size_t idemlen = sizeof(idem);
	if (ok && !gapless_set && !k->set.exactly_once &&
	    rd_kafka_conf_get(conf, "enable.idempotence", idem, &idemlen) == RD_KAFKA_CONF_OK &&
	    strcmp(idem, "true") == 0) {
		ok = set(conf, "enable.gapless.guarantee", "true", err, errlen);
		k->own_gapless = true;
	}
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return false;
	}
	char max[32];
	size_t maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "queue.buffering.max.messages", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->busy_at = strtoull(max, NULL, 10) / BUSY_SHARE;
	maxlen = sizeof(max);
	if (rd_kafka_conf_get(conf, "queue.buffering.max.kbytes", max, &maxlen) == RD_KAFKA_CONF_OK)
		k->busy_bytes = strtoull(max, NULL, 10) * 1024 / BUSY_SHARE;
	rd_kafka_conf_set_opaque(conf, k);
	rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
	rd_kafka_conf_set_error_cb(conf, on_error);
	rd_kafka_conf_set_log_cb(conf, on_log);
	k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	if (!k->rk) {
		rd_kafka_conf_destroy(conf);
		return errf(
		    err, errlen,
		    "cannot create the Kafka producer: %s (kafka.properties go to librdkafka as they are; "
		    "its own messages above name the file or setting)",
		    why);
	}
	rd_kafka_queue_t *q = rd_kafka_queue_get_main(k->rk);
	rd_kafka_queue_io_event_enable(q, k->pipe[1], "1", 1);
	rd_kafka_queue_destroy(q);
	size_t tidlen = sizeof(k->tid);
	if (rd_kafka_conf_get(rd_kafka_conf(k->rk), "transactional.id", k->tid, &tidlen) != RD_KAFKA_CONF_OK)
		k->tid[0] = '\0';
	return true;
}

static void tables_clear(kafka_sink *k)
{
	for (size_t i = 0; i < k->ntables; i++) {
		free(k->tables[i].schema);
		free(k->tables[i].table);
	}
	k->ntables = 0;
	k->cur_events = 0;
}

/* ---- sink operations ---- */

/* The key columns as the new row has them (an update may change the key); a key column the row
 * does not carry, or carries as unchanged TOAST, keeps its old value. */
static Cdc__V1__Column **new_key_columns(const Cdc__V1__Event *e, Cdc__V1__Column **cols)
{
	for (size_t i = 0; i < e->key->n_columns; i++) {
		cols[i] = e->key->columns[i];
		for (size_t j = 0; e->new_row && j < e->new_row->n_columns; j++) {
			const Cdc__V1__Column *c = e->new_row->columns[j];
			if (strcmp(c->name, cols[i]->name) == 0 && c->value &&
			    c->value->kind_case != CDC__V1__VALUE__KIND_UNCHANGED_TOAST)
				cols[i] = (Cdc__V1__Column *)c;
		}
	}
	return cols;
}

static void kafka_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	kafka_sink *k = (kafka_sink *)base;
	const kafka_sub_settings *s = sub < k->nsubs ? &k->subs[sub] : NULL;
	buf topic = {0};
	expand_topic(&topic, s && s->topic ? s->topic : "cdc.{schema}.{table}", e);

	/* The message is keyed by the row's key after the change, so a compacted topic holds each
	 * row under its current key; an update that changed the key also tombstones the old one. */
	Cdc__V1__Key key = CDC__V1__KEY__INIT, prev = CDC__V1__KEY__INIT;
	key.schema = prev.schema = e->schema;
	key.table = prev.table = e->table;
	Cdc__V1__Column *cols[PGO_MAX_COLUMNS];
	if (e->key) {
		prev.n_columns = key.n_columns = e->key->n_columns;
		prev.columns = e->key->columns;
		key.columns = e->op == CDC__V1__OP__OP_UPDATE ? new_key_columns(e, cols) : e->key->columns;
	}
	/* Only an update can move a row to another key: only then is the key before it packed too. */
	bool update = e->op == CDC__V1__OP__OP_UPDATE;
	size_t key_len = cdc__v1__key__get_packed_size(&key),
	       prev_len = update ? cdc__v1__key__get_packed_size(&prev) : 0;
	buf keys = {0};
	buf_reserve(&keys, key_len + prev_len);
	keys.len = cdc__v1__key__pack(&key, (uint8_t *)keys.data);
	if (update)
		keys.len += cdc__v1__key__pack(&prev, (uint8_t *)keys.data + keys.len);
	bool moved = update && (key_len != prev_len || memcmp(keys.data, keys.data + key_len, key_len) != 0);
	rendered r = {
	    .topic_len = (uint32_t)topic.len,
	    .key_len = (uint32_t)key_len,
	    .prev_key_len = moved ? (uint32_t)prev_len : 0,
	    .sub_len = (uint32_t)strlen(e->subscription),
	    .schema_len = (uint32_t)strlen(e->schema),
	    .table_len = (uint32_t)strlen(e->table),
	    .xid = e->xid,
	    .lsn = e->lsn,
	    .op = (uint8_t)e->op,
	    .tombstone = s && s->tombstones && (e->op == CDC__V1__OP__OP_DELETE || moved),
	};
	size_t value_len = cdc__v1__event__get_packed_size(e);
	buf_append(out, &r, sizeof(r));
	buf_append(out, topic.data, topic.len);
	buf_append(out, keys.data, key_len + r.prev_key_len);
	buf_free(&keys);
	buf_append(out, e->subscription, r.sub_len);
	buf_append(out, e->schema, r.schema_len);
	buf_append(out, e->table, r.table_len);
	buf_reserve(out, value_len);
	out->len += cdc__v1__event__pack(e, (uint8_t *)out->data + out->len);
	buf_free(&topic);
}

/* Produces one message, waiting while librdkafka's queue is full (the daemon stops reading before
 * that, but one large transaction can fill it alone). */
static bool produce(kafka_sink *k, const char *topic, int32_t partition, const void *key, size_t key_len,
		    const void *value, size_t value_len, rd_kafka_headers_t *h, uint64_t seq)
{
	for (;;) {
		rd_kafka_resp_err_t err = rd_kafka_producev(
		    k->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(partition),
		    RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)value, value_len),
		    RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
		    RD_KAFKA_V_OPAQUE((void *)(uintptr_t)seq), RD_KAFKA_V_END);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
			txn_entry(k, seq)->outstanding++;
			k->stats.in_flight++;
			k->queued_bytes += key_len + value_len;
			return true;
		}
		if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || k->failed) {
			rd_kafka_headers_destroy(h);
			fail(k, "a message could not be queued", rd_kafka_err2str(err));
			return false;
		}
		rd_kafka_poll(k->rk, 100);
	}
}

static rd_kafka_headers_t *headers(const rendered *r, const char *sub, uint64_t commit_lsn, const char *type)
{
	char lsn[LSN_STRLEN], commit[LSN_STRLEN], xid[16];
	lsn_format(r->lsn, lsn);
	lsn_format(commit_lsn, commit);
	snprintf(xid, sizeof(xid), "%" PRIu32, r->xid);
	rd_kafka_headers_t *h = rd_kafka_headers_new(6);
	if (type[0] == 'E') { /* events; the transaction record has only the commit's */
		rd_kafka_header_add(h, "cdc-op", -1, op_header(r->op), -1);
		rd_kafka_header_add(h, "cdc-lsn", -1, lsn, -1);
		rd_kafka_header_add(h, "cdc-subscription", -1, sub, (ssize_t)r->sub_len);
	}
	rd_kafka_header_add(h, "cdc-commit-lsn", -1, commit, -1);
	rd_kafka_header_add(h, "cdc-xid", -1, xid, -1);
	char ct[96];
	snprintf(ct, sizeof(ct), "application/x-protobuf; messageType=cdc.v1.%s", type);
	rd_kafka_header_add(h, "content-type", -1, ct, -1);
	return h;
}

static void count_table(kafka_sink *k, const char *schema, size_t slen, const char *table, size_t tlen)
{
	k->cur_events++;
	for (size_t i = 0; i < k->ntables; i++)
		if (strlen(k->tables[i].schema) == slen && strlen(k->tables[i].table) == tlen &&
		    memcmp(k->tables[i].schema, schema, slen) == 0 &&
		    memcmp(k->tables[i].table, table, tlen) == 0) {
			k->tables[i].events++;
			return;
		}
	if (k->ntables == k->captables) {
		k->captables = k->captables ? k->captables * 2 : 8;
		k->tables = xrealloc(k->tables, k->captables * sizeof(*k->tables));
	}
	table_count *t = &k->tables[k->ntables++];
	t->schema = xmalloc(slen + 1);
	memcpy(t->schema, schema, slen);
	t->schema[slen] = '\0';
	t->table = xmalloc(tlen + 1);
	memcpy(t->table, table, tlen);
	t->table[tlen] = '\0';
	t->events = 1;
}

/* ---- exactly once ---- */

/* Once per producer, before its first message: fences every older producer with the same
 * transactional.id (the broker aborts what it left open) and reads back how far Kafka holds the
 * stream. */
static bool eo_prepare(kafka_sink *k)
{
	if (k->eo.ready)
		return true;
	rd_kafka_error_t *e = rd_kafka_init_transactions(k->rk, INIT_TIMEOUT_MS);
	if (e) {
		fail(k, "cannot start Kafka transactions", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
		return false;
	}
	char why[700];
	uint64_t position;
	if (!kafka_position_read(k->set.brokers, k->set.properties, k->set.nproperties,
				 k->set.positions_topic, k->tid, INIT_TIMEOUT_MS, &position, why,
				 sizeof(why))) {
		fail(k, "cannot read the committed position back from Kafka", why);
		return false;
	}
	/* The positions topic's leader now (a broker that may creates the topic), not at the first
	 * commit, which would wait for it after every event is acknowledged. */
	rd_kafka_topic_t *t = rd_kafka_topic_new(k->rk, k->set.positions_topic, NULL);
	const struct rd_kafka_metadata *md = NULL;
	if (rd_kafka_metadata(k->rk, 0, t, &md, INIT_TIMEOUT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(t);
	k->eo.ready = true;
	k->eo.position = k->stats.position = position;
	char lsn[LSN_STRLEN];
	lsn_format(position, lsn);
	log_info("exactly once: Kafka holds the stream up to the position read back",
		 "transactional_id=%s "
		 "positions_topic=%s position=%s",
		 k->tid, k->set.positions_topic, lsn);
	return true;
}

/* A source transaction Kafka holds already, or the open Kafka transaction does: the slot sends it
 * again after a crash between the Kafka commit and the slot's confirmation, or after the stream
 * broke while a Kafka transaction was open. Nothing of it is produced again. */
static bool eo_skip(kafka_sink *k, const sink_commit *c, uint64_t seq)
{
	uint64_t held = k->eo.open ? k->eo.last.commit_lsn : k->eo.position;
	if (c->commit_lsn > held)
		return false;
	k->stats.skipped += seq != k->eo.skipped_seq; /* once per source transaction */
	k->eo.skipped_seq = seq;
	if (!k->eo.skip_logged) {
		char lsn[LSN_STRLEN];
		lsn_format(c->commit_lsn, lsn);
		log_info("exactly once: skipping source transactions Kafka already holds", "commit_lsn=%s",
			 lsn);
	}
	k->eo.skip_logged = true;
	return true;
}

static void eo_committed(kafka_sink *k)
{
	int64_t now = wall_us();
	for (size_t i = 0; i < k->eo.nsources; i++) {
		int64_t us = now - k->eo.sources[i].commit_time;
		hist_add_n(&k->stats.latency, us > 0 ? (uint64_t)us : 0, k->eo.sources[i].events);
	}
	k->eo.nsources = 0;
	k->eo.open = k->eo.committing = false;
	k->eo.committed_seq = k->eo.commit_seq;
	k->eo.position = k->stats.position = k->eo.last.commit_lsn;
	k->stats.commits++;
}

static void eo_abort(kafka_sink *k)
{
	k->eo.nsources = 0;
	k->eo.open = k->eo.committing = false;
	k->stats.aborts++;
	rd_kafka_error_t *e = rd_kafka_abort_transaction(k->rk, ABORT_TIMEOUT_MS);
	if (e) {
		fail(k, "cannot abort the Kafka transaction", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
		return;
	}
	/* The purged messages' delivery reports, so the counts in flight come back to zero. */
	for (uint64_t until = now_ms() + ABORT_TIMEOUT_MS; rd_kafka_outq_len(k->rk) > 0 && now_ms() < until;)
		rd_kafka_poll(k->rk, 10);
	char lsn[LSN_STRLEN];
	lsn_format(k->eo.position, lsn);
	log_info("exactly once: aborted the Kafka transaction; the slot sends its source transactions again",
		 "position=%s", lsn);
}

/* Sends what is queued at once, not after linger.ms or librdkafka's wait to register the
 * transaction's partitions (about 45 ms against the mock, measured): a flush that does not wait
 * wakes the brokers' threads. */
static void send_now(kafka_sink *k)
{
	rd_kafka_flush(k->rk, 0);
}

/* The position record: the last of the Kafka transaction, produced once every other message of it
 * is acknowledged, so that wherever it can be read (a broker without transactions' isolation, as
 * the mock), every event before it can be too. */
static void eo_position_record(kafka_sink *k)
{
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.xid = k->eo.last_xid;
	t.commit_lsn = k->eo.last.commit_lsn;
	t.commit_time = k->eo.last.commit_time;
	t.events = k->eo.events;
	buf_reset(&k->value);
	buf_reserve(&k->value, cdc__v1__transaction__get_packed_size(&t));
	k->value.len = cdc__v1__transaction__pack(&t, (uint8_t *)k->value.data);
	rendered r = {.xid = t.xid};
	if (produce(k, k->set.positions_topic, 0, k->tid, strlen(k->tid), k->value.data, k->value.len,
		    headers(&r, "", t.commit_lsn, "Transaction"), k->last_ended))
		k->eo.position_sent = true;
	send_now(k);
}

/* Starts the commit of the open Kafka transaction. From now on nothing may be produced into it
 * until it ends: what arrives is held. */
static void eo_commit_start(kafka_sink *k)
{
	k->eo.committing = true;
	k->eo.position_sent = false;
	k->eo.commit_seq = k->last_ended;
	send_now(k);
}

/* Once the brokers acknowledged every event, the position record; once they acknowledged that, ends
 * the Kafka transaction (one round trip; a call that times out is resumed by the next). An
 * abortable failure aborts, a fatal one (fenced: a newer cdc with the same transactional.id took
 * over) fails the producer; either way the sink restarts. */
static void eo_commit_end(kafka_sink *k)
{
	if (k->stats.in_flight)
		return; /* their delivery reports call flush() again */
	if (!k->eo.position_sent) {
		eo_position_record(k);
		return;
	}
	rd_kafka_error_t *e = rd_kafka_commit_transaction(k->rk, COMMIT_CALL_MS);
	if (!e) {
		eo_committed(k);
		return;
	}
	if (rd_kafka_error_is_retriable(e)) {
		rd_kafka_error_destroy(e);
		return;
	}
	if (rd_kafka_error_txn_requires_abort(e)) {
		fail(k, "the Kafka transaction failed and is aborted", rd_kafka_error_string(e));
		eo_abort(k);
	} else if (rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR__FENCED) {
		fail(k,
		     "fenced: a newer producer with the same transactional.id (another cdc on this slot) "
		     "took over",
		     rd_kafka_error_string(e));
	} else {
		fail(k, "the Kafka transaction cannot commit", rd_kafka_error_string(e));
	}
	k->eo.open = k->eo.committing = false;
	rd_kafka_error_destroy(e);
}

/* Whether the open Kafka transaction should start its commit: it holds only whole source
 * transactions, and it is old or big enough (by default at once: transactions pile up while one
 * commits, so under load they grow by themselves), or force (a stop). */
static bool eo_due(const kafka_sink *k, bool force)
{
	if (!k->eo.open || k->eo.committing || k->failed)
		return false;
	if (k->cur_seq > k->last_ended) /* a source transaction is partly in it */
		return false;
	return force || now_ms() - k->eo.opened_ms >= k->set.commit_interval_ms ||
	       (k->set.commit_events && k->eo.events >= k->set.commit_events);
}

static void hold(kafka_sink *k, const held_hdr *h, const char *data)
{
	buf_append(&k->held, h, sizeof(*h));
	if (h->len)
		buf_append(&k->held, data, h->len);
}

static bool kafka_deliver(sink *base, uint32_t subscription, const char *data, size_t len,
			  const sink_commit *c, uint64_t seq, char *err, size_t errlen);
static void kafka_end_txn(sink *base, uint64_t seq);

/* After a commit: what was held goes out, in a new Kafka transaction. false: a delivery failed
 * for good (err). */
static bool eo_release(kafka_sink *k, char *err, size_t errlen)
{
	buf h = k->held;
	k->held = (buf){0};
	bool ok = true;
	for (size_t off = 0; ok && off < h.len && !k->failed;) {
		held_hdr hd;
		memcpy(&hd, h.data + off, sizeof(hd));
		off += sizeof(hd);
		if (hd.end)
			kafka_end_txn(&k->base, hd.seq);
		else
			ok =
			    kafka_deliver(&k->base, hd.sub, h.data + off, hd.len, &hd.c, hd.seq, err, errlen);
		off += hd.len;
	}
	buf_free(&k->held);
	buf_reset(&h);
	k->held = h; /* its room, for the next commit */
	return ok;
}

/* The exactly-once cycle, as far as it goes now: a due Kafka transaction starts its commit, a
 * commit whose messages are all acknowledged ends, and what was held meanwhile goes out in the
 * next transaction, which may be due at once. */
static bool eo_step(kafka_sink *k, bool force, char *err, size_t errlen)
{
	for (;;) {
		if (eo_due(k, force))
			eo_commit_start(k);
		if (k->eo.committing)
			eo_commit_end(k);
		if (k->eo.committing || k->failed || !k->held.len)
			return true;
		if (!eo_release(k, err, errlen))
			return false;
	}
}

/* Before producing an event of source transaction seq (commit c): false to leave it out. */
static bool eo_before_produce(kafka_sink *k, const sink_commit *c, uint32_t xid, uint64_t seq)
{
	if (!eo_prepare(k))
		return false;
	if (seq != k->eo.last_seq) { /* the first event of a source transaction */
		if (eo_skip(k, c, seq))
			return false;
		if (!k->eo.open) {
			rd_kafka_error_t *e = rd_kafka_begin_transaction(k->rk);
			if (e) {
				fail(k, "cannot begin a Kafka transaction", rd_kafka_error_string(e));
				rd_kafka_error_destroy(e);
				return false;
			}
			k->eo.open = true;
			k->eo.opened_ms = now_ms();
			k->eo.events = 0;
		}
		k->eo.last_seq = seq;
		k->eo.last = *c;
		k->eo.last_xid = xid;
		if (k->eo.nsources == k->eo.capsources) {
			k->eo.capsources = k->eo.capsources ? k->eo.capsources * 2 : 64;
			k->eo.sources = xrealloc(k->eo.sources, k->eo.capsources * sizeof(*k->eo.sources));
		}
		k->eo.sources[k->eo.nsources++] = (struct eo_source){c->commit_time, 0};
	}
	k->eo.events++;
	k->eo.sources[k->eo.nsources - 1].events++;
	return true;
}

static bool kafka_deliver(sink *base, uint32_t subscription, const char *data, size_t len,
			  const sink_commit *c, uint64_t seq, char *err, size_t errlen)
{
	(void)subscription; /* the rendered event says all */
	kafka_sink *k = (kafka_sink *)base;
	rendered r;
	if (k->failed)
		return true; /* a restart is coming: the slot will send this again */
	if (k->eo.committing || k->held.len) {
		hold(k, &(held_hdr){.seq = seq, .c = *c, .sub = subscription, .len = (uint32_t)len}, data);
		return true;
	}
	if (len < sizeof(r))
		return errf(err, errlen, "kafka sink: rendered event of %zu bytes", len);
	memcpy(&r, data, sizeof(r));
	size_t fixed = sizeof(r) + (size_t)r.topic_len + r.key_len + r.prev_key_len + r.sub_len +
		       r.schema_len + r.table_len;
	if (fixed > len)
		return errf(err, errlen, "kafka sink: rendered event is corrupt");
	const char *topic_p = data + sizeof(r), *key = topic_p + r.topic_len, *prev_key = key + r.key_len;
	const char *sub = prev_key + r.prev_key_len;
	const char *schema = sub + r.sub_len, *table = schema + r.schema_len, *head = table + r.table_len;
	char topic[256];
	snprintf(topic, sizeof(topic), "%.*s", (int)r.topic_len, topic_p);

	if (seq != k->cur_seq && k->eo.open && k->eo.last_seq == k->cur_seq && k->cur_seq > k->last_ended) {
		/* A new source transaction while the last one never ended: the stream broke inside it, and
		 * the slot sends it again whole. The Kafka transaction holding part of it cannot commit. */
		fail(k, "the stream broke inside a source transaction",
		     "the Kafka transaction holding part of it is aborted; the slot sends it again");
		return true;
	}
	if (seq != k->cur_seq) {
		tables_clear(k);
		k->cur_seq = seq;
	}
	if (k->set.exactly_once && !eo_before_produce(k, c, r.xid, seq))
		return true;
	k->cur_xid = r.xid;
	k->cur_commit = *c;
	if (k->set.transactions_topic) /* only the transaction record needs the counts */
		count_table(k, schema, r.schema_len, table, r.table_len);

	buf_reset(&k->value);
	buf_append(&k->value, head, len - fixed);
	pb_put_commit(&k->value, c);
	/* Partitioned by key (librdkafka's partitioner): the order of one row's changes holds. */
	if (!produce(k, topic, RD_KAFKA_PARTITION_UA, key, r.key_len, k->value.data, k->value.len,
		     headers(&r, sub, c->commit_lsn, "Event"), seq))
		return true;
	if (r.tombstone && r.prev_key_len) /* the row left its old key */
		produce(k, topic, RD_KAFKA_PARTITION_UA, prev_key, r.prev_key_len, NULL, 0,
			headers(&r, sub, c->commit_lsn, "Event"), seq);
	else if (r.tombstone)
		produce(k, topic, RD_KAFKA_PARTITION_UA, key, r.key_len, NULL, 0,
			headers(&r, sub, c->commit_lsn, "Event"), seq);
	return true;
}

/* The transactions_topic record of the transaction that just ended, if it had Kafka events. */
static void transaction_record(kafka_sink *k, uint64_t seq)
{
	if (!k->set.transactions_topic || k->cur_seq != seq || !k->cur_events || k->failed)
		return;
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.xid = k->cur_xid;
	t.commit_lsn = k->cur_commit.commit_lsn;
	t.commit_time = k->cur_commit.commit_time;
	t.events = k->cur_events;
	Cdc__V1__Transaction__TableCount *counts = xcalloc(k->ntables, sizeof(*counts));
	Cdc__V1__Transaction__TableCount **ptrs = xcalloc(k->ntables, sizeof(*ptrs));
	for (size_t i = 0; i < k->ntables; i++) {
		cdc__v1__transaction__table_count__init(&counts[i]);
		counts[i].schema = k->tables[i].schema;
		counts[i].table = k->tables[i].table;
		counts[i].events = k->tables[i].events;
		ptrs[i] = &counts[i];
	}
	t.n_tables = k->ntables;
	t.tables = ptrs;
	buf_reset(&k->value);
	buf_reserve(&k->value, cdc__v1__transaction__get_packed_size(&t));
	k->value.len = cdc__v1__transaction__pack(&t, (uint8_t *)k->value.data);
	char key[LSN_STRLEN];
	lsn_format(t.commit_lsn, key);
	rendered r = {.xid = t.xid};
	/* All in partition 0: in commit order, like the transactions they describe. */
	produce(k, k->set.transactions_topic, 0, key, strlen(key), k->value.data, k->value.len,
		headers(&r, "", t.commit_lsn, "Transaction"), seq);
	free(ptrs);
	free(counts);
}

static void kafka_end_txn(sink *base, uint64_t seq)
{
	kafka_sink *k = (kafka_sink *)base;
	if (k->eo.committing || k->held.len) {
		hold(k, &(held_hdr){.seq = seq, .end = true}, NULL);
		return;
	}
	transaction_record(k, seq);
	tables_clear(k);
	if (seq > k->last_ended)
		k->last_ended = seq;
	settle(k);
}

static void kafka_poll(sink *base)
{
	kafka_sink *k = (kafka_sink *)base;
	char drain[64];
	while (read(k->pipe[0], drain, sizeof(drain)) > 0)
		;
	rd_kafka_poll(k->rk, 0);
}

static sink_status kafka_flush(sink *base, char *err, size_t errlen)
{
	kafka_sink *k = (kafka_sink *)base;
	rd_kafka_poll(k->rk, 0);
	if (k->set.exactly_once && !eo_step(k, false, err, errlen))
		return SINK_FATAL;
	if (!k->failed)
		return SINK_OK;
	errf(err, errlen, "kafka: %s", k->failure);
	return SINK_RESTART;
}

static uint64_t kafka_delivered(const sink *base)
{
	const kafka_sink *k = (const kafka_sink *)base;
	if (k->failed)
		return 0;
	if (k->eo.open)
		return k->eo.committed_seq;
	const kafka_txn *first = k->q.len ? ring_at(&k->q, 0) : NULL;
	return first && first->seq <= k->last_ended ? first->seq - 1 : k->last_ended;
}

static int kafka_fd(const sink *base)
{
	return ((const kafka_sink *)base)->pipe[0];
}

static bool kafka_busy(const sink *base)
{
	const kafka_sink *k = (const kafka_sink *)base;
	return (k->eo.committing && k->held.len >= k->busy_bytes) ||
	       (k->busy_at && (size_t)rd_kafka_outq_len(k->rk) >= k->busy_at) ||
	       (k->busy_bytes && k->queued_bytes >= k->busy_bytes);
}

static bool kafka_finish(sink *base, int timeout_ms)
{
	kafka_sink *k = (kafka_sink *)base;
	char err[512];
	for (uint64_t until = now_ms() + (uint64_t)timeout_ms;
	     (k->eo.open || k->held.len) && !k->failed && now_ms() < until;) {
		if (!k->eo.committing && k->cur_seq > k->last_ended) { /* partly in it: cannot commit */
			fail(k, "stopped inside a source transaction", "the Kafka transaction is aborted");
			eo_abort(k);
			break;
		}
		if (!eo_step(k, true, err, sizeof(err)))
			fail(k, "cannot deliver", err);
		rd_kafka_poll(k->rk, 10);
	}
	return rd_kafka_flush(k->rk, timeout_ms) == RD_KAFKA_RESP_ERR_NO_ERROR && !k->failed;
}

static bool kafka_restart(sink *base, char *err, size_t errlen)
{
	kafka_sink *k = (kafka_sink *)base;
	/* Exactly once: what the open Kafka transaction holds is aborted, and a producer that can go
	 * on (the failure was abortable) is kept. */
	if (k->eo.open)
		eo_abort(k);
	bool keep =
	    k->set.exactly_once && k->eo.ready && !rd_kafka_fatal_error(k->rk, NULL, 0) && !k->eo.open;
	if (!k->set.exactly_once) /* what can still be delivered is (a consumer may see it twice) */
		rd_kafka_flush(k->rk, 5000);
	ring_clear(&k->q);
	buf_reset(&k->held);
	k->failed = false;
	k->stats.in_flight = 0;
	k->queued_bytes = 0;
	k->stats.restarts++;
	tables_clear(k);
	if (keep)
		return true;
	rd_kafka_destroy(k->rk);
	k->rk = NULL;
	k->eo = (struct kafka_eo){
	    .committed_seq = k->eo.committed_seq, .sources = k->eo.sources, .capsources = k->eo.capsources};
	return producer_new(k, err, errlen);
}

static void free_settings(kafka_sink *k)
{
	for (size_t i = 0; i < k->set.nproperties; i++) {
		free((char *)k->set.properties[i].key);
		free((char *)k->set.properties[i].value);
	}
	free((kafka_property *)k->set.properties);
	free((char *)k->set.brokers);
	free((char *)k->set.transactions_topic);
	free((char *)k->set.positions_topic);
	free((char *)k->set.transactional_id);
	for (size_t i = 0; i < k->nsubs; i++)
		free((char *)k->subs[i].topic);
	free(k->subs);
}

static char *dup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

void kafka_sink_bind(sink *s, const kafka_sink_settings *settings, const kafka_sub_settings *subs,
		     size_t nsubs)
{
	kafka_sink *k = (kafka_sink *)s;
	free_settings(k);
	k->set = (kafka_sink_settings){.brokers = xstrdup(settings->brokers),
				       .nproperties = settings->nproperties,
				       .transactions_topic = dup_or_null(settings->transactions_topic),
				       .exactly_once = settings->exactly_once,
				       .positions_topic = dup_or_null(settings->positions_topic),
				       .transactional_id = dup_or_null(settings->transactional_id),
				       .commit_interval_ms = settings->commit_interval_ms,
				       .commit_events = settings->commit_events};
	kafka_property *props = xcalloc(settings->nproperties ? settings->nproperties : 1, sizeof(*props));
	for (size_t i = 0; i < settings->nproperties; i++)
		props[i] = (kafka_property){xstrdup(settings->properties[i].key),
					    xstrdup(settings->properties[i].value)};
	k->set.properties = props;
	k->nsubs = nsubs;
	k->subs = xcalloc(nsubs ? nsubs : 1, sizeof(*k->subs));
	for (size_t i = 0; i < nsubs; i++)
		k->subs[i] = (kafka_sub_settings){dup_or_null(subs[i].topic), subs[i].tombstones};
}

static void kafka_free(sink *base)
{
	kafka_sink *k = (kafka_sink *)base;
	if (k->rk)
		rd_kafka_destroy(k->rk);
	free_settings(k);
	tables_clear(k);
	free(k->tables);
	ring_free(&k->q);
	buf_free(&k->value);
	free(k->eo.sources);
	buf_free(&k->held);
	close(k->pipe[0]);
	close(k->pipe[1]);
	free(k);
}

static const sink_ops kafka_ops = {
    .name = "kafka",
    .render = kafka_render,
    .deliver = kafka_deliver,
    .end_txn = kafka_end_txn,
    .flush = kafka_flush,
    .delivered = kafka_delivered,
    .free = kafka_free,
    .fd = kafka_fd,
    .poll = kafka_poll,
    .busy = kafka_busy,
    .finish = kafka_finish,
    .restart = kafka_restart,
};

sink *kafka_sink_new(const kafka_sink_settings *settings, const kafka_sub_settings *subs, size_t nsubs,
		     char *err, size_t errlen)
{
	kafka_sink *k = xcalloc(1, sizeof(*k));
	k->q = RING_INIT(kafka_txn);
	k->base.ops = &kafka_ops;
	kafka_sink_bind(&k->base, settings, subs, nsubs);
	if (pipe2(k->pipe, O_NONBLOCK | O_CLOEXEC) != 0) {
		errf(err, errlen, "kafka sink: pipe: %s", strerror(errno));
		free_settings(k);
		free(k);
		return NULL;
	}
	if (!producer_new(k, err, errlen)) {
		kafka_free(&k->base);
		return NULL;
	}
	return &k->base;
}

const kafka_stats *kafka_sink_stats(const sink *s)
{
	return &((const kafka_sink *)s)->stats;
}

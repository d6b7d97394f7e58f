/* The Kafka sink's records in each format (see kafka_internal.h), and the records of the transactions topic.
 * An event is rendered as it arrives, before its transaction commits. It becomes one to three records: the
 * event, a tombstone, and for Debezium a key change's delete and create. deliver() completes each value with
 * the commit's fields (kafka_record_value). */
#include "sinks/kafka/kafka_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/event.h"
#include "decoder/pgoutput.h"
#include "sinks/kafka/avro.h"
#include "sinks/pbwire.h"

/* Records ---------------------------------------------------------------------------------------- */

/* Starts a record of kind with key (else a null key, when has_key is false). The caller appends its value,
 * then record_end() completes it. Returns where it starts. */
static size_t record_begin(buf *out, int kind, const buf *key, bool has_key)
{
	size_t at = out->len;
	rendered_record rec = {.key_len = has_key ? (uint32_t)key->len : 0,
			       .key_schema = KAFKA_NO_SCHEMA,
			       .value_schema = KAFKA_NO_SCHEMA,
			       .kind = (uint8_t)kind,
			       .has_key = has_key};
	buf_append(out, &rec, sizeof(rec));
	if (has_key)
		buf_append(out, key->data, key->len);
	return at;
}

/* An extra header of a record, after its value and before record_end(). */
static void record_header(buf *out, const char *name, const char *value, size_t len)
{
	uint32_t n = (uint32_t)len;
	buf_append(out, name, strlen(name) + 1);
	buf_append(out, &n, sizeof(n));
	buf_append(out, value, len);
}

/* Ends the record started at at. Its value is what came after its key, up to value_end (its headers follow).
 * value_end 0 means the record has no headers. */
static void record_end(buf *out, size_t at, size_t value_end)
{
	rendered_record rec;
	memcpy(&rec, out->data + at, sizeof(rec));
	if (!value_end)
		value_end = out->len;
	rec.value_len = (uint32_t)(value_end - at - sizeof(rec) - rec.key_len);
	rec.header_len = (uint32_t)(out->len - value_end);
	memcpy(out->data + at, &rec, sizeof(rec));
}

/* The schemas of the record started at at (format avro). */
static void record_schemas(buf *out, size_t at, uint32_t key, uint32_t value)
{
	rendered_record rec;
	memcpy(&rec, out->data + at, sizeof(rec));
	rec.key_schema = key;
	rec.value_schema = value;
	memcpy(out->data + at, &rec, sizeof(rec));
}

static void tombstone(buf *out, const buf *key)
{
	record_end(out, record_begin(out, REC_TOMBSTONE, key, true), 0);
}

static bool same(const buf *a, const buf *b)
{
	return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* cdc.v1.Key and cdc.v1.Event. The message is keyed by the row's key after the change. So a compacted topic
 * holds each row under its current key. An update that changed the key also tombstones the old one. */
static int render_protobuf(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	Cdc__V1__Key key = CDC__V1__KEY__INIT, prev = CDC__V1__KEY__INIT;
	key.schema = prev.schema = e->schema;
	key.table = prev.table = e->table;
	Cdc__V1__Column *cols[PGO_MAX_COLUMNS];
	bool update = e->op == CDC__V1__OP__OP_UPDATE;
	if (e->key) {
		prev.n_columns = key.n_columns = e->key->n_columns;
		prev.columns = e->key->columns;
		key.columns = update ? pgo_event_new_key(e, cols) : e->key->columns;
	}
	buf_reset(&k->key);
	sink_pb_put_key(&k->key, &key);
	/* Only an update can move a row to another key. Only then is the key before it packed too. */
	buf_reset(&k->prev_key);
	if (update)
		sink_pb_put_key(&k->prev_key, &prev);
	bool moved = update && !same(&k->key, &k->prev_key);
	size_t at = record_begin(out, REC_PROTOBUF, &k->key, true);
	sink_pb_put_event(out, e);
	record_end(out, at, 0);
	if (!s->tombstones || !(moved || e->op == CDC__V1__OP__OP_DELETE))
		return 1;
	tombstone(out, moved ? &k->prev_key : &k->key);
	return 2;
}

/* The key columns' JSON ({} without any) and the event JSON of `sink: stdout`. Tombstones are as for
 * protobuf. */
static void json_key_of(buf *b, Cdc__V1__Column **cols, size_t n)
{
	Cdc__V1__Row row = CDC__V1__ROW__INIT;
	row.columns = cols;
	row.n_columns = n;
	buf_reset(b);
	sink_json_row(b, &row);
}

static int render_json(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	Cdc__V1__Column *cols[PGO_MAX_COLUMNS];
	bool update = e->op == CDC__V1__OP__OP_UPDATE && e->key;
	size_t n = e->key ? e->key->n_columns : 0;
	json_key_of(&k->key, update ? pgo_event_new_key(e, cols) : e->key ? e->key->columns : NULL, n);
	buf_reset(&k->prev_key);
	if (update)
		json_key_of(&k->prev_key, e->key->columns, n);
	bool moved = update && !same(&k->key, &k->prev_key);
	size_t at = record_begin(out, REC_JSON, &k->key, true);
	sink_json_event_head(out, &k->json, e);
	record_end(out, at, 0);
	if (!s->tombstones || !(moved || e->op == CDC__V1__OP__OP_DELETE))
		return 1;
	tombstone(out, moved ? &k->prev_key : &k->key);
	return 2;
}

/* Debezium's records of one event, while they are rendered, in JSON (format debezium) or Avro. */
typedef struct dbz_event {
	kafka_sink *k;
	const kafka_sub_settings *s;
	const Cdc__V1__Event *e;
	dbz_options o;
	bool avro;
	const dbz_column *cols; /* for avro, the table's shape and its schemas */
	size_t ncols;
	uint32_t key_schema, value_schema;
	char err[512]; /* for avro, why the event cannot be written */
} dbz_event;

/* The key of columns cols[0..n) into out. False (d->err) when Avro cannot write it. */
static bool put_key(dbz_event *d, buf *out, Cdc__V1__Column *const *cols, size_t n)
{
	buf_reset(out);
	if (!d->avro) {
		sink_debezium_key(out, &d->k->dbz, &d->o, d->e, cols, n);
		return true;
	}
	if (d->e->op == CDC__V1__OP__OP_MESSAGE) {
		kafka_avro_message_key(out, d->e->message ? d->e->message->prefix : "");
		return true;
	}
	return kafka_avro_key(out, &d->k->dbz, d->cols, d->ncols, cols, n, d->err, sizeof(d->err));
}

/* Debezium's context headers, unless the subscription leaves them out. */
static void context_headers(dbz_event *d, buf *out)
{
	dbz_header h[DBZ_CONTEXT_HEADERS];
	size_t n = d->s->context_headers ? sink_debezium_context_headers(d->e, d->o.server_name, h) : 0;
	for (size_t i = 0; i < n; i++)
		record_header(out, h[i].name, h[i].value, strlen(h[i].value));
}

/* One record of the event, with its key (in d->k->key), its value, the other key's header, then the context
 * headers. False (d->err) when Avro cannot write it. */
static bool put_record(dbz_event *d, buf *out, const dbz_record *r)
{
	const buf *key = &d->k->key;
	size_t at = record_begin(out,
				 r->op == DBZ_TOMBSTONE ? REC_TOMBSTONE
				 : d->avro		? REC_AVRO
							: REC_DEBEZIUM,
				 key, r->has_key);
	if (r->op == DBZ_TOMBSTONE) {
		if (d->avro)
			record_schemas(out, at, d->key_schema, KAFKA_NO_SCHEMA);
	} else if (!d->avro) {
		sink_debezium_value(out, &d->k->dbz, &d->o, d->e, r->op, r->before, r->after);
	} else if (kafka_avro_value(out, &d->k->dbz, &d->o, d->cols, d->ncols, d->e, r->op, r->before,
				    r->after, d->err, sizeof(d->err))) {
		record_schemas(out, at, r->has_key ? d->key_schema : KAFKA_NO_SCHEMA, d->value_schema);
	} else {
		out->len = at;
		return false;
	}
	size_t value_end = out->len;
	if (r->key_header)
		record_header(out, r->key_header, r->key_header_value->data, r->key_header_value->len);
	context_headers(d, out);
	record_end(out, at, value_end);
	return true;
}

/* The event's records as sink_debezium_records() says. -1 (d->err) when Avro cannot write them. A key is
 * written once for the records that share it (a delete and its tombstone). */
static int debezium_records(dbz_event *d, buf *out)
{
	dbz_record recs[DBZ_RECORDS_MAX];
	size_t n = sink_debezium_records(&d->k->dbz, d->e, d->s->tombstones, recs);
	buf_reset(&d->k->key);
	for (size_t i = 0; i < n; i++) {
		const dbz_record *r = &recs[i];
		bool written = i > 0 && recs[i - 1].has_key && recs[i - 1].key == r->key;
		if (r->has_key && !written && !put_key(d, &d->k->key, r->key, r->nkey))
			return -1;
		if (!put_record(d, out, r))
			return -1;
	}
	return (int)n;
}

/* Format avro. The shape and schemas of the event's table (for a message, Debezium's fixed schemas). False
 * (d->err) when no schema event described the table. */
static bool avro_schemas(dbz_event *d)
{
	kafka_sink *k = d->k;
	const Cdc__V1__Event *e = d->e;
	if (e->op == CDC__V1__OP__OP_MESSAGE) {
		d->key_schema = kafka_subjects_fixed(k->subjects, &dbz_message_key_schema, k->topic.data,
						     true, d->s->subjects);
		d->value_schema = kafka_subjects_fixed(k->subjects, &dbz_message_value_schema, k->topic.data,
						       false, d->s->subjects);
		return true;
	}
	bool found = e->op == CDC__V1__OP__OP_TRUNCATE
			 ? kafka_subjects_latest(k->subjects, e->subscription, e->schema, e->table,
						 k->topic.data, d->o.server_name, d->s->subjects, &d->cols,
						 &d->ncols, &d->key_schema, &d->value_schema)
			 : kafka_subjects_shape(k->subjects, e->subscription, e->schema_id, k->topic.data,
						d->o.server_name, d->s->subjects, &d->cols, &d->ncols,
						&d->key_schema, &d->value_schema);
	if (!found)
		snprintf(d->err, sizeof(d->err),
			 "no schema event described %s.%s before its %s (schema id %016" PRIx64 ")",
			 e->schema, e->table, e->op == CDC__V1__OP__OP_TRUNCATE ? "truncate" : "row",
			 e->schema_id);
	return found;
}

/* Debezium's records, in JSON (format debezium) or in Avro (format avro). An event Avro cannot write becomes
 * one REC_ERROR record that says why. Delivering it fails the sink, and the stream holds there. */
static int render_debezium(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	dbz_event d = {.k = k,
		       .s = s,
		       .e = e,
		       .o = {.server_name = s->server_name ? s->server_name : "cdc",
			     .database = k->database ? k->database : "",
			     .topic = k->topic.data,
			     .schemas = s->schemas,
			     .placeholder = s->placeholder || s->format == KAFKA_AVRO,
			     .transaction = k->set.transactions_topic != NULL},
		       .avro = s->format == KAFKA_AVRO};
	size_t start = out->len;
	int n = !d.avro || avro_schemas(&d) ? debezium_records(&d, out) : -1;
	if (n >= 0)
		return n;
	out->len = start;
	buf_reset(&k->key);
	size_t at = record_begin(out, REC_ERROR, &k->key, false);
	buf_puts(out, d.err);
	record_end(out, at, 0);
	return 1;
}

/* A schema or DDL event. It becomes one record in the subscription's format for kafka.schemas_topic. That is
 * keyed "SUBSCRIPTION/SCHEMA_ID" (a compacted topic keeps each schema) or "SUBSCRIPTION/ddl/LSN". There is
 * none without a schemas topic. There is none in Debezium's formats either, whose records carry their schemas
 * (in JSON) or name them in the registry. With Avro, a schema event tells the sink the rows' shape. */
static int render_table_event(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	if (s->format == KAFKA_AVRO && e->op == CDC__V1__OP__OP_SCHEMA && k->subjects) {
		/* The shape of the rows that follow. Their schemas are registered from now on. */
		const dbz_column *cols;
		size_t ncols;
		uint32_t key, value;
		buf topic = {0};
		kafka_topic_name(&topic, s->topic ? s->topic : KAFKA_DEFAULT_TOPIC, e->schema, e->table,
				 e->subscription, e->tag);
		kafka_subjects_learn(k->subjects, e->subscription, e);
		kafka_subjects_shape(k->subjects, e->subscription, e->schema_id, topic.data,
				     s->server_name ? s->server_name : "cdc", s->subjects, &cols, &ncols,
				     &key, &value);
		buf_free(&topic);
	}
	if (!k->set.schemas_topic || s->format == KAFKA_DEBEZIUM || s->format == KAFKA_AVRO)
		return 0;
	char text[LSN_STRLEN + 17];
	buf_reset(&k->key);
	buf_puts(&k->key, e->subscription);
	if (e->op == CDC__V1__OP__OP_SCHEMA) {
		util_hex64(e->schema_id, text);
		buf_putc(&k->key, '/');
	} else {
		util_lsn_format(e->lsn, text);
		buf_puts(&k->key, "/ddl/");
	}
	buf_puts(&k->key, text);
	size_t at = record_begin(out, s->format == KAFKA_JSON ? REC_JSON : REC_PROTOBUF, &k->key, true);
	if (s->format == KAFKA_JSON) {
		sink_json_event_head(out, &k->json, e);
	} else {
		buf_reserve(out, cdc__v1__event__get_packed_size(e));
		out->len += cdc__v1__event__pack(e, (uint8_t *)out->data + out->len);
	}
	record_end(out, at, 0);
	return 1;
}

/* Whether k->topic is the topic of e for subscription sub already. If not, notes what the next one is made
 * of. */
static bool same_topic(kafka_sink *k, uint32_t sub, const Cdc__V1__Event *e, size_t schema_len,
		       size_t table_len)
{
	const char *tag = e->tag ? e->tag : "";
	size_t tag_len = strlen(tag), n = schema_len + table_len + tag_len + 2;
	const char *p = k->topic_of.data;
	if (k->topic_sub == sub && k->topic_of.len == n && memcmp(p, e->schema, schema_len) == 0 &&
	    memcmp(p + schema_len + 1, e->table, table_len) == 0 &&
	    memcmp(p + schema_len + table_len + 2, tag, tag_len) == 0)
		return true;
	k->topic_sub = sub;
	buf_reset(&k->topic_of);
	buf_append(&k->topic_of, e->schema, schema_len + 1);
	buf_append(&k->topic_of, e->table, table_len + 1);
	buf_append(&k->topic_of, tag, tag_len);
	return false;
}

void kafka_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	static const kafka_sub_settings defaults = {0};
	kafka_sink *k = (kafka_sink *)base;
	const kafka_sub_settings *s = sub < k->nsubs ? &k->subs[sub] : &defaults;
	bool table = kafka_table_event(e->op);
	size_t schema_len = strlen(e->schema), table_len = strlen(e->table);
	if (table) {
		buf_reset(&k->topic);
		if (k->set.schemas_topic)
			buf_puts(&k->topic, k->set.schemas_topic);
		k->topic_sub = UINT32_MAX;
	} else if (!same_topic(k, sub, e, schema_len, table_len)) {
		buf_reset(&k->topic);
		kafka_topic_name(&k->topic, s->topic ? s->topic : KAFKA_DEFAULT_TOPIC, e->schema, e->table,
				 e->subscription, e->tag);
	}
	rendered r = {
	    .topic_len = (uint32_t)k->topic.len,
	    .sub_len = (uint32_t)strlen(e->subscription),
	    .schema_len = (uint32_t)schema_len,
	    .table_len = (uint32_t)table_len,
	    .xid = e->xid,
	    .lsn = e->lsn,
	    .schema_id = e->schema_id,
	    .op = (uint8_t)e->op,
	    .format = (uint8_t)s->format,
	    .schemas = s->schemas,
	    .cdc_headers = s->cdc_headers,
	};
	size_t at = out->len;
	buf_append(out, &r, sizeof(r));
	buf_append(out, k->topic.data, k->topic.len);
	buf_append(out, e->subscription, r.sub_len);
	buf_append(out, e->schema, r.schema_len);
	buf_append(out, e->table, r.table_len);
	r.nrecords =
	    (uint8_t)(table ? render_table_event(k, s, e, out)
		      : s->format == KAFKA_DEBEZIUM || s->format == KAFKA_AVRO ? render_debezium(k, s, e, out)
		      : s->format == KAFKA_JSON				       ? render_json(k, s, e, out)
						: render_protobuf(k, s, e, out));
	memcpy(out->data + at, &r, sizeof(r));
}

void kafka_render_free(kafka_sink *k)
{
	buf_free(&k->topic);
	buf_free(&k->topic_of);
	buf_free(&k->key);
	buf_free(&k->prev_key);
	buf_free(&k->key_out);
	buf_free(&k->value);
	sink_debezium_scratch_free(&k->dbz);
	sink_json_commit_free(&k->jcommit);
}

/* Completing values ------------------------------------------------------------------------------ */

void kafka_record_value(kafka_sink *k, int kind, uint32_t schema_id, const char *head, size_t len,
			const rendered *r, const sink_commit *c, uint64_t total, uint64_t nth)
{
	buf_reset(&k->value);
	dbz_fill f = {.commit_lsn = c->commit_lsn,
		      .commit_time = c->commit_time,
		      .now = util_wall_us(),
		      .xid = r->xid,
		      .total_order = total,
		      .collection_order = nth};
	switch (kind) {
	case REC_PROTOBUF:
		buf_append(&k->value, head, len);
		sink_pb_put_commit(&k->value, c);
		break;
	case REC_JSON:
		buf_append(&k->value, head, len);
		sink_json_event_tail(&k->value, &k->jcommit, c->commit_lsn, c->tx_index, c->commit_time);
		k->value.data[--k->value.len] = '\0'; /* one object, not a line */
		break;
	case REC_DEBEZIUM:
		sink_debezium_complete(&k->value, head, len, &f);
		break;
	case REC_AVRO:
		kafka_avro_complete(&k->value, schema_id, head, len, &f);
		break;
	}
}

/* The transactions topic ------------------------------------------------------------------------- */

/* cdc.v1.Transaction as JSON: {"xid","commit_lsn","commit_time","events","tables":[...]}. */
static void json_transaction(kafka_sink *k, buf *b)
{
	char lsn[LSN_STRLEN];
	util_lsn_format(k->cur_commit.commit_lsn, lsn);
	bool first = true;
	buf_putc(b, '{');
	json_key_u64(b, &first, "xid", k->cur_xid);
	json_key_str(b, &first, "commit_lsn", lsn);
	json_key(b, &first, "commit_time");
	sink_json_timestamp(b, k->cur_commit.commit_time, true, true);
	json_key_u64(b, &first, "events", k->cur_events);
	json_key(b, &first, "tables");
	buf_putc(b, '[');
	for (size_t i = 0; i < k->ntables; i++) {
		bool f = true;
		buf_puts(b, i ? ",{" : "{");
		json_key_str(b, &f, "schema", k->tables[i].schema);
		json_key_str(b, &f, "table", k->tables[i].table);
		json_key_u64(b, &f, "events", k->tables[i].events);
		buf_putc(b, '}');
	}
	buf_puts(b, "]}");
}

void kafka_txn_record(kafka_sink *k, kafka_format format, bool end)
{
	buf_reset(&k->key);
	buf_reset(&k->value);
	if (format == KAFKA_AVRO) {
		kafka_avro_header(&k->key, kafka_subjects_id(k->subjects, k->txn_key_schema));
		kafka_avro_txn_key(&k->key, k->cur_xid, k->cur_commit.commit_lsn);
		kafka_avro_header(&k->value, kafka_subjects_id(k->subjects, k->txn_value_schema));
		kafka_avro_txn_value(&k->value, end, k->cur_xid, k->cur_commit.commit_lsn,
				     k->cur_commit.commit_time, k->cur_events, k->tables, k->ntables);
		return;
	}
	if (format == KAFKA_DEBEZIUM) {
		sink_debezium_txn_key(&k->key, k->cur_schemas, k->cur_xid, k->cur_commit.commit_lsn);
		sink_debezium_txn_value(&k->value, k->cur_schemas, end, k->cur_xid, k->cur_commit.commit_lsn,
					k->cur_commit.commit_time, k->cur_events, k->tables, k->ntables);
		return;
	}
	char lsn[LSN_STRLEN];
	util_lsn_format(k->cur_commit.commit_lsn, lsn);
	if (format == KAFKA_JSON) { /* keyed by the commit LSN, as text in JSON */
		json_str(&k->key, lsn);
		json_transaction(k, &k->value);
		return;
	}
	buf_puts(&k->key, lsn);
	Cdc__V1__Transaction t = CDC__V1__TRANSACTION__INIT;
	t.xid = k->cur_xid;
	t.commit_lsn = k->cur_commit.commit_lsn;
	t.commit_time = k->cur_commit.commit_time;
	t.events = k->cur_events;
	Cdc__V1__Transaction__TableCount *counts = util_xcalloc(k->ntables ? k->ntables : 1, sizeof(*counts));
	Cdc__V1__Transaction__TableCount **ptrs = util_xcalloc(k->ntables ? k->ntables : 1, sizeof(*ptrs));
	for (size_t i = 0; i < k->ntables; i++) {
		cdc__v1__transaction__table_count__init(&counts[i]);
		counts[i].schema = k->tables[i].schema;
		counts[i].table = k->tables[i].table;
		counts[i].events = k->tables[i].events;
		ptrs[i] = &counts[i];
	}
	t.n_tables = k->ntables;
	t.tables = ptrs;
	buf_reserve(&k->value, cdc__v1__transaction__get_packed_size(&t));
	k->value.len = cdc__v1__transaction__pack(&t, (uint8_t *)k->value.data);
	free(ptrs);
	free(counts);
}

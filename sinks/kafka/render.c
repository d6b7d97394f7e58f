/* kafka_render.c: the Kafka sink's records in each format (see kafka_internal.h). An event is
 * rendered as it arrives, before its transaction commits, into one to three records (the event; a
 * tombstone; for Debezium a key change's delete and create); deliver() completes each value with
 * the commit's fields (kafka_record_value). And the records of the transactions topic. */
#include "sinks/kafka/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/pgoutput.h"
#include "sinks/pbwire.h"

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

/* Records ---------------------------------------------------------------------------------------- */

/* Starts a record of kind with key (has_key: else a null key); the caller appends its value, then
 * record_end() completes it. Returns where it starts. */
static size_t record_begin(buf *out, int kind, const buf *key, bool has_key)
{
	size_t at = out->len;
	rendered_record rec = {
	    .key_len = has_key ? (uint32_t)key->len : 0, .kind = (uint8_t)kind, .has_key = has_key};
	buf_append(out, &rec, sizeof(rec));
	if (has_key)
		buf_append(out, key->data, key->len);
	return at;
}

/* Ends the record started at at: its value is what came after its key; an extra header name with
 * value hval if name is not NULL. */
static void record_end(buf *out, size_t at, const char *name, const buf *hval)
{
	rendered_record rec;
	memcpy(&rec, out->data + at, sizeof(rec));
	rec.value_len = (uint32_t)(out->len - at - sizeof(rec) - rec.key_len);
	if (name) {
		buf_append(out, name, strlen(name) + 1);
		buf_append(out, hval->data, hval->len);
		rec.header_len = (uint32_t)(strlen(name) + 1 + hval->len);
	}
	memcpy(out->data + at, &rec, sizeof(rec));
}

static void tombstone(buf *out, const buf *key)
{
	record_end(out, record_begin(out, REC_TOMBSTONE, key, true), NULL, NULL);
}

static bool same(const buf *a, const buf *b)
{
	return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/* cdc.v1.Key and cdc.v1.Event. The message is keyed by the row's key after the change, so a
 * compacted topic holds each row under its current key; an update that changed the key also
 * tombstones the old one. */
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
		key.columns = update ? new_key_columns(e, cols) : e->key->columns;
	}
	buf_reset(&k->key);
	pb_put_key(&k->key, &key);
	/* Only an update can move a row to another key: only then is the key before it packed too. */
	buf_reset(&k->prev_key);
	if (update)
		pb_put_key(&k->prev_key, &prev);
	bool moved = update && !same(&k->key, &k->prev_key);
	size_t at = record_begin(out, REC_PROTOBUF, &k->key, true);
	pb_put_event(out, e);
	record_end(out, at, NULL, NULL);
	if (!s->tombstones || !(moved || e->op == CDC__V1__OP__OP_DELETE))
		return 1;
	tombstone(out, moved ? &k->prev_key : &k->key);
	return 2;
}

/* The key columns' JSON ({} without any) and the event JSON of sink: stdout; tombstones as for
 * protobuf. */
static void json_key_of(buf *b, Cdc__V1__Column **cols, size_t n)
{
	Cdc__V1__Row row = CDC__V1__ROW__INIT;
	row.columns = cols;
	row.n_columns = n;
	buf_reset(b);
	json_row(b, &row);
}

static int render_json(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	Cdc__V1__Column *cols[PGO_MAX_COLUMNS];
	bool update = e->op == CDC__V1__OP__OP_UPDATE && e->key;
	size_t n = e->key ? e->key->n_columns : 0;
	json_key_of(&k->key, update ? new_key_columns(e, cols) : e->key ? e->key->columns : NULL, n);
	buf_reset(&k->prev_key);
	if (update)
		json_key_of(&k->prev_key, e->key->columns, n);
	bool moved = update && !same(&k->key, &k->prev_key);
	size_t at = record_begin(out, REC_JSON, &k->key, true);
	json_event_head(out, e);
	record_end(out, at, NULL, NULL);
	if (!s->tombstones || !(moved || e->op == CDC__V1__OP__OP_DELETE))
		return 1;
	tombstone(out, moved ? &k->prev_key : &k->key);
	return 2;
}

/* Debezium's records: an update that changed the key is a delete of the old key (with a tombstone)
 * and a create under the new one, each naming the other key in a header, as Debezium writes it. */
static int render_debezium(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	dbz_options o = {.server_name = s->server_name ? s->server_name : "cdc",
			 .database = k->database ? k->database : "",
			 .topic = k->topic.data,
			 .schemas = s->schemas,
			 .placeholder = s->placeholder,
			 .transaction = k->set.transactions_topic != NULL};
	dbz_options payload = o;
	payload.schemas = false;
	Cdc__V1__Column *cols[PGO_MAX_COLUMNS];
	size_t n = e->key ? e->key->n_columns : 0, at;
	bool has_key = e->key || e->op == CDC__V1__OP__OP_MESSAGE;
	buf_reset(&k->key);
	switch (e->op) {
	case CDC__V1__OP__OP_UPDATE:
		if (e->key) {
			dbz_key(&k->key, &k->dbz, &o, e, new_key_columns(e, cols), n);
			buf_reset(&k->prev_key);
			dbz_key(&k->prev_key, &k->dbz, &o, e, e->key->columns, n);
		}
		if (e->key && e->old_row && !same(&k->key, &k->prev_key)) {
			buf_reset(&k->hdr);
			dbz_key(&k->hdr, &k->dbz, &payload, e, cols, n);
			at = record_begin(out, REC_DEBEZIUM, &k->prev_key, true);
			dbz_value(out, &k->dbz, &o, e, DBZ_DELETE, e->old_row, NULL);
			record_end(out, at, "__debezium.newkey", &k->hdr);
			int nrec = 1;
			if (s->tombstones) {
				tombstone(out, &k->prev_key);
				nrec++;
			}
			buf_reset(&k->hdr);
			dbz_key(&k->hdr, &k->dbz, &payload, e, e->key->columns, n);
			at = record_begin(out, REC_DEBEZIUM, &k->key, true);
			dbz_value(out, &k->dbz, &o, e, DBZ_CREATE, NULL, e->new_row);
			record_end(out, at, "__debezium.oldkey", &k->hdr);
			return nrec + 1;
		}
		at = record_begin(out, REC_DEBEZIUM, &k->key, has_key);
		dbz_value(out, &k->dbz, &o, e, DBZ_UPDATE, e->old_row, e->new_row);
		record_end(out, at, NULL, NULL);
		return 1;
	case CDC__V1__OP__OP_DELETE:
		if (e->key)
			dbz_key(&k->key, &k->dbz, &o, e, e->key->columns, n);
		at = record_begin(out, REC_DEBEZIUM, &k->key, has_key);
		dbz_value(out, &k->dbz, &o, e, DBZ_DELETE, e->old_row, NULL);
		record_end(out, at, NULL, NULL);
		if (!s->tombstones || !has_key)
			return 1;
		tombstone(out, &k->key);
		return 2;
	case CDC__V1__OP__OP_TRUNCATE:
		at = record_begin(out, REC_DEBEZIUM, &k->key, false);
		dbz_value(out, &k->dbz, &o, e, DBZ_TRUNCATE, NULL, NULL);
		record_end(out, at, NULL, NULL);
		return 1;
	case CDC__V1__OP__OP_MESSAGE:
		dbz_key(&k->key, &k->dbz, &o, e, NULL, 0);
		at = record_begin(out, REC_DEBEZIUM, &k->key, true);
		dbz_value(out, &k->dbz, &o, e, DBZ_MESSAGE, NULL, NULL);
		record_end(out, at, NULL, NULL);
		return 1;
	default: /* insert, read */
		if (e->key)
			dbz_key(&k->key, &k->dbz, &o, e, e->key->columns, n);
		at = record_begin(out, REC_DEBEZIUM, &k->key, has_key);
		dbz_value(out, &k->dbz, &o, e, e->op == CDC__V1__OP__OP_READ ? DBZ_READ : DBZ_CREATE, NULL,
			  e->new_row);
		record_end(out, at, NULL, NULL);
		return 1;
	}
}

void kafka_schema_id_text(uint64_t id, char out[17])
{
	/* by hand: snprintf was 5% of the Kafka sink's thread (callgrind), once per record */
	for (int i = 15; i >= 0; i--, id >>= 4)
		out[i] = "0123456789abcdef"[id & 15];
	out[16] = '\0';
}

/* A schema or DDL event: one record in the subscription's format for kafka.schemas_topic, keyed
 * "SUBSCRIPTION/SCHEMA_ID" (a compacted topic keeps each schema) or "SUBSCRIPTION/ddl/LSN"; none
 * without a schemas topic, and none in Debezium's format, whose records carry their schemas. */
static int render_table_event(kafka_sink *k, const kafka_sub_settings *s, const Cdc__V1__Event *e, buf *out)
{
	if (!k->set.schemas_topic || s->format == KAFKA_DEBEZIUM)
		return 0;
	char text[LSN_STRLEN + 17];
	buf_reset(&k->key);
	buf_puts(&k->key, e->subscription);
	if (e->op == CDC__V1__OP__OP_SCHEMA) {
		kafka_schema_id_text(e->schema_id, text);
		buf_putc(&k->key, '/');
	} else {
		lsn_format(e->lsn, text);
		buf_puts(&k->key, "/ddl/");
	}
	buf_puts(&k->key, text);
	size_t at = record_begin(out, s->format == KAFKA_JSON ? REC_JSON : REC_PROTOBUF, &k->key, true);
	if (s->format == KAFKA_JSON) {
		json_event_head(out, e);
	} else {
		buf_reserve(out, cdc__v1__event__get_packed_size(e));
		out->len += cdc__v1__event__pack(e, (uint8_t *)out->data + out->len);
	}
	record_end(out, at, NULL, NULL);
	return 1;
}

void kafka_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	static const kafka_sub_settings defaults = {0};
	kafka_sink *k = (kafka_sink *)base;
	const kafka_sub_settings *s = sub < k->nsubs ? &k->subs[sub] : &defaults;
	bool table = kafka_table_event(e->op);
	buf_reset(&k->topic);
	if (table && k->set.schemas_topic)
		buf_puts(&k->topic, k->set.schemas_topic);
	else if (!table)
		kafka_topic_name(&k->topic, s->topic ? s->topic : KAFKA_DEFAULT_TOPIC, e->schema, e->table,
				 e->subscription, e->tag);
	rendered r = {
	    .topic_len = (uint32_t)k->topic.len,
	    .sub_len = (uint32_t)strlen(e->subscription),
	    .schema_len = (uint32_t)strlen(e->schema),
	    .table_len = (uint32_t)strlen(e->table),
	    .xid = e->xid,
	    .lsn = e->lsn,
	    .schema_id = e->schema_id,
	    .op = (uint8_t)e->op,
	    .format = (uint8_t)s->format,
	    .schemas = s->schemas,
	};
	size_t at = out->len;
	buf_append(out, &r, sizeof(r));
	buf_append(out, k->topic.data, k->topic.len);
	buf_append(out, e->subscription, r.sub_len);
	buf_append(out, e->schema, r.schema_len);
	buf_append(out, e->table, r.table_len);
	r.nrecords = (uint8_t)(table			     ? render_table_event(k, s, e, out)
			       : s->format == KAFKA_DEBEZIUM ? render_debezium(k, s, e, out)
			       : s->format == KAFKA_JSON     ? render_json(k, s, e, out)
							     : render_protobuf(k, s, e, out));
	memcpy(out->data + at, &r, sizeof(r));
}

void kafka_render_free(kafka_sink *k)
{
	buf_free(&k->topic);
	buf_free(&k->key);
	buf_free(&k->prev_key);
	buf_free(&k->hdr);
	buf_free(&k->value);
	dbz_scratch_free(&k->dbz);
	json_commit_free(&k->jcommit);
}

/* Completing values ------------------------------------------------------------------------------ */

void kafka_record_value(kafka_sink *k, int kind, const char *head, size_t len, const rendered *r,
			const sink_commit *c, uint64_t total, uint64_t nth)
{
	buf_reset(&k->value);
	switch (kind) {
	case REC_PROTOBUF:
		buf_append(&k->value, head, len);
		pb_put_commit(&k->value, c);
		break;
	case REC_JSON:
		buf_append(&k->value, head, len);
		json_event_tail(&k->value, &k->jcommit, c->commit_lsn, c->tx_index, c->commit_time);
		k->value.data[--k->value.len] = '\0'; /* one object, not a line */
		break;
	case REC_DEBEZIUM:
		dbz_complete(&k->value, head, len,
			     &(dbz_fill){.commit_lsn = c->commit_lsn,
					 .commit_time = c->commit_time,
					 .now = wall_us(),
					 .xid = r->xid,
					 .total_order = total,
					 .collection_order = nth});
		break;
	}
}

/* The transactions topic ------------------------------------------------------------------------- */

/* cdc.v1.Transaction as JSON: {"xid","commit_lsn","commit_time","events","tables":[...]}. */
static void json_transaction(kafka_sink *k, buf *b)
{
	char lsn[LSN_STRLEN];
	lsn_format(k->cur_commit.commit_lsn, lsn);
	bool first = true;
	buf_putc(b, '{');
	json_key_u64(b, &first, "xid", k->cur_xid);
	json_key_str(b, &first, "commit_lsn", lsn);
	json_key(b, &first, "commit_time");
	json_timestamp(b, k->cur_commit.commit_time, true, true);
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
	if (format == KAFKA_DEBEZIUM) {
		dbz_txn_key(&k->key, k->cur_schemas, k->cur_xid, k->cur_commit.commit_lsn);
		dbz_txn_value(&k->value, k->cur_schemas, end, k->cur_xid, k->cur_commit.commit_lsn,
			      k->cur_commit.commit_time, k->cur_events, k->tables, k->ntables);
		return;
	}
	char lsn[LSN_STRLEN];
	lsn_format(k->cur_commit.commit_lsn, lsn);
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
	Cdc__V1__Transaction__TableCount *counts = xcalloc(k->ntables ? k->ntables : 1, sizeof(*counts));
	Cdc__V1__Transaction__TableCount **ptrs = xcalloc(k->ntables ? k->ntables : 1, sizeof(*ptrs));
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

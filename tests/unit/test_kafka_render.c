/* test_kafka_render.c: the Kafka sink's records of an event in each format (sinks/kafka_render.c),
 * without a producer: how many, their kinds, keys and extra headers, and their values once
 * completed with the commit's fields, byte for byte against protobuf-c's own packing and the event
 * JSON of sink: stdout. */
#include <stdlib.h>

#include "sinks/kafka/kafka_internal.h"
#include "test.h"

typedef struct record {
	rendered_record r;
	const char *key, *value, *header;
} record;

/* The records of a rendered event. */
static size_t records(const buf *out, rendered *r, record *recs);

/* Renders e for k's one subscription into out; its records into r and recs, how many returned. */
static size_t render(kafka_sink *k, const Cdc__V1__Event *e, buf *out, rendered *r, record *recs)
{
	buf_reset(out);
	kafka_render(&k->base, 0, e, out);
	return records(out, r, recs);
}

static size_t records(const buf *out, rendered *r, record *recs)
{
	memcpy(r, out->data, sizeof(*r));
	const char *p = out->data + sizeof(*r) + r->topic_len + r->sub_len + r->schema_len + r->table_len;
	for (size_t i = 0; i < r->nrecords; i++) {
		memcpy(&recs[i].r, p, sizeof(recs[i].r));
		recs[i].key = p + sizeof(recs[i].r);
		recs[i].value = recs[i].key + recs[i].r.key_len;
		recs[i].header = recs[i].value + recs[i].r.value_len;
		p = recs[i].header + recs[i].r.header_len;
	}
	CHECK_INT(p - out->data, out->len);
	return r->nrecords;
}

/* A record's extra headers as "name=value,name=value". */
static const char *headers(const record *rec)
{
	static buf b;
	buf_reset(&b);
	for (const char *p = rec->header, *end = p + rec->r.header_len; p < end;) {
		uint32_t n;
		size_t name_len = strlen(p);
		memcpy(&n, p + name_len + 1, sizeof(n));
		buf_printf(&b, "%s%s=%.*s", b.len ? "," : "", p, (int)n, p + name_len + 1 + sizeof(n));
		p += name_len + 1 + sizeof(n) + n;
	}
	buf_putc(&b, '\0');
	return b.data;
}

static Cdc__V1__Value ints[4];
static Cdc__V1__Column cols[4];
static Cdc__V1__Column *pcols[4];

/* Column i named name with int value v. */
static Cdc__V1__Column *icol(int i, const char *name, int64_t v)
{
	ints[i] = (Cdc__V1__Value)CDC__V1__VALUE__INIT;
	ints[i].kind_case = CDC__V1__VALUE__KIND_INT_VALUE;
	ints[i].int_value = v;
	cols[i] = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
	cols[i].name = (char *)name;
	cols[i].type_oid = 23;
	cols[i].value = &ints[i];
	return pcols[i] = &cols[i];
}

static Cdc__V1__Event event(Cdc__V1__Op op, Cdc__V1__Row *key, Cdc__V1__Row *new_row, Cdc__V1__Row *old_row)
{
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	e.subscription = "s";
	e.schema = "public";
	e.table = "t";
	e.op = op;
	e.xid = 9;
	e.lsn = 100;
	e.origin = "";
	e.key = key;
	e.new_row = new_row;
	e.old_row = old_row;
	return e;
}

static kafka_sink *sink_with(kafka_sub_settings s)
{
	static kafka_sub_settings sub;
	sub = s;
	kafka_sink *k = util_xcalloc(1, sizeof(*k));
	k->nsubs = 1;
	k->subs = &sub;
	return k;
}

static void sink_done(kafka_sink *k)
{
	kafka_render_free(k);
	free(k);
}

/* An update that moved the row from key 1 to key 2 (the old key's row sent, 'K'). */
static Cdc__V1__Event key_change(Cdc__V1__Row *key, Cdc__V1__Row *row, Cdc__V1__Row *old)
{
	*key = *row = *old = (Cdc__V1__Row)CDC__V1__ROW__INIT;
	icol(0, "id", 2);
	icol(1, "id", 1);
	row->n_columns = 1;
	row->columns = &pcols[0];
	key->n_columns = old->n_columns = 1;
	key->columns = old->columns = &pcols[1];
	return event(CDC__V1__OP__OP_UPDATE, key, row, old);
}

static const sink_commit COMMIT = {.commit_lsn = 200, .commit_time = 1700000000000000, .tx_index = 4};

static void test_protobuf(void)
{
	kafka_sink *k = sink_with((kafka_sub_settings){.tombstones = true});
	Cdc__V1__Row key = CDC__V1__ROW__INIT, row = CDC__V1__ROW__INIT;
	icol(0, "id", 1);
	key.n_columns = row.n_columns = 1;
	key.columns = row.columns = pcols;
	Cdc__V1__Event e = event(CDC__V1__OP__OP_INSERT, &key, &row, NULL);
	buf out = {0};
	rendered r;
	record rec[3];
	CHECK_INT(render(k, &e, &out, &r, rec), 1);
	CHECK_INT(rec[0].r.kind, REC_PROTOBUF);
	/* the value completed reads as the event with its commit fields (appended: protobuf merges
	 * fields in any order, so it packs again to what protobuf-c makes of the whole event) */
	kafka_record_value(k, rec[0].r.kind, 0, rec[0].value, rec[0].r.value_len, &r, &COMMIT, 0, 0);
	Cdc__V1__Event full = e;
	full.commit_lsn = COMMIT.commit_lsn;
	full.commit_time = COMMIT.commit_time;
	full.tx_index = COMMIT.tx_index;
	uint8_t packed[256];
	size_t n = cdc__v1__event__pack(&full, packed);
	Cdc__V1__Event *got = cdc__v1__event__unpack(NULL, k->value.len, (const uint8_t *)k->value.data);
	uint8_t again[256];
	CHECK(got && cdc__v1__event__pack(got, again) == n && memcmp(again, packed, n) == 0);
	cdc__v1__event__free_unpacked(got, NULL);
	Cdc__V1__Key pk = CDC__V1__KEY__INIT;
	pk.schema = "public";
	pk.table = "t";
	pk.n_columns = 1;
	pk.columns = pcols;
	n = cdc__v1__key__pack(&pk, packed);
	CHECK(rec[0].r.has_key && rec[0].r.key_len == n && memcmp(rec[0].key, packed, n) == 0);

	/* a delete, then its tombstone under the same key */
	e = event(CDC__V1__OP__OP_DELETE, &key, NULL, &key);
	CHECK_INT(render(k, &e, &out, &r, rec), 2);
	CHECK_INT(rec[1].r.kind, REC_TOMBSTONE);
	CHECK(rec[1].r.key_len == rec[0].r.key_len && memcmp(rec[1].key, rec[0].key, rec[0].r.key_len) == 0);
	buf_free(&out);
	sink_done(k);
}

static void test_json(void)
{
	kafka_sink *k = sink_with((kafka_sub_settings){.format = KAFKA_JSON, .tombstones = true});
	Cdc__V1__Row key, row, old;
	/* an update that moved the row from key 1 to key 2: keyed by the new key, a tombstone for the old */
	Cdc__V1__Event e = key_change(&key, &row, &old);
	buf out = {0};
	rendered r;
	record rec[3];
	CHECK_INT(render(k, &e, &out, &r, rec), 2);
	CHECK(rec[0].r.key_len == 8 && memcmp(rec[0].key, "{\"id\":2}", 8) == 0);
	CHECK(rec[1].r.kind == REC_TOMBSTONE && rec[1].r.key_len == 8 &&
	      memcmp(rec[1].key, "{\"id\":1}", 8) == 0);
	kafka_record_value(k, rec[0].r.kind, 0, rec[0].value, rec[0].r.value_len, &r, &COMMIT, 0, 0);
	/* the value is the line sink: stdout prints, without its newline */
	Cdc__V1__Event full = e;
	full.commit_lsn = COMMIT.commit_lsn;
	full.commit_time = COMMIT.commit_time;
	full.tx_index = COMMIT.tx_index;
	buf line = {0};
	sink_json_event(&line, &full);
	CHECK(line.len == k->value.len + 1 && memcmp(line.data, k->value.data, k->value.len) == 0);
	/* a truncate has no key columns: {} */
	e = event(CDC__V1__OP__OP_TRUNCATE, NULL, NULL, NULL);
	CHECK_INT(render(k, &e, &out, &r, rec), 1);
	CHECK(rec[0].r.has_key && rec[0].r.key_len == 2 && memcmp(rec[0].key, "{}", 2) == 0);
	buf_free(&line);
	buf_free(&out);
	sink_done(k);
}

static void test_debezium(void)
{
	kafka_sink *k = sink_with((kafka_sub_settings){.format = KAFKA_DEBEZIUM, .tombstones = true});
	Cdc__V1__Row key, row, old;
	/* the key changed: a delete of the old key, its tombstone, a create under the new key, each
	 * naming the other key in a header (RelationalChangeRecordEmitter's primary key update) */
	Cdc__V1__Event e = key_change(&key, &row, &old);
	buf out = {0};
	rendered r;
	record rec[3];
	CHECK_INT(render(k, &e, &out, &r, rec), 3);
	CHECK(rec[0].r.kind == REC_DEBEZIUM && memcmp(rec[0].key, "{\"id\":1}", 8) == 0);
	CHECK_STR(headers(&rec[0]), "__debezium.newkey={\"id\":2}");
	CHECK(strstr(rec[0].value, "\"op\":\"d\"") != NULL);
	/* the tombstone carries the delete's headers (Debezium copies them) */
	CHECK(rec[1].r.kind == REC_TOMBSTONE && memcmp(rec[1].key, "{\"id\":1}", 8) == 0);
	CHECK_STR(headers(&rec[1]), "__debezium.newkey={\"id\":2}");
	CHECK(rec[2].r.kind == REC_DEBEZIUM && memcmp(rec[2].key, "{\"id\":2}", 8) == 0);
	CHECK_STR(headers(&rec[2]), "__debezium.oldkey={\"id\":1}");
	kafka_record_value(k, rec[2].r.kind, 0, rec[2].value, rec[2].r.value_len, &r, &COMMIT, 2, 2);
	CHECK(strncmp(k->value.data, "{\"before\":null,\"after\":{\"id\":2},\"source\":{", 42) == 0);
	CHECK(memchr(k->value.data, '\x01', k->value.len) == NULL); /* every mark filled */

	/* Debezium's context headers after the other key's, on the tombstone too */
	k->subs[0].context_headers = true;
	k->subs[0].server_name = "srv";
	CHECK_INT(render(k, &e, &out, &r, rec), 3);
	char context[256], newkey[sizeof context + 32];
	snprintf(context, sizeof context,
		 "__debezium.context.connectorLogicalName=srv,__debezium.context.taskId=0,"
		 "__debezium.context.connectorName=postgresql,__debezium.context.runId=%s",
		 sink_debezium_run_id());
	snprintf(newkey, sizeof newkey, "__debezium.newkey={\"id\":2},%s", context);
	CHECK_STR(headers(&rec[0]), newkey);
	CHECK_STR(headers(&rec[1]), newkey);
	CHECK(strstr(headers(&rec[2]), context) != NULL);
	/* a truncate: no key, the context headers */
	e = event(CDC__V1__OP__OP_TRUNCATE, NULL, NULL, NULL);
	CHECK_INT(render(k, &e, &out, &r, rec), 1);
	CHECK(!rec[0].r.has_key);
	CHECK_STR(headers(&rec[0]), context);
	/* a logical message: none (Debezium's come from another emitter) */
	Cdc__V1__LogicalMessage msg = CDC__V1__LOGICAL_MESSAGE__INIT;
	msg.prefix = "p";
	e = event(CDC__V1__OP__OP_MESSAGE, NULL, NULL, NULL);
	e.message = &msg;
	CHECK_INT(render(k, &e, &out, &r, rec), 1);
	CHECK_INT(rec[0].r.header_len, 0);
	k->subs[0].context_headers = false;
	/* tombstones: false */
	k->subs[0].tombstones = false;
	e = event(CDC__V1__OP__OP_DELETE, &key, NULL, &old);
	CHECK_INT(render(k, &e, &out, &r, rec), 1);
	buf_free(&out);
	sink_done(k);
}

/* A topic template: its variables filled, bytes Kafka refuses in a name as '_', a '{' that starts no
 * variable kept as it is. */
static void test_topic_name(void)
{
	static const struct {
		const char *tmpl, *want;
	} cases[] = {
	    {"cdc.{schema}.{table}", "cdc.public.order_lines"},
	    {"{table}", "order_lines"},
	    {"x{tag}y{subscription}z", "xhotyaudit_1z"},
	    {"{tag}.{schema}", "hot.public"},
	    {"a{b}{", "a{b}{"},
	    {"{", "{"},
	    {"{{table}}", "{order_lines}"},
	    {"", ""},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		buf b = {0};
		kafka_topic_name(&b, cases[i].tmpl, "public", "order lines", "audit/1", "hot");
		CHECK_STR(b.len ? b.data : "", cases[i].want);
		CHECK_INT(b.len, strlen(cases[i].want));
		buf_free(&b);
	}
	buf b = {0};
	kafka_topic_name(&b, "{tag}-{table}", "s", "t", "sub", NULL); /* no tag: nothing */
	CHECK_STR(b.data, "-t");
	buf_free(&b);
}

/* The topic each event's records go to, event after event: made again when the table, the schema
 * or the tag changes, kept when they do not. */
static void test_topic_per_event(void)
{
	kafka_sink *k = sink_with((kafka_sub_settings){.topic = "x.{schema}.{table}.{tag}"});
	Cdc__V1__Row key = CDC__V1__ROW__INIT;
	icol(0, "id", 1);
	key.n_columns = 1;
	key.columns = pcols;
	static const struct {
		const char *schema, *table, *tag, *topic;
	} seq[] = {{"public", "t", NULL, "x.public.t."},   {"public", "t", NULL, "x.public.t."},
		   {"public", "u", NULL, "x.public.u."},   {"other", "u", NULL, "x.other.u."},
		   {"other", "u", "hot", "x.other.u.hot"}, {"other", "u", "ho", "x.other.u.ho"},
		   {"othe", "ru", "ho", "x.othe.ru.ho"},   {"public", "t", NULL, "x.public.t."}};
	buf out = {0};
	rendered r;
	record rec[3];
	for (size_t i = 0; i < sizeof(seq) / sizeof(*seq); i++) {
		Cdc__V1__Event e = event(CDC__V1__OP__OP_INSERT, &key, &key, NULL);
		e.schema = (char *)seq[i].schema;
		e.table = (char *)seq[i].table;
		e.tag = (char *)seq[i].tag;
		CHECK_INT(render(k, &e, &out, &r, rec), 1);
		CHECK_INT(r.topic_len, strlen(seq[i].topic));
		CHECK(memcmp(out.data + sizeof(r), seq[i].topic, r.topic_len) == 0);
	}
	buf_free(&out);
	sink_done(k);
}

int main(void)
{
	test_topic_name();
	test_topic_per_event();
	test_protobuf();
	test_json();
	test_debezium();
	return TEST_SUMMARY("test_kafka_render");
}

/* test_config.c: the configuration loader: the contract's example, defaults, every kind of bad input
 * with its exact "FILE:LINE:COL: message" lines, durations, sizes, masking, the print round trip, and
 * what the key tables decide: defaults by sink, the keys a reload cannot apply, enum names. */
#include "cdc/config/config.h"

#include "decoder/base/fsutil.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sinks/kafka/kafka_sink.h"
#include "sinks/nats/nats_sink.h"
#include "sinks/socket/socket_sink.h"
#include "test.h"

/* The sink modules' indexes, in sinks/modules.c's order, and their settings structs. */
enum { SINK_SOCKET, SINK_KAFKA, SINK_STDOUT, SINK_NATS };
#define SOCK(sub) ((socket_sub_conf *)(sub)->sink_settings[SINK_SOCKET])
#define KAF(sub) ((kafka_sub_conf *)(sub)->sink_settings[SINK_KAFKA])
#define SUBSCRIBERS(c) ((socket_conf *)(c)->sink_sections[SINK_SOCKET])
#define KAFKA(c) ((kafka_conf *)(c)->sink_sections[SINK_KAFKA])

static cfg *parse(const char *yaml, buf *errors)
{
	return cfg_parse("t.yaml", yaml, strlen(yaml), errors);
}

static char *print(const cfg *c)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cfg_print(c, f);
	fclose(f);
	return text;
}

/* Parses yaml, which must fail with exactly the error lines want. */
static void expect_errors(int line, const char *yaml, const char *want)
{
	buf e = {0};
	cfg *c = parse(yaml, &e);
	if (c || !e.data || strcmp(e.data, want) != 0) {
		test_failed++;
		const char *got = c ? "(accepted)\n" : e.data ? e.data : "(no errors)\n";
		fprintf(stderr, "%s:%d: config:\n%s\n  got:\n%s  want:\n%s", __FILE__, line, yaml, got, want);
	} else {
		test_passed++;
	}
	cfg_free(c);
	buf_free(&e);
}

/* status.control_uids' default: root, then the uid running the test unless it is root (issue 31:
 * check-config prints it, not []). */
static void check_default_uids(const cfg *c)
{
	CHECK_INT(c->status.control_uids.n, geteuid() == 0 ? 1 : 2);
	CHECK_INT(c->status.control_uids.v[0], 0);
	CHECK_INT(c->status.control_uids.v[c->status.control_uids.n - 1], geteuid());
}

/* check-config's line for that default. */
static const char *default_uids_line(void)
{
	static char line[64];
	if (geteuid() == 0)
		snprintf(line, sizeof line, "  control_uids: [0]\n");
	else
		snprintf(line, sizeof line, "  control_uids: [0, %u]\n", (unsigned)geteuid());
	return line;
}

/* clang-format off */
static const char example[] =
	"source:\n"
	"  dsn: \"host=db port=5432 dbname=app user=cdc\"  # libpq connection string\n"
	"  slot: cdc_slot\n"
	"  publication: cdc_pub\n"
	"  create: true\n"
	"  publish: [\"public.*\"]\n"
	"  heartbeat: 10s\n"
	"state_dir: /var/lib/cdc\n"
	"status:\n"
	"  socket: /run/cdc/status.sock\n"
	"  listen: \"127.0.0.1:9187\"\n"
	"subscribers:\n"
	"  socket: /run/cdc/events.sock\n"
	"  mode: \"0660\"\n"
	"kafka:\n"
	"  brokers: \"kafka-0:9092,kafka-1:9092\"\n"
	"  properties: { compression.type: lz4 }\n"
	"subscriptions:\n"
	"  - name: new_languages\n"
	"    tables: [\"public.languages\"]\n"
	"    operations: [insert]\n"
	"    tag: send_email\n"
	"    sink: socket\n"
	"  - name: paid_orders\n"
	"    tables: [\"public.orders\"]\n"
	"    operations: [insert, update]\n"
	"    changed: [status]\n"
	"    where: \"new.status = 'paid' and new.amount >= 100\"\n"
	"    columns: [id, status, amount]\n"
	"    sink: kafka\n"
	"    topic: \"cdc.{schema}.{table}\"\n"
	"  - name: jobs\n"
	"    tables: [\"public.jobs\"]\n"
	"    operations: [insert]\n"
	"    sink: socket\n"
	"    consumers: shared\n"
	"    ack_timeout: 30s\n"
	"    max_deliveries: 5\n"
	"    retention: { max_events: 1000000, max_age: 24h, max_bytes: 1GiB, when_full: block }\n";
/* clang-format on */

static void test_example(void)
{
	buf e = {0};
	cfg *c = parse(example, &e);
	CHECK(c != NULL);
	CHECK(e.len == 0);
	if (!c) {
		fprintf(stderr, "%s", e.data);
		buf_free(&e);
		return;
	}
	CHECK_STR(c->path, "t.yaml");
	CHECK_STR(c->source.dsn, "host=db port=5432 dbname=app user=cdc");
	CHECK_STR(c->source.slot, "cdc_slot");
	CHECK_STR(c->source.publication, "cdc_pub");
	CHECK(c->source.create);
	CHECK_INT(c->source.publish.n, 1);
	CHECK_STR(c->source.publish.v[0], "public.*");
	CHECK_INT(c->source.heartbeat_ms, 10000);
	CHECK_INT(c->source.status_interval_ms, 10000);
	CHECK_STR(c->state_dir, "/var/lib/cdc");
	CHECK_STR(c->status.socket, "/run/cdc/status.sock");
	CHECK_STR(c->status.listen, "127.0.0.1:9187");
	CHECK(!c->status.tcp_control);
	check_default_uids(c);
	CHECK_STR(SUBSCRIBERS(c)->socket, "/run/cdc/events.sock");
	CHECK_INT(SUBSCRIBERS(c)->mode, 0660);
	CHECK(c->sink_present[SINK_KAFKA]);
	CHECK_STR(KAFKA(c)->brokers, "kafka-0:9092,kafka-1:9092");
	CHECK_INT(KAFKA(c)->properties.count, 1);
	CHECK_STR(KAFKA(c)->properties.items[0].key, "compression.type");
	CHECK_STR(KAFKA(c)->properties.items[0].value, "lz4");
	CHECK(KAFKA(c)->transactions_topic == NULL);
	CHECK_INT(c->log.level, LOG_LEVEL_INFO);
	CHECK_INT(c->log.format, LOG_FORMAT_TEXT);
	CHECK_INT(c->nsubs, 3);

	const cfg_subscription *s = &c->subs[0];
	CHECK_STR(s->name, "new_languages");
	CHECK_INT(s->line, 19);
	CHECK_INT(s->col, 5);
	CHECK_INT(s->tables.n, 1);
	CHECK_STR(s->tables.v[0], "public.languages");
	CHECK_INT(s->ops, MATCH_OP_INSERT);
	CHECK_STR(s->tag, "send_email");
	CHECK_INT(s->sink, SINK_SOCKET);
	CHECK_INT(s->changed.n, 0);
	CHECK(s->where == NULL);
	CHECK_INT(s->columns.n, 0);
	CHECK_INT(SOCK(s)->consumers, SOCKET_FAILOVER);
	CHECK_INT(SOCK(s)->ack_timeout_ms, 30000);
	CHECK_INT(SOCK(s)->max_deliveries, 0);
	CHECK_INT(SOCK(s)->max_unacked, 1000);
	CHECK_INT(SOCK(s)->batch, SOCKET_BATCH_NONE);
	CHECK_INT(SOCK(s)->retention.max_events, 0);
	CHECK_INT(SOCK(s)->retention.when_full, SOCKET_FULL_BLOCK);

	s = &c->subs[1];
	CHECK_STR(s->name, "paid_orders");
	CHECK_INT(s->line, 24);
	CHECK_STR(s->tables.v[0], "public.orders");
	CHECK_INT(s->ops, MATCH_OP_INSERT | MATCH_OP_UPDATE);
	CHECK(s->tag == NULL);
	CHECK_INT(s->changed.n, 1);
	CHECK_STR(s->changed.v[0], "status");
	CHECK_STR(s->where, "new.status = 'paid' and new.amount >= 100");
	CHECK_INT(s->columns.n, 3);
	CHECK_STR(s->columns.v[0], "id");
	CHECK_STR(s->columns.v[1], "status");
	CHECK_STR(s->columns.v[2], "amount");
	CHECK_INT(s->sink, SINK_KAFKA);
	CHECK_STR(KAF(s)->topic, "cdc.{schema}.{table}");
	CHECK(!KAF(s)->tombstones);

	s = &c->subs[2];
	CHECK_STR(s->name, "jobs");
	CHECK_INT(s->ops, MATCH_OP_INSERT);
	CHECK_INT(s->sink, SINK_SOCKET);
	CHECK_INT(SOCK(s)->consumers, SOCKET_SHARED);
	CHECK_INT(SOCK(s)->ack_timeout_ms, 30000);
	CHECK_INT(SOCK(s)->max_deliveries, 5);
	CHECK_INT(SOCK(s)->max_unacked, 1000);
	CHECK_INT(SOCK(s)->retention.max_events, 1000000);
	CHECK_INT(SOCK(s)->retention.max_age_ms, 24 * 3600 * 1000ll);
	CHECK_INT(SOCK(s)->retention.max_bytes, 1ll << 30);
	CHECK_INT(SOCK(s)->retention.when_full, SOCKET_FULL_BLOCK);
	cfg_free(c);
	buf_free(&e);
}

static void check_defaults(const cfg *c)
{
	CHECK_STR(c->source.dsn, "");
	CHECK_STR(c->source.slot, "cdc_slot");
	CHECK_STR(c->source.publication, "cdc_pub");
	CHECK(!c->source.create);
	CHECK_INT(c->source.publish.n, 1);
	CHECK_STR(c->source.publish.v[0], "public.*");
	CHECK_INT(c->source.heartbeat_ms, 0);
	CHECK_INT(c->source.status_interval_ms, 10000);
	CHECK_STR(c->state_dir, "/var/lib/cdc");
	CHECK_STR(c->status.socket, "/run/cdc/status.sock");
	CHECK(c->status.listen == NULL);
	CHECK(!c->status.tcp_control);
	check_default_uids(c);
	CHECK_STR(SUBSCRIBERS(c)->socket, "/run/cdc/events.sock");
	CHECK_INT(SUBSCRIBERS(c)->mode, 0660);
	CHECK(!c->sink_present[SINK_KAFKA]);
	CHECK_INT(c->log.level, LOG_LEVEL_INFO);
	CHECK_INT(c->log.format, LOG_FORMAT_TEXT);
	CHECK_INT(c->nsubs, 0);
}

static void test_defaults(void)
{
	static const char *const empty[] = {
	    "",
	    "\n",
	    "# nothing but a comment\n",
	    "---\n",
	    "---\n...\n",
	    "~\n",
	    "{}\n",
	    "source:\nstatus:\nsubscribers:\nlog:\nsubscriptions:\n", /* every section commented out */
	};
	for (size_t i = 0; i < sizeof empty / sizeof *empty; i++) {
		buf e = {0};
		cfg *c = parse(empty[i], &e);
		CHECK(c != NULL);
		if (c)
			check_defaults(c);
		else
			fprintf(stderr, "config %zu: %s", i, e.data);
		cfg_free(c);
		buf_free(&e);
	}

	/* Subscription defaults. */
	buf e = {0};
	cfg *c = parse("subscriptions:\n  - name: a\n    tables: [public.t]\n", &e);
	CHECK(c != NULL);
	if (c) {
		const cfg_subscription *s = &c->subs[0];
		CHECK_INT(s->ops, MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE | MATCH_OP_TRUNCATE |
				      MATCH_OP_SCHEMA | MATCH_OP_DDL);
		CHECK_INT(s->sink, SINK_SOCKET);
		CHECK(s->tag == NULL && s->where == NULL);
		CHECK_INT(SOCK(s)->consumers, SOCKET_FAILOVER);
		CHECK_INT(SOCK(s)->ack_timeout_ms, 30000);
		CHECK_INT(SOCK(s)->max_deliveries, 0);
		CHECK_INT(SOCK(s)->max_unacked, 1000);
		CHECK_INT(SOCK(s)->batch, SOCKET_BATCH_NONE);
		CHECK_INT(SOCK(s)->retention.max_events + SOCK(s)->retention.max_age_ms +
			      SOCK(s)->retention.max_bytes,
			  0);
		CHECK_INT(SOCK(s)->retention.when_full, SOCKET_FULL_BLOCK);
	}
	cfg_free(c);

	/* A kafka subscription gets the default topic. */
	buf_reset(&e);
	c = parse("kafka: {brokers: k:9092}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka}\n",
		  &e);
	CHECK(c != NULL);
	if (c) {
		CHECK_STR(KAF(&c->subs[0])->topic, "cdc.{schema}.{table}");
		CHECK_INT(KAFKA(c)->properties.count, 0);
	}
	cfg_free(c);
	buf_free(&e);
}

/* Every other field, set to a non-default value. */
/* clang-format off */
static const char everything[] =
	"source:\n"
	"  dsn: \"postgresql://cdc:s3cret@db:5432/app?sslmode=require\"\n"
	"  slot: my_slot_1\n"
	"  publication: Pub_2\n"
	"  create: false\n"
	"  publish: [\"public.*\", \"\\\"Odd.Schema\\\".t?\"]\n"
	"  heartbeat: 1h30m\n"
	"  status_interval: 250ms\n"
	"state_dir: \"/tmp/cdc state\"\n"
	"status:\n"
	"  socket: /tmp/s.sock\n"
	"  listen: \"[::1]:9187\"\n"
	"  tcp_control: true\n"
	"  control_uids: [0, 1000, 4294967294]\n"
	"  token: 0123456789abcdef0123\n"
	"  tcp_read: probes\n"
	"subscribers:\n"
	"  socket: /tmp/e.sock\n"
	"  mode: \"0600\"\n"
	"kafka:\n"
	"  brokers: k:9092\n"
	"  properties:\n"
	"    sasl.password: hunter2\n"
	"    ssl.key.password: x\n"
	"    my.key: y\n"
	"    client.secret.value: z\n"
	"    linger.ms: 5\n"
	"    empty: \"\"\n"
	"    nothing:\n"
	"  transactions_topic: cdc.transactions\n"
	"log:\n"
	"  level: debug\n"
	"  format: json\n"
	"backfill:\n"
	"  chunk_time: 1s\n"
	"  min_rows: 10\n"
	"  max_rows: 10\n"
	"  max_bytes: 1MiB\n"
	"  rate_limit: 5000\n"
	"  tables: 4\n"
	"subscriptions:\n"
	"  - name: everything.0-A\n"
	"    tables: [\"s.*\", \"a?.b\"]\n"
	"    operations: [message, truncate, delete, update, insert]\n"
	"    tag: \"multi\\nline \\\"tag\\\" \\u00e9\\u2028\\t\"\n"
	"    sink: socket\n"
	"    changed: [a, \"B c\"]\n"
	"    where: \"new.a <> old.a\"\n"
	"    columns: [a]\n"
	"    consumers: key_shared\n"
	"    ack_timeout: 1m1s1ms\n"
	"    max_deliveries: 4294967295\n"
	"    max_unacked: 1\n"
	"    batch: transaction\n"
	"    retention:\n"
	"      max_events: 18446744073709551615\n"
	"      max_age: 7h\n"
	"      max_bytes: 10000000\n"
	"      when_full: drop_oldest\n"
	"  - name: k\n"
	"    tables: [a.b]\n"
	"    tag: \"\"\n"
	"    sink: kafka\n"
	"    topic: \"cdc-{subscription}.{tag}_{schema}.{table}\"\n"
	"    tombstones: true\n"
	"  - name: out\n"
	"    tables: [a.b]\n"
	"    operations: [insert]\n"
	"    sink: stdout\n"
	"    snapshot: true\n";
/* clang-format on */

static void test_everything(void)
{
	buf e = {0};
	cfg *c = parse(everything, &e);
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s", e.data);
		buf_free(&e);
		return;
	}
	CHECK_STR(c->source.slot, "my_slot_1");
	CHECK_STR(c->source.publication, "Pub_2");
	CHECK_STR(c->source.publish.v[1], "\"Odd.Schema\".t?");
	CHECK_INT(c->source.heartbeat_ms, 5400000);
	CHECK_INT(c->source.status_interval_ms, 250);
	CHECK_STR(c->state_dir, "/tmp/cdc state");
	CHECK_STR(c->status.listen, "[::1]:9187");
	CHECK(c->status.tcp_control);
	CHECK_INT(c->status.control_uids.n, 3);
	CHECK_INT(c->status.control_uids.v[2], 4294967294u);
	CHECK_INT(SUBSCRIBERS(c)->mode, 0600);
	CHECK_INT(KAFKA(c)->properties.count, 7);
	CHECK_STR(KAFKA(c)->properties.items[4].value, "5");
	CHECK_STR(KAFKA(c)->properties.items[6].value, "");
	CHECK_STR(KAFKA(c)->transactions_topic, "cdc.transactions");
	CHECK_INT(c->log.level, LOG_LEVEL_DEBUG);
	CHECK_INT(c->log.format, LOG_FORMAT_JSON);
	const cfg_subscription *s = &c->subs[0];
	CHECK_INT(s->ops,
		  MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE | MATCH_OP_TRUNCATE | MATCH_OP_MESSAGE);
	CHECK_STR(s->tag, "multi\nline \"tag\" \xc3\xa9\xe2\x80\xa8\t");
	CHECK_INT(SOCK(s)->consumers, SOCKET_KEY_SHARED);
	CHECK_INT(SOCK(s)->ack_timeout_ms, 61001);
	CHECK_INT(SOCK(s)->max_deliveries, 4294967295u);
	CHECK_INT(SOCK(s)->max_unacked, 1);
	CHECK_INT(SOCK(s)->batch, SOCKET_BATCH_TRANSACTION);
	CHECK(SOCK(s)->retention.max_events == UINT64_MAX);
	CHECK_INT(SOCK(s)->retention.max_bytes, 10000000);
	CHECK_INT(SOCK(s)->retention.when_full, SOCKET_FULL_DROP_OLDEST);
	CHECK_STR(c->subs[1].tag, "");
	CHECK_STR(KAF(&c->subs[1])->topic, "cdc-{subscription}.{tag}_{schema}.{table}");
	CHECK(KAF(&c->subs[1])->tombstones);
	CHECK_INT(c->subs[2].sink, SINK_STDOUT);
	cfg_free(c);
	buf_free(&e);
}

/* clang-format off */
#define BAD(yaml, errors) {__LINE__, yaml, errors}
static const struct {
	int line;
	const char *yaml, *errors;
} bad[] = {
	/* structure */
	BAD("sourc:\n  dsn: x\n",
	    "t.yaml:1:1: unknown top-level key \"sourc\" (allowed: source, state_dir, status, subscribers, kafka, "
	    "nats, log, backfill, subscriptions)\n"),
	BAD("source:\n  slott: x\n",
	    "t.yaml:2:3: source: unknown key \"slott\" (allowed: dsn, password, slot, publication, create, publish, heartbeat, "
	    "status_interval, on_slot_lost, on_publication_newer, failover, primary_dsn, ddl, publish_generated_columns, signal_table)\n"),
	BAD("source:\n  signal_table: public.*\n",
	    "t.yaml:2:17: source.signal_table: invalid table name \"public.*\": a table's name, without * or ? "
	    "(write the glob's character in double quotes)\n"),
	BAD("source:\n  signal_table: signals\n",
	    "t.yaml:2:17: source.signal_table: invalid table name \"signals\": expected schema.table (no dot)\n"),
	BAD("source:\n  on_slot_lost: recreate\n",
	    "t.yaml:2:17: source.on_slot_lost: invalid value \"recreate\" (expected fail, resync)\n"),
	BAD("source:\n  slot: a\n  slot: b\n", "t.yaml:3:3: source.slot: duplicate key (first at line 2, column 3)\n"),
	BAD("source: [1]\n", "t.yaml:1:9: source: expected a mapping, got a list\n"),
	BAD("- a\n", "t.yaml:1:1: expected a mapping, got a list\n"),
	BAD("just text\n", "t.yaml:1:1: expected a mapping, got \"just text\"\n"),
	BAD("? [a]\n: b\n", "t.yaml:1:3: expected a string key, got a list\n"),
	BAD("source:\n  dsn: [a]\n", "t.yaml:2:8: source.dsn: expected a string, got a list\n"),
	BAD("state_dir: {a: b}\n", "t.yaml:1:12: state_dir: expected a path, got a mapping\n"),
	BAD("state_dir:\n", "t.yaml:1:11: state_dir: expected a path, got an empty value\n"),
	BAD("state_dir: ~\n", "t.yaml:1:12: state_dir: expected a path, got null\n"),
	BAD("state_dir: \"\"\n", "t.yaml:1:12: state_dir: must not be empty\n"),
	BAD("state_dir: \"a\\0b\"\n", "t.yaml:1:12: state_dir: must not contain a NUL character\n"),
	BAD("backfill:\n  min_rows: 5000\n  max_rows: 10\n  tables: 0\n",
	    "t.yaml:4:11: backfill.tables: \"0\" is out of range (1 to 4294967295)\n"
	    "t.yaml:3:3: backfill.max_rows: min_rows (5000) is above max_rows (10)\n"),
	BAD("log:\n  level: verbose\n  format: xml\n",
	    "t.yaml:2:10: log.level: invalid value \"verbose\" (expected debug, info, warn, error)\n"
	    "t.yaml:3:11: log.format: invalid value \"xml\" (expected text, json)\n"),
	/* YAML itself */
	BAD("a: &x 1\nb: *x\n", "t.yaml:2:4: aliases (*x) are not allowed\n"),
	BAD("source: &s {slot: a}\nstatus: *s\n", "t.yaml:2:9: aliases (*s) are not allowed\n"),
	BAD("log: {}\n---\nlog: {}\n", "t.yaml:2:1: only one YAML document is allowed\n"),
	BAD("state_dir: !!str 1\n", "t.yaml:1:12: explicit tags (\"tag:yaml.org,2002:str\") are not allowed\n"),
	BAD("source:\n  dsn: \"x\n  slot: [\n",
	    "t.yaml:4:1: syntax error: found unexpected end of stream (while scanning a quoted scalar at 2:8)\n"),
	BAD("source: {dsn: a\n",
	    "t.yaml:2:1: syntax error: did not find expected ',' or '}' (while parsing a flow mapping at 1:9)\n"),
	BAD("\tlog: {}\n", "t.yaml:1:1: syntax error: found character that cannot start any token (while scanning "
		       "for the next token at 1:1)\n"),
	BAD("log:\n  level: \"\xff\"\n", "t.yaml:2:11: syntax error: invalid leading UTF-8 octet (#FF)\n"),
	BAD("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
	    "t.yaml:1:33: nested deeper than 32 levels\n"),
	/* source */
	BAD("source:\n  slot: Bad-Slot\n  publication: \"pub\\nx\"\n",
	    "t.yaml:2:9: source.slot: invalid name \"Bad-Slot\" (expected [a-z0-9_]{1,63}, PostgreSQL's rule for "
	    "slot names)\n"
	    "t.yaml:3:16: source.publication: invalid name \"pub\\x0Ax\" (expected 1 to 63 bytes without control "
	    "characters)\n"),
	/* a publication name is quoted wherever cdc uses it: anything PostgreSQL can hold, up to 63 bytes */
	BAD("source:\n  publication: \"\"\n  slot: Cdc_Slot\n",
	    "t.yaml:2:16: source.publication: invalid name \"\" (expected 1 to 63 bytes without control "
	    "characters)\n"
	    "t.yaml:3:9: source.slot: invalid name \"Cdc_Slot\" (expected [a-z0-9_]{1,63}, PostgreSQL's rule for "
	    "slot names)\n"),
	BAD("source:\n  publication: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	    "t.yaml:2:16: source.publication: invalid name "
	    "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" (expected 1 to 63 bytes without "
	    "control characters)\n"),
	BAD("source:\n  slot: cdc-slot\n",
	    "t.yaml:2:9: source.slot: invalid name \"cdc-slot\" (expected [a-z0-9_]{1,63}, PostgreSQL's rule for "
	    "slot names)\n"),
	BAD("source:\n  slot: \"a;drop table x\"\n",
	    "t.yaml:2:9: source.slot: invalid name \"a;drop table x\" (expected [a-z0-9_]{1,63}, PostgreSQL's rule "
	    "for slot names)\n"),
	BAD("source:\n  slot: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
	    "t.yaml:2:9: source.slot: invalid name \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" "
	    "(expected [a-z0-9_]{1,63}, PostgreSQL's rule for slot names)\n"),
	BAD("source:\n  create: yes\n",
	    "t.yaml:2:11: source.create: expected true or false, got \"yes\" (YAML 1.2 booleans: yes/no/on/off are "
	    "not accepted)\n"),
	BAD("source:\n  publish: []\n", "t.yaml:2:12: source.publish: must not be empty\n"),
	BAD("source:\n  heartbeat: 10x\n  status_interval: 0\n",
	    "t.yaml:2:14: source.heartbeat: invalid duration \"10x\" (expected e.g. 250ms, 10s, 5m, 24h or 1h30m)\n"
	    "t.yaml:3:20: source.status_interval: must be longer than 0\n"),
	BAD("source:\n  heartbeat: -5s\n",
	    "t.yaml:2:14: source.heartbeat: invalid duration \"-5s\" (expected e.g. 250ms, 10s, 5m, 24h or 1h30m)\n"),
	/* status, subscribers */
	BAD("status:\n  listen: \"::1:80\"\n",
	    "t.yaml:2:11: status.listen: invalid address \"::1:80\": an IPv6 address needs brackets: [IPv6]:PORT\n"),
	BAD("status:\n  listen: \"h:0\"\n",
	    "t.yaml:2:11: status.listen: invalid address \"h:0\": port must be a number from 1 to 65535\n"),
	BAD("status:\n  listen: \"h:65536\"\n",
	    "t.yaml:2:11: status.listen: invalid address \"h:65536\": port must be a number from 1 to 65535\n"),
	BAD("status:\n  listen: 9187\n",
	    "t.yaml:2:11: status.listen: invalid address \"9187\": expected HOST:PORT or [IPv6]:PORT\n"),
	BAD("status:\n  listen: \"[]:80\"\n", "t.yaml:2:11: status.listen: invalid address \"[]:80\": expected "
					  "[IPv6]:PORT\n"),
	BAD("status:\n  tcp_control: true\n", "t.yaml:2:3: status.tcp_control: needs status.listen\n"),
	BAD("status:\n  listen: \"0.0.0.0:9000\"\n  control_uids: [0, -1, 4294967295, no-such-user-x, a/b, 2x]\n",
	    "t.yaml:3:21: status.control_uids: must not be negative, got \"-1\"\n"
	    "t.yaml:3:25: status.control_uids: \"4294967295\" is out of range (0 to 4294967294)\n"
	    "t.yaml:3:37: status.control_uids: no user named \"no-such-user-x\" on this machine\n"
	    "t.yaml:3:53: status.control_uids: invalid user \"a/b\" (expected an id, or a name of 1 to 32 letters, "
	    "digits, _ . -)\n"
	    "t.yaml:3:58: status.control_uids: expected a non-negative integer, got \"2x\"\n"),
	BAD("status:\n  socket: "
	    "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaa\n",
	    "t.yaml:2:11: status.socket: a socket path must be 1 to 107 bytes long\n"),
	BAD("subscribers:\n  mode: \"0666\"\n",
	    "t.yaml:2:9: subscribers.mode: mode \"0666\" lets any local user write to the sockets (use e.g. "
	    "\"0660\" and a group)\n"),
	BAD("subscribers:\n  mode: \"4660\"\n", "t.yaml:2:9: subscribers.mode: mode \"4660\" has bits outside 0777\n"),
	BAD("subscribers:\n  mode: \"77777777777777777777777\"\n",
	    "t.yaml:2:9: subscribers.mode: mode \"77777777777777777777777\" has bits outside 0777\n"),
	BAD("subscribers:\n  mode: 0x1\n",
	    "t.yaml:2:9: subscribers.mode: invalid mode \"0x1\" (expected an octal mode like \"0660\")\n"),
	BAD("subscribers:\n  mode: \"0680\"\n",
	    "t.yaml:2:9: subscribers.mode: invalid mode \"0680\" (expected an octal mode like \"0660\")\n"),
	BAD("status:\n  listen: \"[::1]80\"\n  control_uids: 5\n",
	    "t.yaml:2:11: status.listen: invalid address \"[::1]80\": expected [IPv6]:PORT\n"
	    "t.yaml:3:17: status.control_uids: expected a list of user ids or names, got \"5\"\n"),
	BAD("status:\n  listen: \"[zz]:80\"\n", "t.yaml:2:11: status.listen: invalid address \"[zz]:80\": "
	    "expected an IPv6 address inside [ ]\n"),
	BAD("status:\n  listen: \"h st:80\"\n", "t.yaml:2:11: status.listen: invalid address \"h st:80\": "
	    "invalid character in host name\n"),
	BAD("status:\n  listen: \"h:\"\n", "t.yaml:2:11: status.listen: invalid address \"h:\": "
	    "port must be a number from 1 to 65535\n"),
	/* kafka */
	BAD("kafka:\n", "t.yaml:1:7: kafka: missing required key \"brokers\"\n"),
	BAD("kafka:\n  brokers: \"\"\n", "t.yaml:2:12: kafka.brokers: must not be empty\n"),
	BAD("kafka:\n  brokers: b\n  properties: {a: [1]}\n",
	    "t.yaml:3:19: kafka.properties: property \"a\": expected a scalar value or {file: PATH}, got a list\n"),
	BAD("kafka:\n  brokers: b\n  properties: {a: 1, a: 2, \"\": 3}\n",
	    "t.yaml:3:28: kafka.properties: expected a property name, got \"\"\n"
	    "t.yaml:3:22: kafka.properties: duplicate property \"a\" (first at line 3, column 16)\n"),
	BAD("kafka:\n  brokers: b\n  properties: [a]\n",
	    "t.yaml:3:15: kafka.properties: expected a mapping of properties, got a list\n"),
	BAD("kafka:\n  brokers: b\n  transactions_topic: \"a b\"\n",
	    "t.yaml:3:23: kafka.transactions_topic: invalid topic \"a b\": a Kafka topic name "
	    "[a-zA-Z0-9._-]{1,249}\n"),
	BAD("kafka: {brokers: b, transactions_topic: "
	    "tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt"
	    "tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt"
	    "tttttttttttttttttttttttttttttttttttttt}\n",
	    "t.yaml:1:41: kafka.transactions_topic: invalid topic "
	    "\"tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt...\": a Kafka topic name "
	    "[a-zA-Z0-9._-]{1,249}\n"),
	/* subscriptions */
	BAD("subscriptions: {}\n", "t.yaml:1:16: subscriptions: expected a list of subscriptions, got a mapping\n"),
	BAD("subscriptions:\n  - 1\n", "t.yaml:2:5: subscriptions[0]: expected a mapping, got \"1\"\n"),
	BAD("subscriptions:\n  - tables: [a.b]\n  - name: x\n",
	    "t.yaml:2:5: subscriptions[0]: missing required key \"name\"\n"
	    "t.yaml:3:5: subscriptions[1]: missing required key \"tables\"\n"),
	BAD("subscriptions:\n  - name: \"bad name\"\n    tables: [a]\n",
	    "t.yaml:2:11: subscriptions[0].name: invalid name \"bad name\" (expected 1 to 64 characters from "
	    "[A-Za-z0-9_.-])\n"
	    "t.yaml:3:14: subscriptions[0].tables: invalid table pattern \"a\": expected schema.table (no dot)\n"),
	BAD("subscriptions:\n  - {name: a, tables: [p.t]}\n  - {name: b, tables: [p.t]}\n"
	    "  - {name: a, tables: [p.t]}\n  - {name: a, tables: [p.t]}\n",
	    "t.yaml:4:12: subscriptions[2].name: duplicate subscription name \"a\" (first at line 2, column 12)\n"
	    "t.yaml:5:12: subscriptions[3].name: duplicate subscription name \"a\" (first at line 2, column 12)\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [public.t]\n    operations: [schema, truncate]\n",
	    "t.yaml:4:5: subscriptions[0].operations: schema events come before rows: schema needs insert, "
	    "update or delete too\n"),
	BAD("kafka: {brokers: k, schemas_topic: \"bad topic\"}\nsource: {ddl: yes}\n",
	    "t.yaml:1:36: kafka.schemas_topic: invalid topic \"bad topic\": a Kafka topic name "
	    "[a-zA-Z0-9._-]{1,249}\n"
	    "t.yaml:2:15: source.ddl: expected true or false, got \"yes\" (YAML 1.2 booleans: yes/no/on/off "
	    "are not accepted)\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [\"public.orders\"]\n    operations: [insert, upsert, insert]\n",
	    "t.yaml:4:26: subscriptions[0].operations: unknown operation \"upsert\" (expected insert, update, "
	    "delete, truncate, message, schema, ddl)\n"
	    "t.yaml:4:34: subscriptions[0].operations: operation \"insert\" is listed twice\n"),
	BAD("subscriptions:\n  - name: a\n    tables: []\n    operations: insert\n",
	    "t.yaml:3:13: subscriptions[0].tables: must not be empty\n"
	    "t.yaml:4:17: subscriptions[0].operations: expected a list, got \"insert\"\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b.c, .b, a., \"a b.c\", "
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.b, '\"x.y', '\"\"\"\".t', [a.b]]\n",
	    "t.yaml:3:14: subscriptions[0].tables: invalid table pattern \"a.b.c\": expected schema.table with "
	    "exactly one dot outside double quotes\n"
	    "t.yaml:3:21: subscriptions[0].tables: invalid table pattern \".b\": empty schema name\n"
	    "t.yaml:3:25: subscriptions[0].tables: invalid table pattern \"a.\": empty table name\n"
	    "t.yaml:3:29: subscriptions[0].tables: invalid table pattern \"a b.c\": character ' ' is only allowed "
	    "inside double quotes\n"
	    "t.yaml:3:38: subscriptions[0].tables: invalid table pattern "
	    "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\": schema and table names are at "
	    "most 63 bytes\n"
	    "t.yaml:3:106: subscriptions[0].tables: invalid table pattern \"\\\"x.y\": unterminated double quote\n"
	    "t.yaml:3:124: subscriptions[0].tables: expected a \"schema.table\" pattern, got a list\n"),
	BAD("subscriptions:\n  - {name: a, tables: [a\"b\".c, '\"a\"b.c', '\"a\".\"b\"', '\"a\"\".c\"\"\".x'], sink: sokcet, topic: x}\n",
	    "t.yaml:2:24: subscriptions[0].tables: invalid table pattern \"a\\\"b\\\".c\": double quotes must surround a "
	    "whole schema or table name\n"
	    "t.yaml:2:32: subscriptions[0].tables: invalid table pattern \"\\\"a\\\"b.c\": double quotes must surround a "
	    "whole schema or table name\n"
	    "t.yaml:2:75: subscriptions[0].sink: invalid value \"sokcet\" (expected socket, kafka, stdout, nats)\n"),
	BAD("subscriptions:\n  - {name: a, tables: [a.b], sink: stdout, where: \"new.x >= and\"}\n",
	    "t.yaml:2:51: subscriptions[0].where: position 7: expected a value after '>='\n"),
	BAD("status: {tcp_control: true, listen: \"bad\"}\n",
	    "t.yaml:1:37: status.listen: invalid address \"bad\": expected HOST:PORT or [IPv6]:PORT\n"
	    "t.yaml:1:10: status.tcp_control: needs status.token: changes over TCP must carry a bearer token\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b]\n    changed: []\n    columns: [\"\"]\n    where: \"\"\n",
	    "t.yaml:4:14: subscriptions[0].changed: must not be empty\n"
	    "t.yaml:5:15: subscriptions[0].columns: invalid column name \"\": a column name is 1 to 63 bytes long\n"
	    "t.yaml:6:12: subscriptions[0].where: must not be empty\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b]\n    sink: kafka\n    consumers: shared\n    retention: {}\n",
	    "t.yaml:4:11: subscriptions[0].sink: sink kafka needs a top-level kafka section (brokers)\n"
	    "t.yaml:5:5: subscriptions[0].consumers: only valid with sink: socket (this subscription's sink is "
	    "kafka)\n"
	    "t.yaml:6:5: subscriptions[0].retention: only valid with sink: socket (this subscription's sink is "
	    "kafka)\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b]\n    topic: t\n    tombstones: true\n    changed: [x]\n"
	    "    operations: [insert]\n",
	    "t.yaml:4:5: subscriptions[0].topic: only valid with sink: kafka (this subscription's sink is socket)\n"
	    "t.yaml:5:5: subscriptions[0].tombstones: only valid with sink: kafka (this subscription's sink is "
	    "socket)\n"
	    "t.yaml:6:5: subscriptions[0].changed: only valid when operations include update\n"),
	/* record formats */
	BAD("subscriptions:\n  - {name: a, tables: [a.b], sink: stdout, format: json}\n",
	    "t.yaml:2:44: subscriptions[0].format: only valid with sink: kafka or nats (this subscription's sink "
	    "is stdout)\n"),
	BAD("subscriptions:\n  - {name: a, tables: [a.b], sink: socket, cdc_headers: false, topic: t}\n",
	    "t.yaml:2:64: subscriptions[0].topic: only valid with sink: kafka (this subscription's sink is "
	    "socket)\n"
	    "t.yaml:2:44: subscriptions[0].cdc_headers: only valid with sink: kafka or nats (this subscription's "
	    "sink is socket)\n"),
	BAD("kafka: {brokers: k}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka, format: xml}\n",
	    "t.yaml:3:51: subscriptions[0].format: invalid value \"xml\" (expected protobuf, json, debezium, avro)\n"),
	/* format avro: a registry, every column in a record, and only its keys */
	BAD("kafka: {brokers: k}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka, format: avro}\n",
	    "t.yaml:3:5: subscription a has format: avro, which registers its schemas in a schema registry: set "
	    "kafka.schema_registry.url\n"),
	BAD("kafka: {brokers: k, schema_registry: {url: \"ftp://r\"}}\nsubscriptions:\n  - {name: a, tables: [a.b], "
	    "sink: kafka, format: avro, unchanged_toast: omit, schemas: true}\n",
	    "t.yaml:1:44: kafka.schema_registry.url: invalid URL \"ftp://r\": a URL that starts with http:// or "
	    "https://\n"
	    "t.yaml:3:80: subscriptions[0].schemas: only valid with format: debezium (this subscription's format is "
	    "avro)\n"
	    "t.yaml:3:57: subscriptions[0].unchanged_toast: omit is not possible with format: avro (a record has every "
	    "field of its schema): use placeholder\n"
	    "t.yaml:3:5: subscription a has format: avro, which registers its schemas in a schema registry: set "
	    "kafka.schema_registry.url\n"),
	BAD("kafka: {brokers: k}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka, format: debezium, "
	    "subject_strategy: record}\n",
	    "t.yaml:3:61: subscriptions[0].subject_strategy: only valid with format: avro (this subscription's format "
	    "is debezium)\n"),
	BAD("kafka: {brokers: k}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka, format: json, schemas: true,"
	    " server_name: x, unchanged_toast: omit}\n",
	    "t.yaml:3:57: subscriptions[0].schemas: only valid with format: debezium (this subscription's format is "
	    "json)\n"
	    "t.yaml:3:72: subscriptions[0].server_name: only valid with format: debezium and avro (this "
	    "subscription's format is json)\n"
	    "t.yaml:3:88: subscriptions[0].unchanged_toast: only valid with format: debezium and avro (this "
	    "subscription's format is json)\n"),
	BAD("kafka: {brokers: k}\nsubscriptions:\n  - {name: a, tables: [a.b], sink: kafka, format: debezium,"
	    " server_name: \"a b\", unchanged_toast: null}\n",
	    "t.yaml:3:74: subscriptions[0].server_name: invalid name \"a b\": a server name "
	    "[a-zA-Z0-9._-]{1,249}, as Debezium's topic.prefix\n"
	    "t.yaml:3:98: subscriptions[0].unchanged_toast: expected a name, got null\n"),
	BAD("kafka: {brokers: k, transactions_topic: tx}\nsubscriptions:\n"
	    "  - {name: a, tables: [a.b], sink: kafka, format: debezium}\n"
	    "  - {name: b, tables: [a.b], sink: stdout}\n"
	    "  - {name: c, tables: [a.b], sink: kafka}\n",
	    "t.yaml:5:5: subscriptions a (format debezium) and c (format protobuf) write Kafka records in different "
	    "formats, but kafka.transactions_topic holds the records of their transactions in one: give them the "
	    "same format\n"),
	BAD("subscriptions:\n  - {name: a, tables: [a.b], sink: stdout, ack_timeout: 1s, batch: none, max_unacked: 1,"
	    " max_deliveries: 1}\n",
	    "t.yaml:2:44: subscriptions[0].ack_timeout: only valid with sink: socket (this subscription's sink is "
	    "stdout)\n"
	    "t.yaml:2:90: subscriptions[0].max_deliveries: only valid with sink: socket (this subscription's sink "
	    "is stdout)\n"
	    "t.yaml:2:74: subscriptions[0].max_unacked: only valid with sink: socket (this subscription's sink is "
	    "stdout)\n"
	    "t.yaml:2:61: subscriptions[0].batch: only valid with sink: socket (this subscription's sink is "
	    "stdout)\n"),
	BAD("kafka: {brokers: b}\nsubscriptions:\n  - {name: k, tables: [a.b], sink: kafka, topic: \"cdc.{schema}.{nope}\"}\n"
	    "  - {name: l, tables: [a.b], sink: kafka, topic: \"cdc {x\"}\n",
	    "t.yaml:3:50: subscriptions[0].topic: invalid topic \"cdc.{schema}.{nope}\": unknown placeholder "
	    "\"{nope}\" (expected {schema}, {table}, {subscription}, {tag})\n"
	    "t.yaml:4:50: subscriptions[1].topic: invalid topic \"cdc {x\": character ' ' is not allowed in a Kafka "
	    "topic name (use [a-zA-Z0-9._-])\n"),
	/* 1GB: PostgreSQL's reading (1GiB) and the decimal one differ, so neither is guessed */
	BAD("backfill: {max_bytes: 1GB}\nsubscriptions:\n  - name: a\n    tables: [a.b]\n    retention: {max_bytes: 64mb}\n",
	    "t.yaml:1:23: backfill.max_bytes: invalid size \"1GB\" (write 1GiB, or the number of bytes: decimal "
	    "units are ambiguous, PostgreSQL reads 1GB as 1GiB)\n"
	    "t.yaml:5:28: subscriptions[0].retention.max_bytes: invalid size \"64mb\" (write 64MiB, or the number of "
	    "bytes: decimal units are ambiguous)\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b]\n    retention: {max_bytes: 1XB, max_events: -1, max_age: "
	    "1h1h, when_full: never}\n",
	    "t.yaml:4:28: subscriptions[0].retention.max_bytes: invalid size \"1XB\" (expected bytes, or e.g. "
	    "64KiB, 64MiB, 1GiB; at most 2^64-1)\n"
	    "t.yaml:4:45: subscriptions[0].retention.max_events: must not be negative, got \"-1\"\n"
	    "t.yaml:4:58: subscriptions[0].retention.max_age: invalid duration \"1h1h\" (expected e.g. 250ms, 10s, "
	    "5m, 24h or 1h30m)\n"
	    "t.yaml:4:75: subscriptions[0].retention.when_full: invalid value \"never\" (expected block, "
	    "drop_oldest)\n"),
	BAD("subscriptions:\n  - name: a\n    tables: [a.b]\n    max_deliveries: 4294967296\n    max_unacked: 0\n"
	    "    ack_timeout: 0\n    retention: {max_events: 18446744073709551616}\n",
	    "t.yaml:4:21: subscriptions[0].max_deliveries: \"4294967296\" is out of range (0 to 4294967295)\n"
	    "t.yaml:5:18: subscriptions[0].max_unacked: \"0\" is out of range (1 to 4294967295)\n"
	    "t.yaml:6:18: subscriptions[0].ack_timeout: must be longer than 0\n"
	    "t.yaml:7:29: subscriptions[0].retention.max_events: \"18446744073709551616\" is out of range (0 to "
	    "18446744073709551615)\n"),
	/* long user text is cut in messages, never inside a UTF-8 character */
	BAD("subscriptions: [{name: \xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
	    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
	    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9x\xc3\xa9\xc3\xa9\xc3\xa9, tables: [a.b]}]\n",
	    "t.yaml:1:24: subscriptions[0].name: invalid name \"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
	    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
	    "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9x...\" (expected 1 to 64 "
	    "characters from [A-Za-z0-9_.-])\n"),
	BAD("subscriptions: [{name: a, tables: [\"\\\"a\\u0001\\\".b\"]}]\n",
	    "t.yaml:1:36: subscriptions[0].tables: invalid table pattern \"\\\"a\\x01\\\".b\": control characters "
	    "are not allowed\n"),
	BAD("subscriptions:\n  - name: \"a\\nb\"\n    tables: [a.b]\n    bogus: 1\n",
	    "t.yaml:2:11: subscriptions[0].name: invalid name \"a\\x0Ab\" (expected 1 to 64 characters from "
	    "[A-Za-z0-9_.-])\n"
	    "t.yaml:4:5: subscriptions[0]: unknown key \"bogus\" (allowed: name, tables, operations, tag, sink, "
	    "changed, where, columns, consumers, ack_timeout, max_deliveries, max_unacked, batch, retention, "
	    "allow, topic, tombstones, format, schemas, server_name, unchanged_toast, context_headers, subject_strategy, cdc_headers, subject, snapshot)\n"),
};
/* clang-format on */

/* Problems everywhere in one file: each is reported, in file order. */
static void test_many_errors(void)
{
	expect_errors(
	    __LINE__,
	    "source:\n"
	    "  slot: BAD\n"
	    "  heartbeat: soon\n"
	    "state_dir: [x]\n"
	    "status:\n"
	    "  listen: nowhere\n"
	    "colour: blue\n"
	    "subscriptions:\n"
	    "  - name: a\n"
	    "    tables: [nodot]\n"
	    "    operations: [upsert]\n"
	    "  - name: a\n"
	    "    tables: [s.t]\n"
	    "    sink: kafka\n",
	    "t.yaml:2:9: source.slot: invalid name \"BAD\" (expected [a-z0-9_]{1,63}, PostgreSQL's rule for "
	    "slot names)\n"
	    "t.yaml:3:14: source.heartbeat: invalid duration \"soon\" (expected e.g. 250ms, 10s, 5m, 24h or "
	    "1h30m)\n"
	    "t.yaml:4:12: state_dir: expected a path, got a list\n"
	    "t.yaml:6:11: status.listen: invalid address \"nowhere\": expected HOST:PORT or [IPv6]:PORT\n"
	    "t.yaml:7:1: unknown top-level key \"colour\" (allowed: source, state_dir, status, subscribers, "
	    "kafka, nats, log, backfill, subscriptions)\n"
	    "t.yaml:10:14: subscriptions[0].tables: invalid table pattern \"nodot\": expected schema.table "
	    "(no dot)\n"
	    "t.yaml:11:18: subscriptions[0].operations: unknown operation \"upsert\" (expected insert, "
	    "update, delete, truncate, message, schema, ddl)\n"
	    "t.yaml:14:11: subscriptions[1].sink: sink kafka needs a top-level kafka section (brokers)\n"
	    "t.yaml:12:11: subscriptions[1].name: duplicate subscription name \"a\" (first at line 9, "
	    "column 11)\n");
}

/* A file that is not a config at all gives a bounded report. */
static void test_too_many_errors(void)
{
	buf y = {0}, want = {0};
	for (int i = 1; i <= 150; i++)
		buf_printf(&y, "k%d: 1\n", i);
	for (int i = 1; i <= 100; i++)
		buf_printf(&want,
			   "t.yaml:%d:1: unknown top-level key \"k%d\" (allowed: source, state_dir, status, "
			   "subscribers, kafka, nats, log, backfill, subscriptions)\n",
			   i, i);
	buf_puts(&want, "t.yaml:101:1: too many errors, stopped reporting\n");
	expect_errors(__LINE__, y.data, want.data);
	buf_free(&y);
	buf_free(&want);
}

static void test_durations(void)
{
	static const struct {
		const char *s;
		bool ok;
		uint64_t ms;
	} t[] = {
	    {"0", true, 0},
	    {"0s", true, 0},
	    {"250ms", true, 250},
	    {"10s", true, 10000},
	    {"5m", true, 300000},
	    {"24h", true, 86400000},
	    {"1h30m", true, 5400000},
	    {"1h30m15s5ms", true, 5415005},
	    {"90s", true, 90000},
	    {"5124095576030h", true, 5124095576030ull * 3600000},
	    {"18446744073709551615ms", true, UINT64_MAX},
	    {"18446744073709551616ms", false, 0},
	    {"5124095576031h", false, 0},
	    {"5124095576030h1h", false, 0},
	    {"5124095576030h59m59s999ms", false, 0}, /* total overflows */
	    {"", false, 0},
	    {"10", false, 0},
	    {"-5s", false, 0},
	    {"+5s", false, 0},
	    {"1.5h", false, 0},
	    {"5 s", false, 0},
	    {"s", false, 0},
	    {"10S", false, 0},
	    {"1d", false, 0},
	    {"30m1h", false, 0},
	    {"1m1m", false, 0},
	    {"1h30", false, 0},
	    {"10sec", false, 0},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		uint64_t ms = 12345;
		bool ok = cfg_parse_duration(t[i].s, &ms);
		if (ok != t[i].ok || (ok && ms != t[i].ms)) {
			test_failed++;
			fprintf(stderr, "duration \"%s\": got %d %llu\n", t[i].s, ok, (unsigned long long)ms);
		} else {
			test_passed++;
		}
	}
	uint64_t ms;
	CHECK(!cfg_parse_duration(NULL, &ms));
}

static void test_sizes(void)
{
	static const struct {
		const char *s;
		bool ok;
		uint64_t n;
	} t[] = {
	    {"0", true, 0},
	    {"512", true, 512},
	    {"512B", true, 512},
	    {"64KiB", true, 64 << 10},
	    {"64MiB", true, 64 << 20},
	    {"1GiB", true, 1 << 30},
	    {"2TiB", true, 2ull << 40},
	    /* decimal-looking units are ambiguous (PostgreSQL's 1GB is 1GiB): refused */
	    {"10MB", false, 0},
	    {"10kB", false, 0},
	    {"10KB", false, 0},
	    {"3GB", false, 0},
	    {"1TB", false, 0},
	    {"1gb", false, 0},
	    {"18446744073709551615", true, UINT64_MAX},
	    {"16777215TiB", true, 16777215ull << 40},
	    {"16777216TiB", false, 0},
	    {"18446744073709551616", false, 0},
	    {"99999999999999999999999", false, 0},
	    {"", false, 0},
	    {"MiB", false, 0},
	    {"-1", false, 0},
	    {"1.5GiB", false, 0},
	    {"64 MiB", false, 0},
	    {"64mib", false, 0},
	    {"64Mi", false, 0},
	    {"64MiBs", false, 0},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		uint64_t n = 12345;
		bool ok = cfg_parse_size(t[i].s, &n);
		if (ok != t[i].ok || (ok && n != t[i].n)) {
			test_failed++;
			fprintf(stderr, "size \"%s\": got %d %llu\n", t[i].s, ok, (unsigned long long)n);
		} else {
			test_passed++;
		}
	}
	uint64_t n;
	CHECK(!cfg_parse_size(NULL, &n));
}

static void test_mask(void)
{
	static const struct {
		const char *in, *out;
	} t[] = {
	    {"", ""},
	    {"host=db port=5432 dbname=app user=cdc", "host=db port=5432 dbname=app user=cdc"},
	    {"host=db password=secret user=x", "host=db password=******** user=x"},
	    {"password=secret", "password=********"},
	    {"  password = secret  host=h", "  password = ********  host=h"},
	    {"password='a b\\'c d' host=h", "password='********' host=h"},
	    {"password='unterminated host=h", "password='********'"},
	    {"password=a\\ b host=h", "password=******** host=h"},
	    {"password= host=h", "password= ********"}, /* libpq: the value is "host=h" */
	    {"passwordx=1 xpassword=2", "passwordx=1 xpassword=2"},
	    {"host=h password", "host=h password"},
	    {"postgresql://user:pass@host/db", "postgresql://user:********@host/db"},
	    {"postgres://user:pass@host", "postgres://user:********@host"},
	    {"postgresql://user@host/db", "postgresql://user@host/db"},
	    {"postgresql://host:5432/db", "postgresql://host:5432/db"},
	    {"postgresql://u:p@ss@h1:5432,h2/db", "postgresql://u:********@h1:5432,h2/db"},
	    {"postgresql://h:1/db?a=b@c&password=x", "postgresql://h:1/db?a=b@c&password=********"},
	    /* libpq: no user info before the first '/', so "pa" would be a port: not a password */
	    {"postgresql://u:pa/ss@h/db", "postgresql://u:pa/ss@h/db"},
	    /* fuzz: masking a masked string changes nothing */
	    {"postgres://:?password=/&@", "postgres://:?password=********&@"},
	    {"postgresql://u@h/db?sslmode=require&password=x&user=y",
	     "postgresql://u@h/db?sslmode=require&password=********&user=y"},
	    {"postgresql://h/db?password=x", "postgresql://h/db?password=********"},
	    {"postgresql://h/db?pass%77ord=x&%70assword=y&password%3d=z&passwordx=1&password",
	     "postgresql://h/db?pass%77ord=********&%70assword=********&password%3d=z&passwordx=1&password"},
	    {"postgresql://h/db?pass%7=x&pass%=y&%", "postgresql://h/db?pass%7=x&pass%=y&%"},
	    {"postgresql:///db?host=/tmp", "postgresql:///db?host=/tmp"},
	    {"dbname='postgresql://u:p@h/db' user=x", "dbname='postgresql://u:********@h/db' user=x"},
	    {"dbname='host=h password=p' user=x", "dbname='host=h password=********' user=x"},
	    {"dbname=app", "dbname=app"},
	    /* the passphrase of the client key is a secret too */
	    {"host=h sslpassword=abc sslkey=k", "host=h sslpassword=******** sslkey=k"},
	    {"sslpassword='a b' password=c", "sslpassword='********' password=********"},
	    {"postgresql://h/db?sslpassword=x&ssl%70assword=y&sslpasswordx=z",
	     "postgresql://h/db?sslpassword=********&ssl%70assword=********&sslpasswordx=z"},
	    {"host=h ", "host=h "},
	    /* fuzz: masking a masked string changes nothing, even when it is not a valid conninfo */
	    {"password=t: password='t: co so password='t:o", "password=******** password='********'t:o"},
	    {"password='********'t:o", "password='********'t:o"},
	    {"dbname='host=h password=p application_name=it\\'s'",
	     "dbname='host=h password=******** application_name=it\\'s'"},
	};
	for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
		char *m = cfg_mask_dsn(t[i].in), *m2 = cfg_mask_dsn(m);
		CHECK_STR(m, t[i].out);
		CHECK_STR(m2, m); /* cfg_print's output must print the same again */
		free(m);
		free(m2);
	}
	char *m = cfg_mask_dsn(NULL);
	CHECK_STR(m, "");
	free(m);
}

static char *roundtrip(const char *yaml, const char *what)
{
	buf e = {0};
	cfg *c = parse(yaml, &e);
	char *p1 = NULL;
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s: %s", what, e.data);
		goto out;
	}
	p1 = print(c);
	cfg_free(c);
	buf_reset(&e);
	c = cfg_parse("printed.yaml", p1, strlen(p1), &e);
	CHECK(c != NULL);
	if (!c) {
		fprintf(stderr, "%s: the printed config does not parse:\n%s%s", what, p1, e.data);
		goto out;
	}
	char *p2 = print(c);
	CHECK_STR(p2, p1);
	free(p2);
	cfg_free(c);
out:
	buf_free(&e);
	return p1;
}

static void test_print(void)
{
	char *p = roundtrip("", "defaults");
	buf want = {0};
	buf_printf(&want, "%s%s%s",
		   "source:\n"
		   "  dsn: \"\"\n"
		   "  slot: cdc_slot\n"
		   "  publication: cdc_pub\n"
		   "  create: false\n"
		   "  publish: [\"public.*\"]\n"
		   "  heartbeat: 0\n"
		   "  status_interval: 10s\n"
		   "  on_slot_lost: fail\n"
		   "  on_publication_newer: fail\n"
		   "  failover: false\n"
		   "  ddl: false\n"
		   "  publish_generated_columns: false\n"
		   "state_dir: /var/lib/cdc\n"
		   "status:\n"
		   "  socket: /run/cdc/status.sock\n"
		   "  tcp_control: false\n",
		   default_uids_line(),
		   "subscribers:\n"
		   "  socket: /run/cdc/events.sock\n"
		   "  mode: \"0660\"\n"
		   "  first_frame_timeout: 10s\n"
		   "  max_connections: 1024\n"
		   "  max_output: 1MiB\n"
		   "log:\n"
		   "  level: info\n"
		   "  format: text\n"
		   "subscriptions: []\n");
	CHECK_STR(p, want.data);
	buf_free(&want);
	free(p);
	/* An empty list is the default too; a list of its own is printed as given. */
	p = roundtrip("status: {control_uids: []}\n", "empty uids");
	CHECK(p && strstr(p, default_uids_line()));
	free(p);
	p = roundtrip("status: {control_uids: [1000, 0]}\n", "uids");
	CHECK(p && strstr(p, "  control_uids: [1000, 0]\n"));
	free(p);

	p = roundtrip(example, "example");
	CHECK(p &&
	      strstr(
		  p,
		  "  - name: jobs\n"
		  "    tables: [public.jobs]\n"
		  "    operations: [insert]\n"
		  "    sink: socket\n"
		  "    consumers: shared\n"
		  "    ack_timeout: 30s\n"
		  "    max_deliveries: 5\n"
		  "    max_unacked: 1000\n"
		  "    batch: none\n"
		  "    retention: {max_events: 1000000, max_age: 24h, max_bytes: 1GiB, when_full: block}\n"));
	free(p);

	p = roundtrip("source: {ddl: true}\nkafka: {brokers: k, schemas_topic: cdc.schemas}\nsubscriptions:\n"
		      "  - {name: a, tables: [public.t], operations: [insert, schema, ddl], sink: kafka}\n",
		      "schema and DDL events");
	CHECK(p && strstr(p, "  ddl: true\n") && strstr(p, "  schemas_topic: cdc.schemas\n") &&
	      strstr(p, "    operations: [insert, schema, ddl]\n"));
	free(p);

	p = roundtrip("kafka: {brokers: k}\n", "kafka without properties");
	CHECK(p &&
	      strstr(p, "kafka:\n  brokers: k\n  properties: {}\n  exactly_once: false\n  positions_topic: "
			"cdc.positions\n  commit_interval: 0\n  commit_events: 0\nlog:\n"));
	free(p);

	p = roundtrip(everything, "everything");
	CHECK(p != NULL);
	if (p) {
		/* secrets masked, the rest kept */
		CHECK(strstr(p, "s3cret") == NULL);
		CHECK(strstr(p, "hunter2") == NULL);
		CHECK(strstr(p, "  dsn: \"postgresql://cdc:********@db:5432/app?sslmode=require\"\n"));
		CHECK(strstr(p, "    sasl.password: \"********\"\n    ssl.key.password: \"********\"\n"
				"    my.key: \"********\"\n    client.secret.value: \"********\"\n"
				"    linger.ms: \"5\"\n    empty: \"\"\n    nothing: \"\"\n"));
		CHECK(strstr(p, "    tag: \"multi\\nline \\\"tag\\\" \xc3\xa9\\u2028\\t\"\n"));
		CHECK(strstr(p, "  heartbeat: 1h30m\n  status_interval: 250ms\n"));
		CHECK(strstr(p, "    ack_timeout: 1m1s1ms\n"));
		CHECK(strstr(
		    p, "retention: {max_events: 18446744073709551615, max_age: 7h, max_bytes: 10000000, "
		       "when_full: drop_oldest}\n"));
		CHECK(strstr(p, "    operations: [insert, update, delete, truncate, message]\n"));
		CHECK(strstr(p, "  control_uids: [0, 1000, 4294967294]\n"));
		CHECK(strstr(p, "  mode: \"0600\"\n"));
		CHECK(strstr(
		    p, "  - name: out\n    tables: [a.b]\n    operations: [insert]\n    sink: stdout\n"));
	}
	free(p);
}

/* Strings that need quoting or escaping survive print and parse unchanged. */
static void test_print_strings(void)
{
	static const char *const tags[] = {
	    "true",
	    "null",
	    "~",
	    "",
	    "123",
	    "0x1F",
	    "-a",
	    "a: b",
	    "a #b",
	    "[x]",
	    "{y}",
	    "'",
	    "\"",
	    "\\",
	    "tab\there",
	    "\x01\x1f\x7f",
	    "\xc2\x85 nel",
	    "\xe2\x80\xa8\xe2\x80\xa9",
	    "\xef\xbb\xbf bom",
	    "\xf0\x9f\x98\x80 emoji",
	    "\xef\xbf\xbe",
	    " lead",
	    "trail ",
	    "a\n\nb",
	    "yes",
	    "No",
	    "-",
	    "?",
	    "*a",
	    "&a",
	    "!a",
	    "%a",
	    "@a",
	    "`a",
	    "|",
	    ">",
	    "a,b",
	    "#",
	    "/x",
	    "_x",
	};
	for (size_t i = 0; i < sizeof tags / sizeof *tags; i++) {
		buf y = {0};
		/* write each tag as a double-quoted YAML string with every byte escaped */
		buf_puts(&y, "subscriptions:\n  - name: a\n    tables: [a.b]\n    tag: \"");
		for (const unsigned char *p = (const unsigned char *)tags[i]; *p;) {
			unsigned cp = *p, n = cp < 0x80 ? 1 : cp < 0xE0 ? 2 : cp < 0xF0 ? 3 : 4;
			cp = n == 1 ? cp : cp & (0x3Fu >> (n - 1));
			for (unsigned k = 1; k < n; k++)
				cp = cp << 6 | (p[k] & 0x3Fu);
			buf_printf(&y, "\\U%08X", cp);
			p += n;
		}
		buf_puts(&y, "\"\n");
		char *p = roundtrip(y.data, tags[i]);
		buf e = {0};
		cfg *c = p ? cfg_parse("p.yaml", p, strlen(p), &e) : NULL;
		CHECK(c != NULL);
		if (c)
			CHECK_STR(c->subs[0].tag, tags[i]);
		cfg_free(c);
		buf_free(&e);
		free(p);
		buf_free(&y);
	}
}

static void test_load(void)
{
	buf e = {0};
	CHECK(cfg_load("/nonexistent/cdc.yaml", &e) == NULL);
	CHECK_STR(e.data, "/nonexistent/cdc.yaml:1:1: cannot open: No such file or directory\n");
	buf_reset(&e);

	char path[] = "/tmp/test_config_XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs(example, f);
	fclose(f);
	cfg *c = cfg_load(path, &e);
	CHECK(c != NULL);
	if (c) {
		CHECK_STR(c->path, path);
		CHECK_INT(c->nsubs, 3);
	}
	cfg_free(c);

	f = fopen(path, "w");
	fputs("log:\n  level: loud\n", f);
	fclose(f);
	buf_reset(&e);
	CHECK(cfg_load(path, &e) == NULL);
	buf want = {0};
	buf_printf(&want, "%s:2:10: log.level: invalid value \"loud\" (expected debug, info, warn, error)\n",
		   path);
	CHECK_STR(e.data, want.data);
	buf_free(&want);
	unlink(path);
	buf_free(&e);
}

/* Inputs that once crashed or misbehaved (found by hand or by tests/fuzz/fuzz_config.c). */
static void test_fuzz_regressions(void)
{
	/* a tag is user text: a %0A escape in it must not split the error line */
	expect_errors(__LINE__, "state_dir: !<a%0Ab> x\n",
		      "t.yaml:1:12: explicit tags (\"a\\x0Ab\") are not allowed\n");
	/* fuzz: a kafka property name that prints longer than YAML's 1024-character implicit key limit */
	buf y = {0};
	buf_puts(&y, "kafka:\n  brokers: b\n  properties:\n    ? \"");
	for (int i = 0; i < 600; i++)
		buf_puts(&y, "\\\\"); /* one backslash in the key, two when printed */
	buf_puts(&y, "\"\n    : v\n");
	char *p = roundtrip(y.data, "long property name");
	CHECK(p && strstr(p, "\n  properties:\n    ? \"\\\\\\\\") &&
	      strstr(p, "\\\\\"\n    : v\n  exactly_once: false\n  positions_topic: cdc.positions\n  "
			"commit_interval: 0\n  commit_events: 0\nlog:\n"));
	free(p);
	buf_free(&y);
	/* several subscriptions without a name: the duplicate-name check sorts NULL names */
	expect_errors(__LINE__,
		      "subscriptions:\n  - tables: [a.b]\n  - tables: [a.b]\n  - {name: a, tables: [a.b]}\n",
		      "t.yaml:2:5: subscriptions[0]: missing required key \"name\"\n"
		      "t.yaml:3:5: subscriptions[1]: missing required key \"name\"\n");
}

/* PUT bodies: JSON objects of subscription keys, the name from the path. */
static void test_parse_subscription(void)
{
	buf e = {0};
	cfg *c = parse(example, &e);
	CHECK(c != NULL);
	if (!c)
		return;
	const char *body = "{\"tables\": [\"public.orders\"], \"operations\": [\"insert\", \"update\"],\n"
			   "\t\"changed\": [\"status\"], \"where\": \"new.amount > 5\", \"sink\": \"kafka\", "
			   "\"tombstones\": true}";
	cfg_subscription *s = cfg_parse_subscription(c, "orders", body, strlen(body), &e);
	CHECK(s != NULL);
	if (s) {
		CHECK_STR(s->name, "orders");
		CHECK_INT(s->tables.n, 1);
		CHECK_STR(s->tables.v[0], "public.orders");
		CHECK_INT(s->ops, MATCH_OP_INSERT | MATCH_OP_UPDATE);
		CHECK_STR(s->where, "new.amount > 5");
		CHECK_INT(s->sink, SINK_KAFKA);
		CHECK_STR(KAF(s)->topic, "cdc.{schema}.{table}");
		CHECK(KAF(s)->tombstones);
	}
	cfg_subscription_free(s);
	/* the name may be given, and must then be the path's */
	s = cfg_parse_subscription(c, "a", "{\"name\": \"a\", \"tables\": [\"x.y\"]}",
				   strlen("{\"name\": \"a\", \"tables\": [\"x.y\"]}"), &e);
	CHECK(s && strcmp(s->name, "a") == 0 && s->sink == SINK_SOCKET && SOCK(s)->max_unacked == 1000);
	cfg_subscription_free(s);
	static const struct {
		const char *body, *errors;
	} bodies[] = {
	    {"{\"name\": \"b\", \"tables\": [\"x.y\"]}",
	     "body:1:10: name: must be \"a\" (the name in the path) or left out\n"},
	    {"{\"tables\": [\"x.y\"], \"where\": \"id >\"}",
	     "body:1:30: where: position 1: unknown name 'id' (columns are new.<name> or old.<name>)\n"},
	    {"{\"tables\": [\"x.y\"], \"colour\": 1}",
	     "body:1:21: unknown key \"colour\" (allowed: name, tables, operations, tag, sink, changed, "
	     "where, columns, "
	     "consumers, ack_timeout, max_deliveries, max_unacked, batch, retention, allow, topic, "
	     "tombstones, "
	     "format, schemas, server_name, unchanged_toast, context_headers, subject_strategy, cdc_headers, "
	     "subject, "
	     "snapshot)\n"},
	    {"{\"sink\": \"stdout\"}", "body:1:1: missing required key \"tables\"\n"},
	    {"[1]", "body:1:1: must be one JSON object with the keys of a subscription\n"},
	    {"", "body:1:1: must be one JSON object with the keys of a subscription\n"},
	    {"{\"tables\": [\"x.y\"], \"topic\": \"t\"}",
	     "body:1:21: topic: only valid with sink: kafka (this subscription's sink is socket)\n"},
	    {"{\"tables\": [\"x.y\"], \"retention\": {\"max_age\": \"soon\"}}",
	     "body:1:46: retention.max_age: invalid duration \"soon\" (expected e.g. 250ms, 10s, 5m, 24h or "
	     "1h30m)\n"},
	};
	for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
		buf_reset(&e);
		s = cfg_parse_subscription(c, "a", bodies[i].body, strlen(bodies[i].body), &e);
		CHECK(s == NULL);
		CHECK_STR(e.data ? e.data : "", bodies[i].errors);
		cfg_subscription_free(s);
	}
	/* sink kafka needs the running configuration's kafka section */
	cfg *plain = parse("state_dir: /tmp\n", &e);
	buf_reset(&e);
	s = cfg_parse_subscription(plain, "k", "{\"tables\": [\"x.y\"], \"sink\": \"kafka\"}",
				   strlen("{\"tables\": [\"x.y\"], \"sink\": \"kafka\"}"), &e);
	CHECK(s == NULL);
	CHECK_STR(e.data ? e.data : "",
		  "body:1:29: sink: sink kafka needs a top-level kafka section (brokers)\n");
	cfg_free(plain);
	cfg_free(c);
	buf_free(&e);
}

static char **sub_names(const cfg *c)
{
	static char *names[8];
	for (size_t i = 0; i < 8; i++)
		names[i] = i < c->nsubs ? c->subs[i].name : NULL;
	return names;
}

/* The overlay: puts and deletes laid over the file, saved and loaded again. */
static void test_overlay(void)
{
	char dir[] = "/tmp/test_overlay_XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	buf e = {0};
	cfg_overlay *o = cfg_overlay_load(dir, &e);
	CHECK(o && o->nput == 0 && o->deleted.n == 0);
	cfg *c = parse(example, &e);
	cfg_subscription *s =
	    cfg_parse_subscription(c, "late", "{\"tables\": [\"public.x\"], \"sink\": \"stdout\"}",
				   strlen("{\"tables\": [\"public.x\"], \"sink\": \"stdout\"}"), &e);
	cfg_overlay_put(o, s);
	s = cfg_parse_subscription(
	    c, "jobs", "{\"tables\": [\"public.jobs2\"], \"consumers\": \"key_shared\"}",
	    strlen("{\"tables\": [\"public.jobs2\"], \"consumers\": \"key_shared\"}"), &e);
	cfg_overlay_put(o, s);
	cfg_overlay_delete(o, "new_languages");
	cfg_overlay_delete(o, "late");
	s = cfg_parse_subscription(c, "late", "{\"tables\": [\"public.y\"], \"where\": \"new.a = 'it''s'\"}",
				   strlen("{\"tables\": [\"public.y\"], \"where\": \"new.a = 'it''s'\"}"),
				   &e);
	cfg_overlay_put(o, s);
	CHECK_INT(o->nput, 2);
	CHECK_INT(o->deleted.n, 1);
	char err[256];
	CHECK(cfg_overlay_save(o, dir, err, sizeof err));
	cfg_overlay *back = cfg_overlay_load(dir, &e);
	CHECK(back != NULL);
	CHECK_STR(e.data ? e.data : "", "");
	if (back) {
		CHECK(cfg_overlay_apply(back, c, NULL, &e));
		char **n = sub_names(c);
		CHECK_STR(n[0], "paid_orders");
		CHECK_STR(n[1], "jobs");
		CHECK_STR(n[2], "late");
		CHECK(n[3] == NULL);
		CHECK_STR(c->subs[1].tables.v[0], "public.jobs2");
		CHECK_INT(SOCK(&c->subs[1])->consumers, SOCKET_KEY_SHARED);
		CHECK_STR(c->subs[2].where, "new.a = 'it''s'");
		CHECK_STR(c->subs[2].tables.v[0], "public.y");
	}
	/* a kafka subscription in the overlay and no kafka section in the file */
	cfg_overlay *k = cfg_overlay_copy(back);
	s = cfg_parse_subscription(c, "k", "{\"tables\": [\"x.y\"], \"sink\": \"kafka\"}",
				   strlen("{\"tables\": [\"x.y\"], \"sink\": \"kafka\"}"), &e);
	cfg_overlay_put(k, s);
	cfg *plain = parse("state_dir: /s\n", &e);
	buf_reset(&e);
	cfg_strlist out = {0};
	CHECK(!cfg_overlay_apply(k, plain, &out, &e));
	CHECK_STR(e.data ? e.data : "",
		  "/s/subscriptions.yaml: subscription k has sink kafka, but the configuration has no "
		  "kafka section (add one, or DELETE the subscription)\n");
	/* left out, named; the overlay's others apply */
	CHECK_INT(out.n, 1);
	CHECK_STR(out.n ? out.v[0] : "", "k");
	CHECK(!cfg_find_subscription(plain, "k"));
	CHECK_INT(plain->nsubs, k->nput - 1);
	for (size_t i = 0; i < out.n; i++)
		free(out.v[i]);
	free(out.v);
	/* a damaged file is an error with its position */
	char path[300];
	snprintf(path, sizeof path, "%s/subscriptions.yaml", dir);
	FILE *f = fopen(path, "w");
	fputs("subscriptions: []\ndeleted: [\"no spaces\"]\n", f);
	fclose(f);
	buf_reset(&e);
	CHECK(cfg_overlay_load(dir, &e) == NULL);
	buf want = {0};
	buf_printf(&want,
		   "%s:2:11: deleted: invalid name \"no spaces\" (expected 1 to 64 characters from "
		   "[A-Za-z0-9_.-])\n",
		   path);
	CHECK_STR(e.data ? e.data : "", want.data);
	buf_free(&want);
	unlink(path);
	rmdir(dir);
	cfg_free(plain);
	cfg_overlay_free(k);
	cfg_overlay_free(back);
	cfg_overlay_free(o);
	cfg_free(c);
	buf_free(&e);
}

/* Publication names PostgreSQL accepts, however hostile: kept byte for byte and printed back. */
static void test_hostile_publications(void)
{
	static const char *const names[] = {
	    "pub\"; DROP TABLE t; --",
	    "Pub With Space",
	    "'x'",
	    "back\\slash",
	    "p\xc3\xbc"
	    "b \xe2\x82\xac",
	    "UPPER",
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", /* 63 bytes */
	};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		buf y = {0}, e = {0};
		buf_puts(&y, "source:\n  publication: \"");
		for (const char *c = names[i]; *c; c++) {
			if (*c == '"' || *c == '\\')
				buf_putc(&y, '\\');
			buf_putc(&y, *c);
		}
		buf_puts(&y, "\"\n");
		cfg *c = parse(y.data, &e);
		CHECK(c != NULL);
		if (c)
			CHECK_STR(c->source.publication, names[i]);
		else
			fprintf(stderr, "%s", e.data);
		cfg_free(c);
		free(roundtrip(y.data, names[i]));
		buf_free(&y);
		buf_free(&e);
	}
}

/* The defaults a subscription gets from the key table, by sink: a sink's own string keys (topic) only
 * with that sink, the rest whatever the sink. */
static void test_sink_defaults(void)
{
	static const struct {
		const char *sub;
		const char *topic; /* NULL: not a Kafka subscription (none is printed) */
		uint64_t ack_timeout_ms;
		uint32_t max_unacked;
	} cases[] = {
	    {"{name: a, tables: [a.b]}", NULL, 30000, 1000},
	    {"{name: a, tables: [a.b], sink: stdout}", NULL, 30000, 1000},
	    {"{name: a, tables: [a.b], sink: kafka}", "cdc.{schema}.{table}", 30000, 1000},
	    {"{name: a, tables: [a.b], sink: kafka, topic: t}", "t", 30000, 1000},
	    {"{name: a, tables: [a.b], ack_timeout: 1s, max_unacked: 5}", NULL, 1000, 5},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		buf y = {0}, e = {0};
		buf_printf(&y, "kafka: {brokers: k}\nsubscriptions: [%s]\n", cases[i].sub);
		cfg *c = parse(y.data, &e);
		CHECK(c != NULL);
		if (c) {
			const cfg_subscription *s = &c->subs[0];
			buf json = {0};
			cfg_subscription_json(s, &json);
			if (cases[i].topic)
				CHECK_STR(KAF(s)->topic, cases[i].topic);
			else
				CHECK(strstr(json.data, "\"topic\"") == NULL);
			buf_free(&json);
			CHECK_INT(SOCK(s)->ack_timeout_ms, cases[i].ack_timeout_ms);
			CHECK_INT(SOCK(s)->max_unacked, cases[i].max_unacked);
		} else {
			fprintf(stderr, "case %zu: %s", i, e.data);
		}
		/* the same from a PUT body */
		cfg_subscription *p =
		    c ? cfg_parse_subscription(c, "a", cases[i].sub, strlen(cases[i].sub), &e) : NULL;
		CHECK(p != NULL);
		if (p)
			CHECK(cases[i].topic
				  ? p->sink == SINK_KAFKA && strcmp(KAF(p)->topic, cases[i].topic) == 0
				  : p->sink != SINK_KAFKA);
		cfg_subscription_free(p);
		cfg_free(c);
		buf_free(&y);
		buf_free(&e);
	}
}

/* The formats' defaults: tombstones follow each delete with format: debezium unless it says no;
 * server_name and unchanged_toast; what check-config prints of them. */
static void test_format_defaults(void)
{
	static const struct {
		const char *sub;
		int format;
		bool tombstones, schemas;
		const char *printed;
	} cases[] = {
	    {"{name: a, tables: [a.b], sink: kafka}", KAFKA_PROTOBUF, false, false,
	     "    tombstones: false\n    format: protobuf\n"},
	    {"{name: a, tables: [a.b], sink: kafka, format: json}", KAFKA_JSON, false, false,
	     "    tombstones: false\n    format: json\n"},
	    {"{name: a, tables: [a.b], sink: kafka, format: debezium}", KAFKA_DEBEZIUM, true, false,
	     "    tombstones: true\n    format: debezium\n    schemas: false\n    server_name: cdc\n"
	     "    unchanged_toast: placeholder\n"},
	    {"{name: a, tables: [a.b], sink: kafka, format: debezium, tombstones: false, schemas: true,"
	     " server_name: dbserver1, unchanged_toast: omit}",
	     KAFKA_DEBEZIUM, false, true,
	     "    tombstones: false\n    format: debezium\n    schemas: true\n    server_name: dbserver1\n"
	     "    unchanged_toast: omit\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		buf y = {0}, e = {0};
		buf_printf(&y, "kafka: {brokers: k}\nsubscriptions: [%s]\n", cases[i].sub);
		cfg *c = parse(y.data, &e);
		CHECK(c != NULL);
		if (!c) {
			fprintf(stderr, "case %zu: %s", i, e.data);
			buf_free(&y);
			buf_free(&e);
			continue;
		}
		const cfg_subscription *s = &c->subs[0];
		CHECK_INT(KAF(s)->format, cases[i].format);
		CHECK_INT(KAF(s)->tombstones, cases[i].tombstones);
		CHECK_INT(KAF(s)->dbz.schemas, cases[i].schemas);
		char *p = roundtrip(y.data, "format");
		CHECK(p && strstr(p, cases[i].printed));
		if (p && !strstr(p, cases[i].printed))
			fprintf(stderr, "case %zu printed:\n%s", i, p);
		free(p);
		/* the same from a PUT body */
		cfg_subscription *put =
		    cfg_parse_subscription(c, "a", cases[i].sub, strlen(cases[i].sub), &e);
		CHECK(put && KAF(put)->format == cases[i].format &&
		      KAF(put)->tombstones == cases[i].tombstones);
		cfg_subscription_free(put);
		cfg_free(c);
		buf_free(&y);
		buf_free(&e);
	}

	/* a PUT that would mix formats on the transactions topic is refused when it is made */
	buf e = {0};
	cfg *c = parse("kafka: {brokers: k, transactions_topic: tx}\n"
		       "subscriptions: [{name: a, tables: [a.b], sink: kafka, format: json}]\n",
		       &e);
	CHECK(c != NULL);
	const char *body = "{\"tables\": [\"a.b\"], \"sink\": \"kafka\", \"format\": \"debezium\"}";
	cfg_subscription *put = c ? cfg_parse_subscription(c, "b", body, strlen(body), &e) : NULL;
	CHECK(put == NULL);
	CHECK_STR(
	    e.data,
	    "body:1:1: subscriptions b (format debezium) and a (format json) write Kafka records in "
	    "different formats, but kafka.transactions_topic holds the records of their transactions in "
	    "one: give them the same format\n");
	/* replacing the one subscription with another format is fine */
	buf_reset(&e);
	put = c ? cfg_parse_subscription(c, "a", body, strlen(body), &e) : NULL;
	CHECK(put != NULL);
	cfg_subscription_free(put);
	cfg_free(c);
	buf_free(&e);
}

/* Debezium's formats leave truncates out unless the operations list names them (its
 * skipped.operations default), and avro receives schema events whatever the list says. */
static void test_format_operations(void)
{
	static const unsigned rows = MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE;
	static const struct {
		const char *sub;
		unsigned ops;
	} cases[] = {
	    {"{name: a, tables: [a.b], sink: kafka}", MATCH_OPS_DEFAULT},
	    {"{name: a, tables: [a.b], sink: kafka, format: debezium}",
	     MATCH_OPS_DEFAULT & ~MATCH_OP_TRUNCATE},
	    {"{name: a, tables: [a.b], sink: kafka, format: debezium, operations: [insert, truncate]}",
	     MATCH_OP_INSERT | MATCH_OP_TRUNCATE},
	    {"{name: a, tables: [a.b], sink: kafka, format: avro}", MATCH_OPS_DEFAULT & ~MATCH_OP_TRUNCATE},
	    {"{name: a, tables: [a.b], sink: kafka, format: avro, operations: [insert, update, delete, "
	     "truncate]}",
	     rows | MATCH_OP_TRUNCATE | MATCH_OP_SCHEMA},
	    {"{name: a, tables: [a.b], sink: kafka, format: avro, operations: [message]}", MATCH_OP_MESSAGE},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		buf y = {0}, e = {0};
		buf_printf(&y,
			   "kafka: {brokers: k, schema_registry: {url: \"http://r\"}}\nsubscriptions: [%s]\n",
			   cases[i].sub);
		cfg *c = parse(y.data, &e);
		CHECK(c != NULL);
		if (c) {
			CHECK_INT(c->subs[0].ops, cases[i].ops);
			/* the same from a PUT body */
			const char *body = strchr(cases[i].sub, ',') + 1;
			buf b = {0};
			buf_printf(&b, "{%s", body);
			cfg_subscription *put = cfg_parse_subscription(c, "a", b.data, b.len, &e);
			CHECK(put && put->ops == cases[i].ops);
			cfg_subscription_free(put);
			buf_free(&b);
		} else {
			fprintf(stderr, "case %zu: %s", i, e.data);
		}
		cfg_free(c);
		buf_free(&y);
		buf_free(&e);
	}
}

static void note_key(const char *key, void *arg)
{
	buf *b = arg;
	buf_printf(b, "%s%s", b->len ? "," : "", key);
}

/* Which changed keys a reload cannot apply, from the key tables' restart flags. */
static void test_restart_keys(void)
{
	static const char base[] = "source: {dsn: \"host=a\", heartbeat: 1s}\n"
				   "status: {control_uids: [1]}\n"
				   "kafka: {brokers: k, properties: {acks: all}, transactions_topic: tx}\n"
				   "subscriptions: [{name: a, tables: [a.b]}]\n";
	static const struct {
		const char *next;
		const char *want; /* the keys, in file order */
	} cases[] = {
	    {base, ""},
	    {"source: {dsn: \"host=b\", heartbeat: 1s}\nstatus: {control_uids: [1]}\n"
	     "kafka: {brokers: k, properties: {acks: all}, transactions_topic: tx}\n",
	     "source.dsn"},
	    /* live: the heartbeat, the transactions topic, subscriptions */
	    {"source: {dsn: \"host=a\", heartbeat: 5s}\nstatus: {control_uids: [1]}\n"
	     "kafka: {brokers: k, properties: {acks: all}}\nsubscriptions: []\n",
	     ""},
	    {"source: {dsn: \"host=a\", heartbeat: 1s, slot: s2, publish: [x.y], create: true}\n"
	     "state_dir: /tmp/x\nstatus: {control_uids: [1, 2]}\n"
	     "kafka: {brokers: k, properties: {acks: \"1\"}, transactions_topic: tx}\n",
	     "source.slot,source.create,source.publish,state_dir,status.control_uids,kafka.properties"},
	    {"source: {dsn: \"host=a\", heartbeat: 1s}\nstatus: {control_uids: [1]}\n",
	     "kafka.brokers,kafka.properties"},
	    /* a reload applies the SASL credentials and source.password (read again from their files) */
	    {"source: {dsn: \"host=a\", heartbeat: 1s, password: p}\nstatus: {control_uids: [1]}\n"
	     "kafka: {brokers: k, properties: {sasl.username: u, acks: all, sasl.password: p},\n"
	     "        transactions_topic: tx}\n",
	     ""},
	    {"source: {dsn: \"host=a\", heartbeat: 1s}\nstatus: {control_uids: [1]}\n"
	     "kafka: {brokers: k, properties: {sasl.password: p, sasl.mechanism: PLAIN, acks: all},\n"
	     "        transactions_topic: tx}\n",
	     "kafka.properties"},
	    {"source: {dsn: \"host=a\", heartbeat: 1s}\n"
	     "status: {control_uids: [1], socket: /tmp/s, listen: \"127.0.0.1:1\", tcp_control: true,\n"
	     "         token: 0123456789abcdef0123, tcp_read: token}\n"
	     "subscribers: {socket: /tmp/e, mode: \"0600\"}\nlog: {level: debug, format: json}\n"
	     "kafka: {brokers: k, properties: {acks: all}, transactions_topic: tx}\n",
	     "status.socket,status.listen,status.tcp_control,subscribers.socket,subscribers.mode,log.level,"
	     "log.format"},
	};
	buf e = {0};
	cfg *old = parse(base, &e);
	CHECK(old != NULL);
	for (size_t i = 0; old && i < sizeof cases / sizeof *cases; i++) {
		cfg *next = parse(cases[i].next, &e);
		CHECK(next != NULL);
		if (!next) {
			fprintf(stderr, "case %zu: %s", i, e.data);
			continue;
		}
		buf got = {0};
		size_t n = cfg_restart_keys(old, next, note_key, &got);
		CHECK_STR(got.data ? got.data : "", cases[i].want);
		size_t want_n = *cases[i].want ? 1 : 0;
		for (const char *p = cases[i].want; *p; p++)
			want_n += *p == ',';
		CHECK_INT(n, want_n);
		buf_free(&got);
		cfg_free(next);
	}
	cfg_free(old);
	buf_free(&e);
}

/* Two sinks with a key of one name (format): each subscription's goes to its own sink's; a key of
 * another sink is refused; the NATS section's values are checked where they stand. */
static void test_nats_keys(void)
{
	buf e = {0};
	cfg *c = parse("kafka: {brokers: k}\nnats: {servers: \"nats://n:4222\", password: pw}\n"
		       "subscriptions:\n"
		       "  - {name: k, tables: [a.b], sink: kafka, format: json}\n"
		       "  - {format: json, name: n, tables: [a.b], sink: nats, subject: \"x.{table}\"}\n",
		       &e);
	CHECK(c != NULL);
	if (c) {
		const nats_sub_conf *n = c->subs[1].sink_settings[SINK_NATS];
		CHECK_INT(KAF(&c->subs[0])->format, KAFKA_JSON);
		CHECK_INT(n->format, NATS_JSON);
		CHECK_STR(n->subject, "x.{table}");
		CHECK_INT(KAF(&c->subs[1])->format, KAFKA_PROTOBUF); /* the Kafka key was not set */
		const nats_conf *nc = c->sink_sections[SINK_NATS];
		CHECK_STR(nc->stream, "CDC");
		CHECK_INT(nc->max_in_flight, 1024);
		CHECK_INT(nc->duplicate_window_ms, 120000);
		char *out = print(c);
		CHECK(strstr(out, "  password: \"********\"\n") && !strstr(out, "pw\n"));
		free(out);
	}
	cfg_free(c);
	buf_free(&e);
	expect_errors(
	    __LINE__,
	    "kafka: {brokers: k}\nsubscriptions:\n"
	    "  - {name: a, tables: [a.b], sink: nats, topic: t, format: avro}\n"
	    "  - {name: b, tables: [a.b], sink: kafka, subject: s}\n",
	    "t.yaml:3:60: subscriptions[0].format: invalid value \"avro\" (expected protobuf, json, "
	    "debezium)\n"
	    "t.yaml:3:36: subscriptions[0].sink: sink nats needs a top-level nats section (servers)\n"
	    "t.yaml:3:42: subscriptions[0].topic: only valid with sink: kafka (this subscription's sink is "
	    "nats)\n"
	    "t.yaml:4:43: subscriptions[1].subject: only valid with sink: nats (this subscription's sink "
	    "is kafka)\n");
	expect_errors(
	    __LINE__,
	    "nats: {servers: n, stream: \"a b\", schemas_subject: \"cdc.*\"}\nsubscriptions:\n"
	    "  - {name: a, tables: [a.b], sink: nats, subject: \"x..{tab}\"}\n"
	    "  - {name: b, tables: [a.b], sink: nats, subject: \"x.{tab}\"}\n",
	    "t.yaml:1:28: nats.stream: invalid stream \"a b\": a JetStream stream name "
	    "[A-Za-z0-9_-]{1,255}\n"
	    "t.yaml:1:52: nats.schemas_subject: invalid subject \"cdc.*\": a published subject cannot hold "
	    "the wildcards * and >\n"
	    "t.yaml:3:51: subscriptions[0].subject: invalid subject \"x..{tab}\": a subject's tokens must "
	    "not be empty (no leading, trailing or double dots)\n"
	    "t.yaml:4:51: subscriptions[1].subject: invalid subject \"x.{tab}\": unknown placeholder "
	    "\"{tab}\" (expected {schema}, {table}, {subscription}, {tag})\n");
}

/* format: debezium on NATS: Debezium's keys (the same rows as Kafka's) fill each sink's own struct,
 * are refused with another format, and truncates are left out unless listed. */
static void test_nats_debezium_keys(void)
{
	buf e = {0};
	cfg *c = parse("kafka: {brokers: k}\nnats: {servers: \"nats://n:4222\"}\n"
		       "subscriptions:\n"
		       "  - {name: k, tables: [a.b], sink: kafka, format: debezium, server_name: kserver}\n"
		       "  - {name: n, tables: [a.b], sink: nats, format: debezium, server_name: nserver,"
		       " schemas: true, unchanged_toast: omit, context_headers: false}\n"
		       "  - {name: p, tables: [a.b], sink: nats}\n",
		       &e);
	CHECK(c != NULL);
	if (c) {
		const nats_sub_conf *n = c->subs[1].sink_settings[SINK_NATS];
		CHECK_STR(KAF(&c->subs[0])->dbz.server_name, "kserver");
		CHECK_INT(n->format, NATS_DEBEZIUM);
		CHECK_STR(n->dbz.server_name, "nserver");
		CHECK(n->dbz.schemas && !n->dbz.context_headers);
		CHECK_INT(n->dbz.unchanged_toast, DBZ_TOAST_OMIT);
		CHECK_INT(c->subs[1].ops &
			      (MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE | MATCH_OP_TRUNCATE),
			  MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE);
		const nats_sub_conf *p = c->subs[2].sink_settings[SINK_NATS];
		CHECK_STR(p->dbz.server_name, "cdc");
		CHECK(p->dbz.context_headers && !p->dbz.schemas);
		CHECK(c->subs[2].ops & MATCH_OP_TRUNCATE);
		char *out = print(c);
		CHECK(strstr(out, "    server_name: nserver\n    unchanged_toast: omit\n") != NULL);
		/* the protobuf subscription shows none of them */
		const char *third = strstr(out, "  - name: p\n");
		CHECK(third && !strstr(third, "server_name"));
		free(out);
	}
	cfg_free(c);
	buf_free(&e);
	expect_errors(
	    __LINE__,
	    "nats: {servers: n}\nsubscriptions:\n"
	    "  - {name: a, tables: [a.b], sink: nats, format: json, server_name: x, schemas: true}\n",
	    "t.yaml:3:72: subscriptions[0].schemas: only valid with format: debezium (this "
	    "subscription's format is json)\n"
	    "t.yaml:3:56: subscriptions[0].server_name: only valid with format: debezium (this "
	    "subscription's format is json)\n");
}

static void test_enum_names(void)
{
	CHECK_STR(cfg_sink_name(SINK_STDOUT), "stdout");
	CHECK_STR(cfg_sink_name(SINK_SOCKET), "socket");
	CHECK_STR(cfg_sink_name(SINK_KAFKA), "kafka");
	CHECK_STR(cfg_sink_name(7), "?");
}

/* fsutil_replace (decoder/base/fsutil.c), which the overlay file is written with. */
static void test_file_replace(void)
{
	char dir[] = "/tmp/test_config_XXXXXX", path[64], got[16] = "", err[256] = "";
	CHECK(mkdtemp(dir) != NULL);
	snprintf(path, sizeof path, "%s/f", dir);
	CHECK(fsutil_replace(path, "one", 3, 0600, err, sizeof err));
	CHECK(fsutil_replace(path, "two", 3, 0600, err, sizeof err));
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	if (f) {
		CHECK_INT(fread(got, 1, sizeof got - 1, f), 3);
		fclose(f);
	}
	CHECK_STR(got, "two");
	snprintf(path, sizeof path, "%s/no/f", dir);
	CHECK(!fsutil_replace(path, "x", 1, 0600, err, sizeof err));
	char want[128];
	snprintf(want, sizeof want, "cannot write %s/no/f.tmp: No such file or directory", dir);
	CHECK_STR(err, want);
	snprintf(path, sizeof path, "%s/f", dir);
	CHECK(unlink(path) == 0 && rmdir(dir) == 0);
}

/* Writes text (len bytes) into dir/name. */
static void put_file(const char *dir, const char *name, const char *text, size_t len)
{
	char path[256];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		CHECK_INT(fwrite(text, 1, len, f), len);
		fclose(f);
	}
}

/* Secret keys given as {file: PATH}: read (one final newline dropped), printed as {file: PATH} and
 * never as the value, recorded with where they came from (in clear: file NULL); every way a file
 * can be unusable is an error naming it, and never quotes the secret. */
static void test_secret_files(void)
{
	char dir[] = "/tmp/test_config_XXXXXX", cfgpath[128];
	CHECK(mkdtemp(dir) != NULL);
	put_file(dir, "pw", "Pg-S3cret\n", 10);
	put_file(dir, "crlf", "Kafka-S3cret\r\n", 14);
	put_file(dir, "dsn", "host=db password=Dsn-S3cret", 27);
	put_file(dir, "empty", "", 0);
	put_file(dir, "newline", "\n", 1);
	put_file(dir, "nul", "a\0b", 3);
	char *big = util_xmalloc(64 * 1024 + 1);
	memset(big, 'x', 64 * 1024 + 1);
	put_file(dir, "big", big, 64 * 1024 + 1);
	put_file(dir, "max", big, 64 * 1024);
	free(big);
	char fifo[160];
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	CHECK(mkfifo(fifo, 0600) == 0);

	/* relative to the configuration's directory */
	snprintf(cfgpath, sizeof cfgpath, "%s/c.yaml", dir);
	static const char good[] =
	    "source:\n  dsn: {file: dsn}\n  password: {file: pw}\n"
	    "kafka:\n  brokers: k\n  properties:\n    sasl.password: {file: crlf}\n"
	    "    ssl.key.password: in-clear\n    acks: all\n    client.id: {file: max}\n";
	put_file(dir, "c.yaml", good, strlen(good));
	buf e = {0};
	cfg *c = cfg_load(cfgpath, &e);
	CHECK(c != NULL);
	if (c) {
		CHECK_STR(c->source.dsn, "host=db password=Dsn-S3cret");
		CHECK_STR(c->source.password, "Pg-S3cret");
		CHECK_STR(KAFKA(c)->properties.items[0].value, "Kafka-S3cret");
		CHECK_STR(KAFKA(c)->properties.items[1].value, "in-clear");
		CHECK_INT(strlen(KAFKA(c)->properties.items[3].value), 64 * 1024);
		CHECK_INT(c->nsecrets, 5);
		static const char *const keys[] = {
		    "source.dsn", "source.password", "kafka.properties.sasl.password",
		    "kafka.properties.ssl.key.password", "kafka.properties.client.id"};
		static const char *const files[] = {"dsn", "pw", "crlf", NULL, "max"};
		for (size_t i = 0; i < c->nsecrets && i < 5; i++) {
			char want[160] = "(clear)";
			if (files[i])
				snprintf(want, sizeof want, "%s/%s", dir, files[i]);
			CHECK_STR(c->secrets[i].key, keys[i]);
			CHECK_STR(c->secrets[i].file ? c->secrets[i].file : "(clear)", want);
		}
		/* printed as the files cdc reads: relative paths taken from the configuration's directory */
		char *p = print(c);
		buf want = {0};
		buf_printf(&want, "  dsn: {file: %s/dsn}\n  password: {file: %s/pw}\n", dir, dir);
		CHECK(strstr(p, want.data) != NULL);
		buf_reset(&want);
		buf_printf(&want,
			   "    sasl.password: {file: %s/crlf}\n    ssl.key.password: \"********\"\n"
			   "    acks: all\n    client.id: {file: %s/max}\n",
			   dir, dir);
		CHECK(strstr(p, want.data) != NULL);
		buf_free(&want);
		CHECK(!strstr(p, "S3cret") && !strstr(p, "in-clear"));
		/* the printed configuration reads back the same */
		put_file(dir, "again.yaml", p, strlen(p));
		char again[160];
		snprintf(again, sizeof again, "%s/again.yaml", dir);
		cfg *c2 = cfg_load(again, &e);
		CHECK(c2 != NULL && strcmp(c2->source.password, "Pg-S3cret") == 0);
		cfg_free(c2);
		free(p);
	}
	cfg_free(c);

	/* in clear: masked, and recorded without a file; a DSN without a password holds no secret */
	c = parse("source: {dsn: \"host=a\", password: Clear-S3cret}\n", &e);
	CHECK(c != NULL);
	if (c) {
		CHECK_INT(c->nsecrets, 1);
		CHECK_STR(c->secrets[0].key, "source.password");
		CHECK(c->secrets[0].file == NULL);
		char *p = print(c);
		CHECK(strstr(p, "  dsn: \"host=a\"\n  password: \"********\"\n") != NULL);
		free(p);
	}
	cfg_free(c);
	c = parse("source: {dsn: \"host=a password=x1234\"}\n", &e);
	CHECK(c && c->nsecrets == 1 && strcmp(c->secrets[0].key, "source.dsn") == 0 && !c->secrets[0].file);
	cfg_free(c);

	static const struct {
		const char *yaml, *want;
	} unusable[] = {
	    {"source: {password: {file: empty}}\n",
	     ":1:27: source.password: {file: \"empty\"}: the file is empty\n"},
	    {"source: {password: {file: newline}}\n",
	     ":1:27: source.password: {file: \"newline\"}: the file is empty\n"},
	    {"source: {password: {file: nul}}\n",
	     ":1:27: source.password: {file: \"nul\"}: the file holds a NUL byte\n"},
	    {"source: {password: {file: big}}\n",
	     ":1:27: source.password: {file: \"big\"}: the file is larger than 64 KiB: not a secret\n"},
	    {"source: {password: {file: fifo}}\n",
	     ":1:27: source.password: {file: \"fifo\"}: not a regular file\n"},
	    {"source: {password: {file: nothere}}\n",
	     ":1:27: source.password: {file: \"nothere\"}: no such file (DIR/nothere, relative to the "
	     "configuration's directory)\n"},
	    {"source: {password: {file: \"\"}}\n",
	     ":1:27: source.password: a file's path is 1 to 4095 bytes long\n"},
	    {"source: {password: {file: [a]}}\n",
	     ":1:27: source.password: expected a file's path, got a list\n"},
	    {"source: {password: {path: pw}}\n",
	     ":1:20: source.password: expected the value, or {file: PATH} naming a file that holds it\n"},
	    {"source: {password: {file: pw, mode: x}}\n",
	     ":1:20: source.password: expected the value, or {file: PATH} naming a file that holds it\n"},
	    {"source: {password: \"\"}\n", ":1:20: source.password: must not be empty\n"},
	    {"kafka: {brokers: k, properties: {sasl.password: {file: empty}}}\n",
	     ":1:56: kafka.properties.sasl.password: {file: \"empty\"}: the file is empty\n"},
	    /* a secret from a file is never quoted, even where the key's checks quote a value */
	    {"state_dir: {file: pw}\n", ":1:12: state_dir: expected a path, got a mapping\n"},
	};
	for (size_t i = 0; i < sizeof unusable / sizeof *unusable; i++) {
		put_file(dir, "c.yaml", unusable[i].yaml, strlen(unusable[i].yaml));
		buf_reset(&e);
		c = cfg_load(cfgpath, &e);
		CHECK(c == NULL);
		buf want = {0};
		buf_printf(&want, "%s", cfgpath);
		for (const char *w = unusable[i].want; *w; w++)
			if (strncmp(w, "DIR", 3) == 0)
				buf_puts(&want, dir), w += 2;
			else
				buf_putc(&want, *w);
		CHECK_STR(e.data ? e.data : "", want.data);
		buf_free(&want);
		cfg_free(c);
	}
	/* a client that needs no secret does not read their files (it may not be allowed to) */
	static const char unread[] = "source: {password: {file: nothere}, dsn: {file: dsn}}\n"
				     "kafka: {brokers: k, properties: {sasl.password: {file: /root/x}}}\n";
	put_file(dir, "c.yaml", unread, strlen(unread));
	buf_reset(&e);
	c = cfg_load_no_secrets(cfgpath, &e);
	CHECK(c != NULL);
	if (c) {
		CHECK(c->source.password == NULL);
		CHECK_STR(c->source.dsn, "");
		CHECK_STR(KAFKA(c)->properties.items[0].value, "");
		CHECK_INT(c->nsecrets, 3);
		CHECK_STR(c->nsecrets == 3 ? c->secrets[2].file : "", "/root/x");
		buf unread_path = {0};
		buf_printf(&unread_path, "%s/nothere", dir);
		CHECK_STR(c->secrets[0].file, unread_path.data);
		buf_free(&unread_path);
	}
	cfg_free(c);
	CHECK(cfg_load(cfgpath, &e) == NULL); /* and one that reads them says the file is missing */

	/* a subscription's keys are never secret: {file: ...} stays a mapping there, and is refused */
	cfg_subscription *sub =
	    cfg_parse_subscription(&(cfg){0}, "a", "{tables: [a.b], tag: {file: /etc/passwd}}", 40, &e);
	CHECK(sub == NULL);
	cfg_subscription_free(sub);

	static const char *const names[] = {"pw",  "crlf", "dsn",  "empty",  "newline",	  "nul",
					    "big", "max",  "fifo", "c.yaml", "again.yaml"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
		char path[160];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		unlink(path);
	}
	CHECK(rmdir(dir) == 0);
	buf_free(&e);
}

/* allow: {uids, gids} of a socket subscription: numbers and names (looked up when the file is read),
 * printed as numbers, copied with the subscription, in a PUT body too; the lengths checked. */
static void test_allow_lists(void)
{
	buf e = {0};
	cfg *c = parse("subscriptions:\n"
		       "  - {name: a, tables: [x.y], allow: {uids: [root, 1001], gids: [root, 27]}}\n"
		       "  - {name: b, tables: [x.y], allow: {gids: [4294967294]}}\n"
		       "  - {name: c, tables: [x.y]}\n",
		       &e);
	CHECK(c != NULL);
	if (c) {
		const socket_sub_conf *a = SOCK(&c->subs[0]), *b = SOCK(&c->subs[1]), *o = SOCK(&c->subs[2]);
		CHECK(a->allow.uids.n == 2 && a->allow.uids.v[0] == 0 && a->allow.uids.v[1] == 1001);
		CHECK(a->allow.gids.n == 2 && a->allow.gids.v[0] == 0 && a->allow.gids.v[1] == 27);
		CHECK(b->allow.uids.n == 0 && b->allow.gids.n == 1 && b->allow.gids.v[0] == 4294967294u);
		CHECK(o->allow.uids.n == 0 && o->allow.gids.n == 0);
		char *p = print(c);
		CHECK(strstr(p, "    allow: {uids: [0, 1001], gids: [0, 27]}\n  - name: b") != NULL);
		CHECK(strstr(p, "    allow: {gids: [4294967294]}\n  - name: c") != NULL);
		CHECK(strstr(strstr(p, "name: c"), "allow") == NULL); /* none: not printed */
		free(p);
		cfg_subscription *copy = cfg_subscription_copy(&c->subs[0]);
		CHECK(SOCK(copy)->allow.uids.v != a->allow.uids.v && SOCK(copy)->allow.uids.v[1] == 1001);
		cfg_subscription_free(copy);
		buf j = {0};
		cfg_subscription_json(&c->subs[0], &j);
		CHECK(strstr(j.data, "\"allow\":{\"uids\":[0,1001],\"gids\":[0,27]}") != NULL);
		buf_free(&j);
		static const char body[] = "{\"tables\": [\"x.y\"], \"allow\": {\"uids\": [5]}}";
		cfg_subscription *put = cfg_parse_subscription(c, "d", body, strlen(body), &e);
		CHECK(put && SOCK(put)->allow.uids.n == 1 && SOCK(put)->allow.uids.v[0] == 5);
		cfg_subscription_free(put);
	}
	cfg_free(c);
	buf big = {0};
	buf_puts(&big, "subscriptions:\n  - {name: a, tables: [x.y], allow: {uids: [");
	for (int i = 0; i < 257; i++)
		buf_printf(&big, "%s%d", i ? ", " : "", i);
	buf_puts(&big, "]}}\n");
	expect_errors(
	    __LINE__, big.data,
	    "t.yaml:2:44: subscriptions[0].allow.uids: 257 ids: at most 256 in one list\n"
	    "t.yaml:2:30: subscriptions[0].allow: needs uids or gids (an empty allow list would let no "
	    "consumer subscribe)\n");
	buf_free(&big);
	expect_errors(
	    __LINE__, "subscriptions:\n  - {name: a, tables: [x.y], allow: {gids: [no-such-group-x]}}\n",
	    "t.yaml:2:45: subscriptions[0].allow.gids: no group named \"no-such-group-x\" on this machine\n"
	    "t.yaml:2:30: subscriptions[0].allow: needs uids or gids (an empty allow list would let no "
	    "consumer subscribe)\n");
	expect_errors(
	    __LINE__, "subscriptions:\n  - {name: a, tables: [x.y], allow: {uids: [], gids: []}}\n",
	    "t.yaml:2:30: subscriptions[0].allow: needs uids or gids (an empty allow list would let no "
	    "consumer subscribe)\n");
	expect_errors(
	    __LINE__,
	    "subscriptions:\n  - {name: a, tables: [x.y], allow: {uids: [1], user: [2]}, sink: stdout}\n",
	    "t.yaml:2:49: subscriptions[0].allow: unknown key \"user\" (allowed: uids, gids)\n"
	    "t.yaml:2:30: subscriptions[0].allow: only valid with sink: socket (this subscription's sink "
	    "is stdout)\n");
	buf_free(&e);
}

/* The reference (docs/configuration.md) is written from the key table: every key documented, its
 * default and range as the parser has them. */
static void test_reference(void)
{
	buf out = {0};
	char err[1024] = "";
	CHECK(cfg_reference(&out, err, sizeof err));
	CHECK_STR(err, "");
	static const char *const want[] = {
	    "## `source`\n",
	    "### `source.status_interval`\n\n*duration, at least 1ms* · default `10s` · *reload* applies "
	    "it\n",
	    "### `state_dir`\n\n*path* · default `/var/lib/cdc` · *restart* to change\n",
	    "### `subscriptions[].name`\n\n*name* · default *required* · *reload* applies it\n",
	    "### `subscriptions[].max_unacked`\n\n*integer, at least 1* · default `1000` · *reload* applies "
	    "it\n",
	    "### `subscriptions[].retention.when_full`\n\n*one of `block`, `drop_oldest`* · default `block`",
	    "### `subscriptions[].topic`\n\n*topic template* · default `cdc.{schema}.{table}`",
	    "### `kafka.properties`\n\n*mapping of strings, secret* · default none · *restart* to change\n",
	    "### `source.password`\n\n*string, secret* · default none · *reload* applies it\n",
	    "### `source.dsn`\n\n*libpq connection string, secret* · default `` · *restart* to change\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		bool found = out.data && strstr(out.data, want[i]);
		CHECK(found);
		if (!found)
			fprintf(stderr, "missing from the reference: %s\n", want[i]);
	}
	buf_free(&out);
}

/* Relative paths are taken from the file's directory; the result stays relative to the current
 * directory when the file's path is (issue 31). */
static void test_relative_paths(void)
{
	static const struct {
		const char *file, *value, *want;
	} cases[] = {
	    {"cdc.yaml", "./state", "./state"},
	    {"./cdc.yaml", "state", "state"},
	    {"etc/cdc.yaml", "./state", "etc/state"},
	    {"etc/cdc.yaml", "state/main", "etc/state/main"},
	    {"etc/cdc.yaml", ".//./state", "etc/state"},
	    {"etc/cdc.yaml", ".", "etc"},
	    {"etc/cdc.yaml", "../state", "etc/../state"},
	    {"etc/cdc.yaml", ".state", "etc/.state"},
	    {"/etc/cdc/cdc.yaml", "./state", "/etc/cdc/state"},
	    {"/etc/cdc/cdc.yaml", "/var/lib/cdc", "/var/lib/cdc"},
	    {"/cdc.yaml", "state", "/state"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char yaml[256];
		snprintf(
		    yaml, sizeof yaml,
		    "state_dir: \"%s\"\nstatus: {socket: \"%s/s.sock\"}\nsubscribers: {socket: \"%s\"}\n",
		    cases[i].value, cases[i].value, cases[i].value);
		buf e = {0};
		cfg *c = cfg_parse(cases[i].file, yaml, strlen(yaml), &e);
		CHECK(c != NULL);
		if (!c) {
			fprintf(stderr, "%s", e.data ? e.data : "");
			buf_free(&e);
			continue;
		}
		char sock[256];
		snprintf(sock, sizeof sock, "%s/s.sock", cases[i].want);
		CHECK_STR(c->state_dir, cases[i].want);
		CHECK_STR(SUBSCRIBERS(c)->socket, cases[i].want);
		if (strcmp(cases[i].value, ".") != 0) /* "./s.sock": the file's directory's s.sock */
			CHECK_STR(c->status.socket, sock);
		cfg_free(c);
	}
	/* The defaults are absolute; a socket path too long once resolved says against what. */
	buf e = {0};
	cfg *c = cfg_parse("etc/cdc.yaml", "", 0, &e);
	CHECK_STR(c->state_dir, "/var/lib/cdc");
	CHECK_STR(c->status.socket, CFG_DEFAULT_STATUS_SOCKET);
	cfg_free(c);
	char yaml[256], dir[120], want[1024];
	memset(dir, 'd', sizeof dir - 1);
	dir[sizeof dir - 1] = '\0';
	snprintf(yaml, sizeof yaml, "subscribers: {socket: ./events.sock}\n");
	char file[256];
	snprintf(file, sizeof file, "%s/cdc.yaml", dir);
	c = cfg_parse(file, yaml, strlen(yaml), &e);
	CHECK(c == NULL);
	snprintf(
	    want, sizeof want,
	    "%s:1:23: subscribers.socket: a socket path must be 1 to 107 bytes long (resolved against %s's "
	    "directory)\n",
	    file, file);
	CHECK_STR(e.data, want);
	buf_free(&e);
}

int main(void)
{
	test_example();
	test_defaults();
	test_everything();
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		expect_errors(bad[i].line, bad[i].yaml, bad[i].errors);
	test_many_errors();
	test_too_many_errors();
	test_durations();
	test_sizes();
	test_mask();
	test_hostile_publications();
	test_print();
	test_print_strings();
	test_load();
	test_fuzz_regressions();
	test_parse_subscription();
	test_overlay();
	test_sink_defaults();
	test_format_defaults();
	test_format_operations();
	test_restart_keys();
	test_enum_names();
	test_nats_keys();
	test_nats_debezium_keys();
	test_file_replace();
	test_reference();
	test_secret_files();
	test_allow_lists();
	test_relative_paths();
	return TEST_SUMMARY("test_config");
}

/* keys.c: the configuration's schema: one table of keys per section, each key with its type, its
 * default and whether a reload applies it, and the generic walks over those tables that parse,
 * default, free, copy, print and compare a configuration (cf. pgbouncer's bouncer_params[]). */
#include "cdc/config/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the walks ---- */

void walk_map(ctx *x, const node *m, void *base, const keys *t, pair *seen)
{
	if (is_null(m))
		goto check; /* "kafka:" with everything commented out: an empty mapping */
	if (m->kind != N_MAP) {
		wrong_kind(x, m, "a mapping");
		return;
	}
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const node *kn = m->kids[i], *v = m->kids[i + 1];
		if (kn->kind != N_SCALAR) {
			wrong_kind(x, kn, "a string key");
			continue;
		}
		size_t j;
		for (j = 0; j < t->n; j++)
			if (strlen(t->k[j].name) == kn->len && strcmp(t->k[j].name, kn->text) == 0)
				break;
		if (j == t->n) {
			buf allowed = {0};
			for (size_t a = 0; a < t->n; a++)
				buf_printf(&allowed, "%s%s", a ? ", " : "", t->k[a].name);
			err_at(x, kn, "unknown %skey %s (allowed: %s)", t->top ? "top-level " : "",
			       qnode(x, kn), allowed.data);
			buf_free(&allowed);
		} else if (seen[j].k) {
			err_key(x, kn, t->k[j].name, "duplicate key (first at line %d, column %d)",
				seen[j].k->line, seen[j].k->col);
		} else {
			seen[j] = (pair){kn, v};
			size_t old = path_push(x, t->k[j].name);
			t->k[j].type->set(x, v, base, &t->k[j]);
			path_pop(x, old);
		}
	}
check:
	for (size_t j = 0; j < t->n; j++)
		if ((t->k[j].flags & K_REQUIRED) && !seen[j].k)
			err_at(x, m, "missing required key \"%s\"", t->k[j].name);
	if (t->check)
		t->check(x, base, seen);
}

/* Stores v in the size bytes of a ST_VALUE field. */
static void store_value(void *f, size_t size, uint64_t v)
{
	if (size == sizeof(uint64_t)) {
		memcpy(f, &v, size);
	} else if (size == sizeof(uint32_t)) {
		uint32_t u = (uint32_t)v;
		memcpy(f, &u, size);
	} else {
		bool b = v != 0;
		memcpy(f, &b, sizeof b);
	}
}

static void key_default(void *base, const key *k)
{
	switch (k->type->store) {
	case ST_VALUE:
		store_value(FIELD(base, k, char), k->type->size, k->def.n);
		break;
	case ST_STR:
		*FIELD(base, k, char *) = k->def.s ? xstrdup(k->def.s) : NULL;
		break;
	case ST_LIST:
		if (k->def.s) {
			cfg_strlist *l = FIELD(base, k, cfg_strlist);
			l->v = xmalloc(sizeof *l->v);
			l->v[0] = xstrdup(k->def.s);
			l->n = 1;
		}
		break;
	case ST_SECTION:
		keys_default(base, k->arg);
		break;
	case ST_OWN:
		break;
	}
}

void keys_default(void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++)
		if (!(k->flags & K_BY_SINK))
			key_default(base, k);
}

void keys_clear(void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		switch (k->type->store) {
		case ST_STR:
			free(*FIELD(base, k, char *));
			break;
		case ST_LIST:
			cfg_strlist_free(FIELD(base, k, cfg_strlist));
			break;
		case ST_SECTION:
			keys_clear(base, k->arg);
			break;
		case ST_OWN:
			k->type->clear(base, k);
			break;
		case ST_VALUE:
			break;
		}
	}
}

void keys_copy(void *dst, const void *src, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		switch (k->type->store) {
		case ST_STR: {
			const char *s = *CFIELD(src, k, char *);
			*FIELD(dst, k, char *) = s ? xstrdup(s) : NULL;
			break;
		}
		case ST_LIST:
			strlist_copy(FIELD(dst, k, cfg_strlist), CFIELD(src, k, cfg_strlist));
			break;
		case ST_SECTION:
			keys_copy(dst, src, k->arg);
			break;
		case ST_VALUE: /* copied with the struct */
		case ST_OWN:   /* not in a subscription, the one thing copied */
			break;
		}
	}
}

static bool is_set(const void *base, const key *k)
{
	if (k->type->store == ST_STR)
		return *CFIELD(base, k, char *) != NULL;
	if (k->type->store == ST_LIST)
		return CFIELD(base, k, cfg_strlist)->n != 0;
	return true;
}

void keys_print(emit *e, const void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		if ((t->shown && !t->shown(base, k)) || ((k->flags & K_OPTIONAL) && !is_set(base, k)))
			continue;
		emit_key(e, k->name);
		k->type->print(e, base, k);
	}
}

static bool key_same(const void *a, const void *b, const key *k)
{
	switch (k->type->store) {
	case ST_VALUE:
		return memcmp(CFIELD(a, k, char), CFIELD(b, k, char), k->type->size) == 0;
	case ST_STR: {
		const char *x = *CFIELD(a, k, char *), *y = *CFIELD(b, k, char *);
		return x == y || (x && y && strcmp(x, y) == 0);
	}
	case ST_LIST: {
		const cfg_strlist *x = CFIELD(a, k, cfg_strlist), *y = CFIELD(b, k, cfg_strlist);
		if (x->n != y->n)
			return false;
		for (size_t i = 0; i < x->n; i++)
			if (strcmp(x->v[i], y->v[i]) != 0)
				return false;
		return true;
	}
	case ST_OWN:
		return k->type->same(a, b, k);
	case ST_SECTION:
		break;
	}
	return true; /* a section's keys are compared one by one */
}

static size_t restart_walk(const cfg *a, const cfg *b, const keys *t, const char *prefix,
			   void (*fn)(const char *key, void *arg), void *arg)
{
	size_t n = 0;
	for (const key *k = t->k; k < t->k + t->n; k++) {
		char name[64];
		snprintf(name, sizeof name, "%s%s", prefix, k->name);
		if (k->type->store == ST_SECTION) {
			strcat(name, ".");
			n += restart_walk(a, b, k->arg, name, fn, arg);
		} else if (k->restart && !key_same(a, b, k)) {
			fn(name, arg);
			n++;
		}
	}
	return n;
}

size_t cfg_restart_keys(const cfg *old, const cfg *next, void (*fn)(const char *key, void *arg), void *arg)
{
	return restart_walk(old, next, &top_keys, "", fn, arg);
}

/* ---- the schema ---- */

#define SUB(f) offsetof(cfg_subscription, f)
#define TOP(f) offsetof(cfg, f)

static const key retention_k[] = {
    {"max_events", &t_u64, SUB(retention.max_events),
     .doc = "At most this many unacknowledged events in the spool (0: no limit). See `when_full`."},
    {"max_age", &t_duration, SUB(retention.max_age_ms),
     .doc = "Unacknowledged events older than this count as over the limit (0: no limit)."},
    {"max_bytes", &t_size, SUB(retention.max_bytes),
     .doc = "At most this many bytes of unacknowledged events in the spool (0: no limit)."},
    {"when_full", &t_enum, SUB(retention.when_full), full_names, .def.n = CFG_FULL_BLOCK,
     .doc = "`block`: stop reading the slot while a limit is reached (nothing is lost; WAL waits on the "
	    "server). `drop_oldest`: discard the oldest events, acknowledged or not, log the range, count it "
	    "in `dropped` and tell the next consumer with a `Dropped` frame. A limit is checked after each "
	    "batch of input, so one read can pass it."},
};
static const keys retention_keys = KEYS(retention_k);

enum sub_key {
	SK_NAME,
	SK_TABLES,
	SK_OPS,
	SK_TAG,
	SK_SINK,
	SK_CHANGED,
	SK_WHERE,
	SK_COLUMNS,
	SK_TOPIC,
	SK_TOMBSTONES,
	SK_FORMAT,
	SK_SCHEMAS,
	SK_SERVER_NAME,
	SK_UNCHANGED_TOAST,
	SK_CONSUMERS,
	SK_ACK_TIMEOUT,
	SK_MAX_DELIVERIES,
	SK_MAX_UNACKED,
	SK_BATCH,
	SK_RETENTION,
	SK_SNAPSHOT,
	SK_N
};
/* A subscription's keys apply at the next transaction boundary after a reload: none needs a restart. */
static const key sub_k[] = {
    [SK_NAME] = {"name", &t_ident, SUB(name), &sub_rule, K_REQUIRED,
		 .doc = "The subscription's name: in events, status, metrics, the spool's directory and the "
			"subscriber protocol. Unique."},
    [SK_TABLES] = {"tables", &t_strlist, SUB(tables), NULL, K_REQUIRED | K_PATTERNS,
		   .doc = "The tables whose changes it receives: `schema.table` patterns with `*` and `?`. "
			  "Only tables in the publication send changes."},
    [SK_OPS] = {"operations", &t_ops, SUB(ops), .def.n = MATCH_OPS_DEFAULT,
		.doc =
		    "The events it receives: `insert`, `update`, `delete`, `truncate`, `message` (logical "
		    "decoding messages, `pg_logical_emit_message`), `schema` (a table's columns before its "
		    "rows, [events.md](events.md#schema-events); needs a row operation) and `ddl` (DDL "
		    "commands, with `source.ddl`, [events.md](events.md#ddl-events)). Every one but "
		    "`message` by default."},
    [SK_TAG] = {"tag", &t_string, SUB(tag), NULL, K_OPTIONAL,
		.doc = "Free text carried on every event of the subscription (`tag` in JSON and protobuf; "
		       "`{tag}` in topic templates)."},
    [SK_SINK] = {"sink", &t_enum, SUB(sink), sink_names, .def.n = CFG_SINK_SOCKET,
		 .doc = "Where its events go: `socket` (a durable spool and consumers over "
			"`subscribers.socket`, [socket.md](socket.md)), `kafka` ([kafka.md](kafka.md)) or "
			"`stdout` (JSON lines on cdc's standard output, [events.md](events.md))."},
    [SK_CHANGED] = {"changed", &t_strlist, SUB(changed), NULL, K_OPTIONAL,
		    .doc = "An update matches only if one of these columns changed. Needs the old row: the "
			   "table must be `REPLICA IDENTITY FULL`, which cdc checks."},
    [SK_WHERE] = {"where", &t_where, SUB(where), NULL, K_NONEMPTY | K_OPTIONAL,
		  .doc = "A condition over `new.` and `old.` columns that an event must meet; the language "
			 "is in [subscriptions.md](subscriptions.md#rules). Checked when the file is read."},
    [SK_COLUMNS] = {"columns", &t_strlist, SUB(columns), NULL, K_OPTIONAL,
		    .doc = "A projection: only these columns are carried in `new` and `old`. The key columns "
			   "are always kept."},
    [SK_TOPIC] = {"topic", &t_topic, SUB(topic), NULL, K_KAFKA | K_BY_SINK, .def.s = "cdc.{schema}.{table}",
		  .doc = "Kafka only: the topic of each event, a template with `{schema}`, `{table}`, "
			 "`{subscription}`, `{tag}`."},
    [SK_TOMBSTONES] = {"tombstones", &t_bool, SUB(tombstones), NULL, K_KAFKA,
		       .doc =
			   "Kafka only: after each delete, a record with the same key and a null value "
			   "(for log compaction), and after an update that changed the key one for the old "
			   "key. Default: `false`, `true` with `format: debezium` (Debezium's "
			   "`tombstones.on.delete`)."},
    [SK_FORMAT] = {"format", &t_enum, SUB(format), record_format_names, K_KAFKA, .def.n = CFG_FORMAT_PROTOBUF,
		   .doc = "Kafka only: how records are written. `protobuf`: key `cdc.v1.Key`, value "
			  "`cdc.v1.Event`. `json`: the key columns' JSON and the event JSON `sink: stdout` "
			  "prints. `debezium`: key and value as Debezium's PostgreSQL connector writes them "
			  "through Kafka Connect's JsonConverter. See [kafka-formats.md](kafka-formats.md)."},
    [SK_SCHEMAS] = {"schemas", &t_bool, SUB(schemas), NULL, K_KAFKA,
		    .doc =
			"`format: debezium` only: keys and values as `{\"schema\": ..., \"payload\": ...}`, "
			"as JsonConverter writes them with `schemas.enable=true`."},
    [SK_SERVER_NAME] = {"server_name", &t_ident, SUB(server_name), &topic_rule, K_KAFKA, .def.s = "cdc",
			.doc =
			    "`format: debezium` only: Debezium's `topic.prefix` (the logical server name): "
			    "`source.name` and the prefix of the key's and rows' schema names. The "
			    "default matches the default topic template's `cdc.`."},
    [SK_UNCHANGED_TOAST] =
	{"unchanged_toast", &t_enum, SUB(unchanged_toast), toast_names, K_KAFKA,
	 .def.n = CFG_TOAST_PLACEHOLDER,
	 .doc = "`format: debezium` only: a TOASTed value an update left unchanged (the server "
		"does not send it). `placeholder`: Debezium's `__debezium_unavailable_value` "
		"(its bytes, or lists of it, by type). `omit`: the column is left out of the "
		"row."},
    [SK_CONSUMERS] = {"consumers", &t_enum, SUB(consumers), consumers_names, K_SOCKET,
		      .def.n = CFG_CONSUMERS_FAILOVER,
		      .doc =
			  "Socket only: how its consumers share the events. `failover`: the first one "
			  "receives everything, in order, and acks cumulatively; the others wait. `shared`: "
			  "each event to one consumer, acked one by one. `key_shared`: like `shared`, with "
			  "all events of one key to the same consumer. See [socket.md](socket.md)."},
    [SK_ACK_TIMEOUT] = {"ack_timeout", &t_duration, SUB(ack_timeout_ms), NULL, K_SOCKET | K_POSITIVE,
			.def.n = 30000,
			.doc =
			    "Socket only: an event delivered and not acknowledged this long is delivered "
			    "again (to another consumer where the mode allows, never back to this one "
			    "while another can take it); a consumer that neither reads its socket nor sends "
			    "for this long loses what it holds. See [socket.md](socket.md)."},
    [SK_MAX_DELIVERIES] = {"max_deliveries", &t_u32, SUB(max_deliveries), NULL, K_SOCKET,
			   .doc = "Socket only: after this many deliveries an event moves to the "
				  "subscription's dead letters (0: never)."},
    [SK_MAX_UNACKED] =
	{"max_unacked", &t_u32, SUB(max_unacked), NULL, K_SOCKET | K_POSITIVE, .def.n = 1000,
	 .doc =
	     "Socket only: at most this many events in flight per consumer (a consumer may ask for fewer)."},
    [SK_BATCH] = {"batch", &t_enum, SUB(batch), batch_names, K_SOCKET, .def.n = CFG_BATCH_NONE,
		  .doc =
		      "Socket only: `none`, one event per Delivery frame; `transaction`, all of one source "
		      "transaction's events for the subscription in one frame (split only past 16 MiB)."},
    [SK_RETENTION] =
	{"retention", &t_section, 0, &retention_keys, K_SOCKET | K_FLOW,
	 .doc =
	     "Socket only: limits on the subscription's unacknowledged events, and what happens at a limit."},
    [SK_SNAPSHOT] =
	{"snapshot", &t_bool, SUB(snapshot),
	 .doc = "Backfill the subscription's tables when it is first seen (a fresh `state_dir`, a reload or "
		"`PUT` that adds it), while the stream runs. See [backfills.md](backfills.md)."},
};
_Static_assert(SK_N == sizeof sub_k / sizeof *sub_k && SK_N <= CFG_MAX_KEYS, "subscription keys");

/* The keys only format: debezium takes. */
static bool debezium_key(size_t i)
{
	return i == SK_SCHEMAS || i == SK_SERVER_NAME || i == SK_UNCHANGED_TOAST;
}

/* The sink a K_KAFKA or K_SOCKET key of a subscription goes with. */
static cfg_sink key_sink(const key *k)
{
	return (k->flags & K_KAFKA) ? CFG_SINK_KAFKA : CFG_SINK_SOCKET;
}

static void check_sub(ctx *x, void *base, const pair *seen)
{
	cfg_subscription *s = base;
	const node *sv = seen[SK_SINK].v;
	if (s->sink == CFG_SINK_KAFKA && !x->have_kafka)
		err_key(x, sv, "sink", "sink kafka needs a top-level kafka section (brokers)");
	/* an invalid sink was reported already: what goes with it is unknown */
	bool sink_ok = !sv || (sv->kind == N_SCALAR && ename_find(sink_names, sv->text));
	for (size_t i = 0; i < SK_N && sink_ok; i++)
		if (seen[i].k && (sub_k[i].flags & (K_KAFKA | K_SOCKET)) && s->sink != key_sink(&sub_k[i]))
			err_key(x, seen[i].k, sub_k[i].name,
				"only valid with sink: %s (this subscription's sink is %s)",
				cfg_sink_name(key_sink(&sub_k[i])), cfg_sink_name(s->sink));
	if (seen[SK_CHANGED].k && !(s->ops & MATCH_OP_UPDATE))
		err_key(x, seen[SK_CHANGED].k, "changed", "only valid when operations include update");
	if ((s->ops & MATCH_OP_SCHEMA) && !(s->ops & (MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE)))
		err_key(x, seen[SK_OPS].k, "operations",
			"schema events come before rows: schema needs insert, update or delete too");
	for (size_t i = 0; i < SK_N && s->sink == CFG_SINK_KAFKA; i++)
		if (seen[i].k && debezium_key(i) && s->format != CFG_FORMAT_DEBEZIUM)
			err_key(x, seen[i].k, sub_k[i].name,
				"only valid with format: debezium (this subscription's format is %s)",
				cfg_format_name(s->format));
	/* Debezium follows each delete with a tombstone unless told otherwise (tombstones.on.delete). */
	if (s->format == CFG_FORMAT_DEBEZIUM && !seen[SK_TOMBSTONES].k)
		s->tombstones = true;
	for (size_t i = 0; i < SK_N; i++)
		if ((sub_k[i].flags & K_BY_SINK) && !seen[i].k && s->sink == key_sink(&sub_k[i]))
			key_default(s, &sub_k[i]);
}

/* Keys of another sink are refused by the parser: only this sink's are printed; snapshot only when
 * on (configurations without it print as they did before it existed). */
static bool sub_shown(const void *base, const key *k)
{
	const cfg_subscription *s = base;
	if (k == &sub_k[SK_SNAPSHOT])
		return s->snapshot;
	if (debezium_key((size_t)(k - sub_k)) && s->format != CFG_FORMAT_DEBEZIUM)
		return false;
	return !(k->flags & (K_KAFKA | K_SOCKET)) || s->sink == key_sink(k);
}

const keys sub_keys = KEYS(sub_k, .check = check_sub, .shown = sub_shown);

static void set_subs(ctx *x, const node *v, void *base, const key *k)
{
	cfg *c = FIELD(base, k, cfg);
	if (is_null(v))
		return;
	if (v->kind != N_SEQ) {
		wrong_kind(x, v, "a list of subscriptions");
		return;
	}
	c->nsubs = v->n;
	c->subs = v->n ? xcalloc(v->n, sizeof *c->subs) : NULL;
	named *names = xcalloc(v->n, sizeof *names);
	const node **name_nodes = xcalloc(v->n, sizeof *name_nodes);
	for (size_t i = 0; i < v->n; i++) {
		cfg_subscription *s = &c->subs[i];
		pair seen[CFG_MAX_KEYS] = {0};
		size_t old = path_index(x, i);
		keys_default(s, &sub_keys);
		s->line = v->kids[i]->line;
		s->col = v->kids[i]->col;
		walk_map(x, v->kids[i], s, &sub_keys, seen);
		names[i] = (named){s->name, i};
		name_nodes[i] = seen[SK_NAME].v;
		path_pop(x, old);
	}
	size_t *first = first_of(names, v->n);
	for (size_t i = 0; i < v->n; i++) {
		if (first[i] == i)
			continue;
		size_t old = path_index(x, i);
		err_key(x, name_nodes[i], "name",
			"duplicate subscription name %s (first at line %d, column %d)",
			qnode(x, name_nodes[i]), name_nodes[first[i]]->line, name_nodes[first[i]]->col);
		path_pop(x, old);
	}
	free(first);
	free(names);
	free(name_nodes);
}

static void print_subs(emit *e, const void *base, const key *k)
{
	const cfg *c = CFIELD(base, k, cfg);
	if (!c->nsubs) {
		emit_raw(e, "[]");
		return;
	}
	e->space = false;
	int indent = e->indent;
	for (size_t i = 0; i < c->nsubs; i++) {
		emit_line(e, indent + 2);
		buf_puts(e->b, "- ");
		e->indent = indent + 4;
		e->inline_key = true;
		keys_print(e, &c->subs[i], &sub_keys);
	}
	e->indent = indent;
}

static void clear_subs(void *base, const key *k)
{
	cfg *c = FIELD(base, k, cfg);
	for (size_t i = 0; i < c->nsubs; i++)
		keys_clear(&c->subs[i], &sub_keys);
	free(c->subs);
}

const ktype t_subs = {set_subs, print_subs, ST_OWN, 0, clear_subs, NULL};

/* What a reload cannot change (the replication connection, the sockets, the Kafka producer, the
 * log's setup) needs a restart. */
static const key source_k[] = {
    {"dsn", &t_dsn, TOP(source.dsn), .def.s = "", .restart = true,
     .doc = "The libpq connection string of the database (`host=db port=5432 dbname=app user=cdc`, or a "
	    "`postgresql://` URI). `PG*` environment variables, `.pgpass` and libpq's TLS options apply; the "
	    "password is masked wherever cdc prints the configuration. cdc adds `replication=database` for "
	    "its replication connection."},
    {"slot", &t_ident, TOP(source.slot), &slot_rule, .def.s = "cdc_slot", .restart = true,
     .doc = "The logical replication slot (plugin `pgoutput`)."},
    {"publication", &t_ident, TOP(source.publication), &pub_rule, .def.s = "cdc_pub", .restart = true,
     .doc = "The publication the slot streams."},
    {"create", &t_bool, TOP(source.create), .restart = true,
     .doc = "Create the publication and the slot when they are missing."},
    {"publish", &t_strlist, TOP(source.publish), NULL, K_PATTERNS, .def.s = "public.*", .restart = true,
     .doc = "With `create: true`: the tables of the publication cdc creates, as table patterns (`*.*`: all "
	    "tables)."},
    {"heartbeat", &t_duration, TOP(source.heartbeat_ms),
     .doc = "When the slot was idle this long, write a heartbeat (a logical message) so that the slot keeps "
	    "moving on a database whose other databases write; `0`: off. Needs `EXECUTE` on "
	    "`pg_logical_emit_message`."},
    {"status_interval", &t_duration, TOP(source.status_interval_ms), NULL, K_POSITIVE, .def.n = 10000,
     .doc = "Send the server a standby status update (the flushed position) at least this often."},
    {"on_slot_lost", &t_enum, TOP(source.on_slot_lost), gap_names,
     .doc = "When the slot is lost (dropped, invalidated, or moved past cdc's position): `fail` stops with a "
	    "message; `resync` recreates it, marks the gap and backfills every subscription's tables. See "
	    "[operations.md](operations.md#when-the-slot-cannot-go-on-re-sync)."},
    {"on_publication_newer", &t_enum, TOP(source.on_publication_newer), gap_names,
     .doc = "When the publication is newer than the slot (every start would fail with `publication does not "
	    "exist`): `fail` stops with a message; `resync` moves the slot on and backfills."},
    {"failover", &t_bool, TOP(source.failover), .restart = true,
     .doc =
	 "PostgreSQL 17 and later: create the slot as a failover slot (or turn that on for an existing "
	 "one), so that a standby with `sync_replication_slots` keeps a copy a promotion resumes from. cdc "
	 "checks every 5 s that the primary's `synchronized_standby_slots` makes a promotion safe "
	 "(`source.failover` in `/status`, `cdc_source_failover_ready`). Refused before 17. See "
	 "[failover.md](failover.md)."},
    {"primary_dsn", &t_dsn, TOP(source.primary_dsn), NULL, K_OPTIONAL, .restart = true,
     .doc =
	 "When `dsn` is a hot standby (PostgreSQL 16+): the primary's connection string, where cdc writes "
	 "what a standby cannot (heartbeats, re-sync markers, backfills' reads and watermarks, the "
	 "running-transactions record a slot's creation on the standby waits for). Unused while `dsn` is a "
	 "primary. See [failover.md](failover.md#decoding-on-a-standby)."},
    {"ddl", &t_bool, TOP(source.ddl), .restart = true,
     .doc = "Capture DDL: cdc's event trigger writes each command on a table into the WAL, delivered as "
	    "`ddl` events in order with the rows, and renames are told as renames in schema events. With "
	    "`create`, cdc installs the trigger (a superuser's privilege); without it, or without the "
	    "privilege, cdc stops and says what to run. See [events.md](events.md#ddl-events)."},
    {"publish_generated_columns", &t_bool, TOP(source.publish_generated_columns), .restart = true,
     .doc = "PostgreSQL 18 and later: the publication cdc creates publishes stored generated columns "
	    "(`WITH (publish_generated_columns = stored)`), so events carry their values; refused at the "
	    "start on an earlier server, which never publishes them. A publication that exists is left as "
	    "it is (cdc warns when it does not publish them). See "
	    "[events.md](events.md#generated-columns)."},
};

enum { ST_SOCKET, ST_LISTEN, ST_TCP_CONTROL, ST_CONTROL_UIDS };
static const key status_k[] = {
    [ST_SOCKET] = {"socket", &t_socket, TOP(status.socket), .def.s = CFG_DEFAULT_STATUS_SOCKET,
		   .restart = true,
		   .doc =
		       "The status socket (HTTP/1.1 over a Unix socket): `/status`, `/metrics`, `/healthz`, "
		       "`/readyz`, `/subscriptions`, backfills. Its file mode is `subscribers.mode`."},
    [ST_LISTEN] = {"listen", &t_listen, TOP(status.listen), NULL, K_OPTIONAL, .restart = true,
		   .doc = "Also serve the status endpoints on this TCP address (probes and Prometheus), e.g. "
			  "`127.0.0.1:9187` or `[::]:9187`."},
    [ST_TCP_CONTROL] = {"tcp_control", &t_bool, TOP(status.tcp_control), .restart = true,
			.doc =
			    "Allow `PUT`/`DELETE /subscriptions` and backfill requests over `status.listen` "
			    "(anyone who reaches the port may change subscriptions). Needs `status.listen`."},
    [ST_CONTROL_UIDS] = {"control_uids", &t_uids, 0, .restart = true,
			 .doc = "The peer uids (`SO_PEERCRED`) that may `PUT`/`DELETE` subscriptions and "
				"start backfills over the Unix socket."},
};

static void check_status(ctx *x, void *base, const pair *seen)
{
	cfg *c = base;
	if (c->status.tcp_control && !seen[ST_LISTEN].k)
		err_key(x, seen[ST_TCP_CONTROL].k, "tcp_control", "needs status.listen");
}

static const key subscribers_k[] = {
    {"socket", &t_socket, TOP(subscribers.socket), .def.s = CFG_DEFAULT_SUBSCRIBER_SOCKET, .restart = true,
     .doc = "The Unix socket where socket subscriptions' consumers connect."},
    {"mode", &t_mode, TOP(subscribers.mode), .def.n = 0660, .restart = true,
     .doc = "The file mode of both sockets; access for a consumer's group goes through cdc's group. A mode "
	    "that lets any local user write is refused."},
    {"first_frame_timeout", &t_duration, TOP(subscribers.first_frame_timeout_ms), NULL, K_POSITIVE,
     .def.n = 10000, .restart = true,
     .doc =
	 "A connection must send its `Subscribe` frame this soon, else it gets `Error SUBSCRIBE_TIMEOUT`."},
    {"max_connections", &t_u32, TOP(subscribers.max_connections), NULL, K_POSITIVE, .def.n = 1024,
     .restart = true,
     .doc = "At most this many consumer connections; then the oldest that has not subscribed gives way, or "
	    "the new one gets `CONNECTION_LIMIT`."},
    {"max_output", &t_size, TOP(subscribers.max_output), NULL, K_POSITIVE, .def.n = 1u << 20, .restart = true,
     .doc = "Unread output per consumer before it is sent nothing more (it resumes when a quarter is left), "
	    "so a consumer that stops reading holds up no one."},
};

static const key kafka_k[] = {
    {"brokers", &t_string, TOP(kafka.brokers), NULL, K_REQUIRED | K_NONEMPTY, .restart = true,
     .doc = "The bootstrap brokers, `host:port,host:port`."},
    {"properties", &t_props, 0, .restart = true,
     .doc = "librdkafka properties, handed over unchanged: TLS (`security.protocol`, `ssl.*`), SASL, tuning "
	    "(`compression.type: lz4`). Secret-looking values are masked wherever cdc prints them."},
    {"transactions_topic", &t_topic, TOP(kafka.transactions_topic), &topic_rule, K_OPTIONAL,
     .doc = "One record per source transaction that produced Kafka events, with its event count, on this "
	    "topic."},
    {"schemas_topic", &t_topic, TOP(kafka.schemas_topic), &topic_rule, K_OPTIONAL,
     .doc = "The schema and DDL events of Kafka subscriptions, on this topic (partition 0, in stream order; "
	    "make it compacted); each row record names its schema in the `cdc-schema-id` header. Without "
	    "it, Kafka subscriptions produce no schema or DDL records. See [kafka.md](kafka.md#schemas)."},
    {"exactly_once", &t_bool, TOP(kafka.exactly_once), .restart = true,
     .doc = "A transactional producer carrying the slot position in the same Kafka transaction: "
	    "read-committed consumers see each change once. See [kafka.md](kafka.md#exactly-once)."},
    {"positions_topic", &t_topic, TOP(kafka.positions_topic), &topic_rule, .def.s = "cdc.positions",
     .restart = true,
     .doc = "Exactly once: the topic where the slot position travels (compacted, partition 0)."},
    {"commit_interval", &t_duration, TOP(kafka.commit_interval_ms),
     .doc = "Exactly once: keep a Kafka transaction open at least this long (fewer, larger transactions; "
	    "more latency). `0`: commit as soon as the source transaction is in."},
    {"commit_events", &t_u64, TOP(kafka.commit_events),
     .doc = "Exactly once: commit early once a Kafka transaction holds this many events (0: no limit)."},
};

static void check_kafka(ctx *x, void *base, const pair *seen)
{
	(void)x, (void)seen;
	((cfg *)base)->kafka.enabled = true;
}

static const key log_k[] = {
    {"level", &t_enum, TOP(log.level), level_names, .def.n = LOG_LEVEL_INFO, .restart = true,
     .doc = "The least severe messages logged on standard error."},
    {"format", &t_enum, TOP(log.format), format_names, .def.n = LOG_FORMAT_TEXT, .restart = true,
     .doc = "`text`: one `LEVEL message key=value...` line per event; `json`: one JSON object per line."},
};

/* Backfills (cdc/backfill): a reload applies these to the chunks that follow. */
static const key backfill_k[] = {
    {"chunk_time", &t_duration, TOP(backfill.chunk_time_ms), NULL, K_POSITIVE, .def.n = 250,
     .doc = "A chunk's `COPY` aims at taking this long: the chunk size adapts to it, between `min_rows` "
	    "and `max_rows`."},
    {"min_rows", &t_u64, TOP(backfill.min_rows), NULL, K_POSITIVE, .def.n = 100,
     .doc = "The smallest chunk."},
    {"max_rows", &t_u64, TOP(backfill.max_rows), NULL, K_POSITIVE, .def.n = 5000,
     .doc = "The largest chunk: a chunk's reads go out in one turn of the event loop, so a larger chunk "
	    "delays the live stream longer."},
    {"max_bytes", &t_size, TOP(backfill.max_bytes), NULL, K_POSITIVE, .def.n = 64u << 20,
     .doc = "The memory a chunk may hold: its rows and the keys changed while it is open; a chunk that would "
	    "pass it is split."},
    {"rate_limit", &t_u64, TOP(backfill.rate_limit), .doc = "Rows read per second per table (0: no limit)."},
    {"tables", &t_u32, TOP(backfill.tables), NULL, K_POSITIVE, .def.n = 1,
     .doc = "Tables read at once, over all backfills."},
    {"parallel", &t_u32, TOP(backfill.parallel), NULL, K_POSITIVE, .def.n = CFG_DEFAULT_BACKFILL_PARALLEL,
     .restart = true,
     .doc = "Connections that read chunks at once (1 to 64), each a chunk between its own watermarks: the "
	    "chunks of one table too. See [backfills.md](backfills.md#speed)."},
};

enum { BK_MIN_ROWS = 1, BK_MAX_ROWS = 2, BK_PARALLEL = 6 };

static void check_backfill(ctx *x, void *base, const pair *seen)
{
	cfg *c = base;
	c->backfill.present = true;
	/* the defaults are in order: one of the two was given */
	int i = seen[BK_MAX_ROWS].k ? BK_MAX_ROWS : BK_MIN_ROWS;
	if (c->backfill.min_rows > c->backfill.max_rows)
		err_key(x, seen[i].k, backfill_k[i].name, "min_rows (%llu) is above max_rows (%llu)",
			(unsigned long long)c->backfill.min_rows, (unsigned long long)c->backfill.max_rows);
	if (c->backfill.parallel > 64)
		err_key(x, seen[BK_PARALLEL].k, backfill_k[BK_PARALLEL].name,
			"%u connections is more than 64 (each is a server backend)", c->backfill.parallel);
}

static const keys source_keys = KEYS(source_k), status_keys = KEYS(status_k, .check = check_status),
		  subscribers_keys = KEYS(subscribers_k), kafka_keys = KEYS(kafka_k, .check = check_kafka),
		  log_keys = KEYS(log_k), backfill_keys = KEYS(backfill_k, .check = check_backfill);

static const key top_k[] = {
    {"source", &t_section, 0, &source_keys, .doc = "The database, the slot and the publication."},
    {"state_dir", &t_string, TOP(state_dir), NULL, K_NONEMPTY, .def.s = "/var/lib/cdc", .restart = true,
     .doc = "Where cdc keeps its state: the recorded position, spill files of large transactions, the spools "
	    "of socket subscriptions, subscriptions changed over the status socket, backfills."},
    {"status", &t_section, 0, &status_keys,
     .doc = "The status socket: figures, health, metrics, and the control endpoints."},
    {"subscribers", &t_section, 0, &subscribers_keys,
     .doc = "The socket where consumers of socket subscriptions connect."},
    {"kafka", &t_section, 0, &kafka_keys, K_KAFKA,
     .doc =
	 "The Kafka producer, for `sink: kafka` subscriptions. Present only when a subscription uses Kafka."},
    {"log", &t_section, 0, &log_keys, .doc = "Logging on standard error."},
    {"backfill", &t_section, 0, &backfill_keys,
     .doc = "How backfills read (`snapshot: true`, `cdc backfill`, re-syncs). A reload applies these to the "
	    "chunks that follow."},
    {"subscriptions", &t_subs, 0,
     .doc = "A list of subscriptions: which changes go where. Each is a mapping of the keys below; a reload "
	    "(`SIGHUP`) or `PUT`/`DELETE /subscriptions/NAME` applies changes at the next transaction "
	    "boundary."},
};

const cfg_subscription *format_conflict(const cfg *c, const cfg_subscription *s,
					const cfg_subscription **first)
{
	if (!c->kafka.transactions_topic)
		return NULL;
	for (size_t i = 0; i < c->nsubs; i++) {
		const cfg_subscription *o = &c->subs[i];
		if (o->sink != CFG_SINK_KAFKA || (s && strcmp(o->name, s->name) == 0))
			continue;
		if (!s)
			s = o;
		else if (o->format != s->format)
			return first ? (*first = s, o) : o;
	}
	return NULL;
}

void format_conflict_text(buf *b, const cfg_subscription *a, const cfg_subscription *o)
{
	buf_printf(
	    b,
	    "subscriptions %s (format %s) and %s (format %s) write Kafka records in different formats, "
	    "but kafka.transactions_topic holds the records of their transactions in one: give them "
	    "the same format",
	    a->name, cfg_format_name(a->format), o->name, cfg_format_name(o->format));
}

static void check_top(ctx *x, void *base, const pair *seen)
{
	(void)seen;
	const cfg_subscription *a, *o = format_conflict(base, NULL, &a);
	if (o) {
		buf why = {0};
		format_conflict_text(&why, a, o);
		err_pos(x, o->line, o->col, "%s", why.data);
		buf_free(&why);
	}
}

/* The kafka and backfill sections are printed when the file has them. */
static bool top_shown(const void *base, const key *k)
{
	const cfg *c = base;
	if (k->arg == &backfill_keys)
		return c->backfill.present;
	return !(k->flags & K_KAFKA) || c->kafka.enabled;
}

const keys top_keys = KEYS(top_k, .top = true, .check = check_top, .shown = top_shown);

/* ---- load, free ---- */

static cfg *cfg_new(const char *path)
{
	cfg *c = xcalloc(1, sizeof *c);
	c->path = xstrdup(path);
	keys_default(c, &top_keys);
	return c;
}

void cfg_subscription_free(cfg_subscription *s)
{
	if (s)
		keys_clear(s, &sub_keys);
	free(s);
}

void cfg_free(cfg *c)
{
	if (!c)
		return;
	free(c->path);
	keys_clear(c, &top_keys);
	free(c);
}

cfg *cfg_parse(const char *path, const char *text, size_t len, buf *errors)
{
	ctx x = {.file = path ? path : "<config>", .errors = errors};
	node *root = NULL;
	cfg *c = NULL;

	if (!text)
		text = "", len = 0;
	if (!build_tree(&x, text, len, &root))
		goto out;
	c = cfg_new(x.file);
	if (!root)
		goto out; /* an empty file: every default */
	if (root->kind == N_MAP)
		for (size_t i = 0; i + 1 < root->n; i += 2)
			if (root->kids[i]->kind == N_SCALAR && strcmp(root->kids[i]->text, "kafka") == 0)
				x.have_kafka = true;
	pair seen[CFG_MAX_KEYS] = {0};
	walk_map(&x, root, c, &top_keys, seen);
out:
	node_free(root);
	ctx_free(&x);
	if (x.nerr) {
		cfg_free(c);
		return NULL;
	}
	return c;
}

cfg *cfg_load(const char *path, buf *errors)
{
	buf text = {0};
	cfg *c = read_text(path, &text, errors)
		     ? cfg_parse(path, text.data ? text.data : "", text.len, errors)
		     : NULL;
	buf_free(&text);
	return c;
}

cfg_subscription *cfg_find_subscription(const cfg *c, const char *name)
{
	for (size_t i = 0; i < c->nsubs; i++)
		if (strcmp(c->subs[i].name, name) == 0)
			return &c->subs[i];
	return NULL;
}

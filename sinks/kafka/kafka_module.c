/* `sink: kafka` declared once. It gives the kafka section and a subscription's keys, how the producer is made
 * from them, and its figures in /status, /metrics and the log. Its doctor checks are in kafka_doctor.c. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/base/log.h"
#include "decoder/base/prom.h"
#include "sinks/kafka/kafka_sink.h"
#include "sinks/module.h"

/* ---- values ---- */

/* Checks a topic name against the names Kafka allows. NULL if fine. */
static const char *topic_name_problem(const char *value, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	size_t n = strlen(value);
	if (n < 1 || n > 249 ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return "a Kafka topic name [a-zA-Z0-9._-]{1,249}";
	return NULL;
}

/* Checks a topic template against the names Kafka allows and the placeholders cdc expands. NULL if fine. */
static const char *topic_template_problem(const char *value, char *why, size_t whylen)
{
	static const char *const placeholders[] = {"{schema}", "{table}", "{subscription}", "{tag}"};
	for (const char *p = value; *p;) {
		if (*p == '{') {
			size_t i, n = 0;
			for (i = 0; i < 4; i++)
				if (strncmp(p, placeholders[i], n = strlen(placeholders[i])) == 0)
					break;
			if (i == 4) {
				size_t end = strcspn(p, "}");
				util_errf(why, whylen,
					  "unknown placeholder \"%.*s\" (expected {schema}, {table}, "
					  "{subscription}, "
					  "{tag})",
					  (int)(end < 40 ? end + (p[end] != 0) : 40), p);
				return why;
			}
			p += n;
			continue;
		}
		unsigned char c = (unsigned char)*p++;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-')) {
			util_errf(why, whylen,
				  "character '%c' is not allowed in a Kafka topic name (use [a-zA-Z0-9._-])",
				  c >= 0x20 && c < 0x7f ? c : '?');
			return why;
		}
	}
	if (strlen(value) > 249)
		return "a Kafka topic name is at most 249 characters";
	return NULL;
}

#define TOPIC_NAME                                                                                           \
	.check = topic_name_problem, .noun = "topic", .value_type = "topic name",                            \
	.value_doc = "a Kafka topic: `[a-zA-Z0-9._-]`, 1 to 249 characters"
#define TOPIC_TEMPLATE                                                                                       \
	.check = topic_template_problem, .noun = "topic", .value_type = "topic template",                    \
	.value_doc =                                                                                         \
	    "a Kafka topic with `{schema}`, `{table}`, `{subscription}`, `{tag}`; characters Kafka "         \
	    "does not allow become `_`"

/* Checks that a registry's URL is http or https. NULL if fine. */
static const char *url_problem(const char *value, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	if (strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0)
		return "a URL that starts with http:// or https://";
	return NULL;
}

/* ---- keys ---- */

#define SECTION(f) offsetof(kafka_conf, f)
#define SUB(f) offsetof(kafka_sub_conf, f)

/* What a reload applies of kafka.properties, the SASL credentials. kafka_sink_bind hands them to
 * rd_kafka_sasl_set_credentials. */
static const char *const reloaded_properties[] = {"sasl.username", "sasl.password", NULL};

/* The registry's names of the levels, in kafka_compatibility_names' order. */
static const char *const kafka_compatibility_levels[] = {
    "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"};
const char *const kafka_compatibility_names[] = {
    "backward", "backward_transitive", "forward", "forward_transitive",
    "full",	"full_transitive",     "none",	  "registry",
    NULL};
enum { COMPATIBILITY_REGISTRY = 7 };
static const sink_key registry_k[] = {
    {"url", SINK_KEY_STRING, SECTION(registry.url), .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY,
     .check = url_problem, .noun = "URL", .value_type = "URL",
     .value_doc = "`http://` or `https://`, host, port",
     .doc =
	 "The registry's URL, with the path prefix of its REST API if it has one (`https://registry:8081`)."},
    {"username", SINK_KEY_STRING, SECTION(registry.username), .flags = SINK_KEY_OPTIONAL,
     .doc = "Basic authentication: the user (Confluent's `basic.auth.user.info` before the colon)."},
    {"password", SINK_KEY_STRING, SECTION(registry.password), .flags = SINK_KEY_OPTIONAL | SINK_KEY_SECRET,
     .doc = "Basic authentication: the password, best as `{file: PATH}` (a reload reads the file again). A "
	    "secret: masked wherever cdc prints it."},
    {"ca_file", SINK_KEY_STRING, SECTION(registry.ca_file), .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY,
     .doc = "TLS: the CA certificates (PEM) that the registry's certificate is checked against (default: the "
	    "system's)."},
    {"cert_file", SINK_KEY_STRING, SECTION(registry.cert_file),
     .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY,
     .doc = "TLS: a client certificate (PEM), for a registry that asks for one."},
    {"key_file", SINK_KEY_STRING, SECTION(registry.key_file), .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY,
     .doc = "TLS: the client certificate's private key (PEM)."},
    {"timeout", SINK_KEY_DURATION, SECTION(registry.timeout_ms), .flags = SINK_KEY_POSITIVE,
     .def_number = 10000, .doc = "How long one request may take, connecting included."},
    {"compatibility", SINK_KEY_ENUM, SECTION(registry.compatibility), kafka_compatibility_names,
     .doc =
	 "The compatibility level cdc sets on a subject it creates, before its first version: "
	 "`backward` (Confluent's default), `backward_transitive`, `forward`, `forward_transitive`, `full`, "
	 "`full_transitive`, `none`; `registry` leaves the registry's. A subject that has versions keeps "
	 "its own."},
};
static const sink_keys registry_keys = SINK_KEYS(registry_k);

static const sink_key section_keys[] = {
    {"brokers", SINK_KEY_STRING, SECTION(brokers),
     .flags = SINK_KEY_REQUIRED | SINK_KEY_NONEMPTY | SINK_KEY_RESTART,
     .doc = "The bootstrap brokers, `host:port,host:port`."},
    {"properties", SINK_KEY_PROPERTIES, SECTION(properties), reloaded_properties,
     .flags = SINK_KEY_RESTART | SINK_KEY_SECRET,
     .doc = "librdkafka properties, handed over unchanged: TLS (`security.protocol`, `ssl.*`), SASL, tuning "
	    "(`compression.type: lz4`). A value may be `{file: PATH}` naming a file that holds it "
	    "(`sasl.password: {file: /run/secrets/kafka}`). Secret-looking values are masked wherever cdc "
	    "prints them. A reload applies a changed `sasl.username` or `sasl.password` at the next "
	    "authentication; the others need a restart."},
    {"transactions_topic", SINK_KEY_STRING, SECTION(transactions_topic),
     .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY, TOPIC_NAME,
     .doc = "One record per source transaction that produced Kafka events, with its event count, on this "
	    "topic."},
    {"schemas_topic", SINK_KEY_STRING, SECTION(schemas_topic), .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY,
     TOPIC_NAME,
     .doc = "The schema and DDL events of Kafka subscriptions, on this topic (partition 0, in stream order; "
	    "make it compacted); each row record names its schema in the `cdc-schema-id` header. Without "
	    "it, Kafka subscriptions produce no schema or DDL records. See [kafka.md](kafka.md#schemas)."},
    {"exactly_once", SINK_KEY_BOOL, SECTION(exactly_once), .flags = SINK_KEY_RESTART,
     .doc = "A transactional producer carrying the slot position in the same Kafka transaction: "
	    "read-committed consumers see each change once. See [kafka.md](kafka.md#exactly-once)."},
    {"positions_topic", SINK_KEY_STRING, SECTION(positions_topic),
     .flags = SINK_KEY_RESTART | SINK_KEY_NONEMPTY, .def_text = "cdc.positions", TOPIC_NAME,
     .doc = "Exactly once: the topic where the slot position travels (compacted, partition 0)."},
    {"commit_interval", SINK_KEY_DURATION, SECTION(commit_interval_ms),
     .doc = "Exactly once: keep a Kafka transaction open at least this long (fewer, larger transactions; "
	    "more latency). `0`: commit as soon as the source transaction is in."},
    {"commit_events", SINK_KEY_U64, SECTION(commit_events),
     .doc = "Exactly once: commit early once a Kafka transaction holds this many events (0: no limit)."},
    {"schema_registry", SINK_KEY_SECTION, 0, &registry_keys, .flags = SINK_KEY_OPTIONAL,
     .doc = "`format: avro`: the schema registry where cdc registers each record's key and value schemas "
	    "(Confluent's REST API). See [kafka-formats.md](kafka-formats.md#avro-records)."},
};

static const char *const format_names[] = {"protobuf", "json", "debezium", "avro", NULL};
static const char *const strategy_names[] = {"topic", "record", "topic_record", NULL};
enum {
	KEY_TOPIC,
	KEY_TOMBSTONES,
	KEY_FORMAT,
	KEY_SCHEMAS,
	KEY_SERVER_NAME,
	KEY_UNCHANGED_TOAST,
	KEY_CONTEXT_HEADERS,
	KEY_SUBJECT_STRATEGY,
	KEY_CDC_HEADERS
};
static const sink_key sub_keys[] = {
    [KEY_TOPIC] = {"topic", SINK_KEY_STRING, SUB(topic), .flags = SINK_KEY_NONEMPTY,
		   .def_text = KAFKA_DEFAULT_TOPIC, TOPIC_TEMPLATE,
		   .doc = "Kafka only: the topic of each event, a template with `{schema}`, `{table}`, "
			  "`{subscription}`, `{tag}`."},
    [KEY_TOMBSTONES] = {"tombstones", SINK_KEY_BOOL, SUB(tombstones),
			.doc =
			    "Kafka only: after each delete, a record with the same key and a null value (for "
			    "log compaction), and after an update that changed the key one for the old key. "
			    "Default: `false`, `true` with `format: debezium` and `avro` (Debezium's "
			    "`tombstones.on.delete`)."},
    [KEY_FORMAT] = {"format", SINK_KEY_ENUM, SUB(format), format_names, .def_number = KAFKA_PROTOBUF,
		    .doc = "Kafka only: how records are written. `protobuf`: key `cdc.v1.Key`, value "
			   "`cdc.v1.Event`. `json`: the key columns' JSON and the event JSON `sink: stdout` "
			   "prints. `debezium`: key and value as Debezium's PostgreSQL connector writes them "
			   "through Kafka Connect's JsonConverter. `avro`: the same through Confluent's "
			   "AvroConverter, the schemas in `kafka.schema_registry`. See "
			   "[kafka-formats.md](kafka-formats.md)."},
    /* KEY_SCHEMAS, KEY_SERVER_NAME, KEY_UNCHANGED_TOAST, KEY_CONTEXT_HEADERS */
    DBZ_SUB_KEYS(kafka_sub_conf, dbz),
    [KEY_SUBJECT_STRATEGY] =
	{"subject_strategy", SINK_KEY_ENUM, SUB(subject_strategy), strategy_names,
	 .def_number = KAFKA_SUBJECT_TOPIC,
	 .doc =
	     "`format: avro`: the subjects its schemas are registered under, as Confluent's strategies name "
	     "them. `topic` (TopicNameStrategy): `TOPIC-key` and `TOPIC-value`. `record` "
	     "(RecordNameStrategy): "
	     "the record's full name. `topic_record` (TopicRecordNameStrategy): `TOPIC-FULLNAME`."},
    [KEY_CDC_HEADERS] =
	{"cdc_headers", SINK_KEY_BOOL, SUB(cdc_headers), .def_number = 1,
	 .doc =
	     "Kafka: the `cdc-*` headers and `content-type` on the records of rows and schema "
	     "events (default `true`). `false` leaves them out, for about a quarter less of cdc's CPU on a "
	     "large transaction; the value says the same (the protobuf and JSON events have the op, LSNs, "
	     "xid, subscription and schema id). Debezium's own headers are `context_headers`. See "
	     "[kafka.md](kafka.md#headers)."},
};

/* Debezium's records, in JSON (format debezium) or Avro. */
static bool debezium_format(int format)
{
	return format == KAFKA_DEBEZIUM || format == KAFKA_AVRO;
}

/* The formats key i goes with, "" for every one. */
static const char *key_formats(size_t i)
{
	switch (i) {
	case KEY_SCHEMAS:
		return "debezium";
	case KEY_SERVER_NAME:
	case KEY_UNCHANGED_TOAST:
	case KEY_CONTEXT_HEADERS:
		return "debezium and avro";
	case KEY_SUBJECT_STRATEGY:
		return "avro";
	}
	return "";
}

static bool key_valid(size_t i, int format)
{
	const char *formats = key_formats(i);
	return !*formats || (strstr(formats, format_names[format]) != NULL);
}

static void check_sub(void *settings, const bool *given, sink_problems *problems)
{
	kafka_sub_conf *c = settings;
	char msg[160];
	for (size_t i = 0; i < sizeof sub_keys / sizeof *sub_keys; i++)
		if (given[i] && !key_valid(i, c->format)) {
			snprintf(msg, sizeof msg,
				 "only valid with format: %s (this subscription's format is %s)",
				 key_formats(i), format_names[c->format]);
			problems->report(problems, i, msg);
		}
	if (c->format == KAFKA_AVRO && c->dbz.unchanged_toast == DBZ_TOAST_OMIT)
		problems->report(
		    problems, KEY_UNCHANGED_TOAST,
		    "omit is not possible with format: avro (a record has every field of its schema): "
		    "use placeholder");
	/* Debezium follows each delete with a tombstone unless told otherwise (tombstones.on.delete). */
	if (debezium_format(c->format) && !given[KEY_TOMBSTONES])
		c->tombstones = true;
}

static bool sub_shown(const void *settings, size_t key_index)
{
	return key_valid(key_index, ((const kafka_sub_conf *)settings)->format);
}

/* Debezium writes no truncate record unless asked (skipped.operations=t). Format avro learns a table's shape
 * from its schema events. */
static unsigned ops_not_default(const void *settings)
{
	return debezium_format(((const kafka_sub_conf *)settings)->format) ? SINK_OP_TRUNCATE : 0;
}

static unsigned ops_needed(const void *settings)
{
	return ((const kafka_sub_conf *)settings)->format == KAFKA_AVRO ? SINK_OP_SCHEMA : 0;
}

/* With kafka.transactions_topic set, the transaction records of every Kafka subscription go to one
 * topic, so they share one format. */
static bool check_together(const void *section, const void *const *subs, const char *const *names, size_t n,
			   size_t *first, size_t *second, buf *why)
{
	const kafka_conf *c = section;
	for (size_t i = 0; i < n; i++) {
		const kafka_sub_conf *o = subs[i];
		if (o->format != KAFKA_AVRO || (c && c->registry.url))
			continue;
		*first = *second = i;
		buf_printf(
		    why,
		    "subscription %s has format: avro, which registers its schemas in a schema registry: "
		    "set kafka.schema_registry.url",
		    names[i]);
		return false;
	}
	if (!c || !c->transactions_topic)
		return true;
	for (size_t i = 1; i < n; i++) {
		const kafka_sub_conf *a = subs[0], *o = subs[i];
		if (a->format == o->format)
			continue;
		*first = 0;
		*second = i;
		buf_printf(
		    why,
		    "subscriptions %s (format %s) and %s (format %s) write Kafka records in different "
		    "formats, but kafka.transactions_topic holds the records of their transactions in one: "
		    "give them the same format",
		    names[0], format_names[a->format], names[i], format_names[o->format]);
		return false;
	}
	return true;
}

/* ---- the sink ---- */

kafka_setup kafka_setup_make(const kafka_conf *conf, const char *slot)
{
	kafka_setup k = {.props = util_xcalloc(conf->properties.count ? conf->properties.count : 1,
					       sizeof(kafka_property)),
			 .transactional_id = util_xmalloc(strlen(slot) + 5)};
	/* Stable for the slot, so the producer that streams it next fences this one. */
	sprintf(k.transactional_id, "cdc-%s", slot);
	for (size_t i = 0; i < conf->properties.count; i++)
		k.props[i] = (kafka_property){conf->properties.items[i].key, conf->properties.items[i].value};
	k.set = (kafka_sink_settings){.brokers = conf->brokers ? conf->brokers : "",
				      .properties = k.props,
				      .nproperties = conf->properties.count,
				      .transactions_topic = conf->transactions_topic,
				      .schemas_topic = conf->schemas_topic,
				      .exactly_once = conf->exactly_once,
				      .positions_topic = conf->positions_topic,
				      .transactional_id = k.transactional_id,
				      .commit_interval_ms = conf->commit_interval_ms,
				      .commit_events = conf->commit_events,
				      .registry = {.url = conf->registry.url,
						   .username = conf->registry.username,
						   .password = conf->registry.password,
						   .ca_file = conf->registry.ca_file,
						   .cert_file = conf->registry.cert_file,
						   .key_file = conf->registry.key_file,
						   .timeout_ms = conf->registry.timeout_ms},
				      .compatibility =
					  conf->registry.compatibility == COMPATIBILITY_REGISTRY
					      ? NULL
					      : kafka_compatibility_levels[conf->registry.compatibility]};
	return k;
}

void kafka_setup_free(kafka_setup *setup)
{
	free(setup->props);
	free(setup->transactional_id);
}

static kafka_sub_settings *sub_settings(const sink_sub *subs, size_t n)
{
	kafka_sub_settings *v = util_xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		const kafka_sub_conf *c = subs[i].settings;
		v[i] = (kafka_sub_settings){.topic = c->topic,
					    .tombstones = c->tombstones,
					    .format = (kafka_format)c->format,
					    .cdc_headers = c->cdc_headers,
					    .schemas = c->dbz.schemas,
					    .server_name = c->dbz.server_name,
					    .placeholder = c->dbz.unchanged_toast == DBZ_TOAST_PLACEHOLDER,
					    .context_headers = c->dbz.context_headers,
					    .subjects = (kafka_subject_strategy)c->subject_strategy};
	}
	return v;
}

static sink *create_sink(const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
			 char *err, size_t errlen)
{
	kafka_setup k = kafka_setup_make(section, env->slot);
	kafka_sub_settings *v = sub_settings(subs, nsubs);
	sink *s = kafka_sink_new(&k.set, v, nsubs, err, errlen);
	if (s)
		kafka_sink_watch_stream(s, env->stream, env->ctx);
	kafka_setup_free(&k);
	free(v);
	return s;
}

static bool bind_sink(sink *s, const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
		      char *err, size_t errlen)
{
	(void)err, (void)errlen;
	kafka_setup k = kafka_setup_make(section, env->slot);
	kafka_sub_settings *v = sub_settings(subs, nsubs);
	kafka_sink_bind(s, &k.set, v, nsubs);
	kafka_setup_free(&k);
	free(v);
	return true;
}

static bool ticks(const sink *s)
{
	return kafka_sink_exactly_once(s);
}

static void database(sink *s, const char *name)
{
	kafka_sink_set_database(s, name);
}

/* ---- figures ---- */

void kafka_status_json(const kafka_stats *stats, bool exactly_once, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_u64(out, &f, "in_flight", stats->in_flight);
	json_key_u64(out, &f, "delivered", stats->delivered);
	json_key_u64(out, &f, "errors", stats->errors);
	json_key_u64(out, &f, "restarts", stats->restarts);
	json_key_boolean(out, &f, "exactly_once", exactly_once);
	if (exactly_once) {
		json_key_u64(out, &f, "transactions_committed", stats->commits);
		json_key_u64(out, &f, "transactions_aborted", stats->aborts);
		json_key_u64(out, &f, "transactions_skipped", stats->skipped);
		json_key_lsn(out, &f, "position", stats->position);
	}
	if (stats->registry) {
		bool r = true;
		json_key(out, &f, "schema_registry");
		buf_putc(out, '{');
		json_key_u64(out, &r, "schemas_registered", stats->schemas_registered);
		json_key_u64(out, &r, "errors", stats->registry_errors);
		json_key_boolean(out, &r, "waiting", stats->registry_waiting);
		json_key_str(out, &r, "subject", stats->registry_waiting ? stats->registry_subject : NULL);
		json_key_str(out, &r, "error", stats->registry_waiting ? stats->registry_error : NULL);
		buf_putc(out, '}');
	}
	buf_putc(out, '}');
}

void kafka_metrics(const kafka_stats *stats, bool exactly_once, buf *out)
{
	prom_u64(out, "cdc_kafka_in_flight_messages", "gauge",
		 "Messages produced and awaiting a delivery report.", stats->in_flight);
	prom_u64(out, "cdc_kafka_delivered_messages_total", "counter", "Messages the brokers acknowledged.",
		 stats->delivered);
	prom_u64(out, "cdc_kafka_errors_total", "counter", "Kafka delivery and producer errors.",
		 stats->errors);
	prom_u64(out, "cdc_kafka_restarts_total", "counter",
		 "Producer restarts (after a fatal error, from the last flushed position).", stats->restarts);
	if (stats->registry) {
		prom_u64(out, "cdc_kafka_schemas_registered", "gauge",
			 "format avro: schemas the schema registry gave an id (each once per process).",
			 stats->schemas_registered);
		prom_u64(
		    out, "cdc_kafka_registry_errors_total", "counter",
		    "format avro: requests to register a schema that the registry refused or did not answer.",
		    stats->registry_errors);
		prom_u64(out, "cdc_kafka_registry_waiting", "gauge",
			 "format avro: 1 while records wait for a schema the registry has not accepted.",
			 stats->registry_waiting);
	}
	if (!exactly_once)
		return;
	prom_family(out, "cdc_kafka_transactions_total", "counter",
		    "Kafka transactions ended (kafka.exactly_once), by outcome.");
	buf_printf(out, "cdc_kafka_transactions_total{outcome=\"committed\"} %" PRIu64 "\n", stats->commits);
	buf_printf(out, "cdc_kafka_transactions_total{outcome=\"aborted\"} %" PRIu64 "\n", stats->aborts);
	prom_u64(out, "cdc_kafka_skipped_transactions_total", "counter",
		 "Source transactions the slot sent again that Kafka already held (not produced again).",
		 stats->skipped);
	prom_u64(out, "cdc_kafka_position_lsn", "gauge",
		 "The commit LSN up to which Kafka holds the stream (its last committed position record).",
		 stats->position);
}

static void status_json(const sink *s, buf *out)
{
	kafka_status_json(kafka_sink_stats(s), kafka_sink_exactly_once(s), out);
}

static void metrics(const sink *s, buf *out)
{
	kafka_metrics(kafka_sink_stats(s), kafka_sink_exactly_once(s), out);
}

static const hist *latency(const sink *s)
{
	return &kafka_sink_stats(s)->latency;
}

static const char *not_ready(const sink *s)
{
	const kafka_stats *k = kafka_sink_stats(s);
	if (k->registry_waiting)
		return "kafka: records wait for the schema registry to accept their schema (see "
		       "schema_registry)";
	if (k->auth_failed)
		return "kafka: a broker refused cdc's SASL credentials (kafka.properties sasl.username and "
		       "sasl.password)";
	return k->brokers_down && k->in_flight ? "kafka: every broker is down; messages wait in flight"
					       : NULL;
}

static void log_figures(const sink *s)
{
	const kafka_stats *k = kafka_sink_stats(s);
	log_info("kafka",
		 "in_flight=%llu delivered=%llu errors=%llu restarts=%llu latency_p50_ms=%.2f "
		 "latency_p99_ms=%.2f latency_p999_ms=%.2f latency_max_ms=%.2f",
		 (unsigned long long)k->in_flight, (unsigned long long)k->delivered,
		 (unsigned long long)k->errors, (unsigned long long)k->restarts,
		 (double)hist_quantile(&k->latency, 0.5) / 1000,
		 (double)hist_quantile(&k->latency, 0.99) / 1000,
		 (double)hist_quantile(&k->latency, 0.999) / 1000, (double)k->latency.max / 1000);
}

/* cdc status shows the producer's counters, and with exactly once its position. */
static void status_text(struct json_object *figures, buf *out)
{
	char f[3][64];
	buf_printf(out, "kafka   in_flight=%s  delivered=%s  errors=%s\n",
		   json_field_text(figures, "in_flight", f[0], 64),
		   json_field_text(figures, "delivered", f[1], 64),
		   json_field_text(figures, "errors", f[2], 64));
	json_object *position = NULL;
	if (json_object_object_get_ex(figures, "position", &position) &&
	    json_object_is_type(position, json_type_string))
		buf_printf(out, "kafka   exactly once: position=%s  committed=%s  aborted=%s\n",
			   json_field_text(figures, "position", f[0], 64),
			   json_field_text(figures, "transactions_committed", f[1], 64),
			   json_field_text(figures, "transactions_aborted", f[2], 64));
	json_object *registry = NULL, *waiting = NULL;
	if (json_object_object_get_ex(figures, "schema_registry", &registry) &&
	    json_object_is_type(registry, json_type_object)) {
		buf_printf(out, "kafka   schema registry: registered=%s  errors=%s\n",
			   json_field_text(registry, "schemas_registered", f[0], 64),
			   json_field_text(registry, "errors", f[1], 64));
		if (json_object_object_get_ex(registry, "waiting", &waiting) &&
		    json_object_get_boolean(waiting)) {
			char subject[256], error[700];
			buf_printf(out, "kafka   waiting for the registry: subject %s: %s\n",
				   json_field_text(registry, "subject", subject, sizeof(subject)),
				   json_field_text(registry, "error", error, sizeof(error)));
		}
	}
}

const sink_module kafka_module = {
    .name = "kafka",
    .doc = "`kafka` ([kafka.md](kafka.md))",
    .section = "kafka",
    .section_doc =
	"The Kafka producer, for `sink: kafka` subscriptions. Present only when a subscription uses "
	"Kafka.",
    .section_keys = SINK_KEYS(section_keys),
    .section_size = sizeof(kafka_conf),
    .section_optional = true,
    .section_needed = "brokers",
    .sub_keys = SINK_KEYS(sub_keys),
    .sub_size = sizeof(kafka_sub_conf),
    .check_sub = check_sub,
    .sub_shown = sub_shown,
    .ops_not_default = ops_not_default,
    .ops_needed = ops_needed,
    .check_together = check_together,
    .create = create_sink,
    .bind = bind_sink,
    .wake_ms = kafka_sink_wake_ms,
    .ticks = ticks,
    .database = database,
    .status_json = status_json,
    .metrics = metrics,
    .latency = latency,
    .not_ready = not_ready,
    .log_figures = log_figures,
    .status_text = status_text,
    .checks = kafka_checks,
    .doctor_done = kafka_doctor_done,
};

/* `sink: nats` declared once. It gives the nats section and a subscription's keys, how the sink is made from
 * them, and its figures in /status, /metrics and the log. Its doctor checks are in nats_doctor.c. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/base/log.h"
#include "decoder/base/prom.h"
#include "sinks/module.h"
#include "sinks/nats/nats_sink.h"

/* ---- values ---- */

/* Checks a subject template. It must have tokens of printable bytes without white space, no wildcards, and
 * only cdc's placeholders. NULL if fine. */
static const char *subject_problem(const char *value, char *why, size_t whylen)
{
	static const char *const placeholders[] = {"{schema}", "{table}", "{subscription}", "{tag}"};
	if (value[0] == '.' || (*value && value[strlen(value) - 1] == '.') || strstr(value, ".."))
		return "a subject's tokens must not be empty (no leading, trailing or double dots)";
	for (const char *p = value; *p;) {
		if (*p == '{') {
			size_t i;
			for (i = 0; i < 4 && strncmp(p, placeholders[i], strlen(placeholders[i])) != 0; i++)
				;
			if (i == 4) {
				size_t end = strcspn(p, "}");
				util_errf(why, whylen,
					  "unknown placeholder \"%.*s\" (expected {schema}, {table}, "
					  "{subscription}, "
					  "{tag})",
					  (int)(end < 40 ? end + (p[end] != 0) : 40), p);
				return why;
			}
			p += strlen(placeholders[i]);
			continue;
		}
		unsigned char c = (unsigned char)*p++;
		if (c <= ' ' || c == 0x7f || c == '*' || c == '>') {
			util_errf(why, whylen, "a published subject cannot hold %s",
				  c == '*' || c == '>' ? "the wildcards * and >"
						       : "white space or control characters");
			return why;
		}
	}
	return NULL;
}

/* Checks a stream name against what JetStream allows. NULL if fine. */
static const char *stream_problem(const char *value, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	size_t n = strlen(value);
	if (n < 1 || n > 255 ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n)
		return "a JetStream stream name [A-Za-z0-9_-]{1,255}";
	return NULL;
}

#define SUBJECT                                                                                              \
	.check = subject_problem, .noun = "subject", .value_type = "subject template",                       \
	.value_doc =                                                                                         \
	    "a NATS subject with `{schema}`, `{table}`, `{subscription}`, `{tag}`; in what replaces "        \
	    "them, `.`, `*`, `>` and white space become `_`"

/* ---- keys ---- */

#define SECTION(f) offsetof(nats_conf, f)
#define SUB(f) offsetof(nats_sub_conf, f)

static const sink_key section_keys[] = {
    {"servers", SINK_KEY_STRING, SECTION(servers),
     .flags = SINK_KEY_REQUIRED | SINK_KEY_NONEMPTY | SINK_KEY_RESTART,
     .doc = "The NATS servers, `nats://host:4222,nats://host2:4222` (`tls://` for TLS). cdc reconnects to "
	    "them for ever; the slot waits meanwhile."},
    {"stream", SINK_KEY_STRING, SECTION(stream), .flags = SINK_KEY_RESTART, .def_text = "CDC",
     .check = stream_problem, .noun = "stream", .value_type = "stream name",
     .value_doc = "a JetStream stream: `[A-Za-z0-9_-]`, 1 to 255 characters",
     .doc = "The JetStream stream that holds the subjects cdc publishes to. See [nats.md](nats.md)."},
    {"create", SINK_KEY_BOOL, SECTION(create), .flags = SINK_KEY_RESTART,
     .doc = "Create the stream when it is missing: its subjects from the subscriptions' templates (each "
	    "placeholder a `*`), file storage, `duplicate_window`. Without it, cdc holds the slot and says "
	    "so while the stream is missing; `cdc doctor` checks it."},
    {"duplicate_window", SINK_KEY_DURATION, SECTION(duplicate_window_ms),
     .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART, .def_number = 120000,
     .doc =
	 "The stream's duplicate window when cdc creates it, and the least `cdc doctor` accepts: a message "
	 "sent again within it (after a restart) is dropped by its `Nats-Msg-Id`. Make it longer than cdc "
	 "may be down."},
    {"max_in_flight", SINK_KEY_U32, SECTION(max_in_flight), .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART,
     .def_number = 1024,
     .doc = "At most this many publishes await JetStream's acknowledgement; then cdc stops reading the slot "
	    "until acknowledgements come."},
    {"ack_timeout", SINK_KEY_DURATION, SECTION(ack_timeout_ms), .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART,
     .def_number = 30000,
     .doc = "A publish not acknowledged this long fails: cdc reconnects and sends again from the slot's "
	    "confirmed position (the duplicate window drops what the stream kept)."},
    {"schemas_subject", SINK_KEY_STRING, SECTION(schemas_subject),
     .flags = SINK_KEY_OPTIONAL | SINK_KEY_NONEMPTY | SINK_KEY_RESTART, SUBJECT,
     .doc = "The schema and DDL events of NATS subscriptions, on this subject (it may use the placeholders). "
	    "Without it, NATS subscriptions publish no schema or DDL events."},
    {"credentials", SINK_KEY_STRING, SECTION(credentials), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "A NATS credentials file (`.creds`: a user JWT and its nkey seed)."},
    {"nkey_seed", SINK_KEY_STRING, SECTION(nkey_seed), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "A file holding an nkey seed (`SU...`), for servers that authenticate by nkey."},
    {"user", SINK_KEY_STRING, SECTION(user), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "A user name, with `password`."},
    {"password", SINK_KEY_STRING, SECTION(password),
     .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART | SINK_KEY_SECRET,
     .doc = "The user's password. Masked wherever cdc prints the configuration."},
    {"token", SINK_KEY_STRING, SECTION(token),
     .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART | SINK_KEY_SECRET,
     .doc = "An authentication token. Masked wherever cdc prints the configuration."},
    {"tls", SINK_KEY_BOOL, SECTION(tls), .flags = SINK_KEY_RESTART,
     .doc = "Require TLS (also on when `tls_ca` or `tls_cert` is set)."},
    {"tls_ca", SINK_KEY_STRING, SECTION(tls_ca), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "The CA certificates that sign the servers' certificates (PEM)."},
    {"tls_cert", SINK_KEY_STRING, SECTION(tls_cert), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "A client certificate (PEM), with `tls_key`."},
    {"tls_key", SINK_KEY_STRING, SECTION(tls_key), .flags = SINK_KEY_OPTIONAL | SINK_KEY_RESTART,
     .doc = "The client certificate's private key (PEM)."},
};

static const char *const format_names[] = {"protobuf", "json", "debezium", NULL};
enum {
	KEY_SUBJECT,
	KEY_FORMAT,
	KEY_CDC_HEADERS,
	KEY_SCHEMAS,
	KEY_SERVER_NAME,
	KEY_UNCHANGED_TOAST,
	KEY_CONTEXT_HEADERS
};
static const sink_key sub_keys[] = {
    [KEY_SUBJECT] = {"subject", SINK_KEY_STRING, SUB(subject), .flags = SINK_KEY_NONEMPTY,
		     .def_text = NATS_DEFAULT_SUBJECT, SUBJECT,
		     .doc = "NATS only: the subject of each event, a template with `{schema}`, `{table}`, "
			    "`{subscription}`, `{tag}`."},
    [KEY_FORMAT] =
	{"format", SINK_KEY_ENUM, SUB(format), format_names, .def_number = NATS_PROTOBUF,
	 .doc = "NATS only: how messages are written. `protobuf`: `cdc.v1.Event`. `json`: the event "
		"JSON `sink: stdout` prints. `debezium`: the value of Debezium's record, as Debezium "
		"Server's NATS JetStream sink publishes it. See [nats.md](nats.md#debezium-messages)."},
    [KEY_CDC_HEADERS] =
	{"cdc_headers", SINK_KEY_BOOL, SUB(cdc_headers), .def_number = 1,
	 .doc = "NATS: the `cdc-*` headers and `content-type` on its messages (default `true`). `false` "
		"leaves them out (`Nats-Msg-Id` stays), for about a quarter less of cdc's CPU; the value "
		"says the same. See [nats.md](nats.md#headers)."},
    /* KEY_SCHEMAS, KEY_SERVER_NAME, KEY_UNCHANGED_TOAST, KEY_CONTEXT_HEADERS */
    DBZ_SUB_KEYS(nats_sub_conf, dbz),
};

/* The keys of Debezium's records go only with `format: debezium`. */
static bool key_valid(size_t key_index, int format)
{
	return key_index < KEY_SCHEMAS || format == NATS_DEBEZIUM;
}

static void check_sub(void *settings, const bool *given, sink_problems *problems)
{
	const nats_sub_conf *conf = settings;
	char msg[160];
	for (size_t i = 0; i < sizeof sub_keys / sizeof *sub_keys; i++)
		if (given[i] && !key_valid(i, conf->format)) {
			snprintf(msg, sizeof msg,
				 "only valid with format: debezium (this subscription's format is %s)",
				 format_names[conf->format]);
			problems->report(problems, i, msg);
		}
}

static bool sub_shown(const void *settings, size_t key_index)
{
	return key_valid(key_index, ((const nats_sub_conf *)settings)->format);
}

/* Debezium writes no truncate record unless asked (skipped.operations=t). */
static unsigned ops_not_default(const void *settings)
{
	return ((const nats_sub_conf *)settings)->format == NATS_DEBEZIUM ? SINK_OP_TRUNCATE : 0;
}

/* ---- the sink ---- */

static sink *create_sink(const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
			 char *err, size_t errlen)
{
	(void)env;
	return nats_sink_new(section, subs, nsubs, err, errlen);
}

static bool bind_sink(sink *s, const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
		      char *err, size_t errlen)
{
	(void)env, (void)section, (void)err, (void)errlen;
	nats_sink_bind(s, subs, nsubs);
	return true;
}

static void database(sink *sk, const char *name)
{
	nats_sink_set_database(sk, name);
}

/* ---- figures ---- */

void nats_status_json(const nats_stats *stats, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_boolean(out, &f, "connected", stats->connected);
	json_key_u64(out, &f, "in_flight", stats->in_flight);
	json_key_u64(out, &f, "delivered", stats->delivered);
	json_key_u64(out, &f, "duplicates", stats->duplicates);
	json_key_u64(out, &f, "errors", stats->errors);
	json_key_u64(out, &f, "restarts", stats->restarts);
	json_key_u64(out, &f, "reconnects", stats->reconnects);
	json_key_str(out, &f, "error", stats->error[0] ? stats->error : NULL);
	buf_putc(out, '}');
}

void nats_metrics(const nats_stats *stats, buf *out)
{
	prom_u64(out, "cdc_nats_connected", "gauge", "1 while cdc is connected to a NATS server.",
		 stats->connected);
	prom_u64(out, "cdc_nats_in_flight_messages", "gauge",
		 "Publishes awaiting JetStream's acknowledgement.", stats->in_flight);
	prom_u64(out, "cdc_nats_delivered_messages_total", "counter", "Publishes JetStream acknowledged.",
		 stats->delivered);
	prom_u64(out, "cdc_nats_duplicate_messages_total", "counter",
		 "Publishes JetStream acknowledged as duplicates (its duplicate window dropped them).",
		 stats->duplicates);
	prom_u64(out, "cdc_nats_errors_total", "counter",
		 "Publishes JetStream refused or did not acknowledge.", stats->errors);
	prom_u64(out, "cdc_nats_restarts_total", "counter",
		 "Restarts of the connection after a failed publish (from the last flushed position).",
		 stats->restarts);
	prom_u64(out, "cdc_nats_reconnects_total", "counter", "Reconnections to a NATS server.",
		 stats->reconnects);
}

static void status_json(const sink *s, buf *out)
{
	nats_status_json(nats_sink_stats(s), out);
}

static void metrics(const sink *s, buf *out)
{
	nats_metrics(nats_sink_stats(s), out);
}

static const hist *latency(const sink *s)
{
	return &nats_sink_stats(s)->latency;
}

static const char *not_ready(const sink *s)
{
	static char text[sizeof(((nats_stats *)0)->error) + 8]; /* the loop's thread only */
	const nats_stats *n = nats_sink_stats(s);
	if (n->error[0]) {
		snprintf(text, sizeof(text), "nats: %s", n->error);
		return text;
	}
	return n->connected ? NULL : "nats: not connected to any server; the slot waits";
}

static void log_figures(const sink *s)
{
	const nats_stats *n = nats_sink_stats(s);
	log_info("nats",
		 "connected=%s in_flight=%" PRIu64 " delivered=%" PRIu64 " duplicates=%" PRIu64
		 " errors=%" PRIu64 " latency_p50_ms=%.2f latency_p99_ms=%.2f",
		 n->connected ? "true" : "false", n->in_flight, n->delivered, n->duplicates, n->errors,
		 (double)hist_quantile(&n->latency, 0.5) / 1000,
		 (double)hist_quantile(&n->latency, 0.99) / 1000);
}

/* cdc status shows the connection and its counters, and why publishes fail. */
static void status_text(struct json_object *figures, buf *out)
{
	char f[5][512];
	buf_printf(
	    out, "nats    connected=%s  in_flight=%s  delivered=%s  duplicates=%s  errors=%s\n",
	    json_field_text(figures, "connected", f[0], 64), json_field_text(figures, "in_flight", f[1], 64),
	    json_field_text(figures, "delivered", f[2], 64), json_field_text(figures, "duplicates", f[3], 64),
	    json_field_text(figures, "errors", f[4], 64));
	json_object *error = NULL;
	if (json_object_object_get_ex(figures, "error", &error) &&
	    json_object_is_type(error, json_type_string))
		buf_printf(out, "nats    error: %s\n", json_field_text(figures, "error", f[0], sizeof(f[0])));
}

const sink_module nats_module = {
    .name = "nats",
    .doc = "`nats` (a NATS JetStream stream, [nats.md](nats.md))",
    .section = "nats",
    .section_doc =
	"The NATS connection and JetStream stream, for `sink: nats` subscriptions. Present only when "
	"a subscription uses NATS.",
    .section_keys = SINK_KEYS(section_keys),
    .section_size = sizeof(nats_conf),
    .section_optional = true,
    .section_needed = "servers",
    .sub_keys = SINK_KEYS(sub_keys),
    .sub_size = sizeof(nats_sub_conf),
    .check_sub = check_sub,
    .sub_shown = sub_shown,
    .ops_not_default = ops_not_default,
    .create = create_sink,
    .bind = bind_sink,
    .database = database,
    .status_json = status_json,
    .metrics = metrics,
    .latency = latency,
    .not_ready = not_ready,
    .log_figures = log_figures,
    .status_text = status_text,
    .checks = nats_checks,
    .doctor_done = nats_doctor_done,
};

/* cdc doctor's checks of the Kafka side. The brokers are asked once for every topic cdc would write to
 * (sinks/kafka/probe.c, metadata and DescribeConfigs, nothing produced). With format avro, it checks that the
 * schema registry answers. It also checks whether each table's schemas, as cdc would register them now, may
 * be their subjects' next versions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/kafka/avro.h"
#include "sinks/kafka/kafka_sink.h"
#include "sinks/kafka/probe.h"
#include "sinks/kafka/registry.h"

#define DEFAULT_TIMEOUT_MS 5000

typedef struct name_list {
	char **v;
	size_t n;
} name_list;

/* What the checks keep from one to the next, the brokers' answer, asked once. */
typedef struct doctor_state {
	kafka_probe probe;
	char probe_error[512];
} doctor_state;

typedef struct topic_list {
	name_list names;
	bool *configs; /* parallel to names, whether its cleanup.policy matters */
} topic_list;

static void add_topic(topic_list *l, const char *name, bool config)
{
	for (size_t i = 0; i < l->names.n; i++)
		if (strcmp(l->names.v[i], name) == 0) {
			l->configs[i] |= config;
			return;
		}
	l->names.v = util_xrealloc(l->names.v, (l->names.n + 1) * sizeof(char *));
	l->configs = util_xrealloc(l->configs, (l->names.n + 1) * sizeof(bool));
	l->configs[l->names.n] = config;
	l->names.v[l->names.n++] = util_xstrdup(name);
}

/* One subscription's topic for each of its tables. */
typedef struct sub_topics {
	topic_list *list;
	const sink_sub *sub;
} sub_topics;

static void sub_topic(void *arg, const char *schema, const char *table)
{
	const sub_topics *st = arg;
	const kafka_sub_conf *c = st->sub->settings;
	buf name = {0};
	kafka_topic_name(&name, c->topic ? c->topic : KAFKA_DEFAULT_TOPIC, schema, table, st->sub->name,
			 st->sub->tag);
	add_topic(st->list, name.data, false);
	buf_free(&name);
}

/* Every topic cdc would write to. These are its subscriptions' for the tables that exist now, the
 * transactions topic, and with exactly once the positions topic. */
static void topics_of(sink_doctor *dr, topic_list *l)
{
	const kafka_conf *c = dr->section;
	for (size_t i = 0; i < dr->nsubs; i++)
		if (dr->subs[i].mine) {
			sub_topics st = {l, &dr->subs[i]};
			dr->tables(dr, i, sub_topic, &st);
		}
	if (c->transactions_topic)
		add_topic(l, c->transactions_topic, false);
	if (c->schemas_topic)
		add_topic(l, c->schemas_topic, false);
	if (c->exactly_once)
		add_topic(l, c->positions_topic, true);
}

static void topic_list_free(topic_list *l)
{
	for (size_t i = 0; i < l->names.n; i++)
		free(l->names.v[i]);
	free(l->names.v);
	free(l->configs);
}

/* The brokers' answer, asked by the first check. */
static doctor_state *probe(sink_doctor *dr)
{
	if (dr->state)
		return dr->state;
	doctor_state *d = dr->state = util_xcalloc(1, sizeof(*d));
	topic_list l = {0};
	topics_of(dr, &l);
	kafka_setup k = kafka_setup_make(dr->section, dr->slot);
	int timeout = dr->timeout_ms > 0 ? dr->timeout_ms : DEFAULT_TIMEOUT_MS;
	if (!kafka_probe_run(&k.set, (const char *const *)l.names.v, l.configs, l.names.n, timeout, &d->probe,
			     d->probe_error, sizeof(d->probe_error)))
		d->probe.reachable = false;
	kafka_setup_free(&k);
	topic_list_free(&l);
	return d;
}

void kafka_doctor_done(sink_doctor *dr)
{
	doctor_state *d = dr->state;
	if (d)
		kafka_probe_free(&d->probe);
	free(d);
	dr->state = NULL;
}

static void check_brokers(sink_doctor *dr)
{
	doctor_state *d = probe(dr);
	if (d->probe_error[0])
		dr->say(dr, SINK_FAIL, "correct kafka.properties (they go to librdkafka as they are)", "%s",
			d->probe_error);
	else if (!d->probe.reachable)
		dr->say(dr, SINK_FAIL,
			"check kafka.brokers (host:port,...), the security settings in kafka.properties, and "
			"that the brokers run and this host reaches them",
			"%s", d->probe.error);
	else
		dr->say(dr, SINK_PASS, NULL, "%s: %d broker%s answered",
			((const kafka_conf *)dr->section)->brokers, d->probe.brokers,
			d->probe.brokers == 1 ? "" : "s");
}

/* What a fix with Kafka's tools says. It gives what to do, and says that the tool needs kafka.properties'
 * security settings too when the brokers ask for them (its --command-config file). */
static void topics_words(const kafka_conf *c, char *out, size_t outlen, const char *what)
{
	bool secured = false;
	for (size_t i = 0; i < c->properties.count; i++)
		secured |= strncmp(c->properties.items[i].key, "security.", 9) == 0 ||
			   strncmp(c->properties.items[i].key, "sasl.", 5) == 0 ||
			   strncmp(c->properties.items[i].key, "ssl.", 4) == 0;
	snprintf(out, outlen, "%s%s", what,
		 secured ? " (add --command-config FILE with kafka.properties' security settings)" : "");
}

static void check_topics(sink_doctor *dr)
{
	doctor_state *d = probe(dr);
	const kafka_conf *c = dr->section;
	if (!d->probe.reachable)
		return;
	if (!dr->database_read) {
		dr->say(dr, SINK_WARN, "make the server check pass, then run cdc doctor again",
			"the topics follow the subscriptions' tables, and the database could not be read");
		return;
	}
	const kafka_probe_config *ac = &d->probe.auto_create;
	buf missing = {0};
	size_t n = 0, present = 0;
	for (size_t i = 0; i < d->probe.ntopics; i++) {
		const kafka_probe_topic *t = &d->probe.topics[i];
		if (t->exists) {
			present++;
			continue;
		}
		/* The positions topic has a check of its own, as an auto-created one is not compacted. */
		if (c->exactly_once && strcmp(t->name, c->positions_topic) == 0)
			continue;
		buf_printf(&missing, "%s%s", n++ ? ", " : "", t->name);
	}
	char words[256];
	topics_words(c, words, sizeof(words), "create them with Kafka's tool");
	if (!n)
		dr->say(dr, SINK_PASS, NULL, "%zu topic%s present", present, present == 1 ? "" : "s");
	else if (ac->known && strcmp(ac->value, "true") == 0)
		dr->say(dr, SINK_PASS, NULL,
			"%zu missing (%s); the brokers create topics on first use "
			"(auto.create.topics.enable=true)",
			n, missing.data);
	else if (ac->known)
		dr->say(
		    dr, SINK_FAIL, words,
		    "%zu missing (%s), and the brokers do not create topics (auto.create.topics.enable=%s)",
		    n, missing.data, ac->value);
	else
		dr->say(dr, SINK_WARN, words,
			"%zu missing (%s), and whether the brokers create topics on first use is unknown "
			"(auto.create.topics.enable: %s): create them, or make sure they do",
			n, missing.data, ac->error);
	for (size_t i = 0; n && !(ac->known && strcmp(ac->value, "true") == 0) && i < d->probe.ntopics; i++) {
		const kafka_probe_topic *t = &d->probe.topics[i];
		if (t->exists || (c->exactly_once && strcmp(t->name, c->positions_topic) == 0))
			continue;
		char cmd[1024];
		snprintf(cmd, sizeof(cmd), "kafka-topics.sh --bootstrap-server %s --create --topic %s",
			 c->brokers, t->name);
		dr->command(dr, cmd);
	}
	buf_free(&missing);
}

static void check_transactions(sink_doctor *dr)
{
	doctor_state *d = probe(dr);
	if (!d->probe.reachable)
		return;
	kafka_setup k = kafka_setup_make(dr->section, dr->slot);
	const char *mine = kafka_producer_setting(&k.set, "transaction.timeout.ms");
	long long producer = mine ? atoll(mine) : 60000; /* librdkafka's own default */
	kafka_setup_free(&k);
	const kafka_probe_config *max = &d->probe.transaction_max_timeout;
	char fix[256];
	snprintf(fix, sizeof(fix),
		 "set the brokers' transaction.max.timeout.ms to at least %lld, or kafka.properties' "
		 "transaction.timeout.ms to at most what they allow",
		 producer);
	if (!max->known)
		dr->say(
		    dr, SINK_WARN, fix,
		    "the producer's transaction.timeout.ms is %lld; the brokers' transaction.max.timeout.ms "
		    "is unknown (%s), and a lower one refuses the transactional producer",
		    producer, max->error);
	else if (atoll(max->value) < producer)
		dr->say(dr, SINK_FAIL, fix,
			"the producer's transaction.timeout.ms %lld is above the brokers' "
			"transaction.max.timeout.ms %s: the brokers refuse the transactional producer",
			producer, max->value);
	else
		dr->say(dr, SINK_PASS, NULL,
			"the producer's transaction.timeout.ms %lld is within the brokers' "
			"transaction.max.timeout.ms %s",
			producer, max->value);
}

static void check_positions(sink_doctor *dr)
{
	doctor_state *d = probe(dr);
	if (!d->probe.reachable)
		return;
	const char *name = ((const kafka_conf *)dr->section)->positions_topic;
	const kafka_probe_topic *t = NULL;
	for (size_t i = 0; i < d->probe.ntopics; i++)
		if (strcmp(d->probe.topics[i].name, name) == 0)
			t = &d->probe.topics[i];
	const char *brokers = ((const kafka_conf *)dr->section)->brokers;
	char words[256], cmd[1024];
	if (!t || !t->exists) {
		topics_words(dr->section, words, sizeof(words), "create it, compacted, with Kafka's tool");
		dr->say(dr, SINK_FAIL, words,
			"%s does not exist (one the brokers create on first use is not compacted, and the "
			"topic grows without end)",
			name);
		snprintf(cmd, sizeof(cmd),
			 "kafka-topics.sh --bootstrap-server %s --create --topic %s --partitions 1 --config "
			 "cleanup.policy=compact",
			 brokers, name);
		dr->command(dr, cmd);
		return;
	}
	topics_words(dr->section, words, sizeof(words), "make it compacted with Kafka's tool");
	snprintf(cmd, sizeof(cmd),
		 "kafka-configs.sh --bootstrap-server %s --alter --entity-type topics --entity-name %s "
		 "--add-config cleanup.policy=compact",
		 brokers, name);
	if (!t->cleanup_policy.known) {
		dr->say(dr, SINK_WARN, words, "%s exists; its cleanup.policy is unknown (%s)", name,
			t->cleanup_policy.error);
		dr->command(dr, cmd);
	} else if (!strstr(t->cleanup_policy.value, "compact")) {
		dr->say(dr, SINK_FAIL, words,
			"%s has cleanup.policy=%s: it keeps every position record, and each start reads them "
			"all",
			name, t->cleanup_policy.value);
		dr->command(dr, cmd);
	} else
		dr->say(dr, SINK_PASS, NULL, "%s is compacted (cleanup.policy=%s)", name,
			t->cleanup_policy.value);
}

static bool exactly_once(const sink_doctor *dr)
{
	return ((const kafka_conf *)dr->section)->exactly_once;
}

/* ---- the schema registry (format avro) ---- */

static bool avro(const sink_doctor *dr)
{
	for (size_t i = 0; i < dr->nsubs; i++)
		if (dr->subs[i].mine && ((const kafka_sub_conf *)dr->subs[i].settings)->format == KAFKA_AVRO)
			return true;
	return false;
}

static kafka_registry_conf registry_conf(const sink_doctor *dr)
{
	const kafka_conf *c = dr->section;
	kafka_setup k = kafka_setup_make(c, dr->slot);
	kafka_registry_conf conf = k.set.registry;
	kafka_setup_free(&k);
	return conf;
}

#define REGISTRY_FIX                                                                                         \
	"check kafka.schema_registry: url (with the REST API's path prefix), username and password, "        \
	"ca_file "                                                                                           \
	"for a private CA; and that the registry runs and this host reaches it"

static void check_registry(sink_doctor *dr)
{
	kafka_registry_conf conf = registry_conf(dr);
	char level[64], err[800];
	if (kafka_registry_level(&conf, NULL, level, sizeof(level), err, sizeof(err)) != REGISTRY_OK)
		dr->say(dr, SINK_FAIL, REGISTRY_FIX, "%s", err);
	else
		dr->say(dr, SINK_PASS, NULL, "the schema registry answers; its compatibility level is %s",
			level);
}

/* One table of an Avro subscription, with its columns now and its key's and envelope's subjects. */
typedef struct table_columns {
	dbz_column *cols;
	size_t n;
} table_columns;

static void add_column(void *arg, const char *name, uint32_t type_oid, int32_t typmod, bool key)
{
	table_columns *t = arg;
	t->cols = util_xrealloc(t->cols, (t->n + 1) * sizeof(*t->cols));
	t->cols[t->n++] = (dbz_column){util_xstrdup(name), type_oid, typmod, key};
}

typedef struct table_names {
	name_list schemas, tables;
} table_names;

static void add_table(void *arg, const char *schema, const char *table)
{
	table_names *l = arg;
	l->schemas.v = util_xrealloc(l->schemas.v, (l->schemas.n + 1) * sizeof(char *));
	l->tables.v = util_xrealloc(l->tables.v, (l->tables.n + 1) * sizeof(char *));
	l->schemas.v[l->schemas.n++] = util_xstrdup(schema);
	l->tables.v[l->tables.n++] = util_xstrdup(table);
}

/* Whether schema may be subject's next version. A line for a refusal or an unanswered request. *checked
 * counts the subjects that could be asked. */
static void check_subject(sink_doctor *dr, const kafka_registry_conf *conf, const char *subject,
			  const char *schema, size_t *checked, size_t *bad)
{
	bool ok;
	char why[1200], err[800], level[64], fix[1024];
	kafka_registry_status st =
	    kafka_registry_compatible(conf, subject, schema, &ok, why, sizeof(why), err, sizeof(err));
	if (st == REGISTRY_OK && ok) {
		(*checked)++;
		return;
	}
	(*bad)++;
	if (st != REGISTRY_OK) {
		dr->say(dr, SINK_FAIL, REGISTRY_FIX, "%s", err);
		return;
	}
	if (kafka_registry_level(conf, subject, level, sizeof(level), err, sizeof(err)) != REGISTRY_OK)
		snprintf(level, sizeof(level), "unknown");
	dr->say(dr, SINK_FAIL, "change the table back, or the subject's compatibility level",
		"subject %s (compatibility %s) refuses the schema cdc registers for the table as it is now: "
		"cdc would hold its rows until it is accepted: %s",
		subject, level, why);
	/* The registry's own options. curl asks for the password of -u USER. */
	int n = snprintf(fix, sizeof(fix),
			 "curl -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json'");
	if (conf->username && n > 0 && (size_t)n < sizeof(fix))
		n += snprintf(fix + n, sizeof(fix) - (size_t)n, " -u '%s'", conf->username);
	if (conf->ca_file && n > 0 && (size_t)n < sizeof(fix))
		n += snprintf(fix + n, sizeof(fix) - (size_t)n, " --cacert '%s'", conf->ca_file);
	if (n > 0 && (size_t)n < sizeof(fix))
		snprintf(fix + n, sizeof(fix) - (size_t)n,
			 " -d '{\"compatibility\":\"NONE\"}' '%s/config/%s'", conf->url, subject);
	dr->command(dr, fix);
}

static void check_subjects(sink_doctor *dr)
{
	if (!dr->database_read) {
		dr->say(dr, SINK_WARN, "make the server check pass, then run cdc doctor again",
			"the subjects follow the subscriptions' tables, and the database could not be read");
		return;
	}
	kafka_registry_conf conf = registry_conf(dr);
	dbz_schemas sc = {0};
	buf text = {0}, subject = {0}, topic = {0};
	size_t checked = 0, bad = 0;
	for (size_t i = 0; i < dr->nsubs; i++) {
		const kafka_sub_conf *c = dr->subs[i].settings;
		if (!dr->subs[i].mine || c->format != KAFKA_AVRO)
			continue;
		table_names l = {0};
		dr->tables(dr, i, add_table, &l);
		for (size_t t = 0; t < l.tables.n; t++) {
			table_columns tc = {0};
			dr->columns(dr, i, l.schemas.v[t], l.tables.v[t], add_column, &tc);
			buf_reset(&topic);
			kafka_topic_name(&topic, c->topic ? c->topic : KAFKA_DEFAULT_TOPIC, l.schemas.v[t],
					 l.tables.v[t], dr->subs[i].name, dr->subs[i].tag);
			const char *server = c->dbz.server_name ? c->dbz.server_name : "cdc";
			for (int key = 1; key >= 0 && tc.n; key--) {
				const dbz_schema *s =
				    sink_debezium_table_schema(&sc, server, l.schemas.v[t], l.tables.v[t],
							       topic.data, tc.cols, tc.n, key);
				if (key && !s->nfields)
					continue; /* no key columns, so a null key and no key schema */
				buf_reset(&text);
				kafka_avro_schema(&text, s);
				buf_putc(&text, '\0');
				buf_reset(&subject);
				kafka_subject_name(&subject, (kafka_subject_strategy)c->subject_strategy,
						   topic.data, key, s->name);
				buf_putc(&subject, '\0');
				check_subject(dr, &conf, subject.data, text.data, &checked, &bad);
			}
			for (size_t k = 0; k < tc.n; k++)
				free((char *)tc.cols[k].name);
			free(tc.cols);
		}
		for (size_t t = 0; t < l.tables.n; t++) {
			free(l.schemas.v[t]);
			free(l.tables.v[t]);
		}
		free(l.schemas.v);
		free(l.tables.v);
	}
	if (!bad)
		dr->say(
		    dr, SINK_PASS, NULL,
		    "%zu subject%s may take the schemas cdc would register for the tables as they are now",
		    checked, checked == 1 ? "" : "s");
	sink_debezium_schemas_free(&sc);
	buf_free(&text);
	buf_free(&subject);
	buf_free(&topic);
}

const sink_check kafka_checks[] = {
    {"kafka_brokers", NULL, check_brokers},
    {"kafka_topics", NULL, check_topics},
    {"kafka_transactions", exactly_once, check_transactions},
    {"kafka_positions_topic", exactly_once, check_positions},
    {"kafka_schema_registry", avro, check_registry},
    {"kafka_schema_subjects", avro, check_subjects},
    {NULL, NULL, NULL},
};

/* kafka.c: the checks of the Kafka side. The brokers are asked once (sinks/kafka/probe.c: metadata
 * and DescribeConfigs, nothing produced) for every topic cdc would write to. */
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/sinks_setup.h"
#include "cdc/doctor/internal.h"

#define DEFAULT_TIMEOUT_MS 5000

typedef struct topic_list {
	cfg_strlist names;
	bool *configs; /* parallel: whether its cleanup.policy matters */
} topic_list;

static void add_topic(topic_list *l, const char *name, bool config)
{
	for (size_t i = 0; i < l->names.n; i++)
		if (strcmp(l->names.v[i], name) == 0) {
			l->configs[i] |= config;
			return;
		}
	l->names.v = xrealloc(l->names.v, (l->names.n + 1) * sizeof(char *));
	l->configs = xrealloc(l->configs, (l->names.n + 1) * sizeof(bool));
	l->configs[l->names.n] = config;
	l->names.v[l->names.n++] = xstrdup(name);
}

static void sub_topic(doctor *d, const cfg_subscription *s, const doctor_table *t, void *arg)
{
	(void)d;
	buf name = {0};
	kafka_topic_name(&name, s->topic ? s->topic : KAFKA_DEFAULT_TOPIC, t->schema, t->name, s->name,
			 s->tag);
	add_topic(arg, name.data, false);
	buf_free(&name);
}

/* Every topic cdc would write to: its subscriptions' for the tables that exist now, the
 * transactions topic, and with exactly once the positions topic. */
static void topics_of(doctor *d, topic_list *l)
{
	for (size_t i = 0; i < d->c->nsubs; i++)
		if (d->c->subs[i].sink == CFG_SINK_KAFKA)
			doctor_sub_tables(d, &d->c->subs[i], sub_topic, l);
	if (d->c->kafka.transactions_topic)
		add_topic(l, d->c->kafka.transactions_topic, false);
	if (d->c->kafka.schemas_topic)
		add_topic(l, d->c->kafka.schemas_topic, false);
	if (d->c->kafka.exactly_once)
		add_topic(l, d->c->kafka.positions_topic, true);
}

static void topic_list_free(topic_list *l)
{
	for (size_t i = 0; i < l->names.n; i++)
		free(l->names.v[i]);
	free(l->names.v);
	free(l->configs);
}

static void probe(doctor *d)
{
	if (d->probed)
		return;
	d->probed = true;
	topic_list l = {0};
	topics_of(d, &l);
	kafka_setup k = sinks_kafka_setup(d->c);
	int timeout = d->r->kafka_timeout_ms > 0 ? d->r->kafka_timeout_ms : DEFAULT_TIMEOUT_MS;
	if (!kafka_probe_run(&k.set, (const char *const *)l.names.v, l.configs, l.names.n, timeout, &d->probe,
			     d->probe_error, sizeof(d->probe_error)))
		d->probe.reachable = false;
	sinks_kafka_setup_free(&k);
	topic_list_free(&l);
}

void doctor_kafka_brokers(doctor *d)
{
	probe(d);
	if (d->probe_error[0])
		doctor_say(d, DOCTOR_FAIL, "correct kafka.properties (they go to librdkafka as they are)",
			   "%s", d->probe_error);
	else if (!d->probe.reachable)
		doctor_say(
		    d, DOCTOR_FAIL,
		    "check kafka.brokers (host:port,...), the security settings in kafka.properties, and "
		    "that the brokers run and this host reaches them",
		    "%s", d->probe.error);
	else
		doctor_say(d, DOCTOR_PASS, NULL, "%s: %d broker%s answered", d->c->kafka.brokers,
			   d->probe.brokers, d->probe.brokers == 1 ? "" : "s");
}

void doctor_kafka_topics(doctor *d)
{
	probe(d);
	if (!d->probe.reachable)
		return;
	if (!d->conn) {
		doctor_say(d, DOCTOR_WARN, "make the server check pass, then run cdc doctor again",
			   "the topics follow the subscriptions' tables, and the database could not be read");
		return;
	}
	const kafka_probe_config *ac = &d->probe.auto_create;
	buf missing = {0}, fix = {0};
	size_t n = 0, present = 0;
	for (size_t i = 0; i < d->probe.ntopics; i++) {
		const kafka_probe_topic *t = &d->probe.topics[i];
		if (t->exists) {
			present++;
			continue;
		}
		/* the positions topic has a check of its own: an auto-created one is not compacted */
		if (d->c->kafka.exactly_once && strcmp(t->name, d->c->kafka.positions_topic) == 0)
			continue;
		buf_printf(&missing, "%s%s", n++ ? ", " : "", t->name);
		buf_printf(&fix, "%skafka-topics.sh --create --topic %s", fix.len ? "; " : "", t->name);
	}
	if (!n)
		doctor_say(d, DOCTOR_PASS, NULL, "%zu topic%s present", present, present == 1 ? "" : "s");
	else if (ac->known && strcmp(ac->value, "true") == 0)
		doctor_say(d, DOCTOR_PASS, NULL,
			   "%zu missing (%s); the brokers create topics on first use "
			   "(auto.create.topics.enable=true)",
			   n, missing.data);
	else if (ac->known)
		doctor_say(
		    d, DOCTOR_FAIL, fix.data,
		    "%zu missing (%s), and the brokers do not create topics (auto.create.topics.enable=%s)",
		    n, missing.data, ac->value);
	else
		doctor_say(d, DOCTOR_WARN, fix.data,
			   "%zu missing (%s), and whether the brokers create topics on first use is unknown "
			   "(auto.create.topics.enable: %s): create them, or make sure they do",
			   n, missing.data, ac->error);
	buf_free(&missing);
	buf_free(&fix);
}

void doctor_kafka_transactions(doctor *d)
{
	probe(d);
	if (!d->probe.reachable)
		return;
	kafka_setup k = sinks_kafka_setup(d->c);
	const char *mine = kafka_producer_setting(&k.set, "transaction.timeout.ms");
	long long producer = mine ? atoll(mine) : 60000; /* librdkafka's own default */
	sinks_kafka_setup_free(&k);
	const kafka_probe_config *max = &d->probe.transaction_max_timeout;
	char fix[256];
	snprintf(fix, sizeof(fix),
		 "set the brokers' transaction.max.timeout.ms to at least %lld, or kafka.properties' "
		 "transaction.timeout.ms to at most what they allow",
		 producer);
	if (!max->known)
		doctor_say(
		    d, DOCTOR_WARN, fix,
		    "the producer's transaction.timeout.ms is %lld; the brokers' transaction.max.timeout.ms "
		    "is unknown (%s), and a lower one refuses the transactional producer",
		    producer, max->error);
	else if (atoll(max->value) < producer)
		doctor_say(d, DOCTOR_FAIL, fix,
			   "the producer's transaction.timeout.ms %lld is above the brokers' "
			   "transaction.max.timeout.ms %s: the brokers refuse the transactional producer",
			   producer, max->value);
	else
		doctor_say(d, DOCTOR_PASS, NULL,
			   "the producer's transaction.timeout.ms %lld is within the brokers' "
			   "transaction.max.timeout.ms %s",
			   producer, max->value);
}

void doctor_kafka_positions(doctor *d)
{
	probe(d);
	if (!d->probe.reachable)
		return;
	const char *name = d->c->kafka.positions_topic;
	const kafka_probe_topic *t = NULL;
	for (size_t i = 0; i < d->probe.ntopics; i++)
		if (strcmp(d->probe.topics[i].name, name) == 0)
			t = &d->probe.topics[i];
	char fix[512];
	if (!t || !t->exists) {
		snprintf(fix, sizeof(fix),
			 "kafka-topics.sh --create --topic %s --partitions 1 --config cleanup.policy=compact",
			 name);
		doctor_say(d, DOCTOR_FAIL, fix,
			   "%s does not exist (one the brokers create on first use is not compacted, and the "
			   "position is read back from its beginning at every start)",
			   name);
		return;
	}
	snprintf(fix, sizeof(fix),
		 "kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config "
		 "cleanup.policy=compact",
		 name);
	if (!t->cleanup_policy.known)
		doctor_say(d, DOCTOR_WARN, fix, "%s exists; its cleanup.policy is unknown (%s)", name,
			   t->cleanup_policy.error);
	else if (!strstr(t->cleanup_policy.value, "compact"))
		doctor_say(
		    d, DOCTOR_FAIL, fix,
		    "%s has cleanup.policy=%s: it keeps every position record, and each start reads them "
		    "all",
		    name, t->cleanup_policy.value);
	else
		doctor_say(d, DOCTOR_PASS, NULL, "%s is compacted (cleanup.policy=%s)", name,
			   t->cleanup_policy.value);
}

/* See probe.h. A plain producer that never produces. It is not idempotent and not transactional, so it asks
 * for no producer id. It only reads metadata and describes configurations. */
#include "sinks/kafka/probe.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/log.h"
#include "decoder/base/util.h"

/* The properties a client needs to reach the same brokers as the producer. */
static bool connection_property(const char *key)
{
	static const char *const prefixes[] = {"security.", "ssl.", "sasl.", "socket.", "broker."};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (strncmp(key, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

bool kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *err, size_t errlen)
{
	char why[512];
	if (rd_kafka_conf_set(conf, key, value, why, sizeof(why)) == RD_KAFKA_CONF_OK)
		return true;
	return util_errf(err, errlen, "kafka property %s: %s", key,
			 why); /* not the value (it may be a secret) */
}

rd_kafka_conf_t *kafka_client_conf(const char *brokers, const kafka_property *properties, size_t n,
				   const char *client_id, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	bool ok = kafka_conf_set(conf, "bootstrap.servers", brokers, err, errlen) &&
		  kafka_conf_set(conf, "client.id", client_id, err, errlen);
	for (size_t i = 0; ok && i < n; i++)
		if (connection_property(properties[i].key))
			ok = kafka_conf_set(conf, properties[i].key, properties[i].value, err, errlen);
	if (!ok) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	return conf;
}

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *text)
{
	(void)rk;
	log_debug("kafka client", "level=%d facility=%s message=\"%s\"", level, fac, text);
}

static void config_error(kafka_probe_config *c, const char *why)
{
	c->known = false;
	snprintf(c->error, sizeof(c->error), "%s", why);
}

/* One DescribeConfigs request for resources of one type. The answers go through found(). */
static void describe(rd_kafka_t *rk, rd_kafka_ResourceType_t type, const char *const *names, size_t n,
		     int timeout_ms, kafka_probe *p,
		     void (*found)(kafka_probe *p, const char *resource, const char *name, const char *value),
		     void (*failed)(kafka_probe *p, const char *resource, const char *why))
{
	char why[512];
	rd_kafka_ConfigResource_t **res = util_xcalloc(n, sizeof(*res));
	for (size_t i = 0; i < n; i++)
		res[i] = rd_kafka_ConfigResource_new(type, names[i]);
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
	rd_kafka_AdminOptions_set_request_timeout(opt, timeout_ms, why, sizeof(why));
	rd_kafka_DescribeConfigs(rk, res, n, opt, q);
	rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
	const rd_kafka_DescribeConfigs_result_t *r = ev ? rd_kafka_event_DescribeConfigs_result(ev) : NULL;
	if (!ev || rd_kafka_event_error(ev) || !r) {
		snprintf(why, sizeof(why), "DescribeConfigs: %s",
			 !ev ? "no answer in time" : rd_kafka_event_error_string(ev));
		for (size_t i = 0; i < n; i++)
			failed(p, names[i], why);
	} else {
		size_t cnt, ecnt;
		const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(r, &cnt);
		for (size_t i = 0; i < cnt; i++) {
			const char *name = rd_kafka_ConfigResource_name(rs[i]);
			if (rd_kafka_ConfigResource_error(rs[i])) {
				snprintf(why, sizeof(why), "DescribeConfigs: %s",
					 rd_kafka_ConfigResource_error_string(rs[i]));
				failed(p, name, why);
				continue;
			}
			const rd_kafka_ConfigEntry_t **e = rd_kafka_ConfigResource_configs(rs[i], &ecnt);
			for (size_t k = 0; k < ecnt; k++)
				found(p, name, rd_kafka_ConfigEntry_name(e[k]),
				      rd_kafka_ConfigEntry_value(e[k]));
		}
	}
	if (ev)
		rd_kafka_event_destroy(ev);
	rd_kafka_AdminOptions_destroy(opt);
	rd_kafka_queue_destroy(q);
	rd_kafka_ConfigResource_destroy_array(res, n);
	free(res);
}

static void set_config(kafka_probe_config *c, const char *value)
{
	c->known = true;
	snprintf(c->value, sizeof(c->value), "%s", value ? value : "");
}

static void broker_found(kafka_probe *p, const char *resource, const char *name, const char *value)
{
	(void)resource;
	if (strcmp(name, "auto.create.topics.enable") == 0)
		set_config(&p->auto_create, value);
	else if (strcmp(name, "transaction.max.timeout.ms") == 0)
		set_config(&p->transaction_max_timeout, value);
}

static void broker_failed(kafka_probe *p, const char *resource, const char *why)
{
	(void)resource;
	config_error(&p->auto_create, why);
	config_error(&p->transaction_max_timeout, why);
}

static kafka_probe_topic *topic_of(kafka_probe *p, const char *name)
{
	for (size_t i = 0; i < p->ntopics; i++)
		if (strcmp(p->topics[i].name, name) == 0)
			return &p->topics[i];
	return NULL;
}

static void topic_found(kafka_probe *p, const char *resource, const char *name, const char *value)
{
	kafka_probe_topic *t = topic_of(p, resource);
	if (t && strcmp(name, "cleanup.policy") == 0)
		set_config(&t->cleanup_policy, value);
}

static void topic_failed(kafka_probe *p, const char *resource, const char *why)
{
	kafka_probe_topic *t = topic_of(p, resource);
	if (t)
		config_error(&t->cleanup_policy, why);
}

bool kafka_probe_run(const kafka_sink_settings *set, const char *const *topics, const bool *configs, size_t n,
		     int timeout_ms, kafka_probe *p, char *err, size_t errlen)
{
	char why[512];
	*p = (kafka_probe){.topics = util_xcalloc(n ? n : 1, sizeof(kafka_probe_topic)), .ntopics = n};
	for (size_t i = 0; i < n; i++) {
		p->topics[i].name = util_xstrdup(topics[i]);
		config_error(&p->topics[i].cleanup_policy, "not asked");
	}
	config_error(&p->auto_create, "not asked");
	config_error(&p->transaction_max_timeout, "not asked");
	rd_kafka_conf_t *conf =
	    kafka_client_conf(set->brokers, set->properties, set->nproperties, "cdc-doctor", err, errlen);
	if (!conf)
		return false;
	rd_kafka_conf_set_log_cb(conf, on_log);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	if (!rk) {
		rd_kafka_conf_destroy(conf);
		return util_errf(err, errlen, "cannot create a Kafka client: %s", why);
	}
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms);
	if (e) {
		snprintf(p->error, sizeof(p->error), "no metadata from %s within %d ms: %s", set->brokers,
			 timeout_ms, rd_kafka_err2str(e));
		goto out;
	}
	p->reachable = true;
	p->brokers = md->broker_cnt;
	for (int i = 0; i < md->topic_cnt; i++) {
		kafka_probe_topic *t = topic_of(p, md->topics[i].topic);
		if (t)
			t->exists = md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR;
	}
	if (md->broker_cnt > 0) {
		char id[16];
		snprintf(id, sizeof(id), "%d", md->brokers[0].id);
		const char *names[] = {id};
		describe(rk, RD_KAFKA_RESOURCE_BROKER, names, 1, timeout_ms, p, broker_found, broker_failed);
	}
	const char **asked = util_xcalloc(n ? n : 1, sizeof(char *));
	size_t nasked = 0;
	for (size_t i = 0; i < n; i++)
		if (configs[i] && p->topics[i].exists)
			asked[nasked++] = p->topics[i].name;
	if (nasked)
		describe(rk, RD_KAFKA_RESOURCE_TOPIC, asked, nasked, timeout_ms, p, topic_found,
			 topic_failed);
	free(asked);
out:
	if (md)
		rd_kafka_metadata_destroy(md);
	rd_kafka_destroy(rk);
	return true;
}

void kafka_probe_free(kafka_probe *p)
{
	for (size_t i = 0; i < p->ntopics; i++)
		free(p->topics[i].name);
	free(p->topics);
	*p = (kafka_probe){0};
}

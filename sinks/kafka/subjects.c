/* See subjects.h. The main thread learns shapes and adds schemas. The worker registers what has no id yet,
 * one request at a time. A schema's subject and text never change once it is added, so the worker reads them
 * without the lock. Its id, error and state are read and written under the worker's lock. */
#include "sinks/kafka/subjects.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "decoder/base/log.h"
#include "decoder/base/worker.h"
#include "sinks/kafka/avro.h"

/* A failed registration is asked again after 1 s, then twice as long each time, at most this. */
#define RETRY_MAX_MS 60000

typedef struct entry {
	char *subject, *schema; /* set once */
	/* under the worker's lock */
	uint32_t id;
	bool asked, busy, refused;
	char error[700];
	unsigned attempts;
	uint64_t retry_at;
	/* the main thread's */
	uint32_t known; /* id, once read */
} entry;

typedef struct shape {
	char *sub, *schema, *table;
	uint64_t schema_id;
	dbz_column *cols;
	size_t ncols;
	/* the indexes for the last topic, server and strategy asked */
	char *topic, *server;
	kafka_subject_strategy strategy;
	uint32_t key, value;
} shape;

struct kafka_subjects {
	worker *w;
	int wake_fd;
	entry **all; /* realloc'd under the lock, while entries stay where they are */
	size_t n, cap;
	shape **shapes;
	size_t nshapes, capshapes, last;
	/* Under the lock, what the worker uses. */
	kafka_registry_conf conf;
	char *compatibility;
	uint64_t failures; /* under the lock */
	/* The worker's own, the subjects whose compatibility it set or found set. */
	char **configured;
	size_t nconfigured;
	dbz_schemas sc;
	buf text, name;
};

static void conf_free(kafka_registry_conf *c)
{
	free((char *)c->url);
	free((char *)c->username);
	free((char *)c->password);
	free((char *)c->ca_file);
	free((char *)c->cert_file);
	free((char *)c->key_file);
	*c = (kafka_registry_conf){0};
}

static char *dup_or_null(const char *s)
{
	return s ? util_xstrdup(s) : NULL;
}

static void conf_copy(kafka_registry_conf *to, const kafka_registry_conf *from)
{
	*to = (kafka_registry_conf){.url = dup_or_null(from->url),
				    .username = dup_or_null(from->username),
				    .password = dup_or_null(from->password),
				    .ca_file = dup_or_null(from->ca_file),
				    .cert_file = dup_or_null(from->cert_file),
				    .key_file = dup_or_null(from->key_file),
				    .timeout_ms = from->timeout_ms};
}

/* The worker ------------------------------------------------------------------------------------- */

/* A subject cdc creates gets the configured compatibility level before its first version. A subject that has
 * versions keeps its own. Once per subject and process. */
static void configure(kafka_subjects *ks, const kafka_registry_conf *conf, const char *level,
		      const char *subject)
{
	for (size_t i = 0; i < ks->nconfigured; i++)
		if (strcmp(ks->configured[i], subject) == 0)
			return;
	char err[700];
	uint32_t id;
	int version;
	kafka_registry_status st = kafka_registry_latest(conf, subject, &id, &version, err, sizeof(err));
	if (st == REGISTRY_NOT_FOUND)
		st = kafka_registry_set_level(conf, subject, level, err, sizeof(err));
	if (st != REGISTRY_OK && st != REGISTRY_NOT_FOUND) {
		log_warn("schema registry: cannot set a new subject's compatibility; it registers under the "
			 "registry's",
			 "subject=%s compatibility=%s error=\"%s\"", subject, level, err);
		return;
	}
	ks->configured = util_xrealloc(ks->configured, (ks->nconfigured + 1) * sizeof(*ks->configured));
	ks->configured[ks->nconfigured++] = util_xstrdup(subject);
}

static void run(void *arg)
{
	kafka_subjects *ks = arg;
	for (;;) {
		worker_lock(ks->w);
		entry *e = NULL;
		for (size_t i = 0; i < ks->n && !e; i++)
			if (ks->all[i]->asked && !ks->all[i]->busy && !ks->all[i]->id)
				e = ks->all[i];
		kafka_registry_conf conf;
		conf_copy(&conf, &ks->conf);
		char *level = dup_or_null(ks->compatibility);
		if (e) {
			e->asked = false;
			e->busy = true;
		}
		worker_unlock(ks->w);
		if (!e) {
			conf_free(&conf);
			free(level);
			return;
		}
		char err[700] = "";
		uint32_t id = 0;
		if (level)
			configure(ks, &conf, level, e->subject);
		kafka_registry_status st =
		    kafka_registry_register(&conf, e->subject, e->schema, &id, err, sizeof(err));
		worker_lock(ks->w);
		e->busy = false;
		if (st == REGISTRY_OK) {
			e->id = id;
			e->error[0] = '\0';
		} else {
			snprintf(e->error, sizeof(e->error), "%s", err);
			e->refused = st == REGISTRY_REFUSED || st == REGISTRY_NOT_FOUND;
			uint64_t wait = e->attempts < 6 ? (uint64_t)1000 << e->attempts : RETRY_MAX_MS;
			e->retry_at = util_now_ms() + (wait < RETRY_MAX_MS ? wait : RETRY_MAX_MS);
			e->attempts++;
			ks->failures++;
		}
		worker_unlock(ks->w);
		conf_free(&conf);
		free(level);
		if (write(ks->wake_fd, "s", 1) < 0) {
			/* The pipe is full, so the loop has a wake-up waiting already. */
		}
	}
}

/* The sink's side ------------------------------------------------------------------------------ */

kafka_subjects *kafka_subjects_new(int wake_fd, char *err, size_t errlen)
{
	kafka_subjects *ks = util_xcalloc(1, sizeof(*ks));
	ks->wake_fd = wake_fd;
	kafka_registry_init();
	if (!(ks->w = worker_new("registers Avro schemas", run, ks, err, errlen))) {
		free(ks);
		return NULL;
	}
	return ks;
}

static void shape_free(shape *s)
{
	for (size_t i = 0; i < s->ncols; i++)
		free((char *)s->cols[i].name);
	free(s->cols);
	free(s->sub);
	free(s->schema);
	free(s->table);
	free(s->topic);
	free(s->server);
	free(s);
}

void kafka_subjects_free(kafka_subjects *ks)
{
	if (!ks)
		return;
	worker_free(ks->w);
	for (size_t i = 0; i < ks->n; i++) {
		free(ks->all[i]->subject);
		free(ks->all[i]->schema);
		free(ks->all[i]);
	}
	free(ks->all);
	for (size_t i = 0; i < ks->nshapes; i++)
		shape_free(ks->shapes[i]);
	free(ks->shapes);
	for (size_t i = 0; i < ks->nconfigured; i++)
		free(ks->configured[i]);
	free(ks->configured);
	conf_free(&ks->conf);
	free(ks->compatibility);
	sink_debezium_schemas_free(&ks->sc);
	buf_free(&ks->text);
	buf_free(&ks->name);
	free(ks);
}

void kafka_subjects_bind(kafka_subjects *ks, const kafka_registry_conf *conf, const char *compatibility)
{
	worker_lock(ks->w);
	conf_free(&ks->conf);
	conf_copy(&ks->conf, conf);
	free(ks->compatibility);
	ks->compatibility = dup_or_null(compatibility);
	/* a reload asks again at once what failed, as the registry may be fixed */
	bool again = false;
	for (size_t i = 0; i < ks->n; i++) {
		entry *e = ks->all[i];
		if (!e->id && e->error[0]) { /* busy, so once more after the request under way */
			e->asked = again = true;
			e->attempts = 0;
		}
	}
	worker_unlock(ks->w);
	if (again)
		worker_kick(ks->w);
}

/* The index of (subject, schema), added (and asked for) if new. */
static uint32_t intern(kafka_subjects *ks, const char *subject, const char *schema)
{
	for (size_t i = 0; i < ks->n; i++)
		if (strcmp(ks->all[i]->subject, subject) == 0 && strcmp(ks->all[i]->schema, schema) == 0)
			return (uint32_t)i;
	entry *e = util_xcalloc(1, sizeof(*e));
	e->subject = util_xstrdup(subject);
	e->schema = util_xstrdup(schema);
	e->asked = true;
	worker_lock(ks->w);
	if (ks->n == ks->cap) {
		ks->cap = ks->cap ? ks->cap * 2 : 16;
		ks->all = util_xrealloc(ks->all, ks->cap * sizeof(*ks->all));
	}
	ks->all[ks->n++] = e;
	worker_unlock(ks->w);
	worker_kick(ks->w);
	return (uint32_t)(ks->n - 1);
}

void kafka_subject_name(buf *out, kafka_subject_strategy strategy, const char *topic, bool key,
			const char *name)
{
	if (strategy != KAFKA_SUBJECT_RECORD) {
		buf_puts(out, topic);
		buf_putc(out, '-');
	}
	if (strategy == KAFKA_SUBJECT_TOPIC)
		buf_puts(out, key ? "key" : "value");
	else
		kafka_avro_fullname(out, name);
}

static uint32_t add(kafka_subjects *ks, const dbz_schema *schema, const char *topic, bool key,
		    kafka_subject_strategy strategy)
{
	buf_reset(&ks->text);
	kafka_avro_schema(&ks->text, schema);
	buf_putc(&ks->text, '\0');
	buf_reset(&ks->name);
	kafka_subject_name(&ks->name, strategy, topic, key, schema->name);
	buf_putc(&ks->name, '\0');
	return intern(ks, ks->name.data, ks->text.data);
}

uint32_t kafka_subjects_fixed(kafka_subjects *ks, const dbz_schema *schema, const char *topic, bool key,
			      kafka_subject_strategy strategy)
{
	return add(ks, schema, topic, key, strategy);
}

static shape *find(kafka_subjects *ks, const char *sub, uint64_t schema_id)
{
	if (ks->last < ks->nshapes && ks->shapes[ks->last]->schema_id == schema_id &&
	    strcmp(ks->shapes[ks->last]->sub, sub) == 0)
		return ks->shapes[ks->last];
	for (size_t i = 0; i < ks->nshapes; i++)
		if (ks->shapes[i]->schema_id == schema_id && strcmp(ks->shapes[i]->sub, sub) == 0) {
			ks->last = i;
			return ks->shapes[i];
		}
	return NULL;
}

void kafka_subjects_learn(kafka_subjects *ks, const char *sub, const Cdc__V1__Event *e)
{
	if (!e->table_schema || find(ks, sub, e->schema_id))
		return;
	shape *s = util_xcalloc(1, sizeof(*s));
	s->sub = util_xstrdup(sub);
	s->schema = util_xstrdup(e->schema);
	s->table = util_xstrdup(e->table);
	s->schema_id = e->schema_id;
	s->ncols = e->table_schema->n_columns;
	s->cols = util_xcalloc(s->ncols ? s->ncols : 1, sizeof(*s->cols));
	for (size_t i = 0; i < s->ncols; i++) {
		const Cdc__V1__Schema__Column *c = e->table_schema->columns[i];
		s->cols[i] = (dbz_column){util_xstrdup(c->name), c->type_oid, c->typmod, c->key};
	}
	if (ks->nshapes == ks->capshapes) {
		ks->capshapes = ks->capshapes ? ks->capshapes * 2 : 16;
		ks->shapes = util_xrealloc(ks->shapes, ks->capshapes * sizeof(*ks->shapes));
	}
	ks->shapes[ks->nshapes++] = s;
}

static bool same(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

bool kafka_subjects_shape(kafka_subjects *ks, const char *sub, uint64_t schema_id, const char *topic,
			  const char *server, kafka_subject_strategy strategy, const dbz_column **cols,
			  size_t *ncols, uint32_t *key, uint32_t *value)
{
	shape *s = find(ks, sub, schema_id);
	if (!s)
		return false;
	if (!same(s->topic, topic) || !same(s->server, server) || s->strategy != strategy) {
		free(s->topic);
		free(s->server);
		s->topic = util_xstrdup(topic);
		s->server = util_xstrdup(server);
		s->strategy = strategy;
		bool has_key = false;
		for (size_t i = 0; i < s->ncols; i++)
			has_key |= s->cols[i].key;
		s->key = has_key ? add(ks,
				       sink_debezium_table_schema(&ks->sc, server, s->schema, s->table, topic,
								  s->cols, s->ncols, true),
				       topic, true, strategy)
				 : KAFKA_NO_SCHEMA;
		s->value = add(ks,
			       sink_debezium_table_schema(&ks->sc, server, s->schema, s->table, topic,
							  s->cols, s->ncols, false),
			       topic, false, strategy);
	}
	*cols = s->cols;
	*ncols = s->ncols;
	*key = s->key;
	*value = s->value;
	return true;
}

bool kafka_subjects_latest(kafka_subjects *ks, const char *sub, const char *schema, const char *table,
			   const char *topic, const char *server, kafka_subject_strategy strategy,
			   const dbz_column **cols, size_t *ncols, uint32_t *key, uint32_t *value)
{
	for (size_t i = ks->nshapes; i-- > 0;) {
		const shape *s = ks->shapes[i];
		if (strcmp(s->sub, sub) == 0 && strcmp(s->schema, schema) == 0 &&
		    strcmp(s->table, table) == 0)
			return kafka_subjects_shape(ks, sub, s->schema_id, topic, server, strategy, cols,
						    ncols, key, value);
	}
	return false;
}

uint32_t kafka_subjects_id(kafka_subjects *ks, uint32_t i)
{
	if (i >= ks->n)
		return 0;
	entry *e = ks->all[i];
	if (e->known)
		return e->known;
	worker_lock(ks->w);
	e->known = e->id;
	bool again = !e->id && !e->asked && !e->busy && e->error[0] && util_now_ms() >= e->retry_at;
	if (again)
		e->asked = true;
	worker_unlock(ks->w);
	if (again)
		worker_kick(ks->w);
	return e->known;
}

void kafka_subjects_error(kafka_subjects *ks, uint32_t i, char *out, size_t outlen, bool *refused)
{
	worker_lock(ks->w);
	snprintf(out, outlen, "%s", i < ks->n ? ks->all[i]->error : "");
	*refused = i < ks->n && ks->all[i]->refused;
	worker_unlock(ks->w);
}

uint32_t kafka_subjects_await(kafka_subjects *ks, uint32_t i, uint64_t wait_ms)
{
	uint64_t until = util_now_ms() + wait_ms;
	for (;;) {
		uint32_t id = kafka_subjects_id(ks, i);
		if (id || i >= ks->n || util_now_ms() >= until)
			return id;
		worker_lock(ks->w);
		bool pending = (ks->all[i]->asked || ks->all[i]->busy) && !ks->all[i]->error[0];
		worker_unlock(ks->w);
		if (!pending)
			return 0; /* it failed, so the records wait and it is asked again later */
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

const char *kafka_subjects_subject(const kafka_subjects *ks, uint32_t i)
{
	return i < ks->n ? ks->all[i]->subject : "";
}

void kafka_subjects_counts(kafka_subjects *ks, uint64_t *registered, uint64_t *failures)
{
	uint64_t n = 0;
	worker_lock(ks->w);
	for (size_t i = 0; i < ks->n; i++)
		n += ks->all[i]->id != 0;
	*failures = ks->failures;
	worker_unlock(ks->w);
	*registered = n;
}

uint64_t kafka_subjects_retry_ms(kafka_subjects *ks)
{
	uint64_t now = util_now_ms(), soonest = 0;
	worker_lock(ks->w);
	for (size_t i = 0; i < ks->n; i++) {
		entry *e = ks->all[i];
		if (e->id || !e->error[0] || e->asked || e->busy)
			continue;
		uint64_t in = e->retry_at > now ? e->retry_at - now : 1;
		if (!soonest || in < soonest)
			soonest = in;
	}
	worker_unlock(ks->w);
	return soonest;
}

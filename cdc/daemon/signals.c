/* Backfills asked for from SQL. The pipeline hands on each row inserted into source.signal_table
 * where the stream delivers it (at its commit). A bad signal is logged with the reason and counted,
 * and the stream goes on. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/backfill/signal.h"
#include "cdc/daemon/sidecar.h"
#include "cdc/match/match.h"
#include "decoder/base/fsutil.h"
#include "decoder/base/json.h"
#include "decoder/base/log.h"

/* cdc/backfill/signal.c checks a signal, and it goes through the daemon's backfill requests.
 * execute-snapshot queues a backfill for each subscription that has one of its tables. stop-snapshot
 * cancels what signals started. state_dir/signals.json keeps the position of the last signal acted
 * on and the backfills signals started. So a signal the stream brings again after a crash is not
 * acted on twice. */
#define SIGNALS_FILE "signals.json"
/* A state file larger than this is not cdc's. */
#define SIGNALS_FILE_MAX (16u << 20)

static bf_now now(void)
{
	return (bf_now){.ms = util_now_ms(), .wall_ms = util_wall_ms()};
}

static void path_of(const sidecar *d, char *path, size_t size)
{
	snprintf(path, size, "%s/" SIGNALS_FILE, d->cfg->state_dir);
}

static void started_free(struct signal_started *g)
{
	free(g->signal);
	free(g->subscription);
	cfg_strlist_free(&g->tables);
}

/* Whether backfill id is queued or running. */
static bool active(const sidecar *d, const char *id)
{
	long i = backfill_find(d->bf, id);
	bf_info f;
	if (i < 0)
		return false;
	backfill_info(d->bf, (size_t)i, now(), &f);
	return f.state == BF_QUEUED || f.state == BF_RUNNING;
}

/* Writes state_dir/signals.json, leaving out the backfills that are over. */
static void save(sidecar *d)
{
	signals *g = &d->sig;
	size_t kept = 0;
	for (size_t i = 0; i < g->nstarted; i++) {
		if (active(d, g->started[i].id))
			g->started[kept++] = g->started[i];
		else
			started_free(&g->started[i]);
	}
	g->nstarted = kept;
	buf b = {0};
	char lsn[LSN_STRLEN], path[4096], err[512];
	bool first = true, fs = true;
	util_lsn_format(g->done_lsn, lsn);
	buf_putc(&b, '{');
	json_key_str(&b, &first, "lsn", lsn);
	json_key_u64(&b, &first, "tx_index", g->done_index);
	json_key(&b, &first, "backfills");
	buf_putc(&b, '[');
	for (size_t i = 0; i < g->nstarted; i++) {
		bool f = true, ft = true;
		json_sep(&b, &fs);
		buf_putc(&b, '{');
		json_key_str(&b, &f, "signal", g->started[i].signal);
		json_key_str(&b, &f, "subscription", g->started[i].subscription);
		json_key_str(&b, &f, "backfill", g->started[i].id);
		json_key(&b, &f, "tables");
		buf_putc(&b, '[');
		for (size_t k = 0; k < g->started[i].tables.n; k++) {
			json_sep(&b, &ft);
			json_str(&b, g->started[i].tables.v[k]);
		}
		buf_puts(&b, "]}");
	}
	buf_puts(&b, "]}\n");
	path_of(d, path, sizeof(path));
	if (!fsutil_replace(path, b.data, b.len, 0600, err, sizeof(err)))
		log_warn("cannot record the signals acted on: after a crash the stream may bring them again",
			 "error=\"%s\"", err);
	buf_free(&b);
}

static json_object *member(json_object *o, const char *key, json_type type)
{
	json_object *v;
	return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

/* One backfill of the file into g. False if it is malformed. */
static bool load_started(signals *g, json_object *o)
{
	json_object *sig = member(o, "signal", json_type_string),
		    *sub = member(o, "subscription", json_type_string),
		    *id = member(o, "backfill", json_type_string),
		    *tables = member(o, "tables", json_type_array);
	if (!sig || !sub || !id || !tables || json_object_get_string_len(id) != BF_ID_SIZE - 1)
		return false;
	struct signal_started s = {.signal = util_xstrdup(json_object_get_string(sig)),
				   .subscription = util_xstrdup(json_object_get_string(sub))};
	memcpy(s.id, json_object_get_string(id), BF_ID_SIZE);
	bool ok = true;
	for (size_t i = 0; ok && i < json_object_array_length(tables); i++) {
		json_object *t = json_object_array_get_idx(tables, i);
		ok = json_object_is_type(t, json_type_string);
		if (ok)
			cfg_strlist_push(&s.tables, json_object_get_string(t));
	}
	g->started = util_xrealloc(g->started, (g->nstarted + 1) * sizeof(*g->started));
	g->started[g->nstarted++] = s;
	return ok;
}

static bool load(sidecar *d, char *err, size_t errlen)
{
	char path[4096];
	path_of(d, path, sizeof(path));
	buf text = {0};
	if (!fsutil_read(path, SIGNALS_FILE_MAX, &text, err, errlen))
		return errno == ENOENT ? (err[0] = '\0', true) : false;
	json_object *root = json_tokener_parse(text.data ? text.data : "");
	json_object *lsn = root ? member(root, "lsn", json_type_string) : NULL;
	json_object *idx = root ? member(root, "tx_index", json_type_int) : NULL;
	json_object *list = root ? member(root, "backfills", json_type_array) : NULL;
	signals *g = &d->sig;
	bool ok = lsn && idx && list && util_lsn_parse(json_object_get_string(lsn), &g->done_lsn) &&
		  json_object_get_int64(idx) >= 0 && json_object_get_int64(idx) <= UINT32_MAX;
	g->done_index = ok ? (uint32_t)json_object_get_int64(idx) : 0;
	g->done = ok;
	for (size_t i = 0; ok && i < json_object_array_length(list); i++)
		ok = load_started(g, json_object_array_get_idx(list, i));
	json_object_put(root);
	buf_free(&text);
	return ok ? true
		  : util_errf(err, errlen,
			      "%s: not a file of signals cdc acted on (move it away to start afresh)", path);
}

/* The quoted "schema"."table" a backfill request names for one of a signal's tables. */
static char *request_table(const char *name)
{
	char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
	buf q = {0};
	if (match_table_split(name, schema, table)) {
		backfill_sql_quote_ident(&q, schema);
		buf_putc(&q, '.');
		backfill_sql_quote_ident(&q, table);
	}
	return q.data ? q.data : util_xstrdup(name);
}

/* Whether subscription s has the signal's table name (one of its patterns matches it). */
static bool has_table(const cfg_subscription *s, const char *name)
{
	char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
	if (!match_table_split(name, schema, table))
		return false;
	for (size_t i = 0; i < s->tables.n; i++)
		if (match_table(s->tables.v[i], schema, table))
			return true;
	return false;
}

/* Whether the signal lets subscription s take part, by naming no subscription, or s. */
static bool names_sub(const bf_signal *sg, const char *sub)
{
	for (size_t i = 0; i < sg->nsubscriptions; i++)
		if (strcmp(sg->subscriptions[i], sub) == 0)
			return true;
	return sg->nsubscriptions == 0;
}

/* Why the signal cannot be acted on as a whole, or NULL. It may name a subscription that does not
 * exist, or a table none of its subscriptions has. */
static const char *unusable(const sidecar *d, const bf_signal *sg, char *why, size_t whylen)
{
	for (size_t i = 0; i < sg->nsubscriptions; i++)
		if (!cfg_find_subscription(d->cfg, sg->subscriptions[i])) {
			util_errf(why, whylen, "data: subscriptions: no such subscription: %s",
				  sg->subscriptions[i]);
			return why;
		}
	for (size_t t = 0; t < sg->ntables; t++) {
		bool any = false;
		for (size_t i = 0; i < d->cfg->nsubs && !any; i++)
			any = names_sub(sg, d->cfg->subs[i].name) &&
			      has_table(&d->cfg->subs[i], sg->tables[t].name);
		if (!any) {
			util_errf(why, whylen, "table %s is not one of the tables of %s", sg->tables[t].name,
				  sg->nsubscriptions ? "the subscriptions it names" : "any subscription");
			return why;
		}
	}
	return NULL;
}

/* Queues one backfill of s for the signal's tables t[0..n) (all with the same where). Appends it to
 * the outcome. */
static void start(sidecar *d, const bf_signal *sg, const cfg_subscription *s, const bf_signal_table *const *t,
		  size_t n, buf *out, bool *first)
{
	char **names = util_xcalloc(n, sizeof(*names)), id[BF_ID_SIZE], err[512];
	for (size_t i = 0; i < n; i++)
		names[i] = request_table(t[i]->name);
	bf_request_body req = {.tables = names, .ntables = n, .where = t[0]->where};
	bool queued = daemon_backfills_queue(d, s, &req, false, id, err, sizeof(err));
	bool f = true;
	json_sep(out, first);
	buf_putc(out, '{');
	json_key_str(out, &f, "subscription", s->name);
	json_key_str(out, &f, "backfill", queued ? id : NULL);
	json_key_str(out, &f, "error", queued ? NULL : err);
	buf_putc(out, '}');
	if (queued) {
		struct signal_started g = {.signal = util_xstrdup(sg->id),
					   .subscription = util_xstrdup(s->name)};
		memcpy(g.id, id, BF_ID_SIZE);
		for (size_t i = 0; i < n; i++)
			cfg_strlist_push(&g.tables, t[i]->name);
		d->sig.started =
		    util_xrealloc(d->sig.started, (d->sig.nstarted + 1) * sizeof(*d->sig.started));
		d->sig.started[d->sig.nstarted++] = g;
		d->sig.backfills_started++;
		log_info("signal starts a backfill", "signal=%s subscription=%s backfill=%s", sg->id, s->name,
			 id);
	} else
		log_warn("signal cannot start a backfill", "signal=%s subscription=%s error=\"%s\"", sg->id,
			 s->name, err);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

/* execute-snapshot. For each subscription it lets take part, one backfill of the tables it has
 * without a condition, and one per table with a condition of its own. */
static void execute(sidecar *d, const bf_signal *sg, buf *out)
{
	const bf_signal_table **plain = util_xcalloc(sg->ntables, sizeof(*plain));
	bool first = true;
	for (size_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *s = &d->cfg->subs[i];
		size_t n = 0;
		if (!names_sub(sg, s->name))
			continue;
		for (size_t t = 0; t < sg->ntables; t++) {
			const bf_signal_table *tb = &sg->tables[t];
			if (!has_table(s, tb->name))
				continue;
			if (tb->where)
				start(d, sg, s, &tb, 1, out, &first);
			else
				plain[n++] = tb;
		}
		if (n)
			start(d, sg, s, plain, n, out, &first);
	}
	free(plain);
}

/* Whether a backfill a signal started reads one of the stop signal's tables (any, if none named). */
static bool reads_one(const struct signal_started *g, const bf_signal *sg)
{
	for (size_t t = 0; t < sg->ntables; t++) {
		char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
		if (!match_table_split(sg->tables[t].name, schema, table))
			continue;
		for (size_t k = 0; k < g->tables.n; k++)
			if (match_table(g->tables.v[k], schema, table))
				return true;
	}
	return sg->ntables == 0;
}

/* stop-snapshot cancels the backfills signals started that it names (all, without names). */
static void stop(sidecar *d, const bf_signal *sg, buf *out)
{
	bool first = true;
	for (size_t i = 0; i < d->sig.nstarted; i++) {
		struct signal_started *g = &d->sig.started[i];
		char err[512];
		if (!names_sub(sg, g->subscription) || !reads_one(g, sg) || !active(d, g->id))
			continue;
		bool cancelled = backfill_cancel(d->bf, g->subscription, g->id, now(), err, sizeof(err));
		bool f = true;
		json_sep(out, &first);
		buf_putc(out, '{');
		json_key_str(out, &f, "subscription", g->subscription);
		json_key_str(out, &f, "backfill", g->id);
		json_key_str(out, &f, "error", cancelled ? NULL : err);
		buf_putc(out, '}');
		if (cancelled) {
			d->sig.backfills_stopped++;
			log_info("signal stops a backfill",
				 "signal=%s subscription=%s backfill=%s started_by=%s", sg->id,
				 g->subscription, g->id, g->signal);
		}
	}
}

/* The last signal as /status shows it, {"id", "type", "lsn", "error", "backfills": [...]}. */
static void outcome(sidecar *d, const pipeline_signal *s, const char *error, const buf *backfills)
{
	buf *o = &d->sig.last;
	bool first = true;
	char lsn[LSN_STRLEN];
	util_lsn_format(s->commit_lsn, lsn);
	buf_reset(o);
	buf_putc(o, '{');
	json_key(o, &first, "id");
	if (s->id)
		json_string(o, s->id, s->id_len);
	else
		json_null(o);
	json_key(o, &first, "type");
	if (s->type)
		json_string(o, s->type, s->type_len);
	else
		json_null(o);
	json_key_str(o, &first, "lsn", lsn);
	json_key_str(o, &first, "error", error);
	json_key(o, &first, "backfills");
	buf_putc(o, '[');
	if (backfills->len)
		buf_append(o, backfills->data, backfills->len);
	buf_puts(o, "]}");
}

/* The pipeline's hook, for one signal row at its commit. */
static void on_signal(void *ctx, const pipeline_signal *s)
{
	sidecar *d = ctx;
	signals *g = &d->sig;
	char err[512], lsn[LSN_STRLEN];
	if (g->done &&
	    (s->commit_lsn < g->done_lsn || (s->commit_lsn == g->done_lsn && s->tx_index <= g->done_index)))
		return; /* acted on before a crash, and the stream brings it again */
	g->received++;
	util_lsn_format(s->commit_lsn, lsn);
	bf_signal sg;
	buf backfills = {0};
	const char *why = NULL;
	bool parsed = backfill_signal_parse(s->id, s->id_len, s->type, s->type_len, s->data, s->data_len, &sg,
					    err, sizeof(err));
	if (!parsed)
		why = err;
	else if (sg.kind == BF_SIGNAL_EXECUTE && (why = unusable(d, &sg, err, sizeof(err))))
		;
	else if (sg.kind == BF_SIGNAL_EXECUTE)
		execute(d, &sg, &backfills);
	else
		stop(d, &sg, &backfills);
	if (why) {
		g->refused++;
		log_warn("signal refused; the stream goes on", "lsn=%s id=\"%.*s\" error=\"%s\"", lsn,
			 s->id && s->id_len <= BF_SIGNAL_MAX_ID ? (int)s->id_len : 0, s->id ? s->id : "",
			 why);
	} else if (sg.kind == BF_SIGNAL_STOP && !backfills.len)
		log_info("signal stops no backfill: none that signals started is running", "lsn=%s signal=%s",
			 lsn, sg.id);
	outcome(d, s, why, &backfills);
	g->done = true;
	g->done_lsn = s->commit_lsn;
	g->done_index = s->tx_index;
	save(d);
	if (parsed)
		backfill_signal_free(&sg);
	buf_free(&backfills);
	daemon_figures_publish(d, true); /* /status shows it now, GET /backfills too */
}

bool daemon_signals_init(sidecar *d)
{
	const char *table = d->cfg->source.signal_table;
	char err[1024] = "";
	if (!table)
		return true;
	if (!load(d, err, sizeof(err))) {
		log_error("cannot use the signals' state", "error=\"%s\"", err);
		return false;
	}
	pipeline_set_signals(d->pipe, table, on_signal, d);
	return true;
}

void daemon_signals_free(sidecar *d)
{
	for (size_t i = 0; i < d->sig.nstarted; i++)
		started_free(&d->sig.started[i]);
	free(d->sig.started);
	buf_free(&d->sig.last);
	d->sig = (signals){0};
}

void daemon_signals_report(const sidecar *d, report *r)
{
	const signals *g = &d->sig;
	r->signals.table = d->cfg->source.signal_table;
	r->signals.received = g->received;
	r->signals.refused = g->refused;
	r->signals.started = g->backfills_started;
	r->signals.stopped = g->backfills_stopped;
	r->signals.last_json = g->last.len ? g->last.data : NULL;
}

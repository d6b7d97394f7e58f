/* reload.c: changes of the subscriptions while `cdc run` runs: SIGHUP reads the file again, PUT and
 * DELETE /subscriptions/NAME change the overlay kept in state_dir. Each is checked at once and
 * applied at the next transaction boundary (pipeline_between_txns), answering with the LSN it
 * applies from. Which other settings need a restart comes from the config's key tables. */
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/notify.h"
#include "cdc/daemon/sidecar.h"
#include "cdc/status/report.h"
#include "decoder/base/json.h"
#include "decoder/base/log.h"
#include "sinks/socket/socket_sink.h"

bool reload_init(sidecar *d)
{
	const cfg *c = d->cfg;
	buf errors = {0};
	if (!(d->rl.overlay = cfg_overlay_load(c->state_dir, &errors)) ||
	    !cfg_overlay_apply(d->rl.overlay, d->cfg, &errors)) {
		log_error("the subscriptions changed over the status socket cannot be used", "errors=\"%s\"",
			  errors.data);
		buf_free(&errors);
		return false;
	}
	buf_free(&errors);
	if (d->rl.overlay->nput || d->rl.overlay->deleted.n)
		log_info("subscriptions changed over the status socket apply",
			 "file=%s/" CFG_OVERLAY_FILE " changed=%zu deleted=%zu", c->state_dir,
			 d->rl.overlay->nput, d->rl.overlay->deleted.n);
	return true;
}

void reload_free(sidecar *d)
{
	for (size_t i = 0; i < d->rl.nchanges; i++)
		cfg_subscription_free(d->rl.changes[i].put);
	free(d->rl.changes);
	cfg_overlay_free(d->rl.overlay);
	d->rl = (reloads){0};
}

void sidecar_answer_error(sidecar *d, status_request *req, unsigned code, const char *error,
			  const char *details)
{
	buf b = {0};
	buf_puts(&b, "{\"error\":");
	json_string(&b, error, strlen(error));
	if (details) {
		buf_puts(&b, ",\"details\":[");
		for (const char *line = details; *line;) {
			const char *nl = strchr(line, '\n');
			size_t n = nl ? (size_t)(nl - line) : strlen(line);
			if (line != details)
				buf_putc(&b, ',');
			json_string(&b, line, n);
			line += n + (nl != NULL);
		}
		buf_putc(&b, ']');
	}
	buf_puts(&b, "}\n");
	status_answer(d->status, req, code, b.data);
	buf_free(&b);
}

/* Which warning a key that changed but needs a restart (cfg_restart_keys) calls for. */
enum { RESTART_SOURCE = 1, RESTART_KAFKA = 2, RESTART_OTHER = 4 };
static void note_restart(const char *key, void *arg)
{
	unsigned *restart = arg;
	if (strncmp(key, "kafka.", 6) == 0)
		*restart |= RESTART_KAFKA;
	else if (strncmp(key, "source.", 7) == 0 || strcmp(key, "state_dir") == 0)
		*restart |= RESTART_SOURCE;
	else
		*restart |= RESTART_OTHER;
}

/* The configuration file with the subscriptions of ov laid over it, and its rules. NULL with the
 * problems in errors and the HTTP status a change waiting for it gets: 500 when the file itself is
 * broken, 400 when the subscriptions are. */
static cfg *load_config(sidecar *d, const cfg_overlay *ov, rules **r, buf *errors, unsigned *code)
{
	cfg *next = cfg_load(d->cfg_path, errors);
	*code = 500;
	if (!next)
		return NULL;
	*code = 400;
	if (cfg_overlay_apply(ov, next, errors) &&
	    (*r = rules_new(next->subs, next->nsubs, d->err, sizeof(d->err))))
		return next;
	if (!errors->len)
		buf_printf(errors, "%s\n", d->err);
	cfg_free(next);
	return NULL;
}

/* Answers the changes that waited for the reload: 200 with the LSN they apply from, or the error. */
static void settle_changes(sidecar *d, unsigned code, const char *error, const char *details)
{
	char lsn[LSN_STRLEN];
	lsn_format(pipeline_boundary(d->pipe), lsn);
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		status_request *req = d->rl.changes[i].req;
		cfg_subscription_free(d->rl.changes[i].put);
		if (code != 200) {
			sidecar_answer_error(d, req, code, error, details);
			continue;
		}
		log_info(req->put ? "subscription changed" : "subscription removed",
			 "subscription=%s applied_lsn=%s", req->name, lsn);
		buf b = {0};
		buf_puts(&b, "{\"subscription\":");
		json_string(&b, req->name, strlen(req->name));
		buf_printf(&b, ",\"action\":\"%s\",\"applied_lsn\":\"%s\"", req->put ? "put" : "delete", lsn);
		const cfg_subscription *now = cfg_find_subscription(d->cfg, req->name);
		if (req->put && now) {
			buf_puts(&b, ",\"config\":");
			report_subscription_json(now, &b);
		}
		buf_puts(&b, "}\n");
		status_answer(d->status, req, 200, b.data);
		buf_free(&b);
	}
	free(d->rl.changes);
	d->rl.changes = NULL;
	d->rl.nchanges = 0;
}

/* The overlay with the changes waiting laid over it (their parsed subscriptions move into it). */
static cfg_overlay *overlay_with_changes(sidecar *d)
{
	cfg_overlay *ov = cfg_overlay_copy(d->rl.overlay);
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		if (d->rl.changes[i].put) {
			cfg_overlay_put(ov, d->rl.changes[i].put);
			d->rl.changes[i].put = NULL;
		} else {
			cfg_overlay_delete(ov, d->rl.changes[i].req->name);
		}
	}
	return ov;
}

/* The file is read again and the overlay (with the changes waiting) laid over it; subscriptions
 * are swapped now, at a transaction boundary. */
static bool apply_reload(sidecar *d)
{
	d->rl.pending = false;
	cfg_overlay *ov = overlay_with_changes(d);
	buf errors = {0};
	rules *r = NULL;
	unsigned code;
	cfg *next = load_config(d, ov, &r, &errors, &code);
	if (next && d->rl.nchanges && !cfg_overlay_save(ov, d->cfg->state_dir, d->err, sizeof(d->err))) {
		buf_printf(&errors, "%s\n", d->err);
		code = 500;
		rules_free(r);
		cfg_free(next);
		next = NULL;
	}
	if (!next) {
		log_error("reload refused; keeping the running configuration", "errors=\"%s\"", errors.data);
		if (d->rl.hup)
			notify_reloaded("reload refused; the running configuration is kept (see the log)");
		d->rl.hup = false;
		settle_changes(
		    d, code,
		    code == 500
			? "cannot apply: the configuration file or state_dir has a problem; fix it and retry"
			: "invalid subscription",
		    errors.data);
		buf_free(&errors);
		cfg_overlay_free(ov);
		return false;
	}
	buf_free(&errors);
	unsigned restart = 0;
	cfg_restart_keys(d->cfg, next, note_restart, &restart);
	if (restart & RESTART_SOURCE)
		log_warn("source and state_dir changes take effect at the next restart", "config=%s",
			 d->cfg_path);
	if (d->sinks.k[SINKS_KAFKA] && (restart & RESTART_KAFKA))
		log_warn("kafka brokers and properties take effect at the next restart", "config=%s",
			 d->cfg_path);
	if (restart & RESTART_OTHER)
		log_warn("status, subscribers and log changes take effect at the next restart", "config=%s",
			 d->cfg_path);
	cfg_overlay_free(d->rl.overlay);
	d->rl.overlay = ov;
	cfg *old = d->cfg;
	d->cfg = next;
	/* The pipeline carries its counts over by name: old's names are still valid here. */
	bool bound = sidecar_bind(d, r);
	if (bound)
		backfills_reloaded(d, old);
	cfg_free(old);
	if (!bound) {
		settle_changes(d, 500, "cannot start a sink the new configuration needs", d->err);
		sidecar_fail(d, 1, "cannot start a sink the new configuration needs");
		return false;
	}
	/* A deleted socket subscription's spool goes with it. */
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		const char *name = d->rl.changes[i].req->name;
		if (!d->rl.changes[i].req->put && d->sinks.k[SINKS_SOCKET] &&
		    !cfg_find_subscription(d->cfg, name) &&
		    !socket_sink_forget(d->sinks.k[SINKS_SOCKET], name, d->err, sizeof(d->err)))
			log_warn("cannot remove the spool of a deleted subscription",
				 "subscription=%s error=\"%s\"", name, d->err);
	}
	figures_publish(d, true); /* GET answers with the new subscriptions before the change is answered */
	settle_changes(d, 200, NULL, NULL);
	log_info("reloaded subscriptions", "subscriptions=%zu", d->cfg->nsubs);
	if (d->rl.hup)
		notify_reloaded("reloaded: %zu subscriptions", d->cfg->nsubs);
	d->rl.hup = false;
	return true;
}

/* Not while a streamed or prepared transaction is held: its records were rendered for the
 * subscriptions in force when its changes arrived. */
void reload_maybe(sidecar *d)
{
	if (d->rl.pending && pipeline_between_txns(d->pipe))
		apply_reload(d);
}

void reload_request(sidecar *d)
{
	notify_reloading();
	d->rl.pending = d->rl.hup = true;
	reload_maybe(d);
	if (d->rl.pending)
		log_info("reload waits for the transactions in progress", "config=%s", d->cfg_path);
}

static bool pending_put(const sidecar *d, const char *name)
{
	bool put = false;
	for (size_t i = 0; i < d->rl.nchanges; i++)
		if (strcmp(d->rl.changes[i].req->name, name) == 0)
			put = d->rl.changes[i].put != NULL;
	return put;
}

void reload_on_control(void *ctx, status_request *req)
{
	sidecar *d = ctx;
	cfg_subscription *put = NULL;
	if (req->route == STATUS_ROUTE_BACKFILL || req->route == STATUS_ROUTE_BACKFILL_CANCEL) {
		backfills_on_control(d, req);
		return;
	}
	if (req->put) {
		buf errors = {0};
		if (!(put = cfg_parse_subscription(d->cfg, req->name, req->body, req->body_len, &errors))) {
			sidecar_answer_error(d, req, 400, "invalid subscription", errors.data);
			buf_free(&errors);
			return;
		}
		buf_free(&errors);
	} else if (!cfg_find_subscription(d->cfg, req->name) && !pending_put(d, req->name)) {
		sidecar_answer_error(d, req, 404, "no such subscription", NULL);
		return;
	}
	d->rl.changes = xrealloc(d->rl.changes, (d->rl.nchanges + 1) * sizeof(*d->rl.changes));
	d->rl.changes[d->rl.nchanges++] = (struct live_change){req, put};
	d->rl.pending = true;
	reload_maybe(d);
}

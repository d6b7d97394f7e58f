/* Changes of the subscriptions while `cdc run` runs. SIGHUP reads the file again. PUT and DELETE
 * /subscriptions/NAME change the overlay kept in state_dir. Which other settings need a restart comes
 * from the config's key tables. */
#include <stdlib.h>
#include <string.h>

#include "cdc/daemon/notify.h"
#include "cdc/daemon/setup.h"
#include "cdc/daemon/sidecar.h"
#include "cdc/status/report.h"
#include "decoder/base/json.h"
#include "decoder/base/log.h"

/* Each change is checked at once. Then the subscriptions it adds or changes are checked against the
 * catalog, read on the source's ordinary connection without blocking, or at the next connect. The
 * change applies at the next transaction boundary (pipeline_between_txns), and the answer gives the
 * LSN it applies from. A subscription of the overlay that stops working (the database or the file
 * changed under it) is set aside. It is never a reason not to start. */

/* One log line per problem of lines (each ends with a newline). A line of the log is one event. */
static void log_problems(const char *lines)
{
	for (const char *p = lines; p && *p;) {
		size_t len = strcspn(p, "\n");
		log_error("configuration problem", "error=\"%.*s\"", (int)len, p);
		p += len + (p[len] == '\n');
	}
}

/* ---- subscriptions set aside ---- */

/* The lines of problems as one reason, "; " between them. */
static void aside_add(aside_list *l, const char *name, const char *problems)
{
	buf r = {0};
	for (const char *p = problems; *p;) {
		size_t len = strcspn(p, "\n");
		buf_printf(&r, "%s%.*s", r.len ? "; " : "", (int)len, p);
		p += len + (p[len] == '\n');
	}
	l->v = util_xrealloc(l->v, (l->n + 1) * sizeof(*l->v));
	l->v[l->n++] = (struct aside){util_xstrdup(name), util_xstrdup(r.data ? r.data : "")};
	buf_free(&r);
}

static void aside_free(aside_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].name);
		free(l->v[i].reason);
	}
	free(l->v);
	*l = (aside_list){0};
}

/* names[i] is set aside for the i-th line of lines (cfg_overlay_apply's left_out and errors). names
 * is emptied. */
static void aside_lines(aside_list *l, cfg_strlist *names, const char *lines)
{
	const char *p = lines;
	for (size_t i = 0; i < names->n && p && *p; i++) {
		size_t len = strcspn(p, "\n");
		buf one = {0};
		buf_append(&one, p, len);
		aside_add(l, names->v[i], one.data);
		buf_free(&one);
		p += len + (p[len] == '\n');
	}
	cfg_strlist_free(names);
}

static const struct aside *aside_find(const aside_list *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i].name, name) == 0)
			return &l->v[i];
	return NULL;
}

/* Logs what is newly set aside and what is back, then next replaces d's list. */
static void aside_swap(sidecar *d, aside_list *next)
{
	for (size_t i = 0; i < next->n; i++)
		if (!aside_find(&d->rl.aside, next->v[i].name))
			log_error(
			    "a subscription changed over the status socket is set aside; cdc runs without "
			    "it until a PUT corrects it or a DELETE removes it",
			    "subscription=%s error=\"%s\"", next->v[i].name, next->v[i].reason);
	for (size_t i = 0; i < d->rl.aside.n; i++)
		if (!aside_find(next, d->rl.aside.v[i].name))
			log_info("a subscription set aside is no longer", "subscription=%s",
				 d->rl.aside.v[i].name);
	aside_free(&d->rl.aside);
	d->rl.aside = *next;
	*next = (aside_list){0};
}

static bool in_overlay(const cfg_overlay *o, const char *name)
{
	for (size_t i = 0; i < o->nput; i++)
		if (strcmp(o->put[i].name, name) == 0)
			return true;
	return false;
}

/* The subscriptions named in names leave c (an overlay of deletes). */
static void remove_subs(cfg *c, const aside_list *names)
{
	cfg_overlay del = {0};
	for (size_t i = 0; i < names->n; i++) {
		del.deleted.v = util_xrealloc(del.deleted.v, (del.deleted.n + 1) * sizeof(char *));
		del.deleted.v[del.deleted.n++] = names->v[i].name;
	}
	cfg_overlay_apply(&del, c, NULL, NULL);
	free(del.deleted.v);
}

bool daemon_reload_init(sidecar *d)
{
	const cfg *c = d->cfg;
	buf errors = {0};
	if (!(d->rl.overlay = cfg_overlay_load(c->state_dir, &errors))) {
		log_error("the subscriptions changed over the status socket cannot be used",
			  "file=%s/" CFG_OVERLAY_FILE, c->state_dir);
		log_problems(errors.data);
		buf_free(&errors);
		return false;
	}
	cfg_strlist out = {0};
	aside_list aside = {0};
	cfg_overlay_apply(d->rl.overlay, d->cfg, &out, &errors);
	aside_lines(&aside, &out, errors.data);
	aside_swap(d, &aside);
	buf_free(&errors);
	if (d->rl.overlay->nput || d->rl.overlay->deleted.n)
		log_info("subscriptions changed over the status socket apply",
			 "file=%s/" CFG_OVERLAY_FILE " changed=%zu deleted=%zu", c->state_dir,
			 d->rl.overlay->nput, d->rl.overlay->deleted.n);
	return true;
}

void daemon_reload_free(sidecar *d)
{
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		cfg_subscription_free(d->rl.changes[i].put);
		buf_free(&d->rl.changes[i].warnings);
	}
	free(d->rl.changes);
	cfg_overlay_free(d->rl.overlay);
	aside_free(&d->rl.aside);
	source_catalog_free(d->rl.catalog);
	free(d->rl.catalog);
	d->rl = (reloads){0};
}

static void drop_catalog(sidecar *d)
{
	source_catalog_free(d->rl.catalog);
	free(d->rl.catalog);
	d->rl.catalog = NULL;
}

/* Which warning a key that changed but needs a restart (cfg_restart_keys) calls for. It is the
 * source's, a sink module's section's (bit RESTART_SINK << its index), or the others'. */
enum { RESTART_SOURCE = 1, RESTART_OTHER = 2, RESTART_SINK = 4 };
static void note_restart(const char *key, void *arg)
{
	unsigned *restart = arg;
	for (size_t m = 0; sink_modules[m]; m++) {
		const char *section = sink_modules[m]->section;
		if (section && strncmp(key, section, strlen(section)) == 0 && key[strlen(section)] == '.') {
			*restart |= RESTART_SINK << m;
			return;
		}
	}
	if (strncmp(key, "source.", 7) == 0 || strcmp(key, "state_dir") == 0)
		*restart |= RESTART_SOURCE;
	else
		*restart |= RESTART_OTHER;
}

/* Secrets a reload applies without a restart, since their files were read again. source.password
 * applies at the next connection to the database. status.token and status.tcp_read apply at once, and
 * status.listen's TLS files for its new connections. The Kafka sink takes its SASL credentials when it
 * is bound. */
static void apply_secrets(sidecar *d)
{
	source_set_password(d->conn.src, d->cfg->source.password);
	if (d->bf_reader)
		backfill_reader_password(d->bf_reader, d->cfg->source.password);
	if (d->status)
		status_reload(d->status, d->cfg);
}

/* The configuration file with the subscriptions of ov laid over it. Those it cannot take are set
 * aside, into aside. NULL with the problems in errors and the HTTP status a change waiting for it
 * gets, which is 500 when the file itself is broken. */
static cfg *load_config(sidecar *d, const cfg_overlay *ov, aside_list *aside, buf *errors, unsigned *code)
{
	cfg *next = cfg_load(d->cfg_path, errors);
	*code = 500;
	if (!next)
		return NULL;
	cfg_strlist out = {0};
	buf why = {0};
	cfg_overlay_apply(ov, next, &out, &why);
	aside_lines(aside, &out, why.data);
	buf_free(&why);
	return next;
}

/* Answers the changes that waited for the reload, with 200 and the LSN they apply from, or the error. */
static void settle_changes(sidecar *d, unsigned code, const char *error, const char *details)
{
	char lsn[LSN_STRLEN];
	util_lsn_format(pipeline_boundary(d->pipe), lsn);
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		struct live_change *ch = &d->rl.changes[i];
		status_request *req = ch->req;
		cfg_subscription_free(ch->put);
		if (code != 200) {
			daemon_sidecar_answer_error(d, req, code, error, details);
			buf_free(&ch->warnings);
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
			status_report_subscription_json(now, &b);
		}
		if (ch->warnings.len) {
			buf_puts(&b, ",\"warnings\":[");
			for (const char *p = ch->warnings.data; *p;) {
				size_t len = strcspn(p, "\n");
				if (p != ch->warnings.data)
					buf_putc(&b, ',');
				json_string(&b, p, len);
				p += len + (p[len] == '\n');
			}
			buf_putc(&b, ']');
		}
		buf_puts(&b, "}\n");
		status_answer(d->status, req, 200, b.data);
		buf_free(&b);
		buf_free(&ch->warnings);
	}
	free(d->rl.changes);
	d->rl.changes = NULL;
	d->rl.nchanges = 0;
}

/* The overlay with the changes waiting laid over it (copies of their subscriptions). */
static cfg_overlay *overlay_with_changes(sidecar *d)
{
	cfg_overlay *ov = cfg_overlay_copy(d->rl.overlay);
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		if (d->rl.changes[i].put)
			cfg_overlay_put(ov, cfg_subscription_copy(d->rl.changes[i].put));
		else
			cfg_overlay_delete(ov, d->rl.changes[i].req->name);
	}
	return ov;
}

/* The change waiting that puts a subscription of that name, or NULL. The last one counts. */
static struct live_change *put_of(sidecar *d, const char *name)
{
	struct live_change *put = NULL;
	for (size_t i = 0; i < d->rl.nchanges; i++)
		if (strcmp(d->rl.changes[i].req->name, name) == 0)
			put = d->rl.changes[i].put ? &d->rl.changes[i] : NULL;
	return put;
}

/* Refuses the change ch (400 with its problems) and forgets it. The reload goes on without it. */
static void refuse_change(sidecar *d, struct live_change *ch, const char *problems)
{
	log_warn("subscription refused", "subscription=%s", ch->req->name);
	log_problems(problems);
	daemon_sidecar_answer_error(d, ch->req, 400, "invalid subscription", problems);
	cfg_subscription_free(ch->put);
	buf_free(&ch->warnings);
	size_t i = (size_t)(ch - d->rl.changes);
	memmove(ch, ch + 1, (d->rl.nchanges - i - 1) * sizeof(*ch));
	d->rl.nchanges--;
}

/* Whether s is what the running configuration has under its name. */
static bool running_as(const sidecar *d, const cfg_subscription *s)
{
	const cfg_subscription *now = cfg_find_subscription(d->cfg, s->name);
	if (!now)
		return false;
	buf a = {0}, b = {0};
	cfg_subscription_json(s, &a);
	cfg_subscription_json(now, &b);
	bool same = a.len == b.len && memcmp(a.data, b.data, a.len) == 0;
	buf_free(&a);
	buf_free(&b);
	return same;
}

/* The catalog for the reload under way. True once d->rl.catalog holds one. While streaming it is read
 * on the source's ordinary connection without blocking (asked again from the loop's tick). Otherwise
 * the next connect brings it. False with *failed and d->err when reading it failed. */
static bool catalog_ready(sidecar *d, bool *failed)
{
	*failed = false;
	if (!d->rl.catalog && !d->conn.streaming) {
		if (!d->rl.waits_for_db)
			log_info("reload waits for the database: the subscriptions it adds or changes are "
				 "checked against its tables first",
				 "config=%s", d->cfg_path);
		d->rl.waits_for_db = true;
		return false;
	}
	d->rl.waits_for_db = false;
	if (d->rl.catalog)
		return true;
	*failed = !source_read_catalog(d->conn.src, d->rl.pending_ms, &d->rl.catalog, d->err, sizeof(d->err));
	return d->rl.catalog != NULL;
}

/* Checks the subscriptions of next that the running configuration does not have as they are. A PUT's
 * that fails is refused, and *again says the reload is built anew without it. One of the overlay's
 * that fails is set aside (into aside). One of the file's fails the reload (problems). */
static void check_new(sidecar *d, cfg *next, const cfg_overlay *ov, aside_list *aside, buf *problems,
		      bool *again)
{
	*again = false;
	for (size_t i = 0; i < next->nsubs && !*again; i++) {
		const cfg_subscription *s = &next->subs[i];
		if (running_as(d, s))
			continue;
		buf one = {0}, warnings = {0};
		struct live_change *ch = put_of(d, s->name);
		bool ok = source_catalog_check_exists(d->rl.catalog, s, &one);
		ok &= source_catalog_check(d->rl.catalog, s, next->source.publication, &one, &warnings);
		for (const char *p = warnings.data; p && *p; p += strcspn(p, "\n") + 1)
			log_warn("subscription warning", "warning=\"%.*s\"", (int)strcspn(p, "\n"), p);
		if (ch && ok)
			buf_append(&ch->warnings, warnings.data, warnings.len);
		if (ok) {
		} else if (ch) {
			refuse_change(d, ch, one.data);
			*again = true;
		} else if (in_overlay(ov, s->name)) {
			aside_add(aside, s->name, one.data);
		} else {
			buf_append(problems, one.data, one.len);
		}
		buf_free(&one);
		buf_free(&warnings);
	}
}

/* Refuses the reload. The running configuration stays, and the changes waiting get code. */
static void refuse(sidecar *d, unsigned code, const char *errors)
{
	log_error("reload refused; keeping the running configuration", "config=%s", d->cfg_path);
	log_problems(errors);
	if (d->rl.hup)
		daemon_notify_reloaded("reload refused; the running configuration is kept (see the log)");
	d->rl.hup = false;
	settle_changes(
	    d, code,
	    code == 500 ? "cannot apply: the configuration file or state_dir has a problem; fix it and retry"
	    : code == 503 ? "cannot apply: the subscriptions cannot be checked against the database"
			  : "invalid subscription",
	    errors);
	drop_catalog(d);
}

/* Builds the next configuration, checks what it adds or changes, and swaps it in at this transaction
 * boundary. It asks for the catalog first if it must, and the reload then stays pending. */
static bool apply_reload(sidecar *d)
{
	d->rl.pending = false;
	cfg_overlay *ov;
	cfg *next;
	aside_list aside;
	buf errors;
	for (;;) {
		ov = overlay_with_changes(d);
		aside = (aside_list){0};
		errors = (buf){0};
		unsigned code;
		bool again = false, failed;
		if (!(next = load_config(d, ov, &aside, &errors, &code))) {
			refuse(d, code, errors.data);
			goto fail;
		}
		bool need = false;
		for (size_t i = 0; i < next->nsubs && !need; i++)
			need = !running_as(d, &next->subs[i]);
		if (need && !catalog_ready(d, &failed)) {
			if (failed) {
				buf_printf(&errors, "%s\n", d->err);
				refuse(d, 503, errors.data);
			} else {
				d->rl.pending = true;
			}
			goto fail;
		}
		if (need)
			check_new(d, next, ov, &aside, &errors, &again);
		if (!again)
			break;
		cfg_free(next);
		cfg_overlay_free(ov);
		aside_free(&aside);
		buf_free(&errors);
	}
	if (errors.len) {
		refuse(d, 500, errors.data);
		goto fail;
	}
	remove_subs(next, &aside);
	rules *r = daemon_setup_rules(next, d->err, sizeof(d->err));
	if (!r) {
		buf_printf(&errors, "%s\n", d->err);
		refuse(d, 400, errors.data);
		goto fail;
	}
	if (d->rl.nchanges && !cfg_overlay_save(ov, d->cfg->state_dir, d->err, sizeof(d->err))) {
		buf_printf(&errors, "%s\n", d->err);
		match_rules_free(r);
		refuse(d, 500, errors.data);
		goto fail;
	}
	buf_free(&errors);
	drop_catalog(d);
	unsigned restart = 0;
	cfg_restart_keys(d->cfg, next, note_restart, &restart);
	if (restart & RESTART_SOURCE)
		log_warn("source and state_dir changes take effect at the next restart", "config=%s",
			 d->cfg_path);
	/* a sink made after this reload takes its section as it is now */
	for (size_t m = 0; sink_modules[m]; m++)
		if (d->sinks.k[m] && (restart & (RESTART_SINK << m)))
			log_warn("sink settings take effect at the next restart", "section=%s config=%s",
				 sink_modules[m]->section, d->cfg_path);
	if (restart & RESTART_OTHER)
		log_warn("status and log changes take effect at the next restart", "config=%s", d->cfg_path);
	cfg_overlay_free(d->rl.overlay);
	d->rl.overlay = ov;
	aside_swap(d, &aside);
	cfg *old = d->cfg;
	d->cfg = next;
	apply_secrets(d);
	/* The pipeline carries its counts over by name. old's names are still valid here. */
	bool bound = daemon_sidecar_bind(d, r);
	if (bound)
		daemon_backfills_reloaded(d, old);
	cfg_free(old);
	if (!bound) {
		settle_changes(d, 500, "cannot start a sink the new configuration needs", d->err);
		daemon_sidecar_fail(d, 1, "cannot start a sink the new configuration needs");
		return false;
	}
	/* What a sink keeps of a deleted subscription (a socket subscription's spool) goes with it. */
	for (size_t i = 0; i < d->rl.nchanges; i++) {
		const char *name = d->rl.changes[i].req->name;
		if (!d->rl.changes[i].req->put && !cfg_find_subscription(d->cfg, name) &&
		    !aside_find(&d->rl.aside, name) &&
		    !daemon_sink_set_forget(&d->sinks, name, d->err, sizeof(d->err)))
			log_warn("cannot remove what a sink keeps of a deleted subscription",
				 "subscription=%s error=\"%s\"", name, d->err);
	}
	d->conn.publication_ms = 0; /* and the tables created since join the publication now */
	daemon_figures_publish(
	    d, true); /* GET answers with the new subscriptions before the change is answered */
	settle_changes(d, 200, NULL, NULL);
	log_info("reloaded subscriptions", "subscriptions=%zu", d->cfg->nsubs);
	if (d->rl.hup)
		daemon_notify_reloaded("reloaded: %zu subscriptions", d->cfg->nsubs);
	d->rl.hup = false;
	return true;
fail:
	cfg_free(next);
	cfg_overlay_free(ov);
	aside_free(&aside);
	buf_free(&errors);
	return false;
}

bool daemon_reload_connected(sidecar *d, catalog *cat, bool first)
{
	buf problems = {0};
	aside_list out = {0};
	for (size_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *s = &d->cfg->subs[i];
		buf one = {0}, warnings = {0};
		/* A table named that is gone fails a start. At a reconnect it may have been dropped
		 * meanwhile, and the subscription goes on with the others. */
		bool named = source_catalog_check_exists(cat, s, first ? &one : &warnings);
		/* A snapshot that cannot run fails as a backfill (GET /backfills). The subscription
		 * itself works. */
		if (!source_catalog_check(cat, s, d->cfg->source.publication, &one, &warnings) ||
		    (first && !named)) {
			if (in_overlay(d->rl.overlay, s->name))
				aside_add(&out, s->name, one.data);
			else
				buf_append(&problems, one.data, one.len);
		}
		for (const char *p = warnings.data; first && p && *p; p += strcspn(p, "\n") + 1)
			log_warn("subscription warning", "warning=\"%.*s\"", (int)strcspn(p, "\n"), p);
		buf_free(&one);
		buf_free(&warnings);
	}
	bool ok = !problems.len;
	if (!ok) {
		/* the file's own, so the operator fixes the table or the file (one problem, the first) */
		util_errf(d->err, sizeof(d->err), "%.*s", (int)strcspn(problems.data, "\n"), problems.data);
		log_problems(problems.data);
	} else if (out.n) {
		/* at a connect the stream starts again, which is a transaction boundary */
		remove_subs(d->cfg, &out);
		aside_list all = {0};
		for (size_t i = 0; i < d->rl.aside.n; i++)
			aside_add(&all, d->rl.aside.v[i].name, d->rl.aside.v[i].reason);
		for (size_t i = 0; i < out.n; i++)
			aside_add(&all, out.v[i].name, out.v[i].reason);
		aside_swap(d, &all);
		rules *r = daemon_setup_rules(d->cfg, d->err, sizeof(d->err));
		ok = r && daemon_sidecar_bind(d, r);
		for (size_t i = 0; ok && i < out.n; i++)
			daemon_backfills_removed(d, out.v[i].name);
	}
	aside_free(&out);
	buf_free(&problems);
	/* a reload waiting for the database is checked against this catalog (its contents move) */
	if (ok && d->rl.pending && !d->rl.catalog) {
		d->rl.catalog = util_xmalloc(sizeof(*cat));
		*d->rl.catalog = *cat;
		*cat = (catalog){0};
	}
	source_catalog_free(cat);
	return ok;
}

/* Not while a streamed or prepared transaction is held. Its records were rendered for the
 * subscriptions in force when its changes arrived. */
void daemon_reload_maybe(sidecar *d)
{
	/* waiting for the database, whose next connect brings the catalog (daemon_reload_connected) */
	bool waits = d->rl.waits_for_db && !d->conn.streaming && !d->rl.catalog;
	if (d->rl.pending && !waits && pipeline_between_txns(d->pipe))
		apply_reload(d);
}

static void make_pending(sidecar *d)
{
	if (!d->rl.pending)
		d->rl.pending_ms = util_now_ms();
	d->rl.pending = true;
}

void daemon_reload_request(sidecar *d)
{
	daemon_notify_reloading();
	make_pending(d);
	d->rl.hup = true;
	daemon_reload_maybe(d);
	if (d->rl.pending && !pipeline_between_txns(d->pipe))
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

void daemon_reload_on_control(void *ctx, status_request *req)
{
	sidecar *d = ctx;
	cfg_subscription *put = NULL;
	if (req->route == STATUS_ROUTE_BACKFILL || req->route == STATUS_ROUTE_BACKFILL_CANCEL) {
		daemon_backfills_on_control(d, req);
		return;
	}
	if (req->put) {
		buf errors = {0};
		if (!(put = cfg_parse_subscription(d->cfg, req->name, req->body, req->body_len, &errors))) {
			daemon_sidecar_answer_error(d, req, 400, "invalid subscription", errors.data);
			buf_free(&errors);
			return;
		}
		buf_free(&errors);
	} else if (!cfg_find_subscription(d->cfg, req->name) && !pending_put(d, req->name) &&
		   !aside_find(&d->rl.aside, req->name)) {
		buf msg = {0};
		buf_printf(&msg, "no such subscription: %s", req->name);
		daemon_sidecar_answer_error(d, req, 404, msg.data, NULL);
		buf_free(&msg);
		return;
	}
	d->rl.changes = util_xrealloc(d->rl.changes, (d->rl.nchanges + 1) * sizeof(*d->rl.changes));
	d->rl.changes[d->rl.nchanges++] = (struct live_change){req, put, {0}};
	make_pending(d);
	daemon_reload_maybe(d);
}

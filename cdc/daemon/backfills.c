/* `cdc run`'s side of backfills (cdc/backfill). The stream's side is the pipeline's. */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cdc/backfill/request.h"
#include "cdc/daemon/sidecar.h"
#include "cdc/match/match.h"
#include "decoder/base/fsutil.h"
#include "decoder/base/json.h"
#include "decoder/base/log.h"

/* It keeps the set of backfills in state_dir and their reader connection. It finds the
 * `snapshot: true` subscriptions seen for the first time. It answers the control requests (POST
 * /subscriptions/NAME/backfill, DELETE .../backfill/ID). It hands the durable position on, and
 * publishes GET /backfills. */
#define BACKFILL_FILE "backfills.json"
/* A request whose checks the database has not answered after this long is refused. */
#define CHECK_TIMEOUT_MS 10000

static bf_settings settings_of(const cfg *c)
{
	return (bf_settings){.chunk_ms = c->backfill.chunk_time_ms,
			     .min_rows = c->backfill.min_rows,
			     .max_rows = c->backfill.max_rows,
			     .max_bytes = c->backfill.max_bytes,
			     .rate = c->backfill.rate_limit,
			     .tables = c->backfill.tables,
			     .parallel = c->backfill.parallel,
			     .publication = c->source.publication};
}

static bf_now now(void)
{
	return (bf_now){.ms = util_now_ms(), .wall_ms = util_wall_ms()};
}

bool daemon_backfills_queue(sidecar *d, const cfg_subscription *s, const bf_request_body *req, bool snapshot,
			    char id[BF_ID_SIZE], char *err, size_t errlen)
{
	bf_request r = {.subscription = s->name,
			.sub_tables = (const char *const *)s->tables.v,
			.nsub_tables = s->tables.n,
			.tables = req ? (const char *const *)req->tables : NULL,
			.ntables = req ? req->ntables : 0,
			.sub_where = s->where,
			.where = req ? req->where : NULL,
			.snapshot = snapshot};
	if (!backfill_add(d->bf, &r, now(), id, err, errlen))
		return false;
	daemon_sidecar_post(d, d->conn.handled_lsn);
	log_info("backfill queued", "subscription=%s backfill=%s snapshot=%s", s->name, id,
		 snapshot ? "true" : "false");
	backfill_reader_kick(d->bf_reader);
	return true;
}

bool daemon_backfills_resync(sidecar *d, buf *ids, char *err, size_t errlen)
{
	bool first = true;
	buf_putc(ids, '[');
	for (size_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *s = &d->cfg->subs[i];
		char id[BF_ID_SIZE];
		if (!daemon_backfills_queue(d, s, NULL, false, id, err, errlen))
			return false;
		bool f = true;
		json_sep(ids, &first);
		buf_putc(ids, '{');
		json_key_str(ids, &f, "subscription", s->name);
		json_key_str(ids, &f, "backfill", id);
		buf_putc(ids, '}');
	}
	buf_putc(ids, ']');
	return true;
}

/* `snapshot: true` subscriptions without their snapshot yet, seen for the first time. */
static void snapshots(sidecar *d)
{
	for (size_t i = 0; i < d->cfg->nsubs; i++) {
		const cfg_subscription *s = &d->cfg->subs[i];
		char id[BF_ID_SIZE];
		if (s->snapshot && !backfill_has_snapshot(d->bf, s->name) &&
		    !daemon_backfills_queue(d, s, NULL, true, id, d->err, sizeof(d->err)))
			log_warn("cannot queue the subscription's snapshot", "subscription=%s error=\"%s\"",
				 s->name, d->err);
	}
}

/* Answers {"id":...,"subscription":...,"state":...}. GET /backfills is published first, so a client
 * that asks for it right after the answer finds the backfill there. */
static void answer_backfill(sidecar *d, status_request *req, const char *id, const char *what)
{
	buf b = {0};
	bool first = true;
	buf_putc(&b, '{');
	json_key_str(&b, &first, "id", id);
	json_key_str(&b, &first, "subscription", req->name);
	json_key_str(&b, &first, "state", what);
	buf_puts(&b, "}\n");
	status_answer(d->status, req, 200, b.data);
	buf_free(&b);
}

/* A request waiting for its backfill's checks, answered if they are done. They may also have
 * expired, when the database did not answer in time. The answer is 200, or 4xx/503 with the reason,
 * and the backfill is then forgotten as if never asked. False while it still waits. */
static bool settle(sidecar *d, const struct bf_waiting *w, bool expired)
{
	const char *why;
	bf_verdict v = backfill_verdict(d->bf, w->id, &why);
	if (v == BF_CHECKING && !expired)
		return false;
	if (v == BF_PASSED) {
		daemon_backfills_publish(d);
		answer_backfill(d, w->req, w->id, "queued");
		return true;
	}
	buf msg = {0};
	if (v == BF_REFUSED)
		buf_printf(&msg, "%s", why ? why : "its checks failed");
	else
		buf_printf(&msg,
			   "the database did not answer the backfill's checks within %d s (see cdc's log for "
			   "the connection's errors); nothing was queued, try again",
			   CHECK_TIMEOUT_MS / 1000);
	log_warn("backfill refused", "subscription=%s backfill=%s error=\"%s\"", w->req->name, w->id,
		 msg.data);
	backfill_drop(d->bf, w->id);
	daemon_sidecar_post(d, d->conn.handled_lsn);
	daemon_backfills_publish(d);
	daemon_sidecar_answer_error(d, w->req, v == BF_REFUSED ? 400 : 503, msg.data, NULL);
	buf_free(&msg);
	return true;
}

static void settle_all(sidecar *d, bool expire, uint64_t now)
{
	size_t kept = 0;
	for (size_t i = 0; i < d->nbf_waiting; i++) {
		struct bf_waiting *w = &d->bf_waiting[i];
		if (!settle(d, w, expire && now - w->since_ms >= CHECK_TIMEOUT_MS))
			d->bf_waiting[kept++] = *w;
	}
	d->nbf_waiting = kept;
}

/* The reader handed a result on, so checks may have ended. */
static void checks_answered(void *ctx)
{
	settle_all(ctx, false, 0);
}

void daemon_backfills_tick(sidecar *d, uint64_t now)
{
	if (d->nbf_waiting)
		settle_all(d, true, now);
}

/* The pipeline's hooks (pipeline_backfills), the stream's side of the backfills. */
static void stream_change(void *ctx, const bf_change *c)
{
	if (backfill_watching(ctx, c->schema, c->table))
		backfill_on_change(ctx, c);
}

static bool stream_replay(void *ctx, const void *data, size_t len, uint32_t xid)
{
	bf_change c;
	/* Only a backfill in progress can watch a table. Without one, there is nothing to decode. */
	if (!backfill_active(ctx))
		return true;
	if (!backfill_change_decode(data, len, &c))
		return false;
	c.xid = xid;
	stream_change(ctx, &c);
	backfill_change_free(&c);
	return true;
}

static bool stream_watermark(void *ctx, const char *content, size_t len, uint64_t lsn, bf_emit_fn emit,
			     void *emit_ctx, char *err, size_t errlen)
{
	return backfill_on_message(ctx, content, len, lsn, now(), emit, emit_ctx, err, errlen);
}

bool daemon_backfills_init(sidecar *d)
{
	uint64_t seed;
	if (getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	buf path = {0};
	buf_printf(&path, "%s/" BACKFILL_FILE, d->cfg->state_dir);
	d->bf_path = path.data;
	bf_settings s = settings_of(d->cfg);
	d->bf = backfill_set_new(&s, d->bf_path, seed);
	if (!backfill_set_load(d->bf, d->err, sizeof(d->err))) {
		log_error("cannot use the backfills' state", "error=\"%s\"", d->err);
		return false;
	}
	d->bf_reader = backfill_reader_new(d->base, d->cfg->source.dsn, d->bf, checks_answered, d);
	backfill_reader_password(d->bf_reader, d->cfg->source.password);
	pipeline_set_backfills(d->pipe, &(pipeline_backfills){.ctx = d->bf,
							      .change = stream_change,
							      .hold = backfill_change_encode,
							      .replay = stream_replay,
							      .watermark = stream_watermark,
							      .next_read = backfill_batch_next});
	snapshots(d);
	return true;
}

void daemon_backfills_free(sidecar *d)
{
	/* What changed since the last position recorded (the writer's thread is done by now). */
	buf left = {0};
	char err[512];
	if (d->bf && backfill_state(d->bf, &left) &&
	    !fsutil_replace(d->bf_path, left.data, left.len, 0600, err, sizeof(err)))
		log_warn("cannot record the backfills at the stop", "error=\"%s\"", err);
	buf_free(&left);
	free(d->bf_waiting); /* status_free answers their requests */
	d->bf_waiting = NULL;
	d->nbf_waiting = 0;
	backfill_reader_free(d->bf_reader);
	backfill_set_free(d->bf);
	free(d->bf_path);
	d->bf_reader = NULL;
	d->bf = NULL;
	d->bf_path = NULL;
}

void daemon_backfills_reloaded(sidecar *d, const cfg *old)
{
	bf_settings s = settings_of(d->cfg);
	backfill_set_settings(d->bf, &s);
	for (size_t i = 0; i < old->nsubs; i++)
		if (!cfg_find_subscription(d->cfg, old->subs[i].name))
			daemon_backfills_removed(d, old->subs[i].name);
	snapshots(d);
}

void daemon_backfills_tables_added(sidecar *d, const cfg_strlist *added)
{
	for (size_t i = 0; i + 1 < added->n; i += 2) {
		buf pattern = {0};
		backfill_sql_quote_ident(&pattern, added->v[i]);
		buf_putc(&pattern, '.');
		backfill_sql_quote_ident(&pattern, added->v[i + 1]);
		bf_request_body req = {.tables = &pattern.data, .ntables = 1};
		for (size_t k = 0; k < d->cfg->nsubs; k++) {
			const cfg_subscription *s = &d->cfg->subs[k];
			bool has = false;
			for (size_t p = 0; p < s->tables.n && !has; p++)
				has = match_table(s->tables.v[p], added->v[i], added->v[i + 1]);
			char id[BF_ID_SIZE];
			if (s->snapshot && has &&
			    !daemon_backfills_queue(d, s, &req, false, id, d->err, sizeof(d->err)))
				log_warn("cannot queue the backfill of a table added to the publication",
					 "subscription=%s table=%s error=\"%s\"", s->name, pattern.data,
					 d->err);
		}
		buf_free(&pattern);
	}
}

void daemon_backfills_removed(sidecar *d, const char *name)
{
	backfill_forget(d->bf, name);
	daemon_sidecar_post(d, d->conn.handled_lsn);
}

void daemon_backfills_delivered(sidecar *d, uint64_t flushed)
{
	bool active = backfill_active(d->bf);
	backfill_delivered(d->bf, flushed, now());
	/* GET /backfills follows a running backfill's durable chunks now, not at the next figures
	 * (up to a second later). So `cdc backfill --wait` sees it done when it is. */
	if (active)
		daemon_backfills_publish(d);
	backfill_reader_kick(d->bf_reader);
}

const char *daemon_backfills_state(sidecar *d, buf *out)
{
	return d->bf && backfill_state(d->bf, out) ? d->bf_path : NULL;
}

bool daemon_backfills_draining(const sidecar *d)
{
	return d->bf && backfill_draining(d->bf);
}

void daemon_backfills_restart(sidecar *d)
{
	backfill_restart(d->bf);
	daemon_backfills_follow(d);
	backfill_reader_kick(d->bf_reader);
}

void daemon_backfills_follow(sidecar *d)
{
	const char *primary = d->cfg->source.primary_dsn;
	bool standby = source_server_info(d->conn.src)->in_recovery && primary && *primary;
	backfill_reader_use(d->bf_reader, standby ? primary : d->cfg->source.dsn);
}

void daemon_backfills_kick(sidecar *d)
{
	backfill_reader_kick(d->bf_reader);
}

void daemon_backfills_publish(sidecar *d)
{
	report_backfill *rows = NULL;
	buf b = {0};
	daemon_backfills_report(d, &rows, &b);
	free(rows);
	buf_free(&b);
}

size_t daemon_backfills_report(sidecar *d, report_backfill **rows, buf *json)
{
	*rows = NULL;
	if (!d->bf)
		return 0;
	bf_now t = now();
	size_t n = 0;
	for (size_t i = 0; i < backfill_count(d->bf); i++) {
		bf_info f;
		backfill_info(d->bf, i, t, &f);
		*rows = util_xrealloc(*rows, (n + f.ntables + 1) * sizeof(**rows));
		for (size_t k = 0; k < f.ntables; k++) {
			bf_table_info ti;
			backfill_table_info(d->bf, i, k, t, &ti);
			(*rows)[n++] = (report_backfill){.subscription = f.subscription,
							 .id = f.id,
							 .schema = ti.schema,
							 .table = ti.table,
							 .state = backfill_state_name(ti.state),
							 .read = ti.p.read,
							 .delivered = ti.p.delivered,
							 .dropped = ti.p.dropped,
							 .filtered = ti.p.filtered,
							 .estimate = ti.p.estimate};
		}
	}
	backfill_json(d->bf, json, NULL, t);
	buf_putc(json, '\n');
	status_publish_backfills(d->status, json->data);
	json->data[--json->len] = '\0';
	return n;
}

void daemon_backfills_on_control(sidecar *d, status_request *req)
{
	char err[512], id[BF_ID_SIZE];
	const cfg_subscription *s = cfg_find_subscription(d->cfg, req->name);
	if (!s) {
		buf msg = {0};
		buf_printf(&msg, "no such subscription: %s", req->name);
		daemon_sidecar_answer_error(d, req, 404, msg.data, NULL);
		buf_free(&msg);
		return;
	}
	if (req->route == STATUS_ROUTE_BACKFILL_CANCEL) {
		if (!backfill_cancel(d->bf, req->name, req->id, now(), err, sizeof(err))) {
			daemon_sidecar_answer_error(d, req, 404, err, NULL);
			return;
		}
		daemon_sidecar_post(d, d->conn.handled_lsn);
		log_info("backfill cancelled", "subscription=%s backfill=%s", req->name, req->id);
		daemon_backfills_publish(d);
		answer_backfill(d, req, req->id, "cancelled");
	} else {
		bf_request_body body;
		if (!backfill_request_parse(req->body, req->body_len, &body, err, sizeof(err))) {
			daemon_sidecar_answer_error(d, req, 400, err, NULL);
			return;
		}
		bool ok = daemon_backfills_queue(d, s, &body, false, id, err, sizeof(err));
		backfill_request_free(&body);
		if (!ok) {
			daemon_sidecar_answer_error(d, req, 400, err, NULL);
			return;
		}
		/* Answered once the checks ran on the backfills' connection (settle), so that a request
		 * that cannot succeed is refused instead of queued to fail. */
		d->bf_waiting = util_xrealloc(d->bf_waiting, (d->nbf_waiting + 1) * sizeof(*d->bf_waiting));
		struct bf_waiting *w = &d->bf_waiting[d->nbf_waiting++];
		*w = (struct bf_waiting){.req = req, .since_ms = util_now_ms()};
		memcpy(w->id, id, BF_ID_SIZE);
		settle_all(d, false, 0);
	}
}

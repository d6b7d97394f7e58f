/* reader.c: the backfills' connections; see reader.h. One per lane, each in a state of its own:
 * down (a retry timer may be set), connecting (PQconnectPoll), idle, busy (a statement sent, its
 * result awaited; a COPY's rows handed on as they arrive). */
#include "cdc/backfill/reader.h"

#include <event2/event.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/log.h"

#define RETRY_MIN_MS 1000
#define RETRY_MAX_MS 30000

enum rstate { R_DOWN, R_CONNECTING, R_IDLE, R_BUSY };

typedef struct rconn {
	struct bf_reader *r;
	unsigned lane;
	PGconn *conn;
	enum rstate state;
	struct event *ev_io, *ev_timer;
	bool ev_write; /* what ev_io waits for */
	uint64_t ticket, backoff_ms;
	bool copying; /* in a COPY's rows */
	bool chunk;   /* the statement is a chunk's, whose snapshot comes as a row before its COPY */
	PGresult *res;
} rconn;

struct bf_reader {
	struct event_base *base;
	char *dsn;
	char *password; /* source.password; NULL: none */
	bf_set *set;
	rconn *c;
	unsigned n;
	void (*answered)(void *ctx);
	void *ctx;
};

static bf_now now(void)
{
	return (bf_now){.ms = util_now_ms(), .wall_ms = util_wall_ms()};
}

static void on_io(evutil_socket_t fd, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);

bf_reader *backfill_reader_new(struct event_base *base, const char *dsn, bf_set *set,
			       void (*answered)(void *ctx), void *ctx)
{
	bf_reader *r = util_xcalloc(1, sizeof(*r));
	r->base = base;
	r->answered = answered;
	r->ctx = ctx;
	r->dsn = util_xstrdup(dsn);
	r->set = set;
	r->n = backfill_lanes(set);
	r->c = util_xcalloc(r->n, sizeof(*r->c));
	for (unsigned i = 0; i < r->n; i++) {
		r->c[i] = (rconn){.r = r, .lane = i, .backoff_ms = RETRY_MIN_MS};
		r->c[i].ev_timer = evtimer_new(base, on_timer, &r->c[i]);
	}
	return r;
}

static void drop_connection(rconn *c)
{
	if (c->ev_io) {
		event_free(c->ev_io);
		c->ev_io = NULL;
	}
	PQclear(c->res);
	c->res = NULL;
	PQfinish(c->conn);
	c->conn = NULL;
	c->state = R_DOWN;
	c->copying = false;
}

void backfill_reader_free(bf_reader *r)
{
	if (!r)
		return;
	for (unsigned i = 0; i < r->n; i++) {
		drop_connection(&r->c[i]);
		event_free(r->c[i].ev_timer);
	}
	free(r->c);
	backfill_reader_password(r, NULL);
	free(r->dsn);
	free(r);
}

static void arm_timer(rconn *c, uint64_t ms)
{
	struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(c->ev_timer, &tv);
}

/* The io event for the connection's socket: read, or write while connecting or flushing. */
static void watch(rconn *c, bool write)
{
	/* the socket may change while connecting (another host of the connection string) */
	if (c->ev_io && (c->ev_write != write || event_get_fd(c->ev_io) != PQsocket(c->conn))) {
		event_free(c->ev_io);
		c->ev_io = NULL;
	}
	if (!c->ev_io)
		c->ev_io = event_new(c->r->base, PQsocket(c->conn), write ? EV_WRITE : EV_READ, on_io, c);
	c->ev_write = write;
	event_add(c->ev_io, NULL);
}

/* The connection failed or dropped: a statement in flight is done again on the next one. */
static void lost(rconn *c, const char *why)
{
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", why && *why ? why : "connection lost");
	msg[strcspn(msg, "\n")] = '\0';
	log_warn("backfill connection lost", "lane=%u error=\"%s\" retry_ms=%llu", c->lane, msg,
		 (unsigned long long)c->backoff_ms);
	if (c->state == R_BUSY)
		backfill_error(c->r->set, c->lane, c->ticket, msg, true, false, now());
	drop_connection(c);
	arm_timer(c, c->backoff_ms);
	c->backoff_ms = c->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : c->backoff_ms * 2;
}

static void connect_start(rconn *c)
{
	/* the password first: the connection string's own, expanded from dbname, overrides it */
	const bf_reader *r = c->r;
	const char *keys[] = {"password", "dbname", "application_name", NULL};
	const char *vals[] = {r->password, r->dsn, "cdc backfill", NULL};
	c->conn = PQconnectStartParams(r->password ? keys : keys + 1, r->password ? vals : vals + 1, 1);
	if (!c->conn || PQstatus(c->conn) == CONNECTION_BAD || PQsetnonblocking(c->conn, 1) != 0) {
		lost(c, c->conn ? PQerrorMessage(c->conn) : "out of memory");
		return;
	}
	c->state = R_CONNECTING;
	watch(c, true);
}

/* The lane's next statement, if one is due; else the timer for when one is. */
static void run_next(rconn *c)
{
	bf_stmt s;
	uint64_t wake;
	bf_now t = now();
	if (!backfill_next(c->r->set, c->lane, t, &s, &wake)) {
		if (wake)
			arm_timer(c, wake > t.ms ? wake - t.ms : 0);
		return;
	}
	/* A COPY cannot take parameters: it goes as a simple query. */
	int sent = s.kind == BF_STMT_CHUNK
		       ? PQsendQuery(c->conn, s.sql)
		       : PQsendQueryParams(c->conn, s.sql, s.nparams, NULL, s.params, NULL, NULL, 0);
	c->ticket = s.ticket;
	c->chunk = s.kind == BF_STMT_CHUNK;
	c->state = R_BUSY;
	if (!sent) {
		lost(c, PQerrorMessage(c->conn));
		return;
	}
	int f = PQflush(c->conn);
	if (f < 0)
		lost(c, PQerrorMessage(c->conn));
	else
		watch(c, f == 1);
}

static void kick_one(rconn *c)
{
	switch (c->state) {
	case R_DOWN:
		if (backfill_active(c->r->set) && !evtimer_pending(c->ev_timer, NULL))
			connect_start(c);
		break;
	case R_IDLE:
		if (!backfill_active(c->r->set)) {
			/* Nothing left to do: no connection held open for nothing. */
			drop_connection(c);
			break;
		}
		evtimer_del(c->ev_timer);
		run_next(c);
		break;
	default:
		break;
	}
}

void backfill_reader_kick(bf_reader *r)
{
	for (unsigned i = 0; i < r->n; i++)
		kick_one(&r->c[i]);
}

void backfill_reader_use(bf_reader *r, const char *dsn)
{
	if (strcmp(r->dsn, dsn) == 0)
		return;
	free(r->dsn);
	r->dsn = util_xstrdup(dsn);
	for (unsigned i = 0; i < r->n; i++) {
		rconn *c = &r->c[i];
		if (c->state == R_DOWN)
			continue;
		if (c->state == R_BUSY)
			backfill_error(r->set, c->lane, c->ticket, "the source moved to another server", true,
				       false, now());
		drop_connection(c);
	}
	backfill_reader_kick(r);
}

void backfill_reader_password(bf_reader *r, const char *password)
{
	if (r->password)
		explicit_bzero(r->password, strlen(r->password));
	free(r->password);
	r->password = password ? util_xstrdup(password) : NULL;
}

bool backfill_reader_idle(const bf_reader *r)
{
	for (unsigned i = 0; i < r->n; i++) {
		const rconn *c = &r->c[i];
		if (!(c->state == R_IDLE || (c->state == R_DOWN && !backfill_active(r->set))))
			return false;
	}
	return true;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	kick_one(arg);
}

static void poll_connect(rconn *c)
{
	switch (PQconnectPoll(c->conn)) {
	case PGRES_POLLING_READING:
		watch(c, false);
		break;
	case PGRES_POLLING_WRITING:
		watch(c, true);
		break;
	case PGRES_POLLING_OK:
		c->state = R_IDLE;
		c->backoff_ms = RETRY_MIN_MS;
		watch(c, false);
		kick_one(c);
		break;
	default:
		lost(c, PQerrorMessage(c->conn));
		break;
	}
}

/* Adapts a PGresult to the backfill's view of rows. */
static const char *res_value(void *ctx, int row, int col)
{
	return PQgetvalue(ctx, row, col);
}

static int res_length(void *ctx, int row, int col)
{
	return PQgetlength(ctx, row, col);
}

static bool res_isnull(void *ctx, int row, int col)
{
	return PQgetisnull(ctx, row, col) != 0;
}

/* A COPY's rows as far as they have arrived, at most COPY_ROWS_AT_ONCE of them (the event loop
 * turns between, so the stream waits less): false while more are to come, *yielded when some are
 * here already. */
#define COPY_ROWS_AT_ONCE 250
static bool copy_rows(rconn *c, bool *yielded)
{
	for (int i = 0;; i++) {
		if (i == COPY_ROWS_AT_ONCE) {
			*yielded = true;
			return false;
		}
		char *row;
		int n = PQgetCopyData(c->conn, &row, 1);
		if (n > 0) {
			backfill_copy_row(c->r->set, c->lane, c->ticket, row, (size_t)n);
			PQfreemem(row);
			continue;
		}
		if (n == 0)
			return false;
		c->copying = false; /* -1: done; -2: an error, which PQgetResult tells */
		return true;
	}
}

/* The statement's result has come whole: handed to the backfills. */
static void finish(rconn *c)
{
	PGresult *done = c->res;
	c->res = NULL;
	c->state = R_IDLE;
	bf_now t = now();
	ExecStatusType st = done ? PQresultStatus(done) : PGRES_FATAL_ERROR;
	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
		bf_result br = {PQntuples(done), PQnfields(done), done, res_value, res_length, res_isnull};
		backfill_result(c->r->set, c->lane, c->ticket, &br, t);
	} else {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", done ? PQresultErrorMessage(done) : PQerrorMessage(c->conn));
		msg[strcspn(msg, "\n")] = '\0';
		const char *state = done ? PQresultErrorField(done, PG_DIAG_SQLSTATE) : NULL;
		/* an undefined column or table: the table changed under the statement */
		bool changed = state && (strcmp(state, "42703") == 0 || strcmp(state, "42P01") == 0);
		bool gone = PQstatus(c->conn) == CONNECTION_BAD;
		backfill_error(c->r->set, c->lane, c->ticket, msg, gone, changed, t);
		if (gone) {
			PQclear(done);
			c->state = R_IDLE;
			lost(c, msg);
			return;
		}
	}
	PQclear(done);
	c->r->answered(c->r->ctx);
	backfill_reader_kick(c->r);
}

/* The statement's results: for a COPY its rows, then one PGresult, then NULL. */
static void take_results(rconn *c)
{
	bool yielded = false;
	for (;;) {
		if (c->copying && !copy_rows(c, &yielded))
			break;
		if (PQisBusy(c->conn))
			break;
		PGresult *res = PQgetResult(c->conn);
		if (!res) {
			finish(c);
			return;
		}
		if (PQresultStatus(res) == PGRES_COPY_OUT) {
			c->copying = true;
			PQclear(res);
			continue;
		}
		if (c->chunk && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		    PQnfields(res) == 1) {
			backfill_copy_snapshot(c->r->set, c->lane, c->ticket, PQgetvalue(res, 0, 0),
					       (size_t)PQgetlength(res, 0, 0));
			PQclear(res);
			continue;
		}
		PQclear(c->res);
		c->res = res;
	}
	watch(c, false);
	if (yielded)
		event_active(c->ev_io, EV_READ, 1);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
	rconn *c = arg;
	(void)fd;
	if (c->state == R_CONNECTING) {
		poll_connect(c);
		return;
	}
	if (what & EV_WRITE) {
		int f = PQflush(c->conn);
		if (f < 0)
			return lost(c, PQerrorMessage(c->conn));
		watch(c, f == 1);
		return;
	}
	if (!PQconsumeInput(c->conn))
		return lost(c, PQerrorMessage(c->conn));
	if (c->state == R_BUSY) {
		take_results(c);
		return;
	}
	/* Idle: a notice, or the server closing the connection. */
	if (PQstatus(c->conn) == CONNECTION_BAD)
		lost(c, PQerrorMessage(c->conn));
	else
		watch(c, false);
}

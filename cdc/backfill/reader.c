/* reader.c: the backfills' connection; see reader.h. States: down (a retry timer may be set),
 * connecting (PQconnectPoll), idle, busy (a statement sent, its result awaited). */
#include "cdc/backfill/reader.h"

#include <event2/event.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/log.h"

#define RETRY_MIN_MS 1000
#define RETRY_MAX_MS 30000

enum rstate { R_DOWN, R_CONNECTING, R_IDLE, R_BUSY };

struct bf_reader {
	struct event_base *base;
	char *dsn;
	char *password; /* source.password; NULL: none */
	bf_set *set;
	PGconn *conn;
	enum rstate state;
	struct event *ev_io, *ev_timer;
	bool want_write; /* connecting: PQconnectPoll asked for write readiness */
	uint64_t ticket, backoff_ms;
	PGresult *res;
	void (*answered)(void *ctx);
	void *ctx;
};

static bf_now now(void)
{
	return (bf_now){.ms = now_ms(), .wall_ms = wall_ms()};
}

static void on_io(evutil_socket_t fd, short what, void *arg);
static void on_timer(evutil_socket_t fd, short what, void *arg);

bf_reader *bf_reader_new(struct event_base *base, const char *dsn, bf_set *set, void (*answered)(void *ctx),
			 void *ctx)
{
	bf_reader *r = xcalloc(1, sizeof(*r));
	r->base = base;
	r->answered = answered;
	r->ctx = ctx;
	r->dsn = xstrdup(dsn);
	r->set = set;
	r->ev_timer = evtimer_new(base, on_timer, r);
	r->backoff_ms = RETRY_MIN_MS;
	return r;
}

static void drop_connection(bf_reader *r)
{
	if (r->ev_io) {
		event_free(r->ev_io);
		r->ev_io = NULL;
	}
	PQclear(r->res);
	r->res = NULL;
	PQfinish(r->conn);
	r->conn = NULL;
	r->state = R_DOWN;
}

void bf_reader_free(bf_reader *r)
{
	if (!r)
		return;
	drop_connection(r);
	event_free(r->ev_timer);
	bf_reader_password(r, NULL);
	free(r->dsn);
	free(r);
}

static void arm_timer(bf_reader *r, uint64_t ms)
{
	struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
	evtimer_add(r->ev_timer, &tv);
}

/* The io event for the connection's socket: read, or write while connecting or flushing. */
static void watch(bf_reader *r, bool write)
{
	if (r->ev_io)
		event_free(r->ev_io);
	r->ev_io = event_new(r->base, PQsocket(r->conn), write ? EV_WRITE : EV_READ, on_io, r);
	event_add(r->ev_io, NULL);
}

/* The connection failed or dropped: a statement in flight is done again on the next one. */
static void lost(bf_reader *r, const char *why)
{
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", why && *why ? why : "connection lost");
	msg[strcspn(msg, "\n")] = '\0';
	log_warn("backfill connection lost", "error=\"%s\" retry_ms=%llu", msg,
		 (unsigned long long)r->backoff_ms);
	if (r->state == R_BUSY)
		backfill_error(r->set, r->ticket, msg, true, now());
	drop_connection(r);
	arm_timer(r, r->backoff_ms);
	r->backoff_ms = r->backoff_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : r->backoff_ms * 2;
}

static void connect_start(bf_reader *r)
{
	/* the password first: the connection string's own, expanded from dbname, overrides it */
	const char *keys[] = {"password", "dbname", "application_name", NULL};
	const char *vals[] = {r->password, r->dsn, "cdc backfill", NULL};
	r->conn = PQconnectStartParams(r->password ? keys : keys + 1, r->password ? vals : vals + 1, 1);
	if (!r->conn || PQstatus(r->conn) == CONNECTION_BAD || PQsetnonblocking(r->conn, 1) != 0) {
		lost(r, r->conn ? PQerrorMessage(r->conn) : "out of memory");
		return;
	}
	r->state = R_CONNECTING;
	watch(r, true);
}

/* The next statement, if one is due; else the timer for when one is. */
static void run_next(bf_reader *r)
{
	bf_stmt s;
	uint64_t wake;
	bf_now t = now();
	if (!backfill_next(r->set, t, &s, &wake)) {
		if (wake)
			arm_timer(r, wake > t.ms ? wake - t.ms : 0);
		return;
	}
	if (!PQsendQueryParams(r->conn, s.sql, s.nparams, NULL, s.params, NULL, NULL, 0)) {
		backfill_error(r->set, s.ticket, PQerrorMessage(r->conn), true, t);
		lost(r, PQerrorMessage(r->conn));
		return;
	}
	r->ticket = s.ticket;
	r->state = R_BUSY;
	int f = PQflush(r->conn);
	if (f < 0)
		lost(r, PQerrorMessage(r->conn));
	else
		watch(r, f == 1);
}

void bf_reader_kick(bf_reader *r)
{
	switch (r->state) {
	case R_DOWN:
		if (backfill_active(r->set) && !evtimer_pending(r->ev_timer, NULL))
			connect_start(r);
		break;
	case R_IDLE:
		if (!backfill_active(r->set)) {
			/* Nothing left to do: no connection held open for nothing. */
			drop_connection(r);
			break;
		}
		evtimer_del(r->ev_timer);
		run_next(r);
		break;
	default:
		break;
	}
}

void bf_reader_use(bf_reader *r, const char *dsn)
{
	if (strcmp(r->dsn, dsn) == 0)
		return;
	free(r->dsn);
	r->dsn = xstrdup(dsn);
	if (r->state == R_DOWN)
		return;
	if (r->state == R_BUSY)
		backfill_error(r->set, r->ticket, "the source moved to another server", true, now());
	drop_connection(r);
	bf_reader_kick(r);
}

void bf_reader_password(bf_reader *r, const char *password)
{
	if (r->password)
		explicit_bzero(r->password, strlen(r->password));
	free(r->password);
	r->password = password ? xstrdup(password) : NULL;
}

bool bf_reader_idle(const bf_reader *r)
{
	return r->state == R_IDLE || (r->state == R_DOWN && !backfill_active(r->set));
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	bf_reader_kick(arg);
}

static void poll_connect(bf_reader *r)
{
	switch (PQconnectPoll(r->conn)) {
	case PGRES_POLLING_READING:
		watch(r, false);
		break;
	case PGRES_POLLING_WRITING:
		watch(r, true);
		break;
	case PGRES_POLLING_OK:
		r->state = R_IDLE;
		r->backoff_ms = RETRY_MIN_MS;
		watch(r, false);
		bf_reader_kick(r);
		break;
	default:
		lost(r, PQerrorMessage(r->conn));
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

/* The statement's results: one PGresult, then NULL. */
static void take_results(bf_reader *r)
{
	while (!PQisBusy(r->conn)) {
		PGresult *res = PQgetResult(r->conn);
		if (res) {
			PQclear(r->res);
			r->res = res;
			continue;
		}
		PGresult *done = r->res;
		r->res = NULL;
		r->state = R_IDLE;
		bf_now t = now();
		bf_result br = {0};
		if (done && PQresultStatus(done) == PGRES_TUPLES_OK) {
			br = (bf_result){PQntuples(done), PQnfields(done), done,
					 res_value,	  res_length,	   res_isnull};
			backfill_result(r->set, r->ticket, &br, t);
		} else {
			char msg[1024];
			snprintf(msg, sizeof(msg), "%s",
				 done ? PQresultErrorMessage(done) : PQerrorMessage(r->conn));
			msg[strcspn(msg, "\n")] = '\0';
			bool gone = PQstatus(r->conn) == CONNECTION_BAD;
			backfill_error(r->set, r->ticket, msg, gone, t);
			if (gone) {
				PQclear(done);
				r->state = R_IDLE;
				lost(r, msg);
				return;
			}
		}
		r->answered(r->ctx);
		/* The next statement (a chunk's high watermark) goes out before the chunk's rows are
		 * copied, so that the server writes it meanwhile. */
		bf_reader_kick(r);
		backfill_rows(r->set, &br);
		PQclear(done);
		return;
	}
	watch(r, false);
}

static void on_io(evutil_socket_t fd, short what, void *arg)
{
	bf_reader *r = arg;
	(void)fd;
	if (r->state == R_CONNECTING) {
		poll_connect(r);
		return;
	}
	if (what & EV_WRITE) {
		int f = PQflush(r->conn);
		if (f < 0)
			return lost(r, PQerrorMessage(r->conn));
		watch(r, f == 1);
		return;
	}
	if (!PQconsumeInput(r->conn))
		return lost(r, PQerrorMessage(r->conn));
	if (r->state == R_BUSY) {
		take_results(r);
		return;
	}
	/* Idle: a notice, or the server closing the connection. */
	if (PQstatus(r->conn) == CONNECTION_BAD)
		lost(r, PQerrorMessage(r->conn));
	else
		watch(r, false);
}

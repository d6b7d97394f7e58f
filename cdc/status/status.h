/* The status socket, HTTP/1.1 on a Unix socket (status.socket) and optionally on TCP (status.listen).
 * libmicrohttpd serves it on its own thread, so that a slow or malformed client never stalls
 * streaming. */
#ifndef CDC_STATUS_H
#define CDC_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "cdc/config/config.h"
#include "decoder/base/util.h"

/* The daemon's loop publishes snapshots of what GET answers. Mutating requests are handed to the loop
 * through a pipe and answered once the loop has applied them. */
struct event_base;
typedef struct status_server status_server;

/* A mutating request waiting for the daemon's loop. It is PUT or DELETE /subscriptions/NAME, POST
 * /subscriptions/NAME/backfill, or DELETE /subscriptions/NAME/backfill/ID. */
typedef struct status_request {
	bool put;	  /* PUT /subscriptions/NAME */
	int route;	  /* the status_route */
	const char *name; /* NAME from the path (validated as 1..63 of [A-Za-z0-9_.-]) */
	const char *id;	  /* ID from a backfill's path (validated like NAME), else NULL */
	const char *body; /* the JSON body of PUT and POST, NUL-terminated, NULL for DELETE. It is
			   * checked to be one JSON object, or empty for POST. */
	size_t body_len;
	uid_t uid; /* the peer, for the daemon's own logs, (uid_t)-1 and pid 0 over TCP */
	pid_t pid;
} status_request;

/* Called on the daemon's loop for each mutating request from an allowed peer. The daemon answers it
 * with status_answer(), at once or later (at the next transaction boundary). */
typedef void (*status_request_fn)(void *ctx, status_request *request);

/* Binds status.socket (mode subscribers.mode) and status.listen if set, and starts serving. A stale
 * socket file is replaced, and a live one refused. Call on the loop's thread. base must outlive it. */
status_server *status_new(const cfg *conf, struct event_base *base, status_request_fn on_request, void *ctx,
			  char *err, size_t errlen) CDC_MUST_CHECK;
/* Stops serving and removes the socket file. Requests not yet answered get 503. The daemon must drop
 * every status_request pointer it still holds. */
void status_free(status_server *server);
/* The TCP port status.listen is bound to (useful with port 0 in tests), or 0 without a listener. */
int status_tcp_port(const status_server *server);
/* A reload, from the daemon's loop. status.token and status.tcp_read apply at once. status.tls_cert
 * and status.tls_key are read again, and a new certificate is served to new connections. What cannot
 * be read or used is logged, and the one in force stays. */
void status_reload(status_server *server, const cfg *conf);
/* Requests over status.listen refused for want of the token (401), since the start. */
uint64_t status_unauthorized(status_server *server);

/* What GET answers from now on. It is copied, and callable only from the daemon's loop.
 * - /status answers status_json.
 * - /metrics answers metrics (Prometheus text).
 * - /subscriptions answers subscriptions_json.
 * - /readyz answers 200 "ready\n" if ready, else 503 with reason.
 * - /healthz answers 200 while the loop publishes. A snapshot older than 10 s means the loop is
 *   stuck, and it answers 503. */
void status_publish(status_server *server, const char *status_json, const char *metrics,
		    const char *subscriptions_json, bool ready, const char *reason);
/* What GET /backfills answers from now on, copied, from the daemon's loop. It is backfill_json's
 * array and a newline, "[]\n" until first published. */
void status_publish_backfills(status_server *server, const char *json);
/* Answers request (from the daemon's loop) with an HTTP status and a JSON body. request is freed. */
void status_answer(status_server *server, status_request *request, unsigned http_status,
		   const char *json_body);

/* The routing of one request, a pure function of its method, path and body (exposed for tests and
 * the fuzzer). The server checks the route first, then who asks (403), then the body. */
typedef enum status_route {
	STATUS_ROUTE_ERROR, /* http_status and message say why */
	STATUS_ROUTE_STATUS,
	STATUS_ROUTE_METRICS,
	STATUS_ROUTE_SUBSCRIPTIONS,
	STATUS_ROUTE_HEALTHZ,
	STATUS_ROUTE_READYZ,
	STATUS_ROUTE_PUT,	      /* PUT /subscriptions/NAME */
	STATUS_ROUTE_DELETE,	      /* DELETE /subscriptions/NAME */
	STATUS_ROUTE_BACKFILLS,	      /* GET /backfills */
	STATUS_ROUTE_BACKFILL,	      /* POST /subscriptions/NAME/backfill */
	STATUS_ROUTE_BACKFILL_CANCEL, /* DELETE /subscriptions/NAME/backfill/ID */
} status_route;

#define STATUS_NAME_MAX 63
#define STATUS_BODY_MAX (64 * 1024)

typedef struct status_match {
	status_route route;
	unsigned http_status; /* 0 when routed, else 400, 404, 405 or 413 */
	char message[160];    /* the error, for a JSON body (never echoes the request) */
	const char *allow;    /* the Allow header, with 405 */
	char name[STATUS_NAME_MAX + 1];
	char id[STATUS_NAME_MAX + 1]; /* STATUS_ROUTE_BACKFILL_CANCEL */
} status_match;

/* Routes method and path as libmicrohttpd passes them, query string removed and %XX decoded.
 * HEAD is routed like GET. False with http_status and message set if there is no such route. */
bool status_route_request(const char *method, const char *path, status_match *match);
/* A PUT body must be at most STATUS_BODY_MAX bytes (413) holding one JSON object (400). */
bool status_check_body(const char *body, size_t len, status_match *match);
/* 1..63 characters of [A-Za-z0-9_.-]. */
bool status_name_valid(const char *name, size_t len);
/* Whether an Authorization header's value carries token. The value is "Bearer TOKEN", the scheme in
 * any case, then spaces. TOKEN is compared in constant time (every byte of token, whatever was given).
 * A value longer than STATUS_AUTH_MAX is refused unread. False when header or token is NULL. */
#define STATUS_AUTH_MAX (CFG_TOKEN_MAX + 64)
bool status_bearer_ok(const char *header, const char *token);

#endif

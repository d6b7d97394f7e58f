/* See status.h. libmicrohttpd serves both listeners from its own threads. GETs read the last published
 * snapshot under a mutex. PUT and DELETE suspend their connection until the daemon's loop answers them. They
 * reach the loop through a pipe watched by its event_base. */
#include "cdc/status/status.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "decoder/base/json.h"
#include "decoder/base/log.h"
#include "decoder/base/net.h"

#define CONNECTION_LIMIT 64
#define PER_IP_LIMIT 16
#define CONNECTION_TIMEOUT_S 10 /* an idle or slow client is dropped after this */
#define PENDING_MAX 32		/* mutating requests waiting for the loop, well below a pipe's capacity */
#define STALL_MS 10000		/* for /healthz, a loop that has not published for this long is stuck */
#define FREE_WAIT_MS 2000	/* how long status_free gives pending 503s to reach their clients */

typedef struct listener {
	status_server *s;
	bool unix_socket; /* else TCP */
	struct MHD_Daemon *mhd;
	char *tls_cert, *tls_key; /* PEM, while the daemon lives (HTTPS). NULL for plain HTTP. */
	/* Set when retiring (a reload gave the port to a listener with new TLS files). quiesced_fd is its
	 * listening socket, which MHD gave back, closed once the daemon is stopped (-1 if none). retire_ms is
	 * by when it stops. */
	int quiesced_fd;
	uint64_t retire_ms;
	struct listener *next;
} listener;

/* One HTTP request, from the access handler's first call to MHD's completion callback. */
typedef struct conn_ctx {
	status_request req; /* what the daemon sees. conn_ctx is found from it by container_of. */
	status_server *s;
	listener *l; /* whose daemon serves it (a retiring one stops only once none is pending) */
	struct MHD_Connection *conn;
	status_match m;
	buf body;
	bool too_large;
	bool pending;  /* handed to the loop, not yet answered, and on the server's pending list */
	bool answered; /* status_answer() ran, so the next handler call sends the answer */
	unsigned answer_status;
	char *answer_body;
	struct conn_ctx *prev, *next;
} conn_ctx;

struct status_server {
	pthread_mutex_t mu; /* guards everything below up to the loop-only fields */
	pthread_cond_t done;
	char *status_json, *metrics, *subs_json, *reason, *backfills_json;
	bool ready;
	uint64_t published_ms;
	conn_ctx *pending; /* suspended connections waiting for status_answer() */
	size_t in_flight;  /* handed to the loop and not yet completed by MHD */
	bool closing;
	/* status.listen's access, which a reload changes */
	char *token; /* NULL if none (then tcp_read is open and tcp_control false) */
	cfg_tcp_read tcp_read;
	uint64_t unauthorized; /* requests over TCP refused for want of the token */

	/* Set up before the listeners start. Read-only afterwards. */
	id_list uids; /* status.control_uids */
	bool tcp_control;
	char *socket_path;
	dev_t sock_dev;
	ino_t sock_ino;
	int tcp_port;
	listener unix_l;
	listener *tcp_l;    /* status.listen's (NULL if none), swapped by a reload of its TLS files */
	listener *retiring; /* former TCP listeners finishing their connections (loop only) */
	int pipe_rd, pipe_wr;

	/* Loop-only. */
	struct event *ev;
	status_request_fn on_request;
	void *ctx;
};

static conn_ctx *ctx_of(status_request *r)
{
	return (conn_ctx *)((char *)r - offsetof(conn_ctx, req));
}

/* ---- routing, pure functions ---- */

bool status_name_valid(const char *name, size_t len)
{
	if (len < 1 || len > STATUS_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = name[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		      ch == '_' || ch == '.' || ch == '-'))
			return false;
	}
	return true;
}

static bool route_error(status_match *m, unsigned code, const char *allow, const char *message)
{
	m->route = STATUS_ROUTE_ERROR;
	m->http_status = code;
	m->allow = allow;
	snprintf(m->message, sizeof(m->message), "%s", message);
	return false;
}

static const struct {
	const char *path;
	status_route route;
} GET_ROUTES[] = {
    {"/status", STATUS_ROUTE_STATUS},
    {"/metrics", STATUS_ROUTE_METRICS},
    {"/subscriptions", STATUS_ROUTE_SUBSCRIPTIONS},
    {"/healthz", STATUS_ROUTE_HEALTHZ},
    {"/readyz", STATUS_ROUTE_READYZ},
    {"/backfills", STATUS_ROUTE_BACKFILLS},
};

/* /subscriptions/NAME/backfill[/ID], where rest is what follows NAME. */
static bool route_backfill(const char *method, const char *rest, status_match *m)
{
	static const char seg[] = "/backfill";
	const char *id = rest + sizeof(seg) - 1;
	if (!*id) {
		if (strcmp(method, "POST") != 0)
			return route_error(m, 405, "POST",
					   "method not allowed: use POST /subscriptions/NAME/backfill");
		m->route = STATUS_ROUTE_BACKFILL;
		return true;
	}
	id++;
	if (strcmp(method, "DELETE") != 0)
		return route_error(m, 405, "DELETE",
				   "method not allowed: use DELETE /subscriptions/NAME/backfill/ID");
	size_t len = strlen(id);
	if (!status_name_valid(id, len))
		return route_error(m, 400, NULL, "invalid backfill id");
	memcpy(m->id, id, len + 1);
	m->route = STATUS_ROUTE_BACKFILL_CANCEL;
	return true;
}

static bool route_one_subscription(const char *method, const char *path, status_match *m)
{
	const char *slash = strchr(path, '/');
	bool backfill = slash && strncmp(slash, "/backfill", 9) == 0 && (!slash[9] || slash[9] == '/');
	size_t len = backfill ? (size_t)(slash - path) : strlen(path);
	bool put = strcmp(method, "PUT") == 0, del = strcmp(method, "DELETE") == 0;
	if (!backfill && !put && !del)
		return route_error(m, 405, "PUT, DELETE",
				   "method not allowed: use PUT or DELETE /subscriptions/NAME");
	if (!status_name_valid(path, len))
		return route_error(
		    m, 400, NULL,
		    "invalid subscription name: expected 1 to 63 characters of A-Z a-z 0-9 _ . -");
	if (backfill && !route_backfill(method, slash, m))
		return false;
	memcpy(m->name, path, len);
	m->name[len] = '\0';
	if (backfill)
		return true;
	m->route = put ? STATUS_ROUTE_PUT : STATUS_ROUTE_DELETE;
	return true;
}

bool status_route_request(const char *method, const char *path, status_match *m)
{
	memset(m, 0, sizeof(*m));
	static const char prefix[] = "/subscriptions/";
	if (strncmp(path, prefix, sizeof(prefix) - 1) == 0)
		return route_one_subscription(method, path + sizeof(prefix) - 1, m);
	for (size_t i = 0; i < sizeof(GET_ROUTES) / sizeof(GET_ROUTES[0]); i++) {
		if (strcmp(path, GET_ROUTES[i].path) != 0)
			continue;
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			return route_error(m, 405, "GET, HEAD", "method not allowed: use GET");
		m->route = GET_ROUTES[i].route;
		return true;
	}
	return route_error(m, 404, NULL,
			   "no such endpoint: try /status, /metrics, /healthz, /readyz, /subscriptions");
}

static bool only_space(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr(" \t\r\n", p[i]))
			return false;
	return true;
}

bool status_check_body(const char *body, size_t len, status_match *m)
{
	if (len > STATUS_BODY_MAX)
		return route_error(m, 413, NULL, "request body too large: at most 64 KiB");
	if (memchr(body, '\0', len))
		return route_error(m, 400, NULL, "invalid body: contains a NUL byte");
	if (only_space(body, len))
		return route_error(m, 400, NULL, "missing body: expected a JSON object");
	/* Strict and depth-limited. The daemon parses it again, and must only ever see plain JSON. */
	json_tokener *tok = json_tokener_new_ex(32);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
	json_object *o = json_tokener_parse_ex(tok, body, (int)len);
	enum json_tokener_error e = json_tokener_get_error(tok);
	size_t end = json_tokener_get_parse_end(tok);
	json_tokener_free(tok);
	bool object = o && json_object_get_type(o) == json_type_object;
	json_object_put(o);
	if (e == json_tokener_continue)
		return route_error(m, 400, NULL, "invalid JSON body: unexpected end of the body");
	if (e != json_tokener_success) {
		snprintf(m->message, sizeof(m->message), "invalid JSON body at byte %zu: %s", end,
			 json_tokener_error_desc(e));
		m->route = STATUS_ROUTE_ERROR;
		m->http_status = 400;
		return false;
	}
	if (!object)
		return route_error(m, 400, NULL, "invalid body: expected a JSON object");
	if (!only_space(body + end, len - end))
		return route_error(m, 400, NULL, "invalid body: data after the JSON object");
	return true;
}

bool status_bearer_ok(const char *header, const char *token)
{
	if (!header || !token)
		return false;
	size_t hn = strnlen(header, STATUS_AUTH_MAX + 1);
	if (hn > STATUS_AUTH_MAX || hn < 7 || strncasecmp(header, "Bearer", 6) != 0 ||
	    (header[6] != ' ' && header[6] != '\t'))
		return false;
	const char *given = header + 6;
	while (*given == ' ' || *given == '\t')
		given++;
	size_t gn = strlen(given), tn = strlen(token);
	/* Every byte of the token is compared, whatever was given. So the time says nothing about it. */
	unsigned char diff = gn != tn;
	for (size_t i = 0; i < tn; i++)
		diff |= (unsigned char)((unsigned char)token[i] ^ (unsigned char)(i < gn ? given[i] : 0));
	return diff == 0;
}

/* ---- responses (MHD's thread) ---- */

/* An answer with one more header (name NULL for none). */
static enum MHD_Result reply_with(struct MHD_Connection *conn, unsigned code, const char *type,
				  const char *body, const char *name, const char *value)
{
	size_t len = body ? strlen(body) : 0;
	struct MHD_Response *r =
	    MHD_create_response_from_buffer(len, (void *)(body ? body : ""), MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (name)
		MHD_add_response_header(r, name, value);
	enum MHD_Result ret = MHD_queue_response(conn, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned code, const char *type, const char *body,
			     const char *allow)
{
	return reply_with(conn, code, type, body, allow ? MHD_HTTP_HEADER_ALLOW : NULL, allow);
}

static const char JSON_TYPE[] = "application/json";
static const char TEXT_TYPE[] = "text/plain; charset=utf-8";

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned code, const char *message,
				   const char *allow)
{
	buf b = {0};
	bool first = true;
	buf_putc(&b, '{');
	json_key_str(&b, &first, "error", message);
	buf_puts(&b, "}\n");
	enum MHD_Result ret = reply(conn, code, JSON_TYPE, b.data, allow);
	buf_free(&b);
	return ret;
}

/* A GET from the last snapshot, copied under the lock (MHD copies the body again, so the lock
 * is never held across a write to a client). */
static enum MHD_Result reply_get(status_server *s, struct MHD_Connection *conn, status_route route)
{
	unsigned code = 200;
	const char *type = JSON_TYPE;
	char *body = NULL;
	pthread_mutex_lock(&s->mu);
	switch (route) {
	case STATUS_ROUTE_STATUS:
	case STATUS_ROUTE_SUBSCRIPTIONS: {
		const char *src = route == STATUS_ROUTE_STATUS ? s->status_json : s->subs_json;
		code = src ? 200 : 503;
		body = util_xstrdup(src ? src : "{\"error\":\"starting: no status published yet\"}\n");
		break;
	}
	case STATUS_ROUTE_METRICS:
		type = "text/plain; version=0.0.4; charset=utf-8";
		code = s->metrics ? 200 : 503;
		body = util_xstrdup(s->metrics ? s->metrics : "starting: no metrics published yet\n");
		break;
	case STATUS_ROUTE_BACKFILLS:
		body = util_xstrdup(s->backfills_json ? s->backfills_json : "[]\n");
		break;
	case STATUS_ROUTE_HEALTHZ:
		type = TEXT_TYPE;
		code = util_now_ms() - s->published_ms <= STALL_MS ? 200 : 503;
		body = util_xstrdup(code == 200 ? "ok\n" : "event loop stalled\n");
		break;
	default: /* STATUS_ROUTE_READYZ */
		type = TEXT_TYPE;
		code = s->ready ? 200 : 503;
		if (s->ready) {
			body = util_xstrdup("ready\n");
		} else {
			buf b = {0};
			buf_printf(&b, "%s\n", s->reason && *s->reason ? s->reason : "not ready");
			body = b.data;
		}
		break;
	}
	pthread_mutex_unlock(&s->mu);
	enum MHD_Result ret = reply(conn, code, type, body, NULL);
	free(body);
	return ret;
}

/* ---- who may read and mutate over TCP ---- */

static bool is_control(status_route route)
{
	return route == STATUS_ROUTE_PUT || route == STATUS_ROUTE_DELETE || route == STATUS_ROUTE_BACKFILL ||
	       route == STATUS_ROUTE_BACKFILL_CANCEL;
}

/* Over status.listen, a request the token must come with may lack it or bring another. It gets 401 with
 * WWW-Authenticate (RFC 6750), and is counted. NULL when it may go on. */
static const char *unauthorized(listener *l, struct MHD_Connection *conn, status_route route)
{
	status_server *s = l->s;
	if (l->unix_socket)
		return NULL;
	const char *header =
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	pthread_mutex_lock(&s->mu);
	bool probe = route == STATUS_ROUTE_HEALTHZ || route == STATUS_ROUTE_READYZ;
	bool needed = s->token && (is_control(route) || s->tcp_read == CFG_TCP_READ_TOKEN ||
				   (s->tcp_read == CFG_TCP_READ_PROBES && !probe));
	bool ok = !needed || status_bearer_ok(header, s->token);
	s->unauthorized += !ok;
	pthread_mutex_unlock(&s->mu);
	if (ok)
		return NULL;
	return header
		   ? "the bearer token is not status.token"
		   : "this endpoint needs status.token over status.listen: send Authorization: Bearer TOKEN";
}

static enum MHD_Result reply_unauthorized(struct MHD_Connection *conn, const char *why)
{
	buf b = {0};
	bool first = true;
	buf_putc(&b, '{');
	json_key_str(&b, &first, "error", why);
	buf_puts(&b, "}\n");
	/* No detail on a wrong token (RFC 6750 3.1). invalid_token names only the kind of failure. */
	enum MHD_Result ret = reply_with(
	    conn, 401, JSON_TYPE, b.data, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
	    strstr(why, "is not") ? "Bearer realm=\"cdc\", error=\"invalid_token\"" : "Bearer realm=\"cdc\"");
	buf_free(&b);
	return ret;
}

/* ---- who may mutate ---- */

/* NULL if the peer may mutate, else why not. Fills uid/pid for the logs. */
static const char *refusal(const listener *l, struct MHD_Connection *conn, uid_t *uid, pid_t *pid, char *why,
			   size_t whylen)
{
	*uid = (uid_t)-1;
	*pid = 0;
	if (!l->unix_socket) {
		if (l->s->tcp_control)
			return NULL;
		return "changing subscriptions over TCP needs status.tcp_control: true; use the Unix socket";
	}
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	net_peer peer;
	if (ci)
		net_peer_of(ci->connect_fd, &peer);
	if (!ci || !peer.known)
		return "cannot identify the peer (SO_PEERCRED failed)";
	*uid = peer.uid;
	*pid = peer.pid;
	if (net_peer_in(&peer, &l->s->uids, &(id_list){0}))
		return NULL;
	snprintf(why, whylen, "uid %lu may not change subscriptions (status.control_uids)",
		 (unsigned long)peer.uid);
	return why;
}

static const char *peer_addr(struct MHD_Connection *conn, char *out, size_t outlen)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	snprintf(out, outlen, "?");
	if (ci && ci->client_addr) {
		socklen_t len = ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								       : sizeof(struct sockaddr_in);
		if (getnameinfo(ci->client_addr, len, out, (socklen_t)outlen, NULL, 0, NI_NUMERICHOST) != 0)
			snprintf(out, outlen, "?");
	}
	return out;
}

static void log_control(const listener *l, struct MHD_Connection *conn, const conn_ctx *c,
			const char *refused)
{
	const char *method = c->m.route == STATUS_ROUTE_PUT	   ? "PUT"
			     : c->m.route == STATUS_ROUTE_BACKFILL ? "POST"
								   : "DELETE";
	if (l->unix_socket) {
		if (refused)
			log_warn("control request refused",
				 "method=%s subscription=%s uid=%lu pid=%ld reason=\"%s\"", method, c->m.name,
				 (unsigned long)c->req.uid, (long)c->req.pid, refused);
		else
			log_info("control request", "method=%s subscription=%s uid=%lu pid=%ld", method,
				 c->m.name, (unsigned long)c->req.uid, (long)c->req.pid);
		return;
	}
	char addr[NI_MAXHOST];
	peer_addr(conn, addr, sizeof(addr));
	if (refused)
		log_warn("control request refused", "method=%s subscription=%s peer=%s reason=\"%s\"", method,
			 c->m.name, addr, refused);
	else
		log_info("control request", "method=%s subscription=%s peer=%s", method, c->m.name, addr);
}

/* ---- the handover to the loop ---- */

static void pending_unlink(status_server *s, conn_ctx *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		s->pending = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	c->pending = false;
}

/* The request is complete and allowed. Suspend it and wake the loop. */
static enum MHD_Result hand_to_loop(status_server *s, conn_ctx *c)
{
	pthread_mutex_lock(&s->mu);
	const char *busy = s->closing			 ? "shutting down"
			   : s->in_flight >= PENDING_MAX ? "too many pending requests"
							 : NULL;
	if (!busy) {
		c->pending = true;
		c->next = s->pending;
		if (s->pending)
			s->pending->prev = c;
		s->pending = c;
		s->in_flight++;
	}
	pthread_mutex_unlock(&s->mu);
	if (busy)
		return reply_error(c->conn, 503, busy, NULL);
	c->req.put = c->m.route == STATUS_ROUTE_PUT;
	c->req.route = c->m.route;
	c->req.name = c->m.name;
	c->req.id = c->m.route == STATUS_ROUTE_BACKFILL_CANCEL ? c->m.id : NULL;
	bool body = c->req.put || c->m.route == STATUS_ROUTE_BACKFILL;
	c->req.body = body ? (c->body.data ? c->body.data : "") : NULL;
	c->req.body_len = body ? c->body.len : 0;
	MHD_suspend_connection(c->conn);
	/* An 8-byte write to a pipe is atomic, and at most PENDING_MAX pointers are ever in it. */
	ssize_t w = write(s->pipe_wr, &c, sizeof(c));
	if (w != (ssize_t)sizeof(c))
		log_error("status: cannot wake the event loop", "error=\"%s\"", strerror(errno));
	return MHD_YES;
}

static void on_pipe(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	status_server *s = arg;
	conn_ctx *c;
	while (read(fd, &c, sizeof(c)) == (ssize_t)sizeof(c)) {
		pthread_mutex_lock(&s->mu);
		bool live = c->pending && !c->answered;
		pthread_mutex_unlock(&s->mu);
		if (live)
			s->on_request(s->ctx, &c->req);
	}
}

/* Stores the answer. The caller then resumes the connection outside s->mu, since MHD takes its own locks. The
 * handler sends the answer on MHD's thread. False if c was answered already. */
static bool answer_locked(status_server *s, conn_ctx *c, unsigned code, const char *body)
{
	if (!c->pending || c->answered)
		return false;
	pending_unlink(s, c);
	c->answered = true;
	c->answer_status = code;
	c->answer_body = util_xstrdup(body ? body : "");
	return true;
}

void status_answer(status_server *s, status_request *r, unsigned http_status, const char *json_body)
{
	conn_ctx *c = ctx_of(r);
	pthread_mutex_lock(&s->mu);
	bool resume = answer_locked(s, c, http_status, json_body);
	pthread_mutex_unlock(&s->mu);
	/* Still suspended, so MHD cannot have completed (and freed) c in between. */
	if (resume)
		MHD_resume_connection(c->conn);
}

/* ---- the access handler ---- */

/* The first call routes and authorises on the headers alone. So a refused or oversized request is answered
 * before its body is read. */
static enum MHD_Result first_call(listener *l, struct MHD_Connection *conn, const char *url,
				  const char *method, void **con_cls)
{
	status_match m;
	if (!status_route_request(method, url, &m))
		return reply_error(conn, m.http_status, m.message, m.allow);
	const char *no_token = is_control(m.route) && !l->unix_socket && !l->s->tcp_control
				   ? NULL /* refused below, whatever it carries */
				   : unauthorized(l, conn, m.route);
	if (!is_control(m.route)) {
		if (no_token) {
			char addr[NI_MAXHOST];
			log_debug("status request refused", "path=%s peer=%s reason=\"%s\"", url,
				  peer_addr(conn, addr, sizeof addr), no_token);
			return reply_unauthorized(conn, no_token);
		}
		return reply_get(l->s, conn, m.route);
	}
	conn_ctx *c = util_xcalloc(1, sizeof(*c));
	c->s = l->s;
	c->l = l;
	c->conn = conn;
	c->m = m;
	*con_cls = c;
	char why[128];
	const char *refused = refusal(l, conn, &c->req.uid, &c->req.pid, why, sizeof(why));
	if (refused || no_token) {
		log_control(l, conn, c, refused ? refused : no_token);
		return refused ? reply_error(conn, 403, refused, NULL) : reply_unauthorized(conn, no_token);
	}
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > STATUS_BODY_MAX)
		return reply_error(conn, 413, "request body too large: at most 64 KiB", NULL);
	log_control(l, conn, c, NULL);
	return MHD_YES;
}

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload_data, size_t *upload_data_size,
			       void **con_cls)
{
	(void)version;
	listener *l = cls;
	conn_ctx *c = *con_cls;
	if (!c)
		return first_call(l, conn, url, method, con_cls);
	if (c->answered)
		return reply(conn, c->answer_status, JSON_TYPE, c->answer_body, NULL);
	if (*upload_data_size) {
		/* A chunked body has no Content-Length to refuse up front. So discard past the limit and
		 * answer 413 once it ends (MHD cannot queue a response in the middle of a body). */
		if (c->body.len + *upload_data_size > STATUS_BODY_MAX)
			c->too_large = true;
		else
			buf_append(&c->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (c->too_large)
		return reply_error(conn, 413, "request body too large: at most 64 KiB", NULL);
	/* A backfill's body is optional. None asks for every table. */
	bool body_needed = c->m.route == STATUS_ROUTE_PUT ||
			   (c->m.route == STATUS_ROUTE_BACKFILL && !only_space(c->body.data, c->body.len));
	if (body_needed && !status_check_body(c->body.data ? c->body.data : "", c->body.len, &c->m))
		return reply_error(conn, c->m.http_status, c->m.message, NULL);
	return hand_to_loop(l->s, c);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)conn;
	(void)toe;
	listener *l = cls;
	conn_ctx *c = *con_cls;
	if (!c)
		return;
	status_server *s = l->s;
	pthread_mutex_lock(&s->mu);
	bool counted = c->pending || c->answered;
	if (c->pending) /* only when MHD stops with a request still suspended */
		pending_unlink(s, c);
	if (counted) {
		s->in_flight--;
		pthread_cond_signal(&s->done);
	}
	pthread_mutex_unlock(&s->mu);
	buf_free(&c->body);
	free(c->answer_body);
	free(c);
	*con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_warn("status http", "detail=\"%s\"", msg);
}

/* ---- listeners ---- */

/* A listening Unix socket at path with the given mode, or -1. bound gets the file's identity, so
 * that status_free removes only its own socket. */
static int bind_unix(const char *path, mode_t mode, struct stat *bound, char *err, size_t errlen)
{
	char why[512];
	int fd = net_unix_listen(path, mode, CONNECTION_LIMIT, why, sizeof(why));
	if (fd < 0)
		return util_errf(err, errlen, "status socket %s", why), -1;
	if (stat(path, bound) != 0) {
		util_errf(err, errlen, "status socket %s: %s", path, strerror(errno));
		unlink(path);
		close(fd);
		return -1;
	}
	return fd;
}

/* "HOST:PORT" or "[IPv6]:PORT" (config.c checked the form). */
static bool split_listen(const char *s, char *host, size_t hostlen, const char **port)
{
	const char *end = s[0] == '[' ? strchr(s, ']') : strrchr(s, ':');
	if (!end)
		return false;
	const char *h = s[0] == '[' ? s + 1 : s;
	*port = s[0] == '[' ? end + 2 : end + 1;
	if (s[0] == '[' && end[1] != ':')
		return false;
	if ((size_t)(end - h) >= hostlen)
		return false;
	memcpy(host, h, (size_t)(end - h));
	host[end - h] = '\0';
	return true;
}

static int bind_tcp(const char *listen_s, int *port, char *err, size_t errlen)
{
	char host[256], why[512];
	const char *portstr;
	if (!split_listen(listen_s, host, sizeof(host), &portstr))
		return util_errf(err, errlen, "status.listen %s: expected HOST:PORT or [IPv6]:PORT",
				 listen_s),
		       -1;
	int fd = net_tcp_listen(host, portstr, CONNECTION_LIMIT, why, sizeof why);
	if (fd < 0)
		return util_errf(err, errlen, "status.listen %s", why), -1;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sslen);
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* Takes ownership of fd. MHD closes it when it stops, and so do we if it does not start. With cert and key
 * (PEM, taken), it serves HTTPS. */
static bool start_listener(listener *l, status_server *s, bool unix_socket, int fd, char *cert, char *key,
			   char *err, size_t errlen)
{
	l->s = s;
	l->unix_socket = unix_socket;
	l->tls_cert = cert;
	l->tls_key = key;
	l->quiesced_fd = -1;
	unsigned flags =
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	/* MHD takes the PEM when it starts (GnuTLS copies it). l keeps it while the daemon lives. */
	l->mhd = MHD_start_daemon(
	    flags | (cert ? MHD_USE_TLS : 0), 0, NULL, NULL, on_http, l, MHD_OPTION_EXTERNAL_LOGGER,
	    on_mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
	    (unsigned)CONNECTION_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, l,
	    /* One TCP peer cannot take every slot. 0 means no limit, and a Unix peer has no address to
	     * count. */
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, unix_socket ? 0u : (unsigned)PER_IP_LIMIT,
	    cert ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END, cert, MHD_OPTION_HTTPS_MEM_KEY, key,
	    MHD_OPTION_END);
	if (!l->mhd) {
		close(fd);
		return util_errf(
		    err, errlen, "status: cannot start the HTTP server on %s%s",
		    unix_socket ? s->socket_path : "status.listen",
		    cert ? " (check status.tls_cert and status.tls_key: a PEM certificate and its "
			   "unencrypted key)"
			 : "");
	}
	return true;
}

/* status.tls_cert and status.tls_key, read (both NULL when not set). False with err. */
static bool read_tls(const cfg *c, char **cert, char **key, char *err, size_t errlen)
{
	char why[640];
	*cert = *key = NULL;
	if (!c->status.tls_cert)
		return true;
	if (!(*cert = cfg_secret_read(c->status.tls_cert, why, sizeof why)))
		return util_errf(err, errlen, "status.tls_cert %s", why);
	if (!(*key = cfg_secret_read(c->status.tls_key, why, sizeof why))) {
		free(*cert);
		*cert = NULL;
		return util_errf(err, errlen, "status.tls_key %s", why);
	}
	return true;
}

static void free_pem(char *pem)
{
	if (pem)
		explicit_bzero(pem, strlen(pem));
	free(pem);
}

/* Stops l's daemon (MHD closes the connections still open), then frees l. */
static void stop_listener(listener *l)
{
	if (l->mhd)
		MHD_stop_daemon(l->mhd);
	if (l->quiesced_fd >= 0)
		close(l->quiesced_fd); /* MHD gave it back when it quiesced, and is done with it now */
	free_pem(l->tls_cert);
	free_pem(l->tls_key);
	if (l != &l->s->unix_l)
		free(l);
}

/* The configuration holds them, its default (root and cdc's own uid) included. */
static void copy_uids(status_server *s, const cfg *c)
{
	util_id_list_copy(&s->uids, &c->status.control_uids);
}

static bool open_pipe(status_server *s, struct event_base *base, char *err, size_t errlen)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0)
		return util_errf(err, errlen, "status: pipe: %s", strerror(errno));
	s->pipe_rd = p[0];
	s->pipe_wr = p[1];
	s->ev = event_new(base, s->pipe_rd, EV_READ | EV_PERSIST, on_pipe, s);
	if (!s->ev || event_add(s->ev, NULL) != 0)
		return util_errf(err, errlen, "status: cannot watch the request pipe");
	return true;
}

status_server *status_new(const cfg *c, struct event_base *base, status_request_fn on_request, void *ctx,
			  char *err, size_t errlen)
{
	status_server *s = util_xcalloc(1, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->done, &ca);
	pthread_condattr_destroy(&ca);
	s->pipe_rd = s->pipe_wr = -1;
	s->on_request = on_request;
	s->ctx = ctx;
	s->published_ms = util_now_ms();
	s->reason = util_xstrdup("starting");
	s->tcp_control = c->status.tcp_control;
	s->token = c->status.token ? util_xstrdup(c->status.token) : NULL;
	s->tcp_read = c->status.tcp_read;
	copy_uids(s, c);
	if (!open_pipe(s, base, err, errlen))
		goto fail;
	struct stat st;
	mode_t mode = (mode_t)cfg_get_number(c, "subscribers.mode");
	int fd = bind_unix(c->status.socket, mode, &st, err, errlen);
	if (fd < 0)
		goto fail;
	s->socket_path = util_xstrdup(c->status.socket);
	s->sock_dev = st.st_dev;
	s->sock_ino = st.st_ino;
	if (!start_listener(&s->unix_l, s, true, fd, NULL, NULL, err, errlen))
		goto fail;
	if (c->status.listen) {
		char *cert, *key;
		if (!read_tls(c, &cert, &key, err, errlen))
			goto fail;
		s->tcp_l = util_xcalloc(1, sizeof(*s->tcp_l));
		fd = bind_tcp(c->status.listen, &s->tcp_port, err, errlen);
		if (fd < 0) {
			free_pem(cert);
			free_pem(key);
			goto fail;
		}
		if (!start_listener(s->tcp_l, s, false, fd, cert, key, err, errlen))
			goto fail;
	}
	log_info("status socket listening", "path=%s mode=%04o listen=%s tls=%s tcp_control=%s tcp_read=%s",
		 s->socket_path, (unsigned)mode, c->status.listen ? c->status.listen : "-",
		 c->status.listen && c->status.tls_cert ? "true" : "false", s->tcp_control ? "true" : "false",
		 c->status.listen ? (const char *[]){"open", "probes", "token"}[c->status.tcp_read] : "-");
	return s;
fail:
	status_free(s);
	return NULL;
}

int status_tcp_port(const status_server *s)
{
	return s->tcp_port;
}

/* Answers with 503 every request the loop has not answered. Then gives the answers a moment to reach their
 * clients, since MHD must not stop with a connection still suspended. */
static void fail_pending(status_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->closing = true;
	conn_ctx *resume = NULL;
	while (s->pending) {
		conn_ctx *c = s->pending;
		answer_locked(s, c, 503, "{\"error\":\"shutting down\"}\n");
		c->next = resume; /* off the pending list now, so reuse the link */
		resume = c;
	}
	pthread_mutex_unlock(&s->mu);
	while (resume) {
		conn_ctx *c = resume;
		resume = c->next;
		c->next = NULL;
		MHD_resume_connection(c->conn);
	}
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += FREE_WAIT_MS / 1000;
	pthread_mutex_lock(&s->mu);
	while (s->in_flight && pthread_cond_timedwait(&s->done, &s->mu, &deadline) == 0)
		;
	pthread_mutex_unlock(&s->mu);
}

static void remove_socket(status_server *s)
{
	struct stat st;
	/* Only our own file, since another process may have replaced it since. */
	if (s->socket_path && stat(s->socket_path, &st) == 0 && st.st_dev == s->sock_dev &&
	    st.st_ino == s->sock_ino)
		unlink(s->socket_path);
}

void status_free(status_server *s)
{
	if (!s)
		return;
	fail_pending(s);
	while (s->retiring) {
		listener *l = s->retiring;
		s->retiring = l->next;
		stop_listener(l);
	}
	if (s->tcp_l)
		stop_listener(s->tcp_l);
	if (s->unix_l.mhd)
		MHD_stop_daemon(s->unix_l.mhd);
	remove_socket(s);
	if (s->ev)
		event_free(s->ev);
	if (s->pipe_rd >= 0)
		close(s->pipe_rd);
	if (s->pipe_wr >= 0)
		close(s->pipe_wr);
	pthread_cond_destroy(&s->done);
	pthread_mutex_destroy(&s->mu);
	free(s->status_json);
	free(s->metrics);
	free(s->subs_json);
	free(s->reason);
	free(s->backfills_json);
	util_id_list_free(&s->uids);
	free(s->socket_path);
	free_pem(s->token);
	free(s);
}

/* ---- reloads ---- */

/* A retiring listener stops once it has no connection left, or at its deadline, and never while a
 * request of its waits for the loop (MHD must not stop with a connection suspended). */
static void retire(status_server *s, uint64_t now)
{
	for (listener **p = &s->retiring; *p;) {
		listener *l = *p;
		const union MHD_DaemonInfo *info =
		    MHD_get_daemon_info(l->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
		bool waiting = false;
		pthread_mutex_lock(&s->mu);
		for (const conn_ctx *c = s->pending; c && !waiting; c = c->next)
			waiting = c->l == l;
		pthread_mutex_unlock(&s->mu);
		if (waiting || (now < l->retire_ms && info && info->num_connections)) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		stop_listener(l);
	}
}

/* New TLS files for status.listen. A listener with them takes the listening socket over (a dup of it, so both
 * accept until the old one quiesces). The old one finishes its connections. Files that cannot be read or used
 * leave the old listener as it is. */
static void reload_tls(status_server *s, const cfg *c)
{
	char *cert, *key, err[768];
	if (!read_tls(c, &cert, &key, err, sizeof err)) {
		log_error("status.listen keeps its certificate: the new one cannot be read", "error=\"%s\"",
			  err);
		return;
	}
	listener *old = s->tcp_l;
	bool same = !cert == !old->tls_cert &&
		    (!cert || (strcmp(cert, old->tls_cert) == 0 && strcmp(key, old->tls_key) == 0));
	if (same || !cert != !old->tls_cert) { /* turning HTTPS on or off needs a restart */
		if (!same)
			log_warn("status.tls_cert and status.tls_key: HTTPS on or off takes effect at the "
				 "next restart",
				 "listen=on");
		free_pem(cert);
		free_pem(key);
		return;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(old->mhd, MHD_DAEMON_INFO_LISTEN_FD);
	int fd = info ? fcntl(info->listen_fd, F_DUPFD_CLOEXEC, 0) : -1;
	listener *l = util_xcalloc(1, sizeof(*l));
	if (fd < 0 || !start_listener(l, s, false, fd, cert, key, err, sizeof err)) {
		if (fd < 0) {
			free_pem(cert);
			free_pem(key);
		}
		free(l);
		log_error("status.listen keeps its certificate: the new one cannot be used", "error=\"%s\"",
			  fd < 0 ? strerror(errno) : err);
		return;
	}
	old->quiesced_fd = MHD_quiesce_daemon(old->mhd);
	old->retire_ms = util_now_ms() + (CONNECTION_TIMEOUT_S + 1) * 1000;
	old->next = s->retiring;
	s->retiring = old;
	s->tcp_l = l;
	log_info("status.listen serves the new certificate", "listen=%s", c->status.listen);
}

void status_reload(status_server *s, const cfg *c)
{
	char *token = c->status.token ? util_xstrdup(c->status.token) : NULL, *old;
	pthread_mutex_lock(&s->mu);
	old = s->token;
	s->token = token;
	s->tcp_read = c->status.tcp_read;
	pthread_mutex_unlock(&s->mu);
	free_pem(old);
	if (s->tcp_l)
		reload_tls(s, c);
}

uint64_t status_unauthorized(status_server *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t n = s->unauthorized;
	pthread_mutex_unlock(&s->mu);
	return n;
}

void status_publish_backfills(status_server *s, const char *json)
{
	char *copy = util_xstrdup(json), *old;
	pthread_mutex_lock(&s->mu);
	old = s->backfills_json;
	s->backfills_json = copy;
	pthread_mutex_unlock(&s->mu);
	free(old);
}

void status_publish(status_server *s, const char *status_json, const char *metrics,
		    const char *subscriptions_json, bool ready, const char *reason)
{
	/* Copies made outside the lock keep GETs from waiting on the allocator. */
	char *st = status_json ? util_xstrdup(status_json) : NULL,
	     *me = metrics ? util_xstrdup(metrics) : NULL;
	char *su = subscriptions_json ? util_xstrdup(subscriptions_json) : NULL,
	     *re = reason ? util_xstrdup(reason) : NULL;
	char *old[4];
	pthread_mutex_lock(&s->mu);
	old[0] = s->status_json, old[1] = s->metrics, old[2] = s->subs_json, old[3] = s->reason;
	s->status_json = st, s->metrics = me, s->subs_json = su, s->reason = re;
	s->ready = ready;
	s->published_ms = util_now_ms();
	pthread_mutex_unlock(&s->mu);
	retire(s, util_now_ms());
	for (int i = 0; i < 4; i++)
		free(old[i]);
}

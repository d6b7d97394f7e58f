/* test_status.c: the status server over real sockets (the daemon's event loop on the main thread,
 * an HTTP client on a second one), its pure routing and body checks, and `cdc status`'s HTTP
 * parsing and summary. Runs as any user; the refused-uid case uses a uid nobody has. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cdc/cli/status_cmd.h"
#include "cdc/status/status.h"
#include "decoder/base/log.h"
#include "test.h"

/* ---- pure functions ---- */

static void test_routes(void)
{
	static const struct {
		const char *method, *path;
		status_route route;
		unsigned code;
		const char *name;
	} T[] = {
	    {"GET", "/status", STATUS_ROUTE_STATUS, 0, ""},
	    {"HEAD", "/status", STATUS_ROUTE_STATUS, 0, ""},
	    {"GET", "/metrics", STATUS_ROUTE_METRICS, 0, ""},
	    {"GET", "/subscriptions", STATUS_ROUTE_SUBSCRIPTIONS, 0, ""},
	    {"GET", "/healthz", STATUS_ROUTE_HEALTHZ, 0, ""},
	    {"GET", "/readyz", STATUS_ROUTE_READYZ, 0, ""},
	    {"PUT", "/subscriptions/jobs", STATUS_ROUTE_PUT, 0, "jobs"},
	    {"DELETE", "/subscriptions/a.b-c_9", STATUS_ROUTE_DELETE, 0, "a.b-c_9"},
	    {"PUT", "/subscriptions/123456789012345678901234567890123456789012345678901234567890123",
	     STATUS_ROUTE_PUT, 0, "123456789012345678901234567890123456789012345678901234567890123"},
	    {"PUT", "/subscriptions/1234567890123456789012345678901234567890123456789012345678901234",
	     STATUS_ROUTE_ERROR, 400, ""},
	    {"PUT", "/subscriptions/", STATUS_ROUTE_ERROR, 400, ""},
	    {"PUT", "/subscriptions/a/b", STATUS_ROUTE_ERROR, 400, ""},
	    {"PUT", "/subscriptions/a b", STATUS_ROUTE_ERROR, 400, ""},
	    {"GET", "/subscriptions/jobs", STATUS_ROUTE_ERROR, 405, ""},
	    {"POST", "/subscriptions/jobs", STATUS_ROUTE_ERROR, 405, ""},
	    {"PUT", "/subscriptions", STATUS_ROUTE_ERROR, 405, ""},
	    {"POST", "/status", STATUS_ROUTE_ERROR, 405, ""},
	    {"get", "/status", STATUS_ROUTE_ERROR, 405, ""},
	    {"GET", "/status/", STATUS_ROUTE_ERROR, 404, ""},
	    {"GET", "/", STATUS_ROUTE_ERROR, 404, ""},
	    {"GET", "", STATUS_ROUTE_ERROR, 404, ""},
	    {"GET", "/statusx", STATUS_ROUTE_ERROR, 404, ""},
	    {"GET", "/backfills", STATUS_ROUTE_BACKFILLS, 0, ""},
	    {"POST", "/subscriptions/jobs/backfill", STATUS_ROUTE_BACKFILL, 0, "jobs"},
	    {"DELETE", "/subscriptions/jobs/backfill/4f2a9c1e0b3d5e7f", STATUS_ROUTE_BACKFILL_CANCEL, 0,
	     "jobs"},
	    {"GET", "/subscriptions/jobs/backfill", STATUS_ROUTE_ERROR, 405, ""},
	    {"POST", "/subscriptions/jobs/backfill/4f2a", STATUS_ROUTE_ERROR, 405, ""},
	    {"DELETE", "/subscriptions/jobs/backfill/a b", STATUS_ROUTE_ERROR, 400, ""},
	    {"DELETE", "/subscriptions/jobs/backfill/", STATUS_ROUTE_ERROR, 400, ""},
	    {"POST", "/subscriptions/jobs/backfills", STATUS_ROUTE_ERROR, 405, ""},
	    {"POST", "/subscriptions/a b/backfill", STATUS_ROUTE_ERROR, 400, ""},
	};
	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
		status_match m;
		bool ok = status_route_request(T[i].method, T[i].path, &m);
		CHECK_INT(ok, T[i].code == 0);
		CHECK_INT(m.route, T[i].route);
		CHECK_INT(m.http_status, T[i].code);
		CHECK_STR(m.name, T[i].name);
		CHECK(ok == (m.message[0] == '\0'));
	}
	status_match m;
	status_route_request("PUT", "/subscriptions/a$b", &m);
	CHECK_STR(m.message, "invalid subscription name: expected 1 to 63 characters of A-Z a-z 0-9 _ . -");
	status_route_request("POST", "/status", &m);
	CHECK_STR(m.allow, "GET, HEAD");
	status_route_request("GET", "/subscriptions/x", &m);
	CHECK_STR(m.allow, "PUT, DELETE");
	status_route_request("GET", "/nope", &m);
	CHECK(m.allow == NULL);
}

static void test_body(void)
{
	static const struct {
		const char *body;
		unsigned code;
		const char *message;
	} T[] = {
	    {"{}", 0, ""},
	    {" {\"tables\":[\"public.t\"],\"sink\":\"socket\"}\n", 0, ""},
	    {"", 400, "missing body: expected a JSON object"},
	    {"  \n", 400, "missing body: expected a JSON object"},
	    {"[1]", 400, "invalid body: expected a JSON object"},
	    {"\"x\" ", 400, "invalid body: expected a JSON object"},
	    {"{\"a\":", 400, "invalid JSON body: unexpected end of the body"},
	    {"{} {}", 400, "invalid JSON body at byte 3: unexpected character"},
	    {"{\"a\":tru}", 400, "invalid JSON body at byte 8: boolean expected"},
	};
	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
		status_match m = {0};
		bool ok = status_check_body(T[i].body, strlen(T[i].body), &m);
		CHECK_INT(ok, T[i].code == 0);
		CHECK_INT(m.http_status, T[i].code);
		CHECK_STR(m.message, T[i].message);
	}
	status_match m = {0};
	CHECK(!status_check_body("{}\0", 3, &m));
	CHECK_STR(m.message, "invalid body: contains a NUL byte");
	char *big = util_xmalloc(STATUS_BODY_MAX + 1);
	memset(big, ' ', STATUS_BODY_MAX + 1);
	big[0] = '{', big[STATUS_BODY_MAX - 1] = '}';
	CHECK(status_check_body(big, STATUS_BODY_MAX, &m));
	CHECK(!status_check_body(big, STATUS_BODY_MAX + 1, &m));
	CHECK_INT(m.http_status, 413);
	free(big);
	/* Nesting is bounded: json-c's depth limit, not the stack. */
	char deep[200];
	for (int i = 0; i < 100; i++)
		deep[i] = '[', deep[100 + i] = ']';
	deep[0] = '{';
	CHECK(!status_check_body(deep, sizeof(deep), &m));
	CHECK_INT(m.http_status, 400);
}

static void test_http_parse(void)
{
	static const struct {
		const char *resp;
		bool ok;
		unsigned code;
		const char *body;
	} T[] = {
	    {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef", true, 200, "abc"},
	    {"HTTP/1.1 503 Service Unavailable\r\ncontent-length:2\r\n\r\nno", true, 503, "no"},
	    {"HTTP/1.0 200 OK\r\nX: y\r\n\r\nto the end", true, 200, "to the end"},
	    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n1;x=y\r\nd\r\n0\r\n\r\n", true,
	     200, "abcd"},
	    {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", false, 0, ""},
	    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabc", false, 0, ""},
	    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, 0, ""},
	    {"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n", false, 0, ""},
	    {"SSH-2.0-OpenSSH\r\n\r\n", false, 0, ""},
	    {"", false, 0, ""},
	};
	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
		unsigned code = 0;
		buf body = {0};
		char err[128] = "";
		bool ok = cli_status_http_parse(T[i].resp, strlen(T[i].resp), &code, &body, err, sizeof(err));
		CHECK_INT(ok, T[i].ok);
		if (ok) {
			CHECK_INT(code, T[i].code);
			CHECK_STR(body.data ? body.data : "", T[i].body);
		} else {
			CHECK(err[0] != '\0');
		}
		buf_free(&body);
	}
}

static const char STATUS_JSON[] =
    "{\"version\":\"0.3.0\",\"uptime_s\":3725,\"ready\":true,\"reason\":null,"
    "\"source\":{\"connected\":true,\"slot\":\"cdc_slot\",\"publication\":\"cdc_pub\",\"server_version\":"
    "\"15.8\","
    "\"received_lsn\":\"0/1A2B3C8\",\"flushed_lsn\":\"0/1A2B3C8\",\"server_wal_lsn\":\"0/1A2B400\","
    "\"lag_bytes\":56,\"lag_s\":0.4,\"last_commit_time\":\"2026-11-22T10:00:00.123456Z\",\"wal_status\":"
    "\"reserved\","
    "\"safe_wal_size\":null,\"warnings\":[\"safe_wal_size is low\"]},"
    "\"subscriptions\":[{\"name\":\"jobs\",\"sink\":\"socket\",\"matched\":10,\"delivered\":10,\"head_"
    "offset\":10,"
    "\"acked_offset\":7,\"pending\":3,\"in_flight\":1,\"consumers\":2,\"nacked\":4,\"dead\":0,"
    "\"dropped\":0},"
    "{\"name\":\"paid_orders\",\"sink\":\"kafka\",\"matched\":123456,\"delivered\":123450}],"
    "\"kafka\":{\"in_flight\":6,\"delivered\":123450,\"errors\":0}}\n";

static void test_summary(void)
{
	buf out = {0};
	char err[128];
	CHECK(cli_status_summary(STATUS_JSON, strlen(STATUS_JSON), &out, err, sizeof(err)));
	CHECK_STR(out.data,
		  "cdc 0.3.0  up 1h02m  ready\n"
		  "source  streaming  slot=cdc_slot  server=15.8  received=0/1A2B3C8  flushed=0/1A2B3C8  "
		  "lag=56 B/0.4s  "
		  "wal_status=reserved\n"
		  "warning: safe_wal_size is low\n"
		  "SUBSCRIPTION  SINK    MATCHED  DELIVERED  PENDING  IN_FLIGHT  ACKED  CONSUMERS  NACKED  "
		  "DEAD  DROPPED\n"
		  "jobs          socket       10         10        3          1      7          2       4    "
		  " 0        0\n"
		  "paid_orders   kafka    123456     123450        -          -      -          -       -    "
		  " -        -\n"
		  "kafka   in_flight=6  delivered=123450  errors=0\n");
	buf_reset(&out);
	static const char sparse[] = "{\"ready\":false,\"reason\":\"source: connection \\u001b[31mrefused\","
				     "\"source\":{\"connected\":false,\"lag_bytes\":5368709120}}";
	CHECK(cli_status_summary(sparse, strlen(sparse), &out, err, sizeof(err)));
	CHECK_STR(
	    out.data,
	    "cdc -  not ready: source: connection ?[31mrefused\n"
	    "source  not streaming  slot=-  server=-  received=-  flushed=-  lag=5.0 GiB/-  wal_status=-\n"
	    "no subscriptions\n");
	buf_reset(&out);
	CHECK(!cli_status_summary("[1]", 3, &out, err, sizeof(err)));
	CHECK_STR(err, "the status is not a JSON object (another JSON value)");
	CHECK(!cli_status_summary("{", 1, &out, err, sizeof(err)));
	buf_free(&out);
}

/* ---- a client over real sockets ---- */

static char sock_path[96];

typedef struct answer {
	unsigned code;
	buf raw, body;
} answer;

static void answer_free(answer *a)
{
	buf_free(&a->raw);
	buf_free(&a->body);
	memset(a, 0, sizeof(*a));
}

/* port 0: the Unix socket; else 127.0.0.1:port. */
static int dial(int port)
{
	int fd;
	if (port) {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			perror("connect tcp");
	} else {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
			perror("connect unix");
	}
	struct timeval tv = {.tv_sec = 20};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return; /* the server may close early (413, 403): what it answered is still read */
		p += w, n -= (size_t)w;
	}
}

/* Reads the answer to EOF and parses it. */
static void receive(int fd, answer *a)
{
	char chunk[4096];
	ssize_t n;
	while ((n = read(fd, chunk, sizeof(chunk))) > 0)
		buf_append(&a->raw, chunk, (size_t)n);
	close(fd);
	char err[128];
	if (!cli_status_http_parse(a->raw.data ? a->raw.data : "", a->raw.len, &a->code, &a->body, err,
				   sizeof(err)))
		a->code = 0;
	if (!a->body.data)
		buf_puts(&a->body, "");
}

static unsigned raw_request(int port, const char *req, size_t len, answer *a)
{
	int fd = dial(port);
	send_all(fd, req, len);
	receive(fd, a);
	return a->code;
}

/* With an Authorization header when auth is not NULL. */
static unsigned request_auth(int port, const char *method, const char *path, const char *body,
			     const char *auth, answer *a)
{
	buf req = {0};
	buf_printf(&req, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", method, path);
	if (auth)
		buf_printf(&req, "Authorization: %s\r\n", auth);
	if (body)
		buf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
	buf_puts(&req, "\r\n");
	if (body)
		buf_puts(&req, body);
	raw_request(port, req.data, req.len, a);
	buf_free(&req);
	return a->code;
}

static unsigned request(int port, const char *method, const char *path, const char *body, answer *a)
{
	return request_auth(port, method, path, body, NULL, a);
}

static bool has_header(const answer *a, const char *line)
{
	char *end = a->raw.data ? strstr(a->raw.data, "\r\n\r\n") : NULL;
	char *at = a->raw.data ? strcasestr(a->raw.data, line) : NULL;
	return at && at < end && at[-1] == '\n' && at[strlen(line)] == '\r';
}

/* ---- the daemon's side ---- */

typedef struct fixture {
	struct event_base *base;
	status_server *s;
	int tcp_port;
	/* the last request on_request saw (written on the loop, read by the client after its answer) */
	int nrequests;
	bool put;
	char name[64];
	char *body;
	size_t body_len;
	uid_t uid;
	pid_t pid;
	status_request *held;
} fixture;

static fixture F;

static void answer_later(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	status_answer(F.s, F.held, 200, "{\"applies_from\":\"0/20\"}\n");
	F.held = NULL;
}

/* What the daemon would do: apply and answer at once, at the next transaction boundary ("later"),
 * or never ("hang": the test then stops the server under it). */
static void on_request(void *ctx, status_request *r)
{
	(void)ctx;
	F.nrequests++;
	F.put = r->put;
	snprintf(F.name, sizeof(F.name), "%s", r->name);
	free(F.body);
	F.body = r->body ? util_xstrdup(r->body) : NULL;
	F.body_len = r->body_len;
	F.uid = r->uid;
	F.pid = r->pid;
	if (strcmp(r->name, "later") == 0) {
		F.held = r;
		struct timeval tv = {.tv_usec = 50000};
		event_base_once(F.base, -1, EV_TIMEOUT, answer_later, NULL, &tv);
	} else if (strcmp(r->name, "hang") == 0) {
		F.held = r;
		event_base_loopbreak(F.base);
	} else if (r->put) {
		status_answer(F.s, r, 200, "{\"name\":\"jobs\",\"applies_from\":\"0/1A2B400\"}\n");
	} else {
		status_answer(F.s, r, 200, "{\"deleted\":\"jobs\"}\n");
	}
}

static void safety_stop(evutil_socket_t fd, short what, void *arg)
{
	(void)fd, (void)what, (void)arg;
	fprintf(stderr, "test_status: the client did not finish in time\n");
	test_failed++;
	event_base_loopbreak(F.base);
}

static cfg *make_cfg(const char *extra_status, int tcp)
{
	buf y = {0}, errors = {0};
	buf_printf(&y,
		   "status:\n  socket: %s\n%s%ssubscribers:\n  mode: \"0640\"\nsubscriptions:\n  - name: a\n "
		   "   tables: [public.t]\n",
		   sock_path, tcp ? "  listen: \"127.0.0.1:9\"\n" : "", extra_status);
	cfg *c = cfg_parse("t.yaml", y.data, y.len, &errors);
	if (!c)
		fprintf(stderr, "%s", errors.data);
	else if (tcp) {
		free(c->status.listen); /* port 0, which the config refuses, so that any free port will do */
		c->status.listen = util_xstrdup("127.0.0.1:0");
	}
	buf_free(&y);
	buf_free(&errors);
	return c;
}

static bool fixture_start(const char *extra_status, int tcp)
{
	free(F.body);
	memset(&F, 0, sizeof(F));
	F.base = event_base_new();
	cfg *c = make_cfg(extra_status, tcp);
	char err[256] = "";
	F.s = c ? status_new(c, F.base, on_request, NULL, err, sizeof(err)) : NULL;
	cfg_free(c);
	if (!F.s) {
		fprintf(stderr, "status_new: %s\n", err);
		event_base_free(F.base);
		test_failed++;
		return false;
	}
	F.tcp_port = status_tcp_port(F.s);
	return true;
}

/* Runs the loop on this thread and client on another until the client's last request ("hang")
 * breaks the loop; stopping the server then answers that request 503. */
static void fixture_run(void *(*client)(void *))
{
	pthread_t t;
	struct timeval limit = {.tv_sec = 60};
	event_base_once(F.base, -1, EV_TIMEOUT, safety_stop, NULL, &limit);
	pthread_create(&t, NULL, client, NULL);
	event_base_dispatch(F.base);
	status_free(F.s);
	pthread_join(t, NULL);
	struct stat st;
	CHECK(stat(sock_path, &st) != 0 && errno == ENOENT);
	event_base_free(F.base);
	free(F.body);
	F.body = NULL;
}

/* The client's last request: the daemon never answers it, status_free does. */
static void finish(int port)
{
	answer a = {0};
	CHECK_INT(
	    request_auth(port, "DELETE", "/subscriptions/hang", NULL, "Bearer 0123456789abcdef-token", &a),
	    503);
	CHECK_STR(a.body.data, "{\"error\":\"shutting down\"}\n");
	answer_free(&a);
}

static const char METRICS[] = "# HELP cdc_up 1 while cdc runs\n# TYPE cdc_up gauge\ncdc_up 1\n";
static const char SUBS_JSON[] = "[{\"name\":\"jobs\",\"tables\":[\"public.jobs\"]}]\n";

static void check_get(int port, const char *path, unsigned code, const char *type, const char *body)
{
	answer a = {0};
	CHECK_INT(request(port, "GET", path, NULL, &a), code);
	CHECK_STR(a.body.data, body);
	char line[128];
	snprintf(line, sizeof(line), "Content-Type: %s", type);
	CHECK(has_header(&a, line));
	snprintf(line, sizeof(line), "Content-Length: %zu", strlen(body));
	CHECK(has_header(&a, line));
	answer_free(&a);
}

static void client_gets(int port)
{
	check_get(port, "/status", 200, "application/json", STATUS_JSON);
	check_get(port, "/metrics", 200, "text/plain; version=0.0.4; charset=utf-8", METRICS);
	check_get(port, "/subscriptions", 200, "application/json", SUBS_JSON);
	check_get(port, "/healthz", 200, "text/plain; charset=utf-8", "ok\n");
	check_get(port, "/readyz", 200, "text/plain; charset=utf-8", "ready\n");
	check_get(port, "/status?verbose=1", 200, "application/json", STATUS_JSON);
	check_get(
	    port, "/nope", 404, "application/json",
	    "{\"error\":\"no such endpoint: try /status, /metrics, /healthz, /readyz, /subscriptions\"}\n");
	answer a = {0};
	/* HEAD: the headers of GET (Content-Length included), no body. */
	request(port, "HEAD", "/status", NULL, &a);
	CHECK(a.raw.data && strncmp(a.raw.data, "HTTP/1.1 200 OK\r\n", 17) == 0);
	CHECK(a.raw.data && a.raw.len >= 4 && strcmp(a.raw.data + a.raw.len - 4, "\r\n\r\n") == 0);
	answer_free(&a);
	CHECK_INT(request(port, "POST", "/status", "{}", &a), 405);
	CHECK(has_header(&a, "Allow: GET, HEAD"));
	CHECK_STR(a.body.data, "{\"error\":\"method not allowed: use GET\"}\n");
	answer_free(&a);
	CHECK_INT(request(port, "GET", "/subscriptions/jobs", NULL, &a), 405);
	CHECK(has_header(&a, "Allow: PUT, DELETE"));
	answer_free(&a);
}

static void client_mutations(void)
{
	answer a = {0};
	static const char body[] =
	    "{\"tables\":[\"public.jobs\"],\"operations\":[\"insert\"],\"sink\":\"socket\"}";
	CHECK_INT(request(0, "PUT", "/subscriptions/jobs", body, &a), 200);
	CHECK_STR(a.body.data, "{\"name\":\"jobs\",\"applies_from\":\"0/1A2B400\"}\n");
	CHECK(has_header(&a, "Content-Type: application/json"));
	CHECK_INT(F.nrequests, 1);
	CHECK(F.put);
	CHECK_STR(F.name, "jobs");
	CHECK_STR(F.body, body);
	CHECK_INT(F.body_len, strlen(body));
	CHECK_INT(F.uid, geteuid());
	CHECK_INT(F.pid, getpid());
	answer_free(&a);

	CHECK_INT(request(0, "DELETE", "/subscriptions/jobs", NULL, &a), 200);
	CHECK_STR(a.body.data, "{\"deleted\":\"jobs\"}\n");
	CHECK_INT(F.nrequests, 2);
	CHECK(!F.put);
	CHECK(F.body == NULL);
	answer_free(&a);

	CHECK_INT(request(0, "PUT", "/subscriptions/later", "{}", &a), 200);
	CHECK_STR(a.body.data, "{\"applies_from\":\"0/20\"}\n");
	answer_free(&a);

	/* Refused before the loop sees them. */
	CHECK_INT(request(0, "PUT", "/subscriptions/bad$name", "{}", &a), 400);
	CHECK_STR(
	    a.body.data,
	    "{\"error\":\"invalid subscription name: expected 1 to 63 characters of A-Z a-z 0-9 _ . -\"}\n");
	answer_free(&a);
	CHECK_INT(request(0, "PUT", "/subscriptions/jobs", "{\"tables\":", &a), 400);
	CHECK_STR(a.body.data, "{\"error\":\"invalid JSON body: unexpected end of the body\"}\n");
	answer_free(&a);
	CHECK_INT(F.nrequests, 3);
}

static void client_sizes(void)
{
	/* Exactly the limit is fine; one byte more is 413, by Content-Length or chunked. */
	buf big = {0};
	buf_puts(&big, "{\"tag\":\"");
	while (big.len < STATUS_BODY_MAX - 2)
		buf_putc(&big, 'x');
	buf_puts(&big, "\"}");
	answer a = {0};
	CHECK_INT(request(0, "PUT", "/subscriptions/jobs", big.data, &a), 200);
	CHECK_INT(F.body_len, STATUS_BODY_MAX);
	answer_free(&a);
	buf_putc(&big, ' ');
	CHECK_INT(request(0, "PUT", "/subscriptions/jobs", big.data, &a), 413);
	CHECK_STR(a.body.data, "{\"error\":\"request body too large: at most 64 KiB\"}\n");
	answer_free(&a);

	buf req = {0};
	buf_puts(&req, "PUT /subscriptions/jobs HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
		       "Transfer-Encoding: chunked\r\n\r\n");
	for (size_t off = 0; off < big.len; off += 4096) {
		size_t n = big.len - off < 4096 ? big.len - off : 4096;
		buf_printf(&req, "%zx\r\n", n);
		buf_append(&req, big.data + off, n);
		buf_puts(&req, "\r\n");
	}
	buf_puts(&req, "0\r\n\r\n");
	int before = F.nrequests;
	CHECK_INT(raw_request(0, req.data, req.len, &a), 413);
	CHECK_STR(a.body.data, "{\"error\":\"request body too large: at most 64 KiB\"}\n");
	CHECK_INT(F.nrequests, before);
	answer_free(&a);
	buf_free(&req);
	buf_free(&big);
}

/* A malformed request gets 400 and its connection closed; a client connected before it, and
 * one after, are served. */
static void client_malformed(void)
{
	int early = dial(0);
	answer a = {0};
	static const struct {
		const char *req;
		unsigned code; /* 0: closed without an answer */
	} T[] = {
	    {"BLAH BLAH BLAH\r\n\r\n", 400},
	    {"GET /status\r\n\r\n", 400},
	    {"GET /status HTTP/1.1\r\nbad header line\r\n\r\n", 400},
	    {"PUT /subscriptions/x HTTP/1.1\r\nHost: t\r\nContent-Length: zz\r\n\r\n", 400},
	    {"GET /status HTTP/9.9\r\nHost: t\r\n\r\n", 505},
	    {"BLAH\r\n\r\n", 0},
	};
	for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
		CHECK_INT(raw_request(0, T[i].req, strlen(T[i].req), &a), T[i].code);
		if (!T[i].code)
			CHECK_INT(a.raw.len, 0);
		answer_free(&a);
	}
	static const char get[] = "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
	send_all(early, get, strlen(get));
	receive(early, &a);
	CHECK_INT(a.code, 200);
	CHECK_STR(a.body.data, "ok\n");
	answer_free(&a);
	check_get(0, "/healthz", 200, "text/plain; charset=utf-8", "ok\n");
}

static void *client_a(void *arg)
{
	(void)arg;
	client_gets(0);
	client_gets(F.tcp_port);
	client_mutations();
	client_sizes();
	client_malformed();

	answer a = {0};
	CHECK_INT(request(F.tcp_port, "PUT", "/subscriptions/jobs", "{}", &a), 403);
	CHECK_STR(a.body.data,
		  "{\"error\":\"changing subscriptions over TCP needs status.tcp_control: true; use "
		  "the Unix socket\"}\n");
	answer_free(&a);
	CHECK_INT(request(F.tcp_port, "DELETE", "/subscriptions/jobs", NULL, &a), 403);
	answer_free(&a);

	/* The `cdc status` client against the real server. */
	unsigned code = 0;
	buf body = {0};
	char err[256];
	CHECK(cli_status_http_get(&(cli_endpoint){sock_path}, "/status", &code, &body, err, sizeof(err)));
	CHECK_INT(code, 200);
	CHECK_STR(body.data, STATUS_JSON);
	buf_free(&body);

	/* Nothing published for 10 s: the loop is taken for stuck. */
	sleep(11);
	check_get(0, "/healthz", 503, "text/plain; charset=utf-8", "event loop stalled\n");
	finish(0);
	return NULL;
}

static void test_server_default(void)
{
	if (!fixture_start("", 1))
		return;
	status_publish(F.s, STATUS_JSON, METRICS, SUBS_JSON, true, NULL);
	struct stat st;
	CHECK(stat(sock_path, &st) == 0 && S_ISSOCK(st.st_mode));
	CHECK_INT(st.st_mode & 07777, 0640);
	CHECK(F.tcp_port > 0);

	/* A second server on a live socket is refused, the running one untouched. */
	cfg *c = make_cfg("", 0);
	char err[256] = "", want[256];
	CHECK(status_new(c, F.base, on_request, NULL, err, sizeof(err)) == NULL);
	snprintf(want, sizeof(want),
		 "status socket %s: another process is listening on it (is cdc already running?)", sock_path);
	CHECK_STR(err, want);
	cfg_free(c);
	fixture_run(client_a);
}

#define TOKEN "0123456789abcdef-token"

/* control_uids excludes us; tcp_control lets TCP mutate with the token; tcp_read: probes (the probes
 * without it, the rest with it); not ready. */
static void *client_b(void *arg)
{
	(void)arg;
	answer a = {0};
	char want[160];
	CHECK_INT(request(0, "PUT", "/subscriptions/jobs", "{}", &a), 403);
	snprintf(want, sizeof(want),
		 "{\"error\":\"uid %lu may not change subscriptions (status.control_uids)\"}\n",
		 (unsigned long)geteuid());
	CHECK_STR(a.body.data, want);
	answer_free(&a);
	CHECK_INT(request(0, "DELETE", "/subscriptions/jobs", NULL, &a), 403);
	answer_free(&a);
	CHECK_INT(F.nrequests, 0);
	/* Over TCP: without the token, or with another, 401 before the loop sees it. */
	CHECK_INT(request(F.tcp_port, "PUT", "/subscriptions/jobs", "{}", &a), 401);
	CHECK_STR(a.body.data, "{\"error\":\"this endpoint needs status.token over status.listen: send "
			       "Authorization: Bearer TOKEN\"}\n");
	CHECK(has_header(&a, "WWW-Authenticate: Bearer realm=\"cdc\""));
	answer_free(&a);
	CHECK_INT(request_auth(F.tcp_port, "DELETE", "/subscriptions/jobs", NULL, "Bearer " TOKEN "x", &a),
		  401);
	CHECK_STR(a.body.data, "{\"error\":\"the bearer token is not status.token\"}\n");
	CHECK(has_header(&a, "WWW-Authenticate: Bearer realm=\"cdc\", error=\"invalid_token\""));
	answer_free(&a);
	CHECK_INT(request_auth(F.tcp_port, "PUT", "/subscriptions/jobs", "{}", "Basic " TOKEN, &a), 401);
	answer_free(&a);
	CHECK_INT(F.nrequests, 0);
	CHECK_INT(request_auth(F.tcp_port, "PUT", "/subscriptions/jobs", "{}", "bearer   " TOKEN, &a), 200);
	CHECK_INT(F.nrequests, 1);
	CHECK_INT(F.uid, (uid_t)-1);
	answer_free(&a);
	/* The Unix socket asks for no token (its mode and control_uids decide). */
	check_get(0, "/readyz", 503, "text/plain; charset=utf-8",
		  "source not connected: connection refused\n");
	check_get(0, "/metrics", 200, "text/plain; version=0.0.4; charset=utf-8", METRICS);
	/* tcp_read: probes: the probes without the token, the rest with it. */
	check_get(F.tcp_port, "/healthz", 200, "text/plain; charset=utf-8", "ok\n");
	CHECK_INT(request(F.tcp_port, "GET", "/readyz", NULL, &a), 503);
	answer_free(&a);
	static const char *const guarded[] = {"/metrics", "/status", "/subscriptions", "/backfills"};
	for (size_t i = 0; i < sizeof guarded / sizeof *guarded; i++) {
		CHECK_INT(request(F.tcp_port, "GET", guarded[i], NULL, &a), 401);
		answer_free(&a);
		CHECK_INT(request_auth(F.tcp_port, "GET", guarded[i], NULL, "Bearer " TOKEN, &a), 200);
		answer_free(&a);
	}
	CHECK_INT(status_unauthorized(F.s), 7);

	/* `cdc status -s http://HOST:PORT --token-file FILE`'s client: the token from the file. */
	char url[64], tokfile[] = "/tmp/cdc-test-token-XXXXXX", err[512];
	snprintf(url, sizeof url, "http://127.0.0.1:%d", F.tcp_port);
	int fd = mkstemp(tokfile);
	CHECK(fd >= 0 && write(fd, TOKEN "\n", strlen(TOKEN) + 1) == (ssize_t)strlen(TOKEN) + 1);
	close(fd);
	unsigned code = 0;
	buf body = {0};
	CHECK(cli_status_http_get(&(cli_endpoint){url, tokfile}, "/metrics", &code, &body, err, sizeof err));
	CHECK_INT(code, 200);
	CHECK_STR(body.data, METRICS);
	buf_reset(&body);
	CHECK(cli_status_http_get(&(cli_endpoint){url}, "/metrics", &code, &body, err, sizeof err));
	CHECK_INT(code, 401);
	buf_reset(&body);
	unlink(tokfile);
	CHECK(!cli_status_http_get(&(cli_endpoint){url, tokfile}, "/metrics", &code, &body, err, sizeof err));
	char want_err[128];
	snprintf(want_err, sizeof want_err, "%s: no such file", tokfile);
	CHECK_STR(err, want_err);
	static const char *const bad_urls[] = {"http://127.0.0.1", "http://:80", "http://[::1]80",
					       "http://h:123456", "https://h:80/x"};
	for (size_t i = 0; i < sizeof bad_urls / sizeof *bad_urls; i++) {
		CHECK(!cli_status_http_get(&(cli_endpoint){bad_urls[i]}, "/metrics", &code, &body, err,
					   sizeof err));
		snprintf(want_err, sizeof want_err,
			 "%s: expected http://HOST:PORT or https://HOST:PORT (status.listen)", bad_urls[i]);
		CHECK_STR(err, want_err);
	}
	buf_free(&body);
	finish(F.tcp_port);
	return NULL;
}

/* Authorization header values against a token: the scheme in any case, spaces, the length checked
 * before anything is compared. */
static void test_bearer(void)
{
	static const char token[] = "s3cr3t-token-0123456789";
	static const struct {
		const char *header;
		bool ok;
	} T[] = {
	    {"Bearer s3cr3t-token-0123456789", true},
	    {"bearer s3cr3t-token-0123456789", true},
	    {"BEARER \t s3cr3t-token-0123456789", true},
	    {"Bearer s3cr3t-token-012345678", false},
	    {"Bearer s3cr3t-token-01234567890", false},
	    {"Bearer S3cr3t-token-0123456789", false},
	    {"Bearer  ", false},
	    {"Bearer", false},
	    {"Bearers3cr3t-token-0123456789", false},
	    {"Basic s3cr3t-token-0123456789", false},
	    {"s3cr3t-token-0123456789", false},
	    {"", false},
	};
	for (size_t i = 0; i < sizeof T / sizeof *T; i++)
		if (status_bearer_ok(T[i].header, token) != T[i].ok) {
			test_failed++;
			fprintf(stderr, "status_bearer_ok(\"%s\") is not %d\n", T[i].header, T[i].ok);
		} else {
			test_passed++;
		}
	CHECK(!status_bearer_ok(NULL, token) && !status_bearer_ok("Bearer x", NULL));
	buf big = {0};
	buf_puts(&big, "Bearer ");
	while (big.len <= STATUS_AUTH_MAX)
		buf_putc(&big, 'a');
	char *long_token = util_xstrdup(big.data + 7);
	CHECK(!status_bearer_ok(big.data, long_token)); /* refused unread: over STATUS_AUTH_MAX */
	big.len = STATUS_AUTH_MAX;
	big.data[big.len] = '\0';
	long_token[STATUS_AUTH_MAX - 7] = '\0';
	CHECK(status_bearer_ok(big.data, long_token)); /* at the limit */
	free(long_token);
	buf_free(&big);
}

static void test_server_restricted(void)
{
	char extra[160];
	snprintf(extra, sizeof(extra),
		 "  tcp_control: true\n  token: " TOKEN "\n  tcp_read: probes\n  control_uids: [%lu]\n",
		 (unsigned long)geteuid() + 4242);
	if (!fixture_start(extra, 1))
		return;
	status_publish(F.s, STATUS_JSON, METRICS, SUBS_JSON, false,
		       "source not connected: connection refused");
	fixture_run(client_b);
}

/* Nothing published yet. */
static void *client_c(void *arg)
{
	(void)arg;
	check_get(0, "/status", 503, "application/json",
		  "{\"error\":\"starting: no status published yet\"}\n");
	check_get(0, "/metrics", 503, "text/plain; version=0.0.4; charset=utf-8",
		  "starting: no metrics published yet\n");
	check_get(0, "/readyz", 503, "text/plain; charset=utf-8", "starting\n");
	check_get(0, "/healthz", 200, "text/plain; charset=utf-8", "ok\n");
	finish(0);
	return NULL;
}

/* A stale socket file (nobody listening) is replaced; a file that is not a socket is refused. */
static void test_socket_files(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	close(fd);
	if (fixture_start("", 0)) {
		CHECK_INT(F.tcp_port, 0);
		fixture_run(client_c);
	}

	FILE *f = fopen(sock_path, "w");
	fclose(f);
	cfg *c = make_cfg("", 0);
	struct event_base *base = event_base_new();
	char err[256] = "", want[256];
	CHECK(status_new(c, base, on_request, NULL, err, sizeof(err)) == NULL);
	snprintf(want, sizeof(want), "status socket %s: exists and is not a socket", sock_path);
	CHECK_STR(err, want);
	struct stat st;
	CHECK(stat(sock_path, &st) == 0 && S_ISREG(st.st_mode));
	unlink(sock_path);
	event_base_free(base);
	cfg_free(c);
}

int main(void)
{
	log_setup(LOG_LEVEL_ERROR, LOG_FORMAT_TEXT);
	char dir[] = "/tmp/cdc-test-status-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(sock_path, sizeof(sock_path), "%s/status.sock", dir);
	test_routes();
	test_body();
	test_http_parse();
	test_bearer();
	test_summary();
	test_socket_files();
	test_server_restricted();
	test_server_default();
	rmdir(dir);
	return TEST_SUMMARY("test_status");
}

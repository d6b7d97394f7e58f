/* See status_cmd.h. The server always sends Content-Length. The client also reads chunked answers and answers
 * without a length (read to EOF), as any HTTP/1.1 peer may send them. */
#include "cdc/cli/status_cmd.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cdc/cli/backfill_cmd.h"
#include "cdc/cli/cli.h"
#include "decoder/base/json.h"
#include "decoder/base/net.h"
#include "decoder/base/tls.h"
#include "decoder/base/util.h"
#include "sinks/modules.h"

#define TIMEOUT_S 10
#define ANSWER_MAX (64u << 20) /* a /status this large means something is wrong */

static const char usage[] =
    "usage: cdc status [-c FILE | -s SOCKET | -s URL [--token-file FILE] [--cacert FILE]] [--json]\n"
    "                  [--wait SECONDS]\n"
    "\n"
    "Asks a running cdc for its status (GET /status on the status socket) and prints a summary:\n"
    "the source (streaming, slot, server, positions, lag), one row per subscription, and Kafka.\n"
    "Exit 0, or 1 if cdc cannot be reached or answers with an error.\n"
    "\n"
    "  -c, --config FILE   take the socket from FILE's status.socket\n"
    "  -s, --socket PATH   the status socket (default: $CDC_STATUS_SOCKET, else " CFG_DEFAULT_STATUS_SOCKET
    ")\n"
    "  -s, --socket URL    status.listen instead: http://HOST:PORT or https://HOST:PORT\n"
    "      --token-file FILE  send the bearer token in FILE (status.token) to status.listen\n"
    "      --cacert FILE   the CA certificates that signed status.listen's (https; default: the system's)\n"
    "      --json          print the JSON of GET /status as it is\n"
    "      --wait SECONDS  first wait up to SECONDS for cdc to stream (its status socket, then\n"
    "                      GET /readyz); exit 1 if it does not in time\n";

/* ---- HTTP ---- */

static const char *find(const char *p, size_t len, const char *needle)
{
	return memmem(p, len, needle, strlen(needle));
}

/* The value of header name in the header block [p, end), or NULL. *vlen gets its length. */
static const char *header(const char *p, const char *end, const char *name, size_t *vlen)
{
	size_t n = strlen(name);
	while (p < end) {
		const char *eol = find(p, (size_t)(end - p), "\r\n");
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > n && p[n] == ':' && strncasecmp(p, name, n) == 0) {
			const char *v = p + n + 1;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			*vlen = (size_t)(eol - v);
			return v;
		}
		p = eol + 2;
	}
	return NULL;
}

/* Chunks are HEX[;ext]\r\n DATA\r\n ... 0\r\n. Trailers after the last chunk are ignored. */
static bool dechunk(const char *p, const char *end, buf *body, char *err, size_t errlen)
{
	for (;;) {
		const char *eol = find(p, (size_t)(end - p), "\r\n"), *q = p;
		size_t n = 0;
		for (; eol && q < eol && util_hex_digit(*q) >= 0 && n <= ANSWER_MAX; q++)
			n = n * 16 + (size_t)util_hex_digit(*q);
		if (!eol || q == p || (q < eol && *q != ';') || n > ANSWER_MAX)
			return util_errf(err, errlen, "malformed chunked body");
		p = eol + 2;
		if (n == 0)
			return true;
		if ((size_t)(end - p) < n + 2 || memcmp(p + n, "\r\n", 2) != 0)
			return util_errf(err, errlen, "truncated chunked body");
		buf_append(body, p, n);
		p += n + 2;
	}
}

bool cli_status_http_parse(const char *resp, size_t len, unsigned *http_status, buf *body, char *err,
			   size_t errlen)
{
	const char *end = resp + len;
	if (len < 12 || memcmp(resp, "HTTP/1.", 7) != 0 || resp[8] != ' ' || resp[9] < '1' || resp[9] > '5' ||
	    resp[10] < '0' || resp[10] > '9' || resp[11] < '0' || resp[11] > '9')
		return util_errf(err, errlen, "not an HTTP answer");
	*http_status = (unsigned)((resp[9] - '0') * 100 + (resp[10] - '0') * 10 + (resp[11] - '0'));
	const char *hdr_end = find(resp, len, "\r\n\r\n");
	if (!hdr_end)
		return util_errf(err, errlen, "truncated HTTP answer (no end of headers)");
	const char *p = hdr_end + 4, *hdrs = find(resp, len, "\r\n") + 2;
	size_t vlen;
	const char *te = header(hdrs, hdr_end + 2, "Transfer-Encoding", &vlen);
	if (te && vlen == 7 && strncasecmp(te, "chunked", 7) == 0)
		return dechunk(p, end, body, err, errlen);
	const char *cl = header(hdrs, hdr_end + 2, "Content-Length", &vlen);
	if (cl) {
		unsigned long long n = strtoull(cl, NULL, 10);
		if (n > (unsigned long long)(end - p))
			return util_errf(err, errlen, "truncated HTTP answer (%zu of %llu bytes)",
					 (size_t)(end - p), n);
		end = p + n;
	}
	buf_append(body, p, (size_t)(end - p));
	return true;
}

/* One connection to the status endpoints. It is a Unix socket, or status.listen over TCP, maybe TLS. */
typedef struct http_conn {
	int fd;
	tls_conn *tls;	/* https */
	char host[300]; /* the Host header, HOST:PORT over TCP */
} http_conn;

/* http[s]://HOST:PORT[/] (HOST a name, an IPv4 address or [IPv6]) into host and port. False with err when url
 * is not one. */
static bool parse_url(const char *url, char *host, size_t hostlen, char *port, bool *tls, char *err,
		      size_t errlen)
{
	*tls = strncmp(url, "https://", 8) == 0;
	const char *h = url + (*tls ? 8 : 7), *end;
	if (*h == '[')
		end = strchr(h, ']'), h++;
	else
		end = strrchr(h, ':');
	const char *colon = end && *end == ']' ? end + 1 : end;
	size_t hn = end ? (size_t)(end - h) : 0,
	       pn = colon && *colon == ':' ? strspn(colon + 1, "0123456789") : 0;
	const char *rest = pn ? colon + 1 + pn : NULL;
	if (!hn || hn >= hostlen || !pn || pn > 5 || (*rest && strcmp(rest, "/") != 0))
		return util_errf(err, errlen,
				 "%s: expected http://HOST:PORT or https://HOST:PORT (status.listen)", url);
	memcpy(host, h, hn);
	host[hn] = '\0';
	memcpy(port, colon + 1, pn);
	port[pn] = '\0';
	return true;
}

static bool http_open(const cli_endpoint *ep, http_conn *c, char *err, size_t errlen)
{
	*c = (http_conn){.fd = -1};
	if (!cli_is_url(ep->where)) {
		snprintf(c->host, sizeof c->host, "cdc");
		c->fd = cli_connect(ep->where, CLI_STATUS_SOCKET, TIMEOUT_S * 1000, err, errlen);
		return c->fd >= 0;
	}
	char host[256], port[6], why[1024];
	bool tls;
	if (!parse_url(ep->where, host, sizeof host, port, &tls, err, errlen))
		return false;
	snprintf(c->host, sizeof c->host, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	if ((c->fd = net_tcp_connect_timeout(host, port, TIMEOUT_S * 1000, why, sizeof why)) < 0)
		return util_errf(err, errlen, "cannot connect to status.listen at %s", why);
	if (tls && !(c->tls = tls_open(c->fd, host, ep->cacert, why, sizeof why)))
		return util_errf(err, errlen, "%s: %s", ep->where, why);
	if (c->tls && tls_verdict(c->tls, true, why, sizeof why))
		return util_errf(err, errlen,
				 "%s: status.listen's certificate is refused: %s (--cacert names its CA)",
				 ep->where, why);
	return true;
}

static void http_close(http_conn *c)
{
	tls_close(c->tls);
	if (c->fd >= 0)
		close(c->fd);
}

static bool http_send(http_conn *c, const buf *req)
{
	if (c->tls)
		return tls_write_all(c->tls, req->data, req->len);
	for (size_t off = 0; off < req->len;) {
		ssize_t n = send(c->fd, req->data + off, req->len - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return false;
		off += (size_t)n;
	}
	return true;
}

static bool read_all(http_conn *c, buf *resp, char *err, size_t errlen)
{
	for (;;) {
		buf_reserve(resp, 65536);
		size_t room = resp->cap - resp->len - 1;
		ssize_t n = c->tls ? tls_read(c->tls, resp->data + resp->len, room)
				   : read(c->fd, resp->data + resp->len, room);
		if (n == 0)
			return true;
		if (n < 0 && !c->tls && errno == EINTR)
			continue;
		if (n < 0)
			return util_errf(err, errlen, "reading the answer: %s",
					 c->tls		   ? "TLS error"
					 : errno == EAGAIN ? "timed out"
							   : strerror(errno));
		resp->len += (size_t)n;
		resp->data[resp->len] = '\0';
		if (resp->len > ANSWER_MAX)
			return util_errf(err, errlen, "the answer is larger than %u MiB", ANSWER_MAX >> 20);
	}
}

bool cli_status_http_get(const cli_endpoint *ep, const char *path, unsigned *http_status, buf *body,
			 char *err, size_t errlen)
{
	return cli_status_http_request(ep, "GET", path, NULL, http_status, body, err, errlen);
}

bool cli_status_http_request(const cli_endpoint *ep, const char *method, const char *path,
			     const char *req_body, unsigned *http_status, buf *body, char *err, size_t errlen)
{
	http_conn c;
	char *token = NULL;
	buf req = {0}, resp = {0};
	bool ok = false;
	if (ep->token_file && !(token = cfg_secret_read(ep->token_file, err, errlen)))
		return false;
	if (!http_open(ep, &c, err, errlen))
		goto out;
	buf_printf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", method, path, c.host);
	if (token)
		buf_printf(&req, "Authorization: Bearer %s\r\n", token);
	if (req_body)
		buf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			   strlen(req_body), req_body);
	else
		buf_puts(&req, "\r\n");
	if (!http_send(&c, &req)) {
		util_errf(err, errlen, "sending to %s: %s", ep->where, c.tls ? "TLS error" : strerror(errno));
		goto out;
	}
	if (!read_all(&c, &resp, err, errlen))
		goto out;
	ok = cli_status_http_parse(resp.data ? resp.data : "", resp.len, http_status, body, err, errlen);
out:
	http_close(&c);
	if (token)
		explicit_bzero(token, strlen(token));
	free(token);
	if (req.data)
		explicit_bzero(req.data, req.len); /* it holds the token */
	buf_free(&req);
	buf_free(&resp);
	return ok;
}

/* ---- the summary ---- */

/* A field as text (json_field_text). */
static const char *field(json_object *o, const char *key, char *out, size_t n)
{
	return json_field_text(o, key, out, n);
}

static json_object *member(json_object *o, const char *key, json_type type)
{
	json_object *v = NULL;
	if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type))
		return NULL;
	return v;
}

static void put_duration(buf *out, int64_t s)
{
	if (s < 60)
		buf_printf(out, "%" PRId64 "s", s);
	else if (s < 3600)
		buf_printf(out, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		buf_printf(out, "%" PRId64 "h%02" PRId64 "m", s / 3600, s % 3600 / 60);
	else
		buf_printf(out, "%" PRId64 "d%02" PRId64 "h", s / 86400, s % 86400 / 3600);
}

static void put_bytes(buf *out, json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_int);
	if (!v) {
		buf_puts(out, "-");
		return;
	}
	int64_t b = json_object_get_int64(v);
	if (b < 1024 && b > -1024)
		buf_printf(out, "%" PRId64 " B", b);
	else if (b < (1 << 20))
		buf_printf(out, "%.1f KiB", (double)b / 1024);
	else if (b < (1 << 30))
		buf_printf(out, "%.1f MiB", (double)b / (1 << 20));
	else
		buf_printf(out, "%.1f GiB", (double)b / (1 << 30));
}

static void summary_head(buf *out, json_object *root)
{
	char f[256];
	buf_printf(out, "cdc %s", field(root, "version", f, sizeof(f)));
	json_object *up = member(root, "uptime_s", json_type_int);
	if (up) {
		buf_puts(out, "  up ");
		put_duration(out, json_object_get_int64(up));
	}
	json_object *ready = member(root, "ready", json_type_boolean);
	if (ready && json_object_get_boolean(ready))
		buf_puts(out, "  ready\n");
	else
		buf_printf(out, "  not ready: %s\n", field(root, "reason", f, sizeof(f)));
}

static void summary_source(buf *out, json_object *root)
{
	json_object *src = member(root, "source", json_type_object);
	json_object *conn = member(src, "connected", json_type_boolean);
	json_object *standby = member(src, "standby", json_type_boolean);
	char f[256];
	buf_printf(out, "source  %s",
		   !conn					 ? "-"
		   : json_object_get_boolean(conn)		 ? "streaming"
		   : standby && json_object_get_boolean(standby) ? "standby"
								 : "not streaming");
	buf_printf(out, "  slot=%s", field(src, "slot", f, sizeof(f)));
	buf_printf(out, "  server=%s", field(src, "server_version", f, sizeof(f)));
	buf_printf(out, "  received=%s", field(src, "received_lsn", f, sizeof(f)));
	buf_printf(out, "  flushed=%s", field(src, "flushed_lsn", f, sizeof(f)));
	buf_puts(out, "  lag=");
	put_bytes(out, src, "lag_bytes");
	json_object *lag_s = member(src, "lag_s", json_type_double);
	if (!lag_s)
		lag_s = member(src, "lag_s", json_type_int);
	if (lag_s)
		buf_printf(out, "/%.1fs", json_object_get_double(lag_s));
	else
		buf_puts(out, "/-");
	buf_printf(out, "  wal_status=%s", field(src, "wal_status", f, sizeof(f)));
	json_object *role = member(src, "server_role", json_type_string);
	if (role && strcmp(json_object_get_string(role), "standby") == 0)
		buf_puts(out, "  reading a standby");
	json_object *promotions = member(src, "promotions", json_type_int);
	if (promotions && json_object_get_int64(promotions) > 0)
		buf_printf(out, "  timeline=%s  promotions=%" PRId64, field(src, "timeline", f, sizeof(f)),
			   json_object_get_int64(promotions));
	/* PostgreSQL 17 and 18's slot health, when there is something to say */
	if (member(src, "invalidation_reason", json_type_string))
		buf_printf(out, "  invalidated=%s", field(src, "invalidation_reason", f, sizeof(f)));
	if (member(src, "inactive_since", json_type_string))
		buf_printf(out, "  inactive_since=%s", field(src, "inactive_since", f, sizeof(f)));
	json_object *idle = member(src, "idle_replication_slot_timeout_s", json_type_int);
	if (idle && json_object_get_int64(idle) > 0) {
		buf_puts(out, "  idle_timeout=");
		put_duration(out, json_object_get_int64(idle));
	}
	buf_putc(out, '\n');
	json_object *fo = member(src, "failover", json_type_object);
	if (fo) {
		json_object *ready = member(fo, "ready", json_type_boolean);
		buf_printf(out, "failover  %s",
			   !ready			    ? "not checked yet"
			   : json_object_get_boolean(ready) ? "ready"
							    : "NOT READY: ");
		if (ready && !json_object_get_boolean(ready))
			buf_puts(out, field(fo, "reason", f, sizeof(f)));
		if (ready)
			buf_printf(out, "  synchronized_standby_slots=%s",
				   field(fo, "synchronized_standby_slots", f, sizeof(f)));
		buf_putc(out, '\n');
	}
	json_object *warnings = member(src, "warnings", json_type_array);
	for (size_t i = 0; warnings && i < json_object_array_length(warnings); i++) {
		const char *w = json_object_get_string(json_object_array_get_idx(warnings, i));
		buf_printf(out, "warning: %s\n", w ? w : "-");
	}
}

#define NCOLS 11
static const char *const COLS[NCOLS] = {"name",	   "sink",	"matched",	"delivered",
					"pending", "in_flight", "acked_offset", "consumers",
					"nacked",  "dead",	"dropped"};
static const char *const HEADS[NCOLS] = {"SUBSCRIPTION", "SINK",      "MATCHED", "DELIVERED",
					 "PENDING",	 "IN_FLIGHT", "ACKED",	 "CONSUMERS",
					 "NACKED",	 "DEAD",      "DROPPED"};

static void put_row(buf *out, char cells[NCOLS][64], const int width[NCOLS])
{
	for (int c = 0; c < NCOLS; c++)
		/* Names left-aligned, numbers right-aligned, as a table of figures reads best. */
		buf_printf(out, c < 2 ? "%-*s%s" : "%*s%s", width[c], cells[c], c + 1 < NCOLS ? "  " : "\n");
}

/* Under a socket subscription's row come its consumers, then its dead letters' readers. */
#define NCCOLS 10
static const char *const CHEADS[NCCOLS] = {"CONSUMER", "PID",	    "UID",	 "READS", "MODE",
					   "STATE",    "IN_FLIGHT", "DELIVERED", "ACKED", "CONNECTED"};
static const bool CRIGHT[NCCOLS] = {false, true, true, false, false, false, true, true, true, false};

static void summary_consumers(buf *out, json_object *sub)
{
	json_object *lists[2] = {member(sub, "attached", json_type_array),
				 member(sub, "dead_letter_readers", json_type_array)};
	size_t n = 0;
	for (int k = 0; k < 2; k++)
		n += lists[k] ? json_object_array_length(lists[k]) : 0;
	if (!n)
		return;
	char(*cells)[NCCOLS][64] = util_xcalloc(n + 1, sizeof(*cells));
	int width[NCCOLS] = {0};
	for (int col = 0; col < NCCOLS; col++)
		snprintf(cells[0][col], sizeof(cells[0][col]), "%s", CHEADS[col]);
	size_t row = 1;
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; lists[k] && i < json_object_array_length(lists[k]); i++, row++) {
			json_object *c = json_object_array_get_idx(lists[k], i);
			json_object *active = member(c, "active", json_type_boolean);
			json_object *reading = member(c, "reading", json_type_boolean);
			static const char *const keys[NCCOLS] = {
			    "name", "pid",	 "uid",	      NULL,    "mode",
			    NULL,   "in_flight", "delivered", "acked", "connected_since"};
			for (int col = 0; col < NCCOLS; col++)
				if (keys[col])
					field(c, keys[col], cells[row][col], 64);
			snprintf(cells[row][3], 64, "%s", k ? "dead letters" : "events");
			snprintf(cells[row][5], 64, "%s",
				 reading && !json_object_get_boolean(reading) ? "not reading"
				 : active && json_object_get_boolean(active)  ? "active"
									      : "waiting");
		}
	for (size_t i = 0; i <= n; i++)
		for (int col = 0; col < NCCOLS; col++)
			if ((int)strlen(cells[i][col]) > width[col])
				width[col] = (int)strlen(cells[i][col]);
	for (size_t i = 0; i <= n; i++) {
		buf_puts(out, "  ");
		for (int col = 0; col + 1 < NCCOLS; col++)
			buf_printf(out, CRIGHT[col] ? "%*s  " : "%-*s  ", width[col], cells[i][col]);
		buf_printf(out, "%s\n", cells[i][NCCOLS - 1]);
	}
	free(cells);
}

static void summary_subscriptions(buf *out, json_object *root)
{
	json_object *subs = member(root, "subscriptions", json_type_array);
	size_t n = subs ? json_object_array_length(subs) : 0;
	if (!n) {
		buf_puts(out, "no subscriptions\n");
		return;
	}
	char(*cells)[NCOLS][64] = util_xcalloc(n + 1, sizeof(*cells));
	int width[NCOLS] = {0};
	for (int c = 0; c < NCOLS; c++)
		snprintf(cells[0][c], sizeof(cells[0][c]), "%s", HEADS[c]);
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_array_get_idx(subs, i);
		for (int c = 0; c < NCOLS; c++)
			field(json_object_is_type(s, json_type_object) ? s : NULL, COLS[c], cells[i + 1][c],
			      64);
	}
	for (size_t i = 0; i <= n; i++)
		for (int c = 0; c < NCOLS; c++)
			if ((int)strlen(cells[i][c]) > width[c])
				width[c] = (int)strlen(cells[i][c]);
	for (size_t i = 0; i <= n; i++) {
		put_row(out, cells[i], width);
		if (i)
			summary_consumers(out, json_object_array_get_idx(subs, i - 1));
	}
	free(cells);
}

/* source.signal_table's counts, and the last signal with what came of it. */
static void summary_signals(buf *out, json_object *root)
{
	json_object *g = member(root, "signals", json_type_object);
	json_object *last = member(g, "last", json_type_object);
	json_object *bfs = member(last, "backfills", json_type_array);
	char f[5][128], why[1024];
	if (!g)
		return;
	buf_printf(out, "signals %s: %s received, %s refused, %s backfills started, %s stopped\n",
		   field(g, "table", f[0], 128), field(g, "received", f[1], 128),
		   field(g, "refused", f[2], 128), field(g, "backfills_started", f[3], 128),
		   field(g, "backfills_stopped", f[4], 128));
	if (!last)
		return;
	bool stop = strcmp(field(last, "type", f[1], 128), "stop-snapshot") == 0;
	buf_printf(out, "  last %s (%s at %s): ", field(last, "id", f[0], 128), f[1],
		   field(last, "lsn", f[2], 128));
	if (member(last, "error", json_type_string))
		buf_printf(out, "refused: %s\n", field(last, "error", why, sizeof(why)));
	else if (!bfs || !json_object_array_length(bfs))
		buf_puts(out, stop ? "no backfill to stop\n" : "no backfill\n");
	for (size_t i = 0; bfs && i < json_object_array_length(bfs); i++) {
		json_object *b = json_object_array_get_idx(bfs, i);
		bool failed = member(b, "error", json_type_string) != NULL;
		buf_printf(out, "%s%s %s of %s%s%s", i ? ", " : "", stop ? "stopped backfill" : "backfill",
			   field(b, "backfill", f[3], 128), field(b, "subscription", f[4], 128),
			   failed ? ": " : "", failed ? field(b, "error", why, sizeof(why)) : "");
		buf_puts(out, i + 1 == json_object_array_length(bfs) ? "\n" : "");
	}
}

bool cli_status_summary(const char *json, size_t len, buf *out, char *err, size_t errlen)
{
	json_tokener *tok = json_tokener_new();
	json_object *root = json_tokener_parse_ex(tok, json, (int)len);
	enum json_tokener_error e = json_tokener_get_error(tok);
	json_tokener_free(tok);
	if (e != json_tokener_success || !json_object_is_type(root, json_type_object)) {
		json_object_put(root);
		return util_errf(err, errlen, "the status is not a JSON object (%s)",
				 e == json_tokener_success ? "another JSON value"
							   : json_tokener_error_desc(e));
	}
	summary_head(out, root);
	summary_source(out, root);
	summary_subscriptions(out, root);
	json_object *failed = member(root, "failed_subscriptions", json_type_array);
	for (size_t i = 0; failed && i < json_object_array_length(failed); i++) {
		json_object *s = json_object_array_get_idx(failed, i);
		char name[64], why[1024];
		buf_printf(
		    out,
		    "subscription %s failed, cdc runs without it (PUT a corrected one or DELETE it): %s\n",
		    field(s, "name", name, sizeof(name)), field(s, "reason", why, sizeof(why)));
	}
	json_object *backfills = member(root, "backfills", json_type_array);
	if (backfills)
		cli_backfill_summary(backfills, out);
	summary_signals(out, root);
	for (const sink_module *const *m = sink_modules; *m; m++) {
		json_object *figures = member(root, (*m)->name, json_type_object);
		if (figures && (*m)->status_text)
			(*m)->status_text(figures, out);
	}
	json_object_put(root);
	return true;
}

/* ---- the command ---- */

static int show(const cli_endpoint *ep, bool json)
{
	unsigned code = 0;
	buf body = {0}, out = {0};
	char err[512];
	int rc = 1;
	if (!cli_status_http_get(ep, "/status", &code, &body, err, sizeof(err))) {
		fprintf(stderr, "cdc status: %s\n", err);
		goto out;
	}
	if (code != 200) {
		fprintf(stderr, "cdc status: %s answered %u: %s%s", ep->where, code,
			body.len ? body.data : "(no body)\n",
			body.len && body.data[body.len - 1] == '\n' ? "" : "\n");
		goto out;
	}
	if (json) {
		fwrite(body.data, 1, body.len, stdout);
		rc = 0;
	} else if (cli_status_summary(body.data ? body.data : "", body.len, &out, err, sizeof(err))) {
		fwrite(out.data, 1, out.len, stdout);
		rc = 0;
	} else {
		fprintf(stderr, "cdc status: %s\n", err);
	}
out:
	buf_free(&body);
	buf_free(&out);
	return rc;
}

/* --wait. It waits for the status socket (status.listen's first answer), then polls GET /readyz until it
 * answers 200, for up to wait_ms. */
static bool wait_streaming(const cli_endpoint *ep, int wait_ms)
{
	uint64_t deadline = util_now_ms() + (uint64_t)wait_ms;
	char err[1024];
	int fd = cli_is_url(ep->where) ? -1
				       : cli_connect_wait("cdc status", ep->where, CLI_STATUS_SOCKET,
							  TIMEOUT_S * 1000, wait_ms, err, sizeof(err));
	if (fd < 0 && !cli_is_url(ep->where)) {
		fprintf(stderr, "cdc status: %s\n", err);
		return false;
	}
	if (fd >= 0)
		close(fd);
	buf body = {0};
	bool ready = false;
	for (bool told = false;; told = true) {
		unsigned code = 0;
		body.len = 0;
		if (!cli_status_http_get(ep, "/readyz", &code, &body, err, sizeof(err))) {
			fprintf(stderr, "cdc status: %s\n", err);
			break;
		}
		if ((ready = code == 200))
			break;
		/* the body is the reason, one line */
		int n = body.len && body.data[body.len - 1] == '\n' ? (int)body.len - 1 : (int)body.len;
		if (util_now_ms() >= deadline) {
			fprintf(stderr, "cdc status: cdc does not stream after %d s: %.*s\n",
				(wait_ms + 999) / 1000, n, body.data ? body.data : "");
			break;
		}
		if (!told)
			fprintf(stderr, "cdc status: waiting up to %d s for cdc to stream (now: %.*s)\n",
				(wait_ms + 999) / 1000, n, body.data ? body.data : "");
		nanosleep(&(struct timespec){.tv_nsec = CLI_WAIT_STEP_MS * 1000000L}, NULL);
	}
	buf_free(&body);
	return ready;
}

typedef struct status_opts {
	bool json;
	int wait_ms; /* -1 without --wait */
} status_opts;

static int status_option(const cli_command *cmd, void *ctx, int ch, const char *arg)
{
	status_opts *o = ctx;
	if (ch == 'j')
		o->json = true;
	else if (!cli_seconds(arg, true, &o->wait_ms))
		return cli_usage(cmd, "--wait: \"%s\" is not a number of seconds (0 or more)", arg);
	return CLI_GO_ON;
}

int cli_status_main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_OPT_CONFIG,
	    CLI_OPT_SOCKET,
	    CLI_OPT_TOKEN_FILE,
	    CLI_OPT_CACERT,
	    {"json", no_argument, NULL, 'j'},
	    {"wait", required_argument, NULL, 'W'},
	    CLI_OPT_HELP,
	    {NULL, 0, NULL, 0},
	};
	static const cli_command cmd = {.name = "cdc status",
					.usage = usage,
					.shortopts = "c:s:h",
					.longopts = longopts,
					.option = status_option};
	cli_args args = {0};
	status_opts o = {.wait_ms = -1};
	int rc = cli_parse(&cmd, argc, argv, &args, &o);
	if (rc != CLI_GO_ON)
		return rc;
	char *path = cli_socket_path(&args, CLI_STATUS_SOCKET);
	if (!path)
		return 2;
	cli_endpoint ep = {path, args.token_file, args.cacert};
	rc = o.wait_ms >= 0 && !wait_streaming(&ep, o.wait_ms) ? 1 : show(&ep, o.json);
	free(path);
	return rc;
}

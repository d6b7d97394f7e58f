/* See backfill_cmd.h. The request body is the one backfill_request_json writes and the daemon's parser reads.
 * The progress comes from the same JSON that GET /backfills serves. */
#include "cdc/cli/backfill_cmd.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cdc/backfill/request.h"
#include "cdc/cli/cli.h"
#include "cdc/cli/status_cmd.h"

#define POLL_MS 500
#define BAR 30

static const char usage[] =
    "usage: cdc backfill [-c FILE | -s SOCKET | -s URL [--token-file FILE] [--cacert FILE]] SUBSCRIPTION\n"
    "                    [--table T]... [--where EXPR] [--wait | --no-wait]\n"
    "\n"
    "Asks a running cdc to backfill SUBSCRIPTION: its tables are read in key order, in chunks, while\n"
    "the stream keeps flowing, and every row arrives in the subscription's sink as an event with op\n"
    "\"read\", never after a newer change of the same row. Prints the backfill's id.\n"
    "Exit 0 (with --wait: once it is done), 1 if cdc refuses or cannot be reached or the backfill\n"
    "fails or is cancelled.\n"
    "\n"
    "  -c, --config FILE   take the socket from FILE's status.socket\n"
    "  -s, --socket PATH   the status socket (default: $CDC_STATUS_SOCKET, else " CFG_DEFAULT_STATUS_SOCKET
    ")\n"
    "  -s, --socket URL    status.listen instead, http://HOST:PORT or https://HOST:PORT (it needs\n"
    "                      status.tcp_control and the token)\n"
    "      --token-file FILE  send the bearer token in FILE (status.token) to status.listen\n"
    "      --cacert FILE   the CA certificates that signed status.listen's (https; default: the system's)\n"
    "  -t, --table T       only this table of the subscription (schema.table, globs); repeatable\n"
    "  -w, --where EXPR    only rows for which EXPR holds (the where language of subscriptions)\n"
    "      --wait          show the progress until the backfill finishes (the default on a terminal)\n"
    "      --no-wait       return once it is queued\n";

typedef struct opts {
	const char *sub;
	bf_request_body req;
	int wait; /* -1 to follow whether stdout is a terminal */
} opts;

static int backfill_option(const cli_command *cmd, void *ctx, int ch, const char *arg)
{
	opts *o = ctx;
	switch (ch) {
	case 1:
		if (o->sub)
			return cli_usage(cmd, "more than one subscription: '%s'", arg);
		o->sub = arg;
		return CLI_GO_ON;
	case 't':
		o->req.tables = util_xrealloc(o->req.tables, (o->req.ntables + 1) * sizeof(*o->req.tables));
		o->req.tables[o->req.ntables++] = util_xstrdup(arg);
		return CLI_GO_ON;
	case 'w':
		free(o->req.where);
		o->req.where = util_xstrdup(arg);
		return CLI_GO_ON;
	case 'W':
	case 'N':
		o->wait = ch == 'W';
		return CLI_GO_ON;
	default:
		return cli_usage(cmd, "unknown option%s", "");
	}
}

/* The path segment of a subscription's name, percent-encoded past RFC 3986's unreserved set. */
static void path_segment(buf *out, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p))
			buf_putc(out, (char)*p);
		else
			buf_printf(out, "%%%02X", *p);
	}
}

static json_object *member(json_object *o, const char *key, json_type type)
{
	json_object *v;
	return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, type) ? v : NULL;
}

/* "12,345" */
static void put_count(buf *out, uint64_t n)
{
	char digits[32];
	int len = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)n);
	for (int i = 0; i < len; i++) {
		if (i && (len - i) % 3 == 0)
			buf_putc(out, ',');
		buf_putc(out, digits[i]);
	}
}

static void put_eta(buf *out, int64_t s)
{
	if (s >= 3600)
		buf_printf(out, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
			   (long long)(s % 60));
	else
		buf_printf(out, "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
}

static uint64_t count_member(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_int);
	return v ? (uint64_t)json_object_get_int64(v) : 0;
}

/* "12,345 of about 50,000 rows read (24%), 11,000 delivered, 1,234 rows/s, ETA 0:31" while it runs (with what
 * is known). "1,696 rows read, 83 delivered" once it finished. The share and the estimate only mean something
 * while it runs. */
static void put_figures(buf *out, json_object *o, bool open)
{
	json_object *est = member(o, "estimate", json_type_int);
	json_object *rate = member(o, "rows_per_second", json_type_int),
		    *eta = member(o, "eta_seconds", json_type_int);
	uint64_t r = count_member(o, "rows_read"), e = est ? (uint64_t)json_object_get_int64(est) : 0;
	put_count(out, r);
	if (open && e) {
		/* from the statistics or the size, an estimate either way */
		buf_puts(out, member(o, "estimate_from", json_type_string) ? " of about " : " of ");
		put_count(out, e);
		buf_printf(out, " rows read (%u%%), ", (unsigned)(r * 100 / (e > r ? e : r)));
	} else {
		buf_puts(out, " rows read, ");
	}
	put_count(out, count_member(o, "rows_delivered"));
	buf_puts(out, " delivered");
	if (!open)
		return;
	if (rate && json_object_get_int64(rate) > 0) {
		buf_puts(out, ", ");
		put_count(out, (uint64_t)json_object_get_int64(rate));
		buf_puts(out, " rows/s");
	}
	if (eta && json_object_get_int64(eta) > 0) {
		buf_puts(out, ", ETA ");
		put_eta(out, json_object_get_int64(eta));
	}
}

static void put_bar(buf *out, json_object *o)
{
	json_object *est = member(o, "estimate", json_type_int);
	uint64_t r = count_member(o, "rows_read"), e = est ? (uint64_t)json_object_get_int64(est) : 0;
	unsigned fill = est ? (unsigned)(e ? (r >= e ? BAR : r * BAR / e) : BAR) : 0;
	buf_putc(out, '[');
	for (unsigned i = 0; i < BAR; i++)
		buf_putc(out, i < fill ? '#' : '.');
	buf_puts(out, "] ");
}

static const char *str_member(json_object *o, const char *key)
{
	json_object *v = member(o, key, json_type_string);
	return v ? json_object_get_string(v) : NULL;
}

/* A string member for display, "-" when missing. */
static const char *txt(json_object *o, const char *key)
{
	const char *s = str_member(o, key);
	return s ? s : "-";
}

/* Whether a backfill or table in o is queued or running. */
static bool is_open(json_object *o)
{
	const char *st = txt(o, "state");
	return strcmp(st, "queued") == 0 || strcmp(st, "running") == 0;
}

/* One backfill, as a line of figures and then one line per table. */
static void render(json_object *bf, bool bars, buf *out)
{
	buf_printf(out, "backfill %s of %s: %s, ", txt(bf, "id"), txt(bf, "subscription"), txt(bf, "state"));
	put_figures(out, bf, is_open(bf));
	buf_putc(out, '\n');
	if (str_member(bf, "error"))
		buf_printf(out, "  %s\n", str_member(bf, "error"));
	json_object *tables = member(bf, "tables", json_type_array);
	for (size_t k = 0; tables && k < json_object_array_length(tables); k++) {
		json_object *t = json_object_array_get_idx(tables, k);
		buf_printf(out, "  %s.%s  ", txt(t, "schema"), txt(t, "table"));
		if (bars)
			put_bar(out, t);
		buf_printf(out, "%s, ", txt(t, "state"));
		put_figures(out, t, is_open(t));
		buf_putc(out, '\n');
		if (str_member(t, "error"))
			buf_printf(out, "    %s\n", str_member(t, "error"));
	}
}

bool cli_backfill_progress(const char *json, size_t len, const char *id, bool bars, buf *out, char *state,
			   size_t statelen, char *err, size_t errlen)
{
	json_tokener *tok = json_tokener_new();
	json_object *root = json_tokener_parse_ex(tok, json, (int)len), *bf = NULL;
	json_tokener_free(tok);
	if (!root || !json_object_is_type(root, json_type_array)) {
		json_object_put(root);
		return util_errf(err, errlen, "GET /backfills: not a JSON array");
	}
	for (size_t i = 0; i < json_object_array_length(root) && !bf; i++) {
		const char *bid = str_member(json_object_array_get_idx(root, i), "id");
		if (bid && strcmp(bid, id) == 0)
			bf = json_object_array_get_idx(root, i);
	}
	snprintf(state, statelen, "%s", bf && str_member(bf, "state") ? str_member(bf, "state") : "");
	if (bf)
		render(bf, bars, out);
	json_object_put(root);
	return true;
}

void cli_backfill_summary(json_object *backfills, buf *out)
{
	for (size_t i = 0; i < json_object_array_length(backfills); i++)
		render(json_object_array_get_idx(backfills, i), false, out);
}

/* Polls GET /backfills until the backfill finishes. On a terminal the lines are redrawn. */
static int wait_for(const cli_endpoint *ep, const char *id, bool tty)
{
	buf body = {0}, out = {0};
	char err[512], state[32];
	int rc = 1, lines = 0;
	for (;;) {
		unsigned code = 0;
		buf_reset(&body);
		buf_reset(&out);
		if (!cli_status_http_get(ep, "/backfills", &code, &body, err, sizeof(err)) ||
		    (code != 200 && util_errf(err, sizeof(err), "GET /backfills answered %u", code)) ||
		    !cli_backfill_progress(body.data ? body.data : "", body.len, id, tty, &out, state,
					   sizeof(state), err, sizeof(err))) {
			fprintf(stderr, "cdc backfill: %s\n", err);
			break;
		}
		if (!state[0]) {
			fprintf(stderr, "cdc backfill: backfill %s is gone (its subscription was removed?)\n",
				id);
			break;
		}
		bool over = strcmp(state, "running") != 0 && strcmp(state, "queued") != 0;
		if (tty || over) {
			if (tty && lines)
				printf("\033[%dA\033[J", lines);
			fwrite(out.data, 1, out.len, stdout);
			fflush(stdout);
			lines = 0;
			for (size_t i = 0; i < out.len; i++)
				lines += out.data[i] == '\n';
		}
		if (over) {
			rc = strcmp(state, "done") == 0 ? 0 : 1;
			break;
		}
		struct timespec ts = {0, POLL_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	buf_free(&body);
	buf_free(&out);
	return rc;
}

static int start(const cli_endpoint *ep, opts *o)
{
	buf path = {0}, req = {0}, body = {0};
	char err[512], id[64] = "";
	unsigned code = 0;
	int rc = 1;
	buf_puts(&path, "/subscriptions/");
	path_segment(&path, o->sub);
	buf_puts(&path, "/backfill");
	backfill_request_json(&o->req, &req);
	if (!cli_status_http_request(ep, "POST", path.data, req.data, &code, &body, err, sizeof(err))) {
		fprintf(stderr, "cdc backfill: %s\n", err);
		goto out;
	}
	json_object *root = json_tokener_parse(body.data ? body.data : "");
	const char *msg = str_member(root, "error"), *got = str_member(root, "id");
	if (code == 200 && got)
		snprintf(id, sizeof(id), "%s", got);
	else
		fprintf(stderr, "cdc backfill: %s\n", msg ? msg : body.len ? body.data : "no answer");
	json_object_put(root);
	if (!id[0])
		goto out;
	bool tty = isatty(STDOUT_FILENO);
	printf("backfill %s of subscription %s queued\n", id, o->sub);
	fflush(stdout);
	rc = (o->wait < 0 ? tty : o->wait) ? wait_for(ep, id, tty) : 0;
out:
	buf_free(&path);
	buf_free(&req);
	buf_free(&body);
	return rc;
}

int cli_backfill_main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_OPT_CONFIG,
	    CLI_OPT_SOCKET,
	    CLI_OPT_TOKEN_FILE,
	    CLI_OPT_CACERT,
	    {"table", required_argument, NULL, 't'},
	    {"where", required_argument, NULL, 'w'},
	    {"wait", no_argument, NULL, 'W'},
	    {"no-wait", no_argument, NULL, 'N'},
	    CLI_OPT_HELP,
	    {NULL, 0, NULL, 0},
	};
	static const cli_command cmd = {.name = "cdc backfill",
					.usage = usage,
					.shortopts = "c:s:t:w:h",
					.longopts = longopts,
					.operands = true,
					.option = backfill_option};
	cli_args args = {0};
	opts o = {.wait = -1};
	int rc = cli_parse(&cmd, argc, argv, &args, &o);
	if (rc == CLI_GO_ON && !o.sub)
		rc = cli_usage(&cmd, "which subscription?%s", "");
	if (rc == CLI_GO_ON) {
		char *sock = cli_socket_path(&args, CLI_STATUS_SOCKET);
		cli_endpoint ep = {sock, args.token_file, args.cacert};
		rc = sock ? start(&ep, &o) : 2;
		free(sock);
	}
	backfill_request_free(&o.req);
	return rc;
}

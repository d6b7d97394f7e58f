/* See cli.h. */
#include "cdc/cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "decoder/base/net.h"
#include "sinks/socket/socket_sink.h"

int cli_usage(const cli_command *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", cmd->name);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n\n%s", cmd->usage);
	return 2;
}

static int operand(const cli_command *cmd, void *ctx, const char *arg)
{
	if (!cmd->operands)
		return cli_usage(cmd, "unexpected argument %s", arg);
	return cmd->option(cmd, ctx, 1, arg);
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *args, void *ctx)
{
	char shortopts[32];
	/* With a leading '-', operands come back as option 1. So they may stand among the options (as the
	 * contract writes `cdc tail SUBSCRIPTION [OPTIONS]`), whatever POSIXLY_CORRECT says. */
	snprintf(shortopts, sizeof(shortopts), "-%s", cmd->shortopts);
	int ch, rc = CLI_GO_ON;
	optind = 1;
	opterr = 0;
	while (rc == CLI_GO_ON && (ch = getopt_long(argc, argv, shortopts, cmd->longopts, NULL)) != -1) {
		switch (ch) {
		case 1:
			rc = operand(cmd, ctx, optarg);
			break;
		case 'c':
			args->config = optarg;
			break;
		case 's':
			args->socket = optarg;
			break;
		case CLI_TOKEN_FILE:
			args->token_file = optarg;
			break;
		case CLI_CACERT:
			args->cacert = optarg;
			break;
		case 'h':
			fputs(cmd->usage, stdout);
			return 0;
		case '?':
			return cli_usage(cmd, "unknown or incomplete option %s", argv[optind - 1]);
		default:
			rc = cmd->option(cmd, ctx, ch, optarg);
			break;
		}
	}
	/* After "--", everything is an operand. */
	for (; rc == CLI_GO_ON && optind < argc; optind++)
		rc = operand(cmd, ctx, argv[optind]);
	if (rc == CLI_GO_ON && args->config && args->socket)
		return cli_usage(cmd, "%s", "-c and -s are exclusive");
	if (rc == CLI_GO_ON && (args->token_file || args->cacert) &&
	    !(args->socket && cli_is_url(args->socket)))
		return cli_usage(
		    cmd, "%s", "--token-file and --cacert go with -s http://HOST:PORT or https://HOST:PORT");
	if (rc == CLI_GO_ON && args->cacert && strncmp(args->socket, "https://", 8) != 0)
		return cli_usage(cmd, "%s", "--cacert goes with -s https://HOST:PORT");
	if (rc == CLI_GO_ON && cmd->needs_config && !args->config)
		return cli_usage(cmd, "%s", "missing -c FILE");
	return rc;
}

bool cli_seconds(const char *arg, bool zero_ok, int *ms)
{
	char *end;
	errno = 0;
	double s = strtod(arg, &end);
	/* poll() takes an int of milliseconds, so about 24 days at most */
	if (errno || end == arg || *end || !(s > 0 || (zero_ok && s == 0)) || s * 1000 > 2e9)
		return false;
	*ms = (int)ceil(s * 1000);
	return true;
}

bool cli_is_url(const char *where)
{
	return strncmp(where, "http://", 7) == 0 || strncmp(where, "https://", 8) == 0;
}

cfg *cli_load_config(const char *path, bool secrets)
{
	buf errors = {0};
	cfg *c = secrets ? cfg_load(path, &errors) : cfg_load_no_secrets(path, &errors);
	if (!c)
		fputs(errors.data ? errors.data : "cdc: invalid configuration\n", stderr);
	buf_free(&errors);
	return c;
}

/* Where each socket's path comes from, for the lookup and for the hints of cli_connect. */
static const struct {
	const char *what, *key, *env, *fallback;
} SOCKETS[] = {
    [CLI_STATUS_SOCKET] = {"status", "status.socket", "CDC_STATUS_SOCKET", CFG_DEFAULT_STATUS_SOCKET},
    [CLI_SUBSCRIBER_SOCKET] = {"subscriber", "subscribers.socket", "CDC_SUBSCRIBER_SOCKET",
			       SOCKET_DEFAULT_PATH},
};

char *cli_socket_path(const cli_args *a, cli_socket which)
{
	if (a->socket)
		return util_xstrdup(a->socket);
	if (a->config) {
		cfg *c = cli_load_config(a->config, false);
		if (!c)
			return NULL;
		char *p = util_xstrdup(cfg_get_string(c, SOCKETS[which].key));
		cfg_free(c);
		return p;
	}
	const char *env = getenv(SOCKETS[which].env);
	return util_xstrdup(env && *env ? env : SOCKETS[which].fallback);
}

/* What the user can do about connect(2)'s error e on path. why is net's message. */
static void explain(const char *path, cli_socket which, int e, const char *why, char *err, size_t errlen)
{
	if (e == ENOENT)
		util_errf(err, errlen,
			  "no %s socket at %s: is cdc running? (the path comes from -s, -c FILE's %s or %s)",
			  SOCKETS[which].what, path, SOCKETS[which].key, SOCKETS[which].env);
	else if (e == ECONNREFUSED)
		util_errf(err, errlen,
			  "nothing listens on %s: cdc is not running (the socket file is left over)", path);
	else if (e == EACCES)
		util_errf(err, errlen,
			  "permission denied on %s: join the socket's group (subscribers.mode) or use sudo",
			  path);
	else
		util_errf(err, errlen, "cannot connect to %s", why);
}

int cli_connect(const char *path, cli_socket which, int timeout_ms, char *err, size_t errlen)
{
	char why[512];
	int fd = net_unix_connect_timeout(path, timeout_ms, why, sizeof(why));
	if (fd < 0)
		explain(path, which, errno, why, err, errlen);
	return fd;
}

/* A socket that cdc has not made yet (it is starting) or left behind (it is starting again). */
static bool not_there_yet(int e)
{
	return e == ENOENT || e == ECONNREFUSED;
}

int cli_connect_wait(const char *name, const char *path, cli_socket which, int timeout_ms, int wait_ms,
		     char *err, size_t errlen)
{
	char why[512];
	uint64_t deadline = util_now_ms() + (uint64_t)(wait_ms > 0 ? wait_ms : 0);
	for (bool told = false;; told = true) {
		int fd = net_unix_connect_timeout(path, timeout_ms, why, sizeof(why));
		if (fd >= 0)
			return fd;
		if (!not_there_yet(errno) || util_now_ms() >= deadline) {
			explain(path, which, errno, why, err, errlen);
			return -1;
		}
		if (!told)
			fprintf(stderr, "%s: waiting up to %d s for cdc's %s socket at %s (%s)\n", name,
				(wait_ms + 999) / 1000, SOCKETS[which].what, path,
				errno == ENOENT ? "not there yet" : "nothing listens yet");
		nanosleep(&(struct timespec){.tv_nsec = CLI_WAIT_STEP_MS * 1000000L}, NULL);
	}
}

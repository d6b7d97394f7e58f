/* main.c: the `cdc` command line: run, check-config, --help, --version.
 * Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration error. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cdc/config/config.h"
#include "cdc/daemon/daemon.h"
#include "cdc/cli/status_cmd.h"
#include "cdc/cli/tail.h"

static const char usage_main[] =
	"cdc: change data capture from a PostgreSQL logical replication slot\n"
	"\n"
	"usage: cdc COMMAND [OPTIONS]\n"
	"\n"
	"commands:\n"
	"  run -c FILE           stream changes to the configured sinks (foreground, logs on stderr)\n"
	"  check-config -c FILE  validate FILE and print the effective configuration\n"
	"  status [-c FILE]      summary of a running cdc (its status socket)\n"
	"  tail SUBSCRIPTION     print a socket subscription's events as JSON lines, acking each\n"
	"\n"
	"  cdc COMMAND --help    options of one command\n"
	"  cdc --version         the version\n";

static const char usage_run[] =
	"usage: cdc run -c FILE [--endpos LSN]\n"
	"\n"
	"Streams changes from the replication slot to the sinks of FILE's subscriptions.\n"
	"SIGTERM/SIGINT: deliver what is in flight, confirm it to the slot, exit 0.\n"
	"SIGHUP: reload the subscriptions from FILE (at a transaction boundary).\n"
	"\n"
	"  -c, --config FILE   the configuration file (YAML)\n"
	"      --endpos LSN    exit 0 once every change up to LSN (X/X) is delivered and confirmed\n";

static const char usage_check[] =
	"usage: cdc check-config -c FILE\n"
	"\n"
	"Validates FILE. Exit 0 and the effective configuration (defaults filled in, secrets masked)\n"
	"on stdout, or exit 2 with one FILE:LINE:COL: message line per problem on stderr.\n"
	"\n"
	"  -c, --config FILE   the configuration file (YAML)\n";

static int usage_error(const char *usage, const char *fmt, const char *arg)
{
	fprintf(stderr, "cdc: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n\n%s", usage);
	return 2;
}

/* Parses the options shared by the commands; returns -1 to go on, else an exit code. */
static int parse_options(int argc, char **argv, const char *usage, const char **config, const char **endpos)
{
	static const struct option longopts[] = {
		{"config", required_argument, NULL, 'c'},
		{"endpos", required_argument, NULL, 'E'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int ch;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "+c:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			*config = optarg;
			break;
		case 'E':
			if (!endpos)
				return usage_error(usage, "unknown option %s", "--endpos");
			*endpos = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			return usage_error(usage, "unknown or incomplete option %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error(usage, "unexpected argument %s", argv[optind]);
	if (!*config)
		return usage_error(usage, "%s", "missing -c FILE");
	return -1;
}

static cfg *load(const char *path)
{
	buf errors = {0};
	cfg *c = cfg_load(path, &errors);
	if (!c)
		fputs(errors.data ? errors.data : "cdc: invalid configuration\n", stderr);
	buf_free(&errors);
	return c;
}

static int cmd_run(int argc, char **argv)
{
	const char *config = NULL, *endpos_text = NULL;
	int rc = parse_options(argc, argv, usage_run, &config, &endpos_text);
	if (rc >= 0)
		return rc;
	uint64_t endpos = 0;
	if (endpos_text && !lsn_parse(endpos_text, &endpos))
		return usage_error(usage_run, "--endpos: \"%s\" is not an LSN like 0/16B3748", endpos_text);
	cfg *c = load(config);
	return c ? daemon_run(c, config, endpos) : 2;
}

static int cmd_check_config(int argc, char **argv)
{
	const char *config = NULL;
	int rc = parse_options(argc, argv, usage_check, &config, NULL);
	if (rc >= 0)
		return rc;
	cfg *c = load(config);
	if (!c)
		return 2;
	cfg_print(c, stdout);
	cfg_free(c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage_error(usage_main, "%s", "missing command");
	const char *cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
		fputs(usage_main, stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("cdc %s\n", CDC_VERSION);
		return 0;
	}
	if (strcmp(cmd, "run") == 0)
		return cmd_run(argc - 1, argv + 1);
	if (strcmp(cmd, "check-config") == 0)
		return cmd_check_config(argc - 1, argv + 1);
	if (strcmp(cmd, "status") == 0)
		return status_main(argc - 1, argv + 1);
	if (strcmp(cmd, "tail") == 0)
		return tail_main(argc - 1, argv + 1);
	return usage_error(usage_main, "unknown command \"%s\"", cmd);
}

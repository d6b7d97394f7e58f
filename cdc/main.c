/* The `cdc` command line, with run, check-config, config-reference, doctor, status, tail, backfill, --help
 * and --version. Exit codes are 0 for ok, 1 for a runtime failure, and 2 for a usage or
 * configuration error. */
#include <stdio.h>
#include <string.h>

#include "cdc/cli/backfill_cmd.h"
#include "cdc/cli/cli.h"
#include "cdc/cli/doctor_cmd.h"
#include "cdc/cli/status_cmd.h"
#include "cdc/cli/tail.h"
#include "cdc/config/config.h"
#include "cdc/daemon/daemon.h"

/* jemalloc's options, read at its start. The daemon links jemalloc. With libc's allocator, as in the
 * sanitizer builds, this is an unused variable. With an arena per thread, librdkafka's messages left far more
 * memory resident than they use. They are made on this thread, and their request buffers on the broker
 * threads. That was 85 MiB for 10 MiB live while a large transaction went to Kafka. One arena (the thread
 * caches still spare the lock) keeps resident memory near what is in use (31 MiB). So does a background
 * thread that returns freed pages within a second, off the event loop. */
const char *malloc_conf = "narenas:1,background_thread:true,dirty_decay_ms:1000";

static const char usage_main[] =
    "cdc: change data capture from a PostgreSQL logical replication slot\n"
    "\n"
    "usage: cdc COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  run -c FILE           stream changes to the configured sinks (foreground, logs on stderr)\n"
    "  check-config -c FILE  validate FILE and print the effective configuration\n"
    "  config-reference      print the reference of every configuration key (Markdown)\n"
    "  doctor -c FILE        check the database, Kafka and this machine against FILE (changes nothing)\n"
    "  status [-c FILE]      summary of a running cdc (its status socket)\n"
    "  tail SUBSCRIPTION     print a socket subscription's events as JSON lines, acking each\n"
    "  backfill SUBSCRIPTION read a subscription's tables into its sink while the stream flows\n"
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

/* --endpos is run's own. check-config shares the table and refuses it by name. */
static const struct option longopts[] = {
    CLI_OPT_CONFIG,
    {"endpos", required_argument, NULL, 'E'},
    CLI_OPT_HELP,
    {NULL, 0, NULL, 0},
};

static const cli_command cmd_main = {.name = "cdc", .usage = usage_main};

static int run_option(const cli_command *cmd, void *ctx, int ch, const char *arg)
{
	(void)ch; /* only --endpos */
	if (!ctx)
		return cli_usage(cmd, "unknown option %s", "--endpos");
	*(const char **)ctx = arg;
	return CLI_GO_ON;
}

static int cmd_run(int argc, char **argv)
{
	static const cli_command cmd = {.name = "cdc",
					.usage = usage_run,
					.shortopts = "c:h",
					.longopts = longopts,
					.needs_config = true,
					.option = run_option};
	cli_args args = {0};
	const char *endpos_text = NULL;
	int rc = cli_parse(&cmd, argc, argv, &args, (void *)&endpos_text);
	if (rc != CLI_GO_ON)
		return rc;
	uint64_t endpos = 0;
	if (endpos_text && !util_lsn_parse(endpos_text, &endpos))
		return cli_usage(&cmd, "--endpos: \"%s\" is not an LSN like 0/16B3748", endpos_text);
	cfg *c = cli_load_config(args.config, true);
	return c ? daemon_run(c, args.config, endpos) : 2;
}

static int cmd_check_config(int argc, char **argv)
{
	static const cli_command cmd = {.name = "cdc",
					.usage = usage_check,
					.shortopts = "c:h",
					.longopts = longopts,
					.needs_config = true,
					.option = run_option};
	cli_args args = {0};
	int rc = cli_parse(&cmd, argc, argv, &args, NULL); /* with ctx NULL, --endpos is refused */
	if (rc != CLI_GO_ON)
		return rc;
	cfg *c = cli_load_config(args.config, true);
	if (!c)
		return 2;
	cfg_print(c, stdout);
	cfg_free(c);
	return 0;
}

static int cmd_config_reference(int argc, char **argv)
{
	static const char usage[] =
	    "usage: cdc config-reference\n"
	    "\n"
	    "Prints the reference of every configuration key: its documentation, type,\n"
	    "default, range and whether a reload applies it (docs/configuration.md).\n";
	if (argc > 1) {
		bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
		fputs(usage, help ? stdout : stderr);
		return help ? 0 : 2;
	}
	buf out = {0};
	char err[1024];
	if (!cfg_reference(&out, err, sizeof err)) {
		fprintf(stderr, "cdc config-reference: %s\n", err);
		return 1;
	}
	fwrite(out.data, 1, out.len, stdout);
	buf_free(&out);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage(&cmd_main, "%s", "missing command");
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
	if (strcmp(cmd, "config-reference") == 0)
		return cmd_config_reference(argc - 1, argv + 1);
	if (strcmp(cmd, "doctor") == 0)
		return cli_doctor_main(argc - 1, argv + 1);
	if (strcmp(cmd, "status") == 0)
		return cli_status_main(argc - 1, argv + 1);
	if (strcmp(cmd, "tail") == 0)
		return cli_tail_main(argc - 1, argv + 1);
	if (strcmp(cmd, "backfill") == 0)
		return cli_backfill_main(argc - 1, argv + 1);
	return cli_usage(&cmd_main, "unknown command \"%s\"", cmd);
}

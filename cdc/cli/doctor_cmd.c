/* `cdc doctor`, the command line of cdc/doctor/. */
#include "cdc/cli/doctor_cmd.h"

#include <stdio.h>
#include <stdlib.h>

#include "cdc/cli/cli.h"
#include "cdc/doctor/doctor.h"

static const char usage[] =
    "usage: cdc doctor -c FILE [--json] [--kafka-timeout MS]\n"
    "\n"
    "Checks what FILE asks of the database, Kafka and this machine, before cdc's first start or after\n"
    "a change: the server's version and settings, the role's attributes and privileges, the\n"
    "publication, the subscriptions' tables, replica identities and keys, the slot, state_dir, the\n"
    "sockets' paths, the brokers and topics. Changes nothing: the database is read in read-only\n"
    "transactions, Kafka through metadata and DescribeConfigs.\n"
    "Prints one line per finding (pass, warn or fail), each warning and failure with its fix.\n"
    "Exit 0: all passed; 1: warnings; 2: failures (or a usage or configuration error).\n"
    "\n"
    "  -c, --config FILE       the configuration file (YAML)\n"
    "      --json              print the findings as one JSON object (see docs/doctor.md)\n"
    "      --kafka-timeout MS  how long the brokers get to answer (default 5000)\n";

typedef struct doctor_opts {
	bool json;
	int timeout_ms;
} doctor_opts;

static int doctor_option(const cli_command *cmd, void *ctx, int ch, const char *arg)
{
	doctor_opts *o = ctx;
	if (ch == 'j') {
		o->json = true;
		return CLI_GO_ON;
	}
	char *end;
	long ms = strtol(arg, &end, 10);
	if (*arg == '\0' || *end != '\0' || ms <= 0 || ms > 600000)
		return cli_usage(cmd, "--kafka-timeout: \"%s\" is not a number of milliseconds (1 to 600000)",
				 arg);
	o->timeout_ms = (int)ms;
	return CLI_GO_ON;
}

int cli_doctor_main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    CLI_OPT_CONFIG,
	    {"json", no_argument, NULL, 'j'},
	    {"kafka-timeout", required_argument, NULL, 'T'},
	    CLI_OPT_HELP,
	    {NULL, 0, NULL, 0},
	};
	static const cli_command cmd = {.name = "cdc doctor",
					.usage = usage,
					.shortopts = "c:h",
					.longopts = longopts,
					.needs_config = true,
					.option = doctor_option};
	cli_args args = {0};
	doctor_opts o = {0};
	int rc = cli_parse(&cmd, argc, argv, &args, &o);
	if (rc != CLI_GO_ON)
		return rc;
	cfg *c = cli_load_config(args.config, true);
	if (!c)
		return 2;
	doctor_report r = {.timeout_ms = o.timeout_ms};
	doctor_run(c, &r);
	if (o.json) {
		buf out = {0};
		doctor_print_json(&r, &out);
		fputs(out.data, stdout);
		buf_free(&out);
	} else
		doctor_print_text(&r, stdout);
	rc = doctor_exit_code(&r);
	doctor_report_free(&r);
	cfg_free(c);
	return rc;
}

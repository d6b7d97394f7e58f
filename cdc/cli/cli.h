/* What the `cdc` commands share, as PostgreSQL's tools share streamutil.c: option parsing with --help
 * and usage errors, loading the configuration, finding the daemon's sockets and connecting to them.
 * Exit statuses are 0 for ok, 1 for a runtime failure, 2 for a usage or configuration error. */
#ifndef CDC_CLI_H
#define CDC_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>

#include "cdc/config/config.h"

#define CLI_GO_ON (-1) /* from cli_parse and option handlers, meaning no exit status yet, go on */

/* The options every command spells the same way. Each command's table lists those it takes. */
#define CLI_OPT_CONFIG                                                                                       \
	{                                                                                                    \
		"config", required_argument, NULL, 'c'                                                       \
	}
#define CLI_OPT_SOCKET                                                                                       \
	{                                                                                                    \
		"socket", required_argument, NULL, 's'                                                       \
	}
#define CLI_OPT_HELP                                                                                         \
	{                                                                                                    \
		"help", no_argument, NULL, 'h'                                                               \
	}
/* For the status endpoints over status.listen, the bearer token's file and the CAs of an https one. */
enum { CLI_TOKEN_FILE = 0x100, CLI_CACERT };
#define CLI_OPT_TOKEN_FILE                                                                                   \
	{                                                                                                    \
		"token-file", required_argument, NULL, CLI_TOKEN_FILE                                        \
	}
#define CLI_OPT_CACERT                                                                                       \
	{                                                                                                    \
		"cacert", required_argument, NULL, CLI_CACERT                                                \
	}

/* What the shared options gave, -c FILE, -s SOCKET, --token-file, --cacert (NULL when not given). */
typedef struct cli_args {
	const char *config, *socket;
	const char *token_file, *cacert;
} cli_args;

typedef struct cli_command cli_command;
struct cli_command {
	const char *name;      /* messages start with it ("cdc", "cdc tail") */
	const char *usage;     /* --help prints it on stdout, a usage error after the message on stderr */
	const char *shortopts; /* getopt's, such as "c:s:h" */
	const struct option *longopts;
	bool operands;	   /* else an operand is a usage error */
	bool needs_config; /* -c FILE is required */
	/* The command's own options, and its operands as ch 1 (NULL if it has neither). Returns
	 * CLI_GO_ON, or an exit status (cli_usage's) that ends parsing. */
	int (*option)(const cli_command *cmd, void *ctx, int ch, const char *arg);
};

/* Parses argv (argv[0] is the command's name). It handles -c, -s and -h, and the rest through
 * cmd->option. Options and operands may come in any order. Returns CLI_GO_ON, or the exit status to
 * return. That is 0 after --help, and 2 after a usage error (such as a missing -c FILE where
 * cmd->needs_config). */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *args, void *ctx);
/* Prints "NAME: " fmt (with arg), then the usage, on stderr. Returns 2. */
int cli_usage(const cli_command *cmd, const char *fmt, const char *arg);

/* A number of seconds (fractions too) above 0, or 0 as well when zero_ok, into *ms (rounded up, at
 * most about 24 days). False when arg is not one. */
bool cli_seconds(const char *arg, bool zero_ok, int *ms);

/* Loads the configuration file, or prints its errors on stderr and returns NULL (exit 2). With
 * secrets false, the files of secrets are not read (a client that needs none, run by a user who may
 * not read them). */
cfg *cli_load_config(const char *path, bool secrets);

typedef enum cli_socket { CLI_STATUS_SOCKET, CLI_SUBSCRIBER_SOCKET } cli_socket;

/* Where a client reaches the status endpoints. That is a Unix socket's path, or status.listen as
 * http://HOST:PORT or https://HOST:PORT. The bearer token is read from token_file (NULL if none). For
 * https, cacert holds the CAs that signed its certificate (NULL for the system's). */
typedef struct cli_endpoint {
	const char *where;
	const char *token_file, *cacert;
} cli_endpoint;
/* Whether where is http://... or https://... rather than a socket's path. */
bool cli_is_url(const char *where);

/* The socket to talk to. It is -s, else -c FILE's status.socket or subscribers.socket, else
 * $CDC_STATUS_SOCKET or $CDC_SUBSCRIBER_SOCKET, else the configuration's default. NULL after printing
 * FILE's errors (exit 2). The caller frees it. */
char *cli_socket_path(const cli_args *args, cli_socket which);
/* Connects to the socket at path. With timeout_ms > 0, the timeout applies to the connect and every
 * send and receive. -1 with err saying why in terms of what the user can do about it. */
int cli_connect(const char *path, cli_socket which, int timeout_ms, char *err, size_t errlen) CDC_MUST_CHECK;
/* As cli_connect, but a socket that is not there yet is tried again every CLI_WAIT_STEP_MS for up to
 * wait_ms. Such a socket is absent, or nobody listens because cdc is starting. It first prints one
 * line on stderr that starts with name and says what it waits for. */
#define CLI_WAIT_STEP_MS 100
int cli_connect_wait(const char *name, const char *path, cli_socket which, int timeout_ms, int wait_ms,
		     char *err, size_t errlen) CDC_MUST_CHECK;

#endif

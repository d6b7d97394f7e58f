/* config.h: the YAML configuration file (see README "Configuration" and shared CONTRACT.md).
 * cfg_load() validates everything and reports every error as "FILE:LINE:COL: message"; one table of
 * keys per section (cdc/config/keys.c) drives parsing, defaults, printing and reloads. */
#ifndef CDC_CONFIG_H
#define CDC_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "cdc/match/match.h"
#include "decoder/base/log.h"
#include "decoder/base/util.h"
#include "sinks/modules.h"

/* Where the status socket is when neither the config nor the environment says. */
#define CFG_DEFAULT_STATUS_SOCKET "/run/cdc/status.sock"
/* backfill.parallel: docs/backfills.md#speed has the measurements it comes from. */
#define CFG_DEFAULT_BACKFILL_PARALLEL 4

/* What cdc does when the slot cannot send what follows its position (lost, or older than the
 * publication): fail, saying what to do, or re-sync (move the slot on and backfill). */
typedef enum cfg_on_gap { CFG_GAP_FAIL, CFG_GAP_RESYNC } cfg_on_gap;
/* Who may GET the status endpoints over status.listen: anyone who reaches the port; anyone for
 * /healthz and /readyz (the probes) and the token's holders for the rest; the token's holders. */
typedef enum cfg_tcp_read { CFG_TCP_READ_OPEN, CFG_TCP_READ_PROBES, CFG_TCP_READ_TOKEN } cfg_tcp_read;
/* A bearer token: its bounds (status.token). */
#define CFG_TOKEN_MIN 16
#define CFG_TOKEN_MAX 1024

typedef struct cfg_strlist {
	char **v;
	size_t n;
} cfg_strlist;
/* Appends a copy of text. */
void cfg_strlist_push(cfg_strlist *list, const char *text);
/* Frees the strings and the array: list is empty after. */
void cfg_strlist_free(cfg_strlist *list);

/* Where the value of a secret key came from (keys flagged K_SECRET, or SINK_KEY_SECRET in a sink
 * module): a file that {file: PATH} names, read again at every load (a SIGHUP), or the
 * configuration file itself, in clear. One entry per secret value the configuration holds; a
 * connection string without a password holds none. */
typedef struct cfg_secret {
	char *key; /* dotted: "source.password", "kafka.properties.sasl.password" */
	/* the file {file: PATH} names, a relative PATH taken from the configuration's directory; NULL:
	 * written in the configuration in clear */
	char *file;
} cfg_secret;

typedef struct cfg_subscription {
	char *name;
	int line, col;	     /* where it is defined, for messages */
	cfg_strlist tables;  /* "schema.table" patterns with * and ? globs; a part may be "quoted" */
	unsigned ops;	     /* enum match_op bits; default: MATCH_OPS_DEFAULT */
	char *tag;	     /* NULL if none */
	int sink;	     /* its index in sink_modules; default 0 (the first module) */
	cfg_strlist changed; /* update matches only if one of these changed */
	char *where;	     /* predicate text, NULL if none */
	cfg_strlist columns; /* projection; empty: all */
	/* Each sink module's subscription struct (sink_module.sub_keys): the file sets only the one
	 * of its own sink; the others hold their defaults. */
	void *sink_settings[SINK_MODULES_MAX];
	bool snapshot; /* backfilled when first seen (a fresh state_dir, a reload or PUT adding it) */
} cfg_subscription;

typedef struct cfg {
	char *path;
	struct {
		char *dsn;		     /* default "" (PG* variables apply) */
		char *password;		     /* secret: the role's password when dsn has none; NULL if none */
		char *slot;		     /* default "cdc_slot" */
		char *publication;	     /* default "cdc_pub" */
		bool create;		     /* default false */
		cfg_strlist publish;	     /* default ["public.*"] */
		uint64_t heartbeat_ms;	     /* default 0: off */
		uint64_t status_interval_ms; /* standby status updates at least this often; default 10s */
		cfg_on_gap on_slot_lost;     /* default fail */
		cfg_on_gap on_publication_newer; /* default fail */
		bool failover;			 /* the slot is a failover slot (PostgreSQL 17+) */
		char *primary_dsn;		 /* writes when dsn is a standby; NULL if none */
		bool ddl; /* capture DDL with an event trigger (docs/events.md); default false */
		bool publish_generated_columns; /* PostgreSQL 18+; default false */
		char *signal_table; /* "schema.table" whose inserts ask for backfills; NULL: none */
	} source;
	char *state_dir; /* default "/var/lib/cdc" */
	struct {
		char *socket; /* default "/run/cdc/status.sock" */
		char *listen; /* NULL if none */
		bool tcp_control;
		char *token;		  /* secret: the bearer token status.listen asks for; NULL if none */
		cfg_tcp_read tcp_read;	  /* default open */
		char *tls_cert, *tls_key; /* PEM files: status.listen speaks HTTPS; NULL: plain HTTP */
		id_list control_uids;	  /* default: root and cdc's own uid */
	} status;
	/* Each sink module's section struct (sink_module.section_keys; NULL for a module without
	 * one), and whether the file has the section. */
	void *sink_sections[SINK_MODULES_MAX];
	bool sink_present[SINK_MODULES_MAX];
	struct {
		log_level level;   /* default info */
		log_format format; /* default text */
	} log;
	struct {
		bool present;		     /* a backfill: section is in the file (it is printed then) */
		uint64_t chunk_time_ms;	     /* a chunk's COPY aims at this; default 250ms */
		uint64_t min_rows, max_rows; /* a chunk's size; default 100 and 2000 */
		uint64_t max_bytes;	     /* a chunk's rows and changed keys; default 64MiB */
		uint64_t rate_limit;	     /* rows read per second; default 0: none */
		uint32_t tables;	     /* tables read at once; default 1 */
		uint32_t
		    parallel; /* connections reading chunks at once; default CFG_DEFAULT_BACKFILL_PARALLEL */
	} backfill;
	cfg_subscription *subs;
	size_t nsubs;
	cfg_secret *secrets; /* every secret value and where it came from, in the order of the file */
	size_t nsecrets;
} cfg;

/* Loads and validates path. On failure returns NULL and appends one "FILE:LINE:COL: message\n"
 * line per problem to errors (every problem found, not only the first). */
cfg *cfg_load(const char *path, buf *errors);
/* The same without reading the files of secrets ({file: PATH}): a secret from a file is left unset
 * (its file is in secrets). For client commands that need no secret, run by users who may not read
 * them (cdc tail, cdc status). */
cfg *cfg_load_no_secrets(const char *path, buf *errors);
/* The same from a string (path is used in messages only): for tests and fuzzing. */
cfg *cfg_parse(const char *path, const char *text, size_t len, buf *errors);
void cfg_free(cfg *conf);
/* A subscription from the body of PUT /subscriptions/NAME: a JSON (or YAML) object with the keys
 * of a subscription in the file; "name" may be left out and must be NAME if present. conf is the
 * running configuration (a sink may need its section there). NULL after appending one
 * "PUT /subscriptions/NAME:LINE:COL: key: message" line per problem to errors. */
cfg_subscription *cfg_parse_subscription(const cfg *conf, const char *name, const char *text, size_t len,
					 buf *errors);
void cfg_subscription_free(cfg_subscription *sub); /* frees sub too */
/* A copy that owns its strings. */
cfg_subscription *cfg_subscription_copy(const cfg_subscription *sub);

/* Subscriptions changed over the status socket, kept in state_dir (CFG_OVERLAY_FILE) and laid over
 * the file's subscriptions at every start and reload: a put adds or replaces the subscription of
 * its name, a deleted name removes it. */
#define CFG_OVERLAY_FILE "subscriptions.yaml"
typedef struct cfg_overlay {
	cfg_subscription *put;
	size_t nput;
	cfg_strlist deleted;
} cfg_overlay;
/* Reads state_dir's overlay; a missing file is an empty overlay. NULL after appending the file's
 * errors to errors. */
cfg_overlay *cfg_overlay_load(const char *state_dir, buf *errors);
/* Writes it to state_dir atomically and durably (file_replace). */
bool cfg_overlay_save(const cfg_overlay *overlay, const char *state_dir, char *err,
		      size_t errlen) CDC_MUST_CHECK;
/* Records a PUT (takes sub) or a DELETE of name. */
void cfg_overlay_put(cfg_overlay *overlay, cfg_subscription *sub);
void cfg_overlay_delete(cfg_overlay *overlay, const char *name);
/* Applies overlay to conf's subscriptions. A put that needs what conf lacks (a sink's section, or settings
 * that go with conf's other subscriptions) is left out: its name appended to left_out (if not NULL) and one
 * line to errors, in the same order. False if one was. */
bool cfg_overlay_apply(const cfg_overlay *overlay, cfg *conf, cfg_strlist *left_out, buf *errors);
cfg_overlay *cfg_overlay_copy(const cfg_overlay *overlay);
void cfg_overlay_free(cfg_overlay *overlay);
/* The subscription named name in conf, or NULL. */
cfg_subscription *cfg_find_subscription(const cfg *conf, const char *name);

/* Prints the effective configuration (defaults filled in) as YAML that cfg_parse accepts again; the
 * DSN's password, secret keys and secret-looking properties (*password*, *secret*, sasl.*, *.key,
 * *key*.pem) are masked as "********". */
void cfg_print(const cfg *conf, FILE *out);

/* docs/configuration.md: every key's documentation, type, default, range and whether a reload applies
 * it, from the key tables (Markdown). False, with the keys named in err, while a key has no doc. */
bool cfg_reference(buf *out, char *err, size_t errlen) CDC_MUST_CHECK;

/* A subscription as the JSON object of GET /subscriptions: the keys cfg_print prints for it. */
void cfg_subscription_json(const cfg_subscription *sub, buf *out);

/* Calls fn with the dotted name ("source.dsn", "kafka.properties") of every key whose value differs
 * between old and next and that a reload does not apply (it takes effect at the next restart), in
 * the order of the file; returns how many. */
size_t cfg_restart_keys(const cfg *old, const cfg *next, void (*fn)(const char *key, void *arg), void *arg);

/* The name of a subscription's sink ("?" for a value out of range). */
const char *cfg_sink_name(int module);
/* What the sink module at index module gets of conf's subscriptions: one sink_sub per subscription, at its
 * index (a malloc'd array; its strings and settings are conf's). */
sink_sub *cfg_sink_subs(const cfg *conf, size_t module);
/* A key's value by its dotted name ("subscribers.socket"): a string (NULL when unset or not a
 * string key), a number, duration, size, mode or boolean (0 when not such a key). */
const char *cfg_get_string(const cfg *conf, const char *name);
uint64_t cfg_get_number(const cfg *conf, const char *name);

/* A secret's file as {file: PATH} reads it (at most 64 KiB, one final newline dropped, not empty,
 * no NUL), for clients that read a secret themselves (cdc status --token-file). The caller frees
 * *out (it wipes it first); NULL with why in err. */
char *cfg_secret_read(const char *path, char *err, size_t errlen);

/* "250ms", "10s", "5m", "24h" (also "1h30m"); false on anything else. */
bool cfg_parse_duration(const char *text, uint64_t *ms) CDC_MUST_CHECK;
/* "512", "512B", "64KiB", "64MiB", "1GiB", "2TiB": binary units only (no "1GB": see cfg_size_problem). */
bool cfg_parse_size(const char *text, uint64_t *bytes) CDC_MUST_CHECK;
/* The connection string with any password replaced by ********, for logs and status. */
char *cfg_mask_dsn(const char *dsn);

#endif

/* The YAML configuration file (see README "Configuration" and shared CONTRACT.md). cfg_load() checks
 * it all and reports each error as "FILE:LINE:COL: message". One table of keys per section
 * (cdc/config/keys.c) drives parsing, defaults, printing and reloads. */
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
/* The default of backfill.parallel. docs/backfills.md#speed has the measurements it comes from. */
#define CFG_DEFAULT_BACKFILL_PARALLEL 1

/* What cdc does when the slot cannot send what follows its position (lost, or older than the
 * publication). It fails and says what to do, or it re-syncs (moves the slot on and backfills). */
typedef enum cfg_on_gap { CFG_GAP_FAIL, CFG_GAP_RESYNC } cfg_on_gap;
/* Who may GET the status endpoints over status.listen. OPEN lets anyone who reaches the port.
 * PROBES lets anyone read /healthz and /readyz, and only the token's holders read the rest.
 * TOKEN lets only the token's holders. */
typedef enum cfg_tcp_read { CFG_TCP_READ_OPEN, CFG_TCP_READ_PROBES, CFG_TCP_READ_TOKEN } cfg_tcp_read;
/* The bounds of a bearer token's length (status.token). */
#define CFG_TOKEN_MIN 16
#define CFG_TOKEN_MAX 1024

typedef struct cfg_strlist {
	char **v;
	size_t n;
} cfg_strlist;
/* Appends a copy of text. */
void cfg_strlist_push(cfg_strlist *list, const char *text);
/* Frees the strings and the array. The list is empty after. */
void cfg_strlist_free(cfg_strlist *list);

/* Where the value of a secret key came from. Secret keys are flagged K_SECRET, or SINK_KEY_SECRET in a
 * sink module. The value comes from a file that {file: PATH} names, read again at every load (a SIGHUP),
 * or from the configuration file itself, in clear. There is one entry per secret value the
 * configuration holds. A connection string without a password holds none. */
typedef struct cfg_secret {
	char *key; /* dotted, as in "source.password" or "kafka.properties.sasl.password" */
	/* The file {file: PATH} names. A relative PATH is taken from the configuration's directory.
	 * NULL when the value is written in the configuration in clear. */
	char *file;
} cfg_secret;

typedef struct cfg_subscription {
	char *name;
	int line, col;	     /* where it is defined, for messages */
	cfg_strlist tables;  /* "schema.table" patterns with * and ? globs, and a part may be "quoted" */
	unsigned ops;	     /* enum match_op bits, by default MATCH_OPS_DEFAULT */
	char *tag;	     /* NULL if none */
	int sink;	     /* its index in sink_modules, by default 0 (the first module) */
	cfg_strlist changed; /* update matches only if one of these changed */
	char *where;	     /* predicate text, NULL if none */
	cfg_strlist columns; /* the projection, all columns when empty */
	/* Each sink module's subscription struct (sink_module.sub_keys). The file sets only the one
	 * of its own sink. The others hold their defaults. */
	void *sink_settings[SINK_MODULES_MAX];
	bool snapshot; /* backfilled when first seen (a fresh state_dir, a reload or PUT adding it) */
} cfg_subscription;

typedef struct cfg {
	char *path;
	struct {
		char *dsn;		     /* default "" (PG* variables apply) */
		char *password;		     /* secret, the role's password when dsn has none, NULL if none */
		char *slot;		     /* default "cdc_slot" */
		char *publication;	     /* default "cdc_pub" */
		bool create;		     /* default false */
		cfg_strlist publish;	     /* default ["public.*"] */
		uint64_t heartbeat_ms;	     /* default 0 (off) */
		uint64_t status_interval_ms; /* standby status updates at least this often, default 10s */
		cfg_on_gap on_slot_lost;     /* default fail */
		cfg_on_gap on_publication_newer; /* default fail */
		bool failover;			 /* the slot is a failover slot (PostgreSQL 17+) */
		char *primary_dsn;		 /* for writes when dsn is a standby, NULL if none */
		bool ddl; /* capture DDL with an event trigger (docs/events.md), default false */
		bool publish_generated_columns; /* PostgreSQL 18+, default false */
		char *signal_table; /* "schema.table" whose inserts ask for backfills, NULL if none */
	} source;
	char *state_dir; /* default "/var/lib/cdc" */
	struct {
		char *socket; /* default "/run/cdc/status.sock" */
		char *listen; /* NULL if none */
		bool tcp_control;
		char *token;		  /* secret, the bearer token status.listen asks for, NULL if none */
		cfg_tcp_read tcp_read;	  /* default open */
		char *tls_cert, *tls_key; /* PEM files for HTTPS on status.listen, NULL for plain HTTP */
		id_list control_uids;	  /* default root and cdc's own uid */
	} status;
	/* Each sink module's section struct (sink_module.section_keys), NULL for a module without
	 * one, and whether the file has the section. */
	void *sink_sections[SINK_MODULES_MAX];
	bool sink_present[SINK_MODULES_MAX];
	struct {
		log_level level;   /* default info */
		log_format format; /* default text */
	} log;
	struct {
		bool present;		     /* the file has a backfill section (it is printed then) */
		uint64_t chunk_time_ms;	     /* a chunk's COPY aims at this, default 250ms */
		uint64_t min_rows, max_rows; /* a chunk's size, default 100 and 2000 */
		uint64_t max_bytes;	     /* a chunk's rows and changed keys, default 64MiB */
		uint64_t rate_limit;	     /* rows read per second, default 0 (none) */
		uint32_t tables;	     /* tables read at once, default 1 */
		uint32_t
		    parallel; /* connections reading chunks at once, default CFG_DEFAULT_BACKFILL_PARALLEL */
	} backfill;
	cfg_subscription *subs;
	size_t nsubs;
	cfg_secret *secrets; /* every secret value and where it came from, in the order of the file */
	size_t nsecrets;
} cfg;

/* Loads and validates path. On failure returns NULL and appends one "FILE:LINE:COL: message\n"
 * line per problem to errors (every problem found, not only the first). */
cfg *cfg_load(const char *path, buf *errors);
/* The same without reading the files of secrets ({file: PATH}). A secret from a file is left unset,
 * and its file is in secrets. This is for client commands that need no secret, run by users who may
 * not read them (cdc tail, cdc status). */
cfg *cfg_load_no_secrets(const char *path, buf *errors);
/* The same from a string, for tests and fuzzing. path is used in messages only. */
cfg *cfg_parse(const char *path, const char *text, size_t len, buf *errors);
void cfg_free(cfg *conf);
/* A subscription from the body of PUT /subscriptions/NAME. The body is a JSON (or YAML) object with the
 * keys of a subscription in the file. "name" may be left out, and must be NAME if present. conf is the
 * running configuration (a sink may need its section there). On a problem it returns NULL and appends
 * one "PUT /subscriptions/NAME:LINE:COL: key: message" line per problem to errors. */
cfg_subscription *cfg_parse_subscription(const cfg *conf, const char *name, const char *text, size_t len,
					 buf *errors);
void cfg_subscription_free(cfg_subscription *sub); /* frees sub too */
/* A copy that owns its strings. */
cfg_subscription *cfg_subscription_copy(const cfg_subscription *sub);

/* Subscriptions changed over the status socket. They are kept in state_dir (CFG_OVERLAY_FILE) and
 * laid over the file's subscriptions at every start and reload. A put adds or replaces the
 * subscription of its name. A deleted name removes it. */
#define CFG_OVERLAY_FILE "subscriptions.yaml"
typedef struct cfg_overlay {
	cfg_subscription *put;
	size_t nput;
	cfg_strlist deleted;
} cfg_overlay;
/* Reads state_dir's overlay. A missing file is an empty overlay. On an error it returns NULL and
 * appends the file's errors to errors. */
cfg_overlay *cfg_overlay_load(const char *state_dir, buf *errors);
/* Writes it to state_dir atomically and durably (fsutil_replace). */
bool cfg_overlay_save(const cfg_overlay *overlay, const char *state_dir, char *err,
		      size_t errlen) CDC_MUST_CHECK;
/* Records a PUT (takes sub) or a DELETE of name. */
void cfg_overlay_put(cfg_overlay *overlay, cfg_subscription *sub);
void cfg_overlay_delete(cfg_overlay *overlay, const char *name);
/* Applies overlay to conf's subscriptions. A put is left out when it needs what conf lacks (a sink's
 * section, or settings that go with conf's other subscriptions). Its name is then appended to left_out
 * (if not NULL) and one line to errors, in the same order. Returns false if a put was left out. */
bool cfg_overlay_apply(const cfg_overlay *overlay, cfg *conf, cfg_strlist *left_out, buf *errors);
cfg_overlay *cfg_overlay_copy(const cfg_overlay *overlay);
void cfg_overlay_free(cfg_overlay *overlay);
/* The subscription named name in conf, or NULL. */
cfg_subscription *cfg_find_subscription(const cfg *conf, const char *name);

/* Prints the effective configuration (defaults filled in) as YAML that cfg_parse accepts again. It
 * masks as "********" the DSN's password, secret keys and secret-looking properties (*password*,
 * *secret*, sasl.*, *.key, *key*.pem). */
void cfg_print(const cfg *conf, FILE *out);

/* Writes docs/configuration.md in Markdown from the key tables. It gives every key's documentation,
 * type, default, range and whether a reload applies it. False, with the keys named in err, while a key
 * has no doc. */
bool cfg_reference(buf *out, char *err, size_t errlen) CDC_MUST_CHECK;

/* A subscription as the JSON object of GET /subscriptions, with the keys cfg_print prints for it. */
void cfg_subscription_json(const cfg_subscription *sub, buf *out);

/* Calls fn with the dotted name ("source.dsn", "kafka.properties") of every key whose value differs
 * between old and next and that a reload does not apply. Such a change takes effect at the next
 * restart. The calls follow the order of the file. Returns how many keys there were. */
size_t cfg_restart_keys(const cfg *old, const cfg *next, void (*fn)(const char *key, void *arg), void *arg);

/* The name of a subscription's sink ("?" for a value out of range). */
const char *cfg_sink_name(int module);
/* What the sink module at index module gets of conf's subscriptions. The malloc'd array holds one
 * sink_sub per subscription, at its index. Its strings and settings are conf's. */
sink_sub *cfg_sink_subs(const cfg *conf, size_t module);
/* A key's value by its dotted name ("subscribers.socket"). cfg_get_string gives a string, NULL when
 * unset or not a string key. cfg_get_number gives a number, duration, size, mode or boolean, 0 when
 * not such a key. */
const char *cfg_get_string(const cfg *conf, const char *name);
uint64_t cfg_get_number(const cfg *conf, const char *name);

/* Reads a secret's file as {file: PATH} does. The file holds at most 64 KiB, is not empty and has no
 * NUL. One final newline is dropped. This is for clients that read a secret themselves (cdc status
 * --token-file). The caller wipes and frees the result. NULL with why in err. */
char *cfg_secret_read(const char *path, char *err, size_t errlen);

/* Parses "250ms", "10s", "5m", "24h" (also "1h30m"). False on anything else. */
bool cfg_parse_duration(const char *text, uint64_t *ms) CDC_MUST_CHECK;
/* Parses "512", "512B", "64KiB", "64MiB", "1GiB", "2TiB". Units are binary only, so "1GB" is refused
 * (see cfg_size_problem). */
bool cfg_parse_size(const char *text, uint64_t *bytes) CDC_MUST_CHECK;
/* The connection string with any password replaced by ********, for logs and status. */
char *cfg_mask_dsn(const char *dsn);

#endif

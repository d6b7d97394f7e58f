/* What a sink declares about itself, once, in a sink_module (cf. nginx's ngx_module_t). Adding a sink is a
 * folder and one line in the module list (sinks/modules.h). */
#ifndef CDC_SINK_MODULE_H
#define CDC_SINK_MODULE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "decoder/base/hist.h"
#include "decoder/base/util.h"
#include "sinks/sink.h"

/* The configuration reads the sink's keys from its tables, and the daemon builds and binds it. Status
 * and metrics show its figures, and cdc doctor runs its checks. None of them names a sink kind. They
 * walk the module list (sinks/modules.h). */

struct event_base;
struct json_object;

/* ---- keys, the configuration a sink takes ---- */

/* How a key's value is written and stored. The configuration checks, prints and documents each. */
typedef enum sink_key_type {
	SINK_KEY_STRING,   /* char *, NULL when unset */
	SINK_KEY_BOOL,	   /* bool */
	SINK_KEY_U32,	   /* uint32_t */
	SINK_KEY_U64,	   /* uint64_t */
	SINK_KEY_DURATION, /* uint64_t milliseconds, e.g. "250ms" or "10s" */
	SINK_KEY_SIZE,	   /* uint64_t bytes, e.g. "64MiB" */
	SINK_KEY_ENUM,	   /* int, the index of its name in arg (a NULL-terminated list of names) */
	SINK_KEY_MODE,	   /* mode_t, written in octal */
	SINK_KEY_PATH,	   /* char *, a Unix socket path */
	/* A sink_properties, a mapping of strings handed to a client library. arg is a NULL-terminated list
	 * of the property names a reload applies (for a key with SINK_KEY_RESTART), or NULL. */
	SINK_KEY_PROPERTIES,
	SINK_KEY_SECTION, /* a mapping of the keys in arg (a sink_keys), stored in the same struct */
	/* An id_list of user ids. Each is written as a number or a name looked up when the file is read. */
	SINK_KEY_UIDS,
	SINK_KEY_GIDS, /* the same for groups */
} sink_key_type;

enum {
	SINK_KEY_REQUIRED = 1 << 0,
	SINK_KEY_NONEMPTY = 1 << 1,
	SINK_KEY_POSITIVE = 1 << 2,
	SINK_KEY_OPTIONAL = 1 << 3, /* printed only when set */
	SINK_KEY_FLOW = 1 << 4,	    /* a section printed on one line, e.g. {a: 1, b: 2} */
	/* A secret. It is masked wherever cdc prints it. It is given in clear or as {file: PATH}, a file read
	 * at every load so that a reload picks up a rotated secret. cdc doctor names the secrets given in
	 * clear. On a SINK_KEY_PROPERTIES key, each value may be {file: PATH}, and the secret-looking ones
	 * are secrets. */
	SINK_KEY_SECRET = 1 << 5,
	SINK_KEY_RESTART = 1 << 6, /* a reload does not apply a change, cdc must restart */
};

/* A string key's check. It returns NULL when value is fine, else why not (static text, or why filled in). */
typedef const char *(*sink_key_check)(const char *value, char *why, size_t whylen);

typedef struct sink_key {
	const char *name;
	sink_key_type type;
	size_t offset; /* of the field in the module's section or subscription struct */
	const void *arg;
	unsigned flags;
	uint64_t def_number;	/* the default of a number, duration, size, enum, mode or boolean */
	const char *def_text;	/* the default of a string, NULL if none */
	const char *doc;	/* for docs/configuration.md, Markdown, one paragraph */
	uint64_t min, max;	/* a number's range, 0 for the type's own bound */
	sink_key_check check;	/* for strings, NULL for any text */
	const char *noun;	/* for strings with a check, what a value is ("topic"), in messages */
	const char *value_type; /* for strings with a check, the type's name in the reference */
	const char *value_doc;	/* for strings with a check, how a value is written, for the reference */
} sink_key;

typedef struct sink_keys {
	const sink_key *keys;
	size_t count;
} sink_keys;
#define SINK_KEYS(array)                                                                                     \
	{                                                                                                    \
		array, sizeof array / sizeof *array                                                          \
	}

/* A SINK_KEY_PROPERTIES value. */
typedef struct sink_property {
	char *key, *value;
} sink_property;
typedef struct sink_properties {
	sink_property *items;
	size_t count;
} sink_properties;

/* Operations, as a module's hooks name them (the configuration maps them to its own). */
enum { SINK_OP_TRUNCATE = 1 << 0, SINK_OP_SCHEMA = 1 << 1 };

/* How a module's check of a subscription reports a problem with its key number key_index. */
typedef struct sink_problems {
	void (*report)(struct sink_problems *problems, size_t key_index, const char *message);
} sink_problems;

/* ---- building a sink ---- */

/* What the daemon gives every sink it makes. */
typedef struct sink_env {
	const char *slot;      /* the replication slot's name */
	const char *state_dir; /* where a sink may keep files */
	struct event_base *base;
	/* busy() may have turned false (consumers made room). */
	void (*wake)(void *ctx);
	/* delivered() may have moved without a flush (a group commit came back). */
	void (*durable)(void *ctx);
	/* Which stream of the slot this process holds now. It is a number that changes with every stream, and
	 * 0 while none is held. A sink that commits elsewhere asks before each commit. */
	uint64_t (*stream)(void *ctx);
	void *ctx;
} sink_env;

/* One subscription, as a module's create() and bind() see it, at its index. */
typedef struct sink_sub {
	const char *name;
	const char *tag;      /* NULL if none */
	bool mine;	      /* its sink is this module's */
	const void *settings; /* the module's subscription struct (its keys' values, defaults if not mine) */
} sink_sub;

/* ---- cdc doctor ---- */

typedef enum sink_verdict { SINK_PASS, SINK_WARN, SINK_FAIL } sink_verdict;

/* One run of cdc doctor, as a module's checks see it. */
typedef struct sink_doctor {
	const void *section; /* the module's section settings (defaults when the file has none) */
	const sink_sub *subs;
	size_t nsubs;
	const char *slot;
	int timeout_ms;	    /* how long a server gets to answer */
	bool database_read; /* the database's tables are known (tables() finds them) */
	/* Calls fn with each table of the database that subscription sub reads. Returns how many. */
	size_t (*tables)(struct sink_doctor *dr, size_t sub,
			 void (*fn)(void *arg, const char *schema, const char *table), void *arg);
	/* Calls fn with each column of schema.table that subscription sub delivers now. Those are the columns
	 * its columns key projects, with the key columns kept. key says whether the column is in the record's
	 * key, as cdc keys it. Returns how many, or 0 when they cannot be read (the doctor says why). */
	size_t (*columns)(struct sink_doctor *dr, size_t sub, const char *schema, const char *table,
			  void (*fn)(void *arg, const char *name, uint32_t type_oid, int32_t typmod,
				     bool key),
			  void *arg);
	/* A line for the running check. fix is NULL for a pass. */
	void (*say)(struct sink_doctor *dr, sink_verdict verdict, const char *fix, const char *fmt, ...)
	    CDC_PRINTF(4, 5);
	/* A shell command that carries out the last line's fix, as printed (each a "run:" line). */
	void (*command)(struct sink_doctor *dr, const char *command);
	/* The verdict on a path where cdc binds a Unix socket, under the key that sets it. */
	void (*socket_path)(struct sink_doctor *dr, const char *key, const char *path);
	/* Who may connect to that socket. That is its mode and owner, or those cdc gives it before it
	 * exists. */
	void (*socket_access)(struct sink_doctor *dr, const char *key, const char *path, mode_t mode);
	void *state; /* the module's own, kept from one of its checks to the next */
	void *ctx;   /* the doctor's */
} sink_doctor;

typedef struct sink_check {
	const char *name;
	/* NULL means always, else whether it applies to these settings. */
	bool (*applies)(const sink_doctor *dr);
	void (*run)(sink_doctor *dr);
} sink_check;

/* ---- the module ---- */

typedef struct sink_module {
	const char *name; /* the value of a subscription's sink key */
	/* For the sink key's documentation: "`NAME` (what it is, [doc.md](doc.md))". */
	const char *doc;

	/* The top-level section of its settings (NULL if none), its keys and the struct they fill. */
	const char *section;
	const char *section_doc;
	sink_keys section_keys;
	size_t section_size;
	bool section_optional; /* printed only when the file has it */
	/* Whether a subscription of this sink needs the section in the file, and if so what to put in it, for
	 * the message ("brokers"). NULL if it does not. */
	const char *section_needed;

	/* A subscription's keys (valid only with this sink) and the struct they fill. */
	sink_keys sub_keys;
	size_t sub_size;
	/* Checks one subscription's settings once its keys are read. given[i] tells whether sub_keys' key i
	 * was in the file. It may fill in defaults that depend on other keys. NULL if none. */
	void (*check_sub)(void *settings, const bool *given, sink_problems *problems);
	/* Whether sub_keys' key i of these settings is printed (NULL if all are). */
	bool (*sub_shown)(const void *settings, size_t key_index);
	/* How a subscription's settings change its operations (SINK_OP_* bits). NULL if none.
	 * - ops_not_default gives those left out of the default when the file lists none. Debezium, for
	 *   example, writes no truncate unless asked.
	 * - ops_needed gives those it receives whatever the list says, such as the schema events a format
	 *   needs to write rows. It applies only with a row operation. */
	unsigned (*ops_not_default)(const void *settings);
	unsigned (*ops_needed)(const void *settings);
	/* Checks the subscriptions of this sink together. section is NULL when the file has none. Returns
	 * false when two cannot go together, with *first and *second their indexes and why in why. */
	bool (*check_together)(const void *section, const void *const *subs, const char *const *names,
			       size_t count, size_t *first, size_t *second, buf *why);

	/* Makes the sink, then binds subs as bind() does. NULL with err when it cannot. */
	sink *(*create)(const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
			char *err, size_t errlen);
	/* Called after every reload. It takes the subscriptions (copied), and the section's settings that a
	 * restart of its client takes. False with err when it cannot. */
	bool (*bind)(sink *sk, const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
		     char *err, size_t errlen);

	/* The daemon's calls that a sink may need. Every hook is optional. */
	/* Within how many milliseconds flush() should run again even if nothing happens (0 if no need). */
	int (*wake_ms)(const sink *sk);
	/* Whether flush() should run every second while streaming (a timed commit may be due). */
	bool (*ticks)(const sink *sk);
	/* The name of the database the slot streams, once cdc connected (copied). */
	void (*database)(sink *sk, const char *name);
	/* A subscription was deleted for good. What the sink keeps of it goes. */
	bool (*forget)(sink *sk, const char *name, char *err, size_t errlen);

	/* /status and /metrics. Every hook is optional. */
	void (*status_json)(const sink *sk, buf *out); /* its object, shown under its name */
	void (*metrics)(const sink *sk, buf *out);     /* its families */
	const hist *(*latency)(const sink *sk);	       /* commit to delivery, microseconds */
	const char *(*not_ready)(const sink *sk);      /* why /readyz answers 503, or NULL */
	void (*log_figures)(const sink *sk);	       /* a log line, beside each progress line */
	/* Its subscriptions' own members of /status (after "bytes"), shown as null for others. */
	const char *const *sub_fields;
	/* Appends subscription sub's sub_fields as JSON members (",\"sk\":v" each). It may correct what the
	 * pipeline counted as delivered. False means it does not serve sub (null members). */
	bool (*sub_status)(const sink *sk, uint32_t sub, uint64_t *delivered, buf *members);
	/* Its subscriptions' families. names[i] is NULL for a subscription of another sink. */
	void (*sub_metrics)(const sink *sk, const char *const *names, size_t count, buf *out);
	/* For cdc status, lines from its /status object. */
	void (*status_text)(struct json_object *figures, buf *out);

	/* The checks of cdc doctor. They run when the file has its section or a subscription uses it. The
	 * list ends with one whose name is NULL. */
	const sink_check *checks;
	void (*doctor_done)(sink_doctor *dr); /* frees dr->state */
	/* The bytes one subscription may keep in state_dir, for the state_dir check. False when it keeps
	 * nothing there. *bytes is 0 when unbounded. state_limit_key names the setting in messages. */
	bool (*state_bytes)(const void *settings, uint64_t *bytes);
	const char *state_limit_key;
} sink_module;

#endif

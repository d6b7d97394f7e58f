/* What the files of cdc/config share and nothing outside cdc/config uses. That is the YAML node tree
 * with FILE:LINE:COL marks (tree.c), value checks and formats (values.c), the printer (print.c), the
 * value types (types.c) and the key tables for parsing, defaults, printing and reloads (keys.c). */
#ifndef CDC_CONFIG_INTERNAL_H
#define CDC_CONFIG_INTERNAL_H

#include "cdc/config/config.h"

#include <stdarg.h>
#include <stddef.h>

#define CFG_MASK "********"
#define CFG_MAX_KEYS 64 /* the most keys a mapping has (keys.c checks the built tables) */
#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define DIGIT "0123456789"

/* ---- the node tree (tree.c) ---- */

typedef enum node_kind { N_SCALAR, N_MAP, N_SEQ } node_kind;

typedef struct node {
	node_kind kind;
	bool plain;    /* a scalar written without quotes, which may be null */
	int line, col; /* 1-based */
	char *text;    /* a scalar's NUL-terminated copy (may hold a NUL from a "\0" escape) */
	bool secret;   /* a scalar holding a secret file's content, never quoted in a message */
	size_t len;
	struct node **kids; /* a map's key, value, key, value..., or a seq's items */
	size_t n, cap;
} node;

void cfg_node_free(node *nd);
bool cfg_is_null(const node *nd);
void cfg_node_add(node *parent, node *kid);
node *cfg_scalar_node(const char *text, int line, int col);

/* The state of one check. It holds where messages go and the key path they name. */
typedef struct ctx {
	const char *file;
	buf *errors;
	unsigned nerr;
	buf path;  /* key path of the node being checked, e.g. "subscriptions[1].tables" */
	buf quote; /* scratch for quoting user text in one message */
	bool have_section[SINK_MODULES_MAX]; /* the file has the sink module's section */
	cfg *secrets_of;     /* where secret values are recorded (the configuration file's cfg), or NULL */
	bool secrets_unread; /* {file: PATH} is recorded, not read, and the secret stays unset */
	int sink_hint;	     /* the sink the subscription being read names (-1 if none or unknown) */
} ctx;

void cfg_ctx_free(ctx *cx);
void cfg_err_pos(ctx *cx, int line, int col, const char *fmt, ...) CDC_PRINTF(4, 5);
void cfg_err_at(ctx *cx, const node *nd, const char *fmt, ...) CDC_PRINTF(3, 4);
/* An error about key `name` of the mapping being checked. */
void cfg_err_key(ctx *cx, const node *nd, const char *name, const char *fmt, ...) CDC_PRINTF(4, 5);
size_t cfg_path_push(ctx *cx, const char *name);
size_t cfg_path_index(ctx *cx, size_t index);
void cfg_path_pop(ctx *cx, size_t old);
/* User text for a message, double-quoted, shortened and escaped so that it stays on one line. */
const char *cfg_quoted(ctx *cx, const char *text, size_t len);
const char *cfg_qnode(ctx *cx, const node *nd);
void cfg_wrong_kind(ctx *cx, const node *nd, const char *want);
/* The text of a scalar value, or NULL (and an error) for anything else, null included. */
const char *cfg_scalar(ctx *cx, const node *nd, const char *want);
/* Parses one YAML document into *root (NULL for an empty stream). */
bool cfg_build_tree(ctx *cx, const char *text, size_t len, node **root);
/* A file's text, up to 16 MiB. On failure it appends a "FILE:1:1: ..." line to errors and returns false. */
bool cfg_read_text(const char *path, buf *text, buf *errors);

/* ---- values (values.c) ---- */

typedef struct ename {
	const char *name;
	int value;
} ename;

extern const ename op_names[], gap_names[], level_names[], format_names[], tcp_read_names[];
const ename *cfg_ename_find(const ename *names, const char *name);
const char *cfg_ename_of(const ename *names, int value);
void cfg_ename_list(buf *buffer, const ename *names);

typedef struct ident_rule {
	const char *first, *rest; /* allowed characters, NULL for any but control characters */
	size_t max;
	const char *expect;
} ident_rule;

extern const ident_rule slot_rule, pub_rule, sub_rule;
bool cfg_ident_ok(const char *text, const ident_rule *rule);
/* NULL if ok, else why not (static text, or why filled in). */
const char *cfg_listen_problem(const char *text);
/* Why text is not a size cfg_parse_size takes (static text, or why filled in). */
const char *cfg_size_problem(const char *text, char *why, size_t whylen);
/* Formats a value as cfg_parse_duration ("1h30m", "0") and cfg_parse_size ("1GiB", "1000001")
 * read it back. */
void cfg_fmt_duration(buf *buffer, uint64_t ms);
void cfg_fmt_size(buf *buffer, uint64_t count);

/* ---- the printer (print.c), YAML for check-config and the overlay file, JSON for the API ---- */

typedef struct emit {
	buf *b;
	buf *path;	       /* the dotted key being printed, when secrets are (NULL if none) */
	const cfg *secrets_of; /* whose secrets' files are printed as {file: PATH} */
	bool json;
	bool flow;	 /* in YAML, inside { } and keys separated by ", " (JSON is always flow) */
	bool first;	 /* no key written yet in the current mapping */
	bool space;	 /* in YAML, a key was written and its value goes after a space */
	bool inline_key; /* in a YAML block, the next key goes on the line already started ("- ") */
	int indent;	 /* in a YAML block, the spaces before a key */
} emit;

void cfg_emit_key(emit *em, const char *name);
void cfg_emit_str(emit *em, const char *text); /* a string, quoted when YAML needs it */
void cfg_emit_word(emit *em,
		   const char *text); /* a token YAML reads as itself (10s, key_shared), a string in JSON */
void cfg_emit_raw(emit *em, const char *text); /* the same in YAML and JSON, as true, 5, [] */
void cfg_emit_u64(emit *em, uint64_t value);
/* [ or { (a flow mapping). Returns the state that cfg_emit_close restores. */
emit cfg_emit_open(emit *em, char ch);
void cfg_emit_close(emit *em, char ch, const emit *saved);
void cfg_emit_item(emit *em, size_t index);   /* before the i-th item of a list */
void cfg_emit_line(emit *em, int indent);     /* in a YAML block, a new line at this indent */
bool cfg_prop_is_secret(const char *text);    /* masked when printed */
bool cfg_prop_holds_secret(const char *text); /* recorded as a secret (cfg->secrets) */
/* Whether a connection string holds a password (password or sslpassword, also in a URI). */
bool cfg_dsn_has_secret(const char *dsn);

/* ---- secrets (secret.c) ---- */

#define CFG_SECRET_MAX (64 * 1024) /* a secret file holds a password, a token, a connection string */
/* Returns nd itself, or for {file: PATH} a scalar node with the file's content (one final newline
 * removed). *made owns that node, and *file gets PATH. It returns NULL after an error: a mapping that
 * is not {file: PATH}, or a file that cannot be read, is empty, is larger than CFG_SECRET_MAX or holds
 * a NUL. It also returns NULL, with no error and *file set, for a well-formed {file: PATH} when
 * x->secrets_unread is set. */
const node *cfg_secret_value(ctx *cx, const node *nd, node **made, const char **file);
/* A path as cdc uses it, a relative one taken from the configuration file's directory (types.c).
 * The caller frees it. */
char *cfg_resolved(const ctx *cx, const char *text);
/* Records the secret value at cx's key path (file NULL for a value in clear). */
void cfg_secret_record(ctx *cx, const char *file);
/* The file the secret at name (dotted) was read from, NULL when none (or not a secret). */
const char *cfg_secret_file(const cfg *conf, const char *name);
/* {file: PATH} as the configuration writes it. */
void cfg_emit_secret_file(emit *em, const char *file);
void cfg_secrets_free(cfg *conf);

/* ---- keys and value types (types.c, keys.c) ---- */

typedef struct key key;
typedef struct pair {
	const node *k, *v;
} pair;
/* Checks nd and stores it into the field at base + entry->off. */
typedef void (*setter)(ctx *cx, const node *nd, void *base, const key *entry);

/* How a type holds its value. It decides what giving the default, freeing, copying and comparing do. */
typedef enum kstore {
	ST_VALUE,   /* size bytes held in place */
	ST_STR,	    /* char *, NULL when unset */
	ST_LIST,    /* cfg_strlist */
	ST_IDS,	    /* id_list of user or group ids */
	ST_SECTION, /* a mapping whose keys (arg) are fields of the same base */
	ST_OWN,	    /* the type's clear and same know where the value is */
} kstore;

typedef struct ktype {
	setter set;
	void (*print)(emit *em, const void *base, const key *entry);
	kstore store;
	size_t size;							     /* ST_VALUE */
	void (*clear)(void *base, const key *entry);			     /* ST_OWN */
	bool (*same)(const void *data, const void *data2, const key *entry); /* ST_OWN, for restart keys */
	const char *name; /* what a value is, for the reference ("duration", "list of table patterns") */
} ktype;

enum {
	K_REQUIRED = 1,
	K_NONEMPTY = 2,
	K_POSITIVE = 4,
	K_PATTERNS = 8,
	K_OPTIONAL = 16, /* printed only when set (not NULL, not empty) */
	K_FLOW = 32,	 /* a section printed on one line, as {a: 1, b: 2} */
	K_VIA = 64,	 /* the field is in the struct that the pointer at base + via points to */
	/* A secret. It is given in clear or as {file: PATH} (read at every load). It is printed masked
	 * or as that {file: PATH}. It is recorded in the cfg's secrets, and cdc doctor names those in
	 * clear. Only top-level sections have secrets, because a subscription's keys reach the status
	 * socket. A mapping of strings (t_props) takes {file: PATH} for each value. */
	K_SECRET = 128,
};

struct key {
	const char *name;
	const ktype *type;
	size_t off;
	const void *arg; /* type-specific, such as the names of an enum, a section's keys, an ident_rule */
	unsigned flags;
	union {
		uint64_t n;    /* ST_VALUE */
		const char *s; /* ST_STR, or for ST_LIST its one item */
	} def;		       /* the default, zero for none */
	bool restart;	       /* a reload does not apply a change, so cdc must restart */
	const char *doc;       /* what the key does, for docs/configuration.md (Markdown, one paragraph) */
	uint64_t min, max;     /* the range of numbers, durations (ms), sizes (0 is the type's own bound) */
	/* For K_VIA, where the pointer to the field's struct is, and that struct's size. The struct is
	 * allocated with the defaults and freed with the keys. */
	size_t via, via_size;
	int module; /* 1 + the index of the sink module whose key it is, 0 for cdc's own */
};

/* The range a number, duration or size key accepts. It is [min, max] of the key, or else from 1
 * (K_POSITIVE) or 0 up to the type's largest value. The setters enforce it and the reference prints it. */
void cfg_key_range(const key *entry, uint64_t *lo, uint64_t *hi);
/* A value of key entry as the configuration writes it ("10s", "64MiB", "5"). */
void cfg_key_value_text(buf *buffer, const key *entry, uint64_t value);

typedef struct keys {
	const key *k;
	size_t n;
	bool top; /* the top level, for "unknown top-level key" */
	/* cross-field checks once every key of the mapping is stored. seen[i] is key k[i], if present. */
	void (*check)(ctx *cx, void *base, const pair *seen);
	/* whether key entry of base is printed (NULL prints all) */
	bool (*shown)(const void *base, const key *entry);
	/* for a sink module's section, called with its index when the file has it */
	void (*present)(void *base, size_t module);
	size_t module;
} keys;

/* Where key entry's value is in base. */
static inline char *key_field(const void *base, const key *entry)
{
	char *at = (char *)(uintptr_t)base;
	if (entry->flags & K_VIA)
		at = *(char **)(void *)(at + entry->via);
	return at + entry->off;
}
#define FIELD(base, k, type) ((type *)(void *)key_field(base, k))
#define CFIELD(base, k, type) ((const type *)(const void *)key_field(base, k))
#define KEYS(a, ...)                                                                                         \
	{                                                                                                    \
		a, sizeof a / sizeof *a, __VA_ARGS__                                                         \
	}

/* t_checked is a string a sink module checks. Its arg is its sink_key, with the check and the noun. */
extern const ktype t_section, t_string, t_dsn, t_where, t_socket, t_path, t_ident, t_listen, t_checked,
    t_table, t_bool, t_duration, t_size, t_u32, t_u64, t_enum, t_mode, t_strlist, t_ops, t_names, t_uids,
    t_gids, t_token, t_props;
/* Built from cdc's own keys and the sink modules' before main() runs. */
extern keys top_keys, sub_keys;
/* Sets status.control_uids' default, in force until the file names others (an empty list too). It is
 * root and the uid of the process that reads the file, which is cdc's own for `cdc run`. */
void cfg_uids_default(cfg *conf);
/* The names, as the file writes them, of sink_modules in a subscription's sink key. */
extern const ename *sink_names;

/* The sink module a subscription's mapping names in its sink key (-1 if none, or not a sink). */
int cfg_sink_named(const node *nd);

/* Whether subscription sub goes with conf's other subscriptions of its sink, leaving out those named
 * like sub. With sub NULL, it checks conf's subscriptions against each other. On false, why holds the
 * message. It names sub against one of conf's, or (sub NULL) two of conf's, and *second gets the second. */
bool cfg_subs_together(const cfg *conf, const cfg_subscription *sub, const cfg_subscription **second,
		       buf *why);

/* Checks mapping nd against the keys table for unknown, duplicate and missing keys. Each value goes to
 * its setter. Then table->check sees the whole mapping. */
void cfg_walk_map(ctx *cx, const node *nd, void *base, const keys *table, pair *seen);
void cfg_keys_default(void *base, const keys *table);
void cfg_keys_clear(void *base, const keys *table);
void cfg_keys_copy(void *dst, const void *src, const keys *table); /* after *dst = *src, owns its copies */
void cfg_keys_print(emit *em, const void *base, const keys *table);
/* A list of subscriptions (sub_keys), held in a cfg's subs and nsubs. Both the top level and the
 * overlay file have one. */
extern const ktype t_subs;

void cfg_strlist_copy(cfg_strlist *dst, const cfg_strlist *src);

/* For each entry (by its i), the i of the first entry with the same name, or itself if none. Entries
 * without a name (s == NULL) are skipped. It is O(n log n), so that a huge file cannot make it quadratic. */
typedef struct named {
	const char *s;
	size_t i;
} named;
size_t *cfg_first_of(named *names, size_t count);

#endif

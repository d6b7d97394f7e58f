/* config.c: loads the YAML configuration (see config.h): libyaml events become a small node tree with
 * line/column marks, then tables of keys (one setter per value type) fill and validate a cfg,
 * reporting every problem as "FILE:LINE:COL: message". cfg_print writes the effective config back. */
#include "cdc/config/config.h"

#include "cdc/config/predicate.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/un.h>
#include <unistd.h>
#include <yaml.h>

#define CFG_MAX_DEPTH 32	 /* our schema needs 5; deeper input is hostile or a mistake */
#define CFG_MAX_FILE (16u << 20) /* a config file, not a data set */
#define CFG_MAX_NAME 63		 /* PostgreSQL's NAMEDATALEN - 1 */
#define CFG_MASK "********"
#define CFG_MAX_ERRORS 100 /* a wrong file (a binary, a log) would otherwise give megabytes */

/* Setters store enums through an int pointer: make sure that is what they are. */
_Static_assert(sizeof(cfg_sink) == sizeof(int) && sizeof(cfg_consumers) == sizeof(int) &&
		   sizeof(cfg_when_full) == sizeof(int) && sizeof(cfg_batch) == sizeof(int) &&
		   sizeof(log_format) == sizeof(int) && sizeof(log_level) == sizeof(int),
	       "enums are stored as int");
_Static_assert(sizeof(uid_t) == sizeof(uint32_t), "uid_t is 32 bits");

/* ---- the node tree ---- */

typedef enum node_kind { N_SCALAR, N_MAP, N_SEQ } node_kind;

typedef struct node {
	node_kind kind;
	bool plain;    /* scalar written without quotes: may be null */
	int line, col; /* 1-based */
	char *text;    /* scalar: NUL-terminated copy (may hold a NUL from a "\0" escape) */
	size_t len;
	struct node **kids; /* map: key, value, key, value...; seq: items */
	size_t n, cap;
} node;

static void node_free(node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n; i++)
		node_free(n->kids[i]);
	free(n->kids);
	free(n->text);
	free(n);
}

static bool is_null(const node *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
	if (n->kind != N_SCALAR || !n->plain)
		return false;
	for (size_t i = 0; i < sizeof nulls / sizeof *nulls; i++)
		if (strcmp(n->text, nulls[i]) == 0)
			return true;
	return false;
}

/* ---- error reporting ---- */

typedef struct ctx {
	const char *file;
	buf *errors;
	unsigned nerr;
	buf path;  /* key path of the node being checked, e.g. "subscriptions[1].tables" */
	buf quote; /* scratch for quoting user text in one message */
	bool have_kafka;
} ctx;

static void CDC_PRINTF(4, 0) verr(ctx *x, int line, int col, const char *fmt, va_list ap)
{
	if (x->nerr++ >= CFG_MAX_ERRORS) {
		if (x->nerr == CFG_MAX_ERRORS + 1)
			buf_printf(x->errors, "%s:%d:%d: too many errors, stopped reporting\n", x->file, line,
				   col);
		return;
	}
	buf_printf(x->errors, "%s:%d:%d: ", x->file, line, col);
	if (x->path.len)
		buf_printf(x->errors, "%s: ", x->path.data);
	va_list ap2;
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	if (n > 0) {
		buf_reserve(x->errors, (size_t)n + 1);
		vsnprintf(x->errors->data + x->errors->len, (size_t)n + 1, fmt, ap2);
		x->errors->len += (size_t)n;
	}
	va_end(ap2);
	buf_putc(x->errors, '\n');
}

static void CDC_PRINTF(4, 5) err_pos(ctx *x, int line, int col, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(x, line, col, fmt, ap);
	va_end(ap);
}

static void CDC_PRINTF(3, 4) err_at(ctx *x, const node *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verr(x, n->line, n->col, fmt, ap);
	va_end(ap);
}

static size_t path_push(ctx *x, const char *key)
{
	size_t old = x->path.len;
	if (old)
		buf_putc(&x->path, '.');
	buf_puts(&x->path, key);
	return old;
}

static size_t path_index(ctx *x, size_t i)
{
	size_t old = x->path.len;
	buf_printf(&x->path, "[%zu]", i);
	return old;
}

static void path_pop(ctx *x, size_t old)
{
	x->path.len = old;
	x->path.data[old] = '\0';
}

/* An error about key `key` of the mapping being checked. */
static void CDC_PRINTF(4, 5) err_key(ctx *x, const node *n, const char *key, const char *fmt, ...)
{
	size_t old = path_push(x, key);
	va_list ap;
	va_start(ap, fmt);
	verr(x, n->line, n->col, fmt, ap);
	va_end(ap);
	path_pop(x, old);
}

/* User text for a message: double-quoted, escaped so that it stays on one line, shortened. */
static const char *quoted(ctx *x, const char *s, size_t len)
{
	buf *q = &x->quote;
	buf_reset(q);
	buf_putc(q, '"');
	size_t max = len > 64 ? 60 : len;
	while (max < len && max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--; /* don't cut a UTF-8 sequence */
	for (size_t i = 0; i < max; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			buf_printf(q, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			buf_printf(q, "\\x%02X", c);
		else
			buf_putc(q, (char)c);
	}
	buf_puts(q, max < len ? "...\"" : "\"");
	return q->data;
}

static const char *qnode(ctx *x, const node *n)
{
	return quoted(x, n->text, n->len);
}

static void wrong_kind(ctx *x, const node *n, const char *want)
{
	if (n->kind == N_MAP)
		err_at(x, n, "expected %s, got a mapping", want);
	else if (n->kind == N_SEQ)
		err_at(x, n, "expected %s, got a list", want);
	else if (is_null(n))
		err_at(x, n, "expected %s, got %s", want, n->len ? "null" : "an empty value");
	else
		err_at(x, n, "expected %s, got %s", want, qnode(x, n));
}

/* The text of a scalar value, or NULL (and an error) for anything else, null included. */
static const char *scalar(ctx *x, const node *v, const char *want)
{
	if (v->kind != N_SCALAR || is_null(v)) {
		wrong_kind(x, v, want);
		return NULL;
	}
	if (strlen(v->text) != v->len) {
		err_at(x, v, "must not contain a NUL character");
		return NULL;
	}
	return v->text;
}

/* ---- YAML events -> node tree ---- */

static void yaml_error(ctx *x, yaml_parser_t *p, const char *text, size_t len)
{
	const char *problem = p->problem ? p->problem : "invalid YAML";
	if (p->error == YAML_MEMORY_ERROR) {
		err_pos(x, 1, 1, "out of memory while parsing");
	} else if (p->error == YAML_READER_ERROR) {
		/* The reader reports a byte offset, not a mark: count lines and characters up to it. */
		size_t off = p->problem_offset < len ? p->problem_offset : len;
		int line = 1, col = 1;
		for (size_t i = 0; i < off; i++) {
			if (text[i] == '\n')
				line++, col = 1;
			else if (((unsigned char)text[i] & 0xC0) != 0x80)
				col++;
		}
		if (p->problem_value != -1)
			err_pos(x, line, col, "syntax error: %s (#%X)", problem, (unsigned)p->problem_value);
		else
			err_pos(x, line, col, "syntax error: %s", problem);
	} else if (p->context) {
		err_pos(x, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1,
			"syntax error: %s (%s at %zu:%zu)", problem, p->context, p->context_mark.line + 1,
			p->context_mark.column + 1);
	} else {
		err_pos(x, (int)p->problem_mark.line + 1, (int)p->problem_mark.column + 1, "syntax error: %s",
			problem);
	}
}

static void node_add(node *parent, node *kid)
{
	if (parent->n == parent->cap) {
		parent->cap = parent->cap ? parent->cap * 2 : 8;
		parent->kids = xrealloc(parent->kids, parent->cap * sizeof *parent->kids);
	}
	parent->kids[parent->n++] = kid;
}

/* Parses one YAML document into *root (NULL for an empty stream). Rejects aliases (their expansion
 * is the "billion laughs" attack), explicit tags, several documents and absurd nesting. */
static bool build_tree(ctx *x, const char *text, size_t len, node **root)
{
	yaml_parser_t p;
	yaml_event_t ev;
	node *stack[CFG_MAX_DEPTH];
	size_t depth = 0;
	int docs = 0;
	bool ok = false, done = false;

	*root = NULL;
	if (!yaml_parser_initialize(&p)) {
		err_pos(x, 1, 1, "out of memory while parsing");
		return false;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done) {
		if (!yaml_parser_parse(&p, &ev)) {
			yaml_error(x, &p, text, len);
			goto out;
		}
		int line = (int)ev.start_mark.line + 1, col = (int)ev.start_mark.column + 1;
		const yaml_char_t *tag = NULL;
		node *n = NULL;
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (docs++) {
				err_pos(x, line, col, "only one YAML document is allowed");
				yaml_event_delete(&ev);
				goto out;
			}
			break;
		case YAML_ALIAS_EVENT:
			err_pos(x, line, col, "aliases (*%s) are not allowed",
				(const char *)ev.data.alias.anchor);
			yaml_event_delete(&ev);
			goto out;
		case YAML_SCALAR_EVENT:
			tag = ev.data.scalar.tag;
			n = xcalloc(1, sizeof *n);
			n->kind = N_SCALAR;
			n->plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
			n->len = ev.data.scalar.length;
			n->text = xmalloc(n->len + 1);
			memcpy(n->text, ev.data.scalar.value, n->len);
			n->text[n->len] = '\0';
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			tag = ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.tag
								   : ev.data.mapping_start.tag;
			n = xcalloc(1, sizeof *n);
			n->kind = ev.type == YAML_SEQUENCE_START_EVENT ? N_SEQ : N_MAP;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			break;
		default:
			break;
		}
		if (tag) {
			err_pos(x, line, col, "explicit tags (%s) are not allowed",
				quoted(x, (const char *)tag, strlen((const char *)tag)));
			node_free(n);
			yaml_event_delete(&ev);
			goto out;
		}
		yaml_event_delete(&ev);
		if (!n)
			continue;
		n->line = line;
		n->col = col;
		if (depth)
			node_add(stack[depth - 1], n);
		else
			*root = n;
		if (n->kind != N_SCALAR) {
			if (depth == CFG_MAX_DEPTH) {
				err_pos(x, line, col, "nested deeper than %d levels", CFG_MAX_DEPTH);
				goto out;
			}
			stack[depth++] = n;
		}
	}
	ok = true;
out:
	yaml_parser_delete(&p);
	if (!ok) {
		node_free(*root);
		*root = NULL;
	}
	return ok;
}

/* ---- value checks shared by setters and tests ---- */

bool cfg_parse_duration(const char *s, uint64_t *ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {{"h", 3600000}, {"ms", 1}, {"m", 60000}, {"s", 1000}};
	uint64_t total = 0;
	int last = -1; /* units must come in decreasing order, each once: "1h30m", not "30m1h" */

	if (!s || !*s)
		return false;
	if (strcmp(s, "0") == 0) {
		*ms = 0;
		return true;
	}
	while (*s) {
		uint64_t v = 0;
		if (*s < '0' || *s > '9')
			return false;
		for (; *s >= '0' && *s <= '9'; s++) {
			if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
				return false;
			v = v * 10 + (uint64_t)(*s - '0');
		}
		int u;
		for (u = 0; u < 4; u++)
			if (strncmp(s, units[u].unit, strlen(units[u].unit)) == 0)
				break;
		if (u == 4)
			return false;
		int rank = u == 0 ? 0 : u == 2 ? 1 : u == 3 ? 2 : 3; /* h, m, s, ms */
		if (rank <= last)
			return false;
		last = rank;
		s += strlen(units[u].unit);
		if (v > UINT64_MAX / units[u].ms || total > UINT64_MAX - v * units[u].ms)
			return false;
		total += v * units[u].ms;
	}
	*ms = total;
	return true;
}

static const struct {
	const char *unit;
	uint64_t mult;
} size_units[] = {
    {"TiB", 1ull << 40},
    {"GiB", 1ull << 30},
    {"MiB", 1ull << 20},
    {"KiB", 1ull << 10},
    {"TB", 1000000000000ull},
    {"GB", 1000000000ull},
    {"MB", 1000000ull},
    {"kB", 1000},
    {"KB", 1000},
    {"B", 1},
    {"", 1},
};

bool cfg_parse_size(const char *s, uint64_t *bytes)
{
	uint64_t v = 0;
	if (!s || *s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return false;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	for (size_t i = 0; i < sizeof size_units / sizeof *size_units; i++) {
		if (strcmp(s, size_units[i].unit) != 0)
			continue;
		if (v > UINT64_MAX / size_units[i].mult)
			return false;
		*bytes = v * size_units[i].mult;
		return true;
	}
	return false;
}

/* One part of a pattern, unquoted into out; false if it is not a well-formed part. */
static bool pattern_part(const char **pp, char out[CFG_MAX_NAME + 1], bool *quoted)
{
	const char *p = *pp;
	size_t n = 0;
	*quoted = *p == '"';
	if (*quoted) {
		for (p++;; p++) {
			if (!*p)
				return false;
			if (*p == '"' && *++p != '"')
				break;
			if (n == CFG_MAX_NAME)
				return false;
			out[n++] = *p;
		}
	} else {
		for (; *p && *p != '.'; p++) {
			if (*p == '"' || n == CFG_MAX_NAME)
				return false;
			out[n++] = *p;
		}
	}
	out[n] = '\0';
	*pp = p;
	return n > 0;
}

/* "schema.table" with * and ? globs: exactly one dot outside double quotes, both parts non-empty and
 * at most 63 bytes once unquoted. A part is either unquoted, in PostgreSQL's identifier characters
 * plus the globs, or wholly in double quotes ("" for a quote), as in SQL. NULL if ok. */
static const char *pattern_problem(const char *s, char *why, size_t whylen)
{
	size_t part_len[2] = {0, 0};
	int part = 0;
	bool inq = false;
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if (inq) {
			if (c == '"' && p[1] == '"')
				p++;
			else if (c == '"') {
				inq = false;
				if (p[1] && p[1] != '.')
					return "double quotes must surround a whole schema or table name";
				continue;
			}
		} else if (c == '"') {
			if (p != s && p[-1] != '.')
				return "double quotes must surround a whole schema or table name";
			inq = true;
			continue;
		} else if (c == '.') {
			if (part++)
				return "expected schema.table with exactly one dot outside double quotes";
			continue;
		} else if (!(c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			     (c >= '0' && c <= '9') || c == '_' || c == '$' || c == '*' || c == '?')) {
			errf(why, whylen, "character '%c' is only allowed inside double quotes",
			     c >= 0x20 && c < 0x7f ? c : '?');
			return why;
		}
		if (c < 0x20 || c == 0x7f)
			return "control characters are not allowed";
		part_len[part]++;
	}
	if (inq)
		return "unterminated double quote";
	if (part == 0)
		return "expected schema.table (no dot)";
	if (!part_len[0])
		return "empty schema name";
	if (!part_len[1])
		return "empty table name";
	if (part_len[0] > CFG_MAX_NAME || part_len[1] > CFG_MAX_NAME)
		return "schema and table names are at most 63 bytes";
	/* what passes here, cfg_table_match must understand */
	char name[CFG_MAX_NAME + 1];
	bool quoted;
	const char *p = s;
	if (!pattern_part(&p, name, &quoted) || *p++ != '.' || !pattern_part(&p, name, &quoted) || *p)
		return "not of the form schema.table";
	return NULL;
}

/* * and ? globs, byte-wise; linear backtracking, so no pattern can make it slow. */
static bool glob_match(const char *pat, const char *s)
{
	const char *star = NULL, *resume = NULL;
	while (*s) {
		if (*pat == '*') {
			star = pat++;
			resume = s;
		} else if (*pat && (*pat == '?' || *pat == *s)) {
			pat++;
			s++;
		} else if (star) {
			pat = star + 1;
			s = ++resume;
		} else {
			return false;
		}
	}
	while (*pat == '*')
		pat++;
	return !*pat;
}

bool cfg_table_match(const char *pattern, const char *schema, const char *table)
{
	char part[2][CFG_MAX_NAME + 1];
	bool quoted[2];
	const char *p = pattern;
	if (!pattern_part(&p, part[0], &quoted[0]) || *p != '.')
		return false;
	p++;
	if (!pattern_part(&p, part[1], &quoted[1]) || *p)
		return false;
	return (quoted[0] ? strcmp(part[0], schema) == 0 : glob_match(part[0], schema)) &&
	       (quoted[1] ? strcmp(part[1], table) == 0 : glob_match(part[1], table));
}

/* "HOST:PORT" or "[IPv6]:PORT", port 1-65535. NULL if ok. */
static const char *listen_problem(const char *s)
{
	const char *port;
	if (*s == '[') {
		const char *end = strchr(s, ']');
		if (!end || end == s + 1 || end[1] != ':')
			return "expected [IPv6]:PORT";
		for (const char *p = s + 1; p < end; p++)
			if (!strchr("0123456789abcdefABCDEF:.%", *p) &&
			    !(*p == '_' || *p == '-' || (*p >= 'g' && *p <= 'z') || (*p >= 'G' && *p <= 'Z')))
				return "invalid character in IPv6 address";
		if (!memchr(s + 1, ':', (size_t)(end - s - 1)))
			return "expected an IPv6 address inside [ ]";
		port = end + 2;
	} else {
		const char *colon = strrchr(s, ':');
		if (!colon || colon == s)
			return "expected HOST:PORT or [IPv6]:PORT";
		for (const char *p = s; p < colon; p++) {
			if (*p == ':')
				return "an IPv6 address needs brackets: [IPv6]:PORT";
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' || *p == '_'))
				return "invalid character in host name";
		}
		port = colon + 1;
	}
	unsigned long v = 0;
	size_t digits = strspn(port, "0123456789");
	if (!digits || port[digits] || digits > 5)
		return "port must be a number from 1 to 65535";
	for (size_t i = 0; i < digits; i++)
		v = v * 10 + (unsigned long)(port[i] - '0');
	if (v < 1 || v > 65535)
		return "port must be a number from 1 to 65535";
	return NULL;
}

/* Kafka topic templates: the names Kafka allows, and the placeholders we expand. NULL if ok. */
static const char *topic_problem(const char *s, char *why, size_t whylen)
{
	static const char *const ph[] = {"{schema}", "{table}", "{subscription}", "{tag}"};
	for (const char *p = s; *p;) {
		if (*p == '{') {
			size_t i, n = 0;
			for (i = 0; i < 4; i++)
				if (strncmp(p, ph[i], n = strlen(ph[i])) == 0)
					break;
			if (i == 4) {
				size_t end = strcspn(p, "}");
				errf(why, whylen,
				     "unknown placeholder \"%.*s\" (expected {schema}, {table}, "
				     "{subscription}, {tag})",
				     (int)(end < 40 ? end + (p[end] != 0) : 40), p);
				return why;
			}
			p += n;
			continue;
		}
		unsigned char c = (unsigned char)*p++;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-')) {
			errf(why, whylen,
			     "character '%c' is not allowed in a Kafka topic name (use [a-zA-Z0-9._-])",
			     c >= 0x20 && c < 0x7f ? c : '?');
			return why;
		}
	}
	if (strlen(s) > 249)
		return "a Kafka topic name is at most 249 characters";
	return NULL;
}

/* ---- keys and setters ---- */

typedef struct key key;
typedef struct pair {
	const node *k, *v;
} pair;
/* Checks v and stores it into the field at base + k->off. */
typedef void (*setter)(ctx *x, const node *v, void *base, const key *k);

enum { K_REQUIRED = 1, K_NONEMPTY = 2, K_POSITIVE = 4, K_PATTERNS = 8 };

struct key {
	const char *name;
	setter set;
	size_t off;
	const void *arg; /* setter-specific: names of an enum, the keys of a section... */
	unsigned flags;
};

#define CFG_MAX_KEYS 24 /* the most keys a mapping has (a subscription: 16) */
typedef struct keys {
	const key *k;
	size_t n;
	/* cross-field checks once every key of the mapping is stored; seen[i] is keys k[i], if present */
	void (*check)(ctx *x, void *base, const pair *seen);
} keys;

#define FIELD(base, k, type) ((type *)(void *)((char *)(base) + (k)->off))

typedef struct ename {
	const char *name;
	int value;
} ename;

static const ename *ename_find(const ename *e, const char *name)
{
	for (; e->name; e++)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

static const char *ename_of(const ename *e, int value)
{
	for (; e->name; e++)
		if (e->value == value)
			return e->name;
	return "?";
}

static void ename_list(buf *b, const ename *e)
{
	for (const ename *p = e; p->name; p++)
		buf_printf(b, "%s%s", p == e ? "" : ", ", p->name);
}

/* Checks mapping m against the keys t: unknown, duplicate, missing keys; each value goes to its setter,
 * then t->check sees the whole mapping. */
static const keys top_keys;

static void walk_map(ctx *x, const node *m, void *base, const keys *t, pair *seen)
{
	if (is_null(m))
		goto check; /* "kafka:" with everything commented out: an empty mapping */
	if (m->kind != N_MAP) {
		wrong_kind(x, m, "a mapping");
		return;
	}
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const node *kn = m->kids[i], *v = m->kids[i + 1];
		if (kn->kind != N_SCALAR) {
			wrong_kind(x, kn, "a string key");
			continue;
		}
		size_t j;
		for (j = 0; j < t->n; j++)
			if (strlen(t->k[j].name) == kn->len && strcmp(t->k[j].name, kn->text) == 0)
				break;
		if (j == t->n) {
			buf allowed = {0};
			for (size_t a = 0; a < t->n; a++)
				buf_printf(&allowed, "%s%s", a ? ", " : "", t->k[a].name);
			err_at(x, kn, "unknown %skey %s (allowed: %s)", t == &top_keys ? "top-level " : "",
			       qnode(x, kn), allowed.data);
			buf_free(&allowed);
		} else if (seen[j].k) {
			err_key(x, kn, t->k[j].name, "duplicate key (first at line %d, column %d)",
				seen[j].k->line, seen[j].k->col);
		} else {
			seen[j] = (pair){kn, v};
			size_t old = path_push(x, t->k[j].name);
			t->k[j].set(x, v, base, &t->k[j]);
			path_pop(x, old);
		}
	}
check:
	for (size_t j = 0; j < t->n; j++)
		if ((t->k[j].flags & K_REQUIRED) && !seen[j].k)
			err_at(x, m, "missing required key \"%s\"", t->k[j].name);
	if (t->check)
		t->check(x, base, seen);
}

static void set_section(ctx *x, const node *v, void *base, const key *k)
{
	pair seen[CFG_MAX_KEYS] = {0};
	walk_map(x, v, base, k->arg, seen);
}

static void set_string(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "a string");
	if (!s)
		return;
	if ((k->flags & K_NONEMPTY) && !*s) {
		err_at(x, v, "must not be empty");
		return;
	}
	char **f = FIELD(base, k, char *);
	free(*f);
	*f = xstrdup(s);
}

/* A where predicate: parsed here too, so check-config reports it where it stands. */
static void set_where(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "a predicate");
	if (!s)
		return;
	char why[256];
	pred *p = *s ? pred_parse(s, why, sizeof(why)) : NULL;
	if (*s && !p) {
		err_at(x, v, "%s", why);
		return;
	}
	pred_free(p);
	set_string(x, v, base, k); /* reports an empty one */
}

static void set_socket(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "a socket path");
	if (!s)
		return;
	if (!*s || strlen(s) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		err_at(x, v, "a socket path must be 1 to %zu bytes long",
		       sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return;
	}
	set_string(x, v, base, k);
}

typedef struct ident_rule {
	const char *first, *rest; /* allowed characters */
	size_t max;
	const char *expect;
} ident_rule;

#define LOWER "abcdefghijklmnopqrstuvwxyz"
#define UPPER "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#define DIGIT "0123456789"
static const ident_rule slot_rule = {LOWER DIGIT "_", LOWER DIGIT "_", 63,
				     "[a-z0-9_]{1,63}, PostgreSQL's rule for slot names"};
/* Any name PostgreSQL can hold (cdc always quotes it), but no control characters, which would
 * forge log lines. */
static const ident_rule pub_rule = {NULL, NULL, 63, "1 to 63 bytes without control characters"};
static const ident_rule sub_rule = {LOWER UPPER DIGIT "_.-", LOWER UPPER DIGIT "_.-", 64,
				    "1 to 64 characters from [A-Za-z0-9_.-]"};
static const ident_rule topic_rule = {LOWER UPPER DIGIT "_.-", LOWER UPPER DIGIT "_.-", 249,
				      "a Kafka topic name [a-zA-Z0-9._-]{1,249}"};

static bool ident_ok(const char *s, const ident_rule *r)
{
	size_t n = strlen(s);
	if (n < 1 || n > r->max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (r->first ? !strchr(i ? r->rest : r->first, s[i]) : (unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static void set_ident(ctx *x, const node *v, void *base, const key *k)
{
	const ident_rule *r = k->arg;
	const char *s = scalar(x, v, "a name");
	if (!s)
		return;
	if (!ident_ok(s, r)) {
		err_at(x, v, "invalid name %s (expected %s)", qnode(x, v), r->expect);
		return;
	}
	set_string(x, v, base, k);
}

static void set_bool(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "true or false");
	if (!s)
		return;
	if (strcmp(s, "true") && strcmp(s, "false")) {
		err_at(x, v,
		       "expected true or false, got %s (YAML 1.2 booleans: yes/no/on/off are not accepted)",
		       qnode(x, v));
		return;
	}
	*FIELD(base, k, bool) = strcmp(s, "true") == 0;
}

static void set_duration(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t ms;
	const char *s = scalar(x, v, "a duration");
	if (!s)
		return;
	if (!cfg_parse_duration(s, &ms)) {
		err_at(x, v, "invalid duration %s (expected e.g. 250ms, 10s, 5m, 24h or 1h30m)", qnode(x, v));
		return;
	}
	if ((k->flags & K_POSITIVE) && !ms) {
		err_at(x, v, "must be longer than 0");
		return;
	}
	*FIELD(base, k, uint64_t) = ms;
}

static void set_size(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n;
	const char *s = scalar(x, v, "a size");
	if (!s)
		return;
	if (!cfg_parse_size(s, &n)) {
		err_at(x, v,
		       "invalid size %s (expected bytes, or e.g. 64KiB, 64MiB, 1GiB, 10MB; at most 2^64-1)",
		       qnode(x, v));
		return;
	}
	*FIELD(base, k, uint64_t) = n;
}

/* A decimal integer within [min, max]; false after reporting an error. */
static bool get_uint(ctx *x, const node *v, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *s = scalar(x, v, "an integer");
	if (!s)
		return false;
	uint64_t n = 0;
	bool big = false;
	if (*s == '-' && s[1]) {
		err_at(x, v, "must not be negative, got %s", qnode(x, v));
		return false;
	}
	if (!*s || strspn(s, DIGIT) != strlen(s)) {
		err_at(x, v, "expected a non-negative integer, got %s", qnode(x, v));
		return false;
	}
	for (; *s; s++) {
		if (n > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			big = true;
		else
			n = n * 10 + (uint64_t)(*s - '0');
	}
	if (big || n < min || n > max) {
		err_at(x, v, "%s is out of range (%" PRIu64 " to %" PRIu64 ")", qnode(x, v), min, max);
		return false;
	}
	*out = n;
	return true;
}

static void set_u32(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n;
	if (get_uint(x, v, (k->flags & K_POSITIVE) ? 1 : 0, UINT32_MAX, &n))
		*FIELD(base, k, uint32_t) = (uint32_t)n;
}

static void set_u64(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n;
	if (get_uint(x, v, 0, UINT64_MAX, &n))
		*FIELD(base, k, uint64_t) = n;
}

static void set_enum(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "a name");
	if (!s)
		return;
	const ename *e = ename_find(k->arg, s);
	if (e) {
		*FIELD(base, k, int) = e->value;
		return;
	}
	buf names = {0};
	ename_list(&names, k->arg);
	err_at(x, v, "invalid value %s (expected %s)", qnode(x, v), names.data);
	buf_free(&names);
}

static void set_listen(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "HOST:PORT");
	if (!s)
		return;
	const char *why = listen_problem(s);
	if (why) {
		err_at(x, v, "invalid address %s: %s", qnode(x, v), why);
		return;
	}
	set_string(x, v, base, k);
}

static void set_mode(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = scalar(x, v, "an octal mode like \"0660\"");
	if (!s)
		return;
	unsigned long m = 0;
	if (!*s || strspn(s, "01234567") != strlen(s)) {
		err_at(x, v, "invalid mode %s (expected an octal mode like \"0660\")", qnode(x, v));
		return;
	}
	for (; *s; s++)
		if ((m = m * 8 + (unsigned long)(*s - '0')) > 07777)
			break;
	if (m & ~0777ul) {
		err_at(x, v, "mode %s has bits outside 0777", qnode(x, v));
		return;
	}
	if (m & 0002) {
		err_at(x, v,
		       "mode %s lets any local user write to the sockets (use e.g. \"0660\" and a group)",
		       qnode(x, v));
		return;
	}
	*FIELD(base, k, mode_t) = (mode_t)m;
}

static void strlist_free(cfg_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

/* The items of a non-empty list, or NULL after an error. */
static const node *list(ctx *x, const node *v)
{
	if (v->kind != N_SEQ) {
		wrong_kind(x, v, "a list");
		return NULL;
	}
	if (!v->n) {
		err_at(x, v, "must not be empty");
		return NULL;
	}
	return v;
}

/* A list of strings: table patterns (K_PATTERNS) or column names. */
static void set_strlist(ctx *x, const node *v, void *base, const key *k)
{
	cfg_strlist l = {0};
	if (!list(x, v))
		return;
	l.v = xcalloc(v->n, sizeof *l.v);
	unsigned before = x->nerr;
	for (size_t i = 0; i < v->n; i++) {
		const node *it = v->kids[i];
		bool pat = k->flags & K_PATTERNS;
		const char *s = scalar(x, it, pat ? "a \"schema.table\" pattern" : "a column name");
		char why[160];
		const char *problem = NULL;
		if (!s)
			continue;
		if (pat)
			problem = pattern_problem(s, why, sizeof why);
		else if (!*s || strlen(s) > CFG_MAX_NAME)
			problem = "a column name is 1 to 63 bytes long";
		if (problem) {
			err_at(x, it, "invalid %s %s: %s", pat ? "table pattern" : "column name",
			       qnode(x, it), problem);
			continue;
		}
		l.v[l.n++] = xstrdup(s);
	}
	if (x->nerr != before) {
		strlist_free(&l);
		return;
	}
	cfg_strlist *f = FIELD(base, k, cfg_strlist);
	strlist_free(f);
	*f = l;
}

static const ename op_names[] = {
    {"insert", CFG_OP_INSERT},	   {"update", CFG_OP_UPDATE},	{"delete", CFG_OP_DELETE},
    {"truncate", CFG_OP_TRUNCATE}, {"message", CFG_OP_MESSAGE}, {NULL, 0},
};

static void set_ops(ctx *x, const node *v, void *base, const key *k)
{
	unsigned ops = 0, before = x->nerr;
	if (!list(x, v))
		return;
	for (size_t i = 0; i < v->n; i++) {
		const node *it = v->kids[i];
		const char *s = scalar(x, it, "an operation");
		if (!s)
			continue;
		const ename *e = ename_find(op_names, s);
		if (!e) {
			buf names = {0};
			ename_list(&names, op_names);
			err_at(x, it, "unknown operation %s (expected %s)", qnode(x, it), names.data);
			buf_free(&names);
		} else if (ops & (unsigned)e->value) {
			err_at(x, it, "operation %s is listed twice", qnode(x, it));
		}
		ops |= e ? (unsigned)e->value : 0;
	}
	if (x->nerr == before)
		*FIELD(base, k, unsigned) = ops;
}

static void set_uids(ctx *x, const node *v, void *base, const key *k)
{
	cfg *c = base;
	(void)k;
	if (v->kind != N_SEQ) {
		wrong_kind(x, v, "a list of user ids");
		return;
	}
	uid_t *uids = xcalloc(v->n, sizeof *uids);
	size_t n = 0;
	for (size_t i = 0; i < v->n; i++) {
		uint64_t u;
		if (get_uint(x, v->kids[i], 0, UINT32_MAX - 1, &u)) /* (uid_t)-1 means "no uid" */
			uids[n++] = (uid_t)u;
	}
	if (n != v->n) {
		free(uids);
		return;
	}
	free(c->status.control_uids);
	c->status.control_uids = uids;
	c->status.ncontrol_uids = n;
}

static void set_topic(ctx *x, const node *v, void *base, const key *k)
{
	char why[160];
	const char *s = scalar(x, v, "a topic name");
	if (!s)
		return;
	if (!*s) {
		err_at(x, v, "must not be empty");
		return;
	}
	const char *problem = k->arg ? (ident_ok(s, k->arg) ? NULL : ((const ident_rule *)k->arg)->expect)
				     : topic_problem(s, why, sizeof why);
	if (problem) {
		err_at(x, v, "invalid topic %s: %s", qnode(x, v), problem);
		return;
	}
	set_string(x, v, base, k);
}

/* For each entry (by its i), the i of the first entry with the same name: itself if none. Entries
 * without a name (s == NULL) are skipped. O(n log n), so that a huge file cannot make it quadratic. */
typedef struct named {
	const char *s;
	size_t i;
} named;

static int named_cmp(const void *a, const void *b)
{
	const named *p = a, *q = b;
	int r = !p->s || !q->s ? (q->s == NULL) - (p->s == NULL) : strcmp(p->s, q->s); /* NULLs first */
	return r ? r : (p->i > q->i) - (p->i < q->i);
}

static size_t *first_of(named *v, size_t n)
{
	size_t *first = xcalloc(n, sizeof *first);
	for (size_t i = 0; i < n; i++)
		first[i] = i;
	qsort(v, n, sizeof *v, named_cmp);
	for (size_t i = 1; i < n; i++)
		if (v[i].s && v[i - 1].s && strcmp(v[i].s, v[i - 1].s) == 0)
			first[v[i].i] = first[v[i - 1].i];
	return first;
}

static void set_props(ctx *x, const node *v, void *base, const key *k)
{
	cfg *c = base;
	(void)k;
	if (is_null(v))
		return;
	if (v->kind != N_MAP) {
		wrong_kind(x, v, "a mapping of librdkafka properties");
		return;
	}
	size_t n = v->n / 2;
	named *names = xcalloc(n, sizeof *names);
	unsigned before = x->nerr;
	for (size_t i = 0; i < n; i++) {
		const node *kn = v->kids[2 * i], *val = v->kids[2 * i + 1];
		names[i].i = i;
		if (kn->kind != N_SCALAR || !kn->len || strlen(kn->text) != kn->len) {
			wrong_kind(x, kn, "a property name");
			continue;
		}
		names[i].s = kn->text;
		if (val->kind != N_SCALAR)
			err_at(x, val, "property %s: expected a scalar value, got a %s", qnode(x, kn),
			       val->kind == N_MAP ? "mapping" : "list");
		else if (strlen(val->text) != val->len)
			err_at(x, val, "property %s: must not contain a NUL character", qnode(x, kn));
	}
	size_t *first = first_of(names, n);
	for (size_t i = 0; i < n; i++)
		if (first[i] != i)
			err_at(x, v->kids[2 * i], "duplicate property %s (first at line %d, column %d)",
			       qnode(x, v->kids[2 * i]), v->kids[2 * first[i]]->line,
			       v->kids[2 * first[i]]->col);
	free(first);
	free(names);
	if (x->nerr != before)
		return;
	c->kafka.properties = xcalloc(n, sizeof *c->kafka.properties);
	for (size_t i = 0; i < n; i++)
		c->kafka.properties[i] =
		    (cfg_kv){xstrdup(v->kids[2 * i]->text), xstrdup(v->kids[2 * i + 1]->text)};
	c->kafka.nproperties = n;
}

/* ---- the schema ---- */

static const ename sink_names[] = {
    {"socket", CFG_SINK_SOCKET}, {"kafka", CFG_SINK_KAFKA}, {"stdout", CFG_SINK_STDOUT}, {NULL, 0}};
static const ename consumers_names[] = {{"failover", CFG_CONSUMERS_FAILOVER},
					{"shared", CFG_CONSUMERS_SHARED},
					{"key_shared", CFG_CONSUMERS_KEY_SHARED},
					{NULL, 0}};
static const ename batch_names[] = {
    {"none", CFG_BATCH_NONE}, {"transaction", CFG_BATCH_TRANSACTION}, {NULL, 0}};
static const ename full_names[] = {
    {"block", CFG_FULL_BLOCK}, {"drop_oldest", CFG_FULL_DROP_OLDEST}, {NULL, 0}};
static const ename level_names[] = {{"debug", LOG_LEVEL_DEBUG},
				    {"info", LOG_LEVEL_INFO},
				    {"warn", LOG_LEVEL_WARN},
				    {"error", LOG_LEVEL_ERROR},
				    {NULL, 0}};
static const ename format_names[] = {{"text", LOG_FORMAT_TEXT}, {"json", LOG_FORMAT_JSON}, {NULL, 0}};

#define SUB(f) offsetof(cfg_subscription, f)
#define TOP(f) offsetof(cfg, f)
#define KEYS(a, check)                                                                                       \
	{                                                                                                    \
		a, sizeof a / sizeof *a, check                                                               \
	}

static const key retention_k[] = {
    {"max_events", set_u64, SUB(retention.max_events)},
    {"max_age", set_duration, SUB(retention.max_age_ms)},
    {"max_bytes", set_size, SUB(retention.max_bytes)},
    {"when_full", set_enum, SUB(retention.when_full), full_names},
};
static const keys retention_keys = KEYS(retention_k, NULL);

enum sub_key {
	SK_NAME,
	SK_TABLES,
	SK_OPS,
	SK_TAG,
	SK_SINK,
	SK_CHANGED,
	SK_WHERE,
	SK_COLUMNS,
	SK_TOPIC,
	SK_TOMBSTONES,
	SK_CONSUMERS,
	SK_ACK_TIMEOUT,
	SK_MAX_DELIVERIES,
	SK_MAX_UNACKED,
	SK_BATCH,
	SK_RETENTION,
	SK_N
};
static const key sub_k[] = {
    [SK_NAME] = {"name", set_ident, SUB(name), &sub_rule, K_REQUIRED},
    [SK_TABLES] = {"tables", set_strlist, SUB(tables), NULL, K_REQUIRED | K_PATTERNS},
    [SK_OPS] = {"operations", set_ops, SUB(ops)},
    [SK_TAG] = {"tag", set_string, SUB(tag)},
    [SK_SINK] = {"sink", set_enum, SUB(sink), sink_names},
    [SK_CHANGED] = {"changed", set_strlist, SUB(changed)},
    [SK_WHERE] = {"where", set_where, SUB(where), NULL, K_NONEMPTY},
    [SK_COLUMNS] = {"columns", set_strlist, SUB(columns)},
    [SK_TOPIC] = {"topic", set_topic, SUB(topic)},
    [SK_TOMBSTONES] = {"tombstones", set_bool, SUB(tombstones)},
    [SK_CONSUMERS] = {"consumers", set_enum, SUB(consumers), consumers_names},
    [SK_ACK_TIMEOUT] = {"ack_timeout", set_duration, SUB(ack_timeout_ms), NULL, K_POSITIVE},
    [SK_MAX_DELIVERIES] = {"max_deliveries", set_u32, SUB(max_deliveries)},
    [SK_MAX_UNACKED] = {"max_unacked", set_u32, SUB(max_unacked), NULL, K_POSITIVE},
    [SK_BATCH] = {"batch", set_enum, SUB(batch), batch_names},
    [SK_RETENTION] = {"retention", set_section, 0, &retention_keys},
};
_Static_assert(SK_N == sizeof sub_k / sizeof *sub_k && SK_N <= CFG_MAX_KEYS, "subscription keys");

static void check_sub(ctx *x, void *base, const pair *seen)
{
	cfg_subscription *s = base;
	const char *sink = ename_of(sink_names, (int)s->sink);
	const node *sv = seen[SK_SINK].v;
	if (s->sink == CFG_SINK_KAFKA && !x->have_kafka)
		err_key(x, sv, "sink", "sink kafka needs a top-level kafka section (brokers)");
	/* an invalid sink was reported already: what goes with it is unknown */
	bool sink_ok = !sv || (sv->kind == N_SCALAR && ename_find(sink_names, sv->text));
	for (int i = SK_TOPIC; i <= SK_RETENTION && sink_ok; i++) {
		bool kafka_only = i <= SK_TOMBSTONES;
		cfg_sink want = kafka_only ? CFG_SINK_KAFKA : CFG_SINK_SOCKET;
		if (seen[i].k && s->sink != want)
			err_key(x, seen[i].k, sub_k[i].name,
				"only valid with sink: %s (this subscription's sink is %s)",
				ename_of(sink_names, (int)want), sink);
	}
	if (seen[SK_CHANGED].k && !(s->ops & CFG_OP_UPDATE))
		err_key(x, seen[SK_CHANGED].k, "changed", "only valid when operations include update");
	if (s->sink == CFG_SINK_KAFKA && !s->topic)
		s->topic = xstrdup("cdc.{schema}.{table}");
}

static void sub_defaults(cfg_subscription *s)
{
	s->ops = CFG_OP_INSERT | CFG_OP_UPDATE | CFG_OP_DELETE | CFG_OP_TRUNCATE;
	s->sink = CFG_SINK_SOCKET;
	s->consumers = CFG_CONSUMERS_FAILOVER;
	s->ack_timeout_ms = 30000;
	s->max_unacked = 1000;
	s->batch = CFG_BATCH_NONE;
	s->retention.when_full = CFG_FULL_BLOCK;
}

static const keys sub_keys = KEYS(sub_k, check_sub);

static void set_subs(ctx *x, const node *v, void *base, const key *k)
{
	cfg *c = FIELD(base, k, cfg);
	if (is_null(v))
		return;
	if (v->kind != N_SEQ) {
		wrong_kind(x, v, "a list of subscriptions");
		return;
	}
	c->nsubs = v->n;
	c->subs = v->n ? xcalloc(v->n, sizeof *c->subs) : NULL;
	named *names = xcalloc(v->n, sizeof *names);
	const node **name_nodes = xcalloc(v->n, sizeof *name_nodes);
	for (size_t i = 0; i < v->n; i++) {
		cfg_subscription *s = &c->subs[i];
		pair seen[CFG_MAX_KEYS] = {0};
		size_t old = path_index(x, i);
		sub_defaults(s);
		s->line = v->kids[i]->line;
		s->col = v->kids[i]->col;
		walk_map(x, v->kids[i], s, &sub_keys, seen);
		names[i] = (named){s->name, i};
		name_nodes[i] = seen[SK_NAME].v;
		path_pop(x, old);
	}
	size_t *first = first_of(names, v->n);
	for (size_t i = 0; i < v->n; i++) {
		if (first[i] == i)
			continue;
		size_t old = path_index(x, i);
		err_key(x, name_nodes[i], "name",
			"duplicate subscription name %s (first at line %d, column %d)",
			qnode(x, name_nodes[i]), name_nodes[first[i]]->line, name_nodes[first[i]]->col);
		path_pop(x, old);
	}
	free(first);
	free(names);
	free(name_nodes);
}

static const key source_k[] = {
    {"dsn", set_string, TOP(source.dsn)},
    {"slot", set_ident, TOP(source.slot), &slot_rule},
    {"publication", set_ident, TOP(source.publication), &pub_rule},
    {"create", set_bool, TOP(source.create)},
    {"publish", set_strlist, TOP(source.publish), NULL, K_PATTERNS},
    {"heartbeat", set_duration, TOP(source.heartbeat_ms)},
    {"status_interval", set_duration, TOP(source.status_interval_ms), NULL, K_POSITIVE},
};

enum { ST_SOCKET, ST_LISTEN, ST_TCP_CONTROL, ST_CONTROL_UIDS };
static const key status_k[] = {
    [ST_SOCKET] = {"socket", set_socket, TOP(status.socket)},
    [ST_LISTEN] = {"listen", set_listen, TOP(status.listen)},
    [ST_TCP_CONTROL] = {"tcp_control", set_bool, TOP(status.tcp_control)},
    [ST_CONTROL_UIDS] = {"control_uids", set_uids, 0},
};

static void check_status(ctx *x, void *base, const pair *seen)
{
	cfg *c = base;
	if (c->status.tcp_control && !seen[ST_LISTEN].k)
		err_key(x, seen[ST_TCP_CONTROL].k, "tcp_control", "needs status.listen");
}

static const key subscribers_k[] = {
    {"socket", set_socket, TOP(subscribers.socket)},
    {"mode", set_mode, TOP(subscribers.mode)},
};

static const key kafka_k[] = {
    {"brokers", set_string, TOP(kafka.brokers), NULL, K_REQUIRED | K_NONEMPTY},
    {"properties", set_props, 0},
    {"transactions_topic", set_topic, TOP(kafka.transactions_topic), &topic_rule},
};

static void check_kafka(ctx *x, void *base, const pair *seen)
{
	(void)x, (void)seen;
	((cfg *)base)->kafka.enabled = true;
}

static const key log_k[] = {
    {"level", set_enum, TOP(log.level), level_names},
    {"format", set_enum, TOP(log.format), format_names},
};

static const keys source_keys = KEYS(source_k, NULL), status_keys = KEYS(status_k, check_status),
		  subscribers_keys = KEYS(subscribers_k, NULL), kafka_keys = KEYS(kafka_k, check_kafka),
		  log_keys = KEYS(log_k, NULL);

static const key top_k[] = {
    {"source", set_section, 0, &source_keys}, {"state_dir", set_string, TOP(state_dir), NULL, K_NONEMPTY},
    {"status", set_section, 0, &status_keys}, {"subscribers", set_section, 0, &subscribers_keys},
    {"kafka", set_section, 0, &kafka_keys},   {"log", set_section, 0, &log_keys},
    {"subscriptions", set_subs, 0},
};
static const keys top_keys = KEYS(top_k, NULL);

/* ---- load, free ---- */

static cfg *cfg_new(const char *path)
{
	cfg *c = xcalloc(1, sizeof *c);
	c->path = xstrdup(path);
	c->source.dsn = xstrdup("");
	c->source.slot = xstrdup("cdc_slot");
	c->source.publication = xstrdup("cdc_pub");
	c->source.publish.v = xmalloc(sizeof(char *));
	c->source.publish.v[0] = xstrdup("public.*");
	c->source.publish.n = 1;
	c->source.status_interval_ms = 10000;
	c->state_dir = xstrdup("/var/lib/cdc");
	c->status.socket = xstrdup(CFG_DEFAULT_STATUS_SOCKET);
	c->subscribers.socket = xstrdup(CFG_DEFAULT_SUBSCRIBER_SOCKET);
	c->subscribers.mode = 0660;
	c->log.level = LOG_LEVEL_INFO;
	c->log.format = LOG_FORMAT_TEXT;
	return c;
}

static void sub_clear(cfg_subscription *s)
{
	free(s->name);
	strlist_free(&s->tables);
	free(s->tag);
	strlist_free(&s->changed);
	free(s->where);
	strlist_free(&s->columns);
	free(s->topic);
}

void cfg_subscription_free(cfg_subscription *s)
{
	if (s)
		sub_clear(s);
	free(s);
}

void cfg_free(cfg *c)
{
	if (!c)
		return;
	free(c->path);
	free(c->source.dsn);
	free(c->source.slot);
	free(c->source.publication);
	strlist_free(&c->source.publish);
	free(c->state_dir);
	free(c->status.socket);
	free(c->status.listen);
	free(c->status.control_uids);
	free(c->subscribers.socket);
	free(c->kafka.brokers);
	for (size_t i = 0; i < c->kafka.nproperties; i++) {
		free(c->kafka.properties[i].key);
		free(c->kafka.properties[i].value);
	}
	free(c->kafka.properties);
	free(c->kafka.transactions_topic);
	for (size_t i = 0; i < c->nsubs; i++)
		sub_clear(&c->subs[i]);
	free(c->subs);
	free(c);
}

cfg *cfg_parse(const char *path, const char *text, size_t len, buf *errors)
{
	ctx x = {.file = path ? path : "<config>", .errors = errors};
	node *root = NULL;
	cfg *c = NULL;

	if (!text)
		text = "", len = 0;
	if (!build_tree(&x, text, len, &root))
		goto out;
	c = cfg_new(x.file);
	if (!root)
		goto out; /* an empty file: every default */
	if (root->kind == N_MAP)
		for (size_t i = 0; i + 1 < root->n; i += 2)
			if (root->kids[i]->kind == N_SCALAR && strcmp(root->kids[i]->text, "kafka") == 0)
				x.have_kafka = true;
	pair seen[CFG_MAX_KEYS] = {0};
	walk_map(&x, root, c, &top_keys, seen);
out:
	node_free(root);
	buf_free(&x.path);
	buf_free(&x.quote);
	if (x.nerr) {
		cfg_free(c);
		return NULL;
	}
	return c;
}

/* A file's text, up to CFG_MAX_FILE bytes. */
static bool read_text(const char *path, buf *text, buf *errors)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		buf_printf(errors, "%s:1:1: cannot open: %s\n", path, strerror(errno));
		return false;
	}
	char chunk[65536];
	size_t n;
	bool ok = false;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0 && text->len <= CFG_MAX_FILE)
		buf_append(text, chunk, n);
	if (ferror(f))
		buf_printf(errors, "%s:1:1: cannot read: %s\n", path, strerror(errno));
	else if (text->len > CFG_MAX_FILE)
		buf_printf(errors, "%s:1:1: larger than %u MiB: not a configuration file\n", path,
			   CFG_MAX_FILE >> 20);
	else
		ok = true;
	fclose(f);
	return ok;
}

cfg *cfg_load(const char *path, buf *errors)
{
	buf text = {0};
	cfg *c = read_text(path, &text, errors) ? cfg_parse(path, text.data ? text.data : "", text.len, errors) : NULL;
	buf_free(&text);
	return c;
}

/* ---- masking and printing ---- */

static bool prop_is_secret(const char *k)
{
	size_t n = strlen(k);
	return strcasestr(k, "password") || strcasestr(k, "secret") || strncasecmp(k, "sasl.", 5) == 0 ||
	       (n >= 4 && strcasecmp(k + n - 4, ".key") == 0) ||
	       (n >= 4 && strcasecmp(k + n - 4, ".pem") == 0 && strcasestr(k, "key")); /* ssl.key.pem */
}

/* Whether the URI query parameter at p (n bytes up to its '=') is want, %-escapes decoded as
 * libpq decodes them ("pass%77ord"). */
static bool uri_param_is(const char *p, size_t n, const char *want)
{
	size_t i = 0, j = 0, wn = strlen(want);
	for (; i < n && j < wn; j++) {
		int c = (unsigned char)p[i++];
		if (c == '%' && i + 1 < n && isxdigit((unsigned char)p[i]) &&
		    isxdigit((unsigned char)p[i + 1])) {
			char hex[3] = {p[i], p[i + 1], '\0'};
			c = (int)strtol(hex, NULL, 16);
			i += 2;
		}
		if (c != want[j])
			return false;
	}
	return i == n && j == wn;
}

/* libpq's secrets: the password, and the passphrase of the client key (sslpassword). */
static bool uri_param_is_password(const char *p, size_t n)
{
	return uri_param_is(p, n, "password") || uri_param_is(p, n, "sslpassword");
}

/* postgresql://user:PASSWORD@host/db?password=PASSWORD&...: user info before an '@' that comes
 * before any '/' or '?', the password after its first ':', the query after the next '?', its
 * parameters split at '&'. libpq ends the user info at the first '@'; this masks up to the last one,
 * so that a password with a raw '@' (a common mistake) does not leak its end. A raw '/' or '?' in a
 * password (RFC 3986 wants them %-encoded) is not recognised: stopping there keeps masking
 * idempotent, since masking a query value can remove a '/' or an '@'. */
static void mask_uri(buf *out, const char *s)
{
	const char *p = strstr(s, "://") + 3, *at = NULL;
	for (const char *c = p; *c && *c != '/' && *c != '?'; c++)
		if (*c == '@')
			at = c;
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (colon) {
			buf_append(out, s, (size_t)(colon + 1 - s));
			buf_puts(out, CFG_MASK);
			s = at;
		}
		p = at + 1;
	}
	const char *q = strchr(p, '?');
	buf_append(out, s, q ? (size_t)(q + 1 - s) : strlen(s));
	for (p = q ? q + 1 : ""; *p;) {
		size_t n = strcspn(p, "&"), keylen = strcspn(p, "=&");
		if (keylen < n && uri_param_is_password(p, keylen)) {
			buf_append(out, p, keylen + 1);
			buf_puts(out, CFG_MASK);
		} else {
			buf_append(out, p, n);
		}
		p += n;
		if (*p)
			buf_putc(out, *p++);
	}
}

static bool is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

/* key=value key='quoted \' value' ...: libpq's keyword form. */
static void mask_kv(buf *out, const char *s)
{
	const char *p = s;
	while (*p) {
		size_t ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		if (!*p)
			break;
		const char *kw = p;
		p += strcspn(p, "= \t\n\r\f\v");
		size_t keylen = (size_t)(p - kw);
		buf_append(out, kw, keylen);
		ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		if (*p != '=')
			continue; /* not a valid conninfo: libpq will say so */
		buf_putc(out, *p++);
		ws = strspn(p, " \t\n\r\f\v");
		buf_append(out, p, ws);
		p += ws;
		const char *val = p;
		buf raw = {0}; /* the value with quotes and escapes removed */
		if (*p == '\'') {
			for (p++; *p && *p != '\''; p++) {
				if (*p == '\\' && p[1])
					p++;
				buf_putc(&raw, *p);
			}
			if (*p)
				p++;
		} else {
			for (; *p && !strchr(" \t\n\r\f\v", *p); p++) {
				if (*p == '\\' && p[1])
					p++;
				buf_putc(&raw, *p);
			}
		}
		if ((keylen == 8 && strncmp(kw, "password", 8) == 0) || (keylen == 11 && strncmp(kw, "sslpassword", 11) == 0)) {
			/* keep the quotes: what follows a quoted value must stay apart from the mask */
			buf_puts(out, *val == '\'' ? "'" CFG_MASK "'" : CFG_MASK);
		} else if (keylen == 6 && strncmp(kw, "dbname", 6) == 0 && raw.data &&
			   (is_uri(raw.data) || strchr(raw.data, '='))) {
			/* libpq expands a dbname that is itself a connection string */
			char *inner = cfg_mask_dsn(raw.data);
			buf_putc(out, '\'');
			for (const char *c = inner; *c; c++) {
				if (*c == '\'' || *c == '\\')
					buf_putc(out, '\\');
				buf_putc(out, *c);
			}
			buf_putc(out, '\'');
			free(inner);
		} else {
			buf_append(out, val, (size_t)(p - val));
		}
		buf_free(&raw);
	}
}

char *cfg_mask_dsn(const char *dsn)
{
	buf out = {0};
	if (!dsn)
		dsn = "";
	if (is_uri(dsn))
		mask_uri(&out, dsn);
	else
		mask_kv(&out, dsn);
	return out.data ? out.data : xstrdup("");
}

/* Strings that YAML reads back as the same string without quotes. */
static bool plain_ok(const char *s)
{
	static const char *const reserved[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"};
	if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '/'))
		return false;
	if (strspn(s, LOWER UPPER DIGIT "_./-") != strlen(s))
		return false;
	for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
		if (strcasecmp(s, reserved[i]) == 0)
			return false;
	return true;
}

/* A YAML double-quoted string; anything that is not printable, or that YAML would fold as a line
 * break, is escaped. */
static void put_str(FILE *out, const char *s)
{
	if (!s)
		s = "";
	if (plain_ok(s)) {
		fputs(s, out);
		return;
	}
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s); p < end;) {
		uint32_t cp = *p;
		size_t n = 1, skip;
		if (cp >= 0x80) {
			if (!(n = utf8_seq(p, (size_t)(end - p), &skip))) {
				/* not UTF-8: cannot come from libyaml, but never print it raw */
				fprintf(out, "\\x%02X", *p++);
				continue;
			}
			cp = utf8_codepoint(p, n);
		}
		bool printable = (cp >= 0x20 && cp < 0x7F) ||
				 (cp >= 0xA0 && cp <= 0xD7FF && cp != 0x2028 && cp != 0x2029) ||
				 (cp >= 0xE000 && cp <= 0xFFFD && cp != 0xFEFF) ||
				 (cp >= 0x10000 && cp <= 0x10FFFF);
		if (cp == '"' || cp == '\\')
			fprintf(out, "\\%c", (char)cp);
		else if (cp == '\n')
			fputs("\\n", out);
		else if (cp == '\t')
			fputs("\\t", out);
		else if (printable)
			fwrite(p, 1, n, out);
		else if (cp < 0x100)
			fprintf(out, "\\x%02X", (unsigned)cp);
		else if (cp < 0x10000)
			fprintf(out, "\\u%04X", (unsigned)cp);
		else
			fprintf(out, "\\U%08X", (unsigned)cp);
		p += n;
	}
	fputc('"', out);
}

static void put_list(FILE *out, const cfg_strlist *l)
{
	fputc('[', out);
	for (size_t i = 0; i < l->n; i++) {
		if (i)
			fputs(", ", out);
		put_str(out, l->v[i]);
	}
	fputc(']', out);
}

static void put_duration(FILE *out, uint64_t ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
	if (!ms)
		fputc('0', out);
	for (size_t i = 0; i < 4; i++) {
		if (ms >= units[i].ms) {
			fprintf(out, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
			ms %= units[i].ms;
		}
	}
}

static void put_size(FILE *out, uint64_t n)
{
	for (size_t i = 0; n && size_units[i].mult > 1; i++) {
		if (n % size_units[i].mult == 0) {
			fprintf(out, "%" PRIu64 "%s", n / size_units[i].mult, size_units[i].unit);
			return;
		}
	}
	fprintf(out, "%" PRIu64, n);
}

static void put_sub(FILE *out, const cfg_subscription *s)
{
	fputs("  - name: ", out);
	put_str(out, s->name);
	fputs("\n    tables: ", out);
	put_list(out, &s->tables);
	fputs("\n    operations: [", out);
	for (const ename *e = op_names, *first = NULL; e->name; e++) {
		if (s->ops & (unsigned)e->value) {
			fprintf(out, "%s%s", first ? ", " : "", e->name);
			first = e;
		}
	}
	fputs("]\n", out);
	if (s->tag) {
		fputs("    tag: ", out);
		put_str(out, s->tag);
		fputc('\n', out);
	}
	fprintf(out, "    sink: %s\n", ename_of(sink_names, (int)s->sink));
	if (s->changed.n) {
		fputs("    changed: ", out);
		put_list(out, &s->changed);
		fputc('\n', out);
	}
	if (s->where) {
		fputs("    where: ", out);
		put_str(out, s->where);
		fputc('\n', out);
	}
	if (s->columns.n) {
		fputs("    columns: ", out);
		put_list(out, &s->columns);
		fputc('\n', out);
	}
	if (s->sink == CFG_SINK_KAFKA) {
		fputs("    topic: ", out);
		put_str(out, s->topic ? s->topic : "cdc.{schema}.{table}");
		fprintf(out, "\n    tombstones: %s\n", s->tombstones ? "true" : "false");
	}
	if (s->sink == CFG_SINK_SOCKET) {
		fprintf(out,
			"    consumers: %s\n    ack_timeout: ", ename_of(consumers_names, (int)s->consumers));
		put_duration(out, s->ack_timeout_ms);
		fprintf(out,
			"\n    max_deliveries: %" PRIu32 "\n    max_unacked: %" PRIu32 "\n    batch: %s\n",
			s->max_deliveries, s->max_unacked, ename_of(batch_names, (int)s->batch));
		fprintf(out, "    retention: {max_events: %" PRIu64 ", max_age: ", s->retention.max_events);
		put_duration(out, s->retention.max_age_ms);
		fputs(", max_bytes: ", out);
		put_size(out, s->retention.max_bytes);
		fprintf(out, ", when_full: %s}\n", ename_of(full_names, (int)s->retention.when_full));
	}
}

void cfg_print(const cfg *c, FILE *out)
{
	char *dsn = cfg_mask_dsn(c->source.dsn);
	fputs("source:\n  dsn: ", out);
	put_str(out, dsn);
	free(dsn);
	fputs("\n  slot: ", out);
	put_str(out, c->source.slot);
	fputs("\n  publication: ", out);
	put_str(out, c->source.publication);
	fprintf(out, "\n  create: %s\n  publish: ", c->source.create ? "true" : "false");
	put_list(out, &c->source.publish);
	fputs("\n  heartbeat: ", out);
	put_duration(out, c->source.heartbeat_ms);
	fputs("\n  status_interval: ", out);
	put_duration(out, c->source.status_interval_ms);
	fputs("\nstate_dir: ", out);
	put_str(out, c->state_dir);
	fputs("\nstatus:\n  socket: ", out);
	put_str(out, c->status.socket);
	if (c->status.listen) {
		fputs("\n  listen: ", out);
		put_str(out, c->status.listen);
	}
	fprintf(out, "\n  tcp_control: %s\n  control_uids: [", c->status.tcp_control ? "true" : "false");
	for (size_t i = 0; i < c->status.ncontrol_uids; i++)
		fprintf(out, "%s%lu", i ? ", " : "", (unsigned long)c->status.control_uids[i]);
	fputs("]\nsubscribers:\n  socket: ", out);
	put_str(out, c->subscribers.socket);
	fprintf(out, "\n  mode: \"%04o\"\n", (unsigned)c->subscribers.mode);
	if (c->kafka.enabled) {
		fputs("kafka:\n  brokers: ", out);
		put_str(out, c->kafka.brokers);
		fputs("\n  properties:", out);
		if (!c->kafka.nproperties)
			fputs(" {}", out);
		for (size_t i = 0; i < c->kafka.nproperties; i++) {
			const cfg_kv *kv = &c->kafka.properties[i];
			/* YAML limits implicit keys to 1024 characters: long ones need the explicit "? key"
			 */
			bool explicit_key = strlen(kv->key) > 100;
			fputs(explicit_key ? "\n    ? " : "\n    ", out);
			put_str(out, kv->key);
			fputs(explicit_key ? "\n    : " : ": ", out);
			put_str(out, prop_is_secret(kv->key) ? CFG_MASK : kv->value);
		}
		fputc('\n', out);
		if (c->kafka.transactions_topic) {
			fputs("  transactions_topic: ", out);
			put_str(out, c->kafka.transactions_topic);
			fputc('\n', out);
		}
	}
	fprintf(out, "log:\n  level: %s\n  format: %s\nsubscriptions:%s\n",
		ename_of(level_names, (int)c->log.level), ename_of(format_names, (int)c->log.format),
		c->nsubs ? "" : " []");
	for (size_t i = 0; i < c->nsubs; i++)
		put_sub(out, &c->subs[i]);
}

char *cfg_client_socket(const char *sock, const char *config, bool status)
{
	if (sock)
		return xstrdup(sock);
	if (config) {
		buf errors = {0};
		cfg *c = cfg_load(config, &errors);
		if (!c)
			fputs(errors.data ? errors.data : "cdc: invalid configuration\n", stderr);
		buf_free(&errors);
		char *p = c ? xstrdup(status ? c->status.socket : c->subscribers.socket) : NULL;
		cfg_free(c);
		return p;
	}
	const char *env = getenv(status ? "CDC_STATUS_SOCKET" : "CDC_SUBSCRIBER_SOCKET");
	return xstrdup(env && *env ? env : status ? CFG_DEFAULT_STATUS_SOCKET : CFG_DEFAULT_SUBSCRIBER_SOCKET);
}

/* ---- live subscriptions: PUT bodies and the overlay in state_dir ---- */

static node *scalar_node(const char *text, int line, int col)
{
	node *n = xcalloc(1, sizeof *n);
	n->kind = N_SCALAR;
	n->text = xstrdup(text);
	n->len = strlen(text);
	n->line = line;
	n->col = col;
	return n;
}

cfg_subscription *cfg_parse_subscription(const cfg *c, const char *name, const char *text, size_t len,
					 buf *errors)
{
	ctx x = {.file = "body", .errors = errors, .have_kafka = c->kafka.enabled};
	node *root = NULL;
	cfg_subscription *s = xcalloc(1, sizeof *s);
	sub_defaults(s);
	s->line = s->col = 1;
	if (!build_tree(&x, text ? text : "", text ? len : 0, &root))
		goto out;
	if (!root || root->kind != N_MAP) {
		err_pos(&x, 1, 1, "must be one JSON object with the keys of a subscription");
		goto out;
	}
	const node *given = NULL;
	for (size_t i = 0; i + 1 < root->n; i += 2)
		if (root->kids[i]->kind == N_SCALAR && strcmp(root->kids[i]->text, "name") == 0)
			given = root->kids[i + 1];
	if (given && (given->kind != N_SCALAR || strcmp(given->text, name) != 0)) {
		err_key(&x, given, "name", "must be %s (the name in the path) or left out",
			quoted(&x, name, strlen(name)));
		goto out;
	}
	if (!given) {
		node_add(root, scalar_node("name", root->line, root->col));
		node_add(root, scalar_node(name, root->line, root->col));
	}
	pair seen[CFG_MAX_KEYS] = {0};
	walk_map(&x, root, s, &sub_keys, seen);
out:
	node_free(root);
	buf_free(&x.path);
	buf_free(&x.quote);
	if (x.nerr) {
		cfg_subscription_free(s);
		return NULL;
	}
	return s;
}

static void strlist_copy(cfg_strlist *dst, const cfg_strlist *src)
{
	dst->n = src->n;
	dst->v = src->n ? xcalloc(src->n, sizeof *dst->v) : NULL;
	for (size_t i = 0; i < src->n; i++)
		dst->v[i] = xstrdup(src->v[i]);
}

static char *strdup_or_null(const char *s)
{
	return s ? xstrdup(s) : NULL;
}

static void sub_copy(cfg_subscription *dst, const cfg_subscription *src)
{
	*dst = *src;
	dst->name = xstrdup(src->name);
	strlist_copy(&dst->tables, &src->tables);
	dst->tag = strdup_or_null(src->tag);
	strlist_copy(&dst->changed, &src->changed);
	dst->where = strdup_or_null(src->where);
	strlist_copy(&dst->columns, &src->columns);
	dst->topic = strdup_or_null(src->topic);
}

cfg_subscription *cfg_find_subscription(const cfg *c, const char *name)
{
	for (size_t i = 0; i < c->nsubs; i++)
		if (strcmp(c->subs[i].name, name) == 0)
			return &c->subs[i];
	return NULL;
}

/* The overlay file: {subscriptions: [...], deleted: [names]}. */
typedef struct overlay_doc {
	cfg puts; /* only subs and nsubs */
	cfg_strlist deleted;
} overlay_doc;

static void set_names(ctx *x, const node *v, void *base, const key *k)
{
	cfg_strlist *l = FIELD(base, k, cfg_strlist);
	if (v->kind != N_SEQ) {
		wrong_kind(x, v, "a list of subscription names");
		return;
	}
	strlist_free(l);
	l->v = xcalloc(v->n ? v->n : 1, sizeof *l->v);
	for (size_t i = 0; i < v->n; i++) {
		const char *s = scalar(x, v->kids[i], "a subscription name");
		if (s && !ident_ok(s, &sub_rule))
			err_at(x, v->kids[i], "invalid name %s (expected %s)", qnode(x, v->kids[i]), sub_rule.expect);
		else if (s)
			l->v[l->n++] = xstrdup(s);
	}
}

static const key overlay_k[] = {
    {"subscriptions", set_subs, offsetof(overlay_doc, puts)},
    {"deleted", set_names, offsetof(overlay_doc, deleted)},
};
static const keys overlay_keys = KEYS(overlay_k, NULL);

static void overlay_path(buf *b, const char *state_dir, const char *suffix)
{
	buf_printf(b, "%s/%s%s", state_dir, CFG_OVERLAY_FILE, suffix);
}

cfg_overlay *cfg_overlay_load(const char *state_dir, buf *errors)
{
	buf path = {0};
	overlay_path(&path, state_dir, "");
	cfg_overlay *o = xcalloc(1, sizeof *o);
	if (access(path.data, F_OK) != 0 && errno == ENOENT) {
		buf_free(&path);
		return o;
	}
	overlay_doc doc = {0};
	ctx x = {.file = path.data, .errors = errors, .have_kafka = true};
	buf text = {0};
	if (!read_text(path.data, &text, errors))
		x.nerr++;
	node *root = NULL;
	if (!x.nerr && build_tree(&x, text.data ? text.data : "", text.len, &root) && root) {
		pair seen[CFG_MAX_KEYS] = {0};
		walk_map(&x, root, &doc, &overlay_keys, seen);
	}
	node_free(root);
	buf_free(&x.path);
	buf_free(&x.quote);
	buf_free(&text);
	buf_free(&path);
	o->put = doc.puts.subs;
	o->nput = doc.puts.nsubs;
	o->deleted = doc.deleted;
	if (x.nerr) {
		cfg_overlay_free(o);
		return NULL;
	}
	return o;
}

bool cfg_overlay_save(const cfg_overlay *o, const char *state_dir, char *err, size_t errlen)
{
	buf path = {0}, tmp = {0};
	overlay_path(&path, state_dir, "");
	overlay_path(&tmp, state_dir, ".tmp");
	bool ok = false;
	int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		errf(err, errlen, "cannot write %s: %s", tmp.data, strerror(errno));
		if (fd >= 0)
			close(fd);
		goto out;
	}
	fputs("# Subscriptions changed over the status socket (PUT and DELETE /subscriptions/NAME), laid over\n"
	      "# the configuration file's at every start and reload. Written by cdc; remove this file (with cdc\n"
	      "# stopped) to go back to the file's subscriptions alone.\n",
	      f);
	fprintf(f, "subscriptions:%s\n", o->nput ? "" : " []");
	for (size_t i = 0; i < o->nput; i++)
		put_sub(f, &o->put[i]);
	fputs("deleted: ", f);
	put_list(f, &o->deleted);
	fputc('\n', f);
	bool written = fflush(f) == 0 && fsync(fileno(f)) == 0;
	int saved = errno;
	if (fclose(f) != 0 && written)
		written = false, saved = errno;
	if (!written || rename(tmp.data, path.data) != 0) {
		errf(err, errlen, "cannot write %s: %s", written ? path.data : tmp.data,
		     strerror(written ? errno : saved));
		unlink(tmp.data);
		goto out;
	}
	int dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok = dfd >= 0 && fsync(dfd) == 0;
	if (!ok)
		errf(err, errlen, "cannot sync %s: %s", state_dir, strerror(errno));
	if (dfd >= 0)
		close(dfd);
out:
	buf_free(&path);
	buf_free(&tmp);
	return ok;
}

static void strlist_remove(cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0) {
			free(l->v[i]);
			memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof *l->v);
			l->n--;
			return;
		}
}

static void strlist_add(cfg_strlist *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], s) == 0)
			return;
	l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
	l->v[l->n++] = xstrdup(s);
}

/* Removes the subscription of that name from an array; true if there was one. */
static bool subs_remove(cfg_subscription *v, size_t *n, const char *name)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp(v[i].name, name) == 0) {
			sub_clear(&v[i]);
			memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof *v);
			(*n)--;
			return true;
		}
	return false;
}

/* Replaces the subscription of s's name in place, or appends s; takes s's contents. */
static void subs_set(cfg_subscription **v, size_t *n, cfg_subscription *s)
{
	for (size_t i = 0; i < *n; i++)
		if (strcmp((*v)[i].name, s->name) == 0) {
			sub_clear(&(*v)[i]);
			(*v)[i] = *s;
			return;
		}
	*v = xrealloc(*v, (*n + 1) * sizeof **v);
	(*v)[(*n)++] = *s;
}

void cfg_overlay_put(cfg_overlay *o, cfg_subscription *s)
{
	strlist_remove(&o->deleted, s->name);
	subs_set(&o->put, &o->nput, s);
	free(s);
}

void cfg_overlay_delete(cfg_overlay *o, const char *name)
{
	subs_remove(o->put, &o->nput, name);
	strlist_add(&o->deleted, name);
}

bool cfg_overlay_apply(const cfg_overlay *o, cfg *c, buf *errors)
{
	for (size_t i = 0; i < o->nput; i++)
		if (o->put[i].sink == CFG_SINK_KAFKA && !c->kafka.enabled) {
			buf_printf(errors,
				   "%s/%s: subscription %s has sink kafka, but the configuration has no kafka section "
				   "(add one, or DELETE the subscription)\n",
				   c->state_dir, CFG_OVERLAY_FILE, o->put[i].name);
			return false;
		}
	for (size_t i = 0; i < o->deleted.n; i++)
		subs_remove(c->subs, &c->nsubs, o->deleted.v[i]);
	for (size_t i = 0; i < o->nput; i++) {
		cfg_subscription s;
		sub_copy(&s, &o->put[i]);
		subs_set(&c->subs, &c->nsubs, &s);
	}
	return true;
}

cfg_overlay *cfg_overlay_copy(const cfg_overlay *o)
{
	cfg_overlay *d = xcalloc(1, sizeof *d);
	d->nput = o->nput;
	d->put = o->nput ? xcalloc(o->nput, sizeof *d->put) : NULL;
	for (size_t i = 0; i < o->nput; i++)
		sub_copy(&d->put[i], &o->put[i]);
	strlist_copy(&d->deleted, &o->deleted);
	return d;
}

void cfg_overlay_free(cfg_overlay *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->nput; i++)
		sub_clear(&o->put[i]);
	free(o->put);
	strlist_free(&o->deleted);
	free(o);
}

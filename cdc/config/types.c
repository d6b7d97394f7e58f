/* The value types of the key tables. Each has a setter that checks a node and stores it (reporting
 * FILE:LINE:COL problems), and a printer that writes it back as cfg_parse reads it. */
#include "cdc/config/config_internal.h"

#include "cdc/match/predicate.h"

#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* Setters store enums through an int pointer. Make sure that is what they are. */
_Static_assert(sizeof(cfg_on_gap) == sizeof(int) && sizeof(log_format) == sizeof(int) &&
		   sizeof(log_level) == sizeof(int),
	       "enums are stored as int");
_Static_assert(sizeof(uid_t) == sizeof(uint32_t) && sizeof(mode_t) == sizeof(uint32_t),
	       "uid_t and mode_t are 32 bits");

static void set_section(ctx *x, const node *v, void *base, const key *k)
{
	pair seen[CFG_MAX_KEYS] = {0};
	cfg_walk_map(x, v, base, k->arg, seen);
}

static void set_string(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a string");
	if (!s)
		return;
	if ((k->flags & K_NONEMPTY) && !*s) {
		cfg_err_at(x, v, "must not be empty");
		return;
	}
	char **f = FIELD(base, k, char *);
	free(*f);
	*f = util_xstrdup(s);
}

/* A where predicate, parsed here too, so check-config reports it where it stands. */
static void set_where(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a predicate");
	if (!s)
		return;
	char why[256];
	pred *p = *s ? match_predicate_parse(s, why, sizeof(why)) : NULL;
	if (*s && !p) {
		cfg_err_at(x, v, "%s", why);
		return;
	}
	match_predicate_free(p);
	set_string(x, v, base, k); /* reports an empty one */
}

/* A relative path of the file is taken from the file's own directory, as Prometheus takes its rule
 * files. So every command that reads the file finds the same path wherever it runs. The result is
 * relative to the current directory when the file's path is. For example, "./x" read from "cdc.yaml"
 * stays "./x", from "etc/cdc.yaml" it is "etc/x", from "/etc/cdc/cdc.yaml" "/etc/cdc/x". */
char *cfg_resolved(const ctx *x, const char *s)
{
	const char *slash = strrchr(x->file, '/');
	if (*s == '/' || !slash || (slash == x->file + 1 && x->file[0] == '.'))
		return util_xstrdup(s);
	while (s[0] == '.' && (s[1] == '/' || !s[1]))
		for (s++; *s == '/';)
			s++;
	buf b = {0};
	buf_append(&b, x->file, slash == x->file ? 1 : (size_t)(slash - x->file));
	if (*s)
		buf_printf(&b, "%s%s", slash == x->file ? "" : "/", s);
	return b.data;
}

/* A bearer token, CFG_TOKEN_MIN to CFG_TOKEN_MAX visible ASCII characters (what an Authorization
 * header carries as it is). The messages never quote it. */
static void set_token(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a token");
	if (!s)
		return;
	size_t n = strlen(s), ok = 0;
	while (ok < n && s[ok] > ' ' && s[ok] < 0x7f)
		ok++;
	if (n < CFG_TOKEN_MIN || n > CFG_TOKEN_MAX)
		cfg_err_at(x, v, "a token of %zu bytes: it takes %d to %d (openssl rand -hex 32 makes one)",
			   n, CFG_TOKEN_MIN, CFG_TOKEN_MAX);
	else if (ok < n)
		cfg_err_at(
		    x, v,
		    "byte %zu of the token is not a visible ASCII character (openssl rand -hex 32 makes one)",
		    ok + 1);
	else
		set_string(x, v, base, k);
}

/* A token in clear is masked, as long as the shortest token (so that the printed file reads again). */
static void print_token(emit *e, const void *base, const key *k)
{
	char mask[CFG_TOKEN_MIN + 1];
	memset(mask, '*', CFG_TOKEN_MIN);
	mask[CFG_TOKEN_MIN] = '\0';
	(void)base, (void)k;
	cfg_emit_str(e, mask);
}

/* A path, a string resolved against the file's directory (see resolved). */
static void set_path(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a path");
	if (!s)
		return;
	if (!*s) {
		cfg_err_at(x, v, "must not be empty");
		return;
	}
	char **f = FIELD(base, k, char *);
	free(*f);
	*f = cfg_resolved(x, s);
}

static void set_socket(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a socket path");
	if (!s)
		return;
	char *path = *s ? cfg_resolved(x, s) : NULL;
	if (!path || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		bool moved = path && strcmp(path, s) != 0;
		cfg_err_at(x, v, "a socket path must be 1 to %zu bytes long%s%s%s",
			   sizeof(((struct sockaddr_un *)0)->sun_path) - 1,
			   moved ? " (resolved against " : "", moved ? x->file : "",
			   moved ? "'s directory)" : "");
		free(path);
		return;
	}
	char **f = FIELD(base, k, char *);
	free(*f);
	*f = path;
}

static void set_ident(ctx *x, const node *v, void *base, const key *k)
{
	const ident_rule *r = k->arg;
	const char *s = cfg_scalar(x, v, "a name");
	if (!s)
		return;
	if (!cfg_ident_ok(s, r)) {
		cfg_err_at(x, v, "invalid name %s (expected %s)", cfg_qnode(x, v), r->expect);
		return;
	}
	set_string(x, v, base, k);
}

/* One table's name, "schema.table" without globs (match_table_name_problem). */
static void set_table(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a \"schema.table\" name");
	char why[160];
	const char *problem = s ? match_table_name_problem(s, why, sizeof why) : NULL;
	if (!s)
		return;
	if (problem) {
		cfg_err_at(x, v, "invalid table name %s: %s", cfg_qnode(x, v), problem);
		return;
	}
	set_string(x, v, base, k);
}

static void set_bool(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "true or false");
	if (!s)
		return;
	if (strcmp(s, "true") && strcmp(s, "false")) {
		cfg_err_at(
		    x, v,
		    "expected true or false, got %s (YAML 1.2 booleans: yes/no/on/off are not accepted)",
		    cfg_qnode(x, v));
		return;
	}
	*FIELD(base, k, bool) = strcmp(s, "true") == 0;
}

void cfg_key_range(const key *k, uint64_t *lo, uint64_t *hi)
{
	*lo = k->min ? k->min : (k->flags & K_POSITIVE) ? 1 : 0;
	*hi = k->max ? k->max : k->type->size == sizeof(uint32_t) ? UINT32_MAX : UINT64_MAX;
}

void cfg_key_value_text(buf *b, const key *k, uint64_t v)
{
	if (k->type == &t_duration)
		cfg_fmt_duration(b, v);
	else if (k->type == &t_size)
		cfg_fmt_size(b, v);
	else
		buf_printf(b, "%" PRIu64, v);
}

/* Whether v is in k's range. Else an error that gives the range in the key's own units. */
static bool in_range(ctx *x, const node *v, const key *k, uint64_t n)
{
	uint64_t lo, hi;
	cfg_key_range(k, &lo, &hi);
	if (n >= lo && n <= hi)
		return true;
	if (k->type == &t_duration && lo == 1 && n == 0) {
		cfg_err_at(x, v, "must be longer than 0");
		return false;
	}
	buf a = {0}, z = {0};
	cfg_key_value_text(&a, k, lo);
	cfg_key_value_text(&z, k, hi);
	cfg_err_at(x, v, "%s is out of range (%s to %s)", cfg_qnode(x, v), a.data, z.data);
	buf_free(&a);
	buf_free(&z);
	return false;
}

static void set_duration(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t ms;
	const char *s = cfg_scalar(x, v, "a duration");
	if (!s)
		return;
	if (!cfg_parse_duration(s, &ms)) {
		cfg_err_at(x, v, "invalid duration %s (expected e.g. 250ms, 10s, 5m, 24h or 1h30m)",
			   cfg_qnode(x, v));
		return;
	}
	if (in_range(x, v, k, ms))
		*FIELD(base, k, uint64_t) = ms;
}

static void set_size(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n;
	const char *s = cfg_scalar(x, v, "a size");
	if (!s)
		return;
	if (!cfg_parse_size(s, &n)) {
		char why[160];
		cfg_err_at(x, v, "invalid size %s (%s)", cfg_qnode(x, v),
			   cfg_size_problem(s, why, sizeof(why)));
		return;
	}
	if (in_range(x, v, k, n))
		*FIELD(base, k, uint64_t) = n;
}

/* A decimal integer within [min, max]. False after reporting an error. */
static bool get_uint(ctx *x, const node *v, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *s = cfg_scalar(x, v, "an integer");
	if (!s)
		return false;
	uint64_t n = 0;
	bool big = false;
	if (*s == '-' && s[1]) {
		cfg_err_at(x, v, "must not be negative, got %s", cfg_qnode(x, v));
		return false;
	}
	if (!*s || strspn(s, DIGIT) != strlen(s)) {
		cfg_err_at(x, v, "expected a non-negative integer, got %s", cfg_qnode(x, v));
		return false;
	}
	for (; *s; s++) {
		if (n > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			big = true;
		else
			n = n * 10 + (uint64_t)(*s - '0');
	}
	if (big || n < min || n > max) {
		cfg_err_at(x, v, "%s is out of range (%" PRIu64 " to %" PRIu64 ")", cfg_qnode(x, v), min,
			   max);
		return false;
	}
	*out = n;
	return true;
}

static void set_u32(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n, lo, hi;
	cfg_key_range(k, &lo, &hi);
	if (get_uint(x, v, lo, hi, &n))
		*FIELD(base, k, uint32_t) = (uint32_t)n;
}

static void set_u64(ctx *x, const node *v, void *base, const key *k)
{
	uint64_t n, lo, hi;
	cfg_key_range(k, &lo, &hi);
	if (get_uint(x, v, lo, hi, &n))
		*FIELD(base, k, uint64_t) = n;
}

static void set_enum(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "a name");
	if (!s)
		return;
	const ename *e = cfg_ename_find(k->arg, s);
	if (e) {
		*FIELD(base, k, int) = e->value;
		return;
	}
	buf names = {0};
	cfg_ename_list(&names, k->arg);
	cfg_err_at(x, v, "invalid value %s (expected %s)", cfg_qnode(x, v), names.data);
	buf_free(&names);
}

static void set_listen(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "HOST:PORT");
	if (!s)
		return;
	const char *why = cfg_listen_problem(s);
	if (why) {
		cfg_err_at(x, v, "invalid address %s: %s", cfg_qnode(x, v), why);
		return;
	}
	set_string(x, v, base, k);
}

static void set_mode(ctx *x, const node *v, void *base, const key *k)
{
	const char *s = cfg_scalar(x, v, "an octal mode like \"0660\"");
	if (!s)
		return;
	unsigned long m = 0;
	if (!*s || strspn(s, "01234567") != strlen(s)) {
		cfg_err_at(x, v, "invalid mode %s (expected an octal mode like \"0660\")", cfg_qnode(x, v));
		return;
	}
	for (; *s; s++)
		if ((m = m * 8 + (unsigned long)(*s - '0')) > 07777)
			break;
	if (m & ~0777ul) {
		cfg_err_at(x, v, "mode %s has bits outside 0777", cfg_qnode(x, v));
		return;
	}
	if (m & 0002) {
		cfg_err_at(x, v,
			   "mode %s lets any local user write to the sockets (use e.g. \"0660\" and a group)",
			   cfg_qnode(x, v));
		return;
	}
	*FIELD(base, k, mode_t) = (mode_t)m;
}

void cfg_strlist_free(cfg_strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

void cfg_strlist_push(cfg_strlist *l, const char *s)
{
	l->v = util_xrealloc(l->v, (l->n + 1) * sizeof *l->v);
	l->v[l->n++] = util_xstrdup(s);
}

void cfg_strlist_copy(cfg_strlist *dst, const cfg_strlist *src)
{
	dst->n = src->n;
	dst->v = src->n ? util_xcalloc(src->n, sizeof *dst->v) : NULL;
	for (size_t i = 0; i < src->n; i++)
		dst->v[i] = util_xstrdup(src->v[i]);
}

/* The items of a non-empty list, or NULL after an error. */
static const node *list(ctx *x, const node *v)
{
	if (v->kind != N_SEQ) {
		cfg_wrong_kind(x, v, "a list");
		return NULL;
	}
	if (!v->n) {
		cfg_err_at(x, v, "must not be empty");
		return NULL;
	}
	return v;
}

/* A list of strings, table patterns (K_PATTERNS) or column names. */
static void set_strlist(ctx *x, const node *v, void *base, const key *k)
{
	cfg_strlist l = {0};
	if (!list(x, v))
		return;
	l.v = util_xcalloc(v->n, sizeof *l.v);
	unsigned before = x->nerr;
	for (size_t i = 0; i < v->n; i++) {
		const node *it = v->kids[i];
		bool pat = k->flags & K_PATTERNS;
		const char *s = cfg_scalar(x, it, pat ? "a \"schema.table\" pattern" : "a column name");
		char why[160];
		const char *problem = NULL;
		if (!s)
			continue;
		if (pat)
			problem = match_table_problem(s, why, sizeof why);
		else if (!*s || strlen(s) > MATCH_NAME_MAX)
			problem = "a column name is 1 to 63 bytes long";
		if (problem) {
			cfg_err_at(x, it, "invalid %s %s: %s", pat ? "table pattern" : "column name",
				   cfg_qnode(x, it), problem);
			continue;
		}
		l.v[l.n++] = util_xstrdup(s);
	}
	if (x->nerr != before) {
		cfg_strlist_free(&l);
		return;
	}
	cfg_strlist *f = FIELD(base, k, cfg_strlist);
	cfg_strlist_free(f);
	*f = l;
}

static void set_ops(ctx *x, const node *v, void *base, const key *k)
{
	unsigned ops = 0, before = x->nerr;
	if (!list(x, v))
		return;
	for (size_t i = 0; i < v->n; i++) {
		const node *it = v->kids[i];
		const char *s = cfg_scalar(x, it, "an operation");
		if (!s)
			continue;
		const ename *e = cfg_ename_find(op_names, s);
		if (!e) {
			buf names = {0};
			cfg_ename_list(&names, op_names);
			cfg_err_at(x, it, "unknown operation %s (expected %s)", cfg_qnode(x, it), names.data);
			buf_free(&names);
		} else if (ops & (unsigned)e->value) {
			cfg_err_at(x, it, "operation %s is listed twice", cfg_qnode(x, it));
		}
		ops |= e ? (unsigned)e->value : 0;
	}
	if (x->nerr == before)
		*FIELD(base, k, unsigned) = ops;
}

void cfg_uids_default(cfg *c)
{
	uid_t self = geteuid();
	util_id_list_free(&c->status.control_uids);
	c->status.control_uids.n = self == 0 ? 1 : 2;
	c->status.control_uids.v = util_xcalloc(c->status.control_uids.n, sizeof(uint32_t));
	c->status.control_uids.v[c->status.control_uids.n - 1] = self; /* root first */
}

#define IDS_MAX 256    /* ids in one list, more is a mistake or hostile */
#define ID_NAME_MAX 32 /* a user's or group's name, as useradd allows */

/* A user's or group's name into its id, looked up now (getpwnam, getgrnam). False if there is none. */
static bool id_of_name(const char *name, bool group, uint32_t *id)
{
	char scratch[16384];
	if (group) {
		struct group gr, *found = NULL;
		if (getgrnam_r(name, &gr, scratch, sizeof scratch, &found) != 0 || !found)
			return false;
		*id = gr.gr_gid;
	} else {
		struct passwd pw, *found = NULL;
		if (getpwnam_r(name, &pw, scratch, sizeof scratch, &found) != 0 || !found)
			return false;
		*id = pw.pw_uid;
	}
	return true;
}

/* One item of a list of ids. It is a number (not (uint32_t)-1, which means "no id"). Or it is the
 * name of one of this machine's users (groups, with group), looked up when the file is read. */
static bool get_id(ctx *x, const node *it, bool group, uint32_t *id)
{
	const char *what = group ? "group" : "user";
	const char *s = cfg_scalar(x, it, group ? "a group id or name" : "a user id or name");
	if (!s)
		return false;
	if ((*s >= '0' && *s <= '9') || *s == '-') {
		uint64_t n;
		if (!get_uint(x, it, 0, UINT32_MAX - 1, &n))
			return false;
		*id = (uint32_t)n;
		return true;
	}
	size_t len = strlen(s);
	if (len > ID_NAME_MAX || strspn(s, LOWER UPPER DIGIT "_.-$") != len) {
		cfg_err_at(x, it,
			   "invalid %s %s (expected an id, or a name of 1 to %d letters, digits, _ . -)",
			   what, cfg_qnode(x, it), ID_NAME_MAX);
		return false;
	}
	if (!id_of_name(s, group, id)) {
		cfg_err_at(x, it, "no %s named %s on this machine", what, cfg_qnode(x, it));
		return false;
	}
	return true;
}

/* A list of user ids (t_uids) or group ids (t_gids), each a number or a name. */
static void set_ids(ctx *x, const node *v, void *base, const key *k)
{
	bool group = k->type == &t_gids;
	if (v->kind != N_SEQ) {
		cfg_wrong_kind(x, v, group ? "a list of group ids or names" : "a list of user ids or names");
		return;
	}
	if (v->n > IDS_MAX) {
		cfg_err_at(x, v, "%zu ids: at most %d in one list", v->n, IDS_MAX);
		return;
	}
	id_list l = {.v = v->n ? util_xcalloc(v->n, sizeof(uint32_t)) : NULL};
	for (size_t i = 0; i < v->n; i++)
		if (get_id(x, v->kids[i], group, &l.v[l.n]))
			l.n++;
	if (l.n != v->n) {
		util_id_list_free(&l);
		return;
	}
	id_list *f = FIELD(base, k, id_list);
	util_id_list_free(f);
	*f = l;
}

/* A string a sink module checks. k->arg is its sink_key. */
static void set_checked(ctx *x, const node *v, void *base, const key *k)
{
	const sink_key *sk = k->arg;
	char why[160];
	const char *s = cfg_scalar(x, v, "a string");
	if (!s)
		return;
	if (!*s && (k->flags & K_NONEMPTY)) {
		cfg_err_at(x, v, "must not be empty");
		return;
	}
	const char *problem = sk->check(s, why, sizeof why);
	if (problem) {
		cfg_err_at(x, v, "invalid %s %s: %s", sk->noun ? sk->noun : "value", cfg_qnode(x, v),
			   problem);
		return;
	}
	set_string(x, v, base, k);
}

static int named_cmp(const void *a, const void *b)
{
	const named *p = a, *q = b;
	int r = !p->s || !q->s ? (q->s == NULL) - (p->s == NULL) : strcmp(p->s, q->s); /* NULLs first */
	return r ? r : (p->i > q->i) - (p->i < q->i);
}

size_t *cfg_first_of(named *v, size_t n)
{
	size_t *first = util_xcalloc(n, sizeof *first);
	for (size_t i = 0; i < n; i++)
		first[i] = i;
	qsort(v, n, sizeof *v, named_cmp);
	for (size_t i = 1; i < n; i++)
		if (v[i].s && v[i - 1].s && strcmp(v[i].s, v[i - 1].s) == 0)
			first[v[i].i] = first[v[i - 1].i];
	return first;
}

/* A mapping of strings for a client library. With K_SECRET a value may be {file: PATH}. The
 * secret-looking ones, and those from files, are recorded as secrets. */
static void set_props(ctx *x, const node *v, void *base, const key *k)
{
	sink_properties *props = FIELD(base, k, sink_properties);
	if (cfg_is_null(v))
		return;
	if (v->kind != N_MAP) {
		cfg_wrong_kind(x, v, "a mapping of properties");
		return;
	}
	size_t n = v->n / 2;
	named *names = util_xcalloc(n ? n : 1, sizeof *names);
	const node **values = util_xcalloc(n ? n : 1, sizeof *values);
	node **made = util_xcalloc(n ? n : 1, sizeof *made);
	const char **files = util_xcalloc(n ? n : 1, sizeof *files);
	unsigned before = x->nerr;
	for (size_t i = 0; i < n; i++) {
		const node *kn = v->kids[2 * i], *val = v->kids[2 * i + 1];
		names[i].i = i;
		if (kn->kind != N_SCALAR || !kn->len || strlen(kn->text) != kn->len) {
			cfg_wrong_kind(x, kn, "a property name");
			continue;
		}
		names[i].s = kn->text;
		if (k->flags & K_SECRET) {
			size_t old = cfg_path_push(x, kn->text);
			val = cfg_secret_value(x, val, &made[i], &files[i]);
			cfg_path_pop(x, old);
			if (!val && files[i]) /* not read (secrets_unread), so an empty value stands in */
				val = made[i] = cfg_scalar_node("", kn->line, kn->col);
			if (!val)
				continue;
		}
		values[i] = val;
		if (val->kind != N_SCALAR)
			cfg_err_at(x, val, "property %s: expected a scalar value%s, got a %s",
				   cfg_qnode(x, kn), (k->flags & K_SECRET) ? " or {file: PATH}" : "",
				   val->kind == N_MAP ? "mapping" : "list");
		else if (strlen(val->text) != val->len)
			cfg_err_at(x, val, "property %s: must not contain a NUL character", cfg_qnode(x, kn));
	}
	size_t *first = cfg_first_of(names, n);
	for (size_t i = 0; i < n; i++)
		if (first[i] != i)
			cfg_err_at(x, v->kids[2 * i], "duplicate property %s (first at line %d, column %d)",
				   cfg_qnode(x, v->kids[2 * i]), v->kids[2 * first[i]]->line,
				   v->kids[2 * first[i]]->col);
	free(first);
	free(names);
	if (x->nerr == before) {
		props->items = util_xcalloc(n ? n : 1, sizeof *props->items);
		for (size_t i = 0; i < n; i++) {
			const char *name = v->kids[2 * i]->text;
			props->items[i] = (sink_property){util_xstrdup(name), util_xstrdup(values[i]->text)};
			if ((k->flags & K_SECRET) && (files[i] || cfg_prop_holds_secret(name))) {
				size_t old = cfg_path_push(x, name);
				cfg_secret_record(x, files[i]);
				cfg_path_pop(x, old);
			}
		}
		props->count = n;
	}
	for (size_t i = 0; i < n; i++)
		cfg_node_free(made[i]);
	free(made);
	free(values);
	free(files);
}

/* The overlay file's deleted subscriptions. */
static void set_names(ctx *x, const node *v, void *base, const key *k)
{
	cfg_strlist *l = FIELD(base, k, cfg_strlist);
	if (v->kind != N_SEQ) {
		cfg_wrong_kind(x, v, "a list of subscription names");
		return;
	}
	cfg_strlist_free(l);
	l->v = util_xcalloc(v->n ? v->n : 1, sizeof *l->v);
	for (size_t i = 0; i < v->n; i++) {
		const char *s = cfg_scalar(x, v->kids[i], "a subscription name");
		if (s && !cfg_ident_ok(s, &sub_rule))
			cfg_err_at(x, v->kids[i], "invalid name %s (expected %s)", cfg_qnode(x, v->kids[i]),
				   sub_rule.expect);
		else if (s)
			l->v[l->n++] = util_xstrdup(s);
	}
}

/* ---- printers ---- */

static void print_section(emit *e, const void *base, const key *k)
{
	if (e->json || (k->flags & K_FLOW)) {
		emit saved = cfg_emit_open(e, '{');
		cfg_keys_print(e, base, k->arg);
		cfg_emit_close(e, '}', &saved);
		return;
	}
	e->space = false;
	e->indent += 2;
	cfg_keys_print(e, base, k->arg);
	e->indent -= 2;
}

static void print_string(emit *e, const void *base, const key *k)
{
	const char *v = *CFIELD(base, k, char *);
	cfg_emit_str(e, v && (k->flags & K_SECRET) ? CFG_MASK : v);
}

static void print_dsn(emit *e, const void *base, const key *k)
{
	char *dsn = cfg_mask_dsn(*CFIELD(base, k, char *));
	cfg_emit_str(e, dsn);
	free(dsn);
}

static void print_bool(emit *e, const void *base, const key *k)
{
	cfg_emit_raw(e, *CFIELD(base, k, bool) ? "true" : "false");
}

static void print_duration(emit *e, const void *base, const key *k)
{
	buf b = {0};
	cfg_fmt_duration(&b, *CFIELD(base, k, uint64_t));
	cfg_emit_word(e, b.data);
	buf_free(&b);
}

static void print_size(emit *e, const void *base, const key *k)
{
	buf b = {0};
	cfg_fmt_size(&b, *CFIELD(base, k, uint64_t));
	cfg_emit_word(e, b.data);
	buf_free(&b);
}

static void print_u32(emit *e, const void *base, const key *k)
{
	cfg_emit_u64(e, *CFIELD(base, k, uint32_t));
}

static void print_u64(emit *e, const void *base, const key *k)
{
	cfg_emit_u64(e, *CFIELD(base, k, uint64_t));
}

static void print_enum(emit *e, const void *base, const key *k)
{
	cfg_emit_word(e, cfg_ename_of(k->arg, *CFIELD(base, k, int)));
}

static void print_mode(emit *e, const void *base, const key *k)
{
	char mode[8];
	snprintf(mode, sizeof mode, "%04o", (unsigned)*CFIELD(base, k, mode_t));
	cfg_emit_str(e, mode);
}

static void print_strlist(emit *e, const void *base, const key *k)
{
	const cfg_strlist *l = CFIELD(base, k, cfg_strlist);
	emit saved = cfg_emit_open(e, '[');
	for (size_t i = 0; i < l->n; i++) {
		cfg_emit_item(e, i);
		cfg_emit_str(e, l->v[i]);
	}
	cfg_emit_close(e, ']', &saved);
}

static void print_ops(emit *e, const void *base, const key *k)
{
	unsigned ops = *CFIELD(base, k, unsigned);
	size_t n = 0;
	emit saved = cfg_emit_open(e, '[');
	for (const ename *o = op_names; o->name; o++) {
		if (ops & (unsigned)o->value) {
			cfg_emit_item(e, n++);
			cfg_emit_word(e, o->name);
		}
	}
	cfg_emit_close(e, ']', &saved);
}

static void print_ids(emit *e, const void *base, const key *k)
{
	const id_list *l = CFIELD(base, k, id_list);
	emit saved = cfg_emit_open(e, '[');
	for (size_t i = 0; i < l->n; i++) {
		cfg_emit_item(e, i);
		cfg_emit_u64(e, l->v[i]);
	}
	cfg_emit_close(e, ']', &saved);
}

/* A block mapping, one property a line, secret-looking values masked. */
static void print_props(emit *e, const void *base, const key *k)
{
	const sink_properties *props = CFIELD(base, k, sink_properties);
	if (!props->count) {
		cfg_emit_raw(e, "{}");
		return;
	}
	e->space = false;
	for (size_t i = 0; i < props->count; i++) {
		const sink_property *kv = &props->items[i];
		/* YAML limits implicit keys to 1024 characters, so long ones need the explicit "? key" */
		bool explicit_key = strlen(kv->key) > 100;
		cfg_emit_line(e, e->indent + 2);
		if (explicit_key)
			buf_puts(e->b, "? ");
		cfg_emit_str(e, kv->key);
		if (explicit_key)
			cfg_emit_line(e, e->indent + 2);
		buf_puts(e->b, ": ");
		const char *file = NULL;
		if (e->path) {
			size_t old = e->path->len;
			buf_printf(e->path, ".%s", kv->key);
			file = cfg_secret_file(e->secrets_of, e->path->data);
			e->path->len = old;
			e->path->data[old] = '\0';
		}
		if (file)
			cfg_emit_secret_file(e, file);
		else
			cfg_emit_str(e, cfg_prop_is_secret(kv->key) ? CFG_MASK : kv->value);
	}
}

/* ---- values held apart from their key's offset ---- */

static void clear_props(void *base, const key *k)
{
	sink_properties *props = FIELD(base, k, sink_properties);
	for (size_t i = 0; i < props->count; i++) {
		free(props->items[i].key);
		free(props->items[i].value);
	}
	free(props->items);
	*props = (sink_properties){0};
}

/* Whether a reload applies property name. The key's arg lists those, which a restart does not need
 * (a NULL-terminated list of names, from the sink module). */
static bool prop_reloads(const key *k, const char *name)
{
	for (const char *const *r = k->arg; r && *r; r++)
		if (strcmp(*r, name) == 0)
			return true;
	return false;
}

/* The next property of props, from *from on, that a reload does not apply. NULL past the last. */
static const sink_property *restart_prop(const key *k, const sink_properties *props, size_t *from)
{
	while (*from < props->count && prop_reloads(k, props->items[*from].key))
		(*from)++;
	return *from < props->count ? &props->items[(*from)++] : NULL;
}

static bool same_props(const void *a, const void *b, const key *k)
{
	const sink_properties *x = CFIELD(a, k, sink_properties), *y = CFIELD(b, k, sink_properties);
	size_t i = 0, j = 0;
	for (;;) {
		const sink_property *p = restart_prop(k, x, &i), *q = restart_prop(k, y, &j);
		if (!p || !q)
			return p == q;
		if (strcmp(p->key, q->key) || strcmp(p->value, q->value))
			return false;
	}
}

/* ---- the types ---- */

const ktype t_section = {set_section, print_section, ST_SECTION, .name = "section"},
	    t_string = {set_string, print_string, ST_STR, .name = "string"},
	    t_dsn = {set_string, print_dsn, ST_STR, .name = "libpq connection string"},
	    t_where = {set_where, print_string, ST_STR, .name = "condition"},
	    t_socket = {set_socket, print_string, ST_STR, .name = "socket path"},
	    t_path = {set_path, print_string, ST_STR, .name = "path"},
	    t_token = {set_token, print_token, ST_STR, .name = "token"},
	    t_ident = {set_ident, print_string, ST_STR, .name = "name"},
	    t_listen = {set_listen, print_string, ST_STR, .name = "HOST:PORT"},
	    t_table = {set_table, print_string, ST_STR, .name = "table name"},
	    t_checked = {set_checked, print_string, ST_STR, .name = "string"},
	    t_bool = {set_bool, print_bool, ST_VALUE, sizeof(bool), .name = "boolean"},
	    t_duration = {set_duration, print_duration, ST_VALUE, sizeof(uint64_t), .name = "duration"},
	    t_size = {set_size, print_size, ST_VALUE, sizeof(uint64_t), .name = "size"},
	    t_u32 = {set_u32, print_u32, ST_VALUE, sizeof(uint32_t), .name = "integer"},
	    t_u64 = {set_u64, print_u64, ST_VALUE, sizeof(uint64_t), .name = "integer"},
	    t_enum = {set_enum, print_enum, ST_VALUE, sizeof(int), .name = "one of"},
	    t_mode = {set_mode, print_mode, ST_VALUE, sizeof(mode_t), .name = "octal file mode"},
	    t_strlist = {set_strlist, print_strlist, ST_LIST, .name = "list"},
	    t_ops = {set_ops, print_ops, ST_VALUE, sizeof(unsigned), .name = "list of operations"},
	    t_names = {set_names, print_strlist, ST_LIST, .name = "list of names"},
	    t_uids = {set_ids, print_ids, ST_IDS, .name = "list of user ids or names"},
	    t_gids = {set_ids, print_ids, ST_IDS, .name = "list of group ids or names"},
	    t_props = {
		set_props, print_props, ST_OWN, 0, clear_props, same_props, .name = "mapping of strings"};

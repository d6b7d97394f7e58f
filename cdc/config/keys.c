/* The configuration's schema, one table of keys per section, each key with its type, its default and
 * whether a reload applies it. Generic walks over those tables parse, default, free, copy, print and
 * compare a configuration (cf. pgbouncer's bouncer_params[]). */
#include "cdc/config/config_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- the walks ---- */

/* Stores v through k's setter. A secret key's value may be {file: PATH}, and is recorded. */
static void set_key(ctx *x, const node *v, void *base, const key *k)
{
	if (!(k->flags & K_SECRET) || k->type->store != ST_STR) {
		k->type->set(x, v, base, k); /* a secret mapping of values (t_props) reads its files itself */
		return;
	}
	node *made;
	const char *file;
	unsigned before = x->nerr;
	const node *value = cfg_secret_value(x, v, &made, &file);
	if (value)
		k->type->set(x, value, base, k);
	const char *s = *FIELD(base, k, char *);
	/* a file not read (secrets_unread) leaves the key unset, and is recorded all the same */
	if (x->nerr == before && (file || (s && (k->type == &t_dsn ? cfg_dsn_has_secret(s) : *s != '\0'))))
		cfg_secret_record(x, file);
	cfg_node_free(made);
}

/* Whether key a is the first of t with its name (two sinks may each have a key of one name). */
static bool first_named(const keys *t, size_t a)
{
	for (size_t i = 0; i < a; i++)
		if (strcmp(t->k[i].name, t->k[a].name) == 0)
			return false;
	return true;
}

/* The key of t named like kn (t->n if none). Of two sinks' keys of one name, the one of the sink
 * the mapping names (x->sink_hint), else the first. */
static size_t key_index(const ctx *x, const keys *t, const node *kn)
{
	size_t found = t->n;
	for (size_t j = 0; j < t->n; j++) {
		if (strlen(t->k[j].name) != kn->len || strcmp(t->k[j].name, kn->text) != 0)
			continue;
		if (found == t->n)
			found = j;
		if (t->k[j].module && t->k[j].module - 1 == x->sink_hint)
			return j;
	}
	return found;
}

void cfg_walk_map(ctx *x, const node *m, void *base, const keys *t, pair *seen)
{
	if (cfg_is_null(m))
		goto check; /* "kafka:" with everything commented out is an empty mapping */
	if (m->kind != N_MAP) {
		cfg_wrong_kind(x, m, "a mapping");
		return;
	}
	for (size_t i = 0; i + 1 < m->n; i += 2) {
		const node *kn = m->kids[i], *v = m->kids[i + 1];
		if (kn->kind != N_SCALAR) {
			cfg_wrong_kind(x, kn, "a string key");
			continue;
		}
		size_t j = key_index(x, t, kn);
		if (j == t->n) {
			buf allowed = {0};
			for (size_t a = 0; a < t->n; a++)
				if (first_named(t, a))
					buf_printf(&allowed, "%s%s", allowed.len ? ", " : "", t->k[a].name);
			cfg_err_at(x, kn, "unknown %skey %s (allowed: %s)", t->top ? "top-level " : "",
				   cfg_qnode(x, kn), allowed.data);
			buf_free(&allowed);
		} else if (seen[j].k) {
			cfg_err_key(x, kn, t->k[j].name, "duplicate key (first at line %d, column %d)",
				    seen[j].k->line, seen[j].k->col);
		} else {
			seen[j] = (pair){kn, v};
			size_t old = cfg_path_push(x, t->k[j].name);
			set_key(x, v, base, &t->k[j]);
			cfg_path_pop(x, old);
		}
	}
check:
	if (t->present)
		t->present(base, t->module);
	for (size_t j = 0; j < t->n; j++)
		if ((t->k[j].flags & K_REQUIRED) && !seen[j].k)
			cfg_err_at(x, m, "missing required key \"%s\"", t->k[j].name);
	if (t->check)
		t->check(x, base, seen);
}

/* Stores v in the size bytes of a ST_VALUE field. */
static void store_value(void *f, size_t size, uint64_t v)
{
	if (size == sizeof(uint64_t)) {
		memcpy(f, &v, size);
	} else if (size == sizeof(uint32_t)) {
		uint32_t u = (uint32_t)v;
		memcpy(f, &u, size);
	} else {
		bool b = v != 0;
		memcpy(f, &b, sizeof b);
	}
}

static void key_default(void *base, const key *k)
{
	switch (k->type->store) {
	case ST_VALUE:
		store_value(FIELD(base, k, char), k->type->size, k->def.n);
		break;
	case ST_STR:
		*FIELD(base, k, char *) = k->def.s ? util_xstrdup(k->def.s) : NULL;
		break;
	case ST_IDS: /* starts empty */
		break;
	case ST_LIST:
		if (k->def.s) {
			cfg_strlist *l = FIELD(base, k, cfg_strlist);
			l->v = util_xmalloc(sizeof *l->v);
			l->v[0] = util_xstrdup(k->def.s);
			l->n = 1;
		}
		break;
	case ST_SECTION:
		cfg_keys_default(base, k->arg);
		break;
	case ST_OWN:
		break;
	}
}

void cfg_keys_default(void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		void **held = (void **)(void *)((char *)base + k->via);
		if ((k->flags & K_VIA) && !*held)
			*held = util_xcalloc(1, k->via_size);
		key_default(base, k);
	}
}

static void keys_clear_fields(void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		if ((k->flags & K_VIA) && !*(void **)(void *)((char *)base + k->via))
			continue; /* never defaulted */
		switch (k->type->store) {
		case ST_STR:
			free(*FIELD(base, k, char *));
			break;
		case ST_LIST:
			cfg_strlist_free(FIELD(base, k, cfg_strlist));
			break;
		case ST_IDS:
			util_id_list_free(FIELD(base, k, id_list));
			break;
		case ST_SECTION:
			keys_clear_fields(base, k->arg);
			break;
		case ST_OWN:
			k->type->clear(base, k);
			break;
		case ST_VALUE:
			break;
		}
	}
}

/* Frees the structs K_VIA keys point into, once their fields are cleared. */
static void keys_free_held(void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		void **held = (void **)(void *)((char *)base + k->via);
		if (k->type->store == ST_SECTION)
			keys_free_held(base, k->arg);
		if (k->flags & K_VIA) {
			free(*held);
			*held = NULL;
		}
	}
}

void cfg_keys_clear(void *base, const keys *t)
{
	keys_clear_fields(base, t);
	keys_free_held(base, t);
}

void cfg_keys_copy(void *dst, const void *src, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		void **held = (void **)(void *)((char *)dst + k->via);
		void *const *from = (void *const *)(const void *)((const char *)src + k->via);
		if ((k->flags & K_VIA) && *from && *held == *from) {
			*held = util_xmalloc(k->via_size);
			memcpy(*held, *from, k->via_size);
		}
	}
	for (const key *k = t->k; k < t->k + t->n; k++) {
		switch (k->type->store) {
		case ST_STR: {
			const char *s = *CFIELD(src, k, char *);
			*FIELD(dst, k, char *) = s ? util_xstrdup(s) : NULL;
			break;
		}
		case ST_LIST:
			cfg_strlist_copy(FIELD(dst, k, cfg_strlist), CFIELD(src, k, cfg_strlist));
			break;
		case ST_IDS:
			util_id_list_copy(FIELD(dst, k, id_list), CFIELD(src, k, id_list));
			break;
		case ST_SECTION:
			cfg_keys_copy(dst, src, k->arg);
			break;
		case ST_VALUE: /* copied with the struct */
		case ST_OWN:   /* not in a subscription, the one thing copied */
			break;
		}
	}
}

/* Whether an optional key is set, as a string or list given, or a section with one of those given. */
static bool is_set(const void *base, const key *k)
{
	if (k->type->store == ST_STR)
		return *CFIELD(base, k, char *) != NULL;
	if (k->type->store == ST_LIST)
		return CFIELD(base, k, cfg_strlist)->n != 0;
	if (k->type->store == ST_IDS)
		return CFIELD(base, k, id_list)->n != 0;
	if (k->type->store == ST_SECTION) {
		const keys *t = k->arg;
		for (const key *c = t->k; c < t->k + t->n; c++)
			if ((c->type->store == ST_STR || c->type->store == ST_LIST ||
			     c->type->store == ST_SECTION) &&
			    is_set(base, c))
				return true;
		return false;
	}
	return true;
}

void cfg_keys_print(emit *e, const void *base, const keys *t)
{
	for (const key *k = t->k; k < t->k + t->n; k++) {
		if ((t->shown && !t->shown(base, k)) || ((k->flags & K_OPTIONAL) && !is_set(base, k)))
			continue;
		cfg_emit_key(e, k->name);
		size_t old = e->path ? e->path->len : 0;
		if (e->path)
			buf_printf(e->path, "%s%s", old ? "." : "", k->name);
		/* A secret from a file prints as {file: PATH}. Its type masks one written in clear. */
		const char *file = e->path ? cfg_secret_file(e->secrets_of, e->path->data) : NULL;
		if (file)
			cfg_emit_secret_file(e, file);
		else
			k->type->print(e, base, k);
		if (e->path) {
			e->path->len = old;
			e->path->data[old] = '\0';
		}
	}
}

static bool key_same(const void *a, const void *b, const key *k)
{
	switch (k->type->store) {
	case ST_VALUE:
		return memcmp(CFIELD(a, k, char), CFIELD(b, k, char), k->type->size) == 0;
	case ST_STR: {
		const char *x = *CFIELD(a, k, char *), *y = *CFIELD(b, k, char *);
		return x == y || (x && y && strcmp(x, y) == 0);
	}
	case ST_LIST: {
		const cfg_strlist *x = CFIELD(a, k, cfg_strlist), *y = CFIELD(b, k, cfg_strlist);
		if (x->n != y->n)
			return false;
		for (size_t i = 0; i < x->n; i++)
			if (strcmp(x->v[i], y->v[i]) != 0)
				return false;
		return true;
	}
	case ST_IDS:
		return util_id_list_same(CFIELD(a, k, id_list), CFIELD(b, k, id_list));
	case ST_OWN:
		return k->type->same(a, b, k);
	case ST_SECTION:
		break;
	}
	return true; /* a section's keys are compared one by one */
}

static size_t restart_walk(const cfg *a, const cfg *b, const keys *t, const char *prefix,
			   void (*fn)(const char *key, void *arg), void *arg)
{
	size_t n = 0;
	for (const key *k = t->k; k < t->k + t->n; k++) {
		char name[64];
		snprintf(name, sizeof name, "%s%s", prefix, k->name);
		if (k->type->store == ST_SECTION) {
			strcat(name, ".");
			n += restart_walk(a, b, k->arg, name, fn, arg);
		} else if (k->restart && !key_same(a, b, k)) {
			fn(name, arg);
			n++;
		}
	}
	return n;
}

size_t cfg_restart_keys(const cfg *old, const cfg *next, void (*fn)(const char *key, void *arg), void *arg)
{
	return restart_walk(old, next, &top_keys, "", fn, arg);
}

/* ---- the schema ---- */

#define SUB(f) offsetof(cfg_subscription, f)
#define TOP(f) offsetof(cfg, f)

/* cdc's own keys of a subscription. The sink modules' come between columns and snapshot. */
enum sub_key { SK_NAME, SK_TABLES, SK_OPS, SK_TAG, SK_SINK, SK_CHANGED, SK_WHERE, SK_COLUMNS, SK_SNAPSHOT };
/* A subscription's keys apply at the next transaction boundary after a reload. None needs a restart. */
static key sub_k[] = {
    [SK_NAME] = {"name", &t_ident, SUB(name), &sub_rule, K_REQUIRED,
		 .doc = "The subscription's name: in events, status, metrics, the spool's directory and the "
			"subscriber protocol. Unique."},
    [SK_TABLES] = {"tables", &t_strlist, SUB(tables), NULL, K_REQUIRED | K_PATTERNS,
		   .doc = "The tables whose changes it receives: `schema.table` patterns with `*` and `?`. "
			  "Only tables in the publication send changes."},
    [SK_OPS] = {"operations", &t_ops, SUB(ops), .def.n = MATCH_OPS_DEFAULT,
		.doc =
		    "The events it receives: `insert`, `update`, `delete`, `truncate`, `message` (logical "
		    "decoding messages, `pg_logical_emit_message`), `schema` (a table's columns before its "
		    "rows, [events.md](events.md#schema-events); needs a row operation) and `ddl` (DDL "
		    "commands, with `source.ddl`, [events.md](events.md#ddl-events)). Every one but "
		    "`message` by default, and with Kafka's `format: debezium` and `avro` but `truncate` too "
		    "(Debezium's `skipped.operations`); list them to have them."},
    [SK_TAG] = {"tag", &t_string, SUB(tag), NULL, K_OPTIONAL,
		.doc = "Free text carried on every event of the subscription (`tag` in JSON and protobuf; "
		       "`{tag}` in topic templates)."},
    [SK_SINK] = {"sink", &t_enum, SUB(sink), NULL, .def.n = 0}, /* the modules' give names and doc */
    [SK_CHANGED] = {"changed", &t_strlist, SUB(changed), NULL, K_OPTIONAL,
		    .doc = "An update matches only if one of these columns changed. Needs the old row: the "
			   "table must be `REPLICA IDENTITY FULL`, which cdc checks."},
    [SK_WHERE] = {"where", &t_where, SUB(where), NULL, K_NONEMPTY | K_OPTIONAL,
		  .doc = "A condition over `new.` and `old.` columns that an event must meet; the language "
			 "is in [subscriptions.md](subscriptions.md#rules). Checked when the file is read."},
    [SK_COLUMNS] = {"columns", &t_strlist, SUB(columns), NULL, K_OPTIONAL,
		    .doc = "A projection: only these columns are carried in `new` and `old`. The key columns "
			   "are always kept."},
    [SK_SNAPSHOT] =
	{"snapshot", &t_bool, SUB(snapshot),
	 .doc = "Backfill the subscription's tables when it is first seen (a fresh `state_dir`, a reload or "
		"`PUT` that adds it), while the stream runs. See [backfills.md](backfills.md)."},
};

/* The built tables, cdc's keys with the sink modules' among them. */
static key sub_built[CFG_MAX_KEYS];
static size_t sub_first[SINK_MODULES_MAX]; /* where each module's keys start in sub_built */
static const key *snapshot_key;
static ename sink_enames[SINK_MODULES_MAX + 1];
const ename *sink_names = sink_enames;

static bool is_module_key(const key *k)
{
	return k->module != 0;
}

/* Reports a module's problem with one of a subscription's keys. */
typedef struct sub_problems {
	sink_problems base;
	ctx *x;
	const pair *seen;
	size_t first;
	const node *fallback;
} sub_problems;

static void report_problem(sink_problems *problems, size_t key_index, const char *message)
{
	sub_problems *p = (sub_problems *)problems;
	const node *n = p->seen[p->first + key_index].k;
	cfg_err_key(p->x, n ? n : p->fallback, sub_built[p->first + key_index].name, "%s", message);
}

/* The operations of a subscription as its sink's settings change them (sink_module's ops hooks). */
static unsigned match_ops(unsigned bits)
{
	return ((bits & SINK_OP_TRUNCATE) ? MATCH_OP_TRUNCATE : 0u) |
	       ((bits & SINK_OP_SCHEMA) ? MATCH_OP_SCHEMA : 0u);
}

static void module_ops(const sink_module *m, cfg_subscription *s, bool given)
{
	const void *settings = s->sink_settings[s->sink];
	if (m->ops_not_default && !given)
		s->ops &= ~match_ops(m->ops_not_default(settings));
	if (m->ops_needed && (s->ops & (MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE)))
		s->ops |= match_ops(m->ops_needed(settings));
}

/* The sinks that take a subscription key named name: "kafka", or "kafka or nats" for one two have. */
static void sinks_taking(const char *name, char *out, size_t size)
{
	size_t len = 0;
	out[0] = '\0';
	for (size_t j = 0; j < sub_keys.n && len < size; j++)
		if (is_module_key(&sub_built[j]) && strcmp(sub_built[j].name, name) == 0)
			len += (size_t)snprintf(out + len, size - len, "%s%s", len ? " or " : "",
						cfg_sink_name(sub_built[j].module - 1));
}

static void check_sub(ctx *x, void *base, const pair *seen)
{
	cfg_subscription *s = base;
	const node *sv = seen[SK_SINK].v;
	const sink_module *m = sink_modules[s->sink];
	if (m->section_needed && !x->have_section[s->sink])
		cfg_err_key(x, sv, "sink", "sink %s needs a top-level %s section (%s)", m->name, m->section,
			    m->section_needed);
	/* an invalid sink was reported already, and what goes with it is unknown */
	bool sink_ok = !sv || (sv->kind == N_SCALAR && cfg_ename_find(sink_names, sv->text));
	for (size_t i = 0; i < sub_keys.n && sink_ok; i++)
		if (seen[i].k && is_module_key(&sub_built[i]) && sub_built[i].module - 1 != s->sink) {
			char sinks[128];
			sinks_taking(sub_built[i].name, sinks, sizeof(sinks));
			cfg_err_key(x, seen[i].k, sub_built[i].name,
				    "only valid with sink: %s (this subscription's sink is %s)", sinks,
				    cfg_sink_name(s->sink));
		}
	if (seen[SK_CHANGED].k && !(s->ops & MATCH_OP_UPDATE))
		cfg_err_key(x, seen[SK_CHANGED].k, "changed", "only valid when operations include update");
	if ((s->ops & MATCH_OP_SCHEMA) && !(s->ops & (MATCH_OP_INSERT | MATCH_OP_UPDATE | MATCH_OP_DELETE)))
		cfg_err_key(x, seen[SK_OPS].k, "operations",
			    "schema events come before rows: schema needs insert, update or delete too");
	if (!sink_ok)
		return;
	bool given[CFG_MAX_KEYS] = {0};
	size_t first = sub_first[s->sink];
	for (size_t i = 0; i < m->sub_keys.count; i++)
		given[i] = seen[first + i].k != NULL;
	sub_problems p = {{report_problem}, x, seen, first, sv ? sv : seen[SK_NAME].k};
	if (m->check_sub)
		m->check_sub(s->sink_settings[s->sink], given, &p.base);
	module_ops(m, s, seen[SK_OPS].k != NULL);
}

/* The parser refuses keys of another sink, so only this sink's are printed, as its module says.
 * snapshot is printed only when on, so configurations without it print as they did before it existed. */
static bool sub_shown(const void *base, const key *k)
{
	const cfg_subscription *s = base;
	if (k == snapshot_key)
		return s->snapshot;
	if (!is_module_key(k))
		return true;
	const sink_module *m = sink_modules[k->module - 1];
	if (k->module - 1 != s->sink)
		return false;
	return !m->sub_shown ||
	       m->sub_shown(s->sink_settings[s->sink], (size_t)(k - sub_built) - sub_first[s->sink]);
}

keys sub_keys;

int cfg_sink_named(const node *m)
{
	if (!m || m->kind != N_MAP)
		return -1;
	for (size_t i = 0; i + 1 < m->n; i += 2)
		if (m->kids[i]->kind == N_SCALAR && strcmp(m->kids[i]->text, "sink") == 0 &&
		    m->kids[i + 1]->kind == N_SCALAR) {
			const ename *e = cfg_ename_find(sink_names, m->kids[i + 1]->text);
			return e ? e->value : -1;
		}
	return -1;
}

static void set_subs(ctx *x, const node *v, void *base, const key *k)
{
	cfg *c = FIELD(base, k, cfg);
	if (cfg_is_null(v))
		return;
	if (v->kind != N_SEQ) {
		cfg_wrong_kind(x, v, "a list of subscriptions");
		return;
	}
	c->nsubs = v->n;
	c->subs = v->n ? util_xcalloc(v->n, sizeof *c->subs) : NULL;
	named *names = util_xcalloc(v->n, sizeof *names);
	const node **name_nodes = util_xcalloc(v->n, sizeof *name_nodes);
	for (size_t i = 0; i < v->n; i++) {
		cfg_subscription *s = &c->subs[i];
		pair seen[CFG_MAX_KEYS] = {0};
		size_t old = cfg_path_index(x, i);
		cfg_keys_default(s, &sub_keys);
		s->line = v->kids[i]->line;
		s->col = v->kids[i]->col;
		x->sink_hint = cfg_sink_named(v->kids[i]);
		cfg_walk_map(x, v->kids[i], s, &sub_keys, seen);
		x->sink_hint = -1;
		names[i] = (named){s->name, i};
		name_nodes[i] = seen[SK_NAME].v;
		cfg_path_pop(x, old);
	}
	size_t *first = cfg_first_of(names, v->n);
	for (size_t i = 0; i < v->n; i++) {
		if (first[i] == i)
			continue;
		size_t old = cfg_path_index(x, i);
		cfg_err_key(
		    x, name_nodes[i], "name", "duplicate subscription name %s (first at line %d, column %d)",
		    cfg_qnode(x, name_nodes[i]), name_nodes[first[i]]->line, name_nodes[first[i]]->col);
		cfg_path_pop(x, old);
	}
	free(first);
	free(names);
	free(name_nodes);
}

static void print_subs(emit *e, const void *base, const key *k)
{
	const cfg *c = CFIELD(base, k, cfg);
	if (!c->nsubs) {
		cfg_emit_raw(e, "[]");
		return;
	}
	e->space = false;
	int indent = e->indent;
	for (size_t i = 0; i < c->nsubs; i++) {
		cfg_emit_line(e, indent + 2);
		buf_puts(e->b, "- ");
		e->indent = indent + 4;
		e->inline_key = true;
		cfg_keys_print(e, &c->subs[i], &sub_keys);
	}
	e->indent = indent;
}

static void clear_subs(void *base, const key *k)
{
	cfg *c = FIELD(base, k, cfg);
	for (size_t i = 0; i < c->nsubs; i++)
		cfg_keys_clear(&c->subs[i], &sub_keys);
	free(c->subs);
}

const ktype t_subs = {set_subs, print_subs, ST_OWN, 0, clear_subs, NULL};

/* What a reload cannot change (the replication connection, the sockets, the Kafka producer, the
 * log's setup) needs a restart. */
static const key source_k[] = {
    {"dsn", &t_dsn, TOP(source.dsn), NULL, K_SECRET, .def.s = "", .restart = true,
     .doc = "The libpq connection string of the database (`host=db port=5432 dbname=app user=cdc`, or a "
	    "`postgresql://` URI), or `{file: PATH}` naming a file that holds it. `PG*` environment "
	    "variables, `passfile`, service files and libpq's TLS options apply; the password is masked "
	    "wherever cdc prints the configuration. cdc adds `replication=database` for its replication "
	    "connection. Keep the password out of it: `password`, a `passfile`, or the whole string in a "
	    "file."},
    {"password", &t_string, TOP(source.password), NULL, K_SECRET | K_OPTIONAL | K_NONEMPTY,
     .doc = "The role's password, for `dsn` and `primary_dsn` when they carry none (theirs wins; this one "
	    "wins over `PGPASSWORD` and `.pgpass`). Best given as `{file: PATH}`: a reload (`SIGHUP`) "
	    "reads the file again, and the next connection uses the new password, without a restart."},
    {"slot", &t_ident, TOP(source.slot), &slot_rule, .def.s = "cdc_slot", .restart = true,
     .doc = "The logical replication slot (plugin `pgoutput`)."},
    {"publication", &t_ident, TOP(source.publication), &pub_rule, .def.s = "cdc_pub", .restart = true,
     .doc = "The publication the slot streams."},
    {"create", &t_bool, TOP(source.create), .restart = true,
     .doc = "Create the publication and the slot when they are missing."},
    {"publish", &t_strlist, TOP(source.publish), NULL, K_PATTERNS, .def.s = "public.*", .restart = true,
     .doc = "With `create: true`: the tables of the publication cdc creates, as table patterns (`*.*`: all "
	    "tables)."},
    {"heartbeat", &t_duration, TOP(source.heartbeat_ms),
     .doc = "When the slot was idle this long, write a heartbeat (a logical message) so that the slot keeps "
	    "moving on a database whose other databases write; `0`: off. Needs `EXECUTE` on "
	    "`pg_logical_emit_message`."},
    {"status_interval", &t_duration, TOP(source.status_interval_ms), NULL, K_POSITIVE, .def.n = 10000,
     .doc = "Send the server a standby status update (the flushed position) at least this often."},
    {"on_slot_lost", &t_enum, TOP(source.on_slot_lost), gap_names,
     .doc = "When the slot is lost (dropped, invalidated, or moved past cdc's position): `fail` stops with a "
	    "message; `resync` recreates it, marks the gap and backfills every subscription's tables. See "
	    "[operations.md](operations.md#when-the-slot-cannot-go-on-re-sync)."},
    {"on_publication_newer", &t_enum, TOP(source.on_publication_newer), gap_names,
     .doc = "When the publication is newer than the slot (every start would fail with `publication does not "
	    "exist`): `fail` stops with a message; `resync` moves the slot on and backfills."},
    {"failover", &t_bool, TOP(source.failover), .restart = true,
     .doc =
	 "PostgreSQL 17 and later: create the slot as a failover slot (or turn that on for an existing "
	 "one), so that a standby with `sync_replication_slots` keeps a copy a promotion resumes from. cdc "
	 "checks every 5 s that the primary's `synchronized_standby_slots` makes a promotion safe "
	 "(`source.failover` in `/status`, `cdc_source_failover_ready`). Refused before 17. See "
	 "[failover.md](failover.md)."},
    {"primary_dsn", &t_dsn, TOP(source.primary_dsn), NULL, K_OPTIONAL | K_SECRET, .restart = true,
     .doc =
	 "When `dsn` is a hot standby (PostgreSQL 16+): the primary's connection string, where cdc writes "
	 "what a standby cannot (heartbeats, re-sync markers, backfills' reads and watermarks, the "
	 "running-transactions record a slot's creation on the standby waits for). Unused while `dsn` is a "
	 "primary. See [failover.md](failover.md#decoding-on-a-standby)."},
    {"ddl", &t_bool, TOP(source.ddl), .restart = true,
     .doc = "Capture DDL: cdc's event trigger writes each command on a table into the WAL, delivered as "
	    "`ddl` events in order with the rows, and renames are told as renames in schema events. With "
	    "`create`, cdc installs the trigger (a superuser's privilege); without it, or without the "
	    "privilege, cdc stops and says what to run. See [events.md](events.md#ddl-events)."},
    {"publish_generated_columns", &t_bool, TOP(source.publish_generated_columns), .restart = true,
     .doc = "PostgreSQL 18 and later: the publication cdc creates publishes stored generated columns "
	    "(`WITH (publish_generated_columns = stored)`), so events carry their values; refused at the "
	    "start on an earlier server, which never publishes them. A publication that exists is left as "
	    "it is (cdc warns when it does not publish them). See "
	    "[events.md](events.md#generated-columns)."},
    {"signal_table", &t_table, TOP(source.signal_table), NULL, K_OPTIONAL, .restart = true,
     .doc = "A table (`schema.table`, with the columns `id`, `type` and `data`) whose inserts ask for "
	    "backfills, in the shape of Debezium's signals: an `execute-snapshot` row starts backfills of "
	    "the tables it names, a `stop-snapshot` row stops them. cdc reads the rows from the WAL as "
	    "they commit, and with `create` adds the table to the publication. See "
	    "[backfills.md](backfills.md#backfills-asked-for-from-sql)."},
};

enum {
	ST_SOCKET,
	ST_LISTEN,
	ST_TCP_CONTROL,
	ST_CONTROL_UIDS,
	ST_TOKEN,
	ST_TCP_READ,
	ST_TLS_CERT,
	ST_TLS_KEY
};
static const key status_k[] = {
    [ST_SOCKET] =
	{"socket", &t_socket, TOP(status.socket), .def.s = CFG_DEFAULT_STATUS_SOCKET, .restart = true,
	 .doc = "The status socket (HTTP/1.1 over a Unix socket): `/status`, `/metrics`, `/healthz`, "
		"`/readyz`, `/subscriptions`, backfills. Its file mode is `subscribers.mode`. A relative "
		"path is taken from the configuration file's directory: `./status.sock` in "
		"`etc/cdc.yaml` is `etc/status.sock`, whichever directory a command runs in."},
    [ST_LISTEN] = {"listen", &t_listen, TOP(status.listen), NULL, K_OPTIONAL, .restart = true,
		   .doc = "Also serve the status endpoints on this TCP address (probes and Prometheus), e.g. "
			  "`127.0.0.1:9187` or `[::]:9187`."},
    [ST_TCP_CONTROL] = {"tcp_control", &t_bool, TOP(status.tcp_control), .restart = true,
			.doc =
			    "Allow `PUT`/`DELETE /subscriptions` and backfill requests over `status.listen`, "
			    "to requests that carry `status.token` (`Authorization: Bearer TOKEN`). Needs "
			    "`status.listen` and `status.token`."},
    [ST_CONTROL_UIDS] =
	{"control_uids", &t_uids, TOP(status.control_uids), .restart = true,
	 .doc = "The peer uids (`SO_PEERCRED`) that may `PUT`/`DELETE` subscriptions and "
		"start backfills over the Unix socket. An empty list is the default. `check-config` "
		"prints the default as it applies to the user who runs it: `[0]` for root, "
		"`[0, 999]` for a user of uid 999 such as `cdc`."},
    [ST_TOKEN] =
	{"token", &t_token, TOP(status.token), NULL, K_SECRET | K_OPTIONAL,
	 .doc =
	     "The bearer token that `status.listen` asks for (`Authorization: Bearer TOKEN`): always for "
	     "`tcp_control`'s changes, and for reading as `tcp_read` says. 16 to 1024 visible ASCII "
	     "characters (`openssl rand -hex 32`), compared in constant time; best given as `{file: PATH}`. "
	     "A reload reads it again. Unused on the Unix socket, whose file mode and "
	     "`control_uids` decide. Needs `status.listen`."},
    [ST_TCP_READ] =
	{"tcp_read", &t_enum, TOP(status.tcp_read), tcp_read_names, .def.n = CFG_TCP_READ_OPEN,
	 .doc =
	     "Who may read the status endpoints over `status.listen`: `open`, anyone who reaches the port; "
	     "`probes`, anyone for `/healthz` and `/readyz` (a kubelet's probes send no token) and "
	     "`status.token`'s holders for `/metrics`, `/status`, `/subscriptions` and `/backfills`; "
	     "`token`, the token's holders only. A request without the token gets 401. `probes` and "
	     "`token` need `status.token`."},
    [ST_TLS_CERT] = {"tls_cert", &t_path, TOP(status.tls_cert), NULL, K_OPTIONAL,
		     .doc =
			 "A PEM file with the certificate (and its chain) that `status.listen` presents: it "
			 "then speaks HTTPS only. A reload reads it again. Needs `status.tls_key`."},
    [ST_TLS_KEY] = {"tls_key", &t_path, TOP(status.tls_key), NULL, K_OPTIONAL,
		    .doc = "The PEM file of `tls_cert`'s private key (unencrypted; keep it readable by cdc's "
			   "user only). A reload reads it again."},
};

static void check_status(ctx *x, void *base, const pair *seen)
{
	cfg *c = base;
	if (c->status.tcp_control && !seen[ST_LISTEN].k)
		cfg_err_key(x, seen[ST_TCP_CONTROL].k, "tcp_control", "needs status.listen");
	else if (c->status.tcp_control && !seen[ST_TOKEN].k)
		cfg_err_key(x, seen[ST_TCP_CONTROL].k, "tcp_control",
			    "needs status.token: changes over TCP must carry a bearer token");
	if (c->status.tcp_read != CFG_TCP_READ_OPEN && !seen[ST_TOKEN].k)
		cfg_err_key(x, seen[ST_TCP_READ].k, "tcp_read", "%s needs status.token",
			    cfg_ename_of(tcp_read_names, c->status.tcp_read));
	for (int i = ST_TOKEN; i <= ST_TLS_KEY; i++)
		if (seen[i].k && i != ST_TCP_READ && !seen[ST_LISTEN].k)
			cfg_err_key(x, seen[i].k, status_k[i].name, "is for status.listen, which is not set");
	if (!seen[ST_TLS_CERT].k != !seen[ST_TLS_KEY].k)
		cfg_err_key(x, seen[seen[ST_TLS_CERT].k ? ST_TLS_CERT : ST_TLS_KEY].k,
			    seen[ST_TLS_CERT].k ? "tls_cert" : "tls_key", "needs status.%s as well",
			    seen[ST_TLS_CERT].k ? "tls_key" : "tls_cert");
	if (!c->status.control_uids.n) /* an empty list means the default */
		cfg_uids_default(c);
}

static const key log_k[] = {
    {"level", &t_enum, TOP(log.level), level_names, .def.n = LOG_LEVEL_INFO, .restart = true,
     .doc = "The least severe messages logged on standard error."},
    {"format", &t_enum, TOP(log.format), format_names, .def.n = LOG_FORMAT_TEXT, .restart = true,
     .doc = "`text`: one `LEVEL message key=value...` line per event; `json`: one JSON object per line."},
};

/* Backfills (cdc/backfill). A reload applies these to the chunks that follow. */
static const key backfill_k[] = {
    {"chunk_time", &t_duration, TOP(backfill.chunk_time_ms), NULL, K_POSITIVE, .def.n = 250,
     .doc = "A chunk's `COPY` aims at taking this long: the chunk size adapts to it, between `min_rows` "
	    "and `max_rows`."},
    {"min_rows", &t_u64, TOP(backfill.min_rows), NULL, K_POSITIVE, .def.n = 100,
     .doc = "The smallest chunk."},
    {"max_rows", &t_u64, TOP(backfill.max_rows), NULL, K_POSITIVE, .def.n = 4000,
     .doc = "The largest chunk: a chunk's reads go out in one turn of the event loop, so a larger chunk "
	    "delays the live stream longer (a live change waits behind two chunks per reading connection at "
	    "most)."},
    {"max_bytes", &t_size, TOP(backfill.max_bytes), NULL, K_POSITIVE, .def.n = 64u << 20,
     .doc = "The memory a chunk may hold: its rows and the keys changed while it is open; a chunk that would "
	    "pass it is split."},
    {"rate_limit", &t_u64, TOP(backfill.rate_limit), .doc = "Rows read per second per table (0: no limit)."},
    {"tables", &t_u32, TOP(backfill.tables), NULL, K_POSITIVE, .def.n = 1,
     .doc = "Tables read at once, over all backfills."},
    {"parallel", &t_u32, TOP(backfill.parallel), NULL, K_POSITIVE, .def.n = CFG_DEFAULT_BACKFILL_PARALLEL,
     .restart = true,
     .doc = "Connections that read chunks at once (1 to 64), each a chunk between its own watermarks: the "
	    "chunks of one table too; one more writes their high watermarks. See "
	    "[backfills.md](backfills.md#speed)."},
};

enum { BK_MIN_ROWS = 1, BK_MAX_ROWS = 2, BK_PARALLEL = 6 };

static void check_backfill(ctx *x, void *base, const pair *seen)
{
	cfg *c = base;
	c->backfill.present = true;
	/* the defaults are in order, so one of the two was given */
	int i = seen[BK_MAX_ROWS].k ? BK_MAX_ROWS : BK_MIN_ROWS;
	if (c->backfill.min_rows > c->backfill.max_rows)
		cfg_err_key(x, seen[i].k, backfill_k[i].name, "min_rows (%llu) is above max_rows (%llu)",
			    (unsigned long long)c->backfill.min_rows,
			    (unsigned long long)c->backfill.max_rows);
	if (c->backfill.parallel > 64)
		cfg_err_key(x, seen[BK_PARALLEL].k, backfill_k[BK_PARALLEL].name,
			    "%u connections is more than 64 (each is a server backend)",
			    c->backfill.parallel);
}

/* What goes with status.listen is printed with it. */
static bool status_shown(const void *base, const key *k)
{
	const cfg *c = base;
	return c->status.listen || k < &status_k[ST_TOKEN];
}

static const keys source_keys = KEYS(source_k),
		  status_keys = KEYS(status_k, .check = check_status, .shown = status_shown),
		  log_keys = KEYS(log_k), backfill_keys = KEYS(backfill_k, .check = check_backfill);

/* cdc's own top-level keys. The sink modules' sections come after status. */
enum { TK_SOURCE, TK_STATE_DIR, TK_STATUS, TK_LOG, TK_BACKFILL, TK_SUBSCRIPTIONS, TK_N };
static const key top_k[] = {
    [TK_SOURCE] = {"source", &t_section, 0, &source_keys,
		   .doc = "The database, the slot and the publication."},
    [TK_STATE_DIR] =
	{"state_dir", &t_path, TOP(state_dir), NULL, K_NONEMPTY, .def.s = "/var/lib/cdc", .restart = true,
	 .doc = "Where cdc keeps its state: the recorded position, spill files of large transactions, the "
		"spools of socket subscriptions, subscriptions changed over the status socket, backfills. A "
		"relative path is taken from the configuration file's directory, like the sockets'."},
    [TK_STATUS] = {"status", &t_section, 0, &status_keys,
		   .doc = "The status socket: figures, health, metrics, and the control endpoints."},
    [TK_LOG] = {"log", &t_section, 0, &log_keys, .doc = "Logging on standard error."},
    [TK_BACKFILL] =
	{"backfill", &t_section, 0, &backfill_keys,
	 .doc =
	     "How backfills read (`snapshot: true`, `cdc backfill`, re-syncs). A reload applies these to the "
	     "chunks that follow."},
    [TK_SUBSCRIPTIONS] =
	{"subscriptions", &t_subs, 0,
	 .doc =
	     "A list of subscriptions: which changes go where. Each is a mapping of the keys below; a reload "
	     "(`SIGHUP`) or `PUT`/`DELETE /subscriptions/NAME` applies changes at the next transaction "
	     "boundary."},
};
static key top_built[TK_N + SINK_MODULES_MAX];

bool cfg_subs_together(const cfg *c, const cfg_subscription *s, const cfg_subscription **second, buf *why)
{
	for (size_t m = 0; sink_modules[m]; m++) {
		const sink_module *mod = sink_modules[m];
		if (!mod->check_together || (s && s->sink != (int)m))
			continue;
		const void **settings = util_xcalloc(c->nsubs + 1, sizeof(*settings));
		const char **names = util_xcalloc(c->nsubs + 1, sizeof(*names));
		const cfg_subscription **which = util_xcalloc(c->nsubs + 1, sizeof(*which));
		size_t n = 0, first, other;
		if (s)
			settings[n] = s->sink_settings[m], names[n] = s->name, which[n++] = s;
		for (size_t i = 0; i < c->nsubs; i++) {
			const cfg_subscription *o = &c->subs[i];
			if (o->sink != (int)m || (s && strcmp(o->name, s->name) == 0))
				continue;
			settings[n] = o->sink_settings[m], names[n] = o->name, which[n++] = o;
		}
		bool ok = mod->check_together(c->sink_present[m] ? c->sink_sections[m] : NULL, settings,
					      names, n, &first, &other, why);
		if (!ok && second)
			*second = which[other];
		free(settings);
		free(names);
		free(which);
		if (!ok)
			return false;
	}
	return true;
}

static void check_top(ctx *x, void *base, const pair *seen)
{
	(void)seen;
	const cfg_subscription *o;
	buf why = {0};
	if (!cfg_subs_together(base, NULL, &o, &why))
		cfg_err_pos(x, o->line, o->col, "%s", why.data);
	buf_free(&why);
}

/* The backfill section is printed when the file has it, and so is a sink's optional section. */
static bool top_shown(const void *base, const key *k)
{
	const cfg *c = base;
	if (k->arg == &backfill_keys)
		return c->backfill.present;
	if (is_module_key(k))
		return !sink_modules[k->module - 1]->section_optional || c->sink_present[k->module - 1];
	return true;
}

keys top_keys;

/* ---- the sink modules' keys, made into the tables' keys ---- */

static const ktype *const type_of[] = {
    [SINK_KEY_STRING] = &t_string,    [SINK_KEY_BOOL] = &t_bool,	 [SINK_KEY_U32] = &t_u32,
    [SINK_KEY_U64] = &t_u64,	      [SINK_KEY_DURATION] = &t_duration, [SINK_KEY_SIZE] = &t_size,
    [SINK_KEY_ENUM] = &t_enum,	      [SINK_KEY_MODE] = &t_mode,	 [SINK_KEY_PATH] = &t_socket,
    [SINK_KEY_PROPERTIES] = &t_props, [SINK_KEY_SECTION] = &t_section,	 [SINK_KEY_UIDS] = &t_uids,
    [SINK_KEY_GIDS] = &t_gids,
};

static void convert_keys(const sink_keys *from, key *to, size_t via, size_t via_size, int module);

static key convert_key(const sink_key *k, size_t via, size_t via_size, int module)
{
	static const unsigned flag_of[][2] = {
	    {SINK_KEY_REQUIRED, K_REQUIRED}, {SINK_KEY_NONEMPTY, K_NONEMPTY}, {SINK_KEY_POSITIVE, K_POSITIVE},
	    {SINK_KEY_OPTIONAL, K_OPTIONAL}, {SINK_KEY_FLOW, K_FLOW},	      {SINK_KEY_SECRET, K_SECRET}};
	key out = {.name = k->name,
		   .type = k->type == SINK_KEY_STRING && k->check ? &t_checked : type_of[k->type],
		   .off = k->offset,
		   .arg = k->arg,
		   .flags = K_VIA,
		   .restart = (k->flags & SINK_KEY_RESTART) != 0,
		   .doc = k->doc,
		   .min = k->min,
		   .max = k->max,
		   .via = via,
		   .via_size = via_size,
		   .module = module};
	for (size_t i = 0; i < sizeof flag_of / sizeof *flag_of; i++)
		if (k->flags & flag_of[i][0])
			out.flags |= flag_of[i][1];
	if (k->type == SINK_KEY_STRING || k->type == SINK_KEY_PATH)
		out.def.s = k->def_text;
	else
		out.def.n = k->def_number;
	if (out.type == &t_checked)
		out.arg = k;
	if (k->type == SINK_KEY_ENUM) {
		const char *const *names = k->arg;
		size_t n = 0;
		while (names[n])
			n++;
		ename *e = util_xcalloc(n + 1, sizeof(*e));
		for (size_t i = 0; i < n; i++)
			e[i] = (ename){names[i], (int)i};
		out.arg = e;
	}
	if (k->type == SINK_KEY_SECTION) {
		const sink_keys *inner = k->arg;
		key *v = util_xcalloc(inner->count, sizeof(*v));
		convert_keys(inner, v, via, via_size, module);
		keys *t = util_xcalloc(1, sizeof(*t));
		*t = (keys){v, inner->count};
		out.arg = t;
	}
	return out;
}

static void convert_keys(const sink_keys *from, key *to, size_t via, size_t via_size, int module)
{
	for (size_t i = 0; i < from->count; i++)
		to[i] = convert_key(&from->keys[i], via, via_size, module);
}

/* The sink key's documentation, from each module's phrase. */
static char *sink_doc(void)
{
	buf b = {0};
	buf_puts(&b, "Where its events go: ");
	size_t n = sink_modules_count();
	for (size_t m = 0; m < n; m++)
		buf_printf(&b, "%s%s", m == 0 ? "" : m + 1 == n ? " or " : ", ", sink_modules[m]->doc);
	buf_puts(&b, ". The first is the default.");
	return b.data;
}

static void section_present(void *base, size_t module)
{
	((cfg *)base)->sink_present[module] = true;
}

/* Builds top_keys and sub_keys before main() runs. The tables never change after. */
__attribute__((constructor)) static void build_tables(void)
{
	size_t n = 0, nmod = sink_modules_count();
	for (size_t m = 0; m < nmod; m++)
		sink_enames[m] = (ename){sink_modules[m]->name, (int)m};
	for (size_t i = 0; i <= SK_COLUMNS; i++)
		sub_built[n++] = sub_k[i];
	sub_built[SK_SINK].arg = sink_enames;
	sub_built[SK_SINK].doc = sink_doc();
	for (size_t m = 0; m < nmod; m++) {
		const sink_module *mod = sink_modules[m];
		sub_first[m] = n;
		if (n + mod->sub_keys.count + 1 > CFG_MAX_KEYS)
			abort(); /* raise CFG_MAX_KEYS */
		convert_keys(&mod->sub_keys, sub_built + n, SUB(sink_settings) + m * sizeof(void *),
			     mod->sub_size, (int)m + 1);
		n += mod->sub_keys.count;
	}
	sub_built[n] = sub_k[SK_SNAPSHOT];
	snapshot_key = &sub_built[n++];
	sub_keys = (keys){sub_built, n, .check = check_sub, .shown = sub_shown};

	n = 0;
	for (size_t i = 0; i <= TK_STATUS; i++)
		top_built[n++] = top_k[i];
	for (size_t m = 0; m < nmod; m++) {
		const sink_module *mod = sink_modules[m];
		if (!mod->section)
			continue;
		key *v = util_xcalloc(mod->section_keys.count, sizeof(*v));
		convert_keys(&mod->section_keys, v, TOP(sink_sections) + m * sizeof(void *),
			     mod->section_size, (int)m + 1);
		keys *t = util_xcalloc(1, sizeof(*t));
		*t = (keys){v, mod->section_keys.count, .present = section_present, .module = m};
		top_built[n++] =
		    (key){mod->section, &t_section, 0, t, .doc = mod->section_doc, .module = (int)m + 1};
	}
	for (size_t i = TK_LOG; i < TK_N; i++)
		top_built[n++] = top_k[i];
	top_keys = (keys){top_built, n, .top = true, .check = check_top, .shown = top_shown};
}

/* ---- load, free ---- */

static cfg *cfg_new(const char *path)
{
	cfg *c = util_xcalloc(1, sizeof *c);
	c->path = util_xstrdup(path);
	cfg_keys_default(c, &top_keys);
	cfg_uids_default(c);
	return c;
}

void cfg_subscription_free(cfg_subscription *s)
{
	if (s)
		cfg_keys_clear(s, &sub_keys);
	free(s);
}

void cfg_free(cfg *c)
{
	if (!c)
		return;
	free(c->path);
	cfg_keys_clear(c, &top_keys);
	cfg_secrets_free(c);
	free(c);
}

static cfg *parse_config(const char *path, const char *text, size_t len, bool read_secrets, buf *errors)
{
	ctx x = {.file = path ? path : "<config>",
		 .errors = errors,
		 .secrets_unread = !read_secrets,
		 .sink_hint = -1};
	node *root = NULL;
	cfg *c = NULL;

	if (!text)
		text = "", len = 0;
	if (!cfg_build_tree(&x, text, len, &root))
		goto out;
	c = cfg_new(x.file);
	x.secrets_of = c;
	if (!root)
		goto out; /* an empty file gives every default */
	if (root->kind == N_MAP)
		for (size_t i = 0; i + 1 < root->n; i += 2)
			for (size_t m = 0; sink_modules[m]; m++)
				if (root->kids[i]->kind == N_SCALAR && sink_modules[m]->section &&
				    strcmp(root->kids[i]->text, sink_modules[m]->section) == 0)
					x.have_section[m] = true;
	pair seen[CFG_MAX_KEYS] = {0};
	cfg_walk_map(&x, root, c, &top_keys, seen);
out:
	cfg_node_free(root);
	cfg_ctx_free(&x);
	if (x.nerr) {
		cfg_free(c);
		return NULL;
	}
	return c;
}

cfg *cfg_parse(const char *path, const char *text, size_t len, buf *errors)
{
	return parse_config(path, text, len, true, errors);
}

static cfg *load(const char *path, bool read_secrets, buf *errors)
{
	buf text = {0};
	cfg *c = cfg_read_text(path, &text, errors)
		     ? parse_config(path, text.data ? text.data : "", text.len, read_secrets, errors)
		     : NULL;
	buf_free(&text);
	return c;
}

cfg *cfg_load(const char *path, buf *errors)
{
	return load(path, true, errors);
}

cfg *cfg_load_no_secrets(const char *path, buf *errors)
{
	return load(path, false, errors);
}

cfg_subscription *cfg_find_subscription(const cfg *c, const char *name)
{
	for (size_t i = 0; i < c->nsubs; i++)
		if (strcmp(c->subs[i].name, name) == 0)
			return &c->subs[i];
	return NULL;
}

/* The key named by a dotted path, and the base its field is in. NULL if none. */
static const key *key_named(const keys *t, const char *name)
{
	const char *dot = strchr(name, '.');
	size_t len = dot ? (size_t)(dot - name) : strlen(name);
	for (const key *k = t->k; k < t->k + t->n; k++) {
		if (strlen(k->name) != len || strncmp(k->name, name, len) != 0)
			continue;
		if (dot)
			return k->type->store == ST_SECTION ? key_named(k->arg, dot + 1) : NULL;
		return k;
	}
	return NULL;
}

const char *cfg_get_string(const cfg *c, const char *name)
{
	const key *k = key_named(&top_keys, name);
	return k && k->type->store == ST_STR ? *CFIELD(c, k, char *) : NULL;
}

uint64_t cfg_get_number(const cfg *c, const char *name)
{
	const key *k = key_named(&top_keys, name);
	if (!k || k->type->store != ST_VALUE)
		return 0;
	uint64_t v = 0;
	if (k->type->size == sizeof(uint64_t))
		memcpy(&v, CFIELD(c, k, char), sizeof v);
	else if (k->type->size == sizeof(uint32_t)) {
		uint32_t u;
		memcpy(&u, CFIELD(c, k, char), sizeof u);
		v = u;
	} else
		v = *CFIELD(c, k, bool);
	return v;
}

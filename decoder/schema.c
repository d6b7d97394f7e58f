/* See schema.h. Schema events and what DDL events tell of tables. */
#include "decoder/schema.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/event.h"

/* A table's DDL knowledge is its column list after the latest DDL event (by column number). It also
 * has a short log of its columns' renames, additions and drops. The log answers "what was this column
 * called then". */

/* Changes kept per table. A subscription whose previous schema event is older than this many column changes
 * of its table gets no renamed_from. */
#define LOG_MAX 256

typedef struct change {
	uint64_t gen;
	char *from, *to; /* from NULL if added, to NULL if dropped */
} change;

typedef struct column {
	int32_t attnum;
	char *name;
	uint32_t type_oid;
	bool not_null;
} column;

typedef struct table {
	uint32_t relid;
	bool known; /* cols is the list of the latest DDL event */
	column *cols;
	size_t ncols;
	change *log; /* oldest first */
	size_t nlog;
	uint64_t lost; /* the newest generation whose changes left the log (0 if none) */
} table;

struct sch_tables {
	table *tabs;
	size_t ntabs, cap;
	uint64_t gen;
};

sch_tables *pgo_schema_tables_new(void)
{
	return util_xcalloc(1, sizeof(sch_tables));
}

static void cols_free(table *t)
{
	for (size_t i = 0; i < t->ncols; i++)
		free(t->cols[i].name);
	free(t->cols);
	t->cols = NULL;
	t->ncols = 0;
	t->known = false;
}

static void table_free(table *t)
{
	cols_free(t);
	for (size_t i = 0; i < t->nlog; i++) {
		free(t->log[i].from);
		free(t->log[i].to);
	}
	free(t->log);
}

void pgo_schema_tables_free(sch_tables *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->ntabs; i++)
		table_free(&t->tabs[i]);
	free(t->tabs);
	free(t);
}

uint64_t pgo_schema_tables_generation(const sch_tables *t)
{
	return t ? t->gen : 0;
}

/* Tables with DDL events since the start. They are few, and looked up once per schema built. */
static table *find(const sch_tables *t, uint32_t relid)
{
	for (size_t i = 0; t && i < t->ntabs; i++)
		if (t->tabs[i].relid == relid)
			return &t->tabs[i];
	return NULL;
}

static void log_change(table *tab, uint64_t gen, const char *from, const char *to)
{
	if (tab->nlog == LOG_MAX) {
		tab->lost = tab->log[0].gen;
		free(tab->log[0].from);
		free(tab->log[0].to);
		memmove(tab->log, tab->log + 1, (LOG_MAX - 1) * sizeof(*tab->log));
		tab->nlog--;
	}
	if (!tab->log)
		tab->log = util_xcalloc(LOG_MAX, sizeof(*tab->log));
	tab->log[tab->nlog++] = (change){gen, from ? util_xstrdup(from) : NULL, to ? util_xstrdup(to) : NULL};
}

static bool named(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* The first DDL event of a table. The columns before it are known by name only (before's). */
static void compare_by_name(table *tab, uint64_t gen, const ddl_msg *m, const pgo_rel *before)
{
	const char **post = util_xcalloc(m->ncols + 1, sizeof(*post)),
		   **pre = util_xcalloc(before->ncols + 1, sizeof(*pre));
	for (size_t i = 0; i < m->ncols; i++)
		post[i] = m->cols[i].name;
	for (size_t i = 0; i < before->ncols; i++)
		pre[i] = before->cols[i].name;
	const ddl_column *added = NULL;
	const char *gone = NULL;
	size_t nadded = 0, ngone = 0;
	for (size_t i = 0; i < m->ncols; i++)
		if (!named(pre, before->ncols, post[i]))
			added = &m->cols[i], nadded++;
	for (size_t i = 0; i < before->ncols; i++)
		if (!named(post, m->ncols, pre[i]))
			gone = pre[i], ngone++;
	if (nadded == 1 && ngone == 1 && m->subid == added->attnum) {
		log_change(tab, gen, gone, added->name); /* RENAME COLUMN */
	} else {
		for (size_t i = 0; i < before->ncols; i++)
			if (!named(post, m->ncols, pre[i]))
				log_change(tab, gen, pre[i], NULL);
		for (size_t i = 0; i < m->ncols; i++)
			if (!named(pre, before->ncols, post[i]))
				log_change(tab, gen, NULL, post[i]);
	}
	free(post);
	free(pre);
}

/* Later DDL events are compared by column number, which a rename keeps. */
static void compare_by_number(table *tab, uint64_t gen, const ddl_msg *m)
{
	for (size_t i = 0; i < tab->ncols; i++) {
		size_t k = 0;
		while (k < m->ncols && m->cols[k].attnum != tab->cols[i].attnum)
			k++;
		if (k == m->ncols)
			log_change(tab, gen, tab->cols[i].name, NULL);
		else if (strcmp(m->cols[k].name, tab->cols[i].name) != 0)
			log_change(tab, gen, tab->cols[i].name, m->cols[k].name);
	}
	for (size_t k = 0; k < m->ncols; k++) {
		size_t i = 0;
		while (i < tab->ncols && tab->cols[i].attnum != m->cols[k].attnum)
			i++;
		if (i == tab->ncols)
			log_change(tab, gen, NULL, m->cols[k].name);
	}
}

void pgo_schema_tables_ddl(sch_tables *t, const ddl_msg *m, const pgo_rel *before)
{
	uint64_t gen = ++t->gen;
	table *tab = find(t, m->relid);
	if (!m->has_columns) {
		if (tab && strcmp(m->event, "sql_drop") == 0) { /* the table is gone */
			table_free(tab);
			*tab = t->tabs[--t->ntabs];
		}
		return;
	}
	if (!tab) {
		if (t->ntabs == t->cap) {
			t->cap = t->cap ? 2 * t->cap : 8;
			t->tabs = util_xrealloc(t->tabs, t->cap * sizeof(*t->tabs));
		}
		tab = &t->tabs[t->ntabs++];
		*tab = (table){.relid = m->relid};
	}
	if (tab->known)
		compare_by_number(tab, gen, m);
	else if (before)
		compare_by_name(tab, gen, m, before);
	cols_free(tab);
	tab->cols = util_xcalloc(m->ncols + 1, sizeof(*tab->cols));
	for (size_t i = 0; i < m->ncols; i++)
		tab->cols[i] = (column){m->cols[i].attnum, util_xstrdup(m->cols[i].name), m->cols[i].type_oid,
					m->cols[i].not_null};
	tab->ncols = m->ncols;
	tab->known = true;
}

const char *pgo_schema_renamed_from(const sch_tables *t, uint32_t relid, uint64_t since, const char *name)
{
	const table *tab = find(t, relid);
	if (!tab || tab->lost > since)
		return NULL;
	const char *cur = name;
	for (size_t i = tab->nlog; i-- > 0 && tab->log[i].gen > since;) {
		const change *c = &tab->log[i];
		if (!c->to || strcmp(c->to, cur) != 0)
			continue;
		if (!c->from)
			return NULL; /* added since */
		cur = c->from;
	}
	return cur == name ? NULL : cur;
}

/* The latest DDL event's columns, if they are rel's (same names and types, in order). */
static const table *matching(const sch_tables *t, const pgo_rel *rel)
{
	const table *tab = find(t, rel->relid);
	if (!tab || !tab->known || tab->ncols != rel->ncols)
		return NULL;
	for (size_t i = 0; i < rel->ncols; i++)
		if (strcmp(tab->cols[i].name, rel->cols[i].name) != 0 ||
		    tab->cols[i].type_oid != rel->cols[i].type_oid)
			return NULL;
	return tab;
}

static const char *replica_identity(char r)
{
	switch (r) {
	case 'd':
		return "default";
	case 'n':
		return "nothing";
	case 'f':
		return "full";
	case 'i':
		return "index";
	default:
		return "";
	}
}

Cdc__V1__Event *pgo_schema_event(arena *a, const pgo_relcache *rc, const pgo_rel *rel, const sch_tables *t)
{
	Cdc__V1__Event *e = pgo_event_alloc(a, CDC__V1__OP__OP_SCHEMA, rel);
	Cdc__V1__Schema *s = arena_alloc(a, sizeof(*s));
	*s = (Cdc__V1__Schema)CDC__V1__SCHEMA__INIT;
	s->replica_identity = (char *)replica_identity(rel->replident);
	s->n_columns = rel->ncols;
	s->columns = arena_alloc(a, (rel->ncols ? rel->ncols : 1) * sizeof(*s->columns));
	Cdc__V1__Schema__Column *c = arena_alloc(a, (rel->ncols ? rel->ncols : 1) * sizeof(*c));
	const table *ddl = matching(t, rel);
	buf type = {0};
	for (size_t i = 0; i < rel->ncols; i++) {
		const pgo_relcol *rc_col = &rel->cols[i];
		c[i] = (Cdc__V1__Schema__Column)CDC__V1__SCHEMA__COLUMN__INIT;
		c[i].name = arena_strndup(a, rc_col->name, strlen(rc_col->name));
		buf_reset(&type);
		pgo_format_type(rc, rc_col->type_oid, rc_col->typmod, &type);
		c[i].type = arena_strndup(a, type.data, type.len);
		c[i].type_oid = rc_col->type_oid;
		c[i].typmod = rc_col->typmod;
		c[i].key = (rc_col->flags & 1) != 0;
		if (ddl) {
			c[i].nullable_present_case = CDC__V1__SCHEMA__COLUMN__NULLABLE_PRESENT_NULLABLE;
			c[i].nullable = !ddl->cols[i].not_null;
		}
		c[i].renamed_from = "";
		s->columns[i] = &c[i];
	}
	buf_free(&type);
	e->table_schema = s;
	return e;
}

/* FNV-1a, 64 bits */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(1099511628211);
	return h;
}

static uint64_t mix_str(uint64_t h, const char *s)
{
	return mix(h, s ? s : "", (s ? strlen(s) : 0) + 1);
}

uint64_t pgo_schema_id(const Cdc__V1__Event *e)
{
	uint64_t h = UINT64_C(14695981039346656037);
	const Cdc__V1__Schema *s = e->table_schema;
	h = mix_str(h, e->schema);
	h = mix_str(h, e->table);
	h = mix_str(h, s ? s->replica_identity : "");
	for (size_t i = 0; s && i < s->n_columns; i++) {
		const Cdc__V1__Schema__Column *c = s->columns[i];
		unsigned char bits[10]; /* little-endian, so an id is the same on every machine */
		for (int k = 0; k < 4; k++) {
			bits[k] = (unsigned char)(c->type_oid >> (8 * k));
			bits[4 + k] = (unsigned char)((uint32_t)c->typmod >> (8 * k));
		}
		bits[8] = c->key;
		bits[9] = c->nullable_present_case ? 1 + c->nullable : 0;
		h = mix_str(h, c->name);
		h = mix_str(h, c->type);
		h = mix(h, bits, sizeof(bits));
	}
	return h ? h : 1;
}

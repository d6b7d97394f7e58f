/* Subscription matching (see rules.h). */
#include "cdc/match/rules.h"

#include "cdc/match/predicate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOPS 7 /* insert, update, delete, truncate, message, schema, ddl */
#define NO_WHERE UINT32_MAX

typedef struct rel_match {
	uint32_t relid; /* 0 for an empty slot */
	uint64_t version;
	uint32_t *idx[NOPS];
	size_t n[NOPS];
} rel_match;

/* One compiled `where` for every subscription with the same text, evaluated at most once per event. Many
 * subscriptions with the same condition cost one evaluation, not one each. */
typedef struct where {
	pred *pred;
	uint64_t event; /* the event `verdict` is for (match_rules_event's count) */
	bool verdict;
} where;

struct rules {
	match_sub *subs; /* a copy of match_rules_new's */
	size_t nsubs;
	uint32_t *where_of; /* per subscription, an index into wheres, or NO_WHERE */
	where *wheres;
	size_t nwheres;
	uint64_t event; /* counts match_rules_event calls, 0 if none yet */
	rel_match *tab; /* open addressing on relid */
	size_t cap, used;
	uint32_t *msg_idx; /* subscriptions that want logical messages */
	size_t msg_n;
	uint32_t *by_name; /* match_rules_match_table's answer */
};

static int op_index(unsigned op)
{
	return __builtin_ctz(op);
}

static bool table_matches(const match_sub *s, const char *schema, const char *table)
{
	for (size_t i = 0; i < s->tables.n; i++)
		if (match_table(s->tables.v[i], schema, table))
			return true;
	return false;
}

rules *match_rules_new(const match_sub *subs, size_t nsubs, char *err, size_t errlen)
{
	rules *r = util_xcalloc(1, sizeof(*r));
	r->subs = util_xcalloc(nsubs ? nsubs : 1, sizeof(*subs));
	if (nsubs)
		memcpy(r->subs, subs, nsubs * sizeof(*subs));
	r->nsubs = nsubs;
	r->where_of = util_xcalloc(nsubs ? nsubs : 1, sizeof(uint32_t));
	r->wheres = util_xcalloc(nsubs ? nsubs : 1, sizeof(where));
	for (size_t i = 0; i < nsubs; i++) {
		char why[256];
		r->where_of[i] = NO_WHERE;
		if (!subs[i].where)
			continue;
		for (size_t k = 0; k < i && r->where_of[i] == NO_WHERE; k++)
			if (subs[k].where && strcmp(subs[k].where, subs[i].where) == 0)
				r->where_of[i] = r->where_of[k];
		if (r->where_of[i] != NO_WHERE)
			continue;
		if (!(r->wheres[r->nwheres].pred = match_predicate_parse(subs[i].where, why, sizeof(why)))) {
			util_errf(err, errlen, "subscription %s: where: %s", subs[i].name, why);
			match_rules_free(r);
			return NULL;
		}
		r->where_of[i] = (uint32_t)r->nwheres++;
	}
	r->cap = 64;
	r->tab = util_xcalloc(r->cap, sizeof(rel_match));
	r->msg_idx = util_xcalloc(nsubs ? nsubs : 1, sizeof(uint32_t));
	r->by_name = util_xcalloc(nsubs ? nsubs : 1, sizeof(uint32_t));
	for (size_t i = 0; i < nsubs; i++)
		if (subs[i].ops & MATCH_OP_MESSAGE)
			r->msg_idx[r->msg_n++] = (uint32_t)i;
	return r;
}

static void entry_clear(rel_match *e)
{
	for (int i = 0; i < NOPS; i++)
		free(e->idx[i]);
}

void match_rules_free(rules *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->cap; i++)
		entry_clear(&r->tab[i]);
	for (size_t i = 0; i < r->nwheres; i++)
		match_predicate_free(r->wheres[i].pred);
	free(r->wheres);
	free(r->where_of);
	free(r->tab);
	free(r->msg_idx);
	free(r->by_name);
	free(r->subs);
	free(r);
}

static rel_match *slot_for(rel_match *tab, size_t cap, uint32_t relid)
{
	size_t i = (relid * 2654435761u) & (cap - 1);
	while (tab[i].relid && tab[i].relid != relid)
		i = (i + 1) & (cap - 1);
	return &tab[i];
}

static void grow(rules *r)
{
	size_t cap = r->cap * 2;
	rel_match *tab = util_xcalloc(cap, sizeof(rel_match));
	for (size_t i = 0; i < r->cap; i++)
		if (r->tab[i].relid)
			*slot_for(tab, cap, r->tab[i].relid) = r->tab[i];
	free(r->tab);
	r->tab = tab;
	r->cap = cap;
}

static void compute(rules *r, rel_match *e, const pgo_rel *rel)
{
	entry_clear(e);
	e->relid = rel->relid;
	e->version = rel->version;
	for (int op = 0; op < NOPS; op++) {
		e->idx[op] = util_xcalloc(r->nsubs, sizeof(uint32_t));
		e->n[op] = 0;
	}
	for (size_t i = 0; i < r->nsubs; i++) {
		const match_sub *s = &r->subs[i];
		if (!table_matches(s, rel->nspname, rel->relname))
			continue;
		for (int op = 0; op < NOPS; op++)
			if (s->ops & (1u << op))
				e->idx[op][e->n[op]++] = (uint32_t)i;
	}
}

size_t match_rules_match(rules *r, const pgo_rel *rel, unsigned op, const uint32_t **out)
{
	if (!rel) {
		*out = r->msg_idx;
		return r->msg_n;
	}
	rel_match *e = slot_for(r->tab, r->cap, rel->relid);
	if (!e->relid) {
		if ((r->used + 1) * 2 > r->cap) {
			grow(r);
			e = slot_for(r->tab, r->cap, rel->relid);
		}
		r->used++;
		compute(r, e, rel);
	} else if (e->version != rel->version) {
		compute(r, e, rel);
	}
	int i = op_index(op);
	*out = e->idx[i];
	return e->n[i];
}

size_t match_rules_match_table(rules *r, const char *schema, const char *table, unsigned op,
			       const uint32_t **out)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nsubs; i++)
		if ((r->subs[i].ops & op) && table_matches(&r->subs[i], schema, table))
			r->by_name[n++] = (uint32_t)i;
	*out = r->by_name;
	return n;
}

bool match_rules_wants(const rules *r, uint32_t sub, unsigned op)
{
	return (r->subs[sub].ops & op) != 0;
}

static bool listed(const match_names *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->v[i], name) == 0)
			return true;
	return false;
}

static const Cdc__V1__Value *column_value(const Cdc__V1__Row *row, const char *name)
{
	for (size_t i = 0; row && i < row->n_columns; i++)
		if (strcmp(row->columns[i]->name, name) == 0)
			return row->columns[i]->value;
	return NULL;
}

static bool same_bytes(const ProtobufCBinaryData *a, const ProtobufCBinaryData *b)
{
	return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Two values as sent are the same when they have the same kind and the same content. */
static bool same_value(const Cdc__V1__Value *a, const Cdc__V1__Value *b)
{
	if (a->kind_case != b->kind_case)
		return false;
	switch (a->kind_case) {
	case CDC__V1__VALUE__KIND_INT_VALUE:
		return a->int_value == b->int_value;
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		return memcmp(&a->float_value, &b->float_value, sizeof(double)) == 0;
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		return a->bool_value == b->bool_value;
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		return a->date_value == b->date_value;
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		return a->time_value == b->time_value;
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		return a->timestamp_value->micros == b->timestamp_value->micros &&
		       a->timestamp_value->with_zone == b->timestamp_value->with_zone;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		return strcmp(a->numeric_value, b->numeric_value) == 0;
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		return strcmp(a->text_value, b->text_value) == 0;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		return strcmp(a->json_value, b->json_value) == 0;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		return strcmp(a->other_value->text, b->other_value->text) == 0;
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		return same_bytes(&a->bytes_value, &b->bytes_value);
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		return same_bytes(&a->uuid_value, &b->uuid_value);
	case CDC__V1__VALUE__KIND_BINARY_VALUE:
		return same_bytes(&a->binary_value, &b->binary_value);
	default: /* null is the same, and unchanged TOAST is the same value by definition */
		return true;
	}
}

/* With `changed`, an update matches only if one of those columns differs. */
static bool changed(const match_sub *s, const Cdc__V1__Event *e)
{
	if (!s->changed.n || e->op != CDC__V1__OP__OP_UPDATE)
		return true;
	for (size_t i = 0; i < s->changed.n; i++) {
		const Cdc__V1__Value *o = column_value(e->old_row, s->changed.v[i]);
		const Cdc__V1__Value *n = column_value(e->new_row, s->changed.v[i]);
		if (o && n && !same_value(o, n))
			return true;
	}
	return false;
}

void match_rules_event(rules *r)
{
	r->event++;
}

bool match_rules_accept(rules *r, uint32_t sub, const Cdc__V1__Event *e, arena *a)
{
	if (!changed(&r->subs[sub], e))
		return false;
	if (r->where_of[sub] == NO_WHERE)
		return true;
	where *w = &r->wheres[r->where_of[sub]];
	if (w->event != r->event || !r->event) {
		w->verdict = match_predicate_eval(w->pred, e, a);
		w->event = r->event;
	}
	return w->verdict;
}

/* The columns of row that the projection keeps, listed ones and key ones. */
static Cdc__V1__Row *project_row(const match_names *cols, const Cdc__V1__Row *key, const Cdc__V1__Row *row,
				 arena *a)
{
	if (!row)
		return NULL;
	Cdc__V1__Row *out = arena_alloc(a, sizeof(*out));
	cdc__v1__row__init(out);
	out->columns = arena_alloc(a, (row->n_columns ? row->n_columns : 1) * sizeof(*out->columns));
	for (size_t i = 0; i < row->n_columns; i++) {
		const char *name = row->columns[i]->name;
		if (listed(cols, name) || column_value(key, name))
			out->columns[out->n_columns++] = row->columns[i];
	}
	return out;
}

/* A schema event's columns that the projection keeps, listed ones and key ones. */
static Cdc__V1__Schema *project_schema(const match_names *cols, const Cdc__V1__Schema *s, arena *a)
{
	Cdc__V1__Schema *out = arena_alloc(a, sizeof(*out));
	*out = *s;
	out->n_columns = 0;
	out->columns = arena_alloc(a, (s->n_columns ? s->n_columns : 1) * sizeof(*out->columns));
	for (size_t i = 0; i < s->n_columns; i++)
		if (listed(cols, s->columns[i]->name) || s->columns[i]->key)
			out->columns[out->n_columns++] = s->columns[i];
	return out;
}

Cdc__V1__Event *match_rules_project(const rules *r, uint32_t sub, Cdc__V1__Event *e, arena *a)
{
	const match_sub *s = &r->subs[sub];
	if (s->columns.n && e->table_schema) {
		Cdc__V1__Event *p = arena_alloc(a, sizeof(*p));
		*p = *e;
		p->table_schema = project_schema(&s->columns, e->table_schema, a);
		return p;
	}
	if (!s->columns.n || (!e->new_row && !e->old_row))
		return e;
	Cdc__V1__Event *p = arena_alloc(a, sizeof(*p));
	*p = *e;
	p->new_row = project_row(&s->columns, e->key, e->new_row, a);
	p->old_row = project_row(&s->columns, e->key, e->old_row, a);
	return p;
}

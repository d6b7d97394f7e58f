/* rules.c: subscription matching; see rules.h. */
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOPS 5 /* insert, update, delete, truncate, message */

typedef struct rel_match {
	uint32_t relid; /* 0: empty slot */
	uint64_t version;
	uint32_t *idx[NOPS];
	size_t n[NOPS];
} rel_match;

struct rules {
	const cfg_subscription *subs;
	size_t nsubs;
	rel_match *tab; /* open addressing on relid */
	size_t cap, used;
	uint32_t *msg_idx; /* subscriptions that want logical messages */
	size_t msg_n;
};

static int op_index(unsigned op)
{
	return __builtin_ctz(op);
}

static bool table_matches(const cfg_subscription *s, const char *schema, const char *table)
{
	for (size_t i = 0; i < s->tables.n; i++)
		if (cfg_table_match(s->tables.v[i], schema, table))
			return true;
	return false;
}

static const char *unsupported_key(const cfg_subscription *s)
{
	if (s->changed.n)
		return "changed";
	if (s->where)
		return "where";
	if (s->columns.n)
		return "columns";
	return NULL;
}

rules *rules_new(const cfg_subscription *subs, size_t nsubs, char *err, size_t errlen)
{
	for (size_t i = 0; i < nsubs; i++) {
		const char *key = unsupported_key(&subs[i]);
		if (key) {
			errf(err, errlen, "subscription %s: '%s' is not supported by this build of cdc yet", subs[i].name,
			     key);
			return NULL;
		}
	}
	rules *r = xcalloc(1, sizeof(*r));
	r->subs = subs;
	r->nsubs = nsubs;
	r->cap = 64;
	r->tab = xcalloc(r->cap, sizeof(rel_match));
	r->msg_idx = xcalloc(nsubs, sizeof(uint32_t));
	for (size_t i = 0; i < nsubs; i++)
		if (subs[i].ops & CFG_OP_MESSAGE)
			r->msg_idx[r->msg_n++] = (uint32_t)i;
	return r;
}

static void entry_clear(rel_match *e)
{
	for (int i = 0; i < NOPS; i++)
		free(e->idx[i]);
}

void rules_free(rules *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->cap; i++)
		entry_clear(&r->tab[i]);
	free(r->tab);
	free(r->msg_idx);
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
	rel_match *tab = xcalloc(cap, sizeof(rel_match));
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
		e->idx[op] = xcalloc(r->nsubs, sizeof(uint32_t));
		e->n[op] = 0;
	}
	for (size_t i = 0; i < r->nsubs; i++) {
		const cfg_subscription *s = &r->subs[i];
		if (!table_matches(s, rel->nspname, rel->relname))
			continue;
		for (int op = 0; op < NOPS; op++)
			if (s->ops & (1u << op))
				e->idx[op][e->n[op]++] = (uint32_t)i;
	}
}

size_t rules_match(rules *r, const pgo_rel *rel, unsigned op, const uint32_t **out)
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

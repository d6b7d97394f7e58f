/* See schema_track.h. What is asked for every row is in one open-addressing table on (subscription,
 * relation). The held transactions' schema events are in a short list. The last one found is looked at first,
 * since a large transaction's rows are mostly of one table. */
#include "cdc/pipeline/schema_track.h"

#include <stdlib.h>
#include <string.h>

#include "decoder/base/util.h"

typedef struct entry {
	uint32_t sub, relid;
	bool used;
	uint64_t version, gen, id; /* the rows' id, for that relation version and DDL generation */
	uint64_t delivered, since; /* the last schema event delivered, at DDL generation since */
} entry;

typedef struct held {
	uint32_t xid, sub, relid, tx_index;
	uint64_t id;
} held;

struct strack {
	entry *tab;
	size_t cap, n;
	held *held;
	size_t nheld, capheld, last;
};

strack *pipeline_track_new(void)
{
	strack *t = util_xcalloc(1, sizeof(*t));
	t->cap = 64;
	t->tab = util_xcalloc(t->cap, sizeof(*t->tab));
	return t;
}

void pipeline_track_free(strack *t)
{
	if (!t)
		return;
	free(t->tab);
	free(t->held);
	free(t);
}

static size_t slot_of(const entry *tab, size_t cap, uint32_t sub, uint32_t relid)
{
	size_t i = ((relid * 2654435761u) ^ (sub * 40503u)) & (cap - 1);
	while (tab[i].used && (tab[i].sub != sub || tab[i].relid != relid))
		i = (i + 1) & (cap - 1);
	return i;
}

static const entry *find(const strack *t, uint32_t sub, uint32_t relid)
{
	const entry *e = &t->tab[slot_of(t->tab, t->cap, sub, relid)];
	return e->used ? e : NULL;
}

static void put(entry *tab, size_t cap, const entry *e)
{
	tab[slot_of(tab, cap, e->sub, e->relid)] = *e;
}

static entry *get(strack *t, uint32_t sub, uint32_t relid)
{
	size_t i = slot_of(t->tab, t->cap, sub, relid);
	if (t->tab[i].used)
		return &t->tab[i];
	if ((t->n + 1) * 2 > t->cap) {
		entry *old = t->tab;
		size_t oldcap = t->cap;
		t->cap *= 2;
		t->tab = util_xcalloc(t->cap, sizeof(*t->tab));
		for (size_t k = 0; k < oldcap; k++)
			if (old[k].used)
				put(t->tab, t->cap, &old[k]);
		free(old);
		i = slot_of(t->tab, t->cap, sub, relid);
	}
	t->n++;
	t->tab[i] = (entry){.sub = sub, .relid = relid, .used = true};
	return &t->tab[i];
}

void pipeline_track_clear(strack *t)
{
	memset(t->tab, 0, t->cap * sizeof(*t->tab));
	t->n = 0;
	t->nheld = t->last = 0;
}

void pipeline_track_renumber(strack *t, const uint32_t *map, size_t nold)
{
	entry *old = t->tab;
	t->tab = util_xcalloc(t->cap, sizeof(*t->tab));
	t->n = 0;
	for (size_t k = 0; k < t->cap; k++) {
		if (!old[k].used || old[k].sub >= nold || map[old[k].sub] == UINT32_MAX)
			continue;
		entry e = old[k];
		e.sub = map[e.sub];
		put(t->tab, t->cap, &e);
		t->n++;
	}
	free(old);
	t->nheld = t->last = 0;
}

uint64_t pipeline_track_id(const strack *t, uint32_t sub, uint32_t relid, uint64_t version, uint64_t gen)
{
	const entry *e = find(t, sub, relid);
	return e && e->version == version && e->gen == gen ? e->id : 0;
}

void pipeline_track_set_id(strack *t, uint32_t sub, uint32_t relid, uint64_t version, uint64_t gen,
			   uint64_t id)
{
	entry *e = get(t, sub, relid);
	e->version = version;
	e->gen = gen;
	e->id = id;
}

uint64_t pipeline_track_delivered(const strack *t, uint32_t sub, uint32_t relid, uint64_t *gen)
{
	const entry *e = find(t, sub, relid);
	*gen = e ? e->since : 0;
	return e ? e->delivered : 0;
}

void pipeline_track_set_delivered(strack *t, uint32_t sub, uint32_t relid, uint64_t id, uint64_t gen)
{
	entry *e = get(t, sub, relid);
	e->delivered = id;
	e->since = gen;
}

bool pipeline_track_held(strack *t, uint32_t xid, uint32_t sub, uint32_t relid, uint64_t id)
{
	for (size_t n = 0; n < t->nheld; n++) {
		size_t i = (t->last + n) % t->nheld;
		const held *h = &t->held[i];
		if (h->xid == xid && h->sub == sub && h->relid == relid && h->id == id) {
			t->last = i;
			return true;
		}
	}
	return false;
}

void pipeline_track_hold(strack *t, uint32_t xid, uint32_t sub, uint32_t relid, uint64_t id,
			 uint32_t tx_index)
{
	if (t->nheld == t->capheld) {
		t->capheld = t->capheld ? 2 * t->capheld : 16;
		t->held = util_xrealloc(t->held, t->capheld * sizeof(*t->held));
	}
	t->last = t->nheld;
	t->held[t->nheld++] = (held){xid, sub, relid, tx_index, id};
}

/* Drops xid's entries (xid 0 for every transaction's) from tx_index on, or all of them. */
static void held_filter(strack *t, uint32_t xid, uint32_t tx_index, bool all)
{
	size_t k = 0;
	for (size_t i = 0; i < t->nheld; i++) {
		const held *h = &t->held[i];
		bool drop = (!xid || h->xid == xid) && (all || h->tx_index >= tx_index);
		if (!drop)
			t->held[k++] = *h;
	}
	t->nheld = k;
	t->last = 0;
}

void pipeline_track_held_rollback(strack *t, uint32_t xid, uint32_t tx_index)
{
	held_filter(t, xid, tx_index, false);
}

void pipeline_track_held_end(strack *t, uint32_t xid)
{
	held_filter(t, xid, 0, true);
}

/* setup.c: the stages' settings from the configuration; see setup.h. */
#include "cdc/daemon/setup.h"

#include <stdlib.h>

static match_names names(const cfg_strlist *l)
{
	return (match_names){l->v, l->n};
}

rules *setup_rules(const cfg *c, char *err, size_t errlen)
{
	match_sub *subs = xcalloc(c->nsubs ? c->nsubs : 1, sizeof(*subs));
	for (size_t i = 0; i < c->nsubs; i++) {
		const cfg_subscription *s = &c->subs[i];
		subs[i] = (match_sub){.name = s->name,
				      .tables = names(&s->tables),
				      .ops = s->ops,
				      .changed = names(&s->changed),
				      .where = s->where,
				      .columns = names(&s->columns)};
	}
	rules *r = rules_new(subs, c->nsubs, err, errlen);
	free(subs);
	return r;
}

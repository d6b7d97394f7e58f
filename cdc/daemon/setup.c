/* The stages' settings from the configuration (see setup.h). */
#include "cdc/daemon/setup.h"

#include <stdlib.h>

static match_names names(const cfg_strlist *l)
{
	return (match_names){l->v, l->n};
}

rules *daemon_setup_rules(const cfg *c, char *err, size_t errlen)
{
	match_sub *subs = util_xcalloc(c->nsubs ? c->nsubs : 1, sizeof(*subs));
	for (size_t i = 0; i < c->nsubs; i++) {
		const cfg_subscription *s = &c->subs[i];
		subs[i] = (match_sub){.name = s->name,
				      .tables = names(&s->tables),
				      .ops = s->ops,
				      .changed = names(&s->changed),
				      .where = s->where,
				      .columns = names(&s->columns)};
	}
	rules *r = match_rules_new(subs, c->nsubs, err, errlen);
	free(subs);
	return r;
}

source_settings daemon_setup_source(const cfg *c)
{
	return (source_settings){.dsn = c->source.dsn,
				 .slot = c->source.slot,
				 .publication = c->source.publication,
				 .primary_dsn = c->source.primary_dsn,
				 .password = c->source.password,
				 .state_dir = c->state_dir,
				 .create = c->source.create,
				 .failover = c->source.failover,
				 .ddl = c->source.ddl,
				 .generated_columns = c->source.publish_generated_columns,
				 .heartbeat = c->source.heartbeat_ms != 0,
				 .publish = (const char *const *)c->source.publish.v,
				 .npublish = c->source.publish.n,
				 .signal_table = c->source.signal_table};
}

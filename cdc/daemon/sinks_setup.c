/* See sinks_setup.h. It walks the module list, so a new sink needs no line here. */
#include "cdc/daemon/sinks_setup.h"

#include <stdlib.h>

bool daemon_sink_set_bind(sink_set *s, const cfg *c, char *err, size_t errlen)
{
	s->env.slot = c->source.slot;
	s->env.state_dir = c->state_dir;
	free(s->of_sub);
	s->of_sub = util_xcalloc(c->nsubs ? c->nsubs : 1, sizeof(sink *));
	for (size_t i = 0; i < c->nsubs; i++) {
		size_t m = (size_t)c->subs[i].sink;
		if (!s->k[m]) {
			sink_sub *subs = cfg_sink_subs(c, m);
			s->k[m] = sink_modules[m]->create(&s->env, c->sink_sections[m], subs, c->nsubs, err,
							  errlen);
			free(subs);
			if (!s->k[m])
				return false;
		}
		s->of_sub[i] = s->k[m];
	}
	for (size_t m = 0; sink_modules[m]; m++) {
		if (!s->k[m] || !sink_modules[m]->bind)
			continue;
		sink_sub *subs = cfg_sink_subs(c, m);
		bool ok =
		    sink_modules[m]->bind(s->k[m], &s->env, c->sink_sections[m], subs, c->nsubs, err, errlen);
		free(subs);
		if (!ok)
			return false;
	}
	for (size_t m = 0; sink_modules[m]; m++)
		if (s->k[m] && s->k[m]->ops->fd && !s->ev[m]) {
			s->ev[m] = event_new(s->env.base, s->k[m]->ops->fd(s->k[m]), EV_READ | EV_PERSIST,
					     s->on_event, s->env.ctx);
			event_add(s->ev[m], NULL);
		}
	return true;
}

void daemon_sink_set_free(sink_set *s)
{
	for (size_t m = 0; m < SINK_MODULES_MAX; m++) {
		if (s->ev[m])
			event_free(s->ev[m]);
		if (s->k[m])
			s->k[m]->ops->free(s->k[m]);
	}
	free(s->of_sub);
	*s = (sink_set){0};
}

void daemon_sink_set_poll(sink_set *s)
{
	for (size_t m = 0; m < SINK_MODULES_MAX; m++)
		if (s->k[m] && s->k[m]->ops->poll)
			s->k[m]->ops->poll(s->k[m]);
}

/* Work in flight (an exactly-once commit waiting for the brokers) may need a flush every few
 * milliseconds, which the event's timeout gives. */
void daemon_sink_set_watch(sink_set *s)
{
	for (size_t m = 0; sink_modules[m]; m++) {
		if (!s->ev[m] || !sink_modules[m]->wake_ms)
			continue;
		int ms = sink_modules[m]->wake_ms(s->k[m]);
		if (ms == s->wake_ms[m])
			continue;
		struct timeval tv = {ms / 1000, (ms % 1000) * 1000}; /* a second or more goes in tv_sec */
		event_del(s->ev[m]); /* event_add keeps a timeout it is not given a new one for */
		event_add(s->ev[m], ms ? &tv : NULL);
		s->wake_ms[m] = ms;
	}
}

bool daemon_sink_set_ticks(const sink_set *s)
{
	for (size_t m = 0; sink_modules[m]; m++)
		if (s->k[m] && sink_modules[m]->ticks && sink_modules[m]->ticks(s->k[m]))
			return true;
	return false;
}

void daemon_sink_set_database(sink_set *s, const char *name)
{
	for (size_t m = 0; sink_modules[m]; m++)
		if (s->k[m] && sink_modules[m]->database)
			sink_modules[m]->database(s->k[m], name);
}

bool daemon_sink_set_forget(sink_set *s, const char *name, char *err, size_t errlen)
{
	for (size_t m = 0; sink_modules[m]; m++)
		if (s->k[m] && sink_modules[m]->forget &&
		    !sink_modules[m]->forget(s->k[m], name, err, errlen))
			return false;
	return true;
}

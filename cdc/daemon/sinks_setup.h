/* The daemon's sink instances, one per sink module, made when a subscription first needs it and
 * bound again after every reload. Each module takes its own settings from the configuration's module
 * structs. So no sink reads the daemon's config, and nothing here names a sink kind. */
#ifndef CDC_SINKS_SETUP_H
#define CDC_SINKS_SETUP_H

#include <event2/event.h>

#include "cdc/config/config.h"
#include "sinks/modules.h"
#include "sinks/sink.h"

typedef struct sink_set {
	sink *k[SINK_MODULES_MAX]; /* by module, NULL until a subscription needs it */
	sink **of_sub;		   /* per subscription, parallel to the bound cfg's subs */
	/* what every sink is made with, the loop and whom to call. Slot and state_dir are set at each
	 * bind. */
	sink_env env;
	/* A sink with a file descriptor (delivery reports) wakes the loop. It calls on_event(fd, what,
	 * ctx) on ev[i], made with the sink. wake_ms[i] is its timeout now. */
	event_callback_fn on_event;
	struct event *ev[SINK_MODULES_MAX];
	int wake_ms[SINK_MODULES_MAX];
} sink_set;

/* Points each subscription of conf at its sink, creating sinks on first use. It hands every sink that
 * exists the settings conf gives it, even with none of its subscriptions left. A sink must not keep an
 * old configuration. */
bool daemon_sink_set_bind(sink_set *sinks, const cfg *conf, char *err, size_t errlen) CDC_MUST_CHECK;
void daemon_sink_set_free(sink_set *sinks);
/* Hands each sink that has a file descriptor its work (delivery reports). */
void daemon_sink_set_poll(sink_set *sinks);
/* Gives each sink's event the timeout its module asks for (wake_ms). */
void daemon_sink_set_watch(sink_set *sinks);
/* Whether a sink wants a flush every second while streaming. */
bool daemon_sink_set_ticks(const sink_set *sinks);
/* Tells every sink the database's name. */
void daemon_sink_set_database(sink_set *sinks, const char *name);
/* A subscription was deleted for good. Every sink lets go of what it keeps of it. False with err. */
bool daemon_sink_set_forget(sink_set *sinks, const char *name, char *err, size_t errlen) CDC_MUST_CHECK;

#endif

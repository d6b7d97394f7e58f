/* What the stages of the data path take from the configuration. It is derived here so that no stage
 * reads the daemon's config. The sinks' settings are in sinks_setup.h. */
#ifndef CDC_SETUP_H
#define CDC_SETUP_H

#include "cdc/config/config.h"
#include "cdc/match/rules.h"
#include "cdc/source/source.h"

/* The rules of conf's subscriptions, at their indexes in conf. They borrow conf's strings, so conf must
 * outlive them. NULL with a message naming the subscription when a where predicate does not parse. */
rules *daemon_setup_rules(const cfg *conf, char *err, size_t errlen);
/* What the source takes of conf. It borrows conf's strings, and source_new copies them. */
source_settings daemon_setup_source(const cfg *conf);

#endif

/* setup.h: what the stages of the data path take from the configuration, derived here so that no
 * stage reads the daemon's config (the sinks' settings: sinks_setup.h). */
#ifndef CDC_SETUP_H
#define CDC_SETUP_H

#include "cdc/config/config.h"
#include "cdc/match/rules.h"
#include "cdc/source/source.h"

/* The rules of c's subscriptions, at their indexes in c (c must outlive them: they borrow its
 * strings). NULL with a message naming the subscription when a where predicate does not parse. */
rules *setup_rules(const cfg *c, char *err, size_t errlen);
/* What the source takes of c (borrowing its strings: source_new copies them). */
source_settings setup_source(const cfg *c);

#endif

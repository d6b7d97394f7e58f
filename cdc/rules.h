/* rules.h: which subscriptions want a change. Matches a relation ("schema.table", globs) and an
 * operation against each subscription; results are cached per relation and schema version, so
 * the per-row cost is one lookup. */
#ifndef CDC_RULES_H
#define CDC_RULES_H

#include "config.h"
#include "pgoutput.h"

typedef struct rules rules;

/* The subscriptions stay owned by the caller and must outlive the rules. Fails (with a message
 * naming the subscription and key) for rule features this build does not have yet. */
rules *rules_new(const cfg_subscription *subs, size_t nsubs, char *err, size_t errlen);
void rules_free(rules *r);

/* Indexes (into subs) of the subscriptions that want operation op (one enum cfg_op bit) on rel,
 * or, with rel NULL, a logical message. Returns the count; *out stays valid until the next call. */
size_t rules_match(rules *r, const pgo_rel *rel, unsigned op, const uint32_t **out);

#endif

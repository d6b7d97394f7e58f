/* Which subscriptions want a change, in two stages. match_rules_match() matches a relation ("schema.table",
 * globs) and an operation, cached per relation and schema version, so a row costs one lookup.
 * match_rules_accept() applies the rules on the event's values (`changed`), and match_rules_project() its
 * `columns`. */
#ifndef CDC_RULES_H
#define CDC_RULES_H

#include "cdc/match/match.h"
#include "cdc/v1/event.pb-c.h"
#include "decoder/base/arena.h"
#include "decoder/pgoutput.h"

typedef struct rules rules;

/* A list of names, borrowed. */
typedef struct match_names {
	char *const *v;
	size_t n;
} match_names;

/* What the rules take of one subscription (the daemon fills it from the configuration). */
typedef struct match_sub {
	const char *name;    /* for messages */
	match_names tables;  /* "schema.table" patterns (match_table) */
	unsigned ops;	     /* enum match_op bits */
	match_names changed; /* if not empty, an update matches only if one of these columns changed */
	const char *where;   /* predicate text (predicate.h), NULL if none */
	match_names columns; /* the projection (every column when empty) */
} match_sub;

/* The array is copied. The strings stay owned by the caller and must outlive the rules. Fails with a
 * message naming the subscription when a where predicate does not parse. */
rules *match_rules_new(const match_sub *subs, size_t nsubs, char *err, size_t errlen);
void match_rules_free(rules *rs);

/* Indexes (into subs) of the subscriptions that want operation op (one enum match_op bit) on rel. With
 * rel NULL, those that want a logical message. Returns the count. *out stays valid until the next call. */
size_t match_rules_match(rules *rs, const pgo_rel *rel, unsigned op, const uint32_t **out);

/* Indexes of the subscriptions that want operation op on the table schema.table, matched by name. It
 * is not cached, since it serves DDL events, which are rare. *out stays valid until the next call. */
size_t match_rules_match_table(rules *rs, const char *schema, const char *table, unsigned op,
			       const uint32_t **out);
/* Whether subscription sub's operations include op. */
bool match_rules_wants(const rules *rs, uint32_t sub, unsigned op);

/* Starts a new event for match_rules_accept. Call it once per event, before asking about it. */
void match_rules_event(rules *rs);

/* Whether subscription sub (an index match_rules_match returned) wants event, the one since the last
 * match_rules_event. With `changed`, an update matches only if one of those columns differs between the old
 * and the new row. An update without an old row, or whose value is unchanged TOAST, changed nothing it
 * can see. With `where`, it matches only if the predicate is true (scratch memory from ar).
 * Subscriptions with the same `where` text share one evaluation per event. */
bool match_rules_accept(rules *rs, uint32_t sub, const Cdc__V1__Event *event, arena *ar);

/* event as subscription sub delivers it. With `columns`, it is a copy in arena ar whose rows (or a
 * schema event's columns) hold only those columns and the key columns. Otherwise it is event itself. */
Cdc__V1__Event *match_rules_project(const rules *rs, uint32_t sub, Cdc__V1__Event *event, arena *ar);

#endif

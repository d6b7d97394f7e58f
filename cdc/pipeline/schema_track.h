/* Which schema each subscription's consumers have of each table, and the schema id of each relation
 * version's rows, computed once per version. It also keeps the schema events that held (streamed or
 * prepared) transactions rendered already. The pipeline asks it before every row it delivers. */
#ifndef CDC_SCHEMA_TRACK_H
#define CDC_SCHEMA_TRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A consumer's schema of a table is the id of the last schema event delivered to it. A held
 * transaction is one held until its commit. */
typedef struct strack strack;

strack *pipeline_track_new(void);
void pipeline_track_free(strack *tracker);
/* A new stream. Every table is announced again, since the server resends what was not confirmed. */
void pipeline_track_clear(strack *tracker);
/* The subscriptions were bound again. map[i] is old subscription i's new index (UINT32_MAX if
 * gone). Nothing may be held. */
void pipeline_track_renumber(strack *tracker, const uint32_t *map, size_t nold);

/* The id of subscription sub's rows of relation relid at its version and the DDL generation gen, if
 * pipeline_track_set_id() recorded it for those. Else 0. */
uint64_t pipeline_track_id(const strack *tracker, uint32_t sub, uint32_t relid, uint64_t version,
			   uint64_t gen);
void pipeline_track_set_id(strack *tracker, uint32_t sub, uint32_t relid, uint64_t version, uint64_t gen,
			   uint64_t id);

/* The id of the last schema event of relid delivered to sub (0 if none since the stream started),
 * and the DDL generation it was delivered at. */
uint64_t pipeline_track_delivered(const strack *tracker, uint32_t sub, uint32_t relid, uint64_t *gen);
void pipeline_track_set_delivered(strack *tracker, uint32_t sub, uint32_t relid, uint64_t id, uint64_t gen);

/* Held transaction xid rendered schema event id of relid for sub, at tx_index. */
bool pipeline_track_held(strack *tracker, uint32_t xid, uint32_t sub, uint32_t relid, uint64_t id);
void pipeline_track_hold(strack *tracker, uint32_t xid, uint32_t sub, uint32_t relid, uint64_t id,
			 uint32_t tx_index);
/* A subtransaction of xid rolled back. What it rendered from tx_index on is gone. */
void pipeline_track_held_rollback(strack *tracker, uint32_t xid, uint32_t tx_index);
/* xid committed or aborted (0 for every held transaction). */
void pipeline_track_held_end(strack *tracker, uint32_t xid);

#endif

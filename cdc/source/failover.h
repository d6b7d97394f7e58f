/* What cdc judges about a promotion, without a server. source.c asks the server and hands the answers
 * here. The pure rules are unit-tested in tests/unit/test_failover.c. */
#ifndef CDC_FAILOVER_H
#define CDC_FAILOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether the primary's synchronized_standby_slots makes a promotion safe for a failover slot (README
 * "Failover and standbys"), and where a timeline history says an older timeline ended. */

/* Why a promotion now is safe or not. The names (source_failover_reason_name) are /status's
 * source.failover.reason and the reason label of cdc_source_failover_ready. */
typedef enum failover_reason {
	FAILOVER_UNKNOWN, /* not checked yet */
	FAILOVER_READY,	  /* every slot synchronized_standby_slots names is an active physical one */
	FAILOVER_SLOT_NOT_FAILOVER, /* the logical slot itself is not a failover slot */
	FAILOVER_UNSET,		    /* synchronized_standby_slots is empty */
	FAILOVER_STANDBY_SLOT_MISSING,
	FAILOVER_STANDBY_SLOT_LOGICAL, /* it names a logical slot (often cdc's own), the classic mistake */
	FAILOVER_STANDBY_SLOT_INACTIVE,
	FAILOVER_STANDBY_SLOT_LOST, /* the standby's slot was invalidated (wal_status lost) */
} failover_reason;

const char *source_failover_reason_name(failover_reason reason);

/* One row of pg_replication_slots, borrowed. */
typedef struct failover_slot {
	const char *name, *type, *wal_status;
	bool active;
} failover_slot;

/* The verdict on the primary's setting for cdc's slot `slot`. slot_failover is the slot's own
 * pg_replication_slots.failover. setting is the value of synchronized_standby_slots, a list of slot
 * names that PostgreSQL splits at commas and spaces, with double quotes. slots is what
 * pg_replication_slots holds, at least every slot the setting names that exists. why gets a sentence
 * for a human saying what is wrong, what it means and what to set. It is empty when ready. */
failover_reason source_failover_judge(const char *slot, bool slot_failover, const char *setting,
				      const failover_slot *slots, size_t nslots, char *why, size_t whylen);

/* The LSN where timeline tli ended, from the text of a timeline history file (TIMELINE_HISTORY). Its
 * lines read "parent_tli<TAB>switchpoint<TAB>reason", and comments start with '#'. False when the
 * history is malformed, or does not name tli because tli is no ancestor of the server's timeline. */
bool source_failover_switch_point(const char *history, size_t len, uint32_t tli, uint64_t *end);

#endif

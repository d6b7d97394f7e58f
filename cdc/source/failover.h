/* failover.h: what cdc judges about a promotion, without a server: whether the primary's
 * synchronized_standby_slots makes a promotion safe for a failover slot (README "Failover and
 * standbys"), and where a timeline history says an older timeline ended. source.c asks the server
 * and hands the answers here; the pure rules are unit-tested in tests/unit/test_failover.c. */
#ifndef CDC_FAILOVER_H
#define CDC_FAILOVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Why a promotion now is safe or not. The names (failover_reason_name) are /status's
 * source.failover.reason and the reason label of cdc_source_failover_ready. */
typedef enum failover_reason {
	FAILOVER_UNKNOWN, /* not checked yet */
	FAILOVER_READY,	  /* every slot synchronized_standby_slots names is an active physical one */
	FAILOVER_SLOT_NOT_FAILOVER, /* the logical slot itself is not a failover slot */
	FAILOVER_UNSET,		    /* synchronized_standby_slots is empty */
	FAILOVER_STANDBY_SLOT_MISSING,
	FAILOVER_STANDBY_SLOT_LOGICAL, /* it names a logical slot (often cdc's own): the classic mistake */
	FAILOVER_STANDBY_SLOT_INACTIVE,
	FAILOVER_STANDBY_SLOT_LOST, /* the standby's slot was invalidated (wal_status lost) */
} failover_reason;

const char *failover_reason_name(failover_reason reason);

/* One row of pg_replication_slots, borrowed. */
typedef struct failover_slot {
	const char *name, *type, *wal_status;
	bool active;
} failover_slot;

/* The verdict on the primary's setting for cdc's slot `slot`: slot_failover is the slot's own
 * pg_replication_slots.failover; setting the value of synchronized_standby_slots (a list of slot
 * names, as PostgreSQL splits it: commas, spaces, double quotes); slots what pg_replication_slots
 * holds (at least every slot the setting names that exists). why gets a sentence for a human: what
 * is wrong, what it means, what to set (empty when ready). */
failover_reason failover_judge(const char *slot, bool slot_failover, const char *setting,
			       const failover_slot *slots, size_t nslots, char *why, size_t whylen);

/* The LSN where timeline tli ended, from the text of a timeline history file (TIMELINE_HISTORY:
 * lines "parent_tli<TAB>switchpoint<TAB>reason", comments '#'). False when the history does not
 * name tli (it is no ancestor of the server's timeline) or is malformed. */
bool failover_switch_point(const char *history, size_t len, uint32_t tli, uint64_t *end);

#endif

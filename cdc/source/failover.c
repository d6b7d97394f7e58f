/* See failover.h. */
#include "cdc/source/failover.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "decoder/base/util.h"

const char *source_failover_reason_name(failover_reason r)
{
	switch (r) {
	case FAILOVER_UNKNOWN:
		return "unknown";
	case FAILOVER_READY:
		return "ready";
	case FAILOVER_SLOT_NOT_FAILOVER:
		return "slot_not_failover";
	case FAILOVER_UNSET:
		return "synchronized_standby_slots_empty";
	case FAILOVER_STANDBY_SLOT_MISSING:
		return "standby_slot_missing";
	case FAILOVER_STANDBY_SLOT_LOGICAL:
		return "standby_slot_logical";
	case FAILOVER_STANDBY_SLOT_INACTIVE:
		return "standby_slot_inactive";
	case FAILOVER_STANDBY_SLOT_LOST:
		return "standby_slot_lost";
	}
	return "unknown";
}

/* The next name of a list as PostgreSQL's SplitIdentifierString reads it. Names are separated by
 * commas, and spaces around them are ignored. A "double quoted" name is kept as written ("" is a
 * quote), any other is folded to lower case. False at the end of the list. */
static bool next_name(const char **p, char *name, size_t size)
{
	const char *s = *p;
	while (*s == ',' || isspace((unsigned char)*s))
		s++;
	if (!*s)
		return false;
	size_t n = 0;
	if (*s == '"') {
		for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
			if (*s == '"')
				s++;
			if (n + 1 < size)
				name[n++] = *s;
		}
		if (*s == '"')
			s++;
	} else {
		for (; *s && *s != ',' && !isspace((unsigned char)*s); s++)
			if (n + 1 < size)
				name[n++] = (char)tolower((unsigned char)*s);
	}
	name[n] = '\0';
	while (*s && *s != ',')
		s++;
	*p = s;
	return true;
}

static const failover_slot *find_slot(const failover_slot *slots, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(slots[i].name, name) == 0)
			return &slots[i];
	return NULL;
}

#define PHANTOMS                                                                                             \
	"a promotion now may hand consumers changes the promoted server never had (the primary sends "       \
	"cdc changes its standbys may not have yet)"
#define WHAT_TO_SET                                                                                          \
	"set synchronized_standby_slots on the primary to the physical slot of each standby that may be "    \
	"promoted (its primary_slot_name)"

failover_reason source_failover_judge(const char *slot, bool slot_failover, const char *setting,
				      const failover_slot *slots, size_t nslots, char *why, size_t whylen)
{
	why[0] = '\0';
	if (!slot_failover) {
		util_errf(
		    why, whylen,
		    "replication slot %s is not a failover slot: no standby keeps a copy, so after a "
		    "promotion it is gone; set source.failover: true (cdc turns it on at its next start)",
		    slot);
		return FAILOVER_SLOT_NOT_FAILOVER;
	}
	const char *p = setting ? setting : "";
	char name[128];
	size_t named = 0;
	while (next_name(&p, name, sizeof(name))) {
		named++;
		const failover_slot *s = find_slot(slots, nslots, name);
		if (!s) {
			util_errf(
			    why, whylen,
			    "synchronized_standby_slots names slot %s, which does not exist on the primary: "
			    "cdc's stream waits for it; create the standby's physical slot, or " WHAT_TO_SET,
			    name);
			return FAILOVER_STANDBY_SLOT_MISSING;
		}
		if (strcmp(s->type, "physical") != 0) {
			util_errf(
			    why, whylen,
			    "synchronized_standby_slots names %s, a %s slot%s: it must name physical slots, "
			    "and cdc's stream waits meanwhile; " WHAT_TO_SET ", not the logical slot",
			    name, s->type, strcmp(name, slot) == 0 ? " (cdc's own)" : "");
			return FAILOVER_STANDBY_SLOT_LOGICAL;
		}
		if (strcmp(s->wal_status, "lost") == 0) {
			util_errf(
			    why, whylen,
			    "the standby's slot %s (synchronized_standby_slots) has lost WAL (wal_status "
			    "lost): "
			    "that standby cannot catch up and cdc's stream waits for it; rebuild the "
			    "standby, or "
			    "remove the slot from synchronized_standby_slots",
			    name);
			return FAILOVER_STANDBY_SLOT_LOST;
		}
		if (!s->active) {
			util_errf(
			    why, whylen,
			    "no standby streams from slot %s (synchronized_standby_slots): cdc's stream "
			    "waits "
			    "until one does, and a promotion now finds the slot's copy behind; start the "
			    "standby, or remove the slot from synchronized_standby_slots",
			    name);
			return FAILOVER_STANDBY_SLOT_INACTIVE;
		}
	}
	if (!named) {
		util_errf(why, whylen,
			  "synchronized_standby_slots is empty on the primary: " PHANTOMS "; " WHAT_TO_SET);
		return FAILOVER_UNSET;
	}
	return FAILOVER_READY;
}

bool source_failover_switch_point(const char *history, size_t len, uint32_t tli, uint64_t *end)
{
	const char *p = history, *stop = history + len;
	while (p < stop) {
		const char *eol = memchr(p, '\n', (size_t)(stop - p));
		if (!eol)
			eol = stop;
		char line[256];
		size_t n = (size_t)(eol - p) < sizeof(line) - 1 ? (size_t)(eol - p) : sizeof(line) - 1;
		memcpy(line, p, n);
		line[n] = '\0';
		p = eol + 1;
		unsigned long parent;
		char lsn[32];
		if (line[0] == '#' || strspn(line, " \t\r") == n)
			continue;
		if (sscanf(line, "%lu %31s", &parent, lsn) != 2)
			return false;
		if (parent == tli)
			return util_lsn_parse(lsn, end);
	}
	return false;
}

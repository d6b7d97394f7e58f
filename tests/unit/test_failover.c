/* test_failover.c: the verdicts on synchronized_standby_slots (every reason, the list as
 * PostgreSQL splits it) and the switch points read from timeline history files. */
#include "cdc/source/failover.h"

#include "test.h"

static const failover_slot slots[] = {
    {"sb1", "physical", "reserved", true},     {"sb2", "physical", "extended", true},
    {"idle", "physical", "reserved", false},   {"gone", "physical", "lost", true},
    {"cdc_slot", "logical", "reserved", true}, {"MixedCase", "physical", "reserved", true},
};
#define NSLOTS (sizeof(slots) / sizeof(*slots))

static const struct {
	bool slot_failover;
	const char *setting;
	failover_reason want;
	const char *why; /* a part of the sentence */
} cases[] = {
    {true, "sb1", FAILOVER_READY, NULL},
    {true, "sb1,sb2", FAILOVER_READY, NULL},
    {true, " sb1 , \"sb2\" ", FAILOVER_READY, NULL},
    {true, "\"MixedCase\"", FAILOVER_READY, NULL},
    {true, "mixedcase", FAILOVER_STANDBY_SLOT_MISSING, "names slot mixedcase, which does not exist"},
    {true, "MixedCase", FAILOVER_STANDBY_SLOT_MISSING, "names slot mixedcase"},
    {true, "", FAILOVER_UNSET,
     "synchronized_standby_slots is empty on the primary: a promotion now may hand "
     "consumers changes the promoted server never had"},
    {true, " , ", FAILOVER_UNSET, "(its primary_slot_name)"},
    {true, "cdc_slot", FAILOVER_STANDBY_SLOT_LOGICAL, "names cdc_slot, a logical slot (cdc's own)"},
    {true, "sb1,cdc_slot", FAILOVER_STANDBY_SLOT_LOGICAL, "not the logical slot"},
    {true, "nope", FAILOVER_STANDBY_SLOT_MISSING, "cdc's stream waits for it"},
    {true, "sb1,idle", FAILOVER_STANDBY_SLOT_INACTIVE, "no standby streams from slot idle"},
    {true, "gone", FAILOVER_STANDBY_SLOT_LOST, "slot gone (synchronized_standby_slots) has lost WAL"},
    {false, "sb1", FAILOVER_SLOT_NOT_FAILOVER, "set source.failover: true"},
    {false, "", FAILOVER_SLOT_NOT_FAILOVER, "is not a failover slot"},
};

static void test_judge(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char why[512];
		failover_reason r = source_failover_judge("cdc_slot", cases[i].slot_failover,
							  cases[i].setting, slots, NSLOTS, why, sizeof(why));
		CHECK_STR(source_failover_reason_name(r), source_failover_reason_name(cases[i].want));
		if (cases[i].why && !strstr(why, cases[i].why)) {
			test_failed++;
			fprintf(stderr, "case %zu (%s): \"%s\" not in \"%s\"\n", i, cases[i].setting,
				cases[i].why, why);
		}
		CHECK(cases[i].want != FAILOVER_READY || why[0] == '\0');
	}
	char why[64];
	source_failover_judge("cdc_slot", true, NULL, NULL, 0, why,
			      sizeof(why)); /* cut short, still a string */
	CHECK(strlen(why) == sizeof(why) - 1);
	CHECK_STR(source_failover_reason_name(FAILOVER_UNKNOWN), "unknown");
}

static void test_switch_point(void)
{
	/* As PostgreSQL writes 00000003.history: a line per earlier timeline. */
	static const char h[] = "1\t0/3000158\tno recovery target specified\n"
				"\n"
				"2\t1/A0000000\tno recovery target specified\n";
	uint64_t end = 0;
	CHECK(source_failover_switch_point(h, sizeof(h) - 1, 1, &end));
	CHECK_INT(end, 0x3000158);
	CHECK(source_failover_switch_point(h, sizeof(h) - 1, 2, &end));
	CHECK_INT(end, 0x1A0000000);
	CHECK(!source_failover_switch_point(h, sizeof(h) - 1, 3, &end)); /* the server's own: no end */
	CHECK(!source_failover_switch_point(h, sizeof(h) - 1, 7, &end));
	static const char comments[] = "# a comment\n1\t0/5000000\treason";
	CHECK(source_failover_switch_point(comments, sizeof(comments) - 1, 1, &end));
	CHECK_INT(end, 0x5000000);
	static const char bad[] = "1 not-an-lsn\n";
	CHECK(!source_failover_switch_point(bad, sizeof(bad) - 1, 1, &end));
	static const char junk[] = "garbage\n1\t0/1\tr\n";
	CHECK(!source_failover_switch_point(junk, sizeof(junk) - 1, 1, &end)); /* malformed: not trusted */
	CHECK(!source_failover_switch_point("", 0, 1, &end));
	/* not NUL-terminated: the length is what counts */
	static const char cut[] = "1\t0/3000158\tr\n2\t0/4000000";
	CHECK(source_failover_switch_point(cut, 14, 1, &end));
	CHECK(!source_failover_switch_point(cut, 14, 2, &end));
}

int main(void)
{
	test_judge();
	test_switch_point();
	return TEST_SUMMARY("test_failover");
}

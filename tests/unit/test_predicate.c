/* test_predicate.c: unit tests for `where` predicates (cdc/match/predicate.c): tables of expressions
 * against hand-built events with typed values, each checked as true, false or unknown (unknown:
 * neither the expression nor its negation matches), and malformed expressions with their errors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/match/predicate.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "test.h"

static arena *A;

#define TOAST ((const char *)1)	 /* column text: unchanged TOAST */
#define BINARY ((const char *)2) /* column text: sent in binary ("\x01\x02") */

typedef struct colspec {
	const char *name;
	uint32_t oid;
	const char *text; /* as the server sends it; NULL for SQL NULL */
} colspec;

/* Columns converted from text exactly as the decoder converts them. */
static Cdc__V1__Row *row(const colspec *cs, size_t n)
{
	Cdc__V1__Row *r = arena_alloc(A, sizeof(*r));
	*r = (Cdc__V1__Row)CDC__V1__ROW__INIT;
	r->columns = arena_alloc(A, n * sizeof(*r->columns));
	for (size_t i = 0; i < n; i++) {
		Cdc__V1__Column *c = arena_alloc(A, sizeof(*c));
		*c = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
		c->name = (char *)cs[i].name;
		c->type_oid = cs[i].oid;
		pgo_datum d = {.kind = PGO_TEXT};
		if (!cs[i].text) {
			d.kind = PGO_NULL;
		} else if (cs[i].text == TOAST) {
			d.kind = PGO_TOAST;
		} else if (cs[i].text == BINARY) {
			d.kind = PGO_BINARY;
			d.data = "\x01\x02";
			d.len = 2;
		} else {
			d.data = cs[i].text;
			d.len = (uint32_t)strlen(cs[i].text);
		}
		c->value = pgo_event_value(A, NULL, cs[i].oid, &d);
		r->columns[r->n_columns++] = c;
	}
	return r;
}

static const colspec NEW_COLS[] = {
    {"id", PGT_INT4, "42"},
    {"status", PGT_TEXT, "paid"},
    {"amount", PGT_NUMERIC, "120.00"},
    {"big", PGT_NUMERIC, "12345678901234567890.000123"},
    {"neg", PGT_NUMERIC, "-0.5"},
    {"nan", PGT_NUMERIC, "NaN"},
    {"inf", PGT_NUMERIC, "Infinity"},
    {"ninf", PGT_NUMERIC, "-Infinity"},
    {"zero", PGT_NUMERIC, "0.000"},
    {"score", PGT_FLOAT8, "1.5"},
    {"ratio", PGT_FLOAT8, "0.1"},
    {"fnan", PGT_FLOAT8, "NaN"},
    {"huge", PGT_INT8, "9007199254740993"},
    {"imin", PGT_INT8, "-9223372036854775808"},
    {"active", PGT_BOOL, "t"},
    {"deleted", PGT_BOOL, "f"},
    {"note", PGT_TEXT, "it's"},
    {"empty", PGT_TEXT, ""},
    {"utf", PGT_VARCHAR, "caf\xc3\xa9"},
    {"nothing", PGT_TEXT, NULL},
    {"blob", PGT_TEXT, TOAST},
    {"bin", PGT_INT4, BINARY},
    {"created", PGT_TIMESTAMPTZ, "2024-01-15 10:30:00+00"},
    {"local", PGT_TIMESTAMP, "2024-01-15 10:30:00.5"},
    {"day", PGT_DATE, "2024-01-15"},
    {"at", PGT_TIME, "10:30:00"},
    {"uid", PGT_UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
    {"raw", PGT_BYTEA, "\\x0102ff"},
    {"doc", PGT_JSONB, "{\"a\": 1}"},
    {"dur", PGT_INTERVAL, "1 day"},
    {"Mixed Case", PGT_TEXT, "x"},
    {"order", PGT_INT4, "7"},
    {"Order", PGT_INT4, "8"},
    {"a$1", PGT_INT4, "1"},
    {"same", PGT_INT4, "5"},
};

static const colspec OLD_COLS[] = {
    {"id", PGT_INT4, "42"},	  {"status", PGT_TEXT, "pending"}, {"amount", PGT_NUMERIC, "99.5"},
    {"score", PGT_FLOAT8, "1.5"}, {"nan", PGT_NUMERIC, "NaN"},	   {"same", PGT_NUMERIC, "5.000"},
    {"nothing", PGT_TEXT, NULL},
};

enum { F, T, U };  /* expected: false, true, unknown */
enum { UPD, INS }; /* the update has an old row, the insert none */

static const struct {
	const char *expr;
	int ev;
	int want;
} CASES[] = {
    /* every comparison operator on ints */
    {"new.id = 42", UPD, T},
    {"new.id = 41", UPD, F},
    {"new.id != 41", UPD, T},
    {"new.id <> 42", UPD, F},
    {"new.id < 43", UPD, T},
    {"new.id < 42", UPD, F},
    {"new.id <= 42", UPD, T},
    {"new.id > 41", UPD, T},
    {"new.id > 42", UPD, F},
    {"new.id >= 42", UPD, T},
    {"new.id>=43", UPD, F},
    {"42 = new.id", UPD, T},
    {"43 > new.id", UPD, T},
    {"41 >= new.id", UPD, F},
    {"new.id = 42.0", UPD, T},
    {"new.id = 4.2e1", UPD, T},
    {"new.id = 420e-1", UPD, T},
    {"new.id = 42.5", UPD, F},
    {"new.id < 42.5", UPD, T},
    {"new.huge = 9007199254740993", UPD, T}, /* exact, not through double */
    {"new.huge > 9007199254740992", UPD, T},
    {"new.imin = -9223372036854775808", UPD, T},
    {"new.imin < -9223372036854775807", UPD, T},
    {"new.id > -1e1000", UPD, T},
    /* numeric: exact decimals */
    {"new.amount = 120", UPD, T},
    {"new.amount = 120.000000", UPD, T},
    {"new.amount = 1.2e2", UPD, T},
    {"new.amount = 12000e-2", UPD, T},
    {"new.amount > 119.9999999999999999999", UPD, T},
    {"new.amount < 120.0000000000000000001", UPD, T},
    {"new.amount >= 100", UPD, T},
    {"new.big = 12345678901234567890.000123", UPD, T},
    {"new.big = 12345678901234567890.0001230", UPD, T},
    {"new.big = 12345678901234567890.000124", UPD, F},
    {"new.big > 12345678901234567890.000122999999", UPD, T},
    {"new.big < 12345678901234567890.0001230000001", UPD, T},
    {"new.big > 1.2345678901234567890e19", UPD, T},
    {"new.big < 1.2345678901234567891e19", UPD, T},
    {"new.big > 9223372036854775807", UPD, T},
    {"new.neg = -0.5", UPD, T},
    {"new.neg = -.5", UPD, T},
    {"new.neg = -5e-1", UPD, T},
    {"new.neg < 0", UPD, T},
    {"new.neg > -1", UPD, T},
    {"new.neg < -0.4", UPD, T},
    {"new.neg > -0.50001", UPD, T},
    {"new.zero = 0", UPD, T},
    {"new.zero = -0", UPD, T},
    {"new.zero = 0e99", UPD, T},
    {"new.zero > -0.0000001", UPD, T},
    {"new.zero < 0.0000001", UPD, T},
    {"new.nan = 1", UPD, F},
    {"new.nan > 1e100", UPD, T}, /* NaN is above every number */
    {"new.nan > -1", UPD, T},
    {"new.nan <> 0", UPD, T},
    {"new.nan = old.nan", UPD, T}, /* and equals NaN */
    {"new.nan > new.inf", UPD, T},
    {"new.inf > 1e100", UPD, T},
    {"new.inf = new.inf", UPD, T},
    {"new.ninf < -1e100", UPD, T},
    {"new.ninf < new.neg", UPD, T},
    /* floats: compared as doubles, like a numeric literal cast to float8 */
    {"new.score = 1.5", UPD, T},
    {"new.score = 15e-1", UPD, T},
    {"new.score > 1", UPD, T},
    {"new.score < 2", UPD, T},
    {"new.ratio = 0.1", UPD, T},
    {"new.ratio = 0.10000000000000001", UPD, T}, /* the same double */
    {"new.ratio < 0.2", UPD, T},
    {"new.fnan = 1", UPD, F},
    {"new.fnan > 1e300", UPD, T},
    {"new.fnan = new.fnan", UPD, T},
    {"new.fnan = new.nan", UPD, T},
    {"new.score = 1e400", UPD, U}, /* out of double's range */
    {"new.score > 1e-400", UPD, U},
    /* columns against columns */
    {"new.id = old.id", UPD, T},
    {"new.status <> old.status", UPD, T},
    {"new.amount > old.amount", UPD, T},
    {"new.score = old.score", UPD, T},
    {"new.same = old.same", UPD, T}, /* int against numeric, exactly */
    {"new.id > new.score", UPD, T},  /* int against float */
    {"new.amount > new.score", UPD, T},
    {"new.status = new.id", UPD, U},
    {"new.day = new.created", UPD, U},
    {"new.day = new.day", UPD, T},
    {"new.doc = new.doc", UPD, T},
    {"new.dur = new.dur", UPD, T},
    {"new.raw = new.raw", UPD, T},
    {"new.uid = new.uid", UPD, T},
    {"new.nothing = old.nothing", UPD, U},
    /* literals against literals */
    {"1 = 1.0", UPD, T},
    {"'a' < 'b'", UPD, T},
    {"true > false", UPD, T},
    {"1 = '1'", UPD, U},
    {"null = null", UPD, U},
    /* strings: bytewise, '' for a quote */
    {"new.status = 'paid'", UPD, T},
    {"new.status = 'Paid'", UPD, F},
    {"new.status = 'paid '", UPD, F},
    {"new.status <> 'open'", UPD, T},
    {"new.status > 'paic'", UPD, T},
    {"new.status < 'paida'", UPD, T},
    {"new.status >= 'paid'", UPD, T},
    {"new.note = 'it''s'", UPD, T},
    {"new.note = 'its'", UPD, F},
    {"new.empty = ''", UPD, T},
    {"new.empty < 'a'", UPD, T},
    {"new.utf = 'caf\xc3\xa9'", UPD, T},
    {"new.utf > 'cafz'", UPD, T}, /* bytes: 0xc3 > 'z' */
    {"'paid' = new.status", UPD, T},
    /* booleans */
    {"new.active = true", UPD, T},
    {"new.active = TRUE", UPD, T},
    {"new.active = false", UPD, F},
    {"new.deleted = false", UPD, T},
    {"new.active <> new.deleted", UPD, T},
    {"new.active > false", UPD, T},
    /* timestamps, dates, times, uuid, bytea, json, other: the literal converted to the column's type */
    {"new.created = '2024-01-15 10:30:00+00'", UPD, T},
    {"new.created = '2024-01-15 12:30:00+02'", UPD, T}, /* the same instant */
    {"new.created = '2024-01-15 10:30:00.000000+00:00'", UPD, T},
    {"new.created > '2024-01-15 10:29:59.999999+00'", UPD, T},
    {"new.created < '2024-01-16 00:00:00+00'", UPD, T},
    {"new.created >= '2025-01-01 00:00:00+00'", UPD, F},
    {"new.created < 'infinity'", UPD, T},
    {"new.created > '-infinity'", UPD, T},
    {"new.created = '2024-01-15 10:30:00'", UPD, U}, /* timestamptz needs its offset */
    {"new.created = '2024-01-15'", UPD, U},
    {"new.created = 'yesterday'", UPD, U},
    {"new.local = '2024-01-15 10:30:00.5'", UPD, T},
    {"new.local > '2024-01-15 10:30:00'", UPD, T},
    {"new.local = '2024-01-15 10:30:00+00'", UPD, U},
    {"new.day = '2024-01-15'", UPD, T},
    {"new.day < '2024-01-16'", UPD, T},
    {"new.day > '2023-12-31'", UPD, T},
    {"new.day >= '2024-02-30'", UPD, U}, /* not a date */
    {"new.day = '15/01/2024'", UPD, U},
    {"new.at = '10:30:00'", UPD, T},
    {"new.at < '10:30:00.000001'", UPD, T},
    {"new.uid = 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", UPD, T},
    {"new.uid = 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", UPD, T},
    {"new.uid < 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12'", UPD, T},
    {"new.uid = 'not-a-uuid'", UPD, U},
    {"new.raw = '\\x0102ff'", UPD, T},
    {"new.raw > '\\x0102'", UPD, T},
    {"new.raw < '\\x02'", UPD, T},
    {"new.raw = '\\xzz'", UPD, U},
    {"new.doc = '{\"a\": 1}'", UPD, T},
    {"new.doc = '{\"a\":1}'", UPD, F}, /* json by text */
    {"new.dur = '1 day'", UPD, T},
    {"new.dur <> '24 hours'", UPD, T},
    /* type mismatches are unknown, never errors */
    {"new.id = '42'", UPD, U},
    {"new.status = 42", UPD, U},
    {"new.active = 't'", UPD, U},
    {"new.active = 1", UPD, U},
    {"new.id = true", UPD, U},
    {"new.day = 20240115", UPD, U},
    {"new.amount = 'NaN'", UPD, U},
    {"new.bin = 1", UPD, U}, /* binary form: not comparable */
    /* NULL: comparisons are unknown, is [not] null is not */
    {"new.nothing = 'x'", UPD, U},
    {"new.nothing <> 'x'", UPD, U},
    {"new.nothing = null", UPD, U},
    {"new.id = null", UPD, U},
    {"new.id <> NULL", UPD, U},
    {"new.nothing is null", UPD, T},
    {"new.nothing is not null", UPD, F},
    {"new.id is null", UPD, F},
    {"new.id IS NOT NULL", UPD, T},
    {"null is null", UPD, T},
    {"1 is not null", UPD, T},
    {"old.nothing is null", UPD, T},
    /* unchanged TOAST: a value not resent, so unknown but not null */
    {"new.blob = 'x'", UPD, U},
    {"new.blob <> 'x'", UPD, U},
    {"new.blob is null", UPD, F},
    {"new.blob is not null", UPD, T},
    {"new.bin is not null", UPD, T},
    /* absent columns and rows */
    {"new.missing = 1", UPD, U},
    {"new.missing is null", UPD, U},
    {"new.missing is not null", UPD, U},
    {"old.status = 'pending'", UPD, T},
    {"old.status = 'pending'", INS, U},
    {"old.status <> 'pending'", INS, U},
    {"old.id is null", INS, U},
    {"old.id in (42)", INS, U},
    {"old.id not in (1)", INS, U},
    {"old.status = 'pending' or new.id = 42", INS, T},
    {"old.status = 'pending' and new.id = 42", INS, U},
    {"old.status = 'pending' and new.id = 1", INS, F},
    {"new.status <> old.status", INS, U},
    /* names: folded unless quoted */
    {"NEW.ID = 42", UPD, T},
    {"New.Status = 'paid'", UPD, T},
    {"new.\"id\" = 42", UPD, T},
    {"new.\"ID\" = 42", UPD, U},
    {"new.\"Mixed Case\" = 'x'", UPD, T},
    {"new.order = 7", UPD, T},
    {"new.ORDER = 7", UPD, T},
    {"new.\"Order\" = 8", UPD, T},
    {"new.a$1 = 1", UPD, T},
    {"new . id = 42", UPD, T},
    {"new.\"null\" is null", UPD, U}, /* no such column */
    /* in, not in */
    {"new.id in (1, 42, 3)", UPD, T},
    {"new.id in (42)", UPD, T},
    {"new.id in (1, 2)", UPD, F},
    {"new.id IN (1,2,42.0)", UPD, T},
    {"new.id in (1, null)", UPD, U},
    {"new.id in (null, 42)", UPD, T},
    {"new.id in ('a', 42)", UPD, T},
    {"new.id in ('a')", UPD, U},
    {"new.id not in (1, 2)", UPD, T},
    {"new.id not in (1, 42)", UPD, F},
    {"new.id not in (1, null)", UPD, U},
    {"new.id NOT IN (42, null)", UPD, F},
    {"new.status in ('open', 'paid')", UPD, T},
    {"new.status in ('open', 'closed')", UPD, F},
    {"new.status in ('open', old.status)", UPD, F},
    {"old.status in ('open', old.status)", UPD, T},
    {"new.nothing in ('a', 'b')", UPD, U},
    {"new.nothing not in ('a', 'b')", UPD, U},
    {"new.amount in (99.5, 120)", UPD, T},
    {"new.day in ('2024-01-14', '2024-01-15')", UPD, T},
    {"not new.id in (1, 42)", UPD, F},
    /* and, or, not, precedence, parentheses */
    {"new.status = 'paid' and new.amount >= 100", UPD, T},
    {"new.status = 'paid' and new.amount >= 200", UPD, F},
    {"new.status = 'open' or new.amount >= 100", UPD, T},
    {"new.status = 'open' or new.amount >= 200", UPD, F},
    {"not new.id = 42", UPD, F},
    {"not new.id = 1", UPD, T},
    {"NOT NOT new.id = 42", UPD, T},
    {"not not not new.id = 42", UPD, F},
    {"new.id = 1 or new.id = 42 and new.id = 2", UPD, F}, /* and binds tighter */
    {"(new.id = 1 or new.id = 42) and new.id = 2", UPD, F},
    {"new.id = 42 or new.id = 1 and new.id = 2", UPD, T},
    {"(new.id = 42 or new.id = 1) and new.id = 2", UPD, F},
    {"not new.id = 1 and new.id = 1", UPD, F}, /* not binds tighter than and */
    {"not (new.id = 1 and new.id = 1)", UPD, T},
    {"not new.id = 42 or new.id = 42", UPD, T},
    {"not (new.id = 42 or new.id = 42)", UPD, F},
    {"((((new.id = 42))))", UPD, T},
    {"(new.id = 42) and (new.status = 'paid')", UPD, T},
    {"new.id=1 or new.id=2 or new.id=3 or new.id=42", UPD, T},
    {"new.id=42 and new.id>1 and new.id<100 and new.id<>7", UPD, T},
    {"new.id = 42 AnD new.status = 'paid' oR new.id = 1", UPD, T},
    {"\tnew.id\n=\r42 ", UPD, T},
    /* three-valued logic */
    {"new.nothing = 1 and new.id = 42", UPD, U},
    {"new.nothing = 1 and new.id = 1", UPD, F},
    {"new.id = 1 and new.nothing = 1", UPD, F},
    {"new.nothing = 1 or new.id = 42", UPD, T},
    {"new.id = 42 or new.nothing = 1", UPD, T},
    {"new.nothing = 1 or new.id = 1", UPD, U},
    {"not new.nothing = 1", UPD, U},
    {"not (new.nothing = 1 or new.id = 1)", UPD, U},
    {"not (new.nothing = 1 and new.id = 1)", UPD, T},
};

/* Malformed expressions: the exact message. */
static const struct {
	const char *expr;
	const char *err;
} ERRORS[] = {
    {"", "position 1: expected an expression"},
    {"   ", "position 4: expected an expression"},
    {"new.status =", "position 12: expected a value after '='"},
    {"new.status = and new.id = 1", "position 12: expected a value after '='"},
    {"new.amount >= ", "position 12: expected a value after '>='"},
    {"new.id <> (1)", "position 8: expected a value after '<>'"},
    {"new.id != new", "position 11: expected '.' after 'new'"},
    {"new.id", "position 7: expected a comparison operator"},
    {"new.id 42", "position 8: expected a comparison operator"},
    {"new.id == 1", "position 8: '==' is not an operator: write '=' to compare"},
    {"new.id = 1 or new.x==2", "position 20: '==' is not an operator: write '=' to compare"},
    {"new.status = 'paid' new.id = 1", "position 21: expected 'and' or 'or'"},
    {"new.id = 1 and", "position 15: expected an expression"},
    {"new.id = 1 or or new.id = 2", "position 15: expected an expression"},
    {"and new.id = 1", "position 1: expected an expression"},
    {"not", "position 4: expected an expression"},
    {"(new.id = 1", "position 12: expected ')'"},
    {"(new.id = 1 new.id = 2)", "position 13: expected ')'"},
    {"new.id = 1)", "position 11: unmatched ')'"},
    {"()", "position 2: expected an expression"},
    {"status = 'paid'", "position 1: unknown name 'status' (columns are new.<name> or old.<name>)"},
    {"new.id = paid", "position 10: unknown name 'paid' (columns are new.<name> or old.<name>)"},
    {"new id = 1", "position 1: expected '.' after 'new'"},
    {"old. = 1", "position 1: expected a column name after 'old.'"},
    {"new.'id' = 1", "position 1: expected a column name after 'new.'"},
    {"new.\"\" = 1", "position 5: empty quoted name"},
    {"new.\"id = 1", "position 5: unterminated quoted name"},
    {"new.status = 'paid", "position 14: unterminated string"},
    {"new.status = 'it''s", "position 14: unterminated string"},
    {"new.id = 1e", "position 10: malformed number"},
    {"new.id = 1e+", "position 10: malformed number"},
    {"new.id = 1.2.3", "position 10: malformed number"},
    {"new.id = 12abc", "position 10: malformed number"},
    {"new.id = 1e1000001", "position 10: number out of range"},
    {"new.id = -", "position 10: unexpected character '-'"},
    {"new.id = +1", "position 10: unexpected character '+'"},
    {"new.id = 1 && new.id = 2", "position 12: unexpected character '&'"},
    {"new.id ! 1", "position 8: unexpected character '!'"},
    {"new.id = 1;", "position 11: unexpected character ';'"},
    {"new.id = \x01", "position 10: unexpected byte 0x01"},
    {"new.status = '\xc3\xa9t\xc3\xa9' or x",
     "position 23: unknown name 'x' (columns are new.<name> or old.<name>)"},
    {"new.caf\xc3\xa9 = 1", "position 8: unexpected byte 0xC3"},
    {"new.id is 1", "position 8: expected 'null' or 'not null' after 'is'"},
    {"new.id is", "position 8: expected 'null' or 'not null' after 'is'"},
    {"new.id is not 1", "position 8: expected 'null' after 'is not'"},
    {"new.id not null", "position 8: expected 'in' after 'not'"},
    {"new.id in 1, 2", "position 8: expected '(' after 'in'"},
    {"new.id not in 1", "position 12: expected '(' after 'in'"},
    {"new.id in ()", "position 12: expected a value in the list"},
    {"new.id in (1,)", "position 14: expected a value in the list"},
    {"new.id in (1 2)", "position 14: expected ',' or ')' in the list"},
    {"new.id in (1, 2", "position 16: expected ',' or ')' in the list"},
    {"new.id in ((1))", "position 12: expected a value in the list"},
    {"new.id = 1 and (new.id = 2 or )", "position 31: expected an expression"},
    {"\"id\" = 1", "position 1: expected an expression"},
    {"in (1)", "position 1: expected an expression"},
    {"new.a = 1 = 2", "position 11: expected 'and' or 'or'"},
    {"(new.id = 1) is null", "position 14: expected 'and' or 'or'"}, /* a condition is not a value */
};

static void check_case(size_t i, const Cdc__V1__Event *upd, const Cdc__V1__Event *ins)
{
	char err[256] = "", neg[4200];
	const Cdc__V1__Event *e = CASES[i].ev == UPD ? upd : ins;
	pred *p = match_predicate_parse(CASES[i].expr, err, sizeof(err));
	snprintf(neg, sizeof(neg), "not (%s)", CASES[i].expr);
	pred *n = match_predicate_parse(neg, err, sizeof(err));
	if (!p || !n) {
		test_failed++;
		fprintf(stderr, "case %zu: %s: %s\n", i, CASES[i].expr, err);
		match_predicate_free(p);
		match_predicate_free(n);
		return;
	}
	bool t = match_predicate_eval(p, e, A), f = match_predicate_eval(n, e, A);
	int got = t && !f ? T : !t && f ? F : !t && !f ? U : -1;
	if (got == CASES[i].want) {
		test_passed++;
	} else {
		static const char *names[] = {"false", "true", "unknown"};
		test_failed++;
		fprintf(stderr, "case %zu: %s: got %s, want %s\n", i, CASES[i].expr,
			got < 0 ? "true and its negation true" : names[got], names[CASES[i].want]);
	}
	match_predicate_free(p);
	match_predicate_free(n);
	arena_reset(A);
}

static void check_error(const char *expr, const char *want)
{
	char err[256] = "";
	pred *p = match_predicate_parse(expr, err, sizeof(err));
	CHECK(p == NULL);
	match_predicate_free(p);
	if (strcmp(err, want) != 0)
		fprintf(stderr, "expression: %s\n", expr);
	CHECK_STR(err, want);
}

/* NEW_COLS as a table's columns, for match_predicate_check_columns. */
static pred_column TABLE[sizeof(NEW_COLS) / sizeof(NEW_COLS[0])];

static void table_init(void)
{
	for (size_t i = 0; i < sizeof(NEW_COLS) / sizeof(NEW_COLS[0]); i++)
		TABLE[i] =
		    (pred_column){NEW_COLS[i].name, NEW_COLS[i].oid, pgo_types_builtin_name(NEW_COLS[i].oid)};
}

/* The comparisons that can never be true for the columns' types, each named with the column, its
 * type and the literal; NULL: accepted. reads: a backfill's (no old row). */
static const struct {
	const char *expr;
	bool reads;
	const char *err;
} NEVER[] = {
    {"new.status = 5", false,
     "new.status = 5 is never true: column status is of type text and 5 is a number; write '5'"},
    {"new.id = '42'", false,
     "new.id = '42' is never true: column id is of type int4 and '42' is a string; write 42, without quotes"},
    {"new.amount >= 'lots'", false,
     "new.amount >= 'lots' is never true: column amount is of type numeric and 'lots' is a string"},
    {"new.active = 1", false,
     "new.active = 1 is never true: column active is of type bool and 1 is a number; write true or false"},
    {"new.id = true", false, "new.id = true is never true: column id is of type int4 and true is a boolean"},
    {"new.created >= 'yesterday'", false,
     "new.created >= 'yesterday' is never true: 'yesterday' is not a value of column created's type "
     "timestamptz; write one as PostgreSQL prints it"},
    {"new.uid = 'it''s'", false,
     "new.uid = 'it''s' is never true: 'it''s' is not a value of column uid's type uuid; write one as "
     "PostgreSQL prints it"},
    {"new.nope = 1", false, "new.nope = 1 is never true: the table has no column nope"},
    {"new.nope is not null", false, "new.nope is not null is never true: the table has no column nope"},
    {"new.id = new.nope", false, "new.id = new.nope is never true: the table has no column nope"},
    {"new.id = null", false,
     "new.id = null is never true: a comparison with null is unknown; write is null or is not null"},
    {"5 < new.status", false,
     "5 < new.status is never true: column status is of type text and 5 is a number; write '5'"},
    /* in: never true when no item can match; not in: when one cannot (it is then unknown or false) */
    {"new.id = 1 or new.status in (4, 5)", false,
     "new.status in (4, 5) is never true: column status is of type text and 4 is a number; write '4'"},
    {"new.status in ('a', 5, null)", false, NULL},
    {"new.status not in ('a', 5)", false,
     "new.status not in ('a', 5) is never true: column status is of type text and 5 is a number; write "
     "'5'"},
    {"new.status not in ('a', null)", false,
     "new.status not in ('a', null) is never true: a comparison with null is unknown; write is null or is "
     "not null"},
    {"old.id = 1", true, "old.id = 1 is never true: a backfill's reads have no old row"},
    /* what can be true is accepted */
    {"old.id = 1", false, NULL},
    {"new.status in ('a', null) and new.nothing is null", false, NULL},
    {"new.created >= '2024-01-15 10:30:00+00' and new.day < '2024-02-01'", false, NULL},
    {"new.dur = '1 day' and new.doc = '{}' and new.raw = '\\x01'", false, NULL},
    {"new.score > 1 and new.amount <= 1e3 and new.huge <> -1 and not new.active = false", false, NULL},
    {"new.\"Mixed Case\" = 'x' and new.id = new.\"order\"", true, NULL},
};

static void test_never_true(void)
{
	for (size_t i = 0; i < sizeof(NEVER) / sizeof(NEVER[0]); i++) {
		char perr[256] = "", err[512] = "";
		pred *p = match_predicate_parse(NEVER[i].expr, perr, sizeof(perr));
		CHECK(p != NULL);
		if (!p)
			continue;
		bool ok = match_predicate_check_columns(p, TABLE, sizeof(TABLE) / sizeof(TABLE[0]),
							NEVER[i].reads, A, err, sizeof(err));
		if (ok != (NEVER[i].err == NULL) || (!ok && strcmp(err, NEVER[i].err) != 0)) {
			test_failed++;
			fprintf(stderr, "check of %s: got %s\n  want %s\n", NEVER[i].expr, ok ? "ok" : err,
				NEVER[i].err ? NEVER[i].err : "ok");
		} else {
			test_passed++;
		}
		match_predicate_free(p);
		arena_reset(A);
	}
}

/* A single comparison that evaluates true for the cases' events is never refused by
 * match_predicate_check_columns, and one it refuses is never true there: the checker and the evaluator agree.
 */
static void test_check_agrees_with_eval(const Cdc__V1__Event *upd, const Cdc__V1__Event *ins)
{
	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
		const char *x = CASES[i].expr;
		if (strstr(x, " and ") || strstr(x, " or ") || strstr(x, "not ") || strstr(x, "NOT") ||
		    strstr(x, "AND") || strstr(x, "OR"))
			continue;
		char err[512];
		pred *p = match_predicate_parse(x, err, sizeof(err));
		if (!p)
			continue;
		bool ok = match_predicate_check_columns(p, TABLE, sizeof(TABLE) / sizeof(TABLE[0]), false, A,
							err, sizeof(err));
		bool t = match_predicate_eval(p, CASES[i].ev == UPD ? upd : ins, A);
		if (!ok && t) {
			test_failed++;
			fprintf(stderr, "case %zu: %s is true, but refused: %s\n", i, x, err);
		} else {
			test_passed++;
		}
		match_predicate_free(p);
		arena_reset(A);
	}
}

/* Limits: text length, nesting and terms, each refused with a position. */
static void test_limits(const Cdc__V1__Event *e)
{
	char text[PRED_MAX_TEXT + 64], err[256];
	pred *p;

	/* 4096 bytes are fine, 4097 are not */
	memset(text, ' ', sizeof(text));
	memcpy(text, "new.id = 42", 11);
	text[PRED_MAX_TEXT] = '\0';
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK(p && match_predicate_eval(p, e, A));
	match_predicate_free(p);
	text[PRED_MAX_TEXT] = ' ';
	text[PRED_MAX_TEXT + 1] = '\0';
	CHECK(!match_predicate_parse(text, err, sizeof(err)));
	CHECK_STR(err, "position 4097: text longer than 4096 bytes");

	/* 64 levels of parentheses or nots, not 65 */
	for (int depth = 64; depth <= 65; depth++) {
		size_t n = 0;
		for (int i = 0; i < depth; i++)
			text[n++] = '(';
		n += (size_t)sprintf(text + n, "new.id = 42");
		for (int i = 0; i < depth; i++)
			text[n++] = ')';
		text[n] = '\0';
		p = match_predicate_parse(text, err, sizeof(err));
		if (depth == 64)
			CHECK(p && match_predicate_eval(p, e, A));
		else
			CHECK_STR(p ? "parsed" : err, "position 65: nesting deeper than 64");
		match_predicate_free(p);

		n = 0;
		for (int i = 0; i < depth; i++)
			n += (size_t)sprintf(text + n, "not ");
		sprintf(text + n, "new.id = 42");
		p = match_predicate_parse(text, err, sizeof(err));
		if (depth == 64)
			CHECK(p && match_predicate_eval(p, e, A)); /* an even number of nots */
		else
			CHECK_STR(p ? "parsed" : err, "position 257: nesting deeper than 64");
		match_predicate_free(p);
	}
	/* mixed: 32 nots each with parentheses is 64 */
	size_t n = 0;
	for (int i = 0; i < 32; i++)
		n += (size_t)sprintf(text + n, "not (");
	n += (size_t)sprintf(text + n, "new.id = 1");
	for (int i = 0; i < 32; i++)
		text[n++] = ')';
	text[n] = '\0';
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK(p && !match_predicate_eval(p, e, A));
	match_predicate_free(p);

	/* 256 terms (128 comparisons of two), not 257 */
	n = 0;
	for (int i = 0; i < 128; i++)
		n += (size_t)sprintf(text + n, "%snew.id=%d", i ? " or " : "", i == 127 ? 42 : i);
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK(p && match_predicate_eval(p, e, A));
	match_predicate_free(p);
	sprintf(text + n, " or new.id");
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK_STR(p ? "parsed" : err, "position 1682: more than 256 terms");
	CHECK_INT(strlen(text) - strlen("new.id") + 1, 1682);
	match_predicate_free(p);
	/* an in list counts each item */
	n = (size_t)sprintf(text, "new.id in (");
	for (int i = 0; i < 255; i++)
		n += (size_t)sprintf(text + n, "%s%d", i ? "," : "", i);
	sprintf(text + n, ")");
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK(p && match_predicate_eval(p, e, A));
	match_predicate_free(p);
	sprintf(text + n, ",255)");
	p = match_predicate_parse(text, err, sizeof(err));
	CHECK_STR(p ? "parsed" : err, "position 922: more than 256 terms");
	CHECK_INT(n + 2, 922);
	match_predicate_free(p);
	arena_reset(A);
}

/* Odd events: no rows, a column without a value, a NULL error buffer. */
static void test_odd(void)
{
	char err[64];
	pred *p =
	    match_predicate_parse("new.id = 1 or new.id is null or old.id is not null", err, sizeof(err));
	CHECK(p != NULL);
	Cdc__V1__Event e = CDC__V1__EVENT__INIT;
	CHECK(!match_predicate_eval(p, &e, A));
	CHECK(!match_predicate_eval(p, NULL, A));
	Cdc__V1__Column c = CDC__V1__COLUMN__INIT, *cp = &c;
	c.name = "id";
	Cdc__V1__Row r = CDC__V1__ROW__INIT;
	r.n_columns = 1;
	r.columns = &cp;
	e.new_row = &r;
	CHECK(!match_predicate_eval(p, &e, A)); /* no value: absent */
	Cdc__V1__Value v = CDC__V1__VALUE__INIT;
	c.value = &v;
	CHECK(!match_predicate_eval(p, &e, A)); /* nothing set in the value: unknown */
	v.kind_case = CDC__V1__VALUE__KIND_NUMERIC_VALUE;
	v.numeric_value = "1.0.0";
	CHECK(!match_predicate_eval(p, &e, A)); /* not a decimal: unknown */
	v.numeric_value = "1.0";
	CHECK(match_predicate_eval(p, &e, A));
	match_predicate_free(p);
	CHECK(match_predicate_parse("(", NULL, 0) == NULL);
	char small[12];
	CHECK(match_predicate_parse("new.id = 1 or", small, sizeof(small)) == NULL);
	CHECK_STR(small, "position 14");
	match_predicate_free(NULL);
	arena_reset(A);
}

int main(void)
{
	A = arena_new(1 << 16);
	Cdc__V1__Event upd = CDC__V1__EVENT__INIT, ins = CDC__V1__EVENT__INIT;
	upd.op = CDC__V1__OP__OP_UPDATE;
	ins.op = CDC__V1__OP__OP_INSERT;
	/* The events live in their own arena: the cases reset A. */
	arena *fixed = A;
	A = arena_new(1 << 16);
	arena *scratch = A;
	A = fixed;
	upd.new_row = ins.new_row = row(NEW_COLS, sizeof(NEW_COLS) / sizeof(NEW_COLS[0]));
	upd.old_row = row(OLD_COLS, sizeof(OLD_COLS) / sizeof(OLD_COLS[0]));
	A = scratch;

	for (size_t i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++)
		check_case(i, &upd, &ins);
	for (size_t i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
		check_error(ERRORS[i].expr, ERRORS[i].err);
	test_limits(&upd);
	test_odd();
	table_init();
	test_never_true();
	test_check_agrees_with_eval(&upd, &ins);

	arena_free(scratch);
	arena_free(fixed);
	return TEST_SUMMARY("test_predicate");
}

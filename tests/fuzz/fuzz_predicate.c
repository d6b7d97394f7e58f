/* fuzz_predicate.c: libFuzzer harness for `where` predicates: arbitrary bytes (up to the first NUL)
 * through match_predicate_parse; a rejection must say where, and what parses is evaluated against a fixed
 * event of every value kind, along with its negation, which must never match at the same time, and
 * checked against the event's columns (match_predicate_check_columns): a single comparison it calls never
 * true must not match. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/match/predicate.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct {
	const char *name;
	uint32_t oid;
	char kind; /* pgo_datum_kind */
	const char *text;
} COLS[] = {
    {"id", PGT_INT8, 't', "42"},
    {"status", PGT_TEXT, 't', "paid"},
    {"amount", PGT_NUMERIC, 't', "120.00"},
    {"big", PGT_NUMERIC, 't', "-12345678901234567890.000123"},
    {"nan", PGT_NUMERIC, 't', "NaN"},
    {"inf", PGT_NUMERIC, 't', "Infinity"},
    {"score", PGT_FLOAT8, 't', "1.5"},
    {"fnan", PGT_FLOAT8, 't', "NaN"},
    {"active", PGT_BOOL, 't', "t"},
    {"nothing", PGT_TEXT, 'n', ""},
    {"blob", PGT_TEXT, 'u', ""},
    {"bin", PGT_INT4, 'b', "\x01\x02"},
    {"created", PGT_TIMESTAMPTZ, 't', "2024-01-15 10:30:00+00"},
    {"local", PGT_TIMESTAMP, 't', "2024-01-15 10:30:00"},
    {"day", PGT_DATE, 't', "2024-01-15"},
    {"at", PGT_TIME, 't', "10:30:00"},
    {"uid", PGT_UUID, 't', "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
    {"raw", PGT_BYTEA, 't', "\\x0102ff"},
    {"doc", PGT_JSONB, 't', "{\"a\": 1}"},
    {"dur", PGT_INTERVAL, 't', "1 day"},
    {"Q", PGT_TEXT, 't', "it's"},
};
#define NCOLS (sizeof(COLS) / sizeof(COLS[0]))

static Cdc__V1__Event *fixed_event(arena *a)
{
	Cdc__V1__Row *rows[2];
	for (int k = 0; k < 2; k++) {
		Cdc__V1__Row *r = arena_alloc(a, sizeof(*r));
		*r = (Cdc__V1__Row)CDC__V1__ROW__INIT;
		r->columns = arena_alloc(a, NCOLS * sizeof(*r->columns));
		/* the old row has every other column, as with REPLICA IDENTITY and a 'K' tuple */
		for (size_t i = 0; i < NCOLS; i += 1 + (size_t)k) {
			Cdc__V1__Column *c = arena_alloc(a, sizeof(*c));
			*c = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
			c->name = (char *)COLS[i].name;
			c->type_oid = COLS[i].oid;
			pgo_datum d = {.kind = (pgo_datum_kind)COLS[i].kind,
				       .len = (uint32_t)strlen(COLS[i].text),
				       .data = COLS[i].text};
			c->value = pgo_event_value(a, NULL, COLS[i].oid, &d);
			r->columns[r->n_columns++] = c;
		}
		rows[k] = r;
	}
	Cdc__V1__Event *e = arena_alloc(a, sizeof(*e));
	*e = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
	e->op = CDC__V1__OP__OP_UPDATE;
	e->new_row = rows[0];
	e->old_row = rows[1];
	return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static arena *fixed, *scratch;
	static Cdc__V1__Event *e, *insert;
	if (!fixed) {
		fixed = arena_new(1 << 16);
		scratch = arena_new(1 << 16);
		e = fixed_event(fixed);
		insert = arena_alloc(fixed, sizeof(*insert));
		*insert = *e;
		insert->op = CDC__V1__OP__OP_INSERT;
		insert->old_row = NULL;
	}
	char *text = malloc(size + 1), err[128];
	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	err[0] = '\0';
	pred *p = match_predicate_parse(text, err, sizeof(err));
	if (!p) {
		if (strncmp(err, "position ", 9) != 0) {
			fprintf(stderr, "rejected without a position: \"%s\"\n", err);
			abort();
		}
		free(text);
		return 0;
	}
	bool t = match_predicate_eval(p, e, scratch), ti = match_predicate_eval(p, insert, scratch);
	/* Its negation parses too (unless that passes a limit) and is never true alongside it. */
	size_t n = strlen(text);
	char *neg = malloc(n + 8);
	if (!neg)
		abort();
	snprintf(neg, n + 8, "not (%s)", text);
	pred *q = match_predicate_parse(neg, err, sizeof(err));
	if (!q && n + 6 <= PRED_MAX_TEXT && !strstr(err, "nesting deeper")) {
		fprintf(stderr, "\"%s\" parses, \"%s\" does not: %s\n", text, neg, err);
		abort();
	}
	if (q && ((t && match_predicate_eval(q, e, scratch)) ||
		  (ti && match_predicate_eval(q, insert, scratch)))) {
		fprintf(stderr, "\"%s\" and its negation both match\n", text);
		abort();
	}
	match_predicate_free(q);
	pred_column cols[NCOLS];
	for (size_t i = 0; i < NCOLS; i++)
		cols[i] = (pred_column){COLS[i].name, COLS[i].oid, pgo_types_builtin_name(COLS[i].oid)};
	pred_kind root = match_predicate_node_at(p, match_predicate_root(p)).kind;
	if (!match_predicate_check_columns(p, cols, NCOLS, false, scratch, err, sizeof(err)) &&
	    (root == PRED_CMP || root == PRED_IN || root == PRED_ISNULL) && (t || ti)) {
		fprintf(stderr, "\"%s\" matches, but the check says: %s\n", text, err);
		abort();
	}
	match_predicate_free(p);
	arena_reset(scratch);
	free(neg);
	free(text);
	return 0;
}

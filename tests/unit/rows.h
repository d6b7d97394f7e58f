/* rows.h: events' columns and rows for the unit tests of the Kafka formats, made as the decoder
 * makes them from the server's text: col() (text NULL: SQL NULL, TOAST: unchanged TOAST) and
 * row(), in the test's arena A. */
#ifndef CDC_TEST_ROWS_H
#define CDC_TEST_ROWS_H

#include <stdarg.h>

#include "decoder/base/arena.h"
#include "decoder/event.h"

static arena *A;
static const char TOAST[] = "(toast)";

static Cdc__V1__Column *col(const char *name, uint32_t oid, int32_t typmod, const char *text)
{
	Cdc__V1__Column *c = arena_alloc(A, sizeof(*c));
	*c = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
	c->name = (char *)name;
	c->type_oid = oid;
	if (typmod >= 0) {
		c->type_modifier_present_case = CDC__V1__COLUMN__TYPE_MODIFIER_PRESENT_TYPE_MODIFIER;
		c->type_modifier = typmod;
	}
	pgo_datum d = text == TOAST ? (pgo_datum){.kind = PGO_TOAST}
		      : text ? (pgo_datum){.kind = PGO_TEXT, .len = (uint32_t)strlen(text), .data = text}
			     : (pgo_datum){.kind = PGO_NULL};
	c->value = pgo_event_value(A, NULL, oid, &d);
	return c;
}

static Cdc__V1__Row *row(size_t n, ...)
{
	Cdc__V1__Row *r = arena_alloc(A, sizeof(*r));
	*r = (Cdc__V1__Row)CDC__V1__ROW__INIT;
	r->n_columns = n;
	r->columns = arena_alloc(A, (n ? n : 1) * sizeof(*r->columns));
	va_list ap;
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		r->columns[i] = va_arg(ap, Cdc__V1__Column *);
	va_end(ap);
	return r;
}

#endif

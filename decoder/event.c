/* event.c: turns decoded pgoutput changes into cdc.v1.Event messages, converting each column from
 * PostgreSQL's text output (DateStyle=ISO, TimeZone=UTC, extra_float_digits=3, bytea_output=hex)
 * to a typed Value. Hot path: arena memory only, small length-aware parsers, no malloc or sscanf. */
#include "decoder/event.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/util.h"
#include "decoder/pgtypes.h"
#include "decoder/text.h"

#define USECS_PER_SEC INT64_C(1000000)
#define USECS_PER_DAY INT64_C(86400000000)

static bool span_is(const char *s, size_t n, const char *lit)
{
	size_t l = strlen(lit);
	return n == l && memcmp(s, lit, l) == 0;
}

/* int2, int4, int8, oid: an optional '-' and digits, INT64_MIN..INT64_MAX. */
static bool parse_int64(const char *s, size_t n, int64_t *out)
{
	const char *end = s + n;
	bool neg = false;
	if (s < end && *s == '-') {
		neg = true;
		s++;
	}
	if (s == end || end - s > 19)
		return false;
	uint64_t v = 0;
	for (; s < end; s++) {
		unsigned d = (unsigned char)(*s - '0');
		if (d > 9)
			return false;
		v = v * 10 + d; /* 19 digits fit in a uint64_t */
	}
	if (neg) {
		if (v > (uint64_t)INT64_MAX + 1)
			return false;
		*out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
	} else {
		if (v > (uint64_t)INT64_MAX)
			return false;
		*out = (int64_t)v;
	}
	return true;
}

/* Clinger's fast path for the common case: at most 15 digits and no exponent. m < 10^15 and 10^k
 * (k <= 15) are exact doubles, so m / 10^k is correctly rounded, exactly what strtod() returns. */
static bool parse_short_decimal(const char *s, size_t n, double *out)
{
	static const double pow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,	 1e6,  1e7,
				       1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
	const char *p = s, *end = s + n;
	bool neg = p < end && *p == '-';
	p += neg;
	uint64_t m = 0;
	int digits = 0, frac = -1; /* digits after the point; -1 before one */
	for (; p < end && digits <= 15; p++) {
		if (*p == '.' && frac < 0) {
			frac = 0;
			continue;
		}
		unsigned d = (unsigned char)(*p - '0');
		if (d > 9)
			return false;
		m = m * 10 + d;
		digits++;
		frac += frac >= 0;
	}
	if (p != end || digits == 0 || digits > 15 || frac == 0)
		return false;
	double v = (double)m / pow10[frac < 0 ? 0 : frac];
	*out = neg ? -v : v;
	return true;
}

/* float4, float8. The server prints the shortest text that round-trips, so parsing it as a double
 * gives the value (for float4, the double nearest the printed decimal: 1.1, not 1.10000002384). */
static bool parse_float(const char *s, size_t n, double *out)
{
	if (span_is(s, n, "NaN")) {
		*out = NAN;
		return true;
	}
	if (span_is(s, n, "Infinity")) {
		*out = INFINITY;
		return true;
	}
	if (span_is(s, n, "-Infinity")) {
		*out = -INFINITY;
		return true;
	}
	if (parse_short_decimal(s, n, out))
		return true;
	char tmp[64];
	if (n == 0 || n >= sizeof(tmp))
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= '0' && ch <= '9') || ch == '.' || ch == 'e' || ch == 'E' || ch == '-' ||
		      ch == '+'))
			return false;
	}
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	char *endp;
	double v = strtod(tmp, &endp);
	if (endp != tmp + n || isinf(v))
		return false;
	*out = v;
	return true;
}

/* bytea in hex output: "\x" and two hex digits per byte. */
static bool parse_bytea(arena *a, const char *s, size_t n, ProtobufCBinaryData *out)
{
	if (n < 2 || s[0] != '\\' || s[1] != 'x' || (n & 1))
		return false;
	size_t len = (n - 2) / 2;
	uint8_t *d = len ? arena_alloc(a, len) : NULL;
	for (size_t i = 0; i < len; i++) {
		int hi = util_hex_digit(s[2 + 2 * i]), lo = util_hex_digit(s[3 + 2 * i]);
		if (hi < 0 || lo < 0)
			return false; /* the arena keeps the bytes until reset: harmless */
		d[i] = (uint8_t)(hi << 4 | lo);
	}
	out->len = len;
	out->data = d;
	return true;
}

/* uuid: 8-4-4-4-12 hex digits. */
static bool parse_uuid(arena *a, const char *s, size_t n, ProtobufCBinaryData *out)
{
	if (n != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
		return false;
	uint8_t b[16];
	size_t j = 0;
	for (size_t i = 0; i < 36 && j < 16; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23)
			continue;
		int hi = util_hex_digit(s[i]), lo = util_hex_digit(s[i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		b[j++] = (uint8_t)(hi << 4 | lo);
		i++;
	}
	out->len = 16;
	out->data = memcpy(arena_alloc(a, 16), b, 16);
	return true;
}

/* Proleptic Gregorian calendar with astronomical years (1 BC is year 0), as PostgreSQL counts. */
static bool is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days since 1970-01-01 (Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD" (four or more year digits), year as printed (BC is applied by the caller). */
static bool cur_date(cur *c, int64_t *y, int64_t *m, int64_t *d)
{
	static const int8_t mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	if (!cur_digits(c, 4, 9, y) || !cur_eat(c, '-') || !cur_digits(c, 2, 2, m) || !cur_eat(c, '-') ||
	    !cur_digits(c, 2, 2, d))
		return false;
	return *y >= 1 && *m >= 1 && *m <= 12 && *d >= 1 && *d <= mdays[*m - 1];
}

/* Checks February 29 against the (astronomical) year, once BC has been applied. */
static bool date_valid(int64_t y, int64_t m, int64_t d)
{
	return !(m == 2 && d == 29 && !is_leap(y));
}

/* "YYYY-MM-DD HH:MM:SS" read at fixed places, the layout PostgreSQL prints for the years 1 to 9999 (as
 * 0001 to 9999). Nearly every timestamp has it, and the general parser's loops cost a backfill about 170
 * instructions a row more (callgrind). False when s does not start so (a longer year, a field out of
 * range), and the general parser reads it then. The checks are cur_date's and cur_hms's. */
static bool fixed_date_time(cur *c, int64_t *y, int64_t *m, int64_t *d, int64_t *tod)
{
	static const int8_t mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *s = c->p;
	if (c->end - s < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':')
		return false;
	int yh = text_two_digits(s), yl = text_two_digits(s + 2), mo = text_two_digits(s + 5),
	    dd = text_two_digits(s + 8), hh = text_two_digits(s + 11), mi = text_two_digits(s + 14),
	    ss = text_two_digits(s + 17);
	if ((yh | yl | mo | dd | hh | mi | ss) < 0 || mo < 1 || mo > 12 || dd < 1 || dd > mdays[mo - 1] ||
	    mi > 59 || ss > 59 || (yh | yl) == 0)
		return false;
	*y = yh * 100 + yl;
	*m = mo;
	*d = dd;
	*tod = ((int64_t)(hh * 60 + mi) * 60 + ss) * USECS_PER_SEC;
	c->p = s + 19;
	return true;
}

/* "HH:MM:SS[.f{1,6}]", 24:00:00 allowed as PostgreSQL allows it. */
static bool cur_time(cur *c, int64_t *us)
{
	return cur_hms(c, 2, us) && *us <= USECS_PER_DAY;
}

static bool parse_date(const char *s, size_t n, int32_t *out)
{
	if (span_is(s, n, "infinity")) {
		*out = INT32_MAX;
		return true;
	}
	if (span_is(s, n, "-infinity")) {
		*out = INT32_MIN;
		return true;
	}
	cur c = {s, s + n};
	int64_t y, m, d;
	if (!cur_date(&c, &y, &m, &d))
		return false;
	if (cur_lit(&c, " BC", 3))
		y = 1 - y;
	if (c.p != c.end || !date_valid(y, m, d))
		return false;
	int64_t days = days_from_civil(y, m, d);
	if (days <= INT32_MIN || days >= INT32_MAX)
		return false;
	*out = (int32_t)days;
	return true;
}

static bool parse_time(const char *s, size_t n, int64_t *out)
{
	cur c = {s, s + n};
	return cur_time(&c, out) && c.p == c.end;
}

/* "YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM[:SS]]][ BC]": the offset is required with a zone and
 * refused without. Values whose Unix-epoch microseconds do not fit an int64 (after 294247 AD) fail. */
static bool parse_timestamp(const char *s, size_t n, bool with_zone, int64_t *out)
{
	if (span_is(s, n, "infinity")) {
		*out = INT64_MAX;
		return true;
	}
	if (span_is(s, n, "-infinity")) {
		*out = INT64_MIN;
		return true;
	}
	cur c = {s, s + n};
	int64_t y, m, d, tod, frac, off = 0;
	if (fixed_date_time(&c, &y, &m, &d, &tod)) {
		if (!cur_fraction(&c, &frac) || (tod += frac) > USECS_PER_DAY)
			return false;
	} else if (!cur_date(&c, &y, &m, &d) || !cur_eat(&c, ' ') || !cur_time(&c, &tod)) {
		return false;
	}
	if (c.p < c.end && (*c.p == '+' || *c.p == '-')) {
		if (!with_zone || !cur_offset(&c, &off))
			return false;
	} else if (with_zone) {
		return false;
	}
	if (cur_lit(&c, " BC", 3))
		y = 1 - y;
	if (c.p != c.end || !date_valid(y, m, d))
		return false;
	/* Years have at most 9 digits, so days * USECS_PER_DAY needs checking, the rest cannot wrap. */
	int64_t us;
	if (__builtin_mul_overflow(days_from_civil(y, m, d), USECS_PER_DAY, &us) ||
	    __builtin_add_overflow(us, tod, &us) || __builtin_sub_overflow(us, off, &us))
		return false;
	if (us == INT64_MAX || us == INT64_MIN) /* reserved for infinity */
		return false;
	*out = us;
	return true;
}

/* "oid:N" for a type nobody named. */
static char *oid_name(arena *a, uint32_t oid)
{
	char tmp[16], *p = tmp + sizeof(tmp);
	do {
		*--p = (char)('0' + oid % 10);
		oid /= 10;
	} while (oid);
	size_t n = (size_t)(tmp + sizeof(tmp) - p);
	char *s = arena_alloc(a, 4 + n + 1);
	memcpy(s, "oid:", 4);
	memcpy(s + 4, p, n);
	return s;
}

static const char *type_name(arena *a, const pgo_relcache *rc, uint32_t oid)
{
	const char *name = pgo_types_builtin_name(oid);
	if (name)
		return name; /* static */
	/* Copied: the cache may replace the name before the event is sent. */
	if (rc && (name = pgo_type_name_of(rc, oid)))
		return arena_strndup(a, name, strlen(name));
	return oid_name(a, oid);
}

static void set_other(arena *a, const pgo_relcache *rc, uint32_t oid, const pgo_datum *d, Cdc__V1__Value *v)
{
	Cdc__V1__Other *o = arena_alloc(a, sizeof(*o));
	*o = (Cdc__V1__Other)CDC__V1__OTHER__INIT;
	o->type_name = (char *)type_name(a, rc, oid);
	o->text = arena_strndup(a, d->data, d->len);
	v->kind_case = CDC__V1__VALUE__KIND_OTHER_VALUE;
	v->other_value = o;
}

/* Fills *v (already CDC__V1__VALUE__INIT'ed). Text that does not parse as its type becomes
 * other_value rather than failing the event: the consumer still gets the server's text. */
static void value_fill(arena *a, const pgo_relcache *rc, uint32_t oid, const pgo_datum *d, Cdc__V1__Value *v)
{
	switch (d->kind) {
	case PGO_NULL:
		v->kind_case = CDC__V1__VALUE__KIND_NULL_VALUE;
		v->null_value = true;
		return;
	case PGO_TOAST:
		v->kind_case = CDC__V1__VALUE__KIND_UNCHANGED_TOAST;
		v->unchanged_toast = true;
		return;
	case PGO_BINARY:
		v->kind_case = CDC__V1__VALUE__KIND_BINARY_VALUE;
		v->binary_value.len = d->len;
		v->binary_value.data = d->len ? memcpy(arena_alloc(a, d->len), d->data, d->len) : NULL;
		return;
	case PGO_TEXT:
		break;
	default:
		/* Not produced by the parser; keep whatever bytes there are. */
		set_other(a, rc, oid, d, v);
		return;
	}

	const char *s = d->data;
	size_t n = d->len;
	switch (oid) {
	case PGT_INT2:
	case PGT_INT4:
	case PGT_INT8:
	case PGT_OID:
		if (!parse_int64(s, n, &v->int_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_INT_VALUE;
		return;
	case PGT_FLOAT4:
	case PGT_FLOAT8:
		if (!parse_float(s, n, &v->float_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_FLOAT_VALUE;
		return;
	case PGT_BOOL:
		if (n != 1 || (s[0] != 't' && s[0] != 'f'))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_BOOL_VALUE;
		v->bool_value = s[0] == 't';
		return;
	case PGT_NUMERIC:
		v->kind_case = CDC__V1__VALUE__KIND_NUMERIC_VALUE;
		v->numeric_value = arena_strndup(a, s, n);
		return;
	case PGT_TEXT:
	case PGT_VARCHAR:
	case PGT_BPCHAR:
	case PGT_NAME:
	case PGT_CHAR:
		v->kind_case = CDC__V1__VALUE__KIND_TEXT_VALUE;
		v->text_value = arena_strndup(a, s, n);
		return;
	case PGT_BYTEA:
		if (!parse_bytea(a, s, n, &v->bytes_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_BYTES_VALUE;
		return;
	case PGT_UUID:
		if (!parse_uuid(a, s, n, &v->uuid_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_UUID_VALUE;
		return;
	case PGT_DATE:
		if (!parse_date(s, n, &v->date_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_DATE_VALUE;
		return;
	case PGT_TIME:
		if (!parse_time(s, n, &v->time_value))
			break;
		v->kind_case = CDC__V1__VALUE__KIND_TIME_VALUE;
		return;
	case PGT_TIMESTAMP:
	case PGT_TIMESTAMPTZ: {
		int64_t us;
		bool with_zone = oid == PGT_TIMESTAMPTZ;
		if (!parse_timestamp(s, n, with_zone, &us))
			break;
		Cdc__V1__Timestamp *ts = arena_alloc(a, sizeof(*ts));
		*ts = (Cdc__V1__Timestamp)CDC__V1__TIMESTAMP__INIT;
		ts->micros = us;
		ts->with_zone = with_zone;
		v->kind_case = CDC__V1__VALUE__KIND_TIMESTAMP_VALUE;
		v->timestamp_value = ts;
		return;
	}
	case PGT_JSON:
	case PGT_JSONB:
		v->kind_case = CDC__V1__VALUE__KIND_JSON_VALUE;
		v->json_value = arena_strndup(a, s, n);
		return;
	default:
		break;
	}
	*v = (Cdc__V1__Value)CDC__V1__VALUE__INIT; /* a failed parser may have written into the union */
	set_other(a, rc, oid, d, v);
}

Cdc__V1__Value *pgo_event_value(arena *a, const pgo_relcache *rc, uint32_t type_oid, const pgo_datum *d)
{
	Cdc__V1__Value *v = arena_alloc(a, sizeof(*v));
	*v = (Cdc__V1__Value)CDC__V1__VALUE__INIT;
	value_fill(a, rc, type_oid, d, v);
	return v;
}

Cdc__V1__Value__KindCase pgo_event_type_kind(uint32_t type_oid)
{
	switch (type_oid) { /* as value_fill */
	case PGT_INT2:
	case PGT_INT4:
	case PGT_INT8:
	case PGT_OID:
		return CDC__V1__VALUE__KIND_INT_VALUE;
	case PGT_FLOAT4:
	case PGT_FLOAT8:
		return CDC__V1__VALUE__KIND_FLOAT_VALUE;
	case PGT_BOOL:
		return CDC__V1__VALUE__KIND_BOOL_VALUE;
	case PGT_NUMERIC:
		return CDC__V1__VALUE__KIND_NUMERIC_VALUE;
	case PGT_TEXT:
	case PGT_VARCHAR:
	case PGT_BPCHAR:
	case PGT_NAME:
	case PGT_CHAR:
		return CDC__V1__VALUE__KIND_TEXT_VALUE;
	case PGT_BYTEA:
		return CDC__V1__VALUE__KIND_BYTES_VALUE;
	case PGT_UUID:
		return CDC__V1__VALUE__KIND_UUID_VALUE;
	case PGT_DATE:
		return CDC__V1__VALUE__KIND_DATE_VALUE;
	case PGT_TIME:
		return CDC__V1__VALUE__KIND_TIME_VALUE;
	case PGT_TIMESTAMP:
	case PGT_TIMESTAMPTZ:
		return CDC__V1__VALUE__KIND_TIMESTAMP_VALUE;
	case PGT_JSON:
	case PGT_JSONB:
		return CDC__V1__VALUE__KIND_JSON_VALUE;
	default:
		return CDC__V1__VALUE__KIND_OTHER_VALUE;
	}
}

Cdc__V1__Event *pgo_event_alloc(arena *a, Cdc__V1__Op op, const pgo_rel *rel)
{
	Cdc__V1__Event *e = arena_alloc_raw(a, sizeof(*e));
	*e = (Cdc__V1__Event)CDC__V1__EVENT__INIT;
	e->op = op;
	if (rel) {
		e->schema = rel->nspname;
		e->table = rel->relname;
		e->relation_id = rel->relid;
	}
	return e;
}

/* Converts tuple t into one Column per relation column, indexed like rel->cols; with keys_only,
 * only the replica identity columns (the others are NULL entries). */
static Cdc__V1__Column **convert_tuple(arena *a, const pgo_relcache *rc, const pgo_rel *rel,
				       const pgo_tuple *t, bool keys_only, size_t nkeys)
{
	size_t ncols = rel->ncols, n = keys_only ? nkeys : ncols;
	Cdc__V1__Column **cols = arena_alloc(a, ncols * sizeof(*cols));
	/* each assigned whole below */
	Cdc__V1__Column *c = arena_alloc_raw(a, n * sizeof(*c));
	Cdc__V1__Value *v = arena_alloc_raw(a, n * sizeof(*v));
	for (size_t i = 0; i < ncols; i++) {
		if (keys_only && !(rel->cols[i].flags & 1))
			continue;
		*c = (Cdc__V1__Column)CDC__V1__COLUMN__INIT;
		*v = (Cdc__V1__Value)CDC__V1__VALUE__INIT;
		c->name = (char *)rel->cols[i].name; /* borrowed: see event.h */
		c->type_oid = rel->cols[i].type_oid;
		if (rel->cols[i].typmod >= 0) {
			c->type_modifier_present_case = CDC__V1__COLUMN__TYPE_MODIFIER_PRESENT_TYPE_MODIFIER;
			c->type_modifier = rel->cols[i].typmod;
		}
		c->value = v;
		value_fill(a, rc, rel->cols[i].type_oid, &t->cols[i], v);
		cols[i] = c++;
		v++;
	}
	return cols;
}

/* A Row of the non-NULL entries of cols (which it reuses when there are none). */
static Cdc__V1__Row *make_row(arena *a, Cdc__V1__Column **cols, size_t ncols, size_t n)
{
	Cdc__V1__Row *r = arena_alloc(a, sizeof(*r));
	*r = (Cdc__V1__Row)CDC__V1__ROW__INIT;
	r->n_columns = n;
	if (n == ncols) {
		r->columns = cols;
		return r;
	}
	r->columns = arena_alloc(a, (n ? n : 1) * sizeof(*r->columns));
	for (size_t i = 0, j = 0; i < ncols; i++)
		if (cols[i])
			r->columns[j++] = cols[i];
	return r;
}

static bool is_toast(const Cdc__V1__Column *c)
{
	return c->value->kind_case == CDC__V1__VALUE__KIND_UNCHANGED_TOAST;
}

bool pgo_event_from_change(arena *a, const pgo_relcache *rc, const pgo_rel *rel, const pgo_msg *m,
			   Cdc__V1__Event **out, char *err, size_t errlen)
{
	Cdc__V1__Op op;
	bool has_new, has_old;
	char old_kind = m->change.old_kind;
	switch (m->type) {
	case PGO_INSERT:
		op = CDC__V1__OP__OP_INSERT;
		has_new = true;
		has_old = false;
		break;
	case PGO_UPDATE:
		op = CDC__V1__OP__OP_UPDATE;
		has_new = true;
		has_old = old_kind == 'K' || old_kind == 'O';
		break;
	case PGO_DELETE:
		op = CDC__V1__OP__OP_DELETE;
		has_new = false;
		has_old = old_kind == 'K' || old_kind == 'O';
		break;
	default:
		return util_errf(err, errlen, "cannot build a change event from a %s message",
				 pgo_type_name(m->type));
	}
	if (has_new && m->change.new.ncols != rel->ncols)
		return util_errf(err, errlen, "%s for %s.%s: new tuple has %u columns, relation has %u",
				 pgo_type_name(m->type), rel->nspname, rel->relname, m->change.new.ncols,
				 rel->ncols);
	if (has_old && m->change.old.ncols != rel->ncols)
		return util_errf(err, errlen, "%s for %s.%s: old tuple has %u columns, relation has %u",
				 pgo_type_name(m->type), rel->nspname, rel->relname, m->change.old.ncols,
				 rel->ncols);

	Cdc__V1__Event *e = pgo_event_alloc(a, op, rel);
	size_t ncols = rel->ncols, nkeys = 0;
	for (size_t i = 0; i < ncols; i++)
		nkeys += rel->cols[i].flags & 1;

	Cdc__V1__Column **newc = NULL, **oldc = NULL;
	if (has_new) {
		newc = convert_tuple(a, rc, rel, &m->change.new, false, nkeys);
		e->new_row = make_row(a, newc, ncols, ncols);
	}
	if (has_old) {
		bool keys_only = old_kind == 'K'; /* the other columns were sent as NULLs: not values */
		oldc = convert_tuple(a, rc, rel, &m->change.old, keys_only, nkeys);
		e->old_row = make_row(a, oldc, ncols, keys_only ? nkeys : ncols);
	}

	/* The key identifies the row as it was before the change: see event.h. Key columns share
	 * their Column structs with old_row or new_row. */
	if (nkeys && (newc || oldc)) {
		Cdc__V1__Row *k = arena_alloc(a, sizeof(*k));
		*k = (Cdc__V1__Row)CDC__V1__ROW__INIT;
		k->columns = arena_alloc(a, nkeys * sizeof(*k->columns));
		for (size_t i = 0; i < ncols; i++) {
			if (!(rel->cols[i].flags & 1))
				continue;
			Cdc__V1__Column *c = oldc ? oldc[i] : NULL;
			if (!c || (is_toast(c) && newc))
				c = newc[i];
			k->columns[k->n_columns++] = c;
		}
		e->key = k;
	}
	*out = e;
	return true;
}

Cdc__V1__Event *pgo_event_from_truncate(arena *a, const pgo_rel *rel, uint8_t flags)
{
	Cdc__V1__Event *e = pgo_event_alloc(a, CDC__V1__OP__OP_TRUNCATE, rel);
	Cdc__V1__Truncate *t = arena_alloc(a, sizeof(*t));
	*t = (Cdc__V1__Truncate)CDC__V1__TRUNCATE__INIT;
	t->cascade = (flags & 1) != 0;
	t->restart_identity = (flags & 2) != 0;
	e->truncate = t;
	return e;
}

Cdc__V1__Event *pgo_event_from_message(arena *a, const pgo_msg *m)
{
	Cdc__V1__Event *e = pgo_event_alloc(a, CDC__V1__OP__OP_MESSAGE, NULL);
	Cdc__V1__LogicalMessage *lm = arena_alloc(a, sizeof(*lm));
	*lm = (Cdc__V1__LogicalMessage)CDC__V1__LOGICAL_MESSAGE__INIT;
	const char *prefix = m->message.prefix ? m->message.prefix : "";
	lm->prefix = arena_strndup(a, prefix, strlen(prefix));
	lm->content.len = m->message.len;
	lm->content.data = m->message.len
			       ? memcpy(arena_alloc(a, m->message.len), m->message.content, m->message.len)
			       : NULL;
	lm->transactional = (m->message.flags & 1) != 0;
	e->message = lm;
	e->lsn = m->message.lsn; /* the message's own position; callers may overwrite */
	return e;
}

const char *pgo_event_op_name(Cdc__V1__Op op)
{
	switch (op) {
	case CDC__V1__OP__OP_INSERT:
		return "insert";
	case CDC__V1__OP__OP_UPDATE:
		return "update";
	case CDC__V1__OP__OP_DELETE:
		return "delete";
	case CDC__V1__OP__OP_TRUNCATE:
		return "truncate";
	case CDC__V1__OP__OP_MESSAGE:
		return "message";
	case CDC__V1__OP__OP_READ:
		return "read";
	case CDC__V1__OP__OP_SCHEMA:
		return "schema";
	case CDC__V1__OP__OP_DDL:
		return "ddl";
	default:
		return NULL;
	}
}

Cdc__V1__Column **pgo_event_new_key(const Cdc__V1__Event *event, Cdc__V1__Column **cols)
{
	for (size_t i = 0; i < event->key->n_columns; i++) {
		cols[i] = event->key->columns[i];
		for (size_t j = 0; event->new_row && j < event->new_row->n_columns; j++) {
			const Cdc__V1__Column *c = event->new_row->columns[j];
			if (strcmp(c->name, cols[i]->name) == 0 && c->value &&
			    c->value->kind_case != CDC__V1__VALUE__KIND_UNCHANGED_TOAST)
				cols[i] = (Cdc__V1__Column *)c;
		}
	}
	return cols;
}

/* See debezium.h. The shapes follow Debezium 3.6's PostgreSQL connector in its default modes, as Kafka
 * Connect's JsonConverter writes them. README "Debezium-compatible records" has the mapping and what
 * differs. */
#include "sinks/debezium.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "decoder/base/arena.h"
#include "decoder/base/json.h"
#include "decoder/event.h"
#include "decoder/pgtypes.h"
#include "decoder/text.h"
#include "sinks/event_json.h"

/* The default modes are decimal.handling.mode=precise, time.precision.mode=adaptive,
 * binary.handling.mode=bytes and interval.handling.mode=numeric. Values the decoder left as text
 * (timetz, interval, bit, money, point) are read here. Anything that does not read becomes null. */

#define LIT(b, s) buf_append((b), (s), sizeof(s) - 1)
#define USECS_PER_SEC INT64_C(1000000)
#define USECS_PER_DAY INT64_C(86400000000)

/* A mark in a rendered value is this byte, then which value sink_debezium_complete() writes there. JSON text
 * never holds a raw control character (strings escape them), so a mark cannot be mistaken. */
#define MARK '\x01'
enum {
	M_SOURCE_MS = 'a', /* source.ts_ms, the commit time */
	M_SEQUENCE,	   /* the sequence's first LSN, the commit's */
	M_SOURCE_US,
	M_SOURCE_NS,
	M_TRANSACTION, /* the transaction block, or null */
	M_NOW_MS,      /* the envelope's ts_ms, when the record is produced */
	M_NOW_US,
	M_NOW_NS,
};

static void mark(buf *b, char m)
{
	char x[2] = {MARK, m};
	buf_append(b, x, 2);
}

void sink_debezium_scratch_free(dbz_scratch *s)
{
	free(s->limbs);
	free(s->cols);
	free(s->key_after);
	buf_free(&s->new_key);
	buf_free(&s->old_key);
	sink_debezium_schemas_free(&s->schemas);
	buf_free(&s->digits);
	buf_free(&s->bytes);
	buf_free(&s->text);
	buf_free(&s->elems);
	buf_free(&s->spans);
	if (s->arena)
		arena_free(s->arena);
	*s = (dbz_scratch){0};
}

/* Numbers ---------------------------------------------------------------------------------------- */

/* The shortest digits (no trailing zeros) that read back as v, as a float when single, and the decimal
 * exponent of the first. So v = d[0].d[1]... x 10^*exp. */
static size_t shortest(double v, bool single, char *d, int *exp)
{
	char tmp[40];
	float f = (float)v;
	int lo = single ? 6 : 15, hi = single ? 9 : 17;
	for (int p = lo; p <= hi; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, single ? (double)f : v);
		if (p == hi || (single ? strtof(tmp, NULL) == f : strtod(tmp, NULL) == v))
			break;
	}
	/* [-]d.ddde[+-]xx */
	const char *p = tmp + (tmp[0] == '-');
	size_t n = 0;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			d[n++] = *p;
	*exp = *p ? atoi(p + 1) : 0;
	while (n > 1 && d[n - 1] == '0')
		n--;
	return n;
}

/* v as Java's Double.toString (Float.toString when single) writes it. That is what Jackson writes for Kafka
 * Connect's float64 (float32).
 * - It has the shortest digits that read back as the value.
 * - It is plain from 10^-3 up to 10^7 ("100.0", "0.001"), else d.dddE[-]n ("1.0E7", "1.5E-4").
 * - NaN and the infinities are strings, as Jackson quotes them. */
static void put_java_double(buf *b, double v, bool single)
{
	if (single) /* the float a float4 column holds (a text past its range is out of it, so infinite) */
		v = (double)(float)v;
	if (json_nonfinite(b, v))
		return;
	if (signbit(v))
		buf_putc(b, '-');
	if (v == 0) {
		LIT(b, "0.0");
		return;
	}
	char d[24];
	int e;
	size_t n = shortest(fabs(v), single, d, &e);
	if (e >= -3 && e < 7) {
		if (e < 0) {
			LIT(b, "0.");
			for (int i = -1; i > e; i--)
				buf_putc(b, '0');
			buf_append(b, d, n);
			return;
		}
		for (int i = 0; i <= e; i++)
			buf_putc(b, (size_t)i < n ? d[i] : '0');
		buf_putc(b, '.');
		if ((size_t)e + 1 < n)
			buf_append(b, d + e + 1, n - (size_t)e - 1);
		else
			buf_putc(b, '0');
		return;
	}
	buf_putc(b, d[0]);
	buf_putc(b, '.');
	if (n > 1)
		buf_append(b, d + 1, n - 1);
	else
		buf_putc(b, '0');
	buf_putc(b, 'E');
	json_i64(b, e);
}

/* The two's-complement big-endian bytes of a decimal digit string's value (negated when neg), into d's p and
 * len. They are written as Java's BigInteger.toByteArray() writes them (the fewest bytes, at least one).
 * Kafka Connect's Decimal and Debezium's VariableScaleDecimal hold this. digits must not be in s->bytes,
 * which holds the bytes. */
static void unscaled(dbz_scratch *s, bool neg, const char *digits, size_t n, dbz_datum *d)
{
	static const uint32_t pow10[] = {1,	 10,	  100,	    1000,      10000,
					 100000, 1000000, 10000000, 100000000, 1000000000};
	while (n && *digits == '0')
		digits++, n--;
	size_t need = n / 9 + 2;
	if (s->cap < need) {
		s->cap = need * 2;
		s->limbs = util_xrealloc(s->limbs, s->cap * sizeof(*s->limbs));
	}
	size_t nl = 0; /* little-endian base-2^32 limbs */
	for (size_t i = 0; i < n;) {
		size_t k = n - i < 9 ? n - i : 9;
		uint64_t carry = 0;
		for (size_t j = 0; j < k; j++)
			carry = carry * 10 + (uint64_t)(digits[i + j] - '0');
		for (size_t j = 0; j < nl; j++) {
			uint64_t t = (uint64_t)s->limbs[j] * pow10[k] + carry;
			s->limbs[j] = (uint32_t)t;
			carry = t >> 32;
		}
		if (carry)
			s->limbs[nl++] = (uint32_t)carry;
		i += k;
	}
	buf_reset(&s->bytes);
	buf_reserve(&s->bytes, nl * 4 + 2);
	uint8_t *o = (uint8_t *)s->bytes.data + 1; /* room for a sign byte in front */
	size_t len = 0;
	for (size_t j = nl; j-- > 0;)
		for (int sh = 24; sh >= 0; sh -= 8)
			o[len++] = (uint8_t)(s->limbs[j] >> sh);
	size_t skip = 0;
	while (skip < len && o[skip] == 0)
		skip++;
	o += skip;
	len -= skip;
	if (len == 0) {
		o[0] = 0; /* zero takes one byte */
		len = 1;
	} else if (neg) {
		bool carry = true; /* invert and add one */
		for (size_t j = len; j-- > 0;) {
			o[j] = (uint8_t)~o[j];
			if (carry)
				carry = ++o[j] == 0;
		}
		if (!(o[0] & 0x80)) /* the magnitude needs its top bit, so add a sign byte */
			*--o = 0xff, len++;
	} else if (o[0] & 0x80) {
		*--o = 0, len++;
	}
	d->p = (const char *)o;
	d->len = len;
}

/* A decimal's text as PostgreSQL prints it ([-]digits[.digits]). False for NaN, the infinities and anything
 * else. */
typedef struct decimal {
	bool neg;
	const char *in, *frac; /* the integer and fractional digits */
	size_t nin, nfrac;
} decimal;

static bool decimal_read(const char *t, size_t n, decimal *d)
{
	const char *p = t, *end = t + n;
	*d = (decimal){.neg = p < end && *p == '-'};
	p += p < end && (*p == '-' || *p == '+');
	d->in = p;
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	d->nin = (size_t)(p - d->in);
	if (p < end && *p == '.') {
		d->frac = ++p;
		while (p < end && *p >= '0' && *p <= '9')
			p++;
		d->nfrac = (size_t)(p - d->frac);
	}
	return p == end && d->nin + d->nfrac > 0;
}

/* Kafka Connect's Decimal at scale (DD_BYTES). False when the value does not have that scale exactly (as
 * BigDecimal.setScale() without rounding refuses it). */
static bool decimal_bytes(dbz_scratch *s, const decimal *d, int scale, dbz_datum *out)
{
	size_t keep = d->nfrac;
	while (keep && d->frac[keep - 1] == '0')
		keep--;
	buf *dig = &s->digits;
	buf_reset(dig);
	if (scale >= 0) {
		if (keep > (size_t)scale)
			return false;
		buf_append(dig, d->in, d->nin);
		buf_append(dig, d->frac, keep);
		for (size_t i = keep; i < (size_t)scale; i++)
			buf_putc(dig, '0');
	} else {
		size_t drop = (size_t)-scale, zeros = 0;
		while (zeros < d->nin && d->in[d->nin - 1 - zeros] == '0')
			zeros++;
		if (keep || (zeros < drop && zeros < d->nin))
			return false;
		buf_append(dig, d->in, d->nin > drop ? d->nin - drop : 0);
	}
	out->kind = DD_BYTES;
	unscaled(s, d->neg, dig->data, dig->len, out);
	return true;
}

/* Debezium's VariableScaleDecimal, the scale and the value without trailing zeros. */
static void variable_decimal(dbz_scratch *s, const decimal *d, dbz_datum *out)
{
	size_t keep = d->nfrac;
	while (keep && d->frac[keep - 1] == '0')
		keep--;
	buf_reset(&s->digits);
	buf_append(&s->digits, d->in, d->nin);
	buf_append(&s->digits, d->frac, keep);
	out->kind = DD_VDECIMAL;
	out->i = (int64_t)keep;
	unscaled(s, d->neg, s->digits.data, s->digits.len, out);
}

/* Text the decoder left for Debezium's types -------------------------------------------------- */

/* timetz ("13:51:30.123+02", "...-05:30:15") as microseconds of the day in UTC. */
static bool read_timetz(const char *t, size_t n, int64_t *us)
{
	cur c = {t, t + n};
	int64_t tod, off;
	if (!cur_hms(&c, 2, &tod) || !cur_offset(&c, &off) || c.p != c.end)
		return false;
	int64_t v = (tod - off) % USECS_PER_DAY;
	*us = v < 0 ? v + USECS_PER_DAY : v;
	return true;
}

/* An interval in the postgres style ("1 year 2 mons -3 days +04:05:06.78") as Debezium's MicroDuration. Its
 * parts are read as pgjdbc's PGInterval reads them. They are counted with 365.25 / 12 days a month, in double
 * arithmetic as Debezium does. */
static bool read_interval(const char *t, size_t n, int64_t *us)
{
	cur c = {t, t + n};
	int64_t years = 0, months = 0, days = 0, time = 0;
	while (c.p < c.end) {
		bool neg = cur_eat(&c, '-');
		if (!neg)
			cur_eat(&c, '+');
		cur at = c;
		int64_t v;
		if (!cur_digits(&c, 1, 18, &v))
			return false;
		if (c.p < c.end && *c.p == ':') {
			c = at;
			if (!cur_hms(&c, 18, &time))
				return false;
			time = neg ? -time : time;
		} else {
			if (!cur_eat(&c, ' '))
				return false;
			const char *w = c.p;
			while (c.p < c.end && *c.p != ' ')
				c.p++;
			size_t wl = (size_t)(c.p - w);
			int64_t *into = wl >= 4 && memcmp(w, "year", 4) == 0  ? &years
					: wl >= 3 && memcmp(w, "mon", 3) == 0 ? &months
					: wl >= 3 && memcmp(w, "day", 3) == 0 ? &days
									      : NULL;
			if (!into)
				return false;
			*into = neg ? -v : v;
		}
		if (c.p < c.end && !cur_eat(&c, ' '))
			return false;
	}
	int64_t whole = time / USECS_PER_SEC, hours = whole / 3600, minutes = whole / 60 % 60;
	double seconds = (double)(whole % 60) + (double)(time % USECS_PER_SEC) / 1e6;
	double nd = (double)(years * 12 + months) * (365.25 / 12.0) + (double)days;
	double ns = ((nd * 24 + (double)hours) * 60 + (double)minutes) * 60 + seconds;
	double r = ns * 1e6;
	*us = r >= 9.2e18 ? INT64_MAX : r <= -9.2e18 ? INT64_MIN : (int64_t)r;
	return true;
}

/* money as PostgreSQL prints it in the C and English locales ("$1,234.56", "-$1,234.56"), as a decimal's text
 * in out. money is an int64 of cents, so 32 bytes hold any. */
static bool read_money(const char *t, size_t n, char out[32])
{
	size_t len = 1; /* out[0] holds the sign */
	bool point = false;
	out[0] = '+';
	for (size_t i = 0; i < n; i++) {
		char ch = t[i];
		if (len == 31)
			return false;
		if ((ch >= '0' && ch <= '9') || (ch == '.' && !point)) {
			point |= ch == '.';
			out[len++] = ch;
		} else if (ch == '-' || ch == '(') {
			out[0] = '-';
		} else if (ch != '$' && ch != ',' && ch != ')' && ch != ' ') {
			return false;
		}
	}
	out[len] = '\0';
	return len > 1;
}

/* point ("(1.5,2)") */
static bool read_point(const char *t, size_t n, double *x, double *y)
{
	char tmp[128];
	if (n < 5 || n >= sizeof(tmp) || t[0] != '(' || t[n - 1] != ')')
		return false;
	memcpy(tmp, t + 1, n - 2);
	tmp[n - 2] = '\0';
	char *end;
	*x = strtod(tmp, &end);
	if (end == tmp || *end != ',')
		return false;
	char *second = end + 1;
	*y = strtod(second, &end);
	return end != second && *end == '\0';
}

/* A one-dimensional array as PostgreSQL prints it ({1,"a b",NULL}, with "[0:1]=" in front when it does not
 * start at 1). Each element's text goes, unescaped, into s->elems, and where it is into s->spans (len -1 for
 * NULL). False for more dimensions and anything else. */
typedef struct span {
	size_t off;
	long len;
} span;

static bool read_array(const char *t, size_t n, dbz_scratch *s, size_t *count)
{
	cur c = {t, t + n};
	buf_reset(&s->elems);
	buf_reset(&s->spans);
	*count = 0;
	if (cur_eat(&c, '[')) {
		while (c.p < c.end && *c.p != '=')
			c.p++;
		if (!cur_eat(&c, '='))
			return false;
	}
	if (!cur_eat(&c, '{'))
		return false;
	if (cur_eat(&c, '}'))
		return c.p == c.end;
	for (;;) {
		span sp = {s->elems.len, 0};
		if (c.p < c.end && *c.p == '{')
			return false; /* another dimension */
		if (cur_eat(&c, '"')) {
			for (;;) {
				if (c.p == c.end)
					return false;
				char ch = *c.p++;
				if (ch == '"')
					break;
				if (ch == '\\') {
					if (c.p == c.end)
						return false;
					ch = *c.p++;
				}
				buf_putc(&s->elems, ch);
			}
		} else {
			const char *start = c.p;
			while (c.p < c.end && *c.p != ',' && *c.p != '}')
				c.p++;
			size_t len = (size_t)(c.p - start);
			if (len == 4 && memcmp(start, "NULL", 4) == 0)
				sp.len = -1;
			else if (len == 0)
				return false;
			else
				buf_append(&s->elems, start, len);
		}
		if (sp.len == 0)
			sp.len = (long)(s->elems.len - sp.off);
		buf_append(&s->spans, &sp, sizeof(sp));
		(*count)++;
		if (cur_eat(&c, '}'))
			return c.p == c.end;
		if (!cur_eat(&c, ','))
			return false;
	}
}

/* Debezium's types ------------------------------------------------------------------------------- */

/* Kafka Connect's schema type, the semantic type's name, and its doc. */
static const struct {
	const char *type, *name, *doc;
} kinds[] = {
    [DK_BOOLEAN] = {"boolean", NULL, NULL},
    [DK_INT16] = {"int16", NULL, NULL},
    [DK_INT32] = {"int32", NULL, NULL},
    [DK_INT64] = {"int64", NULL, NULL},
    [DK_FLOAT] = {"float", NULL, NULL},
    [DK_DOUBLE] = {"double", NULL, NULL},
    [DK_STRING] = {"string", NULL, NULL},
    [DK_BYTES] = {"bytes", NULL, NULL},
    [DK_DECIMAL] = {"bytes", "org.apache.kafka.connect.data.Decimal", NULL},
    [DK_VARIABLE_DECIMAL] = {"struct", "io.debezium.data.VariableScaleDecimal", "Variable scaled decimal"},
    [DK_MONEY] = {"bytes", "org.apache.kafka.connect.data.Decimal", NULL},
    [DK_UUID] = {"string", "io.debezium.data.Uuid", NULL},
    [DK_JSON] = {"string", "io.debezium.data.Json", NULL},
    [DK_XML] = {"string", "io.debezium.data.Xml", NULL},
    [DK_DATE] = {"int32", "io.debezium.time.Date", NULL},
    [DK_TIME] = {"int32", "io.debezium.time.Time", NULL},
    [DK_MICRO_TIME] = {"int64", "io.debezium.time.MicroTime", NULL},
    [DK_TIMESTAMP] = {"int64", "io.debezium.time.Timestamp", NULL},
    [DK_MICRO_TIMESTAMP] = {"int64", "io.debezium.time.MicroTimestamp", NULL},
    [DK_ZONED_TIMESTAMP] = {"string", "io.debezium.time.ZonedTimestamp", NULL},
    [DK_ZONED_TIME] = {"string", "io.debezium.time.ZonedTime", NULL},
    [DK_DURATION] = {"int64", "io.debezium.time.MicroDuration", NULL},
    [DK_BIT] = {"boolean", NULL, NULL},
    [DK_BITS] = {"bytes", "io.debezium.data.Bits", NULL},
    [DK_POINT] = {"struct", "io.debezium.data.geometry.Point", "Geometry (POINT)"},
    [DK_TSVECTOR] = {"string", "io.debezium.data.Tsvector", NULL},
    [DK_ARRAY] = {"array", NULL, NULL},
};

/* money.fraction.digits, Debezium's default */
#define MONEY_SCALE 2
/* The length Debezium gives bit varying without one (Integer.MAX_VALUE). */
#define VARBIT_LENGTH 2147483647

/* The arrays Debezium has no type for (it leaves such columns out). cdc writes their text. */
static bool array_known(uint32_t elem)
{
	switch (elem) {
	case PGT_MONEY:
	case PGT_NAME:
	case PGT_INTERVAL:
	case PGT_VARBIT:
	case PGT_XML:
	case PGT_POINT:
	case 1790: /* refcursor */
		return false;
	}
	return true;
}

dbz_type sink_debezium_type_of(uint32_t oid, int32_t mod)
{
	int p, s;
	uint32_t elem;
	switch (oid) {
	case PGT_BOOL:
		return (dbz_type){DK_BOOLEAN};
	case PGT_INT2:
		return (dbz_type){DK_INT16};
	case PGT_INT4:
		return (dbz_type){DK_INT32};
	case PGT_INT8:
	case PGT_OID:
		return (dbz_type){DK_INT64};
	case PGT_FLOAT4:
		return (dbz_type){DK_FLOAT};
	case PGT_FLOAT8:
		return (dbz_type){DK_DOUBLE};
	case PGT_NUMERIC:
		if (pgo_types_numeric_typmod(mod, &p, &s))
			return (dbz_type){DK_DECIMAL, s, p};
		return (dbz_type){DK_VARIABLE_DECIMAL};
	case PGT_MONEY:
		return (dbz_type){DK_MONEY, MONEY_SCALE};
	case PGT_BYTEA:
		return (dbz_type){DK_BYTES};
	case PGT_UUID:
		return (dbz_type){DK_UUID};
	case PGT_JSON:
	case PGT_JSONB:
		return (dbz_type){DK_JSON};
	case PGT_XML:
		return (dbz_type){DK_XML};
	case PGT_DATE:
		return (dbz_type){DK_DATE};
	case PGT_TIME: /* adaptive, milliseconds up to time(3) */
		return (dbz_type){pgo_types_time_precision(oid, mod) <= 3 ? DK_TIME : DK_MICRO_TIME};
	case PGT_TIMESTAMP:
		return (dbz_type){pgo_types_time_precision(oid, mod) <= 3 ? DK_TIMESTAMP
									  : DK_MICRO_TIMESTAMP};
	case PGT_TIMESTAMPTZ:
		return (dbz_type){DK_ZONED_TIMESTAMP, pgo_types_time_precision(oid, mod)};
	case PGT_TIMETZ:
		return (dbz_type){DK_ZONED_TIME};
	case PGT_INTERVAL:
		return (dbz_type){DK_DURATION};
	case PGT_BIT:
	case PGT_VARBIT:
		p = pgo_types_length(oid, mod);
		if (p < 0)
			p = oid == PGT_BIT ? 1 : VARBIT_LENGTH;
		return p > 1 ? (dbz_type){DK_BITS, p} : (dbz_type){DK_BIT};
	case PGT_POINT:
		return (dbz_type){DK_POINT};
	case PGT_TSVECTOR:
		return (dbz_type){DK_TSVECTOR};
	}
	if ((elem = pgo_types_element(oid)) && array_known(elem))
		return (dbz_type){DK_ARRAY, .elem = elem, .mod = mod};
	return (dbz_type){DK_STRING};
}

static dbz_type type_of(const Cdc__V1__Column *c)
{
	return sink_debezium_type_of(c->type_oid, c->type_modifier_present_case ? c->type_modifier : -1);
}

/* Schemas ---------------------------------------------------------------------------------------- */

#define FIELD(n, s)                                                                                          \
	{                                                                                                    \
		n, &s                                                                                        \
	}
#define NFIELDS(f) (sizeof(f) / sizeof(*(f)))
static const dbz_schema s_string = {"string"}, s_string_opt = {"string", true}, s_int32 = {"int32"},
			s_int32_opt = {"int32", true}, s_int64 = {"int64"}, s_int64_opt = {"int64", true},
			s_double = {"double"}, s_bytes = {"bytes"}, s_bytes_opt = {"bytes", true};

static const dbz_field vdecimal_fields[] = {FIELD("scale", s_int32), FIELD("value", s_bytes)};
static const dbz_field point_fields[] = {FIELD("x", s_double), FIELD("y", s_double),
					 FIELD("wkb", s_bytes_opt), FIELD("srid", s_int32_opt)};

static const dbz_schema s_snapshot = {
    .type = "string",
    .optional = true,
    .name = "io.debezium.data.Enum",
    .version = 1,
    .parameters =
	"\"allowed\":\"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental\"",
    .def = "\"false\""};
static const dbz_field source_fields[] = {
    FIELD("version", s_string),	     FIELD("connector", s_string),  FIELD("name", s_string),
    FIELD("ts_ms", s_int64),	     FIELD("snapshot", s_snapshot), FIELD("db", s_string),
    FIELD("sequence", s_string_opt), FIELD("ts_us", s_int64_opt),   FIELD("ts_ns", s_int64_opt),
    FIELD("schema", s_string),	     FIELD("table", s_string),	    FIELD("txId", s_int64_opt),
    FIELD("lsn", s_int64_opt),	     FIELD("xmin", s_int64_opt),    FIELD("origin", s_string_opt),
    FIELD("origin_lsn", s_int64_opt)};
static const dbz_schema s_source = {.type = "struct",
				    .name = "io.debezium.connector.postgresql.Source",
				    .version = 1,
				    .fields = source_fields,
				    .nfields = NFIELDS(source_fields)};
static const dbz_field block_fields[] = {FIELD("id", s_string), FIELD("total_order", s_int64),
					 FIELD("data_collection_order", s_int64)};
static const dbz_schema s_block = {.type = "struct",
				   .optional = true,
				   .name = "event.block",
				   .version = 1,
				   .fields = block_fields,
				   .nfields = NFIELDS(block_fields)};

static const dbz_field message_fields[] = {FIELD("prefix", s_string_opt), FIELD("content", s_bytes_opt)};
static const dbz_schema s_message = {.type = "struct",
				     .name = "io.debezium.connector.postgresql.Message",
				     .version = 1,
				     .fields = message_fields,
				     .nfields = NFIELDS(message_fields)};
static const dbz_field message_value_fields[] = {FIELD("op", s_string), FIELD("ts_ms", s_int64_opt),
						 FIELD("source", s_source), FIELD("transaction", s_block),
						 FIELD("message", s_message)};
const dbz_schema dbz_message_value_schema = {.type = "struct",
					     .name = "io.debezium.connector.postgresql.MessageValue",
					     .version = 1,
					     .fields = message_value_fields,
					     .nfields = NFIELDS(message_value_fields)};
static const dbz_field message_key_fields[] = {FIELD("prefix", s_string_opt)};
const dbz_schema dbz_message_key_schema = {.type = "struct",
					   .name = "io.debezium.connector.postgresql.MessageKey",
					   .version = 1,
					   .fields = message_key_fields,
					   .nfields = NFIELDS(message_key_fields)};

static const dbz_field txn_key_fields[] = {FIELD("id", s_string)};
const dbz_schema dbz_txn_key_schema = {.type = "struct",
				       .name = "io.debezium.connector.common.TransactionMetadataKey",
				       .version = 1,
				       .fields = txn_key_fields,
				       .nfields = NFIELDS(txn_key_fields)};
static const dbz_field collection_fields[] = {FIELD("data_collection", s_string),
					      FIELD("event_count", s_int64)};
static const dbz_schema s_collection = {.type = "struct",
					.optional = true,
					.name = "event.collection",
					.version = 1,
					.fields = collection_fields,
					.nfields = NFIELDS(collection_fields)};
static const dbz_schema s_collections = {.type = "array", .optional = true, .items = &s_collection};
static const dbz_field txn_value_fields[] = {
    FIELD("status", s_string), FIELD("id", s_string), FIELD("event_count", s_int64_opt),
    FIELD("data_collections", s_collections), FIELD("ts_ms", s_int64)};
const dbz_schema dbz_txn_value_schema = {.type = "struct",
					 .name = "io.debezium.connector.common.TransactionMetadataValue",
					 .version = 1,
					 .fields = txn_value_fields,
					 .nfields = NFIELDS(txn_value_fields)};

static const dbz_field envelope_tail[] = {FIELD("source", s_source),   FIELD("transaction", s_block),
					  FIELD("op", s_string),       FIELD("ts_ms", s_int64_opt),
					  FIELD("ts_us", s_int64_opt), FIELD("ts_ns", s_int64_opt)};

void sink_debezium_schemas_free(dbz_schemas *sc)
{
	buf_free(&sc->names);
	free(sc->nodes);
	free(sc->fields);
	*sc = (dbz_schemas){0};
}

/* A name or parameters, into sc->names. sink_debezium_table_schema() reserves room for all of a schema's
 * first, so the buffer does not move while the schema points into it. */
static const char *put_text(dbz_schemas *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *put_text(dbz_schemas *sc, const char *fmt, ...)
{
	char *at = sc->names.data + sc->names.len;
	size_t room = sc->names.cap - sc->names.len;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(at, room, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= room)
		abort(); /* the room reserved was too small, which is a bug */
	sc->names.len += (size_t)n + 1;
	return at;
}

/* The most a column's parameters take in sc->names. */
#define PARAMETERS_MAX 64

/* A column's schema into node (its array's items into the next node). Returns the nodes used. */
static size_t column_schema(dbz_schemas *sc, dbz_type t, bool optional, dbz_schema *node)
{
	*node = (dbz_schema){.type = kinds[t.k].type,
			     .optional = optional,
			     .name = kinds[t.k].name,
			     .version = kinds[t.k].name ? 1 : 0,
			     .doc = kinds[t.k].doc};
	switch (t.k) {
	case DK_ARRAY:
		node->items = node + 1;
		return 1 + column_schema(sc, sink_debezium_type_of(t.elem, t.mod), true, node + 1);
	case DK_VARIABLE_DECIMAL:
		node->fields = vdecimal_fields;
		node->nfields = NFIELDS(vdecimal_fields);
		break;
	case DK_POINT:
		node->fields = point_fields;
		node->nfields = NFIELDS(point_fields);
		break;
	case DK_DECIMAL:
		node->scale = t.a;
		node->precision = t.b;
		node->parameters =
		    put_text(sc, "\"scale\":\"%d\",\"connect.decimal.precision\":\"%d\"", t.a, t.b);
		break;
	case DK_MONEY:
		node->scale = t.a;
		node->parameters = put_text(sc, "\"scale\":\"%d\"", t.a);
		break;
	case DK_BITS:
		node->parameters = put_text(sc, "\"length\":\"%d\"", t.a);
		break;
	default:
		break;
	}
	return 1;
}

const dbz_schema *sink_debezium_table_schema(dbz_schemas *sc, const char *server, const char *schema,
					     const char *table, const char *topic, const dbz_column *cols,
					     size_t n, bool key)
{
	/* nodes holds the row, then up to two per column. fields holds the row's, then the envelope's. */
	size_t need = 2 * n + 2;
	if (sc->cap < need) {
		sc->cap = need * 2;
		sc->nodes = util_xrealloc(sc->nodes, sc->cap * sizeof(*sc->nodes));
		sc->fields =
		    util_xrealloc(sc->fields, (sc->cap + NFIELDS(envelope_tail) + 2) * sizeof(*sc->fields));
	}
	buf_reset(&sc->names);
	buf_reserve(&sc->names, n * PARAMETERS_MAX + strlen(server) + strlen(schema) + strlen(table) +
				    strlen(topic ? topic : "") + 32);
	dbz_schema *row = &sc->nodes[0], *node = row + 1;
	dbz_field *fields = sc->fields;
	size_t nf = 0;
	for (size_t i = 0; i < n; i++) {
		if (key && !cols[i].key)
			continue;
		fields[nf++] = (dbz_field){cols[i].name, node};
		node += column_schema(sc, sink_debezium_type_of(cols[i].type_oid, cols[i].typmod),
				      !key && !cols[i].key, node);
	}
	*row = (dbz_schema){.type = "struct",
			    .optional = !key,
			    .name = put_text(sc, "%s.%s.%s.%s", server, schema, table, key ? "Key" : "Value"),
			    .fields = fields,
			    .nfields = nf};
	if (key)
		return row;
	/* The envelope. before and after are the row, then come Debezium's fixed fields. */
	dbz_field *ef = fields + nf;
	ef[0] = (dbz_field){"before", row};
	ef[1] = (dbz_field){"after", row};
	memcpy(ef + 2, envelope_tail, sizeof(envelope_tail));
	*node = (dbz_schema){.type = "struct",
			     .name = put_text(sc, "%s.Envelope", topic),
			     .version = 2,
			     .fields = ef,
			     .nfields = 2 + NFIELDS(envelope_tail)};
	return node;
}

void sink_debezium_schema_json(buf *b, const dbz_schema *s, const char *field)
{
	LIT(b, "{\"type\":\"");
	buf_puts(b, s->type);
	buf_putc(b, '"');
	if (s->items) {
		LIT(b, ",\"items\":");
		sink_debezium_schema_json(b, s->items, NULL);
	}
	if (strcmp(s->type, "struct") == 0) {
		LIT(b, ",\"fields\":[");
		for (size_t i = 0; i < s->nfields; i++) {
			if (i)
				buf_putc(b, ',');
			sink_debezium_schema_json(b, s->fields[i].schema, s->fields[i].name);
		}
		buf_putc(b, ']');
	}
	if (s->optional)
		LIT(b, ",\"optional\":true");
	else
		LIT(b, ",\"optional\":false");
	if (s->name) {
		LIT(b, ",\"name\":");
		json_str(b, s->name);
	}
	if (s->version) {
		LIT(b, ",\"version\":");
		json_i64(b, s->version);
	}
	if (s->doc) {
		LIT(b, ",\"doc\":");
		json_str(b, s->doc);
	}
	if (s->parameters) {
		LIT(b, ",\"parameters\":{");
		buf_puts(b, s->parameters);
		buf_putc(b, '}');
	}
	if (s->def) {
		LIT(b, ",\"default\":");
		buf_puts(b, s->def);
	}
	if (field) {
		LIT(b, ",\"field\":");
		json_str(b, field);
	}
	buf_putc(b, '}');
}

/* The columns of a row as a schema knows them. Key columns are those of e's key. */
static const dbz_column *columns_of(dbz_scratch *s, const Cdc__V1__Event *e, Cdc__V1__Column *const *cols,
				    size_t n, bool key)
{
	if (s->capcols < n + 1) {
		s->capcols = (n + 1) * 2;
		s->cols = util_xrealloc(s->cols, s->capcols * sizeof(*s->cols));
	}
	for (size_t i = 0; i < n; i++) {
		bool in_key = key;
		for (size_t j = 0; !in_key && e->key && j < e->key->n_columns; j++)
			in_key = e->key->columns[j] && strcmp(e->key->columns[j]->name, cols[i]->name) == 0;
		s->cols[i] =
		    (dbz_column){cols[i]->name, cols[i]->type_oid,
				 cols[i]->type_modifier_present_case ? cols[i]->type_modifier : -1, in_key};
	}
	return s->cols;
}

/* Values ----------------------------------------------------------------------------------------- */

/* The microseconds of timestamp infinity and -infinity as Debezium writes them. They are pgjdbc's
 * PGStatement.DATE_POSITIVE_INFINITY and DATE_NEGATIVE_INFINITY, read as microseconds. Then come the day
 * numbers of date infinity and -infinity. Debezium reads them as -5877611-06-21 and -22. */
#define TS_INFINITY INT64_C(9223372036825200000)
#define TS_MINUS_INFINITY INT64_C(-9223372036832400000)
#define DATE_INFINITY (-2147472693)
#define DATE_MINUS_INFINITY (-2147472692)

/* "HH:MM:SS" of a time of day, and the fraction. The fraction has exactly width digits, or (width 0) as few
 * as it needs, none for a whole second (as Java's ISO formats print it). */
static void put_time_of_day(buf *b, int64_t us, int width)
{
	int64_t s = us / USECS_PER_SEC, frac = us % USECS_PER_SEC;
	char t[16] = {(char)('0' + s / 36000 % 10), (char)('0' + s / 3600 % 10), ':',
		      (char)('0' + s / 600 % 6),    (char)('0' + s / 60 % 10),	 ':',
		      (char)('0' + s % 60 / 10),    (char)('0' + s % 10),	 '.'};
	for (int i = 14; i >= 9; i--, frac /= 10)
		t[i] = (char)('0' + frac % 10);
	int n = 15;
	if (width == 0)
		while (n > 8 && (t[n - 1] == '0' || t[n - 1] == '.'))
			n--;
	else
		n = 9 + width;
	buf_append(b, t, (size_t)n);
}

/* The text of a value the decoder kept as text. */
static bool text_of(const Cdc__V1__Value *v, const char **s)
{
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		*s = v->text_value;
		return true;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		*s = v->other_value ? v->other_value->text : "";
		return true;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		*s = v->json_value;
		return true;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		*s = v->numeric_value;
		return true;
	default:
		return false;
	}
}

/* Kafka Connect's Decimal of a decimal's text at scale. It is null when the text does not read or has another
 * scale. NaN and the infinities are null, as Debezium cannot write them in precise mode either. */
static void decimal_text(dbz_scratch *s, const char *t, int scale, dbz_datum *out)
{
	decimal d;
	if (!decimal_read(t, strlen(t), &d) || !decimal_bytes(s, &d, scale, out))
		out->kind = DD_NULL;
}

/* Where an array's elements are (dbz_datum.source). */
enum {
	ARRAY_PARSED,
	ARRAY_PLACEHOLDER_TEXT,
	ARRAY_PLACEHOLDER_BYTES,
	ARRAY_PLACEHOLDER_UUID,
	ARRAY_PLACEHOLDER_OCTETS
};

static void text_datum(dbz_datum *out, const char *p, size_t len)
{
	out->kind = DD_STRING;
	out->p = p;
	out->len = len;
}

void sink_debezium_convert(dbz_scratch *s, dbz_type t, const Cdc__V1__Value *v, dbz_datum *out)
{
	const char *text;
	decimal d;
	int64_t us;
	*out = (dbz_datum){.kind = DD_NULL};
	if (!v || v->kind_case == CDC__V1__VALUE__KIND_NULL_VALUE)
		return;
	switch (t.k) {
	case DK_BOOLEAN:
		if (v->kind_case == CDC__V1__VALUE__KIND_BOOL_VALUE)
			*out = (dbz_datum){.kind = DD_BOOL, .i = v->bool_value};
		return;
	case DK_INT16:
	case DK_INT32:
	case DK_INT64:
		if (v->kind_case == CDC__V1__VALUE__KIND_INT_VALUE)
			*out = (dbz_datum){.kind = DD_INT, .i = v->int_value};
		return;
	case DK_FLOAT:
	case DK_DOUBLE:
		if (v->kind_case == CDC__V1__VALUE__KIND_FLOAT_VALUE)
			*out = (dbz_datum){.kind = DD_REAL, .x = v->float_value, .single = t.k == DK_FLOAT};
		return;
	case DK_STRING:
	case DK_XML:
	case DK_JSON:
	case DK_TSVECTOR:
		if (text_of(v, &text))
			text_datum(out, text, strlen(text));
		return;
	case DK_BYTES:
		if (v->kind_case == CDC__V1__VALUE__KIND_BYTES_VALUE)
			*out = (dbz_datum){.kind = DD_BYTES,
					   .p = (const char *)v->bytes_value.data,
					   .len = v->bytes_value.len};
		return;
	case DK_DECIMAL:
		if (v->kind_case == CDC__V1__VALUE__KIND_NUMERIC_VALUE)
			decimal_text(s, v->numeric_value, t.a, out);
		return;
	case DK_VARIABLE_DECIMAL:
		if (v->kind_case == CDC__V1__VALUE__KIND_NUMERIC_VALUE &&
		    decimal_read(v->numeric_value, strlen(v->numeric_value), &d))
			variable_decimal(s, &d, out);
		return;
	case DK_MONEY: {
		char money[32];
		if (text_of(v, &text) && read_money(text, strlen(text), money))
			decimal_text(s, money, t.a, out);
		return;
	}
	case DK_UUID: {
		static const char hex[] = "0123456789abcdef";
		if (v->kind_case != CDC__V1__VALUE__KIND_UUID_VALUE || v->uuid_value.len != 16)
			return;
		buf_reset(&s->text);
		for (int i = 0; i < 16; i++) {
			if (i == 4 || i == 6 || i == 8 || i == 10)
				buf_putc(&s->text, '-');
			buf_putc(&s->text, hex[v->uuid_value.data[i] >> 4]);
			buf_putc(&s->text, hex[v->uuid_value.data[i] & 15]);
		}
		text_datum(out, s->text.data, s->text.len);
		return;
	}
	case DK_DATE:
		if (v->kind_case == CDC__V1__VALUE__KIND_DATE_VALUE)
			*out = (dbz_datum){.kind = DD_INT,
					   .i = v->date_value == INT32_MAX   ? DATE_INFINITY
						: v->date_value == INT32_MIN ? DATE_MINUS_INFINITY
									     : v->date_value};
		return;
	case DK_TIME:
	case DK_MICRO_TIME:
		if (v->kind_case == CDC__V1__VALUE__KIND_TIME_VALUE)
			*out = (dbz_datum){.kind = DD_INT,
					   .i = t.k == DK_TIME ? v->time_value / 1000 : v->time_value};
		return;
	case DK_TIMESTAMP:
	case DK_MICRO_TIMESTAMP:
		if (v->kind_case != CDC__V1__VALUE__KIND_TIMESTAMP_VALUE || !v->timestamp_value)
			return;
		us = v->timestamp_value->micros;
		us = us == INT64_MAX ? TS_INFINITY : us == INT64_MIN ? TS_MINUS_INFINITY : us;
		*out = (dbz_datum){.kind = DD_INT, .i = t.k == DK_TIMESTAMP ? util_floor_div(us, 1000) : us};
		return;
	case DK_ZONED_TIMESTAMP:
		if (v->kind_case != CDC__V1__VALUE__KIND_TIMESTAMP_VALUE || !v->timestamp_value)
			return;
		us = v->timestamp_value->micros;
		buf_reset(&s->text);
		if (us == INT64_MAX || us == INT64_MIN) {
			buf_puts(&s->text, us == INT64_MAX ? "infinity" : "-infinity");
		} else {
			sink_json_ymd(&s->text, util_floor_div(us, USECS_PER_DAY));
			buf_putc(&s->text, 'T');
			put_time_of_day(&s->text, us - util_floor_div(us, USECS_PER_DAY) * USECS_PER_DAY,
					t.a);
			buf_putc(&s->text, 'Z');
		}
		text_datum(out, s->text.data, s->text.len);
		return;
	case DK_ZONED_TIME:
		if (!text_of(v, &text) || !read_timetz(text, strlen(text), &us))
			return;
		buf_reset(&s->text);
		put_time_of_day(&s->text, us, 0);
		buf_putc(&s->text, 'Z');
		text_datum(out, s->text.data, s->text.len);
		return;
	case DK_DURATION:
		if (text_of(v, &text) && read_interval(text, strlen(text), &us))
			*out = (dbz_datum){.kind = DD_INT, .i = us};
		return;
	case DK_BIT:
		if (text_of(v, &text) && *text && strspn(text, "01") == strlen(text))
			*out = (dbz_datum){.kind = DD_BOOL, .i = strchr(text, '1') != NULL};
		return;
	case DK_BITS: {
		/* little-endian, the last character is bit 0, as many bytes as the highest 1 needs */
		if (!text_of(v, &text) || strspn(text, "01") != strlen(text))
			return;
		size_t n = strlen(text), bits = 0;
		for (size_t i = 0; i < n; i++)
			if (text[i] == '1') {
				bits = n - i;
				break;
			}
		buf_reset(&s->bytes);
		buf_reserve(&s->bytes, bits / 8 + 1);
		uint8_t *o = (uint8_t *)s->bytes.data;
		memset(o, 0, bits / 8 + 1);
		for (size_t i = 0; i < bits; i++)
			if (text[n - 1 - i] == '1')
				o[i / 8] |= (uint8_t)(1u << (i % 8));
		*out = (dbz_datum){.kind = DD_BYTES, .p = (const char *)o, .len = (bits + 7) / 8};
		return;
	}
	case DK_POINT: {
		double x, y;
		if (!text_of(v, &text) || !read_point(text, strlen(text), &x, &y))
			return;
		uint8_t *wkb = s->wkb; /* little-endian, type 1 (point), x, y */
		uint64_t bx, by;
		memcpy(&bx, &x, 8);
		memcpy(&by, &y, 8);
		memcpy(wkb, (const uint8_t[]){1, 1, 0, 0, 0}, 5);
		for (int i = 0; i < 8; i++) {
			wkb[5 + i] = (uint8_t)(bx >> (8 * i));
			wkb[13 + i] = (uint8_t)(by >> (8 * i));
		}
		*out = (dbz_datum){
		    .kind = DD_POINT, .x = x, .y = y, .p = (const char *)wkb, .len = sizeof(s->wkb)};
		return;
	}
	case DK_ARRAY: {
		size_t n;
		if (!text_of(v, &text) || !read_array(text, strlen(text), s, &n))
			return;
		if (!s->arena)
			s->arena = arena_new(16 * 1024);
		arena_reset(s->arena);
		*out = (dbz_datum){.kind = DD_ARRAY,
				   .n = n,
				   .source = ARRAY_PARSED,
				   .element = sink_debezium_type_of(t.elem, t.mod),
				   .oid = t.elem};
		return;
	}
	}
}

/* What Debezium writes for an unchanged TOASTed value of a type.
 * - For most types, the placeholder as a string, or its bytes.
 * - For arrays (UnchangedToastedPlaceholder), a list of one placeholder string, bytes or uuid (the name-based
 *   uuid of the placeholder's bytes). For int4, date and int8 arrays, the bytes as numbers.
 * - For the other types, null. Debezium fails to convert it and leaves null. */
static const char placeholder[] = DBZ_PLACEHOLDER;

void sink_debezium_placeholder(dbz_type t, dbz_datum *out)
{
	*out = (dbz_datum){.kind = DD_NULL};
	switch (t.k) {
	case DK_STRING:
	case DK_JSON:
	case DK_XML:
	case DK_TSVECTOR:
		text_datum(out, placeholder, sizeof(placeholder) - 1);
		return;
	case DK_BYTES:
		*out = (dbz_datum){.kind = DD_BYTES, .p = placeholder, .len = sizeof(placeholder) - 1};
		return;
	case DK_ARRAY:
		*out = (dbz_datum){.kind = DD_ARRAY, .n = 1, .element = sink_debezium_type_of(t.elem, t.mod)};
		switch (t.elem) {
		case PGT_TEXT:
		case PGT_VARCHAR:
		case PGT_BPCHAR:
		case PGT_JSON:
		case PGT_JSONB:
			out->source = ARRAY_PLACEHOLDER_TEXT;
			return;
		case PGT_BYTEA:
			out->source = ARRAY_PLACEHOLDER_BYTES;
			return;
		case PGT_UUID:
			out->source = ARRAY_PLACEHOLDER_UUID;
			return;
		case PGT_INT4:
		case PGT_DATE:
		case PGT_INT8:
			out->source = ARRAY_PLACEHOLDER_OCTETS;
			out->n = sizeof(placeholder) - 1;
			return;
		}
		*out = (dbz_datum){.kind = DD_NULL};
		return;
	default:
		return;
	}
}

void sink_debezium_element(dbz_scratch *s, const dbz_datum *array, size_t i, dbz_datum *out)
{
	static const char uuid[] = "b68a35a7-17ad-35b3-af2a-ae46edb4545a";
	switch (array->source) {
	case ARRAY_PLACEHOLDER_TEXT:
		text_datum(out, placeholder, sizeof(placeholder) - 1);
		return;
	case ARRAY_PLACEHOLDER_BYTES:
		*out = (dbz_datum){.kind = DD_BYTES, .p = placeholder, .len = sizeof(placeholder) - 1};
		return;
	case ARRAY_PLACEHOLDER_UUID:
		text_datum(out, uuid, sizeof(uuid) - 1);
		return;
	case ARRAY_PLACEHOLDER_OCTETS:
		*out = (dbz_datum){.kind = DD_INT, .i = (unsigned char)placeholder[i]};
		return;
	}
	const span *sp = (const span *)s->spans.data + i;
	pgo_datum d =
	    sp->len < 0
		? (pgo_datum){.kind = PGO_NULL}
		: (pgo_datum){.kind = PGO_TEXT, .len = (uint32_t)sp->len, .data = s->elems.data + sp->off};
	sink_debezium_convert(s, array->element, pgo_event_value(s->arena, NULL, array->oid, &d), out);
}

bool sink_debezium_unchanged(const Cdc__V1__Column *c)
{
	return c->value && c->value->kind_case == CDC__V1__VALUE__KIND_UNCHANGED_TOAST;
}

/* A value as JsonConverter writes it. */
static void put_datum(buf *b, dbz_scratch *s, const dbz_datum *d)
{
	switch (d->kind) {
	case DD_NULL:
		json_null(b);
		return;
	case DD_BOOL:
		json_boolean(b, d->i != 0);
		return;
	case DD_INT:
		json_i64(b, d->i);
		return;
	case DD_REAL:
		put_java_double(b, d->x, d->single);
		return;
	case DD_STRING:
		json_string(b, d->p, d->len);
		return;
	case DD_BYTES:
		json_base64(b, (const uint8_t *)d->p, d->len);
		return;
	case DD_VDECIMAL:
		LIT(b, "{\"scale\":");
		json_i64(b, d->i);
		LIT(b, ",\"value\":");
		json_base64(b, (const uint8_t *)d->p, d->len);
		buf_putc(b, '}');
		return;
	case DD_POINT:
		LIT(b, "{\"x\":");
		put_java_double(b, d->x, false);
		LIT(b, ",\"y\":");
		put_java_double(b, d->y, false);
		LIT(b, ",\"wkb\":");
		json_base64(b, (const uint8_t *)d->p, d->len);
		LIT(b, ",\"srid\":null}");
		return;
	case DD_ARRAY:
		buf_putc(b, '[');
		for (size_t i = 0; i < d->n; i++) {
			dbz_datum e;
			if (i)
				buf_putc(b, ',');
			sink_debezium_element(s, d, i, &e);
			put_datum(b, s, &e);
		}
		buf_putc(b, ']');
		return;
	}
}

static void put_value(buf *b, dbz_scratch *s, dbz_type t, const Cdc__V1__Value *v)
{
	dbz_datum d;
	sink_debezium_convert(s, t, v, &d);
	put_datum(b, s, &d);
}

/* The column of row r named name that is not unchanged TOAST, or NULL. */
static const Cdc__V1__Column *sent(const Cdc__V1__Row *r, const char *name)
{
	for (size_t i = 0; r && i < r->n_columns; i++)
		if (r->columns[i] && !sink_debezium_unchanged(r->columns[i]) &&
		    strcmp(r->columns[i]->name, name) == 0)
			return r->columns[i];
	return NULL;
}

/* A row's payload. An unchanged TOASTed column takes the value other has (the old row under
 * REPLICA IDENTITY FULL), as Debezium does, else the placeholder, or is left out. */
static void put_row(buf *b, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Row *r,
		    const Cdc__V1__Row *other)
{
	if (!r) {
		json_null(b);
		return;
	}
	buf_putc(b, '{');
	bool first = true;
	for (size_t i = 0; i < r->n_columns; i++) {
		const Cdc__V1__Column *c = r->columns[i];
		if (!c)
			continue;
		const Cdc__V1__Column *from = sink_debezium_unchanged(c) ? sent(other, c->name) : c;
		if (!from && !o->placeholder)
			continue;
		if (!first)
			buf_putc(b, ',');
		first = false;
		json_str(b, c->name);
		buf_putc(b, ':');
		dbz_datum d;
		if (from)
			sink_debezium_convert(s, type_of(c), from->value, &d);
		else
			sink_debezium_placeholder(type_of(c), &d);
		put_datum(b, s, &d);
	}
	buf_putc(b, '}');
}

/* Keys ------------------------------------------------------------------------------------------- */

void sink_debezium_key(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e,
		       Cdc__V1__Column *const *cols, size_t n)
{
	bool message = e->op == CDC__V1__OP__OP_MESSAGE;
	if (o->schemas) {
		LIT(out, "{\"schema\":");
		if (message)
			sink_debezium_schema_json(out, &dbz_message_key_schema, NULL);
		else
			sink_debezium_schema_json(
			    out,
			    sink_debezium_table_schema(&s->schemas, o->server_name, e->schema, e->table,
						       o->topic, columns_of(s, e, cols, n, true), n, true),
			    NULL);
		LIT(out, ",\"payload\":");
	}
	if (message) {
		LIT(out, "{\"prefix\":");
		json_str(out, e->message ? e->message->prefix : "");
		buf_putc(out, '}');
	} else {
		buf_putc(out, '{');
		for (size_t i = 0; i < n; i++) {
			if (i)
				buf_putc(out, ',');
			json_str(out, cols[i]->name);
			buf_putc(out, ':');
			put_value(out, s, type_of(cols[i]), cols[i]->value);
		}
		buf_putc(out, '}');
	}
	if (o->schemas)
		buf_putc(out, '}');
}

/* Records ---------------------------------------------------------------------------------------- */

/* A key's payload, its columns as an object, without a schema. */
static void key_payload(buf *out, dbz_scratch *s, const Cdc__V1__Event *e, Cdc__V1__Column *const *cols,
			size_t n)
{
	static const dbz_options payload = {.schemas = false};
	buf_reset(out);
	sink_debezium_key(out, s, &payload, e, cols, n);
}

static dbz_record record_of(char op, const Cdc__V1__Row *before, const Cdc__V1__Row *after, bool has_key,
			    Cdc__V1__Column *const *key, size_t n)
{
	return (dbz_record){
	    .op = op, .before = before, .after = after, .has_key = has_key, .key = key, .nkey = n};
}

/* An update. A key change (the old row's key payload differs) is a delete, maybe its tombstone, and a create,
 * each naming the other key. Debezium compares the keys as its records hold them. */
static size_t update_records(dbz_scratch *s, const Cdc__V1__Event *e, bool tombstones, dbz_record *out)
{
	size_t n = e->key ? e->key->n_columns : 0;
	Cdc__V1__Column *const *old = e->key ? e->key->columns : NULL, *const *now = old;
	if (e->key) {
		if (s->capkey < n) {
			s->capkey = n;
			s->key_after = util_xrealloc(s->key_after, n * sizeof(*s->key_after));
		}
		now = pgo_event_new_key(e, s->key_after);
	}
	if (e->key && e->old_row) {
		key_payload(&s->new_key, s, e, now, n);
		key_payload(&s->old_key, s, e, old, n);
	}
	if (!e->key || !e->old_row ||
	    (s->new_key.len == s->old_key.len &&
	     memcmp(s->new_key.data, s->old_key.data, s->new_key.len) == 0)) {
		out[0] = record_of(DBZ_UPDATE, e->old_row, e->new_row, e->key != NULL, now, n);
		return 1;
	}
	size_t count = 0;
	out[count] = record_of(DBZ_DELETE, e->old_row, NULL, true, old, n);
	out[count].key_header = "__debezium.newkey";
	out[count++].key_header_value = &s->new_key;
	if (tombstones) {
		out[count] = record_of(DBZ_TOMBSTONE, NULL, NULL, true, old, n);
		out[count].key_header = "__debezium.newkey";
		out[count++].key_header_value = &s->new_key;
	}
	out[count] = record_of(DBZ_CREATE, NULL, e->new_row, true, now, n);
	out[count].key_header = "__debezium.oldkey";
	out[count++].key_header_value = &s->old_key;
	return count;
}

size_t sink_debezium_records(dbz_scratch *s, const Cdc__V1__Event *e, bool tombstones,
			     dbz_record out[DBZ_RECORDS_MAX])
{
	size_t n = e->key ? e->key->n_columns : 0;
	Cdc__V1__Column *const *key = e->key ? e->key->columns : NULL;
	switch (e->op) {
	case CDC__V1__OP__OP_UPDATE:
		return update_records(s, e, tombstones, out);
	case CDC__V1__OP__OP_DELETE:
		out[0] = record_of(DBZ_DELETE, e->old_row, NULL, e->key != NULL, key, n);
		if (!tombstones || !e->key)
			return 1;
		out[1] = record_of(DBZ_TOMBSTONE, NULL, NULL, true, key, n);
		return 2;
	case CDC__V1__OP__OP_TRUNCATE:
		out[0] = record_of(DBZ_TRUNCATE, NULL, NULL, false, NULL, 0);
		return 1;
	case CDC__V1__OP__OP_MESSAGE:
		out[0] = record_of(DBZ_MESSAGE, NULL, NULL, true, NULL, 0);
		return 1;
	default: /* insert, read */
		out[0] = record_of(e->op == CDC__V1__OP__OP_READ ? DBZ_READ : DBZ_CREATE, NULL, e->new_row,
				   e->key != NULL, key, n);
		return 1;
	}
}

/* Headers ---------------------------------------------------------------------------------------- */

size_t sink_debezium_context_headers(const Cdc__V1__Event *e, const char *server_name,
				     dbz_header out[DBZ_CONTEXT_HEADERS])
{
	if (e->op == CDC__V1__OP__OP_MESSAGE)
		return 0;
	out[0] = (dbz_header){"__debezium.context.connectorLogicalName", server_name};
	out[1] = (dbz_header){"__debezium.context.taskId", "0"};
	out[2] = (dbz_header){"__debezium.context.connectorName", "postgresql"};
	out[3] = (dbz_header){"__debezium.context.runId", sink_debezium_run_id()};
	return 4;
}

static pthread_once_t run_id_once = PTHREAD_ONCE_INIT;
static char run_id[37];

static void make_run_id(void)
{
	uint8_t u[16] = {0};
	if (getrandom(u, sizeof(u), 0) != (ssize_t)sizeof(u)) {
		uint64_t t = (uint64_t)util_wall_us() ^ ((uint64_t)getpid() << 32);
		memcpy(u, &t, sizeof(t));
	}
	u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);
	u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
	snprintf(run_id, sizeof(run_id),
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
		 u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

const char *sink_debezium_run_id(void)
{
	pthread_once(&run_id_once, make_run_id);
	return run_id;
}

/* Settings --------------------------------------------------------------------------------------- */

const char *const dbz_toast_names[] = {"placeholder", "omit", NULL};

const char *sink_debezium_server_name_problem(const char *value, char *why, size_t whylen)
{
	(void)why, (void)whylen;
	size_t n = strlen(value);
	if (n < 1 || n > 249 ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return "a server name [a-zA-Z0-9._-]{1,249}, as Debezium's topic.prefix";
	return NULL;
}

/* Values ----------------------------------------------------------------------------------------- */

/* The source block. Commit-time fields are marks. A read (an incremental snapshot's row, for Debezium) has no
 * txId and lsn. A non-transactional message has no txId. */
static void put_source(buf *b, const dbz_options *o, const Cdc__V1__Event *e)
{
	bool read = e->op == CDC__V1__OP__OP_READ;
	LIT(b, "{\"version\":\"cdc-" CDC_VERSION "\",\"connector\":\"postgresql\",\"name\":");
	json_str(b, o->server_name);
	LIT(b, ",\"ts_ms\":");
	mark(b, M_SOURCE_MS);
	if (read)
		LIT(b, ",\"snapshot\":\"incremental\",\"db\":");
	else
		LIT(b, ",\"snapshot\":\"false\",\"db\":");
	json_str(b, o->database ? o->database : "");
	LIT(b, ",\"sequence\":\"[\\\"");
	mark(b, M_SEQUENCE);
	LIT(b, "\\\",\\\"");
	json_u64(b, e->lsn);
	LIT(b, "\\\"]\",\"ts_us\":");
	mark(b, M_SOURCE_US);
	LIT(b, ",\"ts_ns\":");
	mark(b, M_SOURCE_NS);
	LIT(b, ",\"schema\":");
	json_str(b, e->schema);
	LIT(b, ",\"table\":");
	json_str(b, e->table);
	LIT(b, ",\"txId\":");
	if (e->xid && !read)
		json_u64(b, e->xid);
	else
		json_null(b);
	LIT(b, ",\"lsn\":");
	if (read)
		json_null(b);
	else
		json_u64(b, e->lsn);
	LIT(b, ",\"xmin\":null,\"origin\":");
	if (e->origin && *e->origin)
		json_str(b, e->origin);
	else
		json_null(b);
	LIT(b, ",\"origin_lsn\":null}");
}

static void put_transaction(buf *b, const dbz_options *o)
{
	if (o->transaction)
		mark(b, M_TRANSACTION);
	else
		json_null(b);
}

static void put_message_value(buf *out, const dbz_options *o, const Cdc__V1__Event *e)
{
	if (o->schemas) {
		LIT(out, "{\"schema\":");
		sink_debezium_schema_json(out, &dbz_message_value_schema, NULL);
		LIT(out, ",\"payload\":");
	}
	LIT(out, "{\"op\":\"m\",\"ts_ms\":");
	mark(out, M_NOW_MS);
	LIT(out, ",\"source\":");
	put_source(out, o, e);
	LIT(out, ",\"transaction\":");
	put_transaction(out, o);
	LIT(out, ",\"message\":{\"prefix\":");
	json_str(out, e->message ? e->message->prefix : "");
	LIT(out, ",\"content\":");
	if (e->message)
		json_base64(out, e->message->content.data, e->message->content.len);
	else
		LIT(out, "\"\"");
	LIT(out, "}}");
	if (o->schemas)
		buf_putc(out, '}');
}

void sink_debezium_value(buf *out, dbz_scratch *s, const dbz_options *o, const Cdc__V1__Event *e, char op,
			 const Cdc__V1__Row *before, const Cdc__V1__Row *after)
{
	if (op == DBZ_MESSAGE) {
		put_message_value(out, o, e);
		return;
	}
	if (o->schemas) {
		/* The rows' schema from the row that has every column the event carries. */
		const Cdc__V1__Row *r = after ? after : before;
		size_t n = r ? r->n_columns : 0;
		LIT(out, "{\"schema\":");
		sink_debezium_schema_json(
		    out,
		    sink_debezium_table_schema(&s->schemas, o->server_name, e->schema, e->table, o->topic,
					       columns_of(s, e, r ? r->columns : NULL, n, false), n, false),
		    NULL);
		LIT(out, ",\"payload\":");
	}
	LIT(out, "{\"before\":");
	put_row(out, s, o, before, NULL);
	LIT(out, ",\"after\":");
	put_row(out, s, o, after, before);
	LIT(out, ",\"source\":");
	put_source(out, o, e);
	LIT(out, ",\"transaction\":");
	put_transaction(out, o);
	LIT(out, ",\"op\":\"");
	buf_putc(out, op);
	LIT(out, "\",\"ts_ms\":");
	mark(out, M_NOW_MS);
	LIT(out, ",\"ts_us\":");
	mark(out, M_NOW_US);
	LIT(out, ",\"ts_ns\":");
	mark(out, M_NOW_NS);
	buf_putc(out, '}');
	if (o->schemas)
		buf_putc(out, '}');
}

/* Filling the marks ------------------------------------------------------------------------------- */

static void put_txn_id(buf *b, uint32_t xid, uint64_t commit_lsn)
{
	buf_putc(b, '"');
	json_u64(b, xid);
	buf_putc(b, ':');
	json_u64(b, commit_lsn);
	buf_putc(b, '"');
}

void sink_debezium_complete(buf *out, const char *r, size_t len, const dbz_fill *f)
{
	int64_t src = f->commit_time ? f->commit_time : f->now;
	const char *end = r + len;
	while (r < end) {
		const char *m = memchr(r, MARK, (size_t)(end - r));
		if (!m || m + 1 >= end) {
			buf_append(out, r, (size_t)(end - r));
			return;
		}
		buf_append(out, r, (size_t)(m - r));
		switch (m[1]) {
		case M_SOURCE_MS:
			json_i64(out, util_floor_div(src, 1000));
			break;
		case M_SEQUENCE:
			json_u64(out, f->commit_lsn);
			break;
		case M_SOURCE_US:
			json_i64(out, src);
			break;
		case M_SOURCE_NS:
			json_i64(out, src * 1000);
			break;
		case M_TRANSACTION:
			if (!f->xid) {
				json_null(out);
				break;
			}
			LIT(out, "{\"id\":");
			put_txn_id(out, f->xid, f->commit_lsn);
			LIT(out, ",\"total_order\":");
			json_u64(out, f->total_order);
			LIT(out, ",\"data_collection_order\":");
			json_u64(out, f->collection_order);
			buf_putc(out, '}');
			break;
		case M_NOW_MS:
			json_i64(out, util_floor_div(f->now, 1000));
			break;
		case M_NOW_US:
			json_i64(out, f->now);
			break;
		case M_NOW_NS:
			json_i64(out, f->now * 1000);
			break;
		}
		r = m + 2;
	}
}

/* Transaction metadata --------------------------------------------------------------------------- */

void sink_debezium_txn_key(buf *out, bool schemas, uint32_t xid, uint64_t commit_lsn)
{
	if (schemas) {
		LIT(out, "{\"schema\":");
		sink_debezium_schema_json(out, &dbz_txn_key_schema, NULL);
		LIT(out, ",\"payload\":");
	}
	LIT(out, "{\"id\":");
	put_txn_id(out, xid, commit_lsn);
	buf_putc(out, '}');
	if (schemas)
		buf_putc(out, '}');
}

void sink_debezium_txn_value(buf *out, bool schemas, bool end, uint32_t xid, uint64_t commit_lsn,
			     int64_t time_us, uint64_t events, const dbz_count *tables, size_t ntables)
{
	if (schemas) {
		LIT(out, "{\"schema\":");
		sink_debezium_schema_json(out, &dbz_txn_value_schema, NULL);
		LIT(out, ",\"payload\":");
	}
	if (end)
		LIT(out, "{\"status\":\"END\",\"id\":");
	else
		LIT(out, "{\"status\":\"BEGIN\",\"id\":");
	put_txn_id(out, xid, commit_lsn);
	LIT(out, ",\"event_count\":");
	if (end)
		json_u64(out, events);
	else
		json_null(out);
	LIT(out, ",\"data_collections\":");
	if (end) {
		buf_putc(out, '[');
		for (size_t i = 0; i < ntables; i++) {
			if (i)
				buf_putc(out, ',');
			LIT(out, "{\"data_collection\":\"");
			json_escape(out, tables[i].schema, strlen(tables[i].schema));
			buf_putc(out, '.');
			json_escape(out, tables[i].table, strlen(tables[i].table));
			LIT(out, "\",\"event_count\":");
			json_u64(out, tables[i].events);
			buf_putc(out, '}');
		}
		buf_putc(out, ']');
	} else {
		json_null(out);
	}
	LIT(out, ",\"ts_ms\":");
	json_i64(out, util_floor_div(time_us, 1000));
	buf_putc(out, '}');
	if (schemas)
		buf_putc(out, '}');
}

/* event_json.c: renders cdc.v1.Event as the contract's one-line event JSON (CONTRACT.md "Event JSON").
 * Appends straight into the caller's buf: no intermediate allocations, no printf for integers.
 * The output is valid UTF-8 JSON on one line whatever bytes the event holds. */
#include "sinks/event_json.h"

#include "decoder/event.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USECS_PER_SEC INT64_C(1000000)
#define USECS_PER_DAY INT64_C(86400000000)
/* json/jsonb nested deeper than this is rendered as a string rather than embedded. */
#define JSON_MAX_DEPTH 4096

/* Writers below rely on buf_reserve() having made room; the NUL terminator that buf promises is
 * written once at the end of sink_json_event() and json_string(). */
static inline void reserve(buf *b, size_t n)
{
	if (b->cap - b->len <= n)
		buf_reserve(b, n);
}

static inline void put(buf *b, const void *p, size_t n)
{
	reserve(b, n);
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

#define PUT_LIT(b, lit) put((b), (lit), sizeof(lit) - 1)

static inline void put_c(buf *b, char c)
{
	reserve(b, 1);
	b->data[b->len++] = c;
}

/* v in exactly width digits (v < 10^width) at w, two at a time. */
static inline void fixed_at(char *w, uint64_t v, int width)
{
	int i = width;
	for (; i >= 2; i -= 2) {
		memcpy(w + i - 2, json_digit_pairs + 2 * (v % 100), 2);
		v /= 100;
	}
	if (i)
		w[0] = (char)('0' + v);
}

static inline void put_fixed(buf *b, uint64_t v, int width)
{
	reserve(b, (size_t)width);
	fixed_at(b->data + b->len, v, width);
	b->len += (size_t)width;
}

static void put_str(buf *b, const char *s)
{
	json_str(b, s ? s : "");
}

/* json_cache's entries: what b holds from at on, kept in text (of cap bytes) when it fits. *len is its
 * length, or 0 (the entry holds nothing) when it does not fit. */
static bool keep(const buf *b, size_t at, char *text, size_t cap, uint32_t *len)
{
	size_t n = b->len - at;
	*len = n <= cap ? (uint32_t)n : 0;
	memcpy(text, b->data + at, *len);
	return *len != 0;
}

/* put_name()'s miss: renders name and keeps it in one of set's ways, one that holds a name of another
 * schema id if there is one. */
static __attribute__((noinline)) void name_miss(buf *b, json_cache *cache, json_name *set, uint64_t schema_id,
						const char *name)
{
	json_name *n = &set[cache->evict++ % JSON_NAME_WAYS];
	for (int i = 0; i < JSON_NAME_WAYS; i++)
		if (set[i].schema_id != schema_id)
			n = &set[i];
	size_t at = b->len;
	json_str(b, name);
	if (keep(b, at, n->text, sizeof(n->text), &n->len)) {
		n->name = name;
		n->schema_id = schema_id;
	}
}

_Static_assert(JSON_NAME_SETS == 16, "put_name() takes the address hash's top four bits");

/* A name of an event with schema id schema_id, from cache when it has it (see json_cache). A name's set is
 * chosen by Fibonacci hashing of its address. */
static inline void put_name(buf *b, json_cache *cache, uint64_t schema_id, const char *name)
{
	if (!cache || !schema_id || !name) {
		put_str(b, name);
		return;
	}
	json_name *set = cache->names[((uintptr_t)name * UINT64_C(0x9E3779B97F4A7C15)) >> 60];
	for (int i = 0; i < JSON_NAME_WAYS; i++) {
		if (set[i].name == name && set[i].schema_id == schema_id) {
			put(b, set[i].text, set[i].len);
			return;
		}
	}
	name_miss(b, cache, set, schema_id, name);
}

/* Embedded json/jsonb --------------------------------------------------------------------------- */

static const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* A JSON string starting at p (the opening quote); returns the byte after it or NULL. */
static const unsigned char *scan_string(const unsigned char *p, const unsigned char *end)
{
	for (p++; p < end;) {
		unsigned c = *p;
		if (c == '"')
			return p + 1;
		if (c < 0x20)
			return NULL;
		if (c == '\\') {
			if (++p == end)
				return NULL;
			if (*p == 'u') {
				if (end - p < 5)
					return NULL;
				for (int i = 1; i <= 4; i++)
					if (!((p[i] >= '0' && p[i] <= '9') ||
					      ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'f')))
						return NULL;
				p += 5;
			} else if (strchr("\"\\/bfnrt", *p) && *p) {
				p++;
			} else {
				return NULL;
			}
		} else if (c >= 0x80) {
			size_t skip, n = util_utf8_seq(p, (size_t)(end - p), &skip);
			if (!n)
				return NULL;
			p += n;
		} else {
			p++;
		}
	}
	return NULL;
}

static const unsigned char *scan_digits(const unsigned char *p, const unsigned char *end)
{
	const unsigned char *start = p;
	while (p < end && *p >= '0' && *p <= '9')
		p++;
	return p > start ? p : NULL;
}

static const unsigned char *scan_number(const unsigned char *p, const unsigned char *end)
{
	if (*p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (!(p = scan_digits(p, end)))
		return NULL;
	if (p < end && *p == '.' && !(p = scan_digits(p + 1, end)))
		return NULL;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (!(p = scan_digits(p, end)))
			return NULL;
	}
	return p;
}

/* Whether s is one valid JSON text (RFC 8259, UTF-8, nesting up to JSON_MAX_DEPTH). */
static bool json_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	uint8_t in_object[JSON_MAX_DEPTH / 8]; /* one bit per open container */
	int depth = 0;

value:
	p = skip_ws(p, end);
	if (p == end)
		return false;
	switch (*p) {
	case '{':
	case '[':
		if (depth == JSON_MAX_DEPTH)
			return false;
		if (*p == '{')
			in_object[depth / 8] |= (uint8_t)(1u << (depth % 8));
		else
			in_object[depth / 8] &= (uint8_t) ~(1u << (depth % 8));
		depth++;
		p = skip_ws(p + 1, end);
		if (p < end && (*p == '}' || *p == ']')) {
			if ((*p == '}') != (bool)(in_object[(depth - 1) / 8] & (1u << ((depth - 1) % 8))))
				return false;
			depth--;
			p++;
			goto after;
		}
		if (in_object[(depth - 1) / 8] & (1u << ((depth - 1) % 8)))
			goto key;
		goto value;
	case '"':
		p = scan_string(p, end);
		break;
	case 't':
		p = end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
		break;
	case 'f':
		p = end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
		break;
	case 'n':
		p = end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
		break;
	default:
		p = (*p == '-' || (*p >= '0' && *p <= '9')) ? scan_number(p, end) : NULL;
		break;
	}
	if (!p)
		return false;
after:
	p = skip_ws(p, end);
	if (depth == 0)
		return p == end;
	if (p == end)
		return false;
	bool obj = in_object[(depth - 1) / 8] & (1u << ((depth - 1) % 8));
	if (*p == ',') {
		p++;
		if (obj)
			goto key;
		goto value;
	}
	if (*p != (obj ? '}' : ']'))
		return false;
	depth--;
	p++;
	goto after;
key:
	p = skip_ws(p, end);
	if (p == end || *p != '"' || !(p = scan_string(p, end)))
		return false;
	p = skip_ws(p, end);
	if (p == end || *p != ':')
		return false;
	p++;
	goto value;
}

/* json/jsonb text embedded as JSON. Line breaks can only be whitespace between tokens in a valid
 * text, so they become spaces to keep the event on one line. Text that is not valid JSON (it
 * cannot come from the server, but the Event may come from anywhere) is written as a string. */
static void put_json(buf *b, const char *s)
{
	if (!s)
		s = "";
	size_t n = strlen(s);
	if (!json_valid(s, n)) {
		json_string(b, s, n);
		return;
	}
	reserve(b, n);
	char *w = b->data + b->len;
	memcpy(w, s, n);
	for (char *q = w; (q = memchr(q, '\n', (size_t)(w + n - q))); q++)
		*q = ' ';
	for (char *q = w; (q = memchr(q, '\r', (size_t)(w + n - q))); q++)
		*q = ' ';
	b->len += n;
}

/* Other values ----------------------------------------------------------------------------------- */

/* The fast path of put_double(): v = m / 10^k exactly as a double, for an integer m < 10^15 and
 * k <= 6, in plain decimal. Division of two exactly representable numbers is correctly rounded,
 * so the decimal reads back as v; having at most 15 digits, it is also what "%.15g" prints.
 * Covers integers and the usual amounts and measurements without printf and strtod. */
static bool put_short_decimal(buf *b, double v)
{
	static const double pow10[] = {1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6};
	double a = fabs(v);
	if (!(a >= 1e-4 && a < 1e15))
		return false;
	for (int k = 0; k <= 6; k++) {
		double m = a * pow10[k];
		if (m >= 1e15)
			return false;
		if (m != floor(m) || m / pow10[k] != a)
			continue;
		uint64_t mi = (uint64_t)m;
		while (k && mi % 10 == 0) { /* a*10^(k-1) may have rounded off an integer */
			mi /= 10;
			k--;
		}
		uint64_t p = (uint64_t)pow10[k];
		if (v < 0)
			put_c(b, '-');
		json_u64(b, mi / p);
		if (k) {
			put_c(b, '.');
			put_fixed(b, mi % p, k);
		}
		return true;
	}
	return false;
}

/* Shortest of 15, 16 or 17 significant digits that reads back as the same double. Assumes the
 * "C" LC_NUMERIC locale (cdc never calls setlocale for it). */
static void put_double(buf *b, double v)
{
	if (json_nonfinite(b, v) || put_short_decimal(b, v))
		return;
	char tmp[32];
	int n = 0;
	for (int prec = 15; prec <= 17; prec++) {
		n = snprintf(tmp, sizeof(tmp), "%.*g", prec, v);
		if (prec == 17 || strtod(tmp, NULL) == v)
			break;
	}
	put(b, tmp, (size_t)n);
}

void sink_json_uuid(buf *b, const ProtobufCBinaryData *u)
{
	static const char hex[] = "0123456789abcdef";
	if (u->len != 16) {
		json_base64(b, u->data, u->len);
		return;
	}
	reserve(b, 38);
	char *w = b->data + b->len;
	*w++ = '"';
	for (int i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			*w++ = '-';
		*w++ = hex[u->data[i] >> 4];
		*w++ = hex[u->data[i] & 15];
	}
	*w++ = '"';
	b->len = (size_t)(w - b->data);
	b->data[b->len] = '\0';
}

/* Year, month, day of a day count since 1970-01-01 (Howard Hinnant's civil_from_days), proleptic
 * Gregorian with astronomical years (year 0 is 1 BC). */
static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

void sink_json_ymd(buf *b, int64_t days)
{
	int64_t y;
	int m, d;
	civil_from_days(days, &y, &m, &d);
	if (y < 0) {
		put_c(b, '-');
		y = -y;
	} else if (y > 9999) {
		put_c(b, '+');
	}
	if (y > 9999)
		json_u64(b, (uint64_t)y);
	else
		put_fixed(b, (uint64_t)y, 4);
	/* "-MM-DD" after one reserve */
	reserve(b, 6);
	char *w = b->data + b->len;
	w[0] = '-';
	fixed_at(w + 1, (uint64_t)m, 2);
	w[3] = '-';
	fixed_at(w + 4, (uint64_t)d, 2);
	b->len += 6;
}

/* sink_json_ymd(), from cache when its last day is this one: the rows of a table read in order, or
 * written at about the same time, mostly share their dates. */
static void put_ymd(buf *b, json_cache *cache, int64_t days)
{
	if (!cache) {
		sink_json_ymd(b, days);
		return;
	}
	if (cache->day_len && cache->day == days) {
		put(b, cache->day_text, cache->day_len);
		return;
	}
	size_t at = b->len;
	sink_json_ymd(b, days);
	if (keep(b, at, cache->day_text, sizeof(cache->day_text), &cache->day_len))
		cache->day = days;
}

/* "HH:MM:SS", then ".ffffff" when the microseconds are not zero or always_frac. */
static void put_hms(buf *b, uint64_t us, bool always_frac)
{
	uint64_t s = us / USECS_PER_SEC, frac = us % USECS_PER_SEC;
	if (s / 3600 > 99)
		json_u64(b, s / 3600);
	else
		put_fixed(b, s / 3600, 2);
	/* ":MM:SS" and ".ffffff" after one reserve */
	reserve(b, 13);
	char *w = b->data + b->len;
	w[0] = ':';
	fixed_at(w + 1, s / 60 % 60, 2);
	w[3] = ':';
	fixed_at(w + 4, s % 60, 2);
	b->len += 6;
	if (frac || always_frac) {
		w[6] = '.';
		fixed_at(w + 7, frac, 6);
		b->len += 7;
	}
}

static void put_date(buf *b, json_cache *cache, int32_t days)
{
	if (days == INT32_MAX) {
		PUT_LIT(b, "\"infinity\"");
		return;
	}
	if (days == INT32_MIN) {
		PUT_LIT(b, "\"-infinity\"");
		return;
	}
	put_c(b, '"');
	put_ymd(b, cache, days);
	put_c(b, '"');
}

static void put_time(buf *b, int64_t us)
{
	put_c(b, '"');
	if (us < 0) { /* not a time of day: cannot come from the server */
		put_c(b, '-');
		put_hms(b, (uint64_t)0 - (uint64_t)us, false);
	} else {
		put_hms(b, (uint64_t)us, false);
	}
	put_c(b, '"');
}

/* RFC 3339: "YYYY-MM-DDTHH:MM:SS[.ffffff]" and "Z" for an instant; no suffix for wall-clock time. */
static void put_timestamp(buf *b, json_cache *cache, int64_t us, bool with_zone, bool always_frac)
{
	if (us == INT64_MAX) {
		PUT_LIT(b, "\"infinity\"");
		return;
	}
	if (us == INT64_MIN) {
		PUT_LIT(b, "\"-infinity\"");
		return;
	}
	int64_t days = util_floor_div(us, USECS_PER_DAY);
	put_c(b, '"');
	put_ymd(b, cache, days);
	put_c(b, 'T');
	put_hms(b, (uint64_t)(us - days * USECS_PER_DAY), always_frac);
	if (with_zone)
		put_c(b, 'Z');
	put_c(b, '"');
	b->data[b->len] = '\0';
}

void sink_json_timestamp(buf *b, int64_t us, bool with_zone, bool always_frac)
{
	put_timestamp(b, NULL, us, with_zone, always_frac);
}

static void put_value(buf *b, json_cache *cache, const Cdc__V1__Value *v)
{
	if (!v) {
		json_null(b);
		return;
	}
	switch (v->kind_case) {
	case CDC__V1__VALUE__KIND_INT_VALUE:
		json_i64(b, v->int_value);
		break;
	case CDC__V1__VALUE__KIND_FLOAT_VALUE:
		put_double(b, v->float_value);
		break;
	case CDC__V1__VALUE__KIND_BOOL_VALUE:
		json_boolean(b, v->bool_value);
		break;
	case CDC__V1__VALUE__KIND_NUMERIC_VALUE:
		put_str(b, v->numeric_value);
		break;
	case CDC__V1__VALUE__KIND_TEXT_VALUE:
		put_str(b, v->text_value);
		break;
	case CDC__V1__VALUE__KIND_BYTES_VALUE:
		json_base64(b, v->bytes_value.data, v->bytes_value.len);
		break;
	case CDC__V1__VALUE__KIND_UUID_VALUE:
		sink_json_uuid(b, &v->uuid_value);
		break;
	case CDC__V1__VALUE__KIND_DATE_VALUE:
		put_date(b, cache, v->date_value);
		break;
	case CDC__V1__VALUE__KIND_TIME_VALUE:
		put_time(b, v->time_value);
		break;
	case CDC__V1__VALUE__KIND_TIMESTAMP_VALUE:
		if (v->timestamp_value)
			put_timestamp(b, cache, v->timestamp_value->micros, v->timestamp_value->with_zone,
				      false);
		else
			json_null(b);
		break;
	case CDC__V1__VALUE__KIND_JSON_VALUE:
		put_json(b, v->json_value);
		break;
	case CDC__V1__VALUE__KIND_OTHER_VALUE:
		put_str(b, v->other_value ? v->other_value->text : "");
		break;
	case CDC__V1__VALUE__KIND_BINARY_VALUE:
		json_base64(b, v->binary_value.data, v->binary_value.len);
		break;
	case CDC__V1__VALUE__KIND_NULL_VALUE:
	case CDC__V1__VALUE__KIND_UNCHANGED_TOAST: /* callers leave these columns out */
	default:
		json_null(b);
		break;
	}
}

/* The event ------------------------------------------------------------------------------------ */

static bool col_is_toast(const Cdc__V1__Column *c)
{
	return c && c->value && c->value->kind_case == CDC__V1__VALUE__KIND_UNCHANGED_TOAST;
}

static void put_row(buf *b, json_cache *cache, uint64_t schema_id, const Cdc__V1__Row *r)
{
	if (!r) {
		json_null(b);
		return;
	}
	put_c(b, '{');
	bool first = true;
	for (size_t i = 0; i < r->n_columns; i++) {
		const Cdc__V1__Column *c = r->columns[i];
		if (!c || col_is_toast(c))
			continue;
		if (!first)
			put_c(b, ',');
		first = false;
		put_name(b, cache, schema_id, c->name);
		put_c(b, ':');
		put_value(b, cache, c->value);
	}
	put_c(b, '}');
	b->data[b->len] = '\0';
}

void sink_json_row(buf *b, const Cdc__V1__Row *r)
{
	put_row(b, NULL, 0, r);
}

static bool row_has_toast(const Cdc__V1__Row *r, const char *name)
{
	for (size_t i = 0; r && i < r->n_columns; i++) {
		const Cdc__V1__Column *c = r->columns[i];
		if (col_is_toast(c) && c->name && name && strcmp(c->name, name) == 0)
			return true;
	}
	return false;
}

/* Names of the unchanged TOAST columns of new_row, then those only old_row has. */
static void put_toast_names(buf *b, const Cdc__V1__Event *e)
{
	put_c(b, '[');
	bool first = true;
	const Cdc__V1__Row *rows[2] = {e->new_row, e->old_row};
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; rows[k] && i < rows[k]->n_columns; i++) {
			const Cdc__V1__Column *c = rows[k]->columns[i];
			if (!col_is_toast(c) || (k == 1 && row_has_toast(e->new_row, c->name)))
				continue;
			if (!first)
				put_c(b, ',');
			first = false;
			put_str(b, c->name);
		}
	}
	put_c(b, ']');
}

static void put_lsn(buf *b, uint64_t lsn)
{
	reserve(b, LSN_STRLEN + 2);
	char *w = b->data + b->len;
	w[0] = '"';
	size_t n = util_lsn_format(lsn, w + 1);
	w[n + 1] = '"';
	b->len += n + 2;
}

/* A schema id as 16 hex digits, in quotes (a JSON number would lose bits). */
static void put_schema_id(buf *b, json_cache *cache, uint64_t id)
{
	if (cache && cache->schema_id == id) {
		put(b, cache->schema_id_text, 18);
		return;
	}
	reserve(b, 18);
	char *w = b->data + b->len;
	w[0] = '"';
	util_hex64(id, w + 1);
	w[17] = '"'; /* over the NUL */
	b->len += 18;
	if (cache) {
		memcpy(cache->schema_id_text, w, 18);
		cache->schema_id = id;
	}
}

/* A column's "name", "type", "type_oid" and "typmod" members (schema and DDL events). */
static void put_column_type(buf *b, const char *name, const char *type, uint32_t oid, int32_t typmod)
{
	PUT_LIT(b, "\"name\":");
	put_str(b, name);
	PUT_LIT(b, ",\"type\":");
	put_str(b, type);
	PUT_LIT(b, ",\"type_oid\":");
	json_u64(b, oid);
	PUT_LIT(b, ",\"typmod\":");
	json_i64(b, typmod);
}

static void put_schema(buf *b, const Cdc__V1__Schema *s)
{
	PUT_LIT(b, ",\"table_schema\":{\"columns\":[");
	for (size_t i = 0; s && i < s->n_columns; i++) {
		const Cdc__V1__Schema__Column *c = s->columns[i];
		if (i)
			put_c(b, ',');
		put_c(b, '{');
		put_column_type(b, c->name, c->type, c->type_oid, c->typmod);
		PUT_LIT(b, ",\"key\":");
		json_boolean(b, c->key);
		PUT_LIT(b, ",\"nullable\":");
		if (c->nullable_present_case == CDC__V1__SCHEMA__COLUMN__NULLABLE_PRESENT_NULLABLE)
			json_boolean(b, c->nullable);
		else
			json_null(b);
		PUT_LIT(b, ",\"renamed_from\":");
		if (c->renamed_from && c->renamed_from[0])
			put_str(b, c->renamed_from);
		else
			json_null(b);
		put_c(b, '}');
	}
	PUT_LIT(b, "],\"replica_identity\":");
	if (s && s->replica_identity && s->replica_identity[0])
		put_str(b, s->replica_identity);
	else
		json_null(b);
	put_c(b, '}');
}

static void put_ddl(buf *b, const Cdc__V1__Ddl *d)
{
	PUT_LIT(b, ",\"ddl\":{\"event\":");
	put_str(b, d ? d->event : "");
	PUT_LIT(b, ",\"command_tag\":");
	put_str(b, d ? d->command_tag : "");
	PUT_LIT(b, ",\"object_type\":");
	put_str(b, d ? d->object_type : "");
	PUT_LIT(b, ",\"object_identity\":");
	put_str(b, d ? d->object_identity : "");
	PUT_LIT(b, ",\"statement\":");
	put_str(b, d ? d->statement : "");
	PUT_LIT(b, ",\"columns\":[");
	for (size_t i = 0; d && i < d->n_columns; i++) {
		const Cdc__V1__Ddl__Column *c = d->columns[i];
		if (i)
			put_c(b, ',');
		PUT_LIT(b, "{\"attnum\":");
		json_i64(b, c->attnum);
		put_c(b, ',');
		put_column_type(b, c->name, c->type, c->type_oid, c->typmod);
		PUT_LIT(b, ",\"not_null\":");
		json_boolean(b, c->not_null);
		put_c(b, '}');
	}
	PUT_LIT(b, "]}");
}

/* The event's members up to its table:
 * {"subscription":...,"offset":...,"tag":...,"op":...,"schema":...,"table":... */
static void put_head(buf *out, json_cache *cache, const Cdc__V1__Event *e)
{
	PUT_LIT(out, "{\"subscription\":");
	put_str(out, e->subscription);
	/* A member that is null goes in one literal. Most events have no offset and no tag. */
	if (e->offset_present_case == CDC__V1__EVENT__OFFSET_PRESENT_OFFSET) {
		PUT_LIT(out, ",\"offset\":");
		json_u64(out, e->offset);
	} else {
		PUT_LIT(out, ",\"offset\":null");
	}
	if (e->tag_present_case == CDC__V1__EVENT__TAG_PRESENT_TAG) {
		PUT_LIT(out, ",\"tag\":");
		put_str(out, e->tag);
	} else {
		PUT_LIT(out, ",\"tag\":null");
	}
	PUT_LIT(out, ",\"op\":");
	const char *op = pgo_event_op_name(e->op);
	if (op) {
		put_c(out, '"');
		put(out, op, strlen(op));
		put_c(out, '"');
	} else {
		json_null(out);
	}
	PUT_LIT(out, ",\"schema\":");
	put_name(out, cache, e->schema_id, e->schema);
	PUT_LIT(out, ",\"table\":");
	put_name(out, cache, e->schema_id, e->table);
}

/* put_head(), from cache for an event without offset and tag whose schema id (which covers the schema's and
 * the table's names), op and subscription are the last one's. */
static void put_head_cached(buf *out, json_cache *cache, const Cdc__V1__Event *e)
{
	bool plain = e->schema_id && e->offset_present_case != CDC__V1__EVENT__OFFSET_PRESENT_OFFSET &&
		     e->tag_present_case != CDC__V1__EVENT__TAG_PRESENT_TAG && e->subscription;
	if (plain && cache->head_len && cache->head_schema_id == e->schema_id && cache->head_op == e->op &&
	    strcmp(cache->head_subscription, e->subscription) == 0) {
		put(out, cache->head, cache->head_len);
		return;
	}
	size_t at = out->len;
	put_head(out, cache, e);
	cache->head_len = 0;
	if (plain && strlen(e->subscription) < sizeof(cache->head_subscription) &&
	    keep(out, at, cache->head, sizeof(cache->head), &cache->head_len)) {
		strcpy(cache->head_subscription, e->subscription);
		cache->head_schema_id = e->schema_id;
		cache->head_op = e->op;
	}
}

/* ,"lsn":"...","xid":N, from cache when the last event had them. */
static void put_lsn_xid(buf *out, json_cache *cache, const Cdc__V1__Event *e)
{
	if (cache && cache->lsn_len && cache->lsn == e->lsn && cache->xid == e->xid) {
		put(out, cache->lsn_text, cache->lsn_len);
		return;
	}
	size_t at = out->len;
	PUT_LIT(out, ",\"lsn\":");
	put_lsn(out, e->lsn);
	PUT_LIT(out, ",\"xid\":");
	json_u64(out, e->xid);
	if (cache && keep(out, at, cache->lsn_text, sizeof(cache->lsn_text), &cache->lsn_len)) {
		cache->lsn = e->lsn;
		cache->xid = e->xid;
	}
}

void sink_json_event_head(buf *out, json_cache *cache, const Cdc__V1__Event *e)
{
	if (cache)
		put_head_cached(out, cache, e);
	else
		put_head(out, NULL, e);
	put_lsn_xid(out, cache, e);
	PUT_LIT(out, ",\"key\":");
	put_row(out, cache, e->schema_id, e->key);
	PUT_LIT(out, ",\"new\":");
	put_row(out, cache, e->schema_id, e->new_row);
	PUT_LIT(out, ",\"old\":");
	put_row(out, cache, e->schema_id, e->old_row);
	PUT_LIT(out, ",\"unchanged_toast\":");
	put_toast_names(out, e);
	if (e->delivery_count) {
		PUT_LIT(out, ",\"delivery_count\":");
		json_u64(out, e->delivery_count);
	} else {
		PUT_LIT(out, ",\"delivery_count\":null");
	}
	if (e->schema_id) {
		PUT_LIT(out, ",\"schema_id\":");
		put_schema_id(out, cache, e->schema_id);
	}
	if (e->op == CDC__V1__OP__OP_SCHEMA) {
		put_schema(out, e->table_schema);
	} else if (e->op == CDC__V1__OP__OP_DDL) {
		put_ddl(out, e->ddl);
	} else if (e->op == CDC__V1__OP__OP_TRUNCATE) {
		PUT_LIT(out, ",\"truncate\":{\"cascade\":");
		json_boolean(out, e->truncate && e->truncate->cascade);
		PUT_LIT(out, ",\"restart_identity\":");
		json_boolean(out, e->truncate && e->truncate->restart_identity);
		put_c(out, '}');
	} else if (e->op == CDC__V1__OP__OP_MESSAGE) {
		PUT_LIT(out, ",\"message\":{\"prefix\":");
		put_str(out, e->message ? e->message->prefix : "");
		PUT_LIT(out, ",\"content\":");
		if (e->message)
			json_base64(out, e->message->content.data, e->message->content.len);
		else
			PUT_LIT(out, "\"\"");
		PUT_LIT(out, ",\"transactional\":");
		json_boolean(out, e->message && e->message->transactional);
		put_c(out, '}');
	}
	out->data[out->len] = '\0';
}

void sink_json_commit_free(json_commit *c)
{
	buf_free(&c->lsn_part);
	buf_free(&c->time_part);
	c->valid = false;
}

void sink_json_event_tail(buf *out, json_commit *c, uint64_t commit_lsn, uint32_t tx_index,
			  int64_t commit_time)
{
	/* Every event of a transaction (every read of a backfill chunk) has the same commit fields:
	 * the timestamp alone cost 4% of a backfill's CPU rendered for each. */
	if (!c->valid || c->lsn != commit_lsn || c->time != commit_time) {
		buf_reset(&c->lsn_part);
		PUT_LIT(&c->lsn_part, ",\"commit_lsn\":");
		put_lsn(&c->lsn_part, commit_lsn);
		PUT_LIT(&c->lsn_part, ",\"tx_index\":");
		buf_reset(&c->time_part);
		PUT_LIT(&c->time_part, ",\"commit_time\":");
		sink_json_timestamp(&c->time_part, commit_time, true, true);
		PUT_LIT(&c->time_part, "}\n");
		c->lsn = commit_lsn;
		c->time = commit_time;
		c->valid = true;
	}
	put(out, c->lsn_part.data, c->lsn_part.len);
	json_u64(out, tx_index);
	put(out, c->time_part.data, c->time_part.len);
	out->data[out->len] = '\0';
}

void sink_json_dead_letter(buf *out, const Cdc__V1__DeadLetter *d)
{
	PUT_LIT(out, ",\"dead_letter\":{\"original_offset\":");
	if (d->original_offset)
		json_u64(out, d->original_offset);
	else
		json_null(out);
	PUT_LIT(out, ",\"deliveries\":");
	if (d->deliveries)
		json_u64(out, d->deliveries);
	else
		json_null(out);
	PUT_LIT(out, ",\"reason\":");
	if (d->reason && d->reason[0])
		put_str(out, d->reason);
	else
		json_null(out);
	PUT_LIT(out, ",\"dead_time\":");
	if (d->dead_time)
		sink_json_timestamp(out, d->dead_time, true, true);
	else
		json_null(out);
	put_c(out, '}');
	out->data[out->len] = '\0';
}

void sink_json_event(buf *out, const Cdc__V1__Event *e)
{
	json_commit c = {0};
	sink_json_event_head(out, NULL, e);
	sink_json_event_tail(out, &c, e->commit_lsn, e->tx_index, e->commit_time);
	sink_json_commit_free(&c);
}

/* fuzz_pgoutput.c: libFuzzer harness for the pgoutput parser and relation cache.
 * The first byte picks the session (protocol version, in a stream or not, v4 abort info); the
 * rest is one message. Seeds in tests/fuzz/corpus/pgoutput/ are fixture records behind such a byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/pgoutput.h"

static pgo_msg msg;
static pgo_relcache *cache;
static unsigned inputs;

/* Reads every byte a parsed message points at, so that the sanitizers see any bad pointer. */
static unsigned touch(const void *p, size_t n)
{
	const volatile uint8_t *b = p;
	unsigned sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += b[i];
	return sum;
}

static unsigned touch_str(const char *s)
{
	return touch(s, strlen(s) + 1);
}

static unsigned touch_tuple(const pgo_tuple *t)
{
	unsigned sum = 0;
	if (t->ncols > PGO_MAX_COLUMNS)
		abort();
	for (uint16_t i = 0; i < t->ncols; i++) {
		const pgo_datum *d = &t->cols[i];
		if (d->kind == PGO_TEXT || d->kind == PGO_BINARY)
			sum += touch(d->data, d->len);
		else if (d->kind != PGO_NULL && d->kind != PGO_TOAST)
			abort();
	}
	return sum;
}

/* A cached relation must equal the message it came from. */
static void check_cached(const pgo_msg *m)
{
	const pgo_rel *r = pgo_relcache_get(cache, m->relation.relid);
	if (!r || r->relid != m->relation.relid || r->ncols != m->relation.ncols ||
	    strcmp(r->nspname, m->relation.nspname) || strcmp(r->relname, m->relation.relname) ||
	    r->replident != m->relation.replident || r->version == 0)
		abort();
	uint16_t keys = 0;
	for (uint16_t i = 0; i < r->ncols; i++) {
		if (strcmp(r->cols[i].name, m->relation.cols[i].name) ||
		    r->cols[i].type_oid != m->relation.cols[i].type_oid ||
		    r->cols[i].typmod != m->relation.cols[i].typmod ||
		    r->cols[i].flags != m->relation.cols[i].flags)
			abort();
		keys += r->cols[i].flags & 1;
		(void)pgo_type_name_of(cache, r->cols[i].type_oid);
	}
	if (keys != r->nkeys)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	/* The cache keeps every relation it saw: start over now and then to bound its memory. */
	if (!cache || ++inputs % 1000 == 0) {
		pgo_relcache_free(cache);
		cache = pgo_relcache_new();
	}
	pgo_options opt = {.proto_version = 1 + (data[0] & 3), .stream_abort_info = data[0] & 8};
	bool in_stream = data[0] & 4;
	char err[256];

	/* A copy of exactly the message's size, so that any read past its end is caught. */
	size_t len = size - 1;
	uint8_t *copy = malloc(len ? len : 1);
	memcpy(copy, data + 1, len);
	unsigned sum = 0;
	if (!pgo_parse(copy, len, &opt, in_stream, &msg, err, sizeof(err))) {
		if (strlen(err) == 0 || strlen(err) >= sizeof(err))
			abort();
		free(copy);
		return 0;
	}
	switch (msg.type) {
	case PGO_RELATION:
		for (uint16_t i = 0; i < msg.relation.ncols; i++)
			sum += touch_str(msg.relation.cols[i].name);
		sum += touch_str(msg.relation.nspname) + touch_str(msg.relation.relname);
		pgo_relcache_put(cache, &msg);
		check_cached(&msg);
		break;
	case PGO_TYPE:
		sum += touch_str(msg.typ.nspname) + touch_str(msg.typ.typname);
		pgo_relcache_put_type(cache, &msg);
		if (!pgo_type_name_of(cache, msg.typ.oid))
			abort();
		break;
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE:
		sum += touch_tuple(&msg.change.old) + touch_tuple(&msg.change.new);
		(void)pgo_relcache_get(cache, msg.change.relid);
		break;
	case PGO_TRUNCATE:
		for (uint32_t i = 0; i < msg.truncate.nrels; i++)
			sum += pgo_truncate_relid(&msg, i);
		break;
	case PGO_MESSAGE:
		sum += touch_str(msg.message.prefix) + touch(msg.message.content, msg.message.len);
		break;
	case PGO_ORIGIN:
		sum += touch_str(msg.origin.name);
		break;
	case PGO_BEGIN_PREPARE:
	case PGO_PREPARE:
	case PGO_STREAM_PREPARE:
		sum += touch_str(msg.prepare.gid);
		break;
	case PGO_COMMIT_PREPARED:
		sum += touch_str(msg.commit_prepared.gid);
		break;
	case PGO_ROLLBACK_PREPARED:
		sum += touch_str(msg.rollback_prepared.gid);
		break;
	default:
		break;
	}
	free(copy);
	return (int)(sum & 0);
}

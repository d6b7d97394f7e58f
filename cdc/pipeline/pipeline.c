/* See pipeline.h. Plain transactions are delivered change by change. A held one's changes are matched and
 * rendered as they arrive. They are handed to the sinks that hold events themselves (sink.h's hold
 * operations), or put into records the transaction assembler spills. They are replayed with their commit
 * fields at its commit. Transactions are numbered in commit order. progress.h turns what the sinks report
 * delivered into a position. */
#include "cdc/pipeline/pipeline.h"
#include "decoder/base/bytes.h"

#include <stdlib.h>
#include <string.h>

#include "cdc/match/match.h"
#include "cdc/match/predicate.h"
#include "cdc/pipeline/progress.h"
#include "cdc/pipeline/schema_track.h"
#include "cdc/source/source.h"
#include "decoder/base/arena.h"
#include "decoder/base/log.h"
#include "decoder/ddl.h"
#include "decoder/event.h"
#include "decoder/schema.h"

#define LARGE_TXN_BYTES (64 * 1024 * 1024) /* held transactions this large are logged as delivered */

typedef struct sub_state {
	pipeline_sub sub;
	pipeline_count count;
} sub_state;

struct pipeline {
	char *spill_dir;
	uint64_t endpos;
	void (*at_boundary)(void *ctx);
	void (*at_resync)(void *ctx);
	void *ctx;

	rules *rules;
	sub_state *subs; /* parallel to the rules' subscriptions */
	size_t nsubs;
	sink **sinks; /* every instance */
	size_t nsinks;

	pgo_relcache *rc;
	sch_tables *tables;  /* what DDL events told of the tables */
	strack *track;	     /* which schema each subscription's consumers have */
	txn_assembler *asm_; /* per stream, as it depends on the negotiated protocol */
	txn_handler handler;
	arena *arena;
	buf scratch; /* one rendered event of a plain transaction */
	progress prog;

	pipeline_backfills bf; /* no backfills without a change hook */
	struct {
		char schema[MATCH_NAME_MAX + 1], table[MATCH_NAME_MAX + 1];
		pipeline_signal_fn fn; /* NULL if no signal table */
		void *ctx;
	} sig;
	pgo_msg *read_msg; /* a backfill's read, as an Insert for pgo_event_from_change */
	bool past_endpos;  /* a transaction committing after endpos arrived, so deliver nothing more */
	bool ddl;	   /* pipeline_deliver_ddl */
	uint64_t seq, cur_seq;
	uint32_t tx_index;
	uint32_t held_xid; /* the held transaction whose change is being rendered */
	uint64_t flushed_lsn, boundary_lsn;
	uint64_t reads; /* chunks of reads delivered, their relations' versions */
	uint64_t events, large_txn_start_ms;
	int64_t last_commit_time;
	hist received; /* commit time to its commit read from the slot, microseconds */
};

/* Between streams nothing is held. */
bool pipeline_in_txn(const pipeline *p)
{
	return p->asm_ && pgo_txn_in_progress(p->asm_);
}

static uint64_t oldest_prepared(const pipeline *p)
{
	return p->asm_ ? pgo_txn_oldest_prepared(p->asm_) : 0;
}

txn_stats pipeline_held(const pipeline *p)
{
	return p->asm_ ? pgo_txn_get_stats(p->asm_) : (txn_stats){0};
}

bool pipeline_between_txns(const pipeline *p)
{
	txn_stats st = pipeline_held(p);
	return !pipeline_in_txn(p) && st.streamed_open + st.prepared_open == 0;
}

/* Delivery -------------------------------------------------------------------------------- */

/* A held change's record (see decoder/txn.h) starts with [u32 slots], how many tx_index values the change
 * takes. Then comes, per rendered event, [u32 subscription][u32 slot within the change][u32 length][bytes].
 * Events are rendered as they arrive. Replay only adds the commit fields. */
#define HOLD_ENTRY 12
/* An entry whose subscription is this holds a change's keys for the backfills
 * (the backfills' hold hook), reported at the replay, where the change is delivered. */
#define HOLD_BACKFILL UINT32_MAX
/* A schema event delivered at the replay. Its slot is the subscription. Its bytes are [u32 relid][u64 id][u64
 * DDL generation], what the subscription's consumers have of the table from then on. */
#define HOLD_SCHEMA (UINT32_MAX - 1)
#define HOLD_SCHEMA_LEN 20
/* A DDL message's content, what it tells of its table taken at the replay (an aborted
 * transaction's DDL never happened). */
#define HOLD_DDL (UINT32_MAX - 2)
/* A signal row's columns (pipeline_signal), handed on at the replay. For each of id, type and data, they are
 * [u32 length or UINT32_MAX for NULL][bytes]. */
#define HOLD_SIGNAL (UINT32_MAX - 3)
/* In an entry's slot, this marks a schema event. It comes before the change at that slot (sink_commit's
 * before_change). */
#define SLOT_BEFORE (UINT32_C(1) << 31)

/* Appends an entry [kind][slot][length][bytes] to a held change's record. */
static void hold_entry(buf *hold, uint32_t kind, uint32_t slot, const void *data, size_t len)
{
	char head[HOLD_ENTRY];
	store_u32(head, kind);
	store_u32(head + 4, slot);
	store_u32(head + 8, (uint32_t)len);
	buf_append(hold, head, HOLD_ENTRY);
	buf_append(hold, data, len);
}

/* Hands e to subscription sub's sink. In a plain transaction it is delivered now with commit fields c. In a
 * held one (c has only tx_index), a sink that holds events holds it. Otherwise it is rendered into the
 * change's record. */
static bool emit_to(pipeline *p, Cdc__V1__Event *e, uint32_t sub, const sink_commit *c, uint32_t slot,
		    buf *hold, char *err, size_t errlen)
{
	sub_state *s = &p->subs[sub];
	e->subscription = (char *)s->sub.name;
	e->tag_present_case =
	    s->sub.tag ? CDC__V1__EVENT__TAG_PRESENT_TAG : CDC__V1__EVENT__TAG_PRESENT__NOT_SET;
	e->tag = (char *)s->sub.tag;
	sink *k = s->sub.sink;
	if (hold && !k->ops->hold) {
		size_t at = hold->len;
		buf_reserve(hold, HOLD_ENTRY);
		hold->len += HOLD_ENTRY;
		k->ops->render(k, sub, e, hold);
		store_u32(hold->data + at, sub);
		store_u32(hold->data + at + 4, slot);
		store_u32(hold->data + at + 8, (uint32_t)(hold->len - at - HOLD_ENTRY));
		return true;
	}
	p->events++;
	buf_reset(&p->scratch);
	k->ops->render(k, sub, e, &p->scratch);
	s->count.events++;
	s->count.bytes += p->scratch.len;
	if (hold)
		return k->ops->hold(k, sub, p->held_xid, c->tx_index + (slot & ~SLOT_BEFORE), p->scratch.data,
				    p->scratch.len, err, errlen);
	sink_commit at = *c;
	at.tx_index += slot & ~SLOT_BEFORE;
	at.before_change = (slot & SLOT_BEFORE) != 0;
	return k->ops->deliver(k, sub, p->scratch.data, p->scratch.len, &at, p->cur_seq, err, errlen);
}

/* The fields known when the change arrives. The commit fields are the sinks' to add. */
static void stamp(Cdc__V1__Event *ev, const txn_info *t, pgo_lsn lsn)
{
	ev->lsn = lsn;
	ev->xid = t ? t->xid : 0;
	ev->origin = t && t->origin ? (char *)t->origin : "";
}

/* rel's schema event as subscription sub delivers it (its `columns`), with its id. */
static Cdc__V1__Event *schema_event(pipeline *p, const pgo_rel *rel, uint32_t sub)
{
	Cdc__V1__Event *e =
	    match_rules_project(p->rules, sub, pgo_schema_event(p->arena, p->rc, rel, p->tables), p->arena);
	e->schema_id = pgo_schema_id(e);
	return e;
}

/* A schema event before subscription sub's row of rel (the change of ev), or before its truncate of rel. It
 * is skipped when its consumers have rel's schema already. In a held transaction it is skipped when that
 * transaction has it already (its events are delivered at its commit, after whatever comes meanwhile). Sets a
 * row's schema_id (a truncate has no row, and names no schema). */
static bool announce(pipeline *p, const pgo_rel *rel, uint32_t relid, Cdc__V1__Event *ev, uint32_t sub,
		     const sink_commit *c, uint32_t slot, buf *hold, char *err, size_t errlen)
{
	uint64_t gen = pgo_schema_tables_generation(p->tables), since;
	uint64_t id = pipeline_track_id(p->track, sub, relid, rel->version, gen);
	Cdc__V1__Event *se = NULL;
	if (!id) {
		se = schema_event(p, rel, sub);
		id = se->schema_id;
		pipeline_track_set_id(p->track, sub, relid, rel->version, gen, id);
	}
	if (ev->op != CDC__V1__OP__OP_TRUNCATE)
		ev->schema_id = id;
	if (!match_rules_wants(p->rules, sub, MATCH_OP_SCHEMA))
		return true;
	uint64_t had = pipeline_track_delivered(p->track, sub, relid, &since);
	if (hold) {
		if (pipeline_track_held(p->track, p->held_xid, sub, relid, id))
			return true;
		pipeline_track_hold(p->track, p->held_xid, sub, relid, id, c->tx_index);
		uint8_t rec[HOLD_SCHEMA_LEN];
		store_u32(rec, relid);
		store_u64(rec + 4, id);
		store_u64(rec + 12, gen);
		hold_entry(hold, HOLD_SCHEMA, sub, rec, sizeof(rec));
	} else {
		if (had == id)
			return true;
		pipeline_track_set_delivered(p->track, sub, relid, id, gen);
	}
	if (!se)
		se = schema_event(p, rel, sub);
	/* Renames since the consumers' previous schema event. A held transaction's event is delivered after
	 * events not known yet, so it names none. */
	for (size_t i = 0; had && !hold && i < se->table_schema->n_columns; i++) {
		const char *from =
		    pgo_schema_renamed_from(p->tables, relid, since, se->table_schema->columns[i]->name);
		if (from) {
			Cdc__V1__Schema__Column *col = arena_alloc(p->arena, sizeof(*col));
			*col = *se->table_schema->columns[i];
			col->renamed_from = (char *)from;
			se->table_schema->columns[i] = col;
		}
	}
	se->lsn = ev->lsn;
	se->xid = ev->xid;
	se->origin = ev->origin;
	return emit_to(p, se, sub, c, slot | SLOT_BEFORE, hold, err, errlen);
}

/* ev to subscription sub with its projection, if its rules accept it. *taken says whether they did
 * (match_rules_event first). A row of rel comes after its schema event (announce). relid is what the tracking
 * knows the table by. */
static bool emit_sub(pipeline *p, Cdc__V1__Event *ev, const pgo_rel *rel, uint32_t relid, uint32_t sub,
		     const sink_commit *c, uint32_t slot, buf *hold, bool *taken, char *err, size_t errlen)
{
	*taken = match_rules_accept(p->rules, sub, ev, p->arena);
	if (!*taken)
		return true;
	if (rel && !announce(p, rel, relid, ev, sub, c, slot, hold, err, errlen))
		return false;
	return emit_to(p, match_rules_project(p->rules, sub, ev, p->arena), sub, c, slot, hold, err, errlen);
}

/* ev to the matching subscriptions subs (emit_sub). */
static bool emit(pipeline *p, Cdc__V1__Event *ev, const pgo_rel *rel, uint32_t relid, const uint32_t *subs,
		 size_t n, const sink_commit *c, uint32_t slot, buf *hold, char *err, size_t errlen)
{
	bool taken;
	match_rules_event(p->rules);
	for (size_t i = 0; i < n; i++)
		if (!emit_sub(p, ev, rel, relid, subs[i], c, slot, hold, &taken, err, errlen))
			return false;
	return true;
}

static const pgo_rel *relation(pipeline *p, const pgo_msg *m, uint32_t relid, char *err, size_t errlen)
{
	const pgo_rel *rel = pgo_relcache_get(p->rc, relid);
	if (!rel)
		util_errf(err, errlen, "%s for relation %u that no Relation message described",
			  pgo_type_name(m->type), relid);
	return rel;
}

/* Backfills -------------------------------------------------------------------------------- */

static bf_datum datum_of(const pgo_datum *d)
{
	switch (d->kind) {
	case PGO_NULL:
		return (bf_datum){.data = NULL, .len = -1};
	case PGO_TOAST:
		return (bf_datum){.data = NULL, .len = BF_ABSENT};
	default:
		return (bf_datum){.data = d->data, .len = (int32_t)d->len};
	}
}

/* The replica identity columns of a change (its key as the stream sends it), in the arena. */
static void change_of(pipeline *p, const pgo_rel *rel, const pgo_msg *m, bf_change *c)
{
	size_t n = 0;
	const char **names = arena_alloc(p->arena, (rel->ncols + 1u) * sizeof(*names));
	bf_datum *oldv = arena_alloc(p->arena, (rel->ncols + 1u) * sizeof(*oldv));
	bf_datum *newv = arena_alloc(p->arena, (rel->ncols + 1u) * sizeof(*newv));
	bool has_old = m->change.old_kind && m->change.old.ncols == rel->ncols;
	bool has_new = m->type != PGO_DELETE && m->change.new.ncols == rel->ncols;
	*c = (bf_change){.schema = rel->nspname, .table = rel->relname, .names = names};
	for (size_t i = 0; i < rel->ncols; i++) {
		if (has_new && m->change.new.cols[i].kind == PGO_TOAST)
			c->partial = true;
		if (!(rel->cols[i].flags & 1))
			continue;
		names[n] = rel->cols[i].name;
		oldv[n] = has_old ? datum_of(&m->change.old.cols[i]) : (bf_datum){NULL, BF_ABSENT};
		newv[n] = has_new ? datum_of(&m->change.new.cols[i]) : (bf_datum){NULL, BF_ABSENT};
		n++;
	}
	c->ncols = n;
	c->old_values = has_old ? oldv : NULL;
	c->new_values = has_new ? newv : NULL;
}

/* A change's keys to the backfills where it is delivered. In a plain transaction that is now. In a held one
 * they go into its spill record, replayed at its commit (a backfill may start before that). */
static void report_change(pipeline *p, const txn_info *t, const bf_change *c, buf *hold)
{
	if (!p->bf.change)
		return;
	if (hold) {
		size_t at = hold->len;
		buf_reserve(hold, HOLD_ENTRY);
		hold->len += HOLD_ENTRY;
		p->bf.hold(c, hold);
		store_u32(hold->data + at, HOLD_BACKFILL);
		store_u32(hold->data + at + 4, 0);
		store_u32(hold->data + at + 8, (uint32_t)(hold->len - at - HOLD_ENTRY));
		return;
	}
	if (t) {
		bf_change x = *c;
		x.xid = t->xid;
		p->bf.change(p->bf.ctx, &x);
	}
}

/* A held change's keys, at its transaction's commit. */
static bool replay_change(pipeline *p, const txn_info *t, const uint8_t *data, size_t len, char *err,
			  size_t errlen)
{
	if (p->bf.change && !p->bf.replay(p->bf.ctx, data, len, t->xid))
		return util_errf(err, errlen, "spill record of transaction %u: a malformed backfill entry",
				 t->xid);
	return true;
}

/* Versions of the relations the reads describe, never those of the relation cache's entries. */
#define READ_VERSION (UINT64_C(1) << 63)

static uint32_t name_id(const char *schema, const char *table)
{
	uint32_t h = 2166136261u;
	for (const char *s = schema; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	h = (h ^ '.') * 16777619u;
	for (const char *s = table; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h | UINT32_C(0x80000000);
}

/* The reads of a chunk whose window closed, at the high watermark. Each is one event, for the backfill's
 * subscription only. Its `where`, `columns` and the backfill's own `where` apply. Their commit_lsn is the
 * watermark's LSN (the end of its record) minus one. That is inside the watermark's record, so no
 * transaction's commit_lsn (a record's start) nor another message's can equal it. So (commit_lsn, tx_index)
 * stays unique and in stream order. A transaction whose commit record starts right after the watermark has
 * the watermark's LSN, and comes after the reads. */
static bool emit_reads(void *ctx, const bf_batch *b, size_t *delivered, char *err, size_t errlen)
{
	pipeline *p = ctx;
	uint32_t sub = 0;
	while (sub < p->nsubs && strcmp(p->subs[sub].sub.name, b->subscription) != 0)
		sub++;
	if (sub == p->nsubs)
		return true; /* the subscription is gone */
	pgo_relcol *cols = util_xcalloc(b->ncols + 1, sizeof(*cols));
	for (size_t i = 0; i < b->ncols; i++)
		cols[i] = (pgo_relcol){
		    .name = b->cols[i].name, .type_oid = b->cols[i].type_oid, .typmod = b->cols[i].typmod};
	for (size_t k = 0; k < b->nkeys; k++)
		cols[b->keys[k]].flags = 1;
	pgo_rel rel = {.nspname = (char *)b->schema,
		       .relname = (char *)b->table,
		       .ncols = (uint16_t)b->ncols,
		       .cols = cols,
		       .nkeys = (uint16_t)b->nkeys,
		       .version = READ_VERSION | ++p->reads};
	/* The reads' schema is the stream's when they have the same columns (so the rows of both have
	 * the same schema id), else their own. A table the stream has not described is known by a
	 * hash of its name (OIDs from 2^31 on are as rare as a collision of two such hashes). */
	const pgo_rel *stream = pgo_relcache_find(p->rc, b->schema, b->table), *described = &rel;
	bool same = stream && stream->ncols == rel.ncols;
	for (size_t i = 0; same && i < rel.ncols; i++)
		same = strcmp(stream->cols[i].name, cols[i].name) == 0 &&
		       stream->cols[i].type_oid == cols[i].type_oid;
	if (same)
		described = stream;
	uint32_t relid = stream ? stream->relid : name_id(b->schema, b->table);
	if (!p->read_msg)
		p->read_msg = util_xmalloc(sizeof(*p->read_msg));
	pgo_msg *m = p->read_msg;
	m->type = PGO_INSERT;
	m->change.relid = 0;
	m->change.old_kind = 0;
	m->change.new.ncols = (uint16_t)b->ncols;
	bf_datum *vals = util_xcalloc(b->ncols + 1, sizeof(*vals));
	pred *where = b->where ? match_predicate_parse(b->where, NULL, 0) : NULL;
	sink_commit c = {.commit_lsn = b->lsn - 1, .commit_time = util_wall_ms() * 1000};
	uint32_t slot = 0;
	size_t pos = 0;
	bool ok = true;
	while (ok && p->bf.next_read(b, &pos, vals)) {
		for (size_t i = 0; i < b->ncols; i++)
			m->change.new.cols[i] = vals[i].len < 0 ? (pgo_datum){.kind = PGO_NULL}
								: (pgo_datum){.kind = PGO_TEXT,
									      .len = (uint32_t)vals[i].len,
									      .data = vals[i].data};
		Cdc__V1__Event *ev;
		ok = pgo_event_from_change(p->arena, p->rc, &rel, m, &ev, err, errlen);
		if (ok) {
			ev->op = CDC__V1__OP__OP_READ;
			ev->lsn = c.commit_lsn;
			ev->origin = "";
			bool taken = false;
			match_rules_event(p->rules);
			if (!where || match_predicate_eval(where, ev, p->arena))
				ok = emit_sub(p, ev, described, relid, sub, &c, slot, NULL, &taken, err,
					      errlen);
			slot += taken;
			*delivered += taken;
		}
		arena_reset(p->arena);
	}
	match_predicate_free(where);
	free(vals);
	free(cols);
	return ok;
}

void pipeline_set_backfills(pipeline *p, const pipeline_backfills *b)
{
	p->bf = b ? *b : (pipeline_backfills){0};
}

void pipeline_set_signals(pipeline *p, const char *table, pipeline_signal_fn fn, void *ctx)
{
	p->sig.fn = table && match_table_split(table, p->sig.schema, p->sig.table) ? fn : NULL;
	p->sig.ctx = ctx;
}

/* A signal row's column by name, as text. NULL for SQL NULL or no such column. */
static const pgo_datum *signal_column(const pgo_rel *rel, const pgo_msg *m, const char *name)
{
	for (size_t i = 0; i < rel->ncols && i < m->change.new.ncols; i++)
		if (strcmp(rel->cols[i].name, name) == 0)
			return m->change.new.cols[i].kind == PGO_TEXT ? &m->change.new.cols[i] : NULL;
	return NULL;
}

/* An insert into the signal table. It is handed on now in a plain transaction. In a held one it is kept in
 * the transaction's record until its replay. */
static void report_signal(pipeline *p, const txn_info *t, const pgo_rel *rel, const pgo_msg *m, buf *hold,
			  uint32_t tx_index)
{
	const pgo_datum *col[3] = {signal_column(rel, m, "id"), signal_column(rel, m, "type"),
				   signal_column(rel, m, "data")};
	if (hold) {
		size_t at = hold->len;
		buf_reserve(hold, HOLD_ENTRY);
		hold->len += HOLD_ENTRY;
		for (int i = 0; i < 3; i++) {
			char n[4];
			store_u32(n, col[i] ? col[i]->len : UINT32_MAX);
			buf_append(hold, n, 4);
			if (col[i])
				buf_append(hold, col[i]->data, col[i]->len);
		}
		store_u32(hold->data + at, HOLD_SIGNAL);
		store_u32(hold->data + at + 4, 0);
		store_u32(hold->data + at + 8, (uint32_t)(hold->len - at - HOLD_ENTRY));
		return;
	}
	pipeline_signal s = {.commit_lsn = t->commit_lsn, .tx_index = tx_index};
	const char **text[3] = {&s.id, &s.type, &s.data};
	size_t *len[3] = {&s.id_len, &s.type_len, &s.data_len};
	for (int i = 0; i < 3; i++)
		if (col[i]) {
			*text[i] = col[i]->data;
			*len[i] = col[i]->len;
		}
	p->sig.fn(p->sig.ctx, &s);
}

/* A held signal row at its transaction's commit. False if the entry is malformed. */
static bool replay_signal(pipeline *p, const txn_info *t, const uint8_t *data, size_t len, uint32_t tx_index)
{
	pipeline_signal s = {.commit_lsn = t->commit_lsn, .tx_index = tx_index};
	const char **text[3] = {&s.id, &s.type, &s.data};
	size_t *lens[3] = {&s.id_len, &s.type_len, &s.data_len}, pos = 0;
	for (int i = 0; i < 3; i++) {
		if (len - pos < 4)
			return false;
		uint32_t n = load_u32(data + pos);
		pos += 4;
		if (n == UINT32_MAX)
			continue;
		if (n > len - pos)
			return false;
		*text[i] = (const char *)data + pos;
		*lens[i] = n;
		pos += n;
	}
	if (pos != len)
		return false;
	if (p->sig.fn)
		p->sig.fn(p->sig.ctx, &s);
	return true;
}

/* What a DDL event tells of its table, from a DDL message's content, at its commit. */
static void learn_ddl(pipeline *p, const char *content, size_t len)
{
	ddl_msg d;
	char why[256];
	if (pgo_ddl_parse(p->arena, content, len, &d, why, sizeof(why)))
		pgo_schema_tables_ddl(p->tables, &d, pgo_relcache_get(p->rc, d.relid));
	arena_reset(p->arena);
}

/* A message of cdc's DDL trigger. With source.ddl, it becomes an OP_DDL event to the subscriptions of its
 * table that want ddl. where and changed are about rows, so they do not apply. What it tells of the table is
 * kept for the schema events that follow. False if it does not parse. It is then an ordinary message (a
 * warning says why), and nothing is lost. */
static bool ddl_events(pipeline *p, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, const sink_commit *c,
		       buf *hold, bool *ok, char *err, size_t errlen)
{
	ddl_msg d;
	char why[256];
	if (!pgo_ddl_parse(p->arena, m->message.content, m->message.len, &d, why, sizeof(why))) {
		char at[LSN_STRLEN];
		util_lsn_format(lsn, at);
		log_warn("a DDL message that cdc cannot read is delivered as a logical message",
			 "lsn=%s error=\"%s\"", at, why);
		return false;
	}
	if (hold)
		hold_entry(hold, HOLD_DDL, 0, m->message.content, m->message.len);
	else
		pgo_schema_tables_ddl(p->tables, &d, pgo_relcache_get(p->rc, d.relid));
	const uint32_t *subs = NULL;
	size_t n = p->ddl ? match_rules_match_table(p->rules, d.schema, d.table, MATCH_OP_DDL, &subs) : 0;
	Cdc__V1__Event *ev = pgo_ddl_event(p->arena, &d);
	stamp(ev, t, lsn);
	for (size_t i = 0; i < n && *ok; i++)
		*ok = emit_to(p, ev, subs[i], c, 0, hold, err, errlen);
	return true;
}

static const unsigned change_op[] = {
    [PGO_INSERT] = MATCH_OP_INSERT, [PGO_UPDATE] = MATCH_OP_UPDATE, [PGO_DELETE] = MATCH_OP_DELETE};

/* One change. Match it, build its event only if some subscription wants it, and emit it. Sets *slots to the
 * number of tx_index values it takes (one per truncated relation, none for a heartbeat). */
static bool change_events(pipeline *p, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold,
			  uint32_t *slots, char *err, size_t errlen)
{
	const uint32_t *subs;
	size_t n;
	Cdc__V1__Event *ev;
	/* A non-transactional message's commit_lsn is its LSN (the end of its record) minus one. That is
	 * inside its record. So it never equals the commit_lsn (a record's start) of a transaction committing
	 * right after it, and (commit_lsn, tx_index) stays unique. The spool relies on that to skip what it
	 * already holds after a restart. */
	sink_commit c = {.commit_lsn = t ? t->commit_lsn : lsn - 1,
			 .commit_time = t ? t->commit_time : 0,
			 .tx_index = hold ? t->tx_index : p->tx_index};
	bool ok = true;
	*slots = 1;
	switch (m->type) {
	case PGO_INSERT:
	case PGO_UPDATE:
	case PGO_DELETE: {
		const pgo_rel *rel = relation(p, m, m->change.relid, err, errlen);
		if (!rel)
			return false;
		if (p->bf.change) {
			bf_change bc;
			change_of(p, rel, m, &bc);
			report_change(p, t, &bc, hold);
		}
		if (m->type == PGO_INSERT && p->sig.fn && t && strcmp(rel->relname, p->sig.table) == 0 &&
		    strcmp(rel->nspname, p->sig.schema) == 0)
			report_signal(p, t, rel, m, hold, c.tx_index);
		if ((n = match_rules_match(p->rules, rel, change_op[m->type], &subs)) == 0)
			break;
		if (!pgo_event_from_change(p->arena, p->rc, rel, m, &ev, err, errlen))
			return false;
		stamp(ev, t, lsn);
		ok = emit(p, ev, rel, rel->relid, subs, n, &c, 0, hold, err, errlen);
		break;
	}
	case PGO_TRUNCATE:
		*slots = m->truncate.nrels;
		for (uint32_t i = 0; i < m->truncate.nrels && ok; i++) {
			const pgo_rel *rel = relation(p, m, pgo_truncate_relid(m, i), err, errlen);
			if (!rel)
				return false;
			bf_change bc = {.schema = rel->nspname, .table = rel->relname, .truncate = true};
			report_change(p, t, &bc, hold);
			if ((n = match_rules_match(p->rules, rel, MATCH_OP_TRUNCATE, &subs)) > 0) {
				ev = pgo_event_from_truncate(p->arena, rel, m->truncate.flags);
				stamp(ev, t, lsn);
				ok = emit(p, ev, rel, rel->relid, subs, n, &c, i, hold, err, errlen);
			}
		}
		break;
	case PGO_MESSAGE:
		if (strcmp(m->message.prefix, SOURCE_HEARTBEAT_PREFIX) == 0) {
			*slots = 0; /* not a change */
			break;
		}
		if (strcmp(m->message.prefix, BFSQL_PREFIX) == 0) {
			*slots = 0; /* a watermark, not a change. Only a non-transactional one is ours. */
			if (!t && !hold && p->bf.change)
				ok = p->bf.watermark(p->bf.ctx, m->message.content, m->message.len, lsn,
						     emit_reads, p, err, errlen);
			break;
		}
		if (strcmp(m->message.prefix, SOURCE_RESYNC_PREFIX) == 0 && !t && !hold) {
			/* The re-sync marker cdc wrote (non-transactional). Every subscription gets it,
			 * whatever its operations and where, so every consumer learns of the gap. */
			ev = pgo_event_from_message(p->arena, m);
			stamp(ev, t, lsn);
			for (uint32_t i = 0; i < p->nsubs && ok; i++)
				ok = emit_to(p, ev, i, &c, 0, NULL, err, errlen);
			if (ok && p->at_resync)
				p->at_resync(p->ctx);
			break;
		}
		if (strcmp(m->message.prefix, DDL_PREFIX) == 0 &&
		    ddl_events(p, t, m, lsn, &c, hold, &ok, err, errlen))
			break;
		if ((n = match_rules_match(p->rules, NULL, MATCH_OP_MESSAGE, &subs)) == 0)
			break;
		ev = pgo_event_from_message(p->arena, m);
		stamp(ev, t, lsn);
		ok = emit(p, ev, NULL, 0, subs, n, &c, 0, hold, err, errlen);
		break;
	default:
		return util_errf(err, errlen, "unexpected %s message inside a transaction",
				 pgo_type_name(m->type));
	}
	arena_reset(p->arena);
	return ok;
}

static void end_txn(pipeline *p, uint64_t end_lsn)
{
	pipeline_progress_push(&p->prog, p->cur_seq, end_lsn);
	if (end_lsn > p->boundary_lsn)
		p->boundary_lsn = end_lsn;
	for (size_t i = 0; i < p->nsinks; i++)
		p->sinks[i]->ops->end_txn(p->sinks[i], p->cur_seq);
}

/* Like pg_recvlogical --endpos, a transaction that commits after endpos is not delivered. */
static bool beyond_endpos(pipeline *p, uint64_t commit_lsn)
{
	if (p->endpos && commit_lsn > p->endpos)
		p->past_endpos = true;
	return p->past_endpos;
}

static bool on_begin(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	(void)err, (void)errlen;
	pipeline *p = ctx;
	if (t && beyond_endpos(p, t->commit_lsn))
		return true;
	p->cur_seq = ++p->seq;
	p->tx_index = 0;
	if (t && t->held_bytes >= LARGE_TXN_BYTES) {
		p->large_txn_start_ms = util_now_ms();
		log_info("delivering a large transaction held until its commit", "xid=%u spilled_mib=%llu",
			 t->xid, (unsigned long long)(t->held_bytes >> 20));
	}
	return true;
}

static bool on_change(void *ctx, const txn_info *t, const pgo_msg *m, pgo_lsn lsn, buf *hold,
		      uint32_t *positions, char *err, size_t errlen)
{
	pipeline *p = ctx;
	uint32_t slots;
	if (!hold && beyond_endpos(p, t ? t->commit_lsn : lsn))
		return true;
	if (hold) {
		for (size_t i = 0; t->savepoint && i < p->nsinks; i++)
			if (p->sinks[i]->ops->hold_savepoint)
				p->sinks[i]->ops->hold_savepoint(p->sinks[i], t->xid, t->tx_index);
		buf_reserve(hold, 4);
		hold->len = 4;
		p->held_xid = t->xid;
		if (!change_events(p, t, m, lsn, hold, &slots, err, errlen))
			return false;
		store_u32(hold->data, slots);
		*positions = slots;
		return true;
	}
	if (t) {
		if (!change_events(p, t, m, lsn, NULL, &slots, err, errlen))
			return false;
		p->tx_index += slots;
		return true;
	}
	/* A non-transactional message is a transaction of its own, positioned at its LSN. That is the end of
	 * its record, so a restart from there does not decode it again. A backfill's reads are such a
	 * transaction too, durable once the flushed position reaches the watermark. */
	on_begin(ctx, NULL, err, errlen);
	if (!change_events(p, NULL, m, lsn, NULL, &slots, err, errlen))
		return false;
	end_txn(p, lsn);
	return true;
}

/* Delivers the events rendered into a held change's record, now with their commit fields. */
static bool on_replay(void *ctx, const txn_info *t, const uint8_t *rec, size_t len, char *err, size_t errlen)
{
	pipeline *p = ctx;
	if (p->past_endpos)
		return true;
	if (len < 4)
		return util_errf(err, errlen, "spill record of transaction %u: %zu bytes", t->xid, len);
	sink_commit c = {.commit_lsn = t->commit_lsn, .commit_time = t->commit_time};
	for (size_t pos = 4; pos < len;) {
		bool whole = len - pos >= HOLD_ENTRY;
		uint32_t sub = whole ? load_u32(rec + pos) : 0, slot = whole ? load_u32(rec + pos + 4) : 0;
		uint32_t n = whole ? load_u32(rec + pos + 8) : 0;
		const uint8_t *data = rec + pos + HOLD_ENTRY;
		if (!whole || n > len - pos - HOLD_ENTRY || (sub >= p->nsubs && sub < HOLD_SIGNAL) ||
		    (sub == HOLD_SCHEMA && (n != HOLD_SCHEMA_LEN || slot >= p->nsubs)))
			return util_errf(err, errlen, "spill record of transaction %u is corrupt at byte %zu",
					 t->xid, pos);
		pos += HOLD_ENTRY + n;
		if (sub == HOLD_BACKFILL) {
			if (!replay_change(p, t, data, n, err, errlen))
				return false;
			continue;
		}
		if (sub == HOLD_SCHEMA) { /* what the subscription's consumers have from here on */
			pipeline_track_set_delivered(p->track, slot, load_u32(data), load_u64(data + 4),
						     load_u64(data + 12));
			continue;
		}
		if (sub == HOLD_DDL) {
			learn_ddl(p, (const char *)data, n);
			continue;
		}
		if (sub == HOLD_SIGNAL) {
			if (!replay_signal(p, t, data, n, p->tx_index))
				return util_errf(err, errlen,
						 "spill record of transaction %u: a malformed signal entry",
						 t->xid);
			continue;
		}
		c.tx_index = p->tx_index + (slot & ~SLOT_BEFORE);
		c.before_change = (slot & SLOT_BEFORE) != 0;
		sub_state *s = &p->subs[sub];
		p->events++;
		s->count.events++;
		s->count.bytes += n;
		if (!s->sub.sink->ops->deliver(s->sub.sink, sub, (const char *)data, n, &c, p->cur_seq, err,
					       errlen))
			return false;
	}
	p->tx_index += load_u32(rec);
	return true;
}

/* A held transaction's events that sinks hold are discarded (xid 0 for every transaction's). */
static void on_abort(void *ctx, uint32_t xid)
{
	pipeline *p = ctx;
	pipeline_track_held_end(p->track, xid);
	for (size_t i = 0; i < p->nsinks; i++)
		if (p->sinks[i]->ops->hold_abort)
			p->sinks[i]->ops->hold_abort(p->sinks[i], xid);
}

static bool on_rollback(void *ctx, uint32_t xid, uint32_t tx_index, char *err, size_t errlen)
{
	pipeline *p = ctx;
	pipeline_track_held_rollback(p->track, xid, tx_index);
	for (size_t i = 0; i < p->nsinks; i++)
		if (p->sinks[i]->ops->hold_rollback &&
		    !p->sinks[i]->ops->hold_rollback(p->sinks[i], xid, tx_index, err, errlen))
			return false;
	return true;
}

static bool on_commit(void *ctx, const txn_info *t, char *err, size_t errlen)
{
	pipeline *p = ctx;
	if (p->past_endpos) {
		if (t->held)
			on_abort(p, t->xid);
		return true;
	}
	int64_t us = util_wall_us() - t->commit_time;
	hist_add(&p->received, us > 0 ? (uint64_t)us : 0);
	sink_commit c = {.commit_lsn = t->commit_lsn, .commit_time = t->commit_time};
	for (size_t i = 0; t->held && i < p->nsinks; i++)
		if (p->sinks[i]->ops->hold_commit &&
		    !p->sinks[i]->ops->hold_commit(p->sinks[i], t->xid, &c, p->cur_seq, err, errlen))
			return false;
	if (t->held)
		pipeline_track_held_end(p->track, t->xid);
	end_txn(p, t->end_lsn);
	p->last_commit_time = t->commit_time;
	if (t->held_bytes >= LARGE_TXN_BYTES)
		log_info("delivered the large transaction", "xid=%u in_ms=%llu", t->xid,
			 (unsigned long long)(util_now_ms() - p->large_txn_start_ms));
	if (p->at_boundary)
		p->at_boundary(p->ctx);
	return true;
}

bool pipeline_feed(pipeline *p, const uint8_t *data, size_t len, uint64_t lsn, char *err, size_t errlen)
{
	if (p->past_endpos)
		return true;
	if (pgo_txn_feed(p->asm_, data, len, lsn, err, errlen))
		return true;
	char at[LSN_STRLEN];
	util_lsn_format(lsn, at);
	size_t used = strlen(err);
	snprintf(err + used, errlen - used, " (WAL position %s)", at);
	return false;
}

/* The flushed position ----------------------------------------------------------------------- */

static uint64_t sinks_delivered(const pipeline *p)
{
	uint64_t delivered = p->seq;
	for (size_t i = 0; i < p->nsinks; i++)
		if (p->sinks[i]->ops->delivered(p->sinks[i]) < delivered)
			delivered = p->sinks[i]->ops->delivered(p->sinks[i]);
	return delivered;
}

/* Moves flushed_lsn as far as every sink has delivered, but never past a held prepared
 * transaction (the server would not send its changes again). */
static void advance(pipeline *p)
{
	uint64_t lsn = pipeline_progress_advance(&p->prog, sinks_delivered(p));
	uint64_t prepared = oldest_prepared(p);
	if (prepared && lsn > prepared)
		lsn = prepared;
	if (lsn > p->flushed_lsn)
		p->flushed_lsn = lsn;
}

void pipeline_keepalive(pipeline *p, uint64_t wal_end)
{
	if (!pipeline_in_txn(p) && wal_end > p->boundary_lsn)
		p->boundary_lsn = wal_end;
	advance(p);
	/* Nothing is in flight anywhere, so everything up to wal_end is delivered. An idle slot thus never
	 * pins WAL, nor one whose WAL is all other databases' or unpublished tables'. */
	if (!pipeline_in_txn(p) && progress_pending(&p->prog) == 0 && !oldest_prepared(p) &&
	    sinks_delivered(p) == p->seq && wal_end > p->flushed_lsn)
		p->flushed_lsn = wal_end;
}

sink_status pipeline_flush(pipeline *p, sink **failed, char *err, size_t errlen)
{
	for (size_t i = 0; i < p->nsinks; i++) {
		sink_status st = p->sinks[i]->ops->flush(p->sinks[i], err, errlen);
		if (st != SINK_OK) {
			*failed = p->sinks[i];
			return st;
		}
	}
	advance(p);
	return SINK_OK;
}

bool pipeline_restart_sink(pipeline *p, sink *k, char *err, size_t errlen)
{
	pipeline_progress_clear(&p->prog);
	return k->ops->restart && k->ops->restart(k, err, errlen);
}

bool pipeline_busy(const pipeline *p)
{
	for (size_t i = 0; i < p->nsinks; i++)
		if (p->sinks[i]->ops->busy && p->sinks[i]->ops->busy(p->sinks[i]))
			return true;
	return false;
}

void pipeline_finish(pipeline *p, int timeout_ms)
{
	for (size_t i = 0; i < p->nsinks; i++) {
		sink *k = p->sinks[i];
		if (k->ops->finish && !k->ops->finish(k, timeout_ms))
			log_warn(
			    "stopping with messages in flight: they are delivered again after the restart",
			    "sink=%s", k->ops->name);
	}
}

uint64_t pipeline_flushed(const pipeline *p)
{
	return p->flushed_lsn;
}

uint64_t pipeline_boundary(const pipeline *p)
{
	return p->boundary_lsn;
}

bool pipeline_at_endpos(const pipeline *p)
{
	return p->endpos && (p->flushed_lsn >= p->endpos || p->past_endpos);
}

pipeline_figures pipeline_get_figures(const pipeline *p)
{
	return (pipeline_figures){.transactions = p->seq,
				  .events = p->events,
				  .last_commit_time = p->last_commit_time,
				  .received = &p->received};
}

pipeline_count pipeline_sub_count(const pipeline *p, size_t sub)
{
	return sub < p->nsubs ? p->subs[sub].count : (pipeline_count){0};
}

/* Lifecycle ------------------------------------------------------------------------------- */

pipeline *pipeline_new(const char *spill_dir, uint64_t endpos, void (*at_boundary)(void *ctx), void *ctx)
{
	pipeline *p = util_xcalloc(1, sizeof(*p));
	p->spill_dir = util_xstrdup(spill_dir);
	p->endpos = endpos;
	p->prog = PROGRESS_INIT;
	p->at_boundary = at_boundary;
	p->ctx = ctx;
	p->handler = (txn_handler){.ctx = p,
				   .begin = on_begin,
				   .change = on_change,
				   .replay = on_replay,
				   .commit = on_commit,
				   .rollback = on_rollback,
				   .abort = on_abort};
	p->arena = arena_new(64 * 1024);
	p->rc = pgo_relcache_new();
	p->tables = pgo_schema_tables_new();
	p->track = pipeline_track_new();
	return p;
}

void pipeline_deliver_ddl(pipeline *p, bool on)
{
	p->ddl = on;
}

void pipeline_on_resync(pipeline *p, void (*reached)(void *ctx))
{
	p->at_resync = reached;
}

pgo_relcache *pipeline_relcache(pipeline *p)
{
	return p->rc;
}

void pipeline_bind(pipeline *p, rules *r, const pipeline_sub *subs, size_t nsubs, sink *const *sinks,
		   size_t nsinks)
{
	sub_state *next = util_xcalloc(nsubs ? nsubs : 1, sizeof(*next));
	uint32_t *map = util_xcalloc(p->nsubs + 1, sizeof(*map));
	for (size_t k = 0; k < p->nsubs; k++)
		map[k] = UINT32_MAX;
	for (size_t i = 0; i < nsubs; i++) {
		next[i].sub = subs[i];
		for (size_t k = 0; k < p->nsubs; k++)
			if (strcmp(p->subs[k].sub.name, subs[i].name) == 0) {
				next[i].count = p->subs[k].count;
				map[k] = (uint32_t)i;
			}
	}
	/* What a subscription's consumers have goes with its name. Its new `columns` may differ, and the
	 * schema ids say so. */
	pipeline_track_renumber(p->track, map, p->nsubs);
	free(map);
	free(p->subs);
	p->subs = next;
	p->nsubs = nsubs;
	match_rules_free(p->rules);
	p->rules = r;
	p->nsinks = 0;
	p->sinks = util_xrealloc(p->sinks, (nsinks ? nsinks : 1) * sizeof(sink *));
	for (size_t i = 0; i < nsinks; i++)
		if (sinks[i])
			p->sinks[p->nsinks++] = sinks[i];
}

bool pipeline_start(pipeline *p, const pgo_options *opt, uint64_t start_lsn, char *err, size_t errlen)
{
	on_abort(p, 0);			/* the server sends every held transaction again */
	pipeline_track_clear(p->track); /* ... and what was not confirmed, so announce every table again */
	pgo_txn_free(p->asm_);
	if (!(p->asm_ = pgo_txn_new(p->spill_dir, opt, p->rc, &p->handler, err, errlen)))
		return false;
	p->flushed_lsn = start_lsn;
	if (start_lsn > p->boundary_lsn)
		p->boundary_lsn = start_lsn;
	pipeline_progress_clear(&p->prog);
	return true;
}

void pipeline_free(pipeline *p)
{
	if (!p)
		return;
	pgo_txn_free(p->asm_);
	pgo_relcache_free(p->rc);
	pgo_schema_tables_free(p->tables);
	pipeline_track_free(p->track);
	arena_free(p->arena);
	free(p->read_msg);
	buf_free(&p->scratch);
	pipeline_progress_free(&p->prog);
	match_rules_free(p->rules);
	free(p->subs);
	free(p->sinks);
	free(p->spill_dir);
	free(p);
}

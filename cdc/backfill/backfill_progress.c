/* The backfills' figures for /status, /metrics, GET /backfills and `cdc status`, per backfill and per table.
 * They are rows read, delivered, dropped and filtered, blocks read, the estimate (and what it comes from),
 * rate and ETA. */
#include <stdio.h>
#include <string.h>

#include "cdc/backfill/backfill_internal.h"
#include "decoder/base/json.h"

/* ---- progress ---- */

/* The table's blocks to read. That is every relation's, but of one no longer a partition only what was read
 * of it. */
static uint64_t table_blocks(const table *t)
{
	uint64_t n = 0;
	for (size_t i = 0; i < t->nleaves; i++)
		n += t->leaves[i].gone ? backfill_ranges_blocks(&t->leaves[i].done, t->leaves[i].blocks)
				       : t->leaves[i].blocks;
	return n;
}

/* The rows the table holds, estimated. Never below the rows read.
 * - From the statistics (reltuples per relpages, times the blocks now) when every relation has them.
 * - Else from the rows read per block read so far (times the blocks).
 * - Else reltuples as first described. */
static void estimate(const table *t, bf_progress *p)
{
	p->estimate = t->estimate;
	p->estimate_from = t->estimate >= 0 ? "statistics" : NULL;
	if (!t->nleaves)
		return;
	double stats = 0;
	bool all = true;
	for (size_t i = 0; i < t->nleaves && all; i++) {
		all = t->leaves[i].rows_per_block >= 0;
		stats += t->leaves[i].rows_per_block * (double)t->leaves[i].blocks;
	}
	if (all) {
		p->estimate = (int64_t)(stats + 0.5);
		p->estimate_from = "statistics";
	} else if (t->done.blocks) {
		p->estimate =
		    (int64_t)((double)t->done.read / (double)t->done.blocks * (double)p->blocks + 0.5);
		p->estimate_from = "size";
	}
	if (p->blocks == 0) {
		p->estimate = 0;
		p->estimate_from = NULL; /* nothing to read, so exact */
	}
}

static void table_progress(const table *t, uint64_t now_ms, bf_progress *p)
{
	*p = (bf_progress){.read = t->done.read,
			   .delivered = t->done.delivered,
			   .dropped = t->done.dropped,
			   .filtered = t->done.filtered,
			   .retries = t->retries,
			   .blocks = table_blocks(t),
			   .blocks_read = t->done.blocks,
			   .eta_s = -1};
	if (t->state == BF_DONE) {
		p->estimate = (int64_t)t->done.read;
		p->eta_s = 0;
		return;
	}
	estimate(t, p);
	if (p->estimate >= 0 && (uint64_t)p->estimate < p->read)
		p->estimate = (int64_t)p->read;
	if (t->state == BF_RUNNING && now_ms > t->run_ms && t->done.read > t->run_read)
		p->rate = (double)(t->done.read - t->run_read) * 1000.0 / (double)(now_ms - t->run_ms);
	if (p->rate > 0 && p->estimate >= 0)
		p->eta_s = (int64_t)((double)((uint64_t)p->estimate - p->read) / p->rate + 0.5);
}

size_t backfill_count(const bf_set *b)
{
	return b->n;
}

bool backfill_active(const bf_set *b)
{
	for (size_t i = 0; i < b->n; i++)
		if (!backfill_finished(b->list[i]->state))
			return true;
	return false;
}

void backfill_info(const bf_set *b, size_t i, bf_now now, bf_info *out)
{
	const backfill *f = b->list[i];
	*out = (bf_info){.id = f->id,
			 .subscription = f->sub,
			 .where = f->where,
			 .error = f->error,
			 .state = f->state,
			 .created_ms = f->created_ms,
			 .finished_ms = f->finished_ms,
			 .ntables = f->ntables,
			 .p = {.estimate = f->resolved ? 0 : -1, .eta_s = -1}};
	double remaining = 0;
	for (size_t k = 0; k < f->ntables; k++) {
		bf_progress tp;
		table_progress(&f->tables[k], now.ms, &tp);
		out->p.read += tp.read;
		out->p.delivered += tp.delivered;
		out->p.dropped += tp.dropped;
		out->p.filtered += tp.filtered;
		out->p.retries += tp.retries;
		out->p.blocks += tp.blocks;
		out->p.blocks_read += tp.blocks_read;
		out->p.rate += tp.rate;
		bool open = !backfill_finished(f->tables[k].state);
		/* the whole is from the size when one open table's estimate is */
		if (open && tp.estimate_from &&
		    (!out->p.estimate_from || strcmp(tp.estimate_from, "size") == 0))
			out->p.estimate_from = tp.estimate_from;
		if (tp.estimate < 0 && open)
			out->p.estimate = -1;
		else if (out->p.estimate >= 0)
			out->p.estimate += tp.estimate < 0 ? (int64_t)tp.read : tp.estimate;
		if (open && tp.estimate >= 0)
			remaining += (double)((uint64_t)tp.estimate - tp.read);
	}
	if (backfill_finished(f->state))
		out->p.eta_s = f->state == BF_DONE ? 0 : -1;
	else if (out->p.estimate >= 0 && out->p.rate > 0)
		out->p.eta_s = (int64_t)(remaining / out->p.rate + 0.5);
}

void backfill_table_info(const bf_set *b, size_t i, size_t k, bf_now now, bf_table_info *out)
{
	const table *t = &b->list[i]->tables[k];
	*out = (bf_table_info){
	    .schema = t->schema, .table = t->name, .key = t->key_index, .error = t->error, .state = t->state};
	table_progress(t, now.ms, &out->p);
}

static void progress_json(buf *out, bool *first, const bf_progress *p)
{
	json_key_u64(out, first, "rows_read", p->read);
	json_key_u64(out, first, "rows_delivered", p->delivered);
	json_key_u64(out, first, "rows_dropped", p->dropped);
	json_key_u64(out, first, "rows_filtered", p->filtered);
	json_key_u64(out, first, "chunks_retried", p->retries);
	json_key(out, first, "estimate");
	if (p->estimate < 0)
		json_null(out);
	else
		json_i64(out, p->estimate);
	json_key_str(out, first, "estimate_from", p->estimate_from);
	json_key_u64(out, first, "blocks", p->blocks);
	json_key_u64(out, first, "blocks_read", p->blocks_read);
	json_key(out, first, "rows_per_second");
	json_u64(out, (uint64_t)(p->rate + 0.5));
	json_key(out, first, "eta_seconds");
	if (p->eta_s < 0)
		json_null(out);
	else
		json_i64(out, p->eta_s);
}

void backfill_json(const bf_set *b, buf *out, const char *sub, bf_now now)
{
	buf_putc(out, '[');
	bool first = true;
	for (size_t i = 0; i < b->n; i++) {
		if (sub && strcmp(b->list[i]->sub, sub) != 0)
			continue;
		bf_info f;
		backfill_info(b, i, now, &f);
		json_sep(out, &first);
		bool m = true;
		buf_putc(out, '{');
		json_key_str(out, &m, "id", f.id);
		json_key_str(out, &m, "subscription", f.subscription);
		json_key_str(out, &m, "state", backfill_state_name(f.state));
		json_key_str(out, &m, "where", f.where);
		json_key_str(out, &m, "error", f.error);
		json_key_i64(out, &m, "created_ms", f.created_ms);
		json_key(out, &m, "finished_ms");
		if (f.finished_ms)
			json_i64(out, f.finished_ms);
		else
			json_null(out);
		progress_json(out, &m, &f.p);
		json_key(out, &m, "tables");
		buf_putc(out, '[');
		bool tf = true;
		for (size_t k = 0; k < f.ntables; k++) {
			bf_table_info t;
			backfill_table_info(b, i, k, now, &t);
			json_sep(out, &tf);
			bool n = true;
			buf_putc(out, '{');
			json_key_str(out, &n, "schema", t.schema);
			json_key_str(out, &n, "table", t.table);
			json_key_str(out, &n, "state", backfill_state_name(t.state));
			json_key_str(out, &n, "key", t.key);
			json_key_str(out, &n, "error", t.error);
			progress_json(out, &n, &t.p);
			buf_putc(out, '}');
		}
		buf_puts(out, "]}");
	}
	buf_putc(out, ']');
}

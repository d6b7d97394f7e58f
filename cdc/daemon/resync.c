/* What `cdc run` does when the slot cannot send what follows its position (SOURCE_GAP), after a lost
 * slot or a publication newer than it. It stops and says why (the default), or it re-syncs. */
#include "cdc/daemon/sidecar.h"
#include "decoder/base/json.h"
#include "decoder/base/log.h"

/* A re-sync moves the slot on, writes the marker into the WAL right after its new position, and
 * records that position. When the stream reaches the marker, every subscription is backfilled. The
 * marker is the durable record of the re-sync. A crash at any step finds either the gap again (the
 * slot is still behind, or ahead of the recorded position) or the marker in the stream. */
resync_result daemon_resync(sidecar *d)
{
	connection *c = &d->conn;
	bool lost = source_gap(c->src) == SOURCE_GAP_SLOT_LOST;
	const char *reason = lost ? "slot_lost" : "publication_newer";
	if ((lost ? d->cfg->source.on_slot_lost : d->cfg->source.on_publication_newer) != CFG_GAP_RESYNC)
		return RESYNC_STOP;
	log_warn("re-syncing: the slot moves on, and every subscription is backfilled once the stream "
		 "reaches the marker; changes in between arrive as reads of the rows as they are now",
		 "reason=%s why=\"%s\"", reason, d->err);
	state st;
	bool have_st = false;
	uint64_t lsn = 0;
	buf marker = {0};
	resync_result r = RESYNC_RETRY;
	source_state_writer_wait(d->sw);
	if (!source_state_read(d->cfg->state_dir, &st, &have_st, d->err, sizeof(d->err)) ||
	    source_resync(c->src, source_gap(c->src), &st, &lsn, d->err, sizeof(d->err)) != SOURCE_OK)
		goto out;
	char from[LSN_STRLEN], to[LSN_STRLEN];
	util_lsn_format(have_st ? st.flushed_lsn : 0, from);
	util_lsn_format(lsn, to);
	bool f = true;
	buf_putc(&marker, '{');
	json_key_str(&marker, &f, "reason", reason);
	json_key_str(&marker, &f, "slot", d->cfg->source.slot);
	json_key_str(&marker, &f, "skipped_from", have_st ? from : NULL);
	json_key_str(&marker, &f, "resumed_at", to);
	buf_putc(&marker, '}');
	if (source_resync_marker(c->src, marker.data, d->err, sizeof(d->err)) != SOURCE_OK)
		goto out; /* the slot is ahead of the recorded position, and the next start finds a gap */
	if (have_st) {
		st.flushed_lsn = lsn;
		if (!daemon_sidecar_record(d, &st))
			goto out;
	}
	d->fig.resyncs++;
	log_warn("re-synced: the slot moved on; consumers get a marker (a message event with prefix "
		 "\"" SOURCE_RESYNC_PREFIX "\"), then every subscription's backfill",
		 "reason=%s skipped_from=%s resumed_at=%s", reason, have_st ? from : "-", to);
	r = RESYNC_DONE;
out:
	buf_free(&marker);
	return r;
}

void daemon_resync_reached(void *ctx)
{
	sidecar *d = ctx;
	buf ids = {0};
	if (daemon_backfills_resync(d, &ids, d->err, sizeof(d->err)))
		log_info("re-sync marker reached: every subscription is backfilled", "backfills=%s",
			 ids.data);
	else
		log_error("re-sync marker reached, but the backfills cannot be queued: start them with "
			  "POST /subscriptions/NAME/backfill",
			  "error=\"%s\"", d->err);
	buf_free(&ids);
}

/* cdc doctor's checks of the NATS side. They check that the servers answer and have JetStream. They check
 * that the stream exists (or cdc creates it) and holds every subject cdc publishes to. They also check that
 * it drops a copy sent again within the duplicate window. They read and change nothing. */
#include <inttypes.h>
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sinks/nats/nats_sink.h"

/* What the checks keep from one to the next, the connection made by the first. */
typedef struct doctor_state {
	natsConnection *nc;
	jsCtx *js;
	char error[512];
} doctor_state;

static doctor_state *connect_once(sink_doctor *dr)
{
	if (dr->state)
		return dr->state;
	doctor_state *d = dr->state = util_xcalloc(1, sizeof(*d));
	const nats_conf *c = dr->section;
	natsOptions *o = NULL;
	natsStatus s = natsOptions_Create(&o);
	if (s == NATS_OK)
		s = natsOptions_SetURL(o, c->servers);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, dr->timeout_ms > 0 ? dr->timeout_ms : 5000);
	if (s == NATS_OK)
		s = natsOptions_SetMaxReconnect(o, 0);
	if (s == NATS_OK)
		s = nats_set_access(o, c);
	if (s == NATS_OK)
		s = natsConnection_Connect(&d->nc, o);
	if (s == NATS_OK)
		s = natsConnection_JetStream(&d->js, d->nc, NULL);
	if (s != NATS_OK) {
		const char *last = nats_GetLastError(NULL);
		snprintf(d->error, sizeof(d->error), "%s%s%s", natsStatus_GetText(s),
			 last && *last ? ": " : "", last ? last : "");
	}
	natsOptions_Destroy(o);
	return d;
}

void nats_doctor_done(sink_doctor *dr)
{
	doctor_state *d = dr->state;
	if (d) {
		jsCtx_Destroy(d->js);
		natsConnection_Destroy(d->nc);
	}
	free(d);
	dr->state = NULL;
}

static void check_server(sink_doctor *dr)
{
	doctor_state *d = connect_once(dr);
	const nats_conf *c = dr->section;
	if (d->error[0]) {
		dr->say(
		    dr, SINK_FAIL,
		    "check nats.servers, the credentials (nats.credentials, nkey_seed, user, token) and TLS "
		    "settings, and that the servers run and this host reaches them",
		    "%s: %s", c->servers, d->error);
		return;
	}
	char url[256] = "", id[128] = "";
	natsConnection_GetConnectedUrl(d->nc, url, sizeof(url));
	natsConnection_GetConnectedServerId(d->nc, id, sizeof(id));
	jsAccountInfo *ai = NULL;
	jsErrCode code = 0;
	natsStatus s = js_GetAccountInfo(&ai, d->js, NULL, &code);
	if (s != NATS_OK) {
		dr->say(dr, SINK_FAIL,
			"start the server with JetStream (nats-server -js, or jetstream {} in its file)",
			"%s answered, but not JetStream: %s", url, natsStatus_GetText(s));
		return;
	}
	jsAccountInfo_Destroy(ai);
	dr->say(dr, SINK_PASS, NULL, "%s answered (server %s), JetStream enabled", url, id);
}

static void check_stream(sink_doctor *dr)
{
	doctor_state *d = connect_once(dr);
	const nats_conf *c = dr->section;
	if (d->error[0])
		return;
	char fix[1024];
	buf filters = {0};
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	natsStatus s = js_GetStreamInfo(&si, d->js, c->stream, NULL, &code);
	if (s != NATS_OK && code != JSStreamNotFoundErr && s != NATS_NOT_FOUND) {
		dr->say(dr, SINK_WARN, "make the server check pass, then run cdc doctor again",
			"cannot read stream %s: %s", c->stream, natsStatus_GetText(s));
		return;
	}
	/* the subjects cdc publishes to, as filters */
	size_t n = 0, *at = util_xcalloc(dr->nsubs + 1, sizeof(*at));
	for (size_t i = 0; i <= dr->nsubs; i++) {
		const char *tmpl = i == dr->nsubs     ? c->schemas_subject
				   : dr->subs[i].mine ? ((const nats_sub_conf *)dr->subs[i].settings)->subject
						      : NULL;
		if (!tmpl)
			continue;
		at[n++] = filters.len;
		nats_subject_filter(&filters, tmpl);
		buf_putc(&filters, '\0');
	}
	if (s != NATS_OK) {
		buf list = {0};
		for (size_t i = 0; i < n; i++)
			buf_printf(&list, "%s%s", i ? "," : "", filters.data + at[i]);
		if (c->create)
			dr->say(dr, SINK_PASS, NULL,
				"stream %s does not exist; cdc creates it (nats.create) for %s", c->stream,
				list.data ? list.data : "its subjects");
		else {
			snprintf(fix, sizeof(fix),
				 "nats stream add %s --subjects '%s' --storage file --dupe-window %" PRIu64
				 "ms --defaults, or set nats.create: true",
				 c->stream, list.data ? list.data : "", c->duplicate_window_ms);
			dr->say(dr, SINK_FAIL, fix, "stream %s does not exist", c->stream);
		}
		buf_free(&list);
		goto out;
	}
	const jsStreamConfig *sc = si->Config;
	buf missing = {0};
	for (size_t i = 0; i < n; i++) {
		bool held = false;
		for (int j = 0; j < sc->SubjectsLen && !held; j++)
			held = nats_subject_covers(sc->Subjects[j], filters.data + at[i]);
		if (!held)
			buf_printf(&missing, "%s%s", missing.len ? ", " : "", filters.data + at[i]);
	}
	uint64_t window_ms = (uint64_t)(sc->Duplicates / 1000000);
	if (missing.len) {
		snprintf(fix, sizeof(fix),
			 "add the subjects to stream %s (nats stream edit %s --subjects ...)", c->stream,
			 c->stream);
		dr->say(
		    dr, SINK_FAIL, fix,
		    "stream %s does not hold %s: JetStream refuses those publishes, and cdc holds the slot",
		    c->stream, missing.data);
	} else if (window_ms < c->duplicate_window_ms) {
		snprintf(fix, sizeof(fix), "nats stream edit %s --dupe-window %" PRIu64 "ms", c->stream,
			 c->duplicate_window_ms);
		dr->say(dr, SINK_WARN, fix,
			"stream %s drops a copy only within %" PRIu64
			" ms, less than nats.duplicate_window (%" PRIu64
			" ms): a restart that takes longer may publish a change twice",
			c->stream, window_ms, c->duplicate_window_ms);
	} else
		dr->say(dr, SINK_PASS, NULL, "stream %s holds every subject; duplicate window %" PRIu64 " ms",
			c->stream, window_ms);
	buf_free(&missing);
	jsStreamInfo_Destroy(si);
out:
	free(at);
	buf_free(&filters);
}

const sink_check nats_checks[] = {
    {"nats_server", NULL, check_server},
    {"nats_stream", NULL, check_stream},
    {NULL, NULL, NULL},
};

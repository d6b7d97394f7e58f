/* What the files of cdc/daemon/ share and call, never calling back into them: binding the sinks and
 * the pipeline to the configuration in force, answering a control request with an error, and stopping
 * with one. */
#include "cdc/daemon/sidecar.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "decoder/base/json.h"
#include "decoder/base/log.h"

void daemon_sidecar_fail(sidecar *d, int code, const char *what)
{
	log_error(what, "error=\"%s\"", d->err);
	d->exit_code = code;
	event_base_loopbreak(d->base);
}

/* A record may name the database (Debezium's source.db). The sinks learn it once connected. */
void daemon_sidecar_tell_database(sidecar *d)
{
	const char *db = d->conn.src ? source_database(d->conn.src) : NULL;
	if (db)
		daemon_sink_set_database(&d->sinks, db);
}

bool daemon_sidecar_bind(sidecar *d, rules *r)
{
	if (!daemon_sink_set_bind(&d->sinks, d->cfg, d->err, sizeof(d->err))) {
		match_rules_free(r);
		return false;
	}
	daemon_sidecar_tell_database(d);
	pipeline_sub *subs = util_xcalloc(d->cfg->nsubs ? d->cfg->nsubs : 1, sizeof(*subs));
	for (size_t i = 0; i < d->cfg->nsubs; i++)
		subs[i] = (pipeline_sub){d->cfg->subs[i].name, d->cfg->subs[i].tag, d->sinks.of_sub[i]};
	pipeline_bind(d->pipe, r, subs, d->cfg->nsubs, d->sinks.k, SINK_MODULES_MAX);
	free(subs);
	return true;
}

void daemon_sidecar_answer_error(sidecar *d, status_request *req, unsigned code, const char *error,
				 const char *details)
{
	buf b = {0};
	buf_puts(&b, "{\"error\":");
	json_string(&b, error, strlen(error));
	if (details) {
		buf_puts(&b, ",\"details\":[");
		for (const char *line = details; *line;) {
			const char *nl = strchr(line, '\n');
			size_t n = nl ? (size_t)(nl - line) : strlen(line);
			if (line != details)
				buf_putc(&b, ',');
			json_string(&b, line, n);
			line += n + (nl != NULL);
		}
		buf_putc(&b, ']');
	}
	buf_puts(&b, "}\n");
	status_answer(d->status, req, code, b.data);
	buf_free(&b);
}

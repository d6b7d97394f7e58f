/* event_json.h: the contract's event JSON (one object per line), used by the stdout sink and cdc tail. */
#ifndef CDC_EVENT_JSON_H
#define CDC_EVENT_JSON_H

#include "cdc/v1/event.pb-c.h"
#include "decoder/base/json.h"

/* Appends the event as one JSON object and a newline. The commit fields (commit_lsn, tx_index,
 * commit_time) come last, so that json_event_head() can render an event before its transaction
 * commits and json_event_tail() complete it cheaply once it has. */
void json_event(buf *out, const Cdc__V1__Event *e);
/* Everything but the commit fields and the closing brace. */
void json_event_head(buf *out, const Cdc__V1__Event *e);
/* A transaction's commit fields as JSON, rendered once for all its events by json_event_tail(). */
typedef struct json_commit {
	uint64_t lsn;
	int64_t time;
	bool valid;
	buf lsn_part;  /* ,"commit_lsn":"...","tx_index": */
	buf time_part; /* ,"commit_time":"..."}\n */
} json_commit;
void json_commit_free(json_commit *c);
/* Completes json_event_head()'s output: commit_lsn, tx_index, commit_time, "}\n". c keeps the
 * commit's fields rendered while they stay the same. */
void json_event_tail(buf *out, json_commit *c, uint64_t commit_lsn, uint32_t tx_index, int64_t commit_time);

#endif

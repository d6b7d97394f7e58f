/* `cdc backfill` asks a running cdc to backfill a subscription (POST /subscriptions/NAME/backfill on
 * the status socket). With --wait, it shows the progress until the backfill finishes (GET /backfills).
 * The progress is rows read of the estimate, rate and ETA, per table. */
#ifndef CDC_BACKFILL_CMD_H
#define CDC_BACKFILL_CMD_H

#include <stdbool.h>
#include <stddef.h>

#include "decoder/base/util.h"

/* cdc backfill [-c FILE | -s SOCKET] SUBSCRIPTION [--table T]... [--where EXPR] [--wait | --no-wait].
 * argv[0] is "backfill". Returns the exit code. It is 0 once queued (with --wait, once done). It is 1
 * when cdc cannot be reached or refuses, or the backfill fails or is cancelled. It is 2 for a usage
 * error. */
int cli_backfill_main(int argc, char **argv);

/* The progress of backfill id from a GET /backfills body, as lines for a terminal (with bars) or a
 * log. *state gets its state ("running", "done"...), or "" if id is not in the list. */
bool cli_backfill_progress(const char *json, size_t len, const char *id, bool bars, buf *out, char *state,
			   size_t statelen, char *err, size_t errlen) CDC_MUST_CHECK;

/* Every backfill of a GET /status "backfills" array, for `cdc status`. */
struct json_object;
void cli_backfill_summary(struct json_object *backfills, buf *out);

#endif

/* `cdc run`, which streams from the slot to the sinks until stopped. */
#ifndef CDC_DAEMON_H
#define CDC_DAEMON_H

#include <stdint.h>

#include "cdc/config/config.h"

/* Takes ownership of conf. It stops once everything up to LSN endpos is confirmed (0 for never).
 * Returns the process exit code. That is 0 after a clean stop, 1 on a runtime failure, and 2 on a
 * config the build cannot serve. */
int daemon_run(cfg *conf, const char *cfg_path, uint64_t endpos);

#endif

/* daemon.h: `cdc run`: streams from the slot to the sinks until stopped. */
#ifndef CDC_DAEMON_H
#define CDC_DAEMON_H

#include <stdint.h>

#include "cdc/config/config.h"

/* Takes ownership of conf. endpos: stop once everything up to this LSN is confirmed (0: never).
 * Returns the process exit code: 0 after a clean stop, 1 on a runtime failure, 2 on a config
 * the build cannot serve. */
int daemon_run(cfg *conf, const char *cfg_path, uint64_t endpos);

#endif

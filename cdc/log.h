/* log.h: one line per event worth a human's attention, on stderr, with a level and key=value
 * context ("text") or as one JSON object per line ("json"). Debug lines cost one compare when off. */
#ifndef CDC_LOG_H
#define CDC_LOG_H

#include "config.h"

void log_setup(cfg_log_level level, cfg_log_format format);
bool log_enabled(cfg_log_level level);
/* msg is a short fixed sentence; ctx_fmt builds the key=value context ("slot=%s lsn=%s"). */
void log_at(cfg_log_level level, const char *msg, const char *ctx_fmt, ...) CDC_PRINTF(3, 4);

#define log_debug(...) (log_enabled(CFG_LOG_DEBUG) ? log_at(CFG_LOG_DEBUG, __VA_ARGS__) : (void)0)
#define log_info(...) log_at(CFG_LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_at(CFG_LOG_WARN, __VA_ARGS__)
#define log_error(...) log_at(CFG_LOG_ERROR, __VA_ARGS__)

#endif

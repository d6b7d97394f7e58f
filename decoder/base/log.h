/* One line per event worth a human's attention, on stderr. A line has a level and key=value context
 * ("text"), or is one JSON object ("json"). Debug lines cost one compare when off. */
#ifndef CDC_LOG_H
#define CDC_LOG_H

#include <stdbool.h>

#include "decoder/base/util.h"

/* The levels and their names, X(value, name) for each. Log lines and the configuration's log.level
 * spell them from this one list. */
#define LOG_LEVELS(X)                                                                                        \
	X(LOG_LEVEL_DEBUG, "debug")                                                                          \
	X(LOG_LEVEL_INFO, "info")                                                                            \
	X(LOG_LEVEL_WARN, "warn")                                                                            \
	X(LOG_LEVEL_ERROR, "error")
#define LOG_LEVEL_ENUM(v, name) v,
typedef enum log_level { LOG_LEVELS(LOG_LEVEL_ENUM) } log_level;
typedef enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON } log_format;

void log_setup(log_level level, log_format format);
/* "debug", "info", "warn" or "error", as log lines and the configuration's log.level spell it. */
const char *log_level_name(log_level level);
bool log_enabled(log_level level);
/* msg is a short fixed sentence. ctx_fmt builds the key=value context ("slot=%s lsn=%s"). */
void log_at(log_level level, const char *msg, const char *ctx_fmt, ...) CDC_PRINTF(3, 4);

#define log_debug(...) (log_enabled(LOG_LEVEL_DEBUG) ? log_at(LOG_LEVEL_DEBUG, __VA_ARGS__) : (void)0)
#define log_info(...) log_at(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...) log_at(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_at(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif

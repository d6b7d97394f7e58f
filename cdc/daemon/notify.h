/* What the daemon tells systemd (sd_notify): started, status lines, reloading and reloaded around a
 * SIGHUP, stopping, and watchdog pings. Without $NOTIFY_SOCKET (not started by systemd's
 * Type=notify) every call does nothing. */
#ifndef CDC_NOTIFY_H
#define CDC_NOTIFY_H

#include <stdint.h>

/* Called once the first attempt to stream has settled (streaming, standby, or retrying with backoff).
 * It sends READY=1 the first time, and the STATUS= line (a printf format) every time. */
void daemon_notify_started(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A STATUS= line alone. */
void daemon_notify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A SIGHUP arrived. Sends RELOADING=1 (with MONOTONIC_USEC=, as Type=notify-reload wants). */
void daemon_notify_reloading(void);
/* The reload it announced is done, applied or refused. Sends READY=1 and the STATUS= line. */
void daemon_notify_reloaded(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* STOPPING=1 and the STATUS= line. */
void daemon_notify_stopping(const char *status);
/* Sends WATCHDOG=1 at half the unit's WatchdogSec= (sd_watchdog_enabled). It is called from the
 * loop's tick. It does nothing when the unit sets no watchdog. */
void daemon_notify_watchdog(uint64_t now_ms);

#endif

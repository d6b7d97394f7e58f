/* See notify.h. libsystemd's sd_notify, which does nothing when $NOTIFY_SOCKET is unset.
 * The state here is the process's own. It was started once, by one service manager. */
#include "cdc/daemon/notify.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <time.h>

static bool ready_sent;
static int watchdog_state; /* 0 not asked yet, 1 on, -1 off */
static uint64_t watchdog_every_ms, watchdog_last_ms;

/* Sends head (READY=1 and the like, or "") and a STATUS= line made of fmt. */
static void send_status(const char *head, const char *fmt, va_list ap)
{
	char status[512];
	vsnprintf(status, sizeof(status), fmt, ap);
	/* A STATUS= value ends at a newline. It is one line, as in the log. */
	for (char *p = status; *p; p++)
		if (*p == '\n')
			*p = ' ';
	sd_notifyf(0, "%sSTATUS=%s", head, status);
}

void daemon_notify_started(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_status(ready_sent ? "" : "READY=1\n", fmt, ap);
	va_end(ap);
	ready_sent = true;
}

void daemon_notify_status(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_status("", fmt, ap);
	va_end(ap);
}

void daemon_notify_reloading(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the configuration",
		   (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000);
}

void daemon_notify_reloaded(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_status("READY=1\n", fmt, ap);
	va_end(ap);
}

void daemon_notify_stopping(const char *status)
{
	sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status);
}

void daemon_notify_watchdog(uint64_t now_ms)
{
	if (watchdog_state == 0) {
		uint64_t usec = 0;
		watchdog_state = sd_watchdog_enabled(0, &usec) > 0 && usec >= 2000 ? 1 : -1;
		watchdog_every_ms = usec / 2000;
	}
	if (watchdog_state < 0 || now_ms - watchdog_last_ms < watchdog_every_ms)
		return;
	watchdog_last_ms = now_ms;
	sd_notify(0, "WATCHDOG=1");
}

/* See stdout_sink.h. Lines are gathered in one buffer and written when the daemon drains its input (or the
 * buffer fills). So a burst of small transactions costs few syscalls. */
#include "sinks/stdout/stdout_sink.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decoder/base/util.h"
#include "sinks/event_json.h"

#define STDOUT_SINK_HIGH_WATER (256 * 1024)

typedef struct stdout_sink {
	sink base;
	int fd;
	buf out;
	uint64_t ended;	    /* last transaction whose events are all in out */
	uint64_t delivered; /* last transaction written out */
	json_commit commit;
	json_cache json;
} stdout_sink;

static bool write_all(stdout_sink *s, char *err, size_t errlen)
{
	size_t off = 0;
	while (off < s->out.len) {
		ssize_t n = write(s->fd, s->out.data + off, s->out.len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return util_errf(err, errlen, "stdout sink: write: %s", strerror(errno));
		off += (size_t)n;
	}
	buf_reset(&s->out);
	return true;
}

static void stdout_render(sink *base, uint32_t sub, const Cdc__V1__Event *e, buf *out)
{
	(void)sub;
	sink_json_event_head(out, &((stdout_sink *)base)->json, e);
}

static bool stdout_deliver(sink *base, uint32_t sub, const char *rendered, size_t len, const sink_commit *c,
			   uint64_t seq, char *err, size_t errlen)
{
	(void)sub, (void)seq;
	stdout_sink *s = (stdout_sink *)base;
	buf_append(&s->out, rendered, len);
	sink_json_event_tail(&s->out, &s->commit, c->commit_lsn, c->tx_index, c->commit_time);
	/* A transaction larger than the buffer is written in parts. It is delivered at its end. */
	return s->out.len < STDOUT_SINK_HIGH_WATER || write_all(s, err, errlen);
}

static void stdout_end_txn(sink *base, uint64_t seq)
{
	((stdout_sink *)base)->ended = seq;
}

static sink_status stdout_flush(sink *base, char *err, size_t errlen)
{
	stdout_sink *s = (stdout_sink *)base;
	if (!write_all(s, err, errlen))
		return SINK_FATAL;
	s->delivered = s->ended;
	return SINK_OK;
}

static uint64_t stdout_delivered(const sink *base)
{
	return ((const stdout_sink *)base)->delivered;
}

static void stdout_free(sink *base)
{
	stdout_sink *s = (stdout_sink *)base;
	buf_free(&s->out);
	sink_json_commit_free(&s->commit);
	free(s);
}

static const sink_ops stdout_ops = {
    .name = "stdout",
    .render = stdout_render,
    .deliver = stdout_deliver,
    .end_txn = stdout_end_txn,
    .flush = stdout_flush,
    .delivered = stdout_delivered,
    .free = stdout_free,
};

sink *stdout_sink_new(int fd)
{
	stdout_sink *s = util_xcalloc(1, sizeof(*s));
	s->base.ops = &stdout_ops;
	s->fd = fd;
	buf_reserve(&s->out, STDOUT_SINK_HIGH_WATER + 4096);
	return &s->base;
}

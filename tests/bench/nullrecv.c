/* nullrecv.c: the walsender's own ceiling for make bench: streams a logical slot with the pgoutput
 * options given and throws every message away, so that the time to drain a backlog is what the
 * server's walsender takes to decode and send it (one send() per message) with a client that costs
 * next to nothing. Stops, like pg_recvlogical --endpos, at the first message past ENDPOS or at a
 * keepalive at or past it, and confirms what it received. It reads as cdc reads a backlog: the
 * socket wakes it once 64 kB have arrived (SO_RCVLOWAT; a Unix socket ignores it) or after 2 ms,
 * and it takes everything at hand: a reader that woke for every message would make the server
 * wake it for every message too, and take longer.
 *
 * Usage: nullrecv DSN SLOT ENDPOS [NAME=VALUE]...   (prints "messages=N bytes=N" on stderr) */
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#define PG_EPOCH_OFFSET_US INT64_C(946684800000000) /* 2000-01-01 in Unix microseconds */

static uint64_t be64(const char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | (uint8_t)p[i];
	return v;
}

static void put_be64(char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (char)(v & 0xff);
}

static int die(PGconn *c, const char *what)
{
	fprintf(stderr, "nullrecv: %s: %s", what, c ? PQerrorMessage(c) : "out of memory\n");
	PQfinish(c);
	return 1;
}

/* A standby status update: received, flushed and applied up to lsn. */
static int feedback(PGconn *c, uint64_t lsn)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	char m[34];
	m[0] = 'r';
	put_be64(m + 1, lsn);
	put_be64(m + 9, lsn);
	put_be64(m + 17, lsn);
	put_be64(m + 25, (uint64_t)((int64_t)tv.tv_sec * 1000000 + tv.tv_usec - PG_EPOCH_OFFSET_US));
	m[33] = 0;
	return PQputCopyData(c, m, sizeof(m)) == 1 && PQflush(c) == 0;
}

int main(int argc, char **argv)
{
	uint32_t hi, lo;
	if (argc < 4 || sscanf(argv[3], "%" SCNx32 "/%" SCNx32, &hi, &lo) != 2) {
		fprintf(stderr, "usage: nullrecv DSN SLOT ENDPOS [NAME=VALUE]...\n");
		return 2;
	}
	uint64_t endpos = (uint64_t)hi << 32 | lo;
	const char *keys[] = {"dbname", "replication", NULL}, *vals[] = {argv[1], "database", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c || PQstatus(c) != CONNECTION_OK)
		return die(c, "cannot connect");
	/* Slot and option names come from the bench, not from users: quoted, not validated. */
	size_t cap = 256;
	for (int i = 4; i < argc; i++)
		cap += 2 * strlen(argv[i]) + 8;
	char *sql = malloc(cap + 2 * strlen(argv[2]));
	int n = sprintf(sql, "START_REPLICATION SLOT \"%s\" LOGICAL 0/0", argv[2]);
	for (int i = 4; i < argc; i++) {
		const char *eq = strchr(argv[i], '=');
		if (!eq) {
			fprintf(stderr, "nullrecv: option %s is not NAME=VALUE\n", argv[i]);
			return 2;
		}
		n += sprintf(sql + n, "%s\"%.*s\" '%s'", i == 4 ? " (" : ", ", (int)(eq - argv[i]), argv[i],
			     eq + 1);
	}
	if (argc > 4)
		strcpy(sql + n, ")");
	PGresult *r = PQexec(c, sql);
	free(sql);
	if (PQresultStatus(r) != PGRES_COPY_BOTH) {
		PQclear(r);
		return die(c, "START_REPLICATION");
	}
	PQclear(r);
	int lowat = 64 * 1024;
	struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
	setsockopt(pfd.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	uint64_t received = 0, messages = 0, bytes = 0;
	for (;;) {
		char *m = NULL;
		int len = PQgetCopyData(c, &m, 1);
		if (len == 0) {
			if (poll(&pfd, 1, 2) < 0 || !PQconsumeInput(c))
				return die(c, "reading");
			continue;
		}
		if (len < 0)
			return die(c, "the stream ended before ENDPOS");
		bool stop = false;
		if (m[0] == 'w' && len >= 25) {
			uint64_t at = be64(m + 1);
			if (at > endpos)
				stop = true;
			else {
				received = at > received ? at : received;
				messages++;
				bytes += (uint64_t)len - 25;
			}
		} else if (m[0] == 'k' && len >= 18) {
			uint64_t wal_end = be64(m + 1);
			received = wal_end > received ? wal_end : received;
			stop = wal_end >= endpos;
			if (!stop && m[17] && !feedback(c, received))
				return die(c, "feedback");
		}
		PQfreemem(m);
		if (stop)
			break;
	}
	lowat = 1; /* libpq waits for the end of the stream in poll(), which would wait for the mark */
	setsockopt(pfd.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
	if (!feedback(c, received) || PQputCopyEnd(c, NULL) != 1 || PQflush(c) != 0)
		return die(c, "ending the stream");
	for (char *m = NULL; PQgetCopyData(c, &m, 0) >= 0; m = NULL) /* what was in flight */
		PQfreemem(m);
	while ((r = PQgetResult(c)) != NULL)
		PQclear(r);
	PQfinish(c);
	fprintf(stderr, "messages=%" PRIu64 " bytes=%" PRIu64 "\n", messages, bytes);
	return 0;
}

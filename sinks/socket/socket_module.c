/* `sink: socket` declared once. It gives the subscribers section and a subscription's keys, how the sink is
 * made from them, its figures in /status and /metrics, and its doctor check. */
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>

#include "decoder/base/json.h"
#include "decoder/base/net.h"
#include "decoder/base/prom.h"
#include "sinks/module.h"
#include "sinks/socket/socket_sink.h"

#define SECTION(f) offsetof(socket_conf, f)
#define SUB(f) offsetof(socket_sub_conf, f)

static const sink_key section_keys[] = {
    {"socket", SINK_KEY_PATH, SECTION(socket), .flags = SINK_KEY_RESTART, .def_text = SOCKET_DEFAULT_PATH,
     .doc = "The Unix socket where socket subscriptions' consumers connect. A relative path is taken from "
	    "the configuration file's directory, like `status.socket`'s."},
    {"mode", SINK_KEY_MODE, SECTION(mode), .flags = SINK_KEY_RESTART, .def_number = 0660,
     .doc = "The file mode of both sockets; access for a consumer's group goes through cdc's group. A mode "
	    "that lets any local user write is refused."},
    {"first_frame_timeout", SINK_KEY_DURATION, SECTION(first_frame_timeout_ms),
     .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART, .def_number = 10000,
     .doc =
	 "A connection must send its `Subscribe` frame this soon, else it gets `Error SUBSCRIBE_TIMEOUT`."},
    {"max_connections", SINK_KEY_U32, SECTION(max_connections), .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART,
     .def_number = 1024,
     .doc = "At most this many consumer connections; then the oldest that has not subscribed gives way, or "
	    "the new one gets `CONNECTION_LIMIT`."},
    {"max_output", SINK_KEY_SIZE, SECTION(max_output), .flags = SINK_KEY_POSITIVE | SINK_KEY_RESTART,
     .def_number = 1u << 20,
     .doc = "Unread output per consumer before it is sent nothing more (it resumes when a quarter is left), "
	    "so a consumer that stops reading holds up no one."},
};

static const char *const full_names[] = {"block", "drop_oldest", NULL};
static const sink_key retention_k[] = {
    {"max_events", SINK_KEY_U64, SUB(retention.max_events),
     .doc = "At most this many unacknowledged events in the spool (0: no limit). See `when_full`."},
    {"max_age", SINK_KEY_DURATION, SUB(retention.max_age_ms),
     .doc = "Unacknowledged events older than this count as over the limit (0: no limit)."},
    {"max_bytes", SINK_KEY_SIZE, SUB(retention.max_bytes),
     .doc = "At most this many bytes of unacknowledged events in the spool (0: no limit)."},
    {"when_full", SINK_KEY_ENUM, SUB(retention.when_full), full_names, .def_number = SOCKET_FULL_BLOCK,
     .doc = "`block`: stop reading the slot while a limit is reached (nothing is lost; WAL waits on the "
	    "server). `drop_oldest`: discard the oldest events, acknowledged or not, log the range, count it "
	    "in `dropped` and tell the next consumer with a `Dropped` frame. A limit is checked after each "
	    "batch of input, so one read can pass it."},
};
static const sink_keys retention_keys = SINK_KEYS(retention_k);

static const sink_key allow_k[] = {
    {"uids", SINK_KEY_UIDS, SUB(allow.uids), .flags = SINK_KEY_OPTIONAL,
     .doc = "The user ids (or names) whose consumers may subscribe, by their peer credentials "
	    "(`SO_PEERCRED`)."},
    {"gids", SINK_KEY_GIDS, SUB(allow.gids), .flags = SINK_KEY_OPTIONAL,
     .doc = "The group ids (or names) whose consumers may subscribe: the peer's group or one of its "
	    "supplementary groups."},
};
static const sink_keys allow_keys = SINK_KEYS(allow_k);

static const char *const consumers_names[] = {"failover", "shared", "key_shared", NULL};
static const char *const batch_names[] = {"none", "transaction", NULL};
enum { SUB_ALLOW = 6 };
static const sink_key sub_keys[] = {
    {"consumers", SINK_KEY_ENUM, SUB(consumers), consumers_names, .def_number = SOCKET_FAILOVER,
     .doc = "Socket only: how its consumers share the events. `failover`: the first one receives everything, "
	    "in order, and acks cumulatively; the others wait. `shared`: each event to one consumer, acked "
	    "one by one. `key_shared`: like `shared`, with all events of one key to the same consumer. See "
	    "[socket.md](socket.md)."},
    {"ack_timeout", SINK_KEY_DURATION, SUB(ack_timeout_ms), .flags = SINK_KEY_POSITIVE, .def_number = 30000,
     .doc = "Socket only: an event delivered and not acknowledged this long is delivered again (to another "
	    "consumer where the mode allows, never back to this one while another can take it); a consumer "
	    "that neither reads its socket nor sends for this long loses what it holds. See "
	    "[socket.md](socket.md)."},
    {"max_deliveries", SINK_KEY_U32, SUB(max_deliveries),
     .doc = "Socket only: after this many deliveries an event moves to the subscription's dead letters (0: "
	    "never)."},
    {"max_unacked", SINK_KEY_U32, SUB(max_unacked), .flags = SINK_KEY_POSITIVE, .def_number = 1000,
     .doc = "Socket only: at most this many events in flight per consumer (a consumer may ask for fewer)."},
    {"batch", SINK_KEY_ENUM, SUB(batch), batch_names, .def_number = SOCKET_BATCH_NONE,
     .doc = "Socket only: `none`, one event per Delivery frame; `transaction`, all of one source "
	    "transaction's events for the subscription in one frame (split only past 16 MiB)."},
    {"retention", SINK_KEY_SECTION, 0, &retention_keys, SINK_KEY_FLOW,
     .doc = "Socket only: limits on the subscription's unacknowledged events, and what happens at a limit."},
    [SUB_ALLOW] = {"allow", SINK_KEY_SECTION, 0, &allow_keys, SINK_KEY_FLOW,
		   .doc = "Socket only: who may read the subscription, its events and its dead letters: a "
			  "consumer whose uid is in `uids` or whose group (or a supplementary group) is in "
			  "`gids`. Any other consumer's `Subscribe` is refused with `PERMISSION_DENIED`, "
			  "and a reload that takes a consumer off the list disconnects it. Without it, "
			  "whoever can connect to `subscribers.socket` (its mode and owner decide) may "
			  "read the subscription. See [security.md](security.md#the-subscriber-socket)."},
};

_Static_assert(sizeof sub_keys / sizeof *sub_keys == SUB_ALLOW + 1, "allow is the last subscription key");

/* What the sink takes of each subscription. serve says whether it is a socket one. */
static socket_sub_settings *sub_settings(const sink_sub *subs, size_t n)
{
	socket_sub_settings *v = util_xcalloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		const socket_sub_conf *c = subs[i].settings;
		v[i] = (socket_sub_settings){
		    .name = subs[i].name,
		    .serve = subs[i].mine,
		    .consumers = (socket_consumers)c->consumers,
		    .ack_timeout_ms = c->ack_timeout_ms,
		    .max_deliveries = c->max_deliveries,
		    .max_unacked = c->max_unacked,
		    .batch_transaction = c->batch == SOCKET_BATCH_TRANSACTION,
		    .retention = {.max_events = c->retention.max_events,
				  .max_age_ms = c->retention.max_age_ms,
				  .max_bytes = c->retention.max_bytes,
				  .drop_oldest = c->retention.when_full == SOCKET_FULL_DROP_OLDEST},
		    .restricted = c->allow.uids.n || c->allow.gids.n,
		    .allow_uids = c->allow.uids, /* copied by the sink */
		    .allow_gids = c->allow.gids,
		};
	}
	return v;
}

/* An allow list with neither uids nor gids would let no consumer in. It is refused as a mistake. */
static void check_sub(void *settings, const bool *given, sink_problems *problems)
{
	const socket_sub_conf *c = settings;
	if (given[SUB_ALLOW] && !c->allow.uids.n && !c->allow.gids.n)
		problems->report(problems, SUB_ALLOW,
				 "needs uids or gids (an empty allow list would let no consumer subscribe)");
}

/* allow is printed when it holds something. */
static bool sub_shown(const void *settings, size_t key_index)
{
	const socket_sub_conf *c = settings;
	return key_index != SUB_ALLOW || c->allow.uids.n || c->allow.gids.n;
}

static sink *create_sink(const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
			 char *err, size_t errlen)
{
	const socket_conf *c = section;
	socket_sink_settings set = {.socket_path = c->socket,
				    .mode = c->mode,
				    .state_dir = env->state_dir,
				    .first_frame_timeout_ms = c->first_frame_timeout_ms,
				    .max_connections = c->max_connections,
				    .max_output = c->max_output};
	socket_sub_settings *v = sub_settings(subs, nsubs);
	sink *k = socket_sink_new(&set, v, nsubs, env->base, env->wake, env->durable, env->ctx, err, errlen);
	free(v);
	return k;
}

static bool bind_sink(sink *k, const sink_env *env, const void *section, const sink_sub *subs, size_t nsubs,
		      char *err, size_t errlen)
{
	(void)env, (void)section;
	socket_sub_settings *v = sub_settings(subs, nsubs);
	bool ok = socket_sink_bind(k, v, nsubs, err, errlen);
	free(v);
	return ok;
}

/* ---- figures ---- */

static const char *const mode_names[] = {
    [SOCKET_FAILOVER] = "failover", [SOCKET_SHARED] = "shared", [SOCKET_KEY_SHARED] = "key_shared"};

static const char *const sub_fields[] = {
    "head_offset", "acked_offset", "first_offset", "pending", "consumers", "dead",
    "dropped",	   "redelivered",  "in_flight",	   "acked",   "nacked",	   "progressed",
    "refused",	   "denied",	   "spool_bytes",  "full",    "attached",  "dead_letter_readers",
    NULL};

/* The consumers of one subscription that read its dead letters (or its events), as a JSON array. */
static void consumers_json(const socket_consumer_stats *v, size_t n, bool dead_letters, buf *out)
{
	bool fa = true;
	buf_putc(out, '[');
	for (size_t i = 0; i < n; i++) {
		const socket_consumer_stats *c = &v[i];
		if (c->dead_letters != dead_letters)
			continue;
		bool f = true;
		json_sep(out, &fa);
		buf_putc(out, '{');
		json_key_str(out, &f, "name", c->name);
		json_key_i64(out, &f, "pid", c->pid);
		json_key_i64(out, &f, "uid", c->uid);
		json_key_str(out, &f, "mode", mode_names[c->mode]);
		json_key_boolean(out, &f, "active", c->active);
		json_key_boolean(out, &f, "reading", c->reading);
		json_key_u64(out, &f, "in_flight", c->in_flight);
		json_key_u64(out, &f, "delivered", c->delivered);
		json_key_u64(out, &f, "acked", c->acked);
		json_key_time(out, &f, "connected_since", c->connected_us);
		buf_putc(out, '}');
	}
	buf_putc(out, ']');
}

/* Renders one subscription's spool figures and consumers. It is pure, so tests compare it byte for byte. */
void socket_sub_json(const socket_sub_stats *st, const socket_consumer_stats *consumers, size_t n, buf *out)
{
	bool f = false; /* members follow "bytes" */
	json_key_u64(out, &f, "head_offset", st->head_offset);
	json_key_u64(out, &f, "acked_offset", st->acked_offset);
	json_key_u64(out, &f, "first_offset", st->first_offset);
	json_key_u64(out, &f, "pending",
		     st->head_offset > st->acked_offset ? st->head_offset - st->acked_offset : 0);
	json_key_u64(out, &f, "consumers", st->consumers);
	json_key_u64(out, &f, "dead", st->dead);
	json_key_u64(out, &f, "dropped", st->dropped);
	json_key_u64(out, &f, "redelivered", st->redelivered);
	json_key_u64(out, &f, "in_flight", st->in_flight);
	json_key_u64(out, &f, "acked", st->acked);
	json_key_u64(out, &f, "nacked", st->nacked);
	json_key_u64(out, &f, "progressed", st->progressed);
	json_key_u64(out, &f, "refused", st->refused);
	json_key_u64(out, &f, "denied", st->denied);
	json_key_u64(out, &f, "spool_bytes", st->spool_bytes);
	json_key_boolean(out, &f, "full", st->full);
	json_key(out, &f, "attached");
	consumers_json(consumers, n, false, out);
	json_key(out, &f, "dead_letter_readers");
	consumers_json(consumers, n, true, out);
}

static bool sub_status(const sink *k, uint32_t sub, uint64_t *delivered, buf *members)
{
	socket_sub_stats st;
	if (!socket_sink_stats(k, sub, &st))
		return false;
	size_t n;
	socket_consumer_stats *consumers = socket_sink_consumers(k, sub, &n);
	*delivered = st.delivered;
	socket_sub_json(&st, consumers, n, members);
	free(consumers);
	return true;
}

/* The spool's families, by subscription. */
static const struct {
	const char *name, *type, *help;
	size_t offset; /* in socket_sub_stats, SIZE_MAX for pending */
	bool flag;
} sub_metrics_table[] = {
    {"cdc_subscription_pending_events", "gauge", "Events spooled and not yet acknowledged.", SIZE_MAX, false},
    {"cdc_subscription_consumers", "gauge", "Consumers attached to the subscription.",
     offsetof(socket_sub_stats, consumers), false},
    {"cdc_subscription_not_reading_consumers", "gauge",
     "Consumers (of the events or the dead letters) that neither read their socket nor sent a frame for "
     "ack_timeout: what they held went to others, and they get nothing until they read.",
     offsetof(socket_sub_stats, not_reading), false},
    {"cdc_subscription_dead_events", "gauge", "Dead letters retained (max_deliveries reached).",
     offsetof(socket_sub_stats, dead), false},
    {"cdc_subscription_dropped_events_total", "counter",
     "Events discarded by retention before acknowledgement.", offsetof(socket_sub_stats, dropped), false},
    {"cdc_subscription_redelivered_events_total", "counter",
     "Events delivered again after a timeout or a nack.", offsetof(socket_sub_stats, redelivered), false},
    {"cdc_subscription_in_flight_events", "gauge",
     "Events delivered to attached consumers and not acknowledged yet.",
     offsetof(socket_sub_stats, in_flight), false},
    {"cdc_subscription_acked_events_total", "counter", "Offsets consumers acknowledged.",
     offsetof(socket_sub_stats, acked), false},
    {"cdc_subscription_nacked_events_total", "counter", "Offsets consumers gave back with a Nack.",
     offsetof(socket_sub_stats, nacked), false},
    {"cdc_subscription_progress_total", "counter",
     "Offsets whose ack_timeout a consumer's Progress restarted.", offsetof(socket_sub_stats, progressed),
     false},
    {"cdc_subscription_refused_total", "counter",
     "Offsets in Ack, Nack or Progress frames refused: not in flight to the consumer that sent them.",
     offsetof(socket_sub_stats, refused), false},
    {"cdc_subscription_denied_subscribes_total", "counter",
     "Subscribes refused because the subscription's allow list holds neither the consumer's uid nor its "
     "groups.",
     offsetof(socket_sub_stats, denied), false},
    {"cdc_subscription_head_offset", "gauge", "Newest durable offset in the subscription's spool.",
     offsetof(socket_sub_stats, head_offset), false},
    {"cdc_subscription_acked_offset", "gauge", "Offset up to which everything is acknowledged.",
     offsetof(socket_sub_stats, acked_offset), false},
    {"cdc_subscription_full", "gauge",
     "1 while the spool is at a retention limit with when_full: block (the slot is paused).",
     offsetof(socket_sub_stats, full), true},
    {"cdc_spool_bytes", "gauge", "Bytes on disk in the subscription's spool.",
     offsetof(socket_sub_stats, spool_bytes), false},
};

void socket_sub_metrics(const socket_sub_stats *stats, const char *const *names, size_t n, buf *out)
{
	for (size_t m = 0; m < sizeof sub_metrics_table / sizeof *sub_metrics_table; m++) {
		prom_family(out, sub_metrics_table[m].name, sub_metrics_table[m].type,
			    sub_metrics_table[m].help);
		for (size_t i = 0; i < n; i++) {
			if (!names[i])
				continue;
			const socket_sub_stats *st = &stats[i];
			uint64_t v;
			if (sub_metrics_table[m].offset == SIZE_MAX)
				v = st->head_offset > st->acked_offset ? st->head_offset - st->acked_offset
								       : 0;
			else if (sub_metrics_table[m].flag)
				v = *(const bool *)(const void *)((const char *)st +
								  sub_metrics_table[m].offset);
			else
				v = *(const uint64_t *)(const void *)((const char *)st +
								      sub_metrics_table[m].offset);
			prom_sample(out, sub_metrics_table[m].name, "subscription", names[i], NULL, NULL);
			buf_printf(out, " %" PRIu64 "\n", v);
		}
	}
}

static void sub_metrics(const sink *k, const char *const *names, size_t n, buf *out)
{
	socket_sub_stats *stats = util_xcalloc(n ? n : 1, sizeof(*stats));
	const char **served = util_xcalloc(n ? n : 1, sizeof(*served));
	for (size_t i = 0; i < n; i++)
		if (names[i] && socket_sink_stats(k, (uint32_t)i, &stats[i]))
			served[i] = names[i];
	socket_sub_metrics(stats, served, n, out);
	free(stats);
	free(served);
}

static const hist *latency(const sink *k)
{
	return socket_sink_latency(k);
}

/* The group commits: what a slow disk costs each transaction on the way to consumers. */
static void status_json(const sink *k, buf *out)
{
	bool f = true;
	buf_putc(out, '{');
	json_key_hist_ms(out, &f, "spool_sync_ms", socket_sink_spool_sync(k));
	buf_putc(out, '}');
}

static void metrics(const sink *k, buf *out)
{
	prom_family(out, "cdc_socket_spool_sync_seconds", "histogram",
		    "Seconds one group commit of the socket sink's spools took (their writes and fsyncs); a "
		    "transaction waits for one.");
	prom_histogram(out, "cdc_socket_spool_sync_seconds", NULL, NULL, socket_sink_spool_sync(k));
}

static void status_text(struct json_object *figures, buf *out)
{
	json_object *sync = NULL;
	char f[4][64];
	if (json_object_object_get_ex(figures, "spool_sync_ms", &sync))
		buf_printf(out, "socket  spool group commits=%s  p50=%s ms  p99=%s ms  max=%s ms\n",
			   json_field_text(sync, "count", f[0], 64), json_field_text(sync, "p50", f[1], 64),
			   json_field_text(sync, "p99", f[2], 64), json_field_text(sync, "max", f[3], 64));
}

static bool forget(sink *k, const char *name, char *err, size_t errlen)
{
	return socket_sink_forget(k, name, err, errlen);
}

/* ---- cdc doctor ---- */

static void check_socket(sink_doctor *dr)
{
	const socket_conf *c = dr->section;
	dr->socket_path(dr, "subscribers.socket", c->socket);
}

/* Who may connect to the socket, and who may read each subscription (its allow list). */
static void check_access(sink_doctor *dr)
{
	const socket_conf *c = dr->section;
	dr->socket_access(dr, "subscribers.socket", c->socket, c->mode);
	for (size_t i = 0; i < dr->nsubs; i++) {
		const socket_sub_conf *s = dr->subs[i].settings;
		if (!dr->subs[i].mine)
			continue;
		if (!s->allow.uids.n && !s->allow.gids.n) {
			dr->say(dr, SINK_PASS, NULL,
				"subscription %s: no allow list: whoever may connect to subscribers.socket "
				"may read it",
				dr->subs[i].name);
			continue;
		}
		buf uids = {0}, gids = {0};
		net_ids_text(&s->allow.uids, false, &uids);
		net_ids_text(&s->allow.gids, true, &gids);
		dr->say(dr, SINK_PASS, NULL, "subscription %s: only uids %s and the groups %s may read it",
			dr->subs[i].name, uids.len ? uids.data : "(none)", gids.len ? gids.data : "(none)");
		buf_free(&uids);
		buf_free(&gids);
	}
}

static const sink_check checks[] = {
    {"sockets", NULL, check_socket}, {"access", NULL, check_access}, {NULL, NULL, NULL}};

static bool state_bytes(const void *settings, uint64_t *bytes)
{
	*bytes = ((const socket_sub_conf *)settings)->retention.max_bytes;
	return true;
}

const sink_module socket_module = {
    .name = "socket",
    .doc = "`socket` (a durable spool and consumers over `subscribers.socket`, [socket.md](socket.md))",
    .section = "subscribers",
    .section_doc = "The socket where consumers of socket subscriptions connect.",
    .section_keys = SINK_KEYS(section_keys),
    .section_size = sizeof(socket_conf),
    .sub_keys = SINK_KEYS(sub_keys),
    .sub_size = sizeof(socket_sub_conf),
    .check_sub = check_sub,
    .sub_shown = sub_shown,
    .create = create_sink,
    .bind = bind_sink,
    .forget = forget,
    .status_json = status_json,
    .metrics = metrics,
    .latency = latency,
    .status_text = status_text,
    .sub_fields = sub_fields,
    .sub_status = sub_status,
    .sub_metrics = sub_metrics,
    .checks = checks,
    .state_bytes = state_bytes,
    .state_limit_key = "retention.max_bytes",
};

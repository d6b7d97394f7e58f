"""consumer.py: a worker's view of a socket subscription: iterate over typed events, ack them;
reconnects with exponential backoff when cdc restarts or the connection breaks, and handles
heartbeats. Built on Connection (connection.py)."""
import logging
import random
import time
from typing import Callable, Iterator, List, Optional, Union

from ._proto import pb
from .connection import MODES, ConnectionClosed, Connection, ProtocolError, ServerError
from .events import Event

log = logging.getLogger("cdc_client")

# Error codes after which connecting again may succeed: cdc is stopping (a restart, a rollout).
# Every other code (an unknown or removed subscription, a frame the server refused) is raised.
RETRYABLE_CODES = frozenset({pb.Error.SHUTTING_DOWN})

DEFAULT_HEARTBEAT_MS = 5000


class Consumer:
    """Consumes one subscription through cdc's subscriber socket.

        with Consumer("/run/cdc/events.sock", "jobs", consumer="worker-1") as c:
            for event in c:
                handle(event)
                c.ack(event)

    start ("acked", "earliest", "latest", or an int offset) applies to the first connection only;
    reconnections resume from the subscription's acknowledged offset, so what was delivered but not
    acknowledged is delivered again (at least once). max_unacked: events in flight to this consumer
    (0: the subscription's). heartbeat_ms: how often an idle server sends a Heartbeat; a connection
    silent for three of those is taken as dead and replaced.

    reconnect: connect again with exponential backoff (backoff_initial doubling up to backoff_max
    seconds, with jitter) when the socket is absent, refuses, closes, or cdc says SHUTTING_DOWN;
    give_up_after (seconds, None: never) bounds one outage. Without reconnect those raise
    (OSError, ConnectionClosed, ServerError). Any other Error frame raises ServerError at once.

    on_dropped(from_offset, to_offset) is called when retention discarded events before they
    reached this consumer (default: a warning on the "cdc_client" logger). Not thread-safe: iterate
    and ack from one thread."""

    def __init__(self, path: str, subscription: str, *, consumer: Optional[str] = None,
                 start: Union[str, int] = "acked", max_unacked: int = 0, heartbeat_ms: int = 0,
                 dead_letters: bool = False, reconnect: bool = True, backoff_initial: float = 0.1,
                 backoff_max: float = 10.0, give_up_after: Optional[float] = None,
                 on_dropped: Optional[Callable[[int, int], None]] = None):
        self.path = path
        self.subscription = subscription
        self.consumer = consumer
        self.start = start
        self.max_unacked = max_unacked
        self.heartbeat_ms = heartbeat_ms or DEFAULT_HEARTBEAT_MS
        self.dead_letters = dead_letters
        self.reconnect = reconnect
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.give_up_after = give_up_after
        self.on_dropped = on_dropped or self._log_dropped
        self.subscribed = None          # the last Subscribed answer
        self.server_acked_offset = 0    # from Subscribed and Heartbeat: acks the server has
        self.active = False             # failover: whether this consumer receives now
        self.connections = 0            # how many times it connected
        self._conn: Optional[Connection] = None
        self._closed = False
        # One entry per ServerFrame kind: a new kind (such as an answer to acks) is one more entry.
        self._handlers = {
            "subscribed": self._on_subscribed,
            "delivery": self._on_delivery,
            "heartbeat": self._on_heartbeat,
            "dropped": self._on_dropped,
            "error": self._on_error,
        }

    # --- what a worker calls ---

    def __iter__(self) -> Iterator[Event]:
        return self.events()

    def events(self, idle_timeout: Optional[float] = None) -> Iterator[Event]:
        """Events one by one, for ever (or until idle_timeout seconds pass without one)."""
        for batch in self.batches(idle_timeout):
            yield from batch

    def batches(self, idle_timeout: Optional[float] = None) -> Iterator[List[Event]]:
        """The events of each Delivery frame (one transaction's with `batch: transaction`), for ever
        (or until idle_timeout seconds pass without one). Acknowledge a batch with ack(*batch)."""
        deadline = None if idle_timeout is None else time.monotonic() + idle_timeout
        while not self._closed:
            conn = self._connection(deadline)
            if conn is None:
                return
            # A live server sends something at least every heartbeat_ms: three silent periods
            # mean a dead peer (the socket would not tell), so connect again.
            silence = 3 * self.heartbeat_ms / 1000.0
            wait = silence if deadline is None else min(silence, max(0.0, deadline - time.monotonic()))
            try:
                f = conn.recv(wait)
            except ProtocolError:
                self._drop_connection()
                raise
            if f is None:
                if conn.closed:
                    self._lost("the server closed the connection")
                elif deadline is not None and time.monotonic() >= deadline:
                    return
                else:
                    self._lost("no frame for %.1fs" % silence)
                continue
            batch = self._handle(f)
            if batch:
                yield batch
                if idle_timeout is not None:
                    deadline = time.monotonic() + idle_timeout

    def ack(self, *items: Union[Event, int]) -> None:
        """Acknowledges events (Event objects or offsets) in one Ack frame. In failover mode and for
        dead letters acks are cumulative, so only the highest offset is sent; in shared and
        key_shared modes every offset is. Events delivered on an earlier connection are not acked
        (cdc delivers them again). A broken connection is noticed, and replaced, by the iterator."""
        offsets = []
        for it in items:
            if isinstance(it, Event):
                if it.connection_id != self.connections or it.offset is None:
                    continue
                offsets.append(it.offset)
            else:
                offsets.append(int(it))
        if not offsets or self._conn is None:
            return
        if self.cumulative:
            offsets = [max(offsets)]
        self._send(pb.ClientFrame(ack=pb.Ack(offsets=offsets)))

    @property
    def mode(self) -> Optional[str]:
        """"failover", "shared" or "key_shared" (None before the first Subscribed)."""
        return MODES.get(self.subscribed.mode) if self.subscribed is not None else None

    @property
    def cumulative(self) -> bool:
        """Whether an ack covers every offset up to it (failover mode, dead letters)."""
        return self.dead_letters or self.subscribed is None or self.subscribed.mode == pb.FAILOVER

    def close(self) -> None:
        self._closed = True
        self._drop_connection()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- frames ---

    def _handle(self, f) -> Optional[List[Event]]:
        kind = f.WhichOneof("kind")
        handler = self._handlers.get(kind)
        if handler is None:  # a frame newer than this client: nothing it must act on
            log.debug("ignoring a %s frame", kind)
            return None
        return handler(getattr(f, kind))

    def _on_subscribed(self, m):
        raise ProtocolError("a second Subscribed")

    def _on_delivery(self, m):
        return [Event.from_pb(e, self.connections) for e in m.events]

    def _on_heartbeat(self, m):
        self.server_acked_offset = m.acked_offset
        self.active = m.active

    def _on_dropped(self, m):
        self.on_dropped(m.from_offset, m.to_offset)

    def _on_error(self, m):
        self._drop_connection()
        if self.reconnect and m.code in RETRYABLE_CODES:
            log.info("cdc_client: %s: %s; connecting again", pb.Error.Code.Name(m.code), m.message)
            return None
        raise ServerError(m)

    def _log_dropped(self, first, last):
        log.warning("cdc_client: subscription %s: events %d..%d were dropped by retention before "
                    "this consumer received them", self.subscription, first, last)

    def _send(self, frame):
        try:
            self._conn.send(frame)
        except OSError as e:
            # The iterator notices the closed connection and connects again; an unsent ack means
            # a redelivery, never a loss.
            log.info("cdc_client: send failed (%s); the connection will be replaced", e)

    # --- connections ---

    def _connection(self, deadline) -> Optional[Connection]:
        """The live connection, or a new one (subscribed) after backoff; None at the deadline."""
        if self._conn is not None:
            return self._conn
        delay = self.backoff_initial
        outage_start = time.monotonic()
        while not self._closed:
            try:
                return self._connect()
            except (OSError, ConnectionClosed, TimeoutError) as e:
                if not self.reconnect:
                    raise
                reason = e
            except ServerError as e:
                if not (self.reconnect and e.code_value in RETRYABLE_CODES):
                    raise
                reason = e
            if self.give_up_after is not None and time.monotonic() - outage_start >= self.give_up_after:
                raise ConnectionClosed("cdc at %s unreachable for %.1fs: %s" % (
                    self.path, self.give_up_after, reason))
            sleep = delay * random.uniform(0.5, 1.0)
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                sleep = min(sleep, left)
            log.info("cdc_client: %s; connecting again in %.2fs", reason, sleep)
            time.sleep(sleep)
            delay = min(delay * 2, self.backoff_max)
        return None

    def _connect(self) -> Connection:
        conn = Connection(self.path)
        try:
            first = self.connections == 0
            sub = conn.subscribe(self.subscription, consumer=self.consumer,
                                 start=self.start if first else "acked", max_unacked=self.max_unacked,
                                 dead_letters=self.dead_letters, heartbeat_ms=self.heartbeat_ms)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self.connections += 1
        self.subscribed = sub
        self.server_acked_offset = sub.acked_offset
        self.active = sub.active
        log.debug("cdc_client: subscribed to %s (%s), next offset %d", self.subscription, self.mode,
                  sub.next_offset)
        return conn

    def _lost(self, why):
        self._drop_connection()
        if not self.reconnect:
            raise ConnectionClosed(why)
        log.info("cdc_client: %s; connecting again", why)

    def _drop_connection(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

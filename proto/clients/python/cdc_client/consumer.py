"""consumer.py: a worker's view of a socket subscription: iterate over typed events, ack, nack or
report progress on them; reconnects with exponential backoff when cdc restarts or the connection
breaks, handles heartbeats and the Acked answers to acks. Built on Connection (connection.py)."""
import collections
import contextlib
import logging
import random
import threading
import time
from typing import Callable, Iterable, Iterator, List, Optional, Union

from ._proto import pb
from .connection import MODES, ConnectionClosed, Connection, ProtocolError, ServerError, server_error
from .events import DeadLetter, Event, Refused

log = logging.getLogger("cdc_client")

# Error codes after which connecting again may succeed: cdc is stopping (a restart, a rollout),
# its connection table is full, or this client's Subscribe came too late (a process stopped for
# seconds). Every other code (an unknown or removed subscription, a frame the server refused) is
# raised.
RETRYABLE_CODES = frozenset({pb.Error.SHUTTING_DOWN, pb.Error.CONNECTION_LIMIT, pb.Error.SUBSCRIBE_TIMEOUT})

DEFAULT_HEARTBEAT_MS = 5000
OFFSETS_MAX = 65536          # offsets in one Ack, Nack or Progress frame
NACK_DELAY_MAX = 3600.0      # seconds
REASON_MAX = 1024            # bytes of UTF-8
REFUSALS_KEPT = 65536        # refusals kept for wait_answered()

Item = Union[Event, int, Iterable[Union[Event, int]]]


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
    seconds, with jitter) when the socket is absent, refuses, closes, or cdc says SHUTTING_DOWN,
    CONNECTION_LIMIT or SUBSCRIBE_TIMEOUT; give_up_after (seconds, None: never) bounds one outage. Without reconnect those raise
    (OSError, ConnectionClosed, ServerError). Any other Error frame raises ServerError at once.

    on_dropped(from_offset, to_offset) is called when retention discarded events before they
    reached this consumer (default: a warning on the "cdc_client" logger).

    cdc answers every Ack, Nack and Progress with an Acked frame: server_acked_offset follows it,
    and offsets it refused (never delivered, acknowledged already, another consumer's, or this
    consumer not active) go to on_refused(list of Refused) (default: a warning on the logger);
    wait_answered() waits for the answers and returns those refusals.

    Iterate from one thread. ack, nack and progress may be called from other threads too (a job's
    own thread, keep_alive's)."""

    def __init__(self, path: str, subscription: str, *, consumer: Optional[str] = None,
                 start: Union[str, int] = "acked", max_unacked: int = 0, heartbeat_ms: int = 0,
                 dead_letters: bool = False, reconnect: bool = True, backoff_initial: float = 0.1,
                 backoff_max: float = 10.0, give_up_after: Optional[float] = None,
                 on_dropped: Optional[Callable[[int, int], None]] = None,
                 on_refused: Optional[Callable[[List[Refused]], None]] = None):
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
        self.on_refused = on_refused or self._log_refused
        self.subscribed = None          # the last Subscribed answer
        self.server_acked_offset = 0    # from Subscribed, Acked and Heartbeat: acks the server has
        self.active = False             # failover: whether this consumer receives now
        self.connections = 0            # how many times it connected
        self._conn: Optional[Connection] = None
        self._closed = False
        self._lock = threading.Lock()   # sends and the per-connection state below
        self._pending = collections.deque()  # batches read by wait_answered, yielded first
        self._reset_connection_state()
        # One entry per ServerFrame kind.
        self._handlers = {
            "subscribed": self._on_subscribed,
            "delivery": self._on_delivery,
            "heartbeat": self._on_heartbeat,
            "dropped": self._on_dropped,
            "error": self._on_error,
            "acked": self._on_acked,
        }

    def _reset_connection_state(self):
        self._sent = 0                  # Ack, Nack and Progress frames sent on this connection
        self._answered = 0              # of those, answered by Acked frames
        self._refusals = collections.deque(maxlen=REFUSALS_KEPT)  # since the last wait_answered
        # Cumulative acks (failover, dead letters) must not pass an offset given back by a Nack:
        # it is held back until delivered again, and acks stop below it meanwhile.
        self._held_back = set()
        self._ack_wanted = 0            # the highest delivered offset the worker acked
        self._ack_sent = 0              # the highest cumulative ack sent
        self._delivered_max = 0         # the highest offset delivered on this connection

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
            if self._pending:
                yield self._pending.popleft()
                if idle_timeout is not None:
                    deadline = time.monotonic() + idle_timeout
                continue
            conn = self._connection(deadline)
            if conn is None:
                return
            # A live server sends something at least every heartbeat_ms: three silent periods
            # mean a dead peer (the socket would not tell), so connect again.
            silence = 3 * self.heartbeat_ms / 1000.0
            wait = silence if deadline is None else min(silence, max(0.0, deadline - time.monotonic()))
            f = self._recv(conn, wait)
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

    def ack(self, *items: Item) -> None:
        """Acknowledges events (Event objects, offsets, or lists of them such as a batch) in one Ack
        frame (more past 65,536 offsets). In failover mode and for dead letters acks are
        cumulative, so only the highest offset is sent, and never one past an event given back by
        nack() until that event has come back; in shared and key_shared modes every offset is.
        Events delivered on an earlier connection are not acked (cdc delivers them again). A broken
        connection is noticed, and replaced, by the iterator."""
        offsets = self._offsets(items)
        if not offsets:
            return
        with self._lock:
            if self._conn is None:
                return
            if not self.cumulative:
                self._send_offsets("ack", offsets)
                return
            top = max(offsets)
            if top <= self._delivered_max:
                self._ack_wanted = max(self._ack_wanted, top)
                top = self._ack_wanted
            if self._held_back:
                top = min(top, min(self._held_back) - 1)
                if top <= self._ack_sent:
                    return  # nothing new below the event given back
            self._ack_sent = max(self._ack_sent, top)
            self._send_offsets("ack", [top])

    def nack(self, *items: Item, delay: float = 0.0, reason: str = "") -> None:
        """Gives events (or offsets) back: cdc delivers each again after delay seconds (at most an
        hour), to another consumer where the mode allows (shared); the delivery given back counts
        towards the subscription's max_deliveries, and an event that reaches it becomes a dead letter
        carrying reason (cut to 1 KiB of UTF-8). One Nack frame of every offset, in every mode."""
        if not 0 <= delay <= NACK_DELAY_MAX:
            raise ValueError("delay must be 0 to %d seconds, not %r" % (NACK_DELAY_MAX, delay))
        raw = reason.encode("utf-8")
        if len(raw) > REASON_MAX:
            reason = raw[:REASON_MAX].decode("utf-8", errors="ignore")
        offsets = self._offsets(items)
        if not offsets:
            return
        with self._lock:
            if self._conn is None:
                return
            if self.cumulative:
                self._held_back.update(offsets)
            self._send_offsets("nack", offsets, delay_ms=round(delay * 1000), reason=reason)

    def progress(self, *items: Item) -> None:
        """Still working on these events (or offsets): each one's ack_timeout starts again. A job
        longer than the subscription's ack_timeout sends one every ack_timeout / 3 or so (see
        keep_alive)."""
        offsets = self._offsets(items)
        if not offsets:
            return
        with self._lock:
            if self._conn is not None:
                self._send_offsets("progress", offsets)

    @contextlib.contextmanager
    def keep_alive(self, *items: Item, every: float):
        """While the block runs, a thread sends progress(items) every `every` seconds (a third of
        the subscription's ack_timeout, say), so that a long job is not delivered again elsewhere:

            with c.keep_alive(event, every=1.0):
                run_long_job(event)
            c.ack(event)
        """
        if every <= 0:
            raise ValueError("every must be positive")
        stop = threading.Event()

        def beat():
            while not stop.wait(every):
                self.progress(*items)

        t = threading.Thread(target=beat, name="cdc_client keep_alive", daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join()

    def wait_answered(self, timeout: float = 10.0) -> List[Refused]:
        """Waits until cdc has answered every Ack, Nack and Progress sent on this connection, and
        returns the offsets it refused since the last call (each was also passed to on_refused).
        Call it from the loop that iterates (events that arrive meanwhile are kept for the
        iterator). TimeoutError if the answers do not come within timeout seconds;
        ConnectionClosed if the connection is lost first (what it did not answer had no effect:
        those events come again)."""
        deadline = time.monotonic() + timeout
        conn = self._conn
        while True:
            with self._lock:
                if self._answered >= self._sent:
                    out = list(self._refusals)
                    self._refusals.clear()
                    return out
                if self._conn is not conn or conn is None:
                    raise ConnectionClosed("the connection was lost before cdc answered %d frames" %
                                           (self._sent - self._answered))
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("cdc answered %d of %d frames within %ss" % (
                    self._answered, self._sent, timeout))
            f = self._recv(conn, left)
            if f is None:
                if conn.closed:
                    self._drop_connection()
                continue
            batch = self._handle(f)
            if batch:
                self._pending.append(batch)

    def _recv(self, conn, timeout):
        """The next frame (None: none within timeout, or the connection closed); a malformed one
        drops the connection and raises."""
        try:
            return conn.recv(timeout)
        except ProtocolError:
            self._drop_connection()
            raise

    @property
    def unanswered(self) -> int:
        """Ack, Nack and Progress frames sent on this connection that cdc has not answered yet."""
        return self._sent - self._answered

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
        history = {d.offset: DeadLetter.from_pb(d) for d in m.dead_letters}
        events = [Event.from_pb(e, self.connections, history.get(e.offset)) for e in m.events]
        with self._lock:
            for e in events:
                if e.offset is not None:
                    self._delivered_max = max(self._delivered_max, e.offset)
                    self._held_back.discard(e.offset)
        return events

    def _on_acked(self, m):
        self.server_acked_offset = m.acked_offset
        refused = [Refused.from_pb(r) for r in m.refused]
        with self._lock:
            self._answered += m.answered
            for r in refused:
                self._held_back.discard(r.offset)  # a refused Nack gave nothing back
            self._refusals.extend(refused)
            self._release_held_back(m.acked_offset)
        if refused:
            self.on_refused(refused)

    def _on_heartbeat(self, m):
        self.server_acked_offset = m.acked_offset
        self.active = m.active
        with self._lock:
            self._release_held_back(m.acked_offset)

    def _release_held_back(self, acked_offset):
        """Events given back that cdc counts as done (acknowledged, or moved to the dead letters)
        will not come back: the acks held below them go out now. Holds _lock."""
        if not self._held_back or min(self._held_back) > acked_offset:
            return
        self._held_back = {o for o in self._held_back if o > acked_offset}
        top = self._ack_wanted
        if self._held_back:
            top = min(top, min(self._held_back) - 1)
        if top > self._ack_sent and top > acked_offset and self._conn is not None:
            self._ack_sent = top
            self._send_offsets("ack", [top])

    def _on_dropped(self, m):
        self.on_dropped(m.from_offset, m.to_offset)

    def _on_error(self, m):
        self._drop_connection()
        if self.reconnect and m.code in RETRYABLE_CODES:
            log.info("cdc_client: %s: %s; connecting again", pb.Error.Code.Name(m.code), m.message)
            return None
        raise server_error(m)

    def _log_dropped(self, first, last):
        log.warning("cdc_client: subscription %s: events %d..%d were dropped by retention before "
                    "this consumer received them", self.subscription, first, last)

    def _log_refused(self, refused):
        log.warning("cdc_client: subscription %s: cdc refused %s", self.subscription,
                    ", ".join("%d (%s)" % (r.offset, r.reason) for r in refused[:20])
                    + (" and %d more" % (len(refused) - 20) if len(refused) > 20 else ""))

    def _offsets(self, items) -> List[int]:
        """The offsets of Events (those of this connection), ints, and lists of either."""
        out = []
        for it in items:
            if isinstance(it, Event):
                if it.connection_id == self.connections and it.offset is not None:
                    out.append(it.offset)
            elif isinstance(it, int):
                out.append(it)
            else:
                out.extend(self._offsets(it))
        return out

    def _send_offsets(self, kind, offsets, **fields):
        """Ack, Nack or Progress frames of offsets, 65,536 a frame. Holds _lock."""
        message = {"ack": pb.Ack, "nack": pb.Nack, "progress": pb.Progress}[kind]
        for i in range(0, len(offsets), OFFSETS_MAX):
            frame = pb.ClientFrame(**{kind: message(offsets=offsets[i:i + OFFSETS_MAX], **fields)})
            try:
                self._conn.send(frame)
            except OSError as e:
                # The iterator notices the closed connection and connects again; an unsent ack
                # means a redelivery, never a loss.
                log.info("cdc_client: send failed (%s); the connection will be replaced", e)
                return
            self._sent += 1

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
        with self._lock:
            self._conn = conn
            self.connections += 1
            self._reset_connection_state()
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
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        self._pending.clear()  # read on the lost connection (by wait_answered): they come again

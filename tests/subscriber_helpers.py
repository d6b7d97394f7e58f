"""subscriber_helpers.py: test-only helpers on top of cdc_client (proto/clients/python), the
Python client library of cdc's subscriber socket: Subscriber is a cdc_client.Connection with what
tests need beyond a real client (n events at once, waiting for acks through Acked or heartbeats,
the Acked answers and refusals as frames, dead letters' history by offset, raw bytes, malformed
frames, a connection that never subscribes, dying without a word). Framing, Subscribe, Ack, Nack,
Progress, the generated messages and the errors are the library's.
"""
import collections
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto", "clients", "python"))
from cdc_client import (FRAME_MAX, FRAME_SERVER_MAX, Connection, ConnectionClosed, ProtocolError,  # noqa: E402,F401
                        ServerError, encode_frame, pb, subscribe_frame)
from cdc_client._proto import event_pb2, subscriber_pb2  # noqa: E402
from cdc_client.connection import _HEADER  # noqa: E402


def protos():
    """(event_pb2, subscriber_pb2), compiled from proto/ by cdc_client once per process."""
    return event_pb2, subscriber_pb2


class Subscriber(Connection):
    """One connection to the subscriber socket, subscribed on construction.

    start: 'acked', 'earliest', 'latest', 'offset' (with start_offset), or an int offset.
    sock: a socket already connected to path (by another process: its uid is the peer's), else
    one is made.
    With expect_subscribed (the default) the answer is read at once: .subscribed is the Subscribed
    message, and an Error answer raises ServerError. Without it .subscribed is None and the answer
    is the first recv(). recv() returns None once the server has closed the connection, and
    .closed tells so. Not thread-safe.
    """

    def __init__(self, path, subscription, consumer=None, start="acked", start_offset=0, max_unacked=0,
                 dead_letters=False, heartbeat_ms=0, timeout=10.0, expect_subscribed=True, sock=None):
        if sock is None:
            Connection.__init__(self, path, send_timeout=timeout)  # bounds sends; receiving polls
        else:
            self.path, self.closed, self._buf, self.sock = path, False, bytearray(), sock
            sock.settimeout(timeout)
        self._init_helpers(dead_letters)
        try:
            opts = dict(consumer=consumer, start=start, start_offset=start_offset, max_unacked=max_unacked,
                        dead_letters=dead_letters, heartbeat_ms=heartbeat_ms)
            if expect_subscribed:
                self.subscribed = Connection.subscribe(self, subscription, timeout=timeout, **opts)
            else:
                self.send(subscribe_frame(subscription, **opts))
        except BaseException:
            self.sock.close()
            raise

    @classmethod
    def unsubscribed(cls, path, timeout=10.0):
        """A connection that sends nothing, not even Subscribe (recv, send_raw and close work)."""
        s = cls.__new__(cls)
        Connection.__init__(s, path, send_timeout=timeout)
        s._init_helpers(False)
        return s

    def _init_helpers(self, dead_letters):
        self.dead_letters = dead_letters
        self.subscribed = None
        self.last_kind = None        # kind of the last frame recv() returned
        self.dropped = []            # (from_offset, to_offset) of each Dropped frame seen by the helpers
        self.last_heartbeat = None
        self.dead_letter = {}        # dead letters' offset -> DeadLetter (their history), from Deliveries
        self.refused = []            # (offset, reason name) of each Refused in the Acked frames seen
        self._held = collections.deque()  # frames read past by wait_acked, returned by recv first

    # --- framing ---

    encode = staticmethod(encode_frame)

    @staticmethod
    def raw(path, data, timeout=10.0):
        """Connects, sends data as it is and reads until the server closes the connection.
        Returns the last ServerFrame received (an Error, for bad input), or None."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(path)
            s.sendall(data)
            got = bytearray()
            while True:
                try:
                    chunk = s.recv(1 << 16)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                got += chunk
        finally:
            s.close()
        last = None
        while len(got) >= 4:
            (n,) = _HEADER.unpack_from(got)
            if len(got) < 4 + n:
                raise ProtocolError("the connection closed mid-frame")
            last = pb.ServerFrame.FromString(bytes(got[4:4 + n]))
            del got[:4 + n]
        return last

    def send_raw(self, data):
        """Sends bytes as they are, no header added: for malformed-frame tests."""
        self.sock.sendall(data)

    def recv(self, timeout=5.0):
        """The next ServerFrame; None if none is complete within timeout seconds (None: wait for
        ever) or the server closed the connection (then .closed is true)."""
        if self._held:
            return self._held.popleft()
        f = Connection.recv(self, timeout)
        if f is not None:
            self.last_kind = f.WhichOneof("kind")
        return f

    # --- helpers on top of recv ---

    def _next_delivery(self, deadline):
        """The next Delivery's events before deadline (None at the deadline or once closed), noting
        Dropped and Heartbeat frames on the way."""
        while True:
            left = max(0.0, deadline - time.monotonic())
            f = self.recv(left)
            if f is None:
                return None
            kind = f.WhichOneof("kind")
            if kind == "delivery":
                for d in f.delivery.dead_letters:
                    self.dead_letter[d.offset] = d
                return list(f.delivery.events)
            if kind == "error":
                raise ServerError(f.error)
            if kind == "dropped":
                self.dropped.append((f.dropped.from_offset, f.dropped.to_offset))
            elif kind == "heartbeat":
                self.last_heartbeat = f.heartbeat
            elif kind == "acked":
                self._note_refused(f.acked)
            elif kind == "subscribed":
                raise ProtocolError("a second Subscribed")

    def _note_refused(self, acked):
        self.refused.extend((r.offset, pb.Refused.Reason.Name(r.reason)) for r in acked.refused)

    def wait_acked(self, offset, timeout=10.0):
        """Waits for an Acked or a Heartbeat saying the server has every ack up to offset; the
        frames that arrive meanwhile stay queued for recv."""
        deadline = time.monotonic() + timeout
        seen = []
        try:
            while time.monotonic() < deadline:
                f = self.recv(max(0.0, deadline - time.monotonic()))
                if f is None:
                    break
                kind = f.WhichOneof("kind")
                if kind in ("heartbeat", "acked") and getattr(f, kind).acked_offset >= offset:
                    if kind == "acked":
                        self._note_refused(f.acked)
                    return
                seen.append(f)
        finally:
            self._held.extendleft(reversed(seen))
        raise AssertionError("the server did not report offset %d acknowledged within %ss" % (offset, timeout))

    def answers(self, frames=1, timeout=10.0):
        """The Acked frames answering the next `frames` Ack, Nack and Progress frames (they are
        answered in order, several at once at times); other frames stay queued for recv."""
        deadline = time.monotonic() + timeout
        seen, out, answered = [], [], 0
        try:
            while answered < frames:
                f = self.recv(max(0.0, deadline - time.monotonic()))
                if f is None:
                    raise AssertionError("%d of %d frames answered within %ss" % (answered, frames, timeout))
                if f.WhichOneof("kind") == "acked":
                    self._note_refused(f.acked)
                    out.append(f.acked)
                    answered += f.acked.answered
                else:
                    seen.append(f)
        finally:
            self._held.extendleft(reversed(seen))
        return out

    def delivery(self, timeout=5.0):
        """The events of the next Delivery, or None if none arrives within timeout."""
        return self._next_delivery(time.monotonic() + timeout)

    def deliveries(self, timeout=1.0):
        """Every Delivery (a list of events each) until timeout seconds pass without one."""
        out = []
        while True:
            d = self.delivery(timeout)
            if d is None:
                return out
            out.append(d)

    def events(self, n, timeout=5.0, fail=True, all_available=False):
        """At least n events within timeout seconds, whole Deliveries (so possibly more than n);
        with all_available, also every Delivery already at hand. Fewer than n: AssertionError
        with fail, else what arrived. Nothing is acknowledged."""
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < n:
            d = self._next_delivery(deadline)
            if d is None:
                break
            out.extend(d)
        if all_available:
            while True:
                d = self._next_delivery(time.monotonic())
                if d is None:
                    break
                out.extend(d)
        if fail and len(out) < n:
            raise AssertionError("%d of %d events within %ss%s; offsets %s" % (
                len(out), n, timeout, " (connection closed)" if self.closed else "",
                [e.offset for e in out]))
        return out

    def ack(self, offsets):
        """One Ack frame of these offsets (an int or an iterable), sent as given."""
        if isinstance(offsets, int):
            offsets = [offsets]
        Connection.ack(self, offsets)

    def nack(self, offsets, delay_ms=0, reason=""):
        """One Nack frame (an int or an iterable): delivered again after delay_ms; reason goes with
        a dead letter."""
        if isinstance(offsets, int):
            offsets = [offsets]
        Connection.nack(self, offsets, delay_ms=delay_ms, reason=reason)

    def progress(self, offsets):
        """One Progress frame (an int or an iterable): their ack timeouts start again."""
        if isinstance(offsets, int):
            offsets = [offsets]
        Connection.progress(self, offsets)

    def ack_events(self, events):
        """Acknowledges events as the consumer mode wants: the highest offset when acks are
        cumulative (failover, dead letters), else every offset."""
        offsets = [e.offset for e in events]
        if not offsets:
            return
        cumulative = self.dead_letters or self.subscribed is None or self.subscribed.mode == pb.FAILOVER
        self.ack([max(offsets)] if cumulative else offsets)

    def wait_closed(self, timeout=5.0):
        """Frames received until the server closes the connection; TimeoutError if it does not."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            f = self.recv(max(0.0, deadline - time.monotonic()))
            if f is None:
                if self.closed:
                    return frames
                raise TimeoutError("connection still open after %ss" % timeout)
            frames.append(f)

    def close(self):
        self.sock.close()  # .closed stays what the server did

    def kill(self):
        """Goes away without a word, as a crashed consumer does (a Unix socket has no reset to send:
        closing is all a dying process does)."""
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def event_dict(e):
    """An Event as a dict with proto field names (uint64 as strings, as protobuf's JSON mapping has it)."""
    from google.protobuf import json_format
    return json_format.MessageToDict(e, preserving_proto_field_name=True)

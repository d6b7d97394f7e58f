"""subscriber_client.py: a minimal client of cdc's subscriber socket built from the .proto files alone
(protoc --python_out at import, nothing from cdc's C code), for the integration tests and as an example
for clients in other languages. Run it to print a subscription's events:
    python3 tests/subscriber_client.py /run/cdc/events.sock SUBSCRIPTION [--from earliest] [--no-ack]
"""
import atexit
import collections
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import types

PROTO_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
FRAME_MAX = 16 * 1024 * 1024  # what a client may send
FRAME_SERVER_MAX = 1024 * 1024 * 1024  # a Delivery of one event larger than FRAME_MAX
_HEADER = struct.Struct(">I")

_modules = None


def protos():
    """(event_pb2, subscriber_pb2), compiled from proto/ once per process."""
    global _modules
    if _modules is None:
        out = tempfile.mkdtemp(prefix="cdc-proto-py-")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run(
            ["protoc", "-I" + os.path.normpath(PROTO_DIR), "--python_out=" + out,
             "cdc/v1/event.proto", "cdc/v1/subscriber.proto"],
            check=True)
        # cdc/ and cdc/v1/ stay namespace packages (no __init__.py) so that they merge with, rather
        # than lose to, any other directory called cdc on sys.path, such as the repository's C sources.
        sys.path.insert(0, out)
        from cdc.v1 import event_pb2, subscriber_pb2
        _modules = (event_pb2, subscriber_pb2)
    return _modules


def _namespace():
    """Both generated modules' messages and enum values in one place: pb.Event, pb.ServerFrame,
    pb.FAILOVER, pb.OP_INSERT, pb.Error.BAD_FRAME..."""
    ns = types.ModuleType("pb")
    for m in protos():
        for k in dir(m):
            if not k.startswith("_") and k != "DESCRIPTOR":
                setattr(ns, k, getattr(m, k))
    return ns


pb = _namespace()


class ProtocolError(Exception):
    """The server broke the protocol (bad framing, unexpected frame)."""


class ConnectionClosed(EOFError):
    """The server closed the connection where an answer was due."""


class ServerError(Exception):
    """An Error frame: .code (the enum's name), .message; the server closes the connection after it."""

    def __init__(self, error):
        self.error = error
        self.code = pb.Error.Code.Name(error.code)
        self.message = error.message
        super().__init__("%s: %s" % (self.code, self.message))


def encode_frame(msg):
    """A message as one frame: 4-byte big-endian length, then its bytes."""
    data = msg.SerializeToString()
    return _HEADER.pack(len(data)) + data


_STARTS = {"acked": pb.START_ACKED, "earliest": pb.START_EARLIEST, "latest": pb.START_LATEST,
           "offset": pb.START_OFFSET}


class Subscriber:
    """One connection to the subscriber socket, subscribed on construction.

    start: 'acked', 'earliest', 'latest', 'offset' (with start_offset), or an int offset.
    With expect_subscribed (the default) the answer is read at once: .subscribed is the Subscribed
    message, and an Error answer raises ServerError. Without it .subscribed is None and the answer
    is the first recv(). recv() returns None once the server has closed the connection, and
    .closed tells so. Not thread-safe.
    """

    def __init__(self, path, subscription, consumer=None, start="acked", start_offset=0, max_unacked=0,
                 dead_letters=False, heartbeat_ms=0, timeout=10.0, expect_subscribed=True):
        self.path = path
        self.dead_letters = dead_letters
        self.subscribed = None
        self.closed = False
        self.last_kind = None        # kind of the last frame recv() returned
        self.dropped = []            # (from_offset, to_offset) of each Dropped frame seen by the helpers
        self.last_heartbeat = None
        self.dead_letter = {}        # dead letters' offset -> DeadLetter (their history), from Deliveries
        self.refused = []            # (offset, reason name) of each Refused in the Acked frames seen
        self._buf = bytearray()
        self._held = collections.deque()  # frames read past by wait_acked, returned by recv first
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)  # bounds sends; receiving uses select with its own timeout
        try:
            self.sock.connect(path)
            if isinstance(start, int):
                start_offset, start = start, "offset"
            sub = pb.Subscribe(subscription=subscription, consumer=consumer or "py-%d" % os.getpid(),
                               start=_STARTS[start], start_offset=start_offset, max_unacked=max_unacked,
                               dead_letters=dead_letters, heartbeat_ms=heartbeat_ms)
            self.send(pb.ClientFrame(subscribe=sub))
            if expect_subscribed:
                f = self.recv(timeout)
                if f is None:
                    if self.closed:
                        raise ConnectionClosed("the server closed the connection instead of answering Subscribe")
                    raise TimeoutError("no answer to Subscribe within %ss" % timeout)
                if f.WhichOneof("kind") == "error":
                    raise ServerError(f.error)
                if f.WhichOneof("kind") != "subscribed":
                    raise ProtocolError("expected Subscribed, got %s" % f.WhichOneof("kind"))
                self.subscribed = f.subscribed
        except BaseException:
            self.sock.close()
            raise

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

    def send(self, client_frame):
        self.sock.sendall(encode_frame(client_frame))

    def send_raw(self, data):
        """Sends bytes as they are, no header added: for malformed-frame tests."""
        self.sock.sendall(data)

    def recv(self, timeout=5.0):
        """The next ServerFrame; None if none is complete within timeout seconds (None: wait for
        ever) or the server closed the connection (then .closed is true)."""
        if self._held:
            return self._held.popleft()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if len(self._buf) >= 4:
                (n,) = _HEADER.unpack_from(self._buf)
                if n > FRAME_SERVER_MAX:
                    raise ProtocolError("frame of %d bytes is over the 1024 MiB limit" % n)
                if len(self._buf) >= 4 + n:
                    data = bytes(self._buf[4:4 + n])
                    del self._buf[:4 + n]
                    f = pb.ServerFrame()
                    try:
                        f.ParseFromString(data)
                    except Exception as e:  # DecodeError; its module moved between versions
                        raise ProtocolError("malformed ServerFrame: %s" % e) from e
                    self.last_kind = f.WhichOneof("kind")
                    return f
            if self.closed:
                if self._buf:
                    raise ProtocolError("the connection closed mid-frame")
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # poll, not select: a test may hold more than FD_SETSIZE descriptors
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            if not poller.poll(None if left is None else left * 1000):
                return None
            try:
                chunk = self.sock.recv(1 << 16)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except (socket.timeout, BlockingIOError, InterruptedError):
                continue
            if not chunk:
                self.closed = True
            self._buf += chunk

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
        self.send(pb.ClientFrame(ack=pb.Ack(offsets=list(offsets))))

    def nack(self, offsets, delay_ms=0, reason=""):
        """Gives these offsets back: delivered again after delay_ms; reason goes with a dead letter."""
        if isinstance(offsets, int):
            offsets = [offsets]
        self.send(pb.ClientFrame(nack=pb.Nack(offsets=list(offsets), delay_ms=delay_ms, reason=reason)))

    def progress(self, offsets):
        """Still working on these offsets: their ack timeouts start again."""
        if isinstance(offsets, int):
            offsets = [offsets]
        self.send(pb.ClientFrame(progress=pb.Progress(offsets=list(offsets))))

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
        self.sock.close()

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


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(description="Print a cdc socket subscription's events, one JSON object per line.")
    p.add_argument("socket")
    p.add_argument("subscription")
    p.add_argument("--from", dest="start", default="acked",
                   help="acked, earliest, latest or an offset")
    p.add_argument("--consumer")
    p.add_argument("--count", type=int, default=0, help="exit after N events")
    p.add_argument("--timeout", type=float, default=None, help="exit after SECONDS without an event")
    p.add_argument("--no-ack", action="store_true")
    p.add_argument("--dead", action="store_true", help="read the dead letters")
    a = p.parse_args(argv)
    start = int(a.start) if a.start.isdigit() else a.start
    try:
        s = Subscriber(a.socket, a.subscription, consumer=a.consumer, start=start, dead_letters=a.dead)
    except (OSError, EOFError, ServerError, ProtocolError) as e:
        print("subscriber_client: %s" % e, file=sys.stderr)
        return 1
    printed = 0
    with s:
        while True:
            try:
                d = s.delivery(a.timeout if a.timeout is not None else 1e7)
            except (ServerError, ProtocolError) as e:
                print("subscriber_client: %s" % e, file=sys.stderr)
                return 1
            if d is None and s.closed:
                print("subscriber_client: the server closed the connection", file=sys.stderr)
                return 1
            for f, t in s.dropped:
                print("subscriber_client: events %d..%d were dropped by retention" % (f, t), file=sys.stderr)
            s.dropped.clear()
            if d is None:
                return 0
            if a.count:
                d = d[:a.count - printed]
            for e in d:
                print(json.dumps(event_dict(e)))
            sys.stdout.flush()
            if not a.no_ack:
                s.ack_events(d)
            printed += len(d)
            if a.count and printed >= a.count:
                return 0


if __name__ == "__main__":
    sys.exit(main())

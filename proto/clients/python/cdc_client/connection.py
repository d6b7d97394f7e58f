"""connection.py: one connection to cdc's subscriber socket: framing (4-byte big-endian length, one
protobuf message), Subscribe and its answer, Ack, Nack, Progress. No policy: Consumer
(consumer.py) adds reconnection, heartbeats and typed events on top."""
import os
import select
import socket
import struct
import time
from typing import Iterable, Optional

from ._proto import pb

FRAME_MAX = 16 * 1024 * 1024              # what a client may send
FRAME_SERVER_MAX = 1024 * 1024 * 1024     # a Delivery of one event larger than FRAME_MAX
_HEADER = struct.Struct(">I")

STARTS = {"acked": pb.START_ACKED, "earliest": pb.START_EARLIEST, "latest": pb.START_LATEST,
          "offset": pb.START_OFFSET}
MODES = {pb.FAILOVER: "failover", pb.SHARED: "shared", pb.KEY_SHARED: "key_shared"}


class ProtocolError(Exception):
    """The server broke the protocol (bad framing, an unexpected frame)."""


class ConnectionClosed(EOFError):
    """The server closed the connection (or it broke) where an answer was due."""


class ServerError(Exception):
    """An Error frame. code: the enum's name ("UNKNOWN_SUBSCRIPTION"...), code_value: its number,
    message: the server's text. The server closes the connection after it."""

    def __init__(self, error):
        self.error = error
        self.code_value = error.code
        try:
            self.code = pb.Error.Code.Name(error.code)
        except ValueError:  # a code newer than this client's schema
            self.code = str(error.code)
        self.message = error.message
        super().__init__("%s: %s" % (self.code, self.message))


class PermissionDenied(ServerError):
    """PERMISSION_DENIED: the subscription's allow list (allow: uids, gids in cdc's configuration) holds
    neither this process's uid nor its groups; the message names the uid and the subscription.
    Connecting again cannot help: run the consumer as a user the list names, or have it added."""


def server_error(error):
    """The exception an Error frame raises: PermissionDenied, or ServerError for the other codes."""
    return PermissionDenied(error) if error.code == pb.Error.PERMISSION_DENIED else ServerError(error)


def encode_frame(msg) -> bytes:
    """A message as one frame: 4-byte big-endian length, then its bytes."""
    data = msg.SerializeToString()
    if len(data) > FRAME_MAX:
        raise ValueError("frame of %d bytes is over the 16 MiB limit" % len(data))
    return _HEADER.pack(len(data)) + data


def subscribe_frame(subscription, consumer=None, start="acked", start_offset=0, max_unacked=0,
                    dead_letters=False, heartbeat_ms=0):
    """The ClientFrame of a Subscribe. start: "acked", "earliest", "latest", "offset" (with
    start_offset) or an int offset."""
    if isinstance(start, int):
        start_offset, start = start, "offset"
    if start not in STARTS:
        raise ValueError("start must be one of %s or an offset, not %r" % (", ".join(STARTS), start))
    return pb.ClientFrame(subscribe=pb.Subscribe(
        subscription=subscription, consumer=consumer or "py-%d" % os.getpid(), start=STARTS[start],
        start_offset=start_offset, max_unacked=max_unacked, dead_letters=dead_letters,
        heartbeat_ms=heartbeat_ms))


class Connection:
    """One connection to the subscriber socket. recv() returns ServerFrames (None on timeout or once
    the server has closed the connection: then .closed is true). Not thread-safe.

    send_timeout bounds each send (a server that stops reading); receiving has its own timeouts."""

    def __init__(self, path: str, send_timeout: float = 10.0):
        self.path = path
        self.closed = False
        self._buf = bytearray()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(send_timeout)
        try:
            self.sock.connect(path)
        except BaseException:
            self.sock.close()
            raise

    def send(self, client_frame) -> None:
        self.sock.sendall(encode_frame(client_frame))

    def subscribe(self, subscription, timeout: float = 10.0, **options):
        """Sends Subscribe (options as subscribe_frame's) and returns the Subscribed answer; an Error
        answer raises ServerError, no answer within timeout TimeoutError, a closed connection
        ConnectionClosed."""
        self.send(subscribe_frame(subscription, **options))
        f = self.recv(timeout)
        if f is None:
            if self.closed:
                raise ConnectionClosed("the server closed the connection instead of answering Subscribe")
            raise TimeoutError("no answer to Subscribe within %ss" % timeout)
        kind = f.WhichOneof("kind")
        if kind == "error":
            raise server_error(f.error)
        if kind != "subscribed":
            raise ProtocolError("expected Subscribed, got %s" % kind)
        return f.subscribed

    def ack(self, offsets: Iterable[int]) -> None:
        """One Ack frame of these offsets, sent as given."""
        self.send(pb.ClientFrame(ack=pb.Ack(offsets=list(offsets))))

    def nack(self, offsets: Iterable[int], delay_ms: int = 0, reason: str = "") -> None:
        """One Nack frame: these offsets are given back, delivered again after delay_ms (at most
        an hour); reason (at most 1 KiB of UTF-8) goes with a dead letter."""
        self.send(pb.ClientFrame(nack=pb.Nack(offsets=list(offsets), delay_ms=delay_ms, reason=reason)))

    def progress(self, offsets: Iterable[int]) -> None:
        """One Progress frame: still working on these offsets, their ack timeouts start again."""
        self.send(pb.ClientFrame(progress=pb.Progress(offsets=list(offsets))))

    def recv(self, timeout: Optional[float] = 5.0):
        """The next ServerFrame; None if none is complete within timeout seconds (None: wait for
        ever) or the server closed the connection (then .closed is true)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            f = self._parse()
            if f is not None:
                return f
            if self.closed:
                if self._buf:
                    raise ProtocolError("the connection closed mid-frame")
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # poll, not select: a process may hold more than FD_SETSIZE (1024) descriptors
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

    def _parse(self):
        if len(self._buf) < 4:
            return None
        (n,) = _HEADER.unpack_from(self._buf)
        if n > FRAME_SERVER_MAX:
            raise ProtocolError("frame of %d bytes is over the 1024 MiB limit" % n)
        if len(self._buf) < 4 + n:
            return None
        data = bytes(self._buf[4:4 + n])
        del self._buf[:4 + n]
        f = pb.ServerFrame()
        try:
            f.ParseFromString(data)
        except Exception as e:  # DecodeError; its module moved between protobuf versions
            raise ProtocolError("malformed ServerFrame: %s" % e) from e
        return f

    def close(self) -> None:
        self.closed = True
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

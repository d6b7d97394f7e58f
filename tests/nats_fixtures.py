"""nats_fixtures.py: pytest fixtures and helpers for the NATS sink's tests: Debian's nats-server with
JetStream, started on a free loopback port with a store of its own (like tests/pg.py's servers),
and a reader that is not cdc's code: the official nats client for Node (tests/nats, pinned in
package-lock.json and installed by npm ci) reads the stream with an ordered consumer.

Fixtures (conftest.py imports them):
  nats_server  a NatsServer for one test: .url, .stop() (SIGTERM), .kill() (SIGKILL), .start()
               (again, on the same port and store), .admin(...) (stream add/update/info/delete
               through the nats client). Stopped at the end of the test.

read_stream(server, stream) returns the stream's messages in order as NatsMessage objects (seq,
subject, headers, data bytes). Waiting is polling against a deadline.
"""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from npm import npm_ci

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONSUMER_DIR = os.path.join(ROOT, "tests", "nats")
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"

__all__ = ["nats_server"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """One nats-server -js process on 127.0.0.1; its store survives stop() and start()."""

    def __init__(self):
        if not os.access(NATS_SERVER, os.X_OK):
            raise RuntimeError("nats-server not found: install Debian's nats-server (deploy/deps.sh test)")
        self.dir = tempfile.mkdtemp(prefix="cdc-nats-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc = None
        self.log = os.path.join(self.dir, "server.log")
        self.start()

    def start(self, timeout=20.0):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd",
                 os.path.join(self.dir, "store"), "-n", "cdc-test"],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(4096).startswith(b"INFO "):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start:\n{self.server_log()}")
            time.sleep(0.05)

    def server_log(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self, timeout=20.0):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def admin(self, *args):
        """tests/nats/admin.mjs: stream add CONFIG_JSON | update CONFIG_JSON | info NAME | delete NAME;
        returns its JSON answer."""
        npm_ci(CONSUMER_DIR)
        p = subprocess.run(["node", os.path.join(CONSUMER_DIR, "admin.mjs"), self.url, *args],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError(f"admin.mjs {args} failed:\n{p.stdout}\n{p.stderr}")
        return json.loads(p.stdout) if p.stdout.strip() else None


class NatsMessage:
    def __init__(self, d):
        self.seq = d["seq"]
        self.subject = d["subject"]
        self.headers = d["headers"]
        self.data = base64.b64decode(d["data"])

    def header(self, name):
        return self.headers.get(name)


class NoStream(AssertionError):
    """The stream does not exist (yet: the NATS sink creates it before its first publish)."""


def read_stream(server, stream="CDC", from_seq=1):
    """Every message of the stream from sequence from_seq on, in order, read by the nats client's
    ordered consumer."""
    npm_ci(CONSUMER_DIR)
    p = subprocess.run(["node", os.path.join(CONSUMER_DIR, "consumer.mjs"), server.url, stream, str(from_seq)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode == 3:
        raise NoStream(f"no stream {stream} on {server.url}")
    if p.returncode != 0:
        raise AssertionError(f"consumer.mjs failed:\n{p.stdout}\n{p.stderr}")
    return [NatsMessage(json.loads(line)) for line in p.stdout.splitlines() if line.strip()]


@pytest.fixture
def nats_server():
    s = NatsServer()
    yield s
    s.close()

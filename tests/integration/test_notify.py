"""test_notify.py: what cdc tells systemd (sd_notify) when started by a Type=notify unit: the test
is the service manager, a Unix datagram socket named by $NOTIFY_SOCKET. READY=1 once streaming
(or retrying, when PostgreSQL cannot be reached), RELOADING=1 then READY=1 around a SIGHUP (applied
or refused), STOPPING=1 at SIGTERM, and WATCHDOG=1 pings when $WATCHDOG_USEC asks for them."""

import os
import signal
import socket
import tempfile
import time

import pytest

from test_status import get


class Manager:
    """The service manager's end: every datagram cdc sends, as dicts of its KEY=VALUE lines."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cdc-notify-")
        self.path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.seen = []

    def env(self, **extra):
        return dict(os.environ, NOTIFY_SOCKET=self.path, **extra)

    def next(self, timeout=30.0):
        """The next datagram, parsed; fails after timeout."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise AssertionError(f"no notification within {timeout} s; seen so far: {self.seen}")
        m = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        self.seen.append(m)
        return m

    def until(self, key, timeout=30.0):
        """The datagrams up to and including the first one that carries key."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            m = self.next(max(0.1, deadline - time.monotonic()))
            out.append(m)
            if key in m:
                return out

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


@pytest.fixture
def manager():
    m = Manager()
    yield m
    m.close()


def test_ready_reloading_and_stopping(pg, schema, cdc, manager):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p = c.run(env=manager.env())
    first = manager.next()
    assert first == {"STATUS": f"connecting to PostgreSQL to stream slot {c.slot}"}
    (ready,) = manager.until("READY")
    # READY=1 comes once streaming has started: the slot is active and /readyz says so already.
    assert ready["READY"] == "1" and ready["STATUS"].startswith(f"streaming from slot {c.slot} (PostgreSQL ")
    assert c.slot_row()[0] is True
    assert get(c, "/readyz")[0] == 200

    # A SIGHUP: RELOADING=1 (with the monotonic time Type=notify-reload wants), then READY=1.
    p.signal(signal.SIGHUP)
    reloading = manager.next()
    assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
    assert manager.next() == {"READY": "1", "STATUS": "reloaded: 1 subscriptions"}

    # A reload that is refused ends the reload too: the running configuration stays.
    good = open(c.path).read()
    with open(c.path, "w") as f:
        f.write(good + "no_such_key: 1\n")
    p.signal(signal.SIGHUP)
    assert manager.next()["RELOADING"] == "1"
    assert manager.next() == {"READY": "1",
                              "STATUS": "reload refused; the running configuration is kept (see the log)"}
    assert "reload refused" in p.stderr()

    # The stream still flows, and SIGTERM says STOPPING=1 before the clean exit.
    pg.sql(f"insert into {schema}.t values (1)")
    assert [e["new"] for e in p.wait_events(1)] == [{"id": 1}]
    p.signal(signal.SIGTERM)
    assert manager.next() == {"STOPPING": "1",
                              "STATUS": "stopping: delivering what is in flight and confirming it to the slot"}
    assert p.wait_exit() == 0
    assert [m for m in manager.seen if "READY" in m][0] is ready  # one READY=1 but for the reloads'
    assert not [m for m in manager.seen if "WATCHDOG" in m]  # no WatchdogSec=, no pings


def test_ready_while_retrying_when_postgresql_is_down(cdc, manager):
    """A server that cannot be reached is not a failed start: cdc retries with its own backoff (and
    serves the spool meanwhile), so it says READY=1 with the reason in STATUS, and systemd does not
    hold the boot for it or kill it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    c = cdc(source={"dsn": f"host=127.0.0.1 port={port} dbname=postgres user=nobody connect_timeout=2"})
    p = c.run(env=manager.env())
    msgs = manager.until("READY")
    assert msgs[-1]["READY"] == "1"
    assert msgs[-1]["STATUS"].startswith("not streaming; retrying in ")
    assert "cannot connect to PostgreSQL" in msgs[-1]["STATUS"]
    # Each further attempt updates the status, with no second READY=1.
    again = manager.next()
    assert "READY" not in again and again["STATUS"].startswith("not streaming; retrying in ")
    p.signal(signal.SIGTERM)
    assert manager.until("STOPPING")[-1]["STOPPING"] == "1"
    assert p.wait_exit() == 0


def test_watchdog_pings(pg, schema, cdc, manager):
    """With WatchdogSec= (here $WATCHDOG_USEC of 400 ms) the event loop pings at half the interval;
    without it, none (test_ready_reloading_and_stopping)."""
    c = cdc()
    p = c.run(env=manager.env(WATCHDOG_USEC="400000"))
    pings = 0
    while pings < 3:
        if manager.next().get("WATCHDOG") == "1":
            pings += 1
    p.signal(signal.SIGTERM)
    assert p.wait_exit() == 0

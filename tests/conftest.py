"""conftest.py: pytest fixtures that run cdc against a real, throwaway PostgreSQL.

Fixtures:
  pg      session-scoped TempPostgres (logical_decoding_work_mem=64kB, so large transactions stream)
  schema  a fresh schema for this test (dropped afterwards); put the test's tables in it
  cdc     a factory: cdc(subscriptions=[...], publish=[...], **top_level_keys) writes a config file
          (state_dir in tmp_path, source.dsn = pg.dsn, create: true, a slot and publication named
          for this test) and returns a Cdc; Cdc.run(endpos=None) starts `build/cdc run -c FILE`
          and returns a CdcProcess (stdout and stderr captured to files). The slot and publication
          are dropped and every process still running is killed when the test ends.

CdcProcess.events() checks the promise of schema events on every stdout stream (tests/
schema_check.py: each row follows a schema event of its table that it names and whose columns it
has) and returns the other events without schema_id; raw_events() has everything as written.

Waiting is always polling against a deadline (wait_for, CdcProcess.wait_events), never a bare
sleep. The binary is $CDC_BIN, else build/cdc at the repository root.
"""

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pg import TempPostgres  # noqa: E402
from kafka_fixtures import kafka, kafka_mock, kafka_reader, kafka_sasl, proto  # noqa: E402,F401
from nats_fixtures import nats_server  # noqa: E402,F401
from schema_check import SchemaCheck, wants_schema  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CDC_BIN = os.environ.get("CDC_BIN", os.path.join(ROOT, "build", "cdc"))

LSN_RE = re.compile(r"^[0-9A-F]{1,8}/[0-9A-F]{1,8}$")


def wait_for(cond, timeout=30.0, interval=0.05, what="condition"):
    """Polls cond() until it returns something truthy (returned), or fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# --- YAML ---------------------------------------------------------------------------------------
# A tiny emitter: block mappings and sequences of mappings, scalars and scalar lists in JSON form
# (a double-quoted JSON string is a valid YAML double-quoted scalar). Keeps the files readable.

def _scalar(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)}: {_scalar(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as YAML")


def _key(k):
    return k if re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", k) else json.dumps(k)


def _is_block(v):
    return (isinstance(v, dict) and v) or (
        isinstance(v, (list, tuple)) and v and all(isinstance(x, dict) for x in v))


def to_yaml(obj, indent=0):
    """YAML text of a dict of dicts / lists / scalars."""
    pad = " " * indent
    out = []
    for k, v in obj.items():
        if isinstance(v, dict) and v:
            out.append(f"{pad}{_key(k)}:")
            out.append(to_yaml(v, indent + 2))
        elif _is_block(v):
            out.append(f"{pad}{_key(k)}:")
            for item in v:
                body = to_yaml(item, indent + 4).splitlines()
                out.append(f"{pad}  - " + body[0].lstrip())
                out.extend(body[1:])
        else:
            out.append(f"{pad}{_key(k)}: {_scalar(v)}")
    return "\n".join(out) + ("\n" if indent == 0 else "")


# --- cdc processes ------------------------------------------------------------------------------

class CdcProcess:
    """One running `cdc run`. stdout/stderr go to files, so the process never blocks on a pipe."""

    def __init__(self, args, stdout_path, stderr_path, env=None, schema_subs=()):
        self.args = args
        self.stdout_path = stdout_path
        self.stderr_path = stderr_path
        self._out = open(stdout_path, "wb")
        self._err = open(stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdout=self._out, stderr=self._err,
                                     stdin=subprocess.DEVNULL, env=env)
        self.pid = self.proc.pid
        self._pos = 0
        self._lines = 0
        self._events = []
        self._raw = []
        self.schema_check = SchemaCheck(schema_subs)

    @property
    def returncode(self):
        return self.proc.poll()

    def running(self):
        return self.proc.poll() is None

    def stderr(self):
        with open(self.stderr_path, errors="replace") as f:
            return f.read()

    def stdout_text(self):
        with open(self.stdout_path, errors="replace") as f:
            return f.read()

    def describe(self, tail=40):
        """Exit status and the tail of stderr, for assertion messages."""
        rc = self.proc.poll()
        state = "running" if rc is None else f"exited {rc}"
        lines = self.stderr().splitlines()[-tail:]
        return f"cdc ({' '.join(self.args)}) {state}; stderr tail:\n" + "\n".join(lines)

    def events(self):
        """Every complete JSON line written to stdout so far (a partial last line is left out),
        but schema events, and without the schema_id of rows, once SchemaCheck passed them.
        Parses incrementally: polling a long stream stays cheap. Returns a new list each time."""
        with open(self.stdout_path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        end = data.rfind(b"\n")
        if end >= 0:
            for line in data[:end].split(b"\n"):
                self._lines += 1
                if not line.strip():
                    continue
                try:
                    e = json.loads(line)
                except ValueError as err:
                    raise AssertionError(
                        f"stdout line {self._lines} is not JSON ({err}): {line[:300]!r}")
                self._raw.append(e)
                if not self.schema_check.feed(e):
                    self._events.append({k: v for k, v in e.items() if k != "schema_id"})
            self._pos += end + 1
        return list(self._events)

    def raw_events(self):
        """Every event as written, schema events and schema_id included."""
        self.events()
        return list(self._raw)

    def wait_events(self, n, timeout=30.0, pred=None):
        """Waits until at least n events (matching pred, if given) are on stdout; returns them all
        (or only the matching ones with pred). Fails early if cdc exits."""
        deadline = time.monotonic() + timeout
        while True:
            evs = self.events()
            sel = [e for e in evs if pred(e)] if pred else evs
            if len(sel) >= n:
                return sel
            if not self.running():
                evs = self.events()
                sel = [e for e in evs if pred(e)] if pred else evs
                if len(sel) >= n:
                    return sel
                raise AssertionError(f"cdc exited with {len(sel)} of {n} events\n{self.describe()}")
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"timed out after {timeout}s with {len(sel)} of {n} events\n{self.describe()}")
            time.sleep(0.05)

    def wait_exit(self, timeout=30.0):
        """Waits for the process to exit; returns its exit code."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"cdc still running after {timeout}s\n{self.describe()}")

    def signal(self, sig):
        if self.running():
            self.proc.send_signal(sig)

    def terminate(self, timeout=30.0):
        """SIGTERM, then waits; returns the exit code."""
        self.signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def kill(self):
        """SIGKILL (kill -9), then waits; returns the exit code."""
        if self.running():
            self.proc.kill()
        return self.proc.wait(30)

    def close(self):
        if self.running():
            self.kill()
        self._out.close()
        self._err.close()


class Cdc:
    """A config file and its slot/publication; run() starts a daemon on it (again, after a stop)."""

    def __init__(self, factory, config, path):
        self.factory = factory
        self.config = config
        self.path = path
        self.slot = config["source"]["slot"]
        self.publication = config["source"]["publication"]
        self.state_dir = config["state_dir"]
        self.processes = []

    def run(self, *extra, endpos=None, env=None):
        """Starts `cdc run -c FILE [--endpos LSN] [extra...]`; returns the CdcProcess."""
        n = len(self.factory.all_processes)
        args = [CDC_BIN, "run", "-c", self.path]
        if endpos is not None:
            args += ["--endpos", endpos]
        args += list(extra)
        schema_subs = {s["name"] for s in self.config.get("subscriptions") or [] if wants_schema(s)}
        p = CdcProcess(args, os.path.join(self.factory.tmp_path, f"cdc{n}.stdout"),
                       os.path.join(self.factory.tmp_path, f"cdc{n}.stderr"), env=env,
                       schema_subs=schema_subs)
        self.processes.append(p)
        self.factory.all_processes.append(p)
        return p

    def slot_row(self):
        """(active, confirmed_flush_lsn text, plugin) of the slot, or None if it does not exist."""
        rows = self.factory.pg.sql(
            "select active, confirmed_flush_lsn::text, plugin from pg_replication_slots "
            "where slot_name = %s", (self.slot,))
        return rows[0] if rows else None

    def wait_streaming(self, proc, timeout=30.0):
        """Waits until this process logged that it streams and a walsender streams from the slot
        (cdc is past START_REPLICATION). The log line counts: after a kill -9 the dead process's
        walsender can keep the slot active for a moment."""
        def ready():
            if not proc.running():
                raise AssertionError(f"cdc exited before streaming\n{proc.describe()}")
            row = self.slot_row()
            err = proc.stderr()
            logged = " streaming slot=" in err or '"msg":"streaming"' in err  # text or JSON logs
            return logged and row is not None and row[0]
        wait_for(ready, timeout, what=f"slot {self.slot} to be active\n{proc.describe()}")

    def start(self, *extra, endpos=None, env=None):
        """run(), then wait_streaming(): changes committed after this returns are captured."""
        p = self.run(*extra, endpos=endpos, env=env)
        self.wait_streaming(p)
        return p


class CdcFactory:
    _ids = itertools.count(1)

    def __init__(self, pg, tmp_path, schema, test_name):
        self.pg = pg
        self.tmp_path = str(tmp_path)
        self.schema = schema
        self.test_name = test_name
        self.instances = []
        self.all_processes = []
        # Unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
        self.sockdir = tempfile.mkdtemp(prefix="cdc-sock-")

    def __call__(self, subscriptions=None, publish=None, source=None, **top):
        """Writes a config and returns a Cdc (not started). subscriptions default to one stdout
        subscription "all" on every table of the test's schema; publish defaults to
        ["SCHEMA.*"]; source updates the source section; other keywords are top-level keys."""
        n = next(self._ids)
        tag = re.sub(r"[^a-z0-9]", "_", self.test_name.lower())[:30]
        slot = f"cdc_t{n}_{tag}"
        pub = f"cdc_p{n}_{tag}"
        if subscriptions is None:
            subscriptions = [{"name": "all", "tables": [f"{self.schema}.*"], "sink": "stdout"}]
        cfg = {
            "source": {
                "dsn": self.pg.dsn,
                "slot": slot,
                "publication": pub,
                "create": True,
                "publish": publish if publish is not None else [f"{self.schema}.*"],
            },
            "state_dir": os.path.join(self.tmp_path, f"state{n}"),
            "status": {"socket": os.path.join(self.sockdir, f"status{n}.sock")},
            "subscribers": {"socket": os.path.join(self.sockdir, f"events{n}.sock")},
            "subscriptions": subscriptions,
        }
        if source:
            cfg["source"].update(source)
        cfg.update(top)
        path = os.path.join(self.tmp_path, f"cdc{n}.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(cfg))
        c = Cdc(self, cfg, path)
        self.instances.append(c)
        return c

    def start(self, subscriptions=None, publish=None, **kw):
        """Shorthand: a config, started, and streaming: returns (Cdc, CdcProcess)."""
        c = self(subscriptions=subscriptions, publish=publish, **kw)
        return c, c.start()

    def cleanup(self):
        for p in self.all_processes:
            p.close()
        for c in self.instances:
            drop_slot(self.pg, c.slot)
            self.pg.sql(f'drop publication if exists "{c.publication}"')
        shutil.rmtree(self.sockdir, ignore_errors=True)


def drop_slot(pg, slot, timeout=30.0):
    """Drops a slot once no walsender holds it (a killed client's walsender takes a moment)."""
    def gone():
        rows = pg.sql("select active_pid from pg_replication_slots where slot_name = %s", (slot,))
        if not rows:
            return True
        if rows[0][0] is not None:
            pg.sql("select pg_terminate_backend(%s)", (rows[0][0],))
            return False
        try:
            pg.sql("select pg_drop_replication_slot(%s)", (slot,))
        except Exception:
            return False
        return True
    wait_for(gone, timeout, interval=0.1, what=f"slot {slot} to be dropped")


# --- fixtures -----------------------------------------------------------------------------------

def pytest_configure(config):
    config.addinivalue_line(
        "markers", "matrix: runs on every PostgreSQL version of make check's PG_VERSIONS, not only on "
        "the newest (make check-matrix; select with -m matrix, the server with CDC_PG_VERSION)")


def pytest_collection_modifyitems(config, items):
    """CDC_SHARD=I/N (make check runs the integration suite in halves side by side): every N-th
    test from the I-th on, in collection order; the others are deselected."""
    shard = os.environ.get("CDC_SHARD")
    if not shard:
        return
    m = re.fullmatch(r"(\d+)/(\d+)", shard)
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise pytest.UsageError(f"CDC_SHARD={shard!r}: expected I/N with 1 <= I <= N, such as 1/2")
    i, n = int(m[1]) - 1, int(m[2])
    config.hook.pytest_deselected(items=[t for k, t in enumerate(items) if k % n != i])
    items[:] = items[i::n]


@pytest.fixture(scope="session")
def pg():
    with TempPostgres(logical_decoding_work_mem="64kB") as server:
        yield server


_schema_ids = itertools.count(1)


@pytest.fixture
def schema(pg, request):
    """A schema of this test's own (dropped with everything in it afterwards)."""
    name = f"t{next(_schema_ids)}_" + re.sub(r"[^a-z0-9]", "_", request.node.name.lower())[:40]
    pg.sql(f'create schema "{name}"')
    yield name
    pg.sql(f'drop schema if exists "{name}" cascade')


@contextlib.contextmanager
def cdc_factory(pg, tmp_path, request, schema="public", cls=CdcFactory):
    """A factory of cdc configurations on the server pg for one test (a fixture's body: `with
    cdc_factory(...) as f: yield f`); its slots, publications and processes go at the end."""
    if not (os.path.isfile(CDC_BIN) and os.access(CDC_BIN, os.X_OK)):
        pytest.fail(f"{CDC_BIN} not built (run make)")
    f = cls(pg, tmp_path, schema, request.node.name)
    try:
        yield f
    finally:
        f.cleanup()


@pytest.fixture
def cdc(pg, schema, tmp_path, request):
    with cdc_factory(pg, tmp_path, request, schema) as f:
        yield f

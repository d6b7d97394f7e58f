"""test_typescript_client.py: proto/clients/typescript (@cdc/client), built here (npm ci of the
locked protobufjs and TypeScript, then npm run build: the .proto files copied in, tsc), tested
against a real PostgreSQL and cdc:
tests/clients/typescript/*.test.mjs with node's test runner (they run and restart cdc from the
config written here), and the example worker run as a process processing N inserted rows, and
nacking the rows it cannot process up to a dead letter."""

import json
import os
import subprocess

import pytest

from conftest import CDC_BIN
from npm import npm_ci
from pg import client_bindir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TS_CLIENT = os.path.join(ROOT, "proto", "clients", "typescript")
TS_TESTS = os.path.join(ROOT, "tests", "clients", "typescript")


@pytest.fixture(scope="module")
def ts_client():
    """The TypeScript client, installed and built (dist/, proto/)."""
    npm_ci(TS_CLIENT)
    p = subprocess.run(["npm", "run", "--silent", "build"], cwd=TS_CLIENT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"npm run build failed:\n{p.stdout}\n{p.stderr}"
    return os.path.join(TS_CLIENT, "dist")


def socket_sub(schema, name, table, **kw):
    s = {"name": name, "tables": [f"{schema}.{table}"], "operations": ["insert", "update", "delete"],
         "sink": "socket"}
    s.update(kw)
    return s


def test_typescript_client(pg, schema, cdc, ts_client):
    # "shaped*" is a pattern: its table is created while cdc runs (its CREATE is an event the test
    # reads), and a table named one by one must exist when cdc starts.
    c = cdc(subscriptions=[socket_sub(schema, "typed", "typed", tag="t1"), socket_sub(schema, "jobs", "jobs"),
                           socket_sub(schema, "shared", "shared", consumers="shared"),
                           socket_sub(schema, "nacked", "nacked", max_deliveries=2),
                           socket_sub(schema, "long", "long", consumers="shared", ack_timeout="1s"),
                           socket_sub(schema, "refusals", "refusals"),
                           socket_sub(schema, "shaped", "shaped*", operations=["insert", "schema", "ddl"]),
                           socket_sub(schema, "locked", "jobs", allow={"uids": [os.geteuid() + 1]})],
           source={"ddl": True})
    env = dict(os.environ, CDC_BIN=CDC_BIN, CDC_CONFIG=c.path, CDC_SOCKET=c.config["subscribers"]["socket"],
               CDC_SLOT=c.slot, CDC_SCHEMA=schema, PSQL=os.path.join(client_bindir(), "psql"), PG_DSN=pg.dsn)
    tests = sorted(os.path.join(TS_TESTS, f) for f in os.listdir(TS_TESTS) if f.endswith(".test.mjs"))
    p = subprocess.run(["node", "--test", "--test-reporter=spec"] + tests, env=env, capture_output=True,
                       text=True, timeout=300)
    print(p.stdout)
    assert p.returncode == 0, f"node --test failed:\n{p.stdout}\n{p.stderr}"


def test_typescript_example_worker_processes_inserted_rows(pg, schema, cdc, ts_client):
    pg.sql(f"create table {schema}.jobs (id int primary key, note text)")
    c, p = cdc.start(subscriptions=[socket_sub(schema, "jobs", "jobs")])
    n = 50
    sock = c.config["subscribers"]["socket"]
    w = subprocess.Popen(["node", os.path.join(ts_client, "examples", "worker.js"), sock, "jobs", "--count", str(n)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pg.sql(f"insert into {schema}.jobs select i, 'n' || i from generate_series(1, {n}) i")
    out, err = w.communicate(timeout=60)
    assert w.returncode == 0, err
    assert [json.loads(x) for x in out.splitlines()] == [
        {"offset": i, "op": "insert", "table": "jobs", "row": {"id": i, "note": f"n{i}"}} for i in range(1, n + 1)]
    # Everything was acknowledged: a second run sees nothing within a second and exits 0.
    w2 = subprocess.run(["node", os.path.join(ts_client, "examples", "worker.js"), sock, "jobs", "--idle", "1"],
                        capture_output=True, text=True, timeout=60)
    assert (w2.returncode, w2.stdout) == (0, ""), w2.stderr
    assert p.terminate() == 0


def test_typescript_example_worker_nacks_what_it_cannot_process(pg, schema, cdc, ts_client):
    pg.sql(f"create table {schema}.jobs (id int primary key, note text)")
    c, p = cdc.start(subscriptions=[socket_sub(schema, "jobs", "jobs", max_deliveries=2)])
    pg.sql(f"insert into {schema}.jobs select i, 'n' || i from generate_series(1, 5) i")
    worker = ["node", os.path.join(ts_client, "examples", "worker.js"), c.config["subscribers"]["socket"], "jobs"]
    w = subprocess.run(worker + ["--fail-on", "id=3", "--nack-delay", "0.2", "--idle", "2"],
                       capture_output=True, text=True, timeout=60)
    assert w.returncode == 0, w.stderr
    assert [json.loads(x)["row"]["id"] for x in w.stdout.splitlines()] == [1, 2, 4, 5]
    assert w.stderr.count("id=3 is not supported; given back") == 2
    # 3 went to the dead letters with the worker's reason; everything else was acknowledged.
    d = subprocess.run(worker + ["--dead-letters", "--idle", "1"], capture_output=True, text=True, timeout=60)
    assert d.returncode == 0, d.stderr
    (line,) = [json.loads(x) for x in d.stdout.splitlines()]
    assert (line["row"], line["deadLetter"]["originalOffset"], line["deadLetter"]["deliveries"],
            line["deadLetter"]["reason"]) == ({"id": 3, "note": "n3"}, 3, 2, "id=3 is not supported")
    w2 = subprocess.run(worker + ["--idle", "1"], capture_output=True, text=True, timeout=60)
    assert (w2.returncode, w2.stdout) == (0, ""), w2.stderr
    assert p.terminate() == 0


def test_typescript_example_worker_exits_1_when_it_never_reaches_cdc(tmp_path, ts_client):
    """As Python's: after --idle seconds without ever connecting, or once cdc stayed unreachable for
    --give-up seconds, the worker says so and exits 1 (it exited 0, silently, when it never connected)."""
    missing = str(tmp_path / "no-cdc-here.sock")
    worker = ["node", os.path.join(ts_client, "examples", "worker.js"), missing, "jobs"]
    w = subprocess.run(worker + ["--idle", "1"], capture_output=True, text=True, timeout=60)
    assert (w.returncode, w.stdout) == (1, "")
    assert f"worker: never reached cdc at {missing} within 1s: is cdc running" in w.stderr
    assert "ENOENT" in w.stderr and "connecting again in" in w.stderr  # each attempt is logged
    w = subprocess.run(worker + ["--give-up", "0.5"], capture_output=True, text=True, timeout=60)
    assert (w.returncode, w.stdout) == (1, "")
    assert f"worker: cdc at {missing} unreachable for 500 ms: " in w.stderr

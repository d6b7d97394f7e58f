"""test_signals.py: backfills asked for from SQL. A row inserted into source.signal_table, in the
shape of Debezium's signals, is read from the WAL as it commits: execute-snapshot starts a backfill
of each subscription that has one of its tables (with its condition), answered in GET /backfills,
/status, /metrics and cdc status; stop-snapshot cancels it; bad signals are logged with the reason
and the stream goes on; a signal in a streamed transaction acts at its commit and never if it
aborts; a signal the stream brings again after a crash is not acted on twice."""

import json
import subprocess

import pytest

from conftest import CDC_BIN, wait_for
from test_status import http


def status(c, target):
    code, body = http((c.config["status"]["socket"], target))
    assert code == 200, body
    return body


def backfills(c):
    return json.loads(status(c, "/backfills"))


def signals(c):
    return json.loads(status(c, "/status"))["signals"]


def signal(pg, schema, sid, type_, data):
    pg.sql(f"insert into {schema}.cdc_signal (id, type, data) values (%s, %s, %s)", (sid, type_, data))


def setup_tables(pg, schema, rows=50):
    pg.sql(f"create table {schema}.cdc_signal (id text primary key, type text not null, data text)")
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    pg.sql(f"insert into {schema}.t select g, 'v' || g from generate_series(1, {rows}) g")
    pg.sql(f"create table {schema}.other (id int primary key)")
    pg.sql(f"insert into {schema}.other values (1)")


def start(pg, schema, cdc, **top):
    subs = [{"name": "a", "tables": [f"{schema}.t"], "sink": "stdout"},
            {"name": "b", "tables": [f"{schema}.other"], "sink": "stdout"}]
    return cdc.start(subscriptions=subs, publish=[f"{schema}.t", f"{schema}.other"],
                     source={"signal_table": f"{schema}.cdc_signal"}, **top)


def reads(p, sub, n):
    return p.wait_events(n, pred=lambda e: e["op"] == "read" and e["subscription"] == sub)


def test_an_insert_into_the_signal_table_starts_a_backfill(pg, schema, cdc):
    setup_tables(pg, schema)
    c, p = start(pg, schema, cdc)
    # cdc added the signal table to the publication it created (publish names only t and other)
    assert pg.sql("select tablename from pg_publication_tables where pubname = %s order by 1",
                  (c.publication,)) == [("cdc_signal",), ("other",), ("t",)]
    signal(pg, schema, "ad-hoc-1", "execute-snapshot",
           json.dumps({"data-collections": [f"{schema}.t"], "type": "incremental"}))
    got = reads(p, "a", 50)
    assert sorted(e["new"]["id"] for e in got) == list(range(1, 51))
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], 30, what="the backfill done")
    [bf] = backfills(c)
    assert bf["subscription"] == "a" and bf["rows_delivered"] == 50
    g = signals(c)
    assert (g["table"], g["received"], g["refused"], g["backfills_started"], g["backfills_stopped"]) == \
        (f"{schema}.cdc_signal", 1, 0, 1, 0)
    assert g["last"] == {"id": "ad-hoc-1", "type": "execute-snapshot", "lsn": g["last"]["lsn"], "error": None,
                         "backfills": [{"subscription": "a", "backfill": bf["id"], "error": None}]}
    # a condition (cdc's where language), and cdc's own key naming the subscription
    signal(pg, schema, "ad-hoc-2", "execute-snapshot", json.dumps(
        {"data-collections": [f"{schema}.t"], "subscriptions": ["a"],
         "additional-conditions": [{"data-collection": f"{schema}.t", "filter": "new.id <= 10"}]}))
    wait_for(lambda: len(backfills(c)) == 2 and backfills(c)[1]["state"] == "done", 30, what="the second")
    assert sorted(e["new"]["id"] for e in reads(p, "a", 60)[50:]) == list(range(1, 11))
    assert not [e for e in p.events() if e["subscription"] == "b" and e["op"] == "read"]
    out = subprocess.run([CDC_BIN, "status", "-c", c.path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert f"signals {schema}.cdc_signal: 2 received, 0 refused, 2 backfills started, 0 stopped\n" in out.stdout
    assert f"  last ad-hoc-2 (execute-snapshot at " in out.stdout
    assert f"): backfill {backfills(c)[1]['id']} of a\n" in out.stdout, out.stdout
    metrics = status(c, "/metrics")
    assert "cdc_signals_received_total 2\n" in metrics and "cdc_signal_backfills_started_total 2\n" in metrics
    assert p.terminate() == 0


BAD = [
    ("bad-json", "execute-snapshot", '{"data-collections": [',
     "data: not JSON"),
    ("bad-type", "log", '{"message": "hello"}',
     "type: 'log' is not a signal cdc acts on (execute-snapshot, stop-snapshot)"),
    ("no-data", "execute-snapshot", None,
     'data: missing (execute-snapshot needs {"data-collections": [...]})'),
    ("regex", "execute-snapshot", '{"data-collections": ["public\\\\.t"]}',
     "cdc takes schema.table names, not regular expressions"),
    ("sql-filter", "execute-snapshot", None,  # data below: needs the schema
     "data: additional-conditions[0]: position 1: unknown name 'color'"),
    ("not-a-subs-table", "execute-snapshot", None,
     "is not one of the tables of any subscription"),
    ("no-such-sub", "execute-snapshot", None,
     "data: subscriptions: no such subscription: nope"),
]


def test_bad_signals_are_logged_and_the_stream_goes_on(pg, schema, cdc):
    setup_tables(pg, schema)
    pg.sql(f"create table {schema}.unsubscribed (id int primary key)")
    c, p = start(pg, schema, cdc)
    data = {"sql-filter": json.dumps({"data-collections": [f"{schema}.t"], "additional-conditions": [
                {"data-collection": f"{schema}.t", "filter": "color='blue'"}]}),
            "not-a-subs-table": json.dumps({"data-collections": [f"{schema}.unsubscribed"]}),
            "no-such-sub": json.dumps({"data-collections": [f"{schema}.t"], "subscriptions": ["nope"]})}
    for sid, type_, d, _ in BAD:
        signal(pg, schema, sid, type_, data.get(sid, d))
    pg.sql(f"insert into {schema}.t values (1000, 'after the bad signals')")
    assert [e["new"]["id"] for e in p.wait_events(1, pred=lambda e: e["table"] == "t")] == [1000]
    err = p.stderr()
    for sid, _, _, why in BAD:
        line = [x for x in err.splitlines() if "signal refused; the stream goes on" in x and f'id="{sid}"' in x]
        assert len(line) == 1 and why in line[0], (sid, line, err)
    g = signals(c)
    assert (g["received"], g["refused"], g["backfills_started"]) == (len(BAD), len(BAD), 0)
    assert g["last"]["id"] == "no-such-sub" and g["last"]["error"] == "data: subscriptions: no such subscription: nope"
    assert backfills(c) == [] and p.running()
    assert p.terminate() == 0


def test_a_stop_signal_cancels_what_a_signal_started(pg, schema, cdc):
    setup_tables(pg, schema, rows=3000)
    c, p = start(pg, schema, cdc, backfill={"rate_limit": 100, "min_rows": 10, "max_rows": 10})
    signal(pg, schema, "slow", "execute-snapshot", json.dumps({"data-collections": [f"{schema}.t"]}))
    reads(p, "a", 10)
    signal(pg, schema, "halt", "stop-snapshot", json.dumps({"data-collections": [f"{schema}.t"]}))
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["cancelled"], 30, what="the backfill cancelled")
    g = signals(c)
    assert (g["received"], g["refused"], g["backfills_started"], g["backfills_stopped"]) == (2, 0, 1, 1)
    assert g["last"]["backfills"] == [{"subscription": "a", "backfill": backfills(c)[0]["id"], "error": None}]
    assert len([e for e in p.events() if e["op"] == "read"]) < 3000
    # nothing left to stop: said, not refused
    signal(pg, schema, "halt-again", "stop-snapshot", None)
    wait_for(lambda: signals(c)["received"] == 3, 30, what="the third signal")
    assert signals(c)["last"]["backfills"] == [] and signals(c)["refused"] == 0
    assert "signal stops no backfill: none that signals started is running" in p.stderr()
    assert p.terminate() == 0


@pytest.mark.skipif("int(__import__('os').environ.get('CDC_PG_VERSION', '18')) < 15",
                    reason="a prepared transaction holds the slot from PostgreSQL 15 (decoded at PREPARE)")
def test_signals_in_held_transactions_and_after_a_crash(pg, schema, cdc):
    """A signal in a transaction the server streams while it runs (past logical_decoding_work_mem)
    acts at its commit, and one in an aborted streamed transaction never. A prepared transaction
    keeps the slot from moving past it, so after kill -9 the stream brings the signal after it
    again: it acts once (its backfill resumes, as any after a crash)."""
    setup_tables(pg, schema)
    c, p = start(pg, schema, cdc)
    d = json.dumps({"data-collections": [f"{schema}.t"]})
    for sid, end in (("aborted", "rollback"), ("streamed", "commit")):
        pg.sql(f"begin; insert into {schema}.cdc_signal values ('{sid}', 'execute-snapshot', '{d}'); "
               f"insert into {schema}.other select g from generate_series(2, 3000) g; {end}")
    reads(p, "a", 50)
    wait_for(lambda: [b["state"] for b in backfills(c)] == ["done"], 30, what="one backfill")
    assert signals(c)["received"] == 1 and signals(c)["last"]["id"] == "streamed"
    pg.sql(f"begin; insert into {schema}.other values (5000); prepare transaction 'held_{schema}'")
    try:
        signal(pg, schema, "after-prepare", "execute-snapshot",
               json.dumps({"data-collections": [f"{schema}.t"]}))
        reads(p, "a", 100)  # not done: its chunks are durable once the slot may pass the prepared one
        assert len(backfills(c)) == 2
        p.kill()
        p = c.start()
        pg.sql(f"insert into {schema}.t values (2000, 'after the restart')")
        p.wait_events(1, pred=lambda e: e["op"] == "insert" and e["table"] == "t")
        assert len(backfills(c)) == 2, backfills(c)
        assert "signal starts a backfill" not in p.stderr()
    finally:
        pg.sql(f"commit prepared 'held_{schema}'")
    assert p.terminate() == 0


def test_doctor_checks_the_signal_table(pg, schema, cdc):
    """cdc doctor: the table missing, a column missing, every role allowed to insert, then right."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc(subscriptions=[{"name": "a", "tables": [f"{schema}.t"], "sink": "stdout"}],
            publish=[f"{schema}.t"], source={"signal_table": f"{schema}.cdc_signal"})

    def line():
        out = subprocess.run([CDC_BIN, "doctor", "-c", c.path, "--json"], capture_output=True, text=True,
                             timeout=60)
        found = [(x["status"], x["detail"], x["fix"]) for x in json.loads(out.stdout)["checks"]
                 if x["check"] == "signal_table"]
        assert len(found) == 1, out.stdout
        return found[0]

    q = f'"{schema}"."cdc_signal"'
    assert line() == ("fail", f"{q} does not exist, so no signal reaches cdc",
                      f"CREATE TABLE {q} (id text PRIMARY KEY, type text NOT NULL, data text)")
    pg.sql(f"create table {schema}.cdc_signal (id text primary key, type text not null)")
    assert line() == ("fail", f"{q} has no column data: every signal would be refused",
                      f"ALTER TABLE {q} ADD COLUMN data text")
    pg.sql(f"alter table {schema}.cdc_signal add column data text")
    pg.sql(f"grant insert on {schema}.cdc_signal to public")
    assert line() == ("warn", f"{q}: every role may insert into it, so anyone who can connect may start backfills",
                      f"REVOKE INSERT ON {q} FROM PUBLIC; GRANT INSERT ON {q} TO the roles that may")
    pg.sql(f"revoke insert on {schema}.cdc_signal from public")
    assert line() == ("pass", f"{q}: columns id, type and data; cdc adds it to publication {c.publication}; "
                      "who may insert signals: postgres", None)
    role = f"signaller_{schema}"[:63]
    pg.sql(f'create role "{role}"')
    try:
        pg.sql(f'grant insert on {schema}.cdc_signal to "{role}"')
        assert line()[1].endswith(f"who may insert signals: postgres, {role}")
    finally:
        pg.sql(f'drop owned by "{role}"')
        pg.sql(f'drop role "{role}"')
    p = c.start()
    assert line() == ("pass", f"{q}: columns id, type and data; in publication {c.publication}; "
                      "who may insert signals: postgres", None)
    assert p.terminate() == 0

"""test_failover.py: the database moves under cdc. Real primaries and physical standbys
(tests/pg.py: TempStandby, made with the low-level base backup API), killed with
`pg_ctl stop -m immediate` under a writer thread and replaced by a promoted standby:

  - PostgreSQL 17, source.failover: true, slot synchronization on, a multi-host source.dsn with
    target_session_attrs=read-write: cdc follows the promotion to the synchronized slot; every row
    of the promoted server's table arrives and no row it lacks ever does (stdout, at least once;
    then Kafka with exactly_once through the mock cluster);
  - the warning while the primary's synchronized_standby_slots makes a promotion unsafe (log,
    /status, cdc status, /metrics), and the refusal of source.failover before 17;
  - PostgreSQL 16: the slot does not survive the promotion; on_slot_lost: resync re-syncs, and a
    consumer that applies events by key ends with the promoted server's rows;
  - cdc on a PostgreSQL 16 hot standby: the slot made there, the publication and the heartbeat on
    the primary (source.primary_dsn), then that standby promoted under it.
"""

import base64
import json
import random
import subprocess
import threading
import time

import psycopg2
import pytest

from conftest import CDC_BIN, CdcFactory, wait_for
from kafka_fixtures import lsn_text
from pg import TempPostgres, TempStandby, lsn_to_int
from test_kafka import kafka_section
from test_status import get

TABLE = "public.t"
STANDBY_SLOT = "standby_slot"


def multi_dsn(*servers):
    """A libpq connection string naming every server: whichever accepts writes is chosen."""
    return (f"host={','.join(s.host for s in servers)} port={','.join(str(s.port) for s in servers)} "
            f"dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=2")


class Writer(threading.Thread):
    """Commits one change a transaction through a multi-host DSN until stop(), reconnecting to
    whichever server accepts writes: inserts of new ids, and with churn also updates and deletes
    of existing ones (each row's v grows). What committed is the promoted server's business: the
    tests read its table at the end."""

    def __init__(self, dsn, churn=False, pause=0.003):
        super().__init__(name="writer", daemon=True)
        self.dsn, self.churn, self.pause = dsn, churn, pause
        self.stop_event = threading.Event()
        self.next_id = 1
        self.commits = 0
        self.errors = 0
        self.rng = random.Random(23)

    def statement(self):
        live = self.next_id - 1
        r = self.rng.random()
        if not self.churn or live < 20 or r < 0.5:
            self.next_id += 1
            return f"insert into {TABLE} (id, v) values ({self.next_id - 1}, 1)"
        id_ = self.rng.randint(1, live)
        if r < 0.85:
            return f"update {TABLE} set v = v + 1 where id = {id_}"
        return f"delete from {TABLE} where id = {id_}"

    def run(self):
        conn = None
        while not self.stop_event.is_set():
            try:
                if conn is None:
                    conn = psycopg2.connect(self.dsn)
                    conn.autocommit = True
                conn.cursor().execute(self.statement())
                self.commits += 1
            except psycopg2.Error:
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)
            self.stop_event.wait(self.pause)
        if conn is not None:
            conn.close()

    def wait_commits(self, n, timeout=60):
        start = self.commits
        wait_for(lambda: self.commits >= start + n, timeout, what=f"{n} more commits by the writer")

    def stop(self):
        self.stop_event.set()
        self.join(30)


def rows(pg):
    return dict(pg.sql(f"select id, v from {TABLE}"))


def status(c):
    code, body = get(c, "/status")
    assert code == 200, body
    return json.loads(body)


def metric(c, name):
    return [line for line in get(c, "/metrics")[1].splitlines() if line.startswith(name)]


def wait_synced(primary, standby, slot):
    """Waits until the standby holds a persistent synchronized copy of slot at the primary's
    confirmed position (a temporary copy is dropped at a promotion). The primary logs the running
    transactions meanwhile, which moves the slot's restart_lsn, and so the copy, along sooner."""
    def synced():
        primary.sql("select pg_log_standby_snapshot()")
        want = primary.sql("select confirmed_flush_lsn from pg_replication_slots where slot_name = %s",
                           (slot,))[0][0]
        got = standby.sql("select not temporary and synced, confirmed_flush_lsn >= %s from pg_replication_slots "
                          "where slot_name = %s", (want, slot))
        return got and all(got[0])
    wait_for(synced, 60, interval=0.2, what=f"a synchronized copy of {slot} on the standby")


@pytest.fixture
def factory(tmp_path, request):
    """CdcFactory over servers the test makes (f.pg: the one to drop slots on at the end)."""
    made = []

    def make(pg):
        f = CdcFactory(pg, tmp_path, "public", request.node.name)
        made.append(f)
        return f
    yield make
    for f in made:
        for p in f.all_processes:
            p.close()


@pytest.fixture
def pair():
    """make(version, **primary_settings) -> (primary, standby): a primary with table public.t and a
    hot standby of it (slot synchronization from 17 on), both removed at the end."""
    made = []

    def make(version, **settings):
        primary = TempPostgres(version=version, **settings)
        made.append(primary)
        primary.start()
        primary.sql(f"create table {TABLE} (id int primary key, v int not null)")
        standby = TempStandby(primary)
        made.append(standby)
        standby.start()
        return primary, standby
    yield make
    for server in made:
        server.cleanup()


def promote(old, new):
    """The primary dies (immediate stop: a crash), the standby is promoted."""
    old.stop("immediate")
    new.promote()
    assert not new.in_recovery()


# --- PostgreSQL 17: failover slots ----------------------------------------------------------------

def follow_promotion_17(factory, pair, top=None, subscriptions=None):
    """The PostgreSQL 17 promotion under a writer; returns (promoted server, Cdc, CdcProcess)
    once the writer stopped and everything it committed there is on the promoted server."""
    primary, standby = pair(17, synchronized_standby_slots=STANDBY_SLOT)
    f = factory(primary)
    c = f(subscriptions=subscriptions, publish=[TABLE],
          source={"dsn": multi_dsn(primary, standby), "failover": True, "status_interval": "250ms"},
          **(top or {}))
    p = c.start()
    wait_for(lambda: (status(c)["source"]["failover"] or {}).get("ready"), 30,
             what="source.failover.ready\n" + p.describe())
    assert metric(c, "cdc_source_failover_ready") == ['cdc_source_failover_ready{reason="ready"} 1']
    assert primary.sql("select failover from pg_replication_slots where slot_name = %s", (c.slot,)) == [(True,)]
    w = Writer(multi_dsn(primary, standby))
    w.start()
    w.wait_commits(300)
    wait_synced(primary, standby, c.slot)
    w.wait_commits(100)
    promote(primary, standby)
    f.pg = standby  # the slot to drop at the end is the promoted server's
    w.wait_commits(300)
    w.stop()
    assert w.errors > 0  # the writer did see the primary go
    return standby, c, p


def test_pg17_failover_slot_follows_a_promotion_under_load(factory, pair):
    promoted, c, p = follow_promotion_17(factory, pair)
    want = rows(promoted)
    ids = set(want)
    wait_for(lambda: {e["key"]["id"] for e in p.events()} >= ids, 60,
             what="every row of the promoted server\n" + p.describe())
    events = p.events()
    got = [e["key"]["id"] for e in events]
    assert set(got) == ids, f"rows the promoted server never had: {sorted(set(got) - ids)[:10]}"
    assert all(e["op"] == "insert" for e in events)
    # Copies (at least once: what was delivered but not confirmed when the primary died) are
    # the same change: the same (commit_lsn, tx_index), never two changes at one position.
    by_pos = {}
    for e in events:
        assert by_pos.setdefault((e["commit_lsn"], e["tx_index"]), e["key"]["id"]) == e["key"]["id"]
    err = p.stderr()
    assert "following a promotion" in err and "timeline=2 previous_timeline=1" in err, p.describe()
    st = status(c)["source"]
    assert st["promotions"] == 1 and st["timeline"] == 2 and st["server_role"] == "primary", st
    assert st["server"] == f"{promoted.host}:{promoted.port}", st
    # The promoted server has no standby of its own yet: a promotion now would not be safe.
    wait_for(lambda: (status(c)["source"]["failover"] or {}).get("reason") == "synchronized_standby_slots_empty",
             45, what="the failover check on the promoted server")
    assert p.terminate() == 0, p.describe()
    print(f"rows {len(ids)}, events {len(events)}, copies {len(events) - len(by_pos)}")


def test_pg17_failover_exactly_once_kafka(factory, pair, kafka, kafka_reader, proto):
    """The same promotion with kafka.exactly_once. What the mock lets this check: every row of the
    promoted server arrives once and none it lacks; the process produces no copy (one process
    follows the promotion: nothing to fence, and the source transactions the slot sends again are
    skipped by commit LSN, those of a Kafka transaction still open included). It aborts a Kafka
    transaction only when the primary died inside a source transaction whose first changes it had
    (then that Kafka transaction cannot commit: the slot sends the source transaction again whole),
    so at most once here. What it cannot show: a broker's abort markers (see test_exactly_once)."""
    topic = "cdc.public.t"
    kafka.create_topic(topic, 3)
    promoted, c, p = follow_promotion_17(
        factory, pair, top={"kafka": kafka_section(kafka, exactly_once=True)},
        subscriptions=[{"name": "k", "tables": [TABLE], "sink": "kafka"}])
    reader = kafka_reader([topic])
    ids = set(rows(promoted))
    reader.wait_until(lambda ms: {_id(m) for m in ms} >= ids, 90,
                      what="every row of the promoted server in Kafka",
                      describe=lambda: p.describe())
    msgs = reader.snapshot()
    got = [_id(m) for m in msgs]
    assert set(got) == ids, f"rows the promoted server never had: {sorted(set(got) - ids)[:10]}"
    assert len(got) == len(ids), f"{len(got) - len(ids)} copies"
    k = status(c)["kafka"]
    broke = sum("a sink failed" in line and "the stream broke inside a source transaction" in line
                for line in p.stderr().splitlines())
    assert k["transactions_aborted"] == broke <= 1 and k["transactions_committed"] > 0, (k, p.describe())
    assert "following a promotion" in p.stderr(), p.describe()
    assert p.terminate() == 0, p.describe()


def _id(m):
    """The id of the row a Kafka message carries (its key)."""
    [col] = m.key_pb.columns
    return col.value.int_value


def test_pg17_warns_while_a_promotion_is_not_safe(factory):
    pg = TempPostgres(version=17)
    with pg:
        pg.sql(f"create table {TABLE} (id int primary key, v int not null)")
        f = factory(pg)
        c = f(publish=[TABLE], source={"failover": True})
        # A slot made by hand without FAILOVER: cdc turns it on.
        pg.sql("select pg_create_logical_replication_slot(%s, 'pgoutput')", (c.slot,))
        p = c.start()
        assert pg.sql("select failover from pg_replication_slots where slot_name = %s", (c.slot,)) == [(True,)]
        assert "turned failover on for the replication slot" in p.stderr()
        wait_for(lambda: (status(c)["source"]["failover"] or {}).get("ready") is False, 30,
                 what="the failover check\n" + p.describe())
        fo = status(c)["source"]["failover"]
        assert fo["reason"] == "synchronized_standby_slots_empty" and fo["slot_failover"] is True, fo
        assert fo["synchronized_standby_slots"] == "" and "never had" in fo["message"], fo
        assert fo["message"] in status(c)["source"]["warnings"]
        assert metric(c, "cdc_source_failover_ready") == [
            'cdc_source_failover_ready{reason="synchronized_standby_slots_empty"} 0']
        out = subprocess.run([CDC_BIN, "status", "-c", c.path], capture_output=True, text=True, timeout=30).stdout
        assert "failover  NOT READY: synchronized_standby_slots_empty" in out, out
        assert "warning: synchronized_standby_slots is empty on the primary" in out, out
        # The log says it once (and again only when it changes).
        wait_for(lambda: "failover: a promotion of a standby now is not safe" in p.stderr(), 10)
        # The classic mistake: the logical slot named (a start does not check the list, a reload
        # would refuse it). cdc's stream waits for it; the next check says so.
        pg.settings["synchronized_standby_slots"] = c.slot
        pg.restart()
        wait_for(lambda: (status(c)["source"]["failover"] or {}).get("reason") == "standby_slot_logical", 60,
                 what="the check after the reconnect\n" + p.describe())
        assert f"names {c.slot}, a logical slot (cdc's own)" in status(c)["source"]["failover"]["message"]
        err = p.stderr()
        assert err.count("failover: a promotion of a standby now is not safe") == 2, err
        assert "reason=standby_slot_logical" in err
        assert p.terminate() == 0, p.describe()


def test_failover_before_17_is_refused(factory):
    with TempPostgres(version=16) as pg:
        c = factory(pg)(publish=[TABLE], source={"failover": True})
        p = c.run()
        assert p.wait_exit(60) == 1, p.describe()
        assert "source.failover needs PostgreSQL 17 or later (failover slots), and the server is 16." in p.stderr()


def tail_all(c, sub):
    """Every event of a socket subscription's spool, as `cdc tail` prints them (not acknowledged)."""
    out = subprocess.run([CDC_BIN, "tail", "-s", c.config["subscribers"]["socket"], sub, "--from", "earliest",
                          "--no-ack", "--timeout", "2"], capture_output=True, text=True, timeout=60)
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.parametrize("version", [16, 17])
def test_promotion_that_forked_before_cdcs_position(factory, pair, version):
    """The case synchronized_standby_slots prevents (PostgreSQL 17 with failover slots, but the
    setting left empty; before 17 there is nothing to prevent it), made on purpose: the standby
    stops receiving,
    the primary goes on and cdc delivers what only the primary had; then the primary dies and the
    standby is promoted. Its history left timeline 1 before cdc's position: cdc stops
    (on_slot_lost: fail) saying so, rather than resume at its own position on the new timeline,
    which would skip the promoted server's first changes. With resync it writes the promoted
    server's WAL up past its old positions first, so that nothing new is skipped (the socket
    subscription's spool skips what it holds by commit LSN), and a consumer that applies by key
    and honours the re-sync marker ends with the promoted server's rows."""
    primary, standby = pair(version)
    f = factory(primary)
    everything = ["insert", "update", "delete", "message"]
    c = f(publish=[TABLE], source={"dsn": multi_dsn(primary, standby), "failover": version >= 17,
                                   "status_interval": "250ms"},
          subscriptions=[{"name": "all", "tables": [TABLE], "sink": "stdout", "operations": everything},
                         {"name": "s", "tables": [TABLE], "sink": "socket", "operations": everything}])
    p = c.start()
    primary.sql(f"insert into {TABLE} select g, 1 from generate_series(1, 200) g")
    p.wait_events(200, 30)
    if version >= 17:
        wait_synced(primary, standby, c.slot)
    standby.set(primary_conninfo="")  # the standby stops receiving
    wait_for(lambda: not primary.sql("select active from pg_replication_slots where slot_name = %s",
                                     (STANDBY_SLOT,))[0][0], 30, what="the standby to stop receiving")
    primary.sql(f"update {TABLE} set v = 2 where id <= 50")
    primary.sql(f"insert into {TABLE} select g, 1 from generate_series(201, 300) g")
    end = lsn_to_int(primary.current_wal_lsn())
    p.wait_events(350, 30)
    wait_for(lambda: lsn_to_int(c.slot_row()[1]) >= end, 30, what=f"cdc to confirm {lsn_text(end)}")
    promote(primary, standby)
    f.pg = standby
    assert p.wait_exit(60) == 1, p.describe()
    err = p.stderr()
    assert "was promoted (timeline 1 -> 2), and its history left timeline 1 at" in err, err
    assert "what cdc delivered after" in err and "never happened on this server" in err
    with open(c.path) as fh:
        text = fh.read()
    with open(c.path, "w") as fh:
        fh.write(text.replace("\n  status_interval:", "\n  on_slot_lost: resync\n  status_interval:"))
    p = c.run()
    wait_for(lambda: "re-synced: the slot moved on" in p.stderr(), 60, what="the re-sync\n" + p.describe())
    assert "the promoted server's WAL is behind positions cdc read before the promotion" in p.stderr()
    standby.sql(f"insert into {TABLE} select g, 7 from generate_series(301, 350) g")
    standby.sql(f"delete from {TABLE} where id = 1")
    want = rows(standby)
    assert len(want) == 249 and 250 not in want
    wait_for(lambda: not backfill_failed(c) and apply_by_key(p.events()) == want, 60,
             what="the stdout consumer's rows\n" + p.describe())
    s_events = wait_for(lambda: (lambda evs: evs if apply_by_key(evs) == want else None)(tail_all(c, "s")), 60,
                        what="the socket subscription's rows")
    new = [e for e in s_events if e["op"] == "insert" and e["key"]["id"] > 300]
    assert len(new) == 50, "inserts on the promoted server skipped by the spool"
    assert p.terminate() == 0, p.describe()


# --- PostgreSQL 16: a promotion loses the slot ----------------------------------------------------

def backfill_failed(c):
    """Fails at once when a backfill of the re-sync failed (its rows would never come)."""
    failed = [b for b in json.loads(get(c, "/backfills")[1]) if b["state"] == "failed"]
    assert not failed, f"a backfill failed: {failed[0]['error']}"
    return False


def apply_by_key(events):
    """A consumer that applies events in order by key (read, insert and update as upserts, delete as
    a delete) and treats a re-sync marker as "what follows replaces what you have"."""
    state = {}
    for e in events:
        if e["op"] == "message" and e["message"]["prefix"] == "cdc.resync":
            state = {}
        elif e["op"] in ("read", "insert", "update"):
            state[e["new"]["id"]] = e["new"]["v"]
        elif e["op"] == "delete":
            state.pop(e["key"]["id"], None)
    return state


def test_pg16_promotion_resyncs_and_a_consumer_ends_with_the_promoted_rows(factory, pair):
    primary, standby = pair(16)
    f = factory(primary)
    c = f(publish=[TABLE], source={"dsn": multi_dsn(primary, standby), "on_slot_lost": "resync",
                                   "status_interval": "250ms"},
          subscriptions=[{"name": "all", "tables": [TABLE], "sink": "stdout",
                          "operations": ["insert", "update", "delete", "message"]}])
    p = c.start()
    w = Writer(multi_dsn(primary, standby), churn=True)
    w.start()
    w.wait_commits(400)
    promote(primary, standby)
    f.pg = standby
    w.wait_commits(300)
    w.stop()
    want = rows(standby)
    wait_for(lambda: not backfill_failed(c) and apply_by_key(p.events()) == want, 90,
             what="the consumer's rows to be the promoted server's\n" + p.describe())
    err = p.stderr()
    assert "The server (" in err and "was promoted since cdc's position (timeline 1 -> 2" in err, err
    assert "before PostgreSQL 17 a logical slot does not survive a promotion" in err
    assert "re-synced: the slot moved on" in err
    markers = [e for e in p.events() if e["op"] == "message"]
    assert len(markers) == 1, markers
    marker = json.loads(base64.b64decode(markers[0]["message"]["content"]))
    assert marker["reason"] == "slot_lost" and marker["slot"] == c.slot, marker
    assert status(c)["source"]["resyncs"] == 1
    assert p.terminate() == 0, p.describe()


# --- PostgreSQL 16: decoding on a hot standby ------------------------------------------------------

def test_pg16_decodes_on_a_hot_standby_heartbeat_and_all_then_follows_its_promotion(factory, pair):
    primary, standby = pair(16)
    f = factory(standby)
    src = {"dsn": standby.dsn, "heartbeat": "300ms"}
    # Without the primary: the publication is the primary's, and a heartbeat needs it.
    c = f(publish=[TABLE], source=src)
    p = c.run()
    assert p.wait_exit(60) == 1, p.describe()
    assert "source.heartbeat writes a message into the WAL, which a standby cannot" in p.stderr()
    src["primary_dsn"] = primary.dsn
    c = f(publish=[TABLE], source=src)
    p = c.run()
    assert p.wait_exit(60) == 1, p.describe()
    assert ("is a standby: create it on the primary (CREATE PUBLICATION "
            f"\"{c.publication}\" FOR TABLE \"public\".\"t\" WITH (publish_via_partition_root = true))") in \
        p.stderr(), p.describe()
    primary.sql(f'create publication "{c.publication}" for table {TABLE}')
    wait_for(lambda: standby.sql("select count(*) from pg_publication where pubname = %s",
                                 (c.publication,))[0][0] == 1, 30, what="the publication on the standby")
    p = c.run()
    wait_for(lambda: "created replication slot" in p.stderr(), 60, what="the slot on the standby\n" + p.describe())
    assert "PostgreSQL waits for a running-transactions record from the primary" in p.stderr()
    c.wait_streaming(p)
    assert standby.sql("select count(*) from pg_replication_slots where slot_name = %s", (c.slot,)) == [(1,)]
    st = wait_for(lambda: status(c)["source"]["server"] and status(c)["source"], 10, what="/status")
    assert st["server_role"] == "standby" and st["server"] == f"{standby.host}:{standby.port}", st
    assert metric(c, "cdc_source_server_in_recovery") == ["cdc_source_server_in_recovery 1"]
    primary.sql(f"insert into {TABLE} select g, 1 from generate_series(1, 50) g")
    evs = p.wait_events(50, timeout=60)
    assert sorted(e["key"]["id"] for e in evs) == list(range(1, 51))
    # A backfill reads, and writes its watermarks, on the primary (source.primary_dsn); the
    # stream brings the watermarks through the standby.
    out = subprocess.run([CDC_BIN, "backfill", "-c", c.path, "all", "--wait"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr + p.describe()
    reads = p.wait_events(50, timeout=60, pred=lambda e: e["op"] == "read")
    assert sorted(e["key"]["id"] for e in reads) == list(range(1, 51))
    # The heartbeat is written on the primary and decoded on the standby: the slot there moves
    # past the primary's WAL position while the table is idle.
    watcher = f"{c.slot}_w"
    primary.sql("select pg_create_logical_replication_slot(%s, 'test_decoding')", (watcher,))
    wait_for(lambda: any("cdc.heartbeat" in r[0] for r in primary.sql(
        "select data from pg_logical_slot_peek_changes(%s, NULL, NULL)", (watcher,))), 30,
        what="a heartbeat in the primary's WAL")
    primary.sql("select pg_drop_replication_slot(%s)", (watcher,))
    mark = primary.current_wal_lsn()
    wait_for(lambda: lsn_to_int(standby.sql("select confirmed_flush_lsn::text from pg_replication_slots "
                                            "where slot_name = %s", (c.slot,))[0][0]) >= lsn_to_int(mark),
             60, what=f"the standby's slot to pass {mark}")
    assert "heartbeat failed" not in p.stderr()
    assert len(p.events()) == 100  # heartbeats are not events
    # The standby is promoted: its own slot goes on, on the new timeline.
    primary.stop("immediate")
    standby.promote()
    standby.sql(f"insert into {TABLE} values (51, 1)")
    evs = p.wait_events(101, timeout=60)
    assert evs[-1]["key"]["id"] == 51 and evs[-1]["op"] == "insert"
    wait_for(lambda: status(c)["source"]["server_role"] == "primary", 30, what="the role after the promotion")
    st = status(c)["source"]
    assert st["promotions"] == 1 and st["timeline"] == 2, st
    assert p.terminate() == 0, p.describe()

"""test_versions.py: what differs between PostgreSQL 14 and 18, on the server the suite runs
(CDC_PG_VERSION; make check runs these on every version of PG_VERSIONS): the pgoutput protocol cdc
negotiates and what the server then does, 18's generated columns (and the setting refused before
18), and the grant a backfill asks for, which names pg_logical_emit_message as the server has it."""

import re
import subprocess

import pytest

from conftest import CDC_BIN, wait_for

pytestmark = pytest.mark.matrix

# The newest pgoutput protocol of each server: 2 (streaming) came with 14, 3 (two-phase) with 15,
# 4 (parallel streaming, the abort's LSN) with 16; 17 and 18 add none.
PROTOCOL = {14: 2, 15: 3}


def cli(*args, timeout=60):
    return subprocess.run([CDC_BIN, *args], capture_output=True, text=True, timeout=timeout)


def streamed_transactions(pg, slot):
    rows = pg.sql("select stream_txns from pg_stat_replication_slots where slot_name = %s", (slot,))
    return rows[0][0] if rows else 0


def test_the_servers_newest_protocol_is_negotiated(pg, schema, cdc):
    """cdc asks for the newest pgoutput protocol the server has, and the server does what that
    protocol allows: a transaction past logical_decoding_work_mem (64kB here) is streamed while it
    runs (the server counts it in pg_stat_replication_slots) from 14 on; the slot decodes prepared
    transactions at PREPARE from 15 on (two_phase, which 14's slots lack)."""
    pg.sql(f"create table {schema}.t (id int primary key, v text)")
    c, p = cdc.start()
    want = PROTOCOL.get(pg.version, 4)
    assert re.search(rf" protocol={want} server={pg.version}\d{{4}}\b", p.stderr()), p.stderr()
    before = streamed_transactions(pg, c.slot)
    pg.sql(f"insert into {schema}.t select g, md5(g::text) from generate_series(1, 2000) g")
    evs = p.wait_events(2000)
    assert [e["new"]["id"] for e in evs] == list(range(1, 2001))
    wait_for(lambda: streamed_transactions(pg, c.slot) > before, 10,
             what="the server to count the transaction it streamed")
    if pg.version >= 15:
        assert pg.sql("select two_phase from pg_replication_slots where slot_name = %s", (c.slot,)) == [(True,)]
    assert p.terminate() == 0


def test_generated_columns_on_18_and_refused_before(pg, schema, cdc):
    """PostgreSQL 18 publishes stored generated columns when the publication says so
    (publish_generated_columns = stored): with source.publish_generated_columns cdc creates it that
    way, and every event carries the column, a snapshot's reads as the stream's changes; without it
    none does, nor ever a virtual column (18's kind). Before 18 the setting is refused at the start,
    and no event, read or change, carries the column."""
    virtual = ", c int generated always as (a * 3) virtual" if pg.version >= 18 else ""
    pg.sql(f"create table {schema}.g (id int primary key, a int, "
           f"b int generated always as (a * 2) stored{virtual})")
    pg.sql(f"insert into {schema}.g (id, a) values (1, 10)")
    subs = [{"name": "all", "tables": [f"{schema}.g"], "sink": "stdout", "snapshot": True}]
    plain = cdc(subscriptions=subs)
    gen = cdc(subscriptions=subs, source={"publish_generated_columns": True})
    runs = [plain.start()]
    if pg.version >= 18:
        runs.append(gen.start())
        assert pg.sql("select pubname, pubgencols from pg_publication where pubname in (%s, %s) order by 1",
                      (plain.publication, gen.publication)) == [(plain.publication, "n"), (gen.publication, "s")]
    else:
        p = gen.run()
        assert p.wait_exit(30) == 1, p.describe()
        assert (f"source.publish_generated_columns: PostgreSQL {pg.version}." in p.stderr()
                and "never publishes generated columns (18 is the first that can)" in p.stderr()), p.describe()
        assert p.events() == []
    for p in runs:
        p.wait_events(1, pred=lambda e: e["op"] == "read")
    pg.sql(f"insert into {schema}.g (id, a) values (2, 20)")
    pg.sql(f"update {schema}.g set a = 30 where id = 2")
    want = [("read", {"id": 1, "a": 10}), ("insert", {"id": 2, "a": 20}), ("update", {"id": 2, "a": 30})]
    assert [(e["op"], e["new"]) for e in runs[0].wait_events(3)] == want
    if pg.version >= 18:
        assert [(e["op"], e["new"]) for e in runs[1].wait_events(3)] == \
            [(op, dict(new, b=new["a"] * 2)) for op, new in want]
    for p in runs:
        assert p.terminate() == 0


def test_backfill_grant_names_the_function_as_the_server_has_it(pg, schema, cdc):
    """A role that may not execute pg_logical_emit_message (PUBLIC may by default: revoked here)
    has its backfill refused with the GRANT to run, naming the function as this server has it
    (PostgreSQL 17 added a fourth argument); run as printed, it lets the next backfill through."""
    sig = "boolean,text,text,boolean" if pg.version >= 17 else "boolean,text,text"
    role = f"r_{schema}"[:63]
    t = f"{schema}.t"
    pg.sql(f"create table {t} (id int primary key)")
    pg.sql(f"insert into {t} values (1), (2)")
    pg.sql(f'create role "{role}" login replication')
    pg.sql(f'grant usage on schema "{schema}" to "{role}"')
    pg.sql(f'grant select on {t} to "{role}"')
    c = cdc(subscriptions=[{"name": "all", "tables": [t], "sink": "stdout"}],
            source={"dsn": pg.dsn.replace("user=postgres", f"user={role}")})
    pg.sql(f'create publication "{c.publication}" for table {t}')  # the role could not
    pg.sql(f"revoke execute on function pg_catalog.pg_logical_emit_message({sig}) from public")
    try:
        p = c.start()
        sock = c.config["status"]["socket"]
        r = cli("backfill", "-s", sock, "all", "--wait")
        grant = f'GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message({sig}) TO "{role}"'
        assert r.returncode == 1 and grant in r.stdout + r.stderr, r.stdout + r.stderr
        pg.sql(grant)
        r = cli("backfill", "-s", sock, "all", "--wait")
        assert r.returncode == 0, r.stdout + r.stderr
        reads = p.wait_events(2, pred=lambda e: e["op"] == "read")
        assert sorted(e["key"]["id"] for e in reads) == [1, 2]
        assert p.terminate() == 0
    finally:
        pg.sql(f"grant execute on function pg_catalog.pg_logical_emit_message({sig}) to public")
        for proc in c.processes:
            proc.close()
        pg.sql(f'drop owned by "{role}"')
        pg.sql(f'drop role "{role}"')

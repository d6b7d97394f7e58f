"""test_partitions.py: partitioned tables in the stream. The publication cdc creates publishes via
the partition root, so a subscription to a root gets every change of every partition under the
root's name, schema events included, on every PostgreSQL of the matrix."""

import signal
import subprocess

import pytest

from conftest import CDC_BIN, wait_for

pytestmark = pytest.mark.matrix


def make_root(pg, schema, name="ev"):
    pg.sql(f"create table {schema}.{name} (id int, k int, v text, primary key (id, k)) partition by list (k)")
    pg.sql(f"create table {schema}.{name}_1 partition of {schema}.{name} for values in (1)")
    pg.sql(f"create table {schema}.{name}_2 partition of {schema}.{name} for values in (2)")


def rows(evs):
    return [(e["op"], e["table"], (e["new"] or e["key"] or {}).get("id")) for e in evs]


@pytest.mark.parametrize("publish", ["schema", "root"])
def test_a_root_gets_every_partitions_changes_under_its_name(pg, schema, cdc, publish):
    """400 inserts into two partitions, an update, an update that moves a row to the other
    partition, a delete and a TRUNCATE of the root: every change arrives as the root's. publish
    "schema" is the issue's case: a superuser's publish: ["schema.*"] (TABLES IN SCHEMA from 15,
    the matching tables on 14), which logged "already member of publication" at every cycle."""
    make_root(pg, schema)
    c = cdc(subscriptions=[{"name": "ev", "tables": [f"{schema}.ev"], "sink": "stdout"}],
            publish=[f"{schema}.*"] if publish == "schema" else [f"{schema}.ev"])
    p = c.start()
    pg.sql(f"insert into {schema}.ev select g, 1 + g % 2, 'a' from generate_series(1, 400) g")
    pg.sql(f"update {schema}.ev set v = 'b' where id = 1")
    pg.sql(f"update {schema}.ev set k = 2 where id = 2")  # from ev_1 to ev_2
    pg.sql(f"delete from {schema}.ev where id = 3")
    pg.sql(f"truncate {schema}.ev")
    evs = p.wait_events(405)
    assert {e["table"] for e in evs} == {"ev"}, rows(evs)[:5]
    assert [(e["op"], e["new"]["id"], e["new"]["k"]) for e in evs[:400]] == \
        [("insert", g, 1 + g % 2) for g in range(1, 401)]
    assert rows(evs[400:]) == [("update", "ev", 1), ("delete", "ev", 2), ("insert", "ev", 2),
                               ("delete", "ev", 3), ("truncate", "ev", None)]
    schemas = [e for e in p.raw_events() if e["op"] == "schema"]
    assert [(e["schema"], e["table"]) for e in schemas] == [(schema, "ev")], schemas
    assert [col["name"] for col in schemas[0]["table_schema"]["columns"]] == ["id", "k", "v"]
    # a reload keeps the publication current: nothing to add, no error
    p.signal(signal.SIGHUP)
    wait_for(lambda: "reload" in p.stderr(), 20, what="the reload")
    pg.sql(f"insert into {schema}.ev values (1000, 2, 'after')")
    p.wait_events(406)
    err = p.stderr()
    assert "already member" not in err and "adding tables to the publication" not in err, err
    assert p.terminate() == 0


def test_attach_and_detach_while_streaming(pg, schema, cdc):
    """While cdc streams: a table with a row of its own is attached, a partition detached, and one
    created as a partition. The server decodes each change with the catalog as of that change, so a
    row written after ATTACH arrives as the root's and one written to the detached table after
    DETACH under its own name (TABLES IN SCHEMA holds it). PostgreSQL 14 keeps the name a table's
    changes had earlier in the walsender's session (ATTACH and DETACH do not reset its publication
    cache): the attached table's rows go on arriving under its own name, unless the same
    transaction touches the publication, which docs/subscriptions.md tells users of 14 to do. (On
    14 the detached table is outside the publication until cdc adds it, the gap of a new table of
    docs/operations.md, so the test writes to it only from 15.)"""
    make_root(pg, schema)
    c = cdc(subscriptions=[{"name": "ev", "tables": [f"{schema}.ev"], "sink": "stdout"},
                           {"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"}])
    p = c.start()
    ev = f"{schema}.ev"

    def got(sub, n):
        return [(e["table"], e["new"]["id"])
                for e in p.wait_events(n, pred=lambda e: e["subscription"] == sub and e["op"] == "insert")]

    def new_table(name):
        pg.sql(f"create table {ev}_{name} (id int, k int, v text, primary key (id, k))")
        if pg.version == 14:  # no TABLES IN SCHEMA: cdc adds the new table (at a reload, or within 10 s)
            p.signal(signal.SIGHUP)
            wait_for(lambda: f"schema={schema} table=ev_{name}" in p.stderr(), 20, what=f"ev_{name} published")

    pg.sql(f"insert into {ev} values (1, 1, 'a')")
    new_table("3")
    pg.sql(f"insert into {ev}_3 values (30, 3, 'before attach')")
    p.wait_events(1, pred=lambda e: e["table"] == "ev_3")  # decoded in this walsender session
    pg.sql(f"alter table {ev} attach partition {ev}_3 for values in (3)")
    pg.sql(f"insert into {ev} values (31, 3, 'after attach')")
    pg.sql(f"alter table {ev} detach partition {ev}_1")
    if pg.version >= 15:
        pg.sql(f"insert into {ev}_1 values (2, 1, 'after detach')")
    pg.sql(f"create table {ev}_4 partition of {ev} for values in (4)")
    pg.sql(f"insert into {ev} values (40, 4, 'new partition')")
    if pg.version >= 15:
        assert got("ev", 3) == [("ev", 1), ("ev", 31), ("ev", 40)]
        assert got("all", 5) == [("ev", 1), ("ev_3", 30), ("ev", 31), ("ev_1", 2), ("ev", 40)]
    else:
        assert got("ev", 2) == [("ev", 1), ("ev", 40)]
        assert got("all", 4) == [("ev", 1), ("ev_3", 30), ("ev_3", 31), ("ev", 40)]
        # the way out on 14: the transaction that attaches also touches the publication
        new_table("5")
        pg.sql(f"insert into {ev}_5 values (50, 5, 'before attach')")
        p.wait_events(1, pred=lambda e: e["table"] == "ev_5")
        pg.sql(f"begin; alter table {ev} attach partition {ev}_5 for values in (5); "
               f'alter publication "{c.publication}" set (publish_via_partition_root = true); commit')
        pg.sql(f"insert into {ev} values (51, 5, 'after attach')")
        assert got("ev", 3)[2:] == [("ev", 51)]
    assert p.terminate() == 0


def test_root_and_leaf_subscriptions_side_by_side(pg, schema, cdc):
    """One change arrives under one name: with the root in the publication, its partitions' changes
    carry the root's name, so a subscription to a partition alone gets nothing and cdc says so at
    the start with the ways out. A partition published without its root arrives under its own name:
    a subscription to it works, and one to the root is told that no table of the publication
    matches."""
    make_root(pg, schema)
    ev = f"{schema}.ev"
    subs = [{"name": "root", "tables": [ev], "sink": "stdout"},
            {"name": "leaf", "tables": [f"{ev}_1"], "sink": "stdout"}]
    c, p = cdc.start(subscriptions=subs)
    pg.sql(f"insert into {ev} values (1, 1, 'a'), (2, 2, 'b')")
    assert [(e["subscription"], e["table"], e["new"]["id"]) for e in p.wait_events(2)] == \
        [("root", "ev", 1), ("root", "ev", 2)]
    assert (f'subscription leaf: "{schema}"."ev_1" is one of the partitions of "{schema}"."ev", and '
            f"publication {c.publication} sends their changes under that name (publish_via_partition_root), so "
            f'the subscription gets none of them: subscribe to "{schema}"."ev" (a where on its partition key '
            f'picks a partition\'s rows), or publish the partitions without "{schema}"."ev"') in p.stderr()
    assert p.terminate() == 0
    assert [e["subscription"] for e in p.events()] == ["root", "root"]

    c, p = cdc.start(subscriptions=subs, publish=[f"{ev}_1"])
    pg.sql(f"insert into {ev} values (3, 1, 'c'), (4, 2, 'd')")
    assert [(e["subscription"], e["table"], e["new"]["id"]) for e in p.wait_events(1)] == [("leaf", "ev_1", 3)]
    assert (f"subscription root: table pattern {ev} matches no table of publication {c.publication}, so "
            "nothing of it is streamed until one is added") in p.stderr()
    assert p.terminate() == 0
    assert len(p.events()) == 1


def test_a_publication_without_publish_via_partition_root(pg, schema, cdc):
    """A publication made before (here by hand, FOR TABLE of the root) sends the partitions' changes
    under their own names: the start names the statement that fixes it, cdc doctor too, and once it
    runs the root's subscription gets the changes that follow, under the root's name."""
    make_root(pg, schema)
    ev = f"{schema}.ev"
    c = cdc(subscriptions=[{"name": "root", "tables": [ev], "sink": "stdout"},
                           {"name": "leaf", "tables": [f"{ev}_1"], "sink": "stdout"}],
            source={"create": False})
    c.factory.pg.sql(f'select pg_create_logical_replication_slot(%s, %s)', (c.slot, "pgoutput"))
    pg.sql(f'create publication "{c.publication}" for table {ev}')
    fix = f'ALTER PUBLICATION "{c.publication}" SET (publish_via_partition_root = true)'
    doctor = subprocess.run([CDC_BIN, "doctor", "-c", c.path], capture_output=True, text=True, timeout=60)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert (f'warn  tables: subscription root: table "{schema}"."ev" is partitioned, and publication '
            f"{c.publication} sends its changes under its partitions' names (it lacks "
            f'publish_via_partition_root), so none arrives under "{schema}"."ev"') in doctor.stdout, doctor.stdout
    assert f"fix: {fix}" in doctor.stdout, doctor.stdout
    p = c.start()
    assert f"none arrives under \\\"{schema}\\\".\\\"ev\\\": {fix}" in p.stderr() or \
        f'none arrives under "{schema}"."ev": {fix}' in p.stderr(), p.stderr()
    pg.sql(f"insert into {ev} values (1, 1, 'a')")
    assert [(e["subscription"], e["table"]) for e in p.wait_events(1)] == [("leaf", "ev_1")]
    pg.sql(fix)
    pg.sql(f"insert into {ev} values (2, 1, 'b'), (3, 2, 'c')")
    assert [(e["subscription"], e["table"], e["new"]["id"]) for e in p.wait_events(3)][1:] == \
        [("root", "ev", 2), ("root", "ev", 3)]
    assert p.terminate() == 0

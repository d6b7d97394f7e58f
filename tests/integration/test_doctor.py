"""test_doctor.py: `cdc doctor` against real servers, each set up wrong in one way.

One PostgreSQL for the module (max_slot_wal_keep_size set, so a healthy setup passes every check);
each test breaks one thing in its own schema (or in a server of its own, for settings that need a
restart) and asserts the exact line (status, detail, fix) and the exit code. Kafka checks run against
the mock cluster (tests/kafka/mock_cluster.c). librdkafka's mock answers no DescribeConfigs, so the
brokers' auto.create.topics.enable and transaction.max.timeout.ms and a topic's cleanup.policy show
here only as unknown (a warning naming why). PostgreSQL 18's idle_replication_slot_timeout is checked
on an 18 server of its own (TempPostgres(version=18)).
"""

import argparse
import json
import os
import pwd
import re
import shlex
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import CDC_BIN, to_yaml, drop_slot, wait_for
from pg import PgPair, TempPostgres, TempStandby, find_bindir

_ids = iter(range(1, 10 ** 6))


@pytest.fixture(scope="module")
def server():
    with TempPostgres(max_slot_wal_keep_size="1GB") as s:
        yield s


@pytest.fixture
def space(server):
    """A schema, a table with a key in it, a directory for state and sockets, readable by all (so
    that the doctor may run as another user); dropped afterwards."""
    n = next(_ids)
    schema = f"doc{n}"
    server.sql(f"create schema {schema}")
    server.sql(f"create table {schema}.orders (id int primary key, status text)")
    d = tempfile.mkdtemp(prefix="cdc-doctor-")
    os.chmod(d, 0o755)
    yield {"n": n, "schema": schema, "dir": d, "slot": f"doc_slot{n}", "pub": f"doc_pub{n}"}
    drop_slot(server, f"doc_slot{n}")
    server.sql(f"drop publication if exists doc_pub{n}")
    server.sql(f"drop schema {schema} cascade")
    shutil.rmtree(d, ignore_errors=True)


def config(server, sp, dsn=None, source=None, subscriptions=None, **top):
    schema = sp["schema"]
    cfg = {
        "source": {"dsn": dsn or server.dsn, "slot": sp["slot"], "publication": sp["pub"],
                   "create": True, "publish": [f"{schema}.*"]},
        "state_dir": os.path.join(sp["dir"], "state"),
        "status": {"socket": os.path.join(sp["dir"], "status.sock")},
        "subscribers": {"socket": os.path.join(sp["dir"], "events.sock")},
        "subscriptions": subscriptions or [{"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"}],
    }
    if source:
        cfg["source"].update(source)
    cfg.update(top)
    path = os.path.join(sp["dir"], "cdc.yaml")
    with open(path, "w") as f:
        f.write(to_yaml(cfg))
    os.chmod(path, 0o644)
    return path


class Finding(tuple):
    """(status, check, detail, fix, sql, run): equal to a 4-tuple (status, check, detail, fix) too,
    when it has neither sql nor run."""

    def __eq__(self, other):
        if isinstance(other, tuple) and len(other) == 4:
            return tuple(self[:4]) == other and self[4] is None and self[5] is None
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = tuple.__hash__


def doctor(path, *extra, user=None):
    """Runs cdc doctor; returns (exit code, the findings as (status, check, detail, fix, sql, run)
    tuples, the text). sql is the statements of the fix's "sql:" line, run its "run:" lines (shell
    commands) joined by newlines; None when there are none."""
    args = [CDC_BIN, "doctor", "-c", path] + list(extra)
    if user:
        args = ["runuser", "-u", user, "--"] + args
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.stderr == "", p.stderr
    found = []
    for ln in p.stdout.splitlines()[:-1]:
        label = ln[6:11] if ln.startswith("      ") else None
        if label in ("fix: ", "sql: ", "run: "):
            i = {"fix: ": 3, "sql: ": 4, "run: ": 5}[label]
            f = list(found[-1])
            f[i] = ln[11:] if f[i] is None else f[i] + "\n" + ln[11:]
            found[-1] = tuple(f)
            continue
        status, rest = ln.split("  ", 1)
        check, detail = rest.split(": ", 1)
        found.append((status, check, detail, None, None, None))
    assert p.stdout.splitlines()[-1].startswith("doctor: "), p.stdout
    return p.returncode, [Finding(f) for f in found], p.stdout


def cdc_run_says(path, timeout=60):
    """cdc run's stderr once it logged an error with a fix (issue 31: it says what doctor says), or
    exited; cdc is stopped then."""
    err = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([CDC_BIN, "run", "-c", path], stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        def said():
            err.seek(0)
            text = err.read()
            return text if ". fix: " in text or p.poll() is not None else None
        return wait_for(said, timeout, what="cdc run to say what to fix")
    finally:
        p.kill()
        p.wait()
        err.close()


def run_sql(pg, sql):
    """A fix's sql: line, pasted into psql as a superuser (psql sends each statement on its own, so
    ALTER SYSTEM runs outside a transaction block, as in a terminal)."""
    p = subprocess.run([os.path.join(pg.client_bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg.dsn],
                       input=sql + "\n", capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"{sql}\n{p.stdout}{p.stderr}"


def steady(found):
    """The findings with the free space of state_dir's disk (a figure of the moment) left out."""
    return [(st, check, re.sub(r"writable, [0-9.]+ [MG]iB free", "writable, ... free", detail), fix, sql, run)
            for st, check, detail, fix, sql, run in found]


def line(found, check, status=None):
    """The findings of one check (of one status)."""
    return [f for f in found if f[1] == check and (status is None or f[0] == status)]


def test_a_healthy_setup_passes_every_check_and_changes_nothing(server, space):
    path = config(server, space)
    rc, found, text = doctor(path)
    assert rc == 0, text
    assert all(f[0] == "pass" for f in found), text
    checks = [f[1] for f in found]
    for c in ("server", "wal_level", "max_replication_slots", "max_wal_senders", "role", "publication",
              "tables", "pg_logical_emit_message", "slot", "max_slot_wal_keep_size", "state_dir",
              "sockets"):
        assert c in checks, text
    assert ("pass", "publication",
            f'does not exist; cdc will create it at its first start: CREATE PUBLICATION "{space["pub"]}" '
            f'FOR TABLES IN SCHEMA "{space["schema"]}" WITH (publish_via_partition_root = true)', None, None, None) in found
    assert ("pass", "slot", f"{space['slot']} does not exist; cdc will create it (plugin pgoutput)",
            None, None, None) in found
    # read only: neither the slot nor the publication it would create exists, nor state_dir
    assert not server.sql("select 1 from pg_replication_slots where slot_name = %s", (space["slot"],))
    assert not server.sql("select 1 from pg_publication where pubname = %s", (space["pub"],))
    assert not os.path.exists(os.path.join(space["dir"], "state"))
    # --json: the same findings, the same exit code
    p = subprocess.run([CDC_BIN, "doctor", "-c", path, "--json"], capture_output=True, text=True)
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["exit"] == 0 and doc["status"] == "pass"
    assert doc["counts"] == {"pass": len(found), "warn": 0, "fail": 0}
    # The state_dir's free space is the disk's now: other processes write to it between the runs.
    assert steady([(c["status"], c["check"], c["detail"], c["fix"], c["sql"], c["run"]) for c in doc["checks"]]) == \
        steady(found)


def test_the_readme_least_privilege_role_with_a_schema_glob(server, space):
    """The new user's case: publish: ["public.*"] with a role that has LOGIN REPLICATION and owns
    its tables, not superuser. TABLES IN SCHEMA needs a superuser, so cdc publishes FOR TABLE the
    tables the role owns; a table it does not own is a warning; owning none of them, cdc would stop
    with the ways out (tests/integration/test_publication.py runs cdc itself)."""
    role = f"app_cdc{space['n']}"
    server.sql(f"create role {role} login replication")
    s, p = space["schema"], space["pub"]
    try:
        path = config(server, space, dsn=server.dsn.replace("user=postgres", f"user={role}"))
        rc, found, text = doctor(path)
        assert line(found, "publication") == [(
            "fail", "publication",
            f"does not exist, and cdc would stop: cdc's role may not create publication {p}: FOR TABLES IN "
            f"SCHEMA and FOR ALL TABLES need a superuser, and FOR TABLE the tables' ownership, but the role "
            f'owns none of the 1 tables source.publish matches ("{s}"."orders"). Ways out: have a superuser '
            f'run CREATE PUBLICATION "{p}" FOR TABLES IN SCHEMA "{s}" WITH (publish_via_partition_root = true); or '
            f'make cdc\'s role their owner (ALTER '
            f"TABLE ... OWNER TO ...); or list in source.publish tables the role owns",
            f"create it beforehand, as a superuser; or make role {role} the tables' owner",
            f'CREATE PUBLICATION "{p}" FOR TABLES IN SCHEMA "{s}" WITH (publish_via_partition_root = true);', None)], text
        assert line(found, "role") == [("pass", "role", f"role {role}: LOGIN REPLICATION", None, None, None)]
        assert rc == 2
        # owning orders, without CREATE on the database: doctor and cdc run name the same GRANT
        server.sql(f"alter table {s}.orders owner to {role}")
        rc, found, text = doctor(path)
        words = ("as a superuser or the database's owner; or create the publication beforehand as its tables' "
                 f'owner: CREATE PUBLICATION "{p}" FOR TABLE "{s}"."orders" WITH (publish_via_partition_root = true)')
        grant = f'GRANT CREATE ON DATABASE "postgres" TO "{role}";'
        assert line(found, "publication") == [(
            "fail", "publication", f'cdc would run CREATE PUBLICATION "{p}" FOR TABLE "{s}"."orders" WITH (publish_via_partition_root = true), and role '
            f"{role} lacks CREATE on the database", words, grant, None)], text
        said = cdc_run_says(path)
        assert "creating the publication failed: ERROR:  permission denied for database postgres" in said, said
        assert f". fix: {words}; sql: {grant}" in said, said
        run_sql(server, grant)  # the fix, as printed
        # owning orders (and not extra): FOR TABLE orders, extra named with its owner's statement
        server.sql(f"create table {s}.extra (id int primary key)")
        rc, found, text = doctor(path)
        assert line(found, "publication") == [
            ("warn", "publication",
             f'table "{s}"."extra" matches source.publish, but cdc\'s role does not own it, so cdc cannot add '
             f'it to publication "{p}": its owner or a superuser can run ALTER PUBLICATION "{p}" ADD TABLE '
             f'"{s}"."extra"',
             "have the table's owner or a superuser add it, or make it role's own", None, None),
            ("pass", "publication",
             f'does not exist; cdc will create it at its first start: CREATE PUBLICATION "{p}" FOR TABLE '
             f'"{s}"."orders" WITH (publish_via_partition_root = true)', None, None, None)], text
    finally:
        server.sql(f"alter table {s}.orders owner to postgres")
        server.sql(f"drop table if exists {s}.extra")
        server.sql(f"revoke create on database postgres from {role}")
        server.sql(f"drop role {role}")


def test_a_role_without_replication(server, space):
    role = f"norep{space['n']}"
    server.sql(f"create role {role} login")
    try:
        path = config(server, space, dsn=server.dsn.replace("user=postgres", f"user={role}"),
                      source={"create": False})
        server.sql(f"create publication {space['pub']} for table {space['schema']}.orders")
        rc, found, text = doctor(path)
        assert line(found, "role") == [(
            "fail", "role",
            f"role {role} lacks REPLICATION: the replication connection (and creating the slot) would be "
            f"refused", "as a superuser", f'ALTER ROLE "{role}" REPLICATION;', None)], text
        assert rc == 2
        # cdc run's replication connection is refused; it says what doctor says (and retries)
        assert f'. fix: as a superuser; sql: ALTER ROLE "{role}" REPLICATION;' in cdc_run_says(path)
        run_sql(server, line(found, "role")[0][4])  # the fix, as printed
        rc, found, text = doctor(path)
        assert [f[0] for f in line(found, "role")] == ["pass"], text
    finally:
        server.sql(f"drop role {role}")


def test_a_table_without_a_key_that_a_snapshot_reads(server, space):
    """A table without a key is backfilled by block ranges; without REPLICA IDENTITY FULL a
    consumer cannot apply its updates and deletes, which doctor says (a warning)."""
    s = space["schema"]
    server.sql(f"create table {s}.nokey (v int)")
    path = config(server, space, subscriptions=[
        {"name": "snap", "tables": [f"{s}.nokey"], "sink": "stdout", "snapshot": True}])
    rc, found, text = doctor(path)
    assert line(found, "backfill") == [(
        "warn", "backfill",
        f"{s}.nokey has no key, so a consumer of its backfill can apply its updates and deletes only "
        f"with REPLICA IDENTITY FULL", "as a superuser", f'ALTER TABLE "{s}"."nokey" REPLICA IDENTITY FULL;',
        None)], text
    assert rc == 1
    run_sql(server, line(found, "backfill")[0][4])  # the fix, as printed
    rc, found, text = doctor(path)
    assert [x[0] for x in line(found, "backfill")] == ["pass"], text


def test_replica_identity_default_with_changed(server, space):
    """The same check and messages as cdc's own (cdc/source/catalog.c): changed: and an old.column
    that is not the key need REPLICA IDENTITY FULL; old.id, the key, does not."""
    s = space["schema"]
    path = config(server, space, subscriptions=[
        {"name": "paid", "tables": [f"{s}.orders"], "sink": "stdout", "operations": ["update"],
         "changed": ["status"]},
        {"name": "was", "tables": [f"{s}.orders"], "sink": "stdout", "where": "old.status = 'new'"},
        {"name": "key", "tables": [f"{s}.orders"], "sink": "stdout", "where": "old.id <> new.id"}])
    rc, found, text = doctor(path)
    q = f'"{s}"."orders"'
    assert line(found, "replica_identity") == [
        ("fail", "replica_identity",
         f"subscription paid uses changed: on table {q}, whose replica identity does not send the old row of an "
         f"update: cdc refuses it", "as the table's owner", f"ALTER TABLE {q} REPLICA IDENTITY FULL;", None),
        ("fail", "replica_identity",
         f"subscription was reads old.status in its where on table {q}, whose replica identity does not send "
         f"that column in the old row: cdc refuses it", "as the table's owner",
         f"ALTER TABLE {q} REPLICA IDENTITY FULL;", None),
        ("pass", "replica_identity", "subscription key uses old. in where: its 1 tables send the old row it reads",
         None, None, None)], text
    assert rc == 2
    run_sql(server, line(found, "replica_identity")[0][4])  # the fix, as printed
    rc, found, text = doctor(path)
    assert [f[0] for f in line(found, "replica_identity")] == ["pass"] * 3, text
    assert ("pass", "replica_identity",
            "subscription paid uses changed:: its 1 tables send the old row it reads", None, None, None) in found
    assert rc == 0


def test_a_missing_slot_without_create(server, space):
    path = config(server, space, source={"create": False})
    server.sql(f"create publication {space['pub']} for table {space['schema']}.orders")
    rc, found, text = doctor(path)
    slot = space["slot"]
    assert line(found, "slot") == [(
        "fail", "slot", f"{slot} does not exist", "as the role of source.dsn, or set source.create: true",
        f"SELECT pg_catalog.pg_create_logical_replication_slot('{slot}', 'pgoutput');", None)], text
    assert rc == 2
    assert (f"replication slot {slot} does not exist. fix: as the role of source.dsn, or set source.create: true; "
            f"sql: SELECT pg_catalog.pg_create_logical_replication_slot('{slot}', 'pgoutput');") in cdc_run_says(path)
    run_sql(server, line(found, "slot")[0][4])  # the fix, as printed
    rc, found, text = doctor(path)
    assert line(found, "slot")[0][0] == "pass" and rc == 0, text


def test_a_missing_publication_without_create(server, space):
    path = config(server, space, source={"create": False})
    server.sql(f"select pg_create_logical_replication_slot('{space['slot']}', 'pgoutput')")
    rc, found, text = doctor(path)
    assert line(found, "publication") == [(
        "fail", "publication", f"{space['pub']} does not exist",
        "as the tables' owner or a superuser, or set source.create: true",
        f'CREATE PUBLICATION "{space["pub"]}" FOR TABLES IN SCHEMA "{space["schema"]}" WITH (publish_via_partition_root = true);', None)], text
    assert rc == 2
    run_sql(server, line(found, "publication")[0][4])  # the fix, as printed (it read FOR TABLE ...)
    rc, found, text = doctor(path)
    assert line(found, "publication") == [("pass", "publication", f"{space['pub']} exists (1 tables; "
                                           "publish_via_partition_root on)", None, None, None)] and rc == 0, text


def test_a_subscription_table_not_in_the_publication(server, space):
    s = space["schema"]
    server.sql(f"create table {s}.other (id int primary key)")
    server.sql(f"create publication {space['pub']} for table {s}.orders")
    path = config(server, space)
    rc, found, text = doctor(path)
    assert line(found, "tables") == [(
        "warn", "tables",
        f"subscription all: 1 of its 2 tables are not in publication {space['pub']}, so their changes never "
        f'reach cdc: "{s}"."other"', "as the publication's and the tables' owner, or a superuser",
        f'ALTER PUBLICATION "{space["pub"]}" ADD TABLE "{s}"."other";', None)], text
    assert rc == 1
    run_sql(server, line(found, "tables")[0][4])  # the fix, as printed
    rc, found, text = doctor(path)
    assert line(found, "tables")[0][0] == "pass" and rc == 0, text


def test_a_slot_with_another_plugin(server, space):
    slot = space["slot"]
    server.sql(f"select pg_create_logical_replication_slot('{slot}', 'test_decoding')")
    rc, found, text = doctor(config(server, space))
    assert line(found, "slot") == [(
        "fail", "slot", f"{slot} is a logical slot with plugin test_decoding, and cdc needs plugin pgoutput",
        "choose another source.slot, or drop this one if nothing else uses it",
        f"SELECT pg_catalog.pg_drop_replication_slot('{slot}');", None)], text
    assert rc == 2
    run_sql(server, line(found, "slot")[0][4])  # the fix, as printed
    rc, found, text = doctor(config(server, space))
    assert line(found, "slot")[0][0] == "pass" and rc == 0, text


def test_a_healthy_slot_shows_its_state(server, space):
    slot = space["slot"]
    server.sql(f"select pg_create_logical_replication_slot('{slot}', 'pgoutput')")
    rc, found, text = doctor(config(server, space))
    (f,) = line(found, "slot")
    assert f[0] == "pass" and f[2].startswith(f"{slot}: pgoutput, wal_status reserved, "), text
    assert f[2].endswith(" bytes behind the server"), text


def test_heartbeat_without_execute_on_pg_logical_emit_message(server, space):
    role = f"nohb{space['n']}"
    sig = "boolean,text,text,boolean" if server.version >= 17 else "boolean,text,text"  # 17: flush
    server.sql(f"create role {role} login replication")
    server.sql(f"revoke execute on function pg_logical_emit_message({sig}) from public")
    try:
        server.sql(f"create publication {space['pub']} for table {space['schema']}.orders")
        path = config(server, space, dsn=server.dsn.replace("user=postgres", f"user={role}"),
                      source={"heartbeat": "10s"})
        rc, found, text = doctor(path)
        assert line(found, "pg_logical_emit_message") == [(
            "fail", "pg_logical_emit_message",
            f"role {role} may not execute pg_logical_emit_message, which writes a backfill's watermarks",
            "as a superuser",
            f'GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message({sig}) TO "{role}";', None)], text
        assert rc == 2
        run_sql(server, line(found, "pg_logical_emit_message")[0][4])  # the fix, as printed
        rc, found, text = doctor(path)
        assert line(found, "pg_logical_emit_message")[0][0] == "pass", text
        server.sql(f"revoke execute on function pg_logical_emit_message({sig}) from {role}")
    finally:
        server.sql(f"grant execute on function pg_logical_emit_message({sig}) to public")
        server.sql(f"drop role {role}")


def test_max_slot_wal_keep_size_unlimited(server, space):
    server.sql("alter system set max_slot_wal_keep_size = -1")
    server.sql("select pg_reload_conf()")
    try:
        rc, found, text = doctor(config(server, space))
        assert line(found, "max_slot_wal_keep_size") == [(
            "warn", "max_slot_wal_keep_size",
            "is -1 (unlimited): a cdc that stops consuming makes the server keep WAL until its disk is full",
            "as a superuser (50GB: what the disk can spare), and alert on cdc_source_safe_wal_size_bytes "
            "(deploy/monitoring)",
            "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; SELECT pg_catalog.pg_reload_conf();", None)], text
        assert rc == 1
        run_sql(server, line(found, "max_slot_wal_keep_size")[0][4])  # the fix, as printed
        rc, found, text = doctor(config(server, space))
        assert line(found, "max_slot_wal_keep_size") == [(
            "pass", "max_slot_wal_keep_size", "50GB: the server keeps at most this much WAL for the slot", None,
            None, None)], text
    finally:
        server.sql("alter system reset max_slot_wal_keep_size")
        server.sql("select pg_reload_conf()")


WAL_LEVEL_WORDS = (" (on a managed service, its logical replication parameter instead, e.g. "
                   "rds.logical_replication = 1)")


def test_wal_level_replica():
    """wal_level from postgresql.conf: the fix runs as printed (then a restart). Issue 31: from the
    server's command line, where ALTER SYSTEM does nothing, doctor says where to change it; cdc run
    says the same and creates nothing first (it created the publication, then failed on the slot)."""
    with TempPostgres(wal_level="replica") as other:
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            path = config(other, sp)
            rc, found, text = doctor(path)
            sql = "ALTER SYSTEM SET wal_level = 'logical';"
            assert line(found, "wal_level") == [(
                "fail", "wal_level", "is replica, and logical decoding needs logical",
                "as a superuser, then restart PostgreSQL" + WAL_LEVEL_WORDS, sql, None)], text
            assert rc == 2
            # cdc run: the same words, and nothing created
            out = subprocess.run([CDC_BIN, "run", "-c", path], capture_output=True, text=True, timeout=60)
            assert out.returncode == 1
            assert ("wal_level is replica, and logical decoding needs logical. fix: as a superuser, then restart "
                    f"PostgreSQL{WAL_LEVEL_WORDS}; sql: {sql}") in out.stderr, out.stderr
            assert not other.sql("select 1 from pg_publication") and not other.sql("select 1 from pg_replication_slots")
            run_sql(other, sql)  # the fix, as printed
            other.restart()
            rc, found, text = doctor(path)
            assert line(found, "wal_level") == [("pass", "wal_level", "logical", None, None, None)], text
            # set on the server's command line: ALTER SYSTEM is overridden, and doctor says where instead
            other.stop()
            other.options = "-c wal_level=replica"
            other.start()
            rc, found, text = doctor(path)
            assert line(found, "wal_level") == [(
                "fail", "wal_level", "is replica, and logical decoding needs logical",
                "wal_level comes from the server's command line (wal_level=replica), which ALTER SYSTEM does not "
                "override: set wal_level = logical where the server is started (postgres -c, pg_ctl -o, its "
                "service's options), then restart PostgreSQL" + WAL_LEVEL_WORDS, None, None)], text
            out = subprocess.run([CDC_BIN, "run", "-c", path], capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "fix: wal_level comes from the server's command line" in out.stderr
        finally:
            shutil.rmtree(sp["dir"], ignore_errors=True)


def test_idle_replication_slot_timeout_on_18():
    """PostgreSQL 18 invalidates a slot idle for idle_replication_slot_timeout: off passes, set warns."""
    with TempPostgres(version=18, max_slot_wal_keep_size="1GB") as other:
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            # (this test is about one line: other checks of a bare 18 server may warn)
            rc, found, text = doctor(config(other, sp))
            assert line(found, "idle_replication_slot_timeout") == [(
                "pass", "idle_replication_slot_timeout", "0 (off)", None, None, None)], text
            other.sql("alter system set idle_replication_slot_timeout = '1h'")
            other.sql("select pg_reload_conf()")
            rc, found, text = doctor(config(other, sp))
            assert line(found, "idle_replication_slot_timeout") == [(
                "warn", "idle_replication_slot_timeout",
                "is 1h: the server invalidates a slot nobody streamed that long, so a cdc stopped longer "
                "loses its slot", "as a superuser; or set source.on_slot_lost: resync",
                "ALTER SYSTEM SET idle_replication_slot_timeout = '0'; SELECT pg_catalog.pg_reload_conf();",
                None)], text
            assert rc == 1, text  # a warning, no failure
            run_sql(other, line(found, "idle_replication_slot_timeout")[0][4])  # the fix, as printed
            rc, found, text = doctor(config(other, sp))
            assert line(found, "idle_replication_slot_timeout")[0][0] == "pass", text
        finally:
            shutil.rmtree(sp["dir"], ignore_errors=True)


def test_no_free_replication_slot():
    with TempPostgres(max_replication_slots=1, max_slot_wal_keep_size="1GB") as other:
        other.sql("select pg_create_physical_replication_slot('taken')")
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            path = config(other, sp)
            rc, found, text = doctor(path)
            words = "as a superuser, then restart PostgreSQL; or drop a slot nothing uses (pg_drop_replication_slot)"
            sql = "ALTER SYSTEM SET max_replication_slots = '2';"
            assert line(found, "max_replication_slots") == [(
                "fail", "max_replication_slots", "all 1 in use: no room for slot s", words, sql, None)], text
            assert rc == 2
            # cdc run fails creating the slot, saying what doctor says (issue 31)
            out = subprocess.run([CDC_BIN, "run", "-c", path], capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and f"all replication slots are in use" in out.stderr, out.stderr
            assert f". fix: {words}; sql: {sql}" in out.stderr, out.stderr
            other.sql("drop publication if exists p")
            run_sql(other, sql)  # the fix, as printed
            other.restart()
            rc, found, text = doctor(path)
            assert line(found, "max_replication_slots")[0][0] == "pass", text
        finally:
            shutil.rmtree(sp["dir"], ignore_errors=True)


def test_a_state_dir_that_is_not_writable(server, space):
    state = os.path.join(space["dir"], "state")
    os.mkdir(state, 0o755)
    user = None
    if os.geteuid() == 0:
        user = "nobody"  # root may write anywhere: the doctor runs as a user who may not
    else:
        os.chmod(state, 0o555)
    uid = pwd.getpwnam(user).pw_uid if user else os.geteuid()
    rc, found, text = doctor(config(server, space), user=user)
    words = (f"as root, for uid {uid} (cdc's user, which cdc doctor runs as), or set state_dir" if uid
             else "as root, or set state_dir")
    assert line(found, "state_dir") == [(
        "fail", "state_dir", f"{state} is not writable by uid {uid}", words, None, f"chown {uid} {state}")], text
    assert rc == 2
    if os.geteuid() == 0:  # the fix, as printed, as root
        subprocess.run(["sh", "-c", line(found, "state_dir")[0][5]], check=True)
        rc, found, text = doctor(config(server, space), user=user)
        assert line(found, "state_dir")[0][0] == "pass", text
    os.chmod(state, 0o755)


def test_a_socket_path_that_is_not_a_socket(server, space):
    path = os.path.join(space["dir"], "status.sock")
    with open(path, "w") as f:
        f.write("not a socket")
    rc, found, text = doctor(config(server, space))
    assert line(found, "sockets", "fail") == [(
        "fail", "sockets",
        f"status.socket {path} exists and is not a socket (cdc never replaces what is not a socket)",
        f"remove {path}, or set status.socket to another path", None, None)], text
    assert rc == 2
    assert stat.S_ISREG(os.stat(path).st_mode)


def test_a_socket_directory_that_does_not_exist(server, space):
    d = os.path.join(space["dir"], "run")
    path = config(server, space, subscriptions=[
        {"name": "q", "tables": [f"{space['schema']}.orders"], "sink": "socket"}],
        subscribers={"socket": os.path.join(d, "events.sock")})
    rc, found, text = doctor(path)
    uid = os.geteuid()
    words = (f"as root, for uid {uid} (cdc's user, which cdc doctor runs as), or set subscribers.socket" if uid
             else "as root, or set subscribers.socket")
    assert line(found, "sockets", "fail") == [(
        "fail", "sockets", f"subscribers.socket {d}/events.sock: directory {d} does not exist", words, None,
        f"mkdir -p {d}" + (f" && chown {uid} {d}" if uid else ""))], text
    assert rc == 2
    subprocess.run(["sh", "-c", line(found, "sockets", "fail")[0][5]], check=True)  # the fix, as printed
    rc, found, text = doctor(path)
    assert not line(found, "sockets", "fail") and rc == 0, text


def kafka_tool(kafka, command):
    """Runs a fix's kafka-topics.sh or kafka-configs.sh line against the mock broker. No JVM here, so a
    stand-in takes the tool's place: it parses the line with the options Kafka 3 documents for it
    (--bootstrap-server is required since 3.0 dropped --zookeeper; the line failed on that), checks
    that it names the configuration's brokers, and does what the tool would: creates the topic."""
    argv = shlex.split(command)
    ap = argparse.ArgumentParser(prog=argv[0], exit_on_error=False)
    ap.add_argument("--bootstrap-server", required=True)
    if argv[0] == "kafka-topics.sh":
        ap.add_argument("--create", action="store_true", required=True)
        ap.add_argument("--topic", required=True)
        ap.add_argument("--partitions", type=int, default=1)
        ap.add_argument("--config", action="append", default=[])
    else:
        assert argv[0] == "kafka-configs.sh", command
        ap.add_argument("--alter", action="store_true", required=True)
        ap.add_argument("--entity-type", choices=["topics"], required=True)
        ap.add_argument("--entity-name", required=True)
        ap.add_argument("--add-config", required=True)
    a = ap.parse_args(argv[1:])
    assert a.bootstrap_server == kafka.bootstrap, command
    if argv[0] == "kafka-topics.sh":
        kafka.create_topic(a.topic, a.partitions)


def kafka_config(server, space, kafka, **kw):
    return config(server, space, subscriptions=[
        {"name": "k", "tables": [f"{space['schema']}.orders"], "sink": "kafka"}],
        kafka={"brokers": kafka.bootstrap, **kw})


def test_kafka_brokers_down(server, space, kafka):
    kafka.all_down()
    rc, found, text = doctor(kafka_config(server, space, kafka), "--kafka-timeout", "1500")
    (f,) = line(found, "kafka_brokers")
    assert f[0] == "fail" and f[2].startswith(f"no metadata from {kafka.bootstrap} within 1500 ms: "), text
    assert f[3] == ("check kafka.brokers (host:port,...), the security settings in kafka.properties, and "
                    "that the brokers run and this host reaches them")
    assert not line(found, "kafka_topics")  # nothing more to ask
    assert rc == 2


def test_kafka_topic_missing_and_auto_create_unknown(server, space, kafka):
    """The mock answers metadata but no DescribeConfigs: auto.create.topics.enable is unknown."""
    topic = f"cdc.{space['schema']}.orders"
    rc, found, text = doctor(kafka_config(server, space, kafka))
    assert line(found, "kafka_brokers") == [("pass", "kafka_brokers", f"{kafka.bootstrap}: 3 brokers answered",
                                             None, None, None)], text
    (f,) = line(found, "kafka_topics")
    assert f[0] == "warn" and f[2].startswith(
        f"1 missing ({topic}), and whether the brokers create topics on first use is unknown "
        "(auto.create.topics.enable: DescribeConfigs: "), text
    assert f[3:] == ("create them with Kafka's tool", None,
                     f"kafka-topics.sh --bootstrap-server {kafka.bootstrap} --create --topic {topic}")
    assert rc == 1
    kafka_tool(kafka, f[5])  # the fix, as printed (issue 31: it lacked --bootstrap-server)
    rc, found, text = doctor(kafka_config(server, space, kafka))
    assert line(found, "kafka_topics") == [("pass", "kafka_topics", "1 topic present", None, None, None)], text
    assert rc == 0


def test_kafka_exactly_once_positions_topic_and_transaction_timeout(server, space, kafka):
    positions = f"cdc.positions.{space['n']}"
    kafka.create_topic(f"cdc.{space['schema']}.orders", 1)
    path = kafka_config(server, space, kafka, exactly_once=True, positions_topic=positions)
    rc, found, text = doctor(path)
    assert line(found, "kafka_positions_topic") == [(
        "fail", "kafka_positions_topic",
        f"{positions} does not exist (one the brokers create on first use is not compacted, and the "
        "topic grows without end)", "create it, compacted, with Kafka's tool", None,
        f"kafka-topics.sh --bootstrap-server {kafka.bootstrap} --create --topic {positions} --partitions 1 "
        "--config cleanup.policy=compact")], text
    (f,) = line(found, "kafka_transactions")
    assert f[0] == "warn" and f[2].startswith(
        "the producer's transaction.timeout.ms is 600000; the brokers' transaction.max.timeout.ms is "
        "unknown (DescribeConfigs: "), text
    assert rc == 2
    kafka_tool(kafka, line(found, "kafka_positions_topic")[0][5])  # the fix, as printed
    rc, found, text = doctor(path)
    (f,) = line(found, "kafka_positions_topic")
    assert f[0] == "warn" and f[2].startswith(f"{positions} exists; its cleanup.policy is unknown "
                                              "(DescribeConfigs: "), text
    assert f[3:] == ("make it compacted with Kafka's tool", None,
                     f"kafka-configs.sh --bootstrap-server {kafka.bootstrap} --alter --entity-type topics "
                     f"--entity-name {positions} --add-config cleanup.policy=compact")
    kafka_tool(kafka, f[5])  # parses as the tool's options (the mock keeps no topic configs)
    assert rc == 1


def test_a_server_that_is_down(space):
    with TempPostgres() as other:
        dsn = other.dsn
    sp = dict(space, schema="public")
    rc, found, text = doctor(config(None, sp, dsn=dsn))
    (f,) = line(found, "server")
    assert f[0] == "fail" and f[2].startswith("cannot connect to PostgreSQL: "), text
    assert f[3].startswith("check source.dsn (host, port, dbname, user, password")
    assert not line(found, "wal_level")  # the database's checks need the connection
    assert line(found, "state_dir")[0][0] == "pass"  # the local ones still run
    assert rc == 2


# --- source.failover and standbys ----------------------------------------------------------------

STANDBY_SLOT = "standby_slot"


@pytest.fixture(scope="module")
def pair17():
    """A PostgreSQL 17 primary and a hot standby streaming from its physical slot standby_slot, slot
    synchronization on, the primary's synchronized_standby_slots naming standby_slot (PgPair);
    each test puts back what it breaks (restore())."""
    p = PgPair(version=17, max_slot_wal_keep_size="1GB")
    try:
        p.start()
        p.sql("create table public.orders (id int primary key, status text)")
        yield p
    finally:
        p.cleanup()


@pytest.fixture
def fspace(pair17):
    """As space, in the pair's public schema."""
    n = next(_ids)
    d = tempfile.mkdtemp(prefix="cdc-doctor-")
    os.chmod(d, 0o755)
    yield {"n": n, "schema": "public", "dir": d, "slot": f"doc_slot{n}", "pub": f"doc_pub{n}"}
    drop_slot(pair17.primary, f"doc_slot{n}")
    shutil.rmtree(d, ignore_errors=True)


def restore(pair, server, **settings):
    """Puts settings back on one of the pair (reloaded), then waits until the standby streams from
    its slot again (a changed primary_conninfo or primary_slot_name restarts its walreceiver)."""
    server.set(**settings)
    wait_for(lambda: pair.primary.sql("select active from pg_replication_slots where slot_name = %s",
                                      (STANDBY_SLOT,)) == [(True,)], 30, what="the standby to stream again")


def test_a_standby_before_16_and_failover_before_17():
    """A PostgreSQL 15 standby: no decoding there (16+), and source.failover needs 17."""
    with TempPostgres(version=15) as primary, TempStandby(primary) as standby:
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            rc, found, text = doctor(config(standby, sp, source={"failover": True}))
            (f,) = line(found, "server")
            assert f[0] == "fail" and f[2].startswith(f"PostgreSQL {standby.version}.") and f[2].endswith(
                " is a standby, and logical decoding on a standby needs 16 or later"), text
            assert f[3] == ("point source.dsn at the primary (or upgrade to PostgreSQL 16, which decodes on "
                            "a standby)")
            minor = primary.sql("select current_setting('server_version_num')::int % 10000")[0][0]
            assert line(found, "failover") == [(
                "fail", "failover",
                f"source.failover needs PostgreSQL 17 or later (failover slots), and the server is 15.{minor}: "
                "cdc refuses to start",
                "remove source.failover (before 17 a promotion loses the slot, and source.on_slot_lost says "
                "what cdc does then), or upgrade to PostgreSQL 17")], text
            # the 17 checks do not apply; the standby's own do
            assert not line(found, "sync_replication_slots") and not line(found, "synchronized_standby_slots")
            assert line(found, "hot_standby_feedback") == [("pass", "hot_standby_feedback", "on", None)]
            assert rc == 2
        finally:
            shutil.rmtree(sp["dir"], ignore_errors=True)


def test_failover_on_a_healthy_17_primary_through_a_multi_host_dsn(pair17, fspace):
    """The connection string that follows the primary (target_session_attrs=read-write) reaches the
    primary (the doctor's session is made read only after connecting, not before); the slot's
    failover flag as cdc will find it."""
    slot = fspace["slot"]
    path = config(None, fspace, dsn=pair17.dsn, source={"failover": True})
    rc, found, text = doctor(path)
    (f,) = line(found, "server")
    assert f[0] == "pass" and "(a standby)" not in f[2], text
    ready = ("pass", "synchronized_standby_slots",
             "standby_slot: active physical slots, so cdc receives only what those standbys have (a "
             "promotion of one loses nothing)", None)
    assert line(found, "failover") == [
        ("pass", "failover", f"{slot} does not exist yet; cdc creates it as a failover slot", None)], text
    assert line(found, "synchronized_standby_slots") == [ready], text
    assert not line(found, "hot_standby_feedback") and not line(found, "primary_dsn")  # a primary
    pair17.sql("select pg_create_logical_replication_slot(%s, 'pgoutput', false, false, false)", (slot,))
    rc, found, text = doctor(path)
    assert line(found, "failover") == [(
        "pass", "failover",
        f"{slot} is not a failover slot yet: cdc turns failover on at its next start "
        f"(ALTER_REPLICATION_SLOT {slot} (FAILOVER true))", None)], text
    drop_slot(pair17.primary, slot)
    pair17.sql("select pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)", (slot,))
    rc, found, text = doctor(path)
    assert line(found, "failover") == [(
        "pass", "failover", f"{slot} is a failover slot: a standby with sync_replication_slots = on keeps a copy",
        None)], text
    assert line(found, "synchronized_standby_slots") == [ready], text
    # without source.failover, none of it
    rc, found, text = doctor(config(None, fspace, dsn=pair17.dsn))
    assert not line(found, "failover") and not line(found, "synchronized_standby_slots"), text


SET_IT = ("as a superuser (the physical slots standbys stream from now: name those of the standbys that may be "
          "promoted)", "ALTER SYSTEM SET synchronized_standby_slots = 'standby_slot'; SELECT "
          "pg_catalog.pg_reload_conf();", None)
WHAT_TO_SET = ("set synchronized_standby_slots on the primary to the physical slot of each standby that may be "
               "promoted (its primary_slot_name)")


def test_synchronized_standby_slots_empty(pair17, fspace):
    pair17.primary.set(synchronized_standby_slots=None)
    try:
        rc, found, text = doctor(config(pair17.primary, fspace, source={"failover": True}))
        assert line(found, "synchronized_standby_slots") == [(
            "warn", "synchronized_standby_slots",
            "synchronized_standby_slots is empty on the primary: a promotion now may hand consumers changes "
            "the promoted server never had (the primary sends cdc changes its standbys may not have yet); "
            f"{WHAT_TO_SET} (synchronized_standby_slots_empty)", *SET_IT)], text
        assert rc >= 1
        # no standby streams from a physical slot: the fix starts with making one
        pair17.standby.set(primary_slot_name="")
        wait_for(lambda: pair17.sql("select active from pg_replication_slots where slot_name = %s",
                                    (STANDBY_SLOT,)) == [(False,)], 30, what="the standby to stream without its slot")
        rc, found, text = doctor(config(pair17.primary, fspace, source={"failover": True}))
        (f,) = line(found, "synchronized_standby_slots")
        assert f[0] == "warn" and f[3] == (
            "create a physical slot for each standby that may be promoted (SELECT "
            "pg_create_physical_replication_slot('standby_slot'), and primary_slot_name = 'standby_slot' on that "
            "standby), then ALTER SYSTEM SET synchronized_standby_slots = 'standby_slot'; SELECT pg_reload_conf()"), text
    finally:
        pair17.standby.set(primary_slot_name=STANDBY_SLOT)
        restore(pair17, pair17.primary, synchronized_standby_slots=STANDBY_SLOT)


def test_synchronized_standby_slots_naming_the_logical_slot(pair17, fspace):
    """The common mistake: cdc's own logical slot named (a reload refuses it, a start does not)."""
    slot = fspace["slot"]
    pair17.sql("select pg_create_logical_replication_slot(%s, 'pgoutput', false, false, true)", (slot,))
    pair17.primary.settings["synchronized_standby_slots"] = slot
    pair17.primary.restart()
    try:
        wait_for(lambda: pair17.sql("select active from pg_replication_slots where slot_name = %s",
                                    (STANDBY_SLOT,)) == [(True,)], 30, what="the standby to stream again")
        rc, found, text = doctor(config(pair17.primary, fspace, source={"failover": True}))
        assert line(found, "synchronized_standby_slots") == [(
            "fail", "synchronized_standby_slots",
            f"synchronized_standby_slots names {slot}, a logical slot (cdc's own): it must name physical "
            f"slots, and cdc's stream waits meanwhile; {WHAT_TO_SET}, not the logical slot "
            "(standby_slot_logical)", *SET_IT)], text
        assert rc == 2
    finally:
        restore(pair17, pair17.primary, synchronized_standby_slots=STANDBY_SLOT)


def test_synchronized_standby_slots_naming_a_slot_nobody_streams_then_one_dropped(pair17, fspace):
    pair17.sql("select pg_create_physical_replication_slot('spare_slot')")
    pair17.primary.set(synchronized_standby_slots=f"{STANDBY_SLOT}, spare_slot")
    try:
        path = config(pair17.primary, fspace, source={"failover": True})
        rc, found, text = doctor(path)
        assert line(found, "synchronized_standby_slots") == [(
            "fail", "synchronized_standby_slots",
            "no standby streams from slot spare_slot (synchronized_standby_slots): cdc's stream waits until "
            "one does, and a promotion now finds the slot's copy behind; start the standby, or remove the "
            "slot from synchronized_standby_slots (standby_slot_inactive)", *SET_IT)], text
        assert rc == 2
        pair17.sql("select pg_drop_replication_slot('spare_slot')")
        rc, found, text = doctor(path)
        assert line(found, "synchronized_standby_slots") == [(
            "fail", "synchronized_standby_slots",
            "synchronized_standby_slots names slot spare_slot, which does not exist on the primary: cdc's "
            f"stream waits for it; create the standby's physical slot, or {WHAT_TO_SET} "
            "(standby_slot_missing)", *SET_IT)], text
        run_sql(pair17.primary, SET_IT[1])  # the fix, as printed
        rc, found, text = doctor(path)
        assert line(found, "synchronized_standby_slots")[0][0] == "pass", text
    finally:
        pair17.primary.sql("alter system reset synchronized_standby_slots")
        restore(pair17, pair17.primary, synchronized_standby_slots=STANDBY_SLOT)
        drop_slot(pair17.primary, "spare_slot")


STANDBY_LINES = {
    "hot_standby_feedback": ("pass", "hot_standby_feedback", "on", None),
    "sync_replication_slots": ("pass", "sync_replication_slots",
                               "on: this standby keeps copies of the primary's failover slots", None),
    "primary_slot_name": ("pass", "primary_slot_name",
                          "standby_slot: the physical slot this standby streams from (the primary's "
                          "synchronized_standby_slots should name it)", None),
    "primary_conninfo": ("pass", "primary_conninfo",
                         "has a dbname: slot synchronization connects to the primary's database", None),
}


def test_a_17_standby_for_failover(pair17, fspace):
    """source.dsn at the standby with source.failover: cdc waits there for a promotion (a fail), and
    the standby's own setup for keeping a copy of the slot passes."""
    rc, found, text = doctor(config(pair17.standby, fspace, source={"failover": True}))
    host = f"{pair17.standby.host}:{pair17.standby.port}"
    assert line(found, "failover") == [(
        "fail", "failover",
        f"{host} is a standby, and source.failover needs the primary (a failover slot is made on the primary "
        "and synchronized to its standbys): cdc waits here until it is promoted",
        "point source.dsn at the primary (with several hosts, add target_session_attrs=read-write); the lines "
        "that follow check this standby as the target of a promotion")], text
    for name, want in STANDBY_LINES.items():
        assert line(found, name) == [want], text
    assert not line(found, "synchronized_standby_slots")  # the primary's, not asked of a standby
    assert rc == 2


@pytest.mark.parametrize("setting, bad, want", [
    ("hot_standby_feedback", False, (
        "fail", "hot_standby_feedback",
        "is off, and slot synchronization does not run without it: this standby keeps no copy of cdc's slot, "
        "and a promotion of it loses the slot",
        "as a superuser, on this standby (which should stream from a physical slot: primary_slot_name)",
        "ALTER SYSTEM SET hot_standby_feedback = 'on'; SELECT pg_catalog.pg_reload_conf();", None)),
    ("sync_replication_slots", False, (
        "fail", "sync_replication_slots",
        "is off, so this standby keeps no copy of the primary's failover slots: a promotion of it loses "
        "cdc's slot", "as a superuser, on this standby",
        "ALTER SYSTEM SET sync_replication_slots = 'on'; SELECT pg_catalog.pg_reload_conf();", None)),
    ("primary_slot_name", "", (
        "fail", "primary_slot_name",
        "is empty, and slot synchronization needs the physical slot this standby streams from: this standby "
        "keeps no copy of cdc's slot",
        "on the primary: SELECT pg_create_physical_replication_slot('standby_slot'), and name it in "
        "synchronized_standby_slots; here: ALTER SYSTEM SET primary_slot_name = 'standby_slot'; SELECT "
        "pg_reload_conf()")),
    ("primary_conninfo", "drop dbname", (
        "fail", "primary_conninfo",
        "has no dbname, and slot synchronization connects to a database of the primary: this standby keeps "
        "no copy of cdc's slot",
        "add dbname=postgres (a database of the primary) to primary_conninfo on this standby (ALTER SYSTEM SET "
        "primary_conninfo to its connection string with dbname=postgres, then SELECT pg_reload_conf())")),
])
def test_a_17_standby_set_up_wrong_for_failover(pair17, fspace, setting, bad, want):
    """One setting of the standby wrong at a time: its line fails with the fix, the others pass."""
    good = pair17.standby.settings[setting]
    if bad == "drop dbname":
        bad = good.replace(" dbname=postgres", "")
        assert bad != good
    pair17.standby.set(**{setting: bad})
    try:
        rc, found, text = doctor(config(pair17.standby, fspace, source={"failover": True}))
        assert line(found, setting) == [want], text
        for name, other in STANDBY_LINES.items():
            if name != setting:
                assert line(found, name) == [other], text
        assert rc == 2
        if len(want) == 6:  # the fix, as printed, on the standby
            run_sql(pair17.standby, want[4])
            rc, found, text = doctor(config(pair17.standby, fspace, source={"failover": True}))
            assert line(found, setting) == [STANDBY_LINES[setting]], text
    finally:
        pair17.standby.sql(f"alter system reset {setting}")
        restore(pair17, pair17.standby, **{setting: good})


def test_a_standby_role_that_may_not_read_primary_conninfo(pair17, fspace):
    role = f"docstandby{fspace['n']}"
    pair17.sql(f"create role {role} login replication")
    try:
        wait_for(lambda: pair17.standby.sql("select 1 from pg_roles where rolname = %s", (role,)), 30,
                 what="the role on the standby")
        dsn = pair17.standby.dsn.replace("user=postgres", f"user={role}")
        rc, found, text = doctor(config(None, fspace, dsn=dsn, source={"failover": True}))
        assert line(found, "primary_conninfo") == [(
            "warn", "primary_conninfo", f"role {role} may not read it (a superuser or pg_read_all_settings may)",
            "as a superuser (on the primary); or read it on this standby as a superuser",
            f'GRANT pg_read_all_settings TO "{role}";', None)], text
        assert line(found, "primary_slot_name") == [STANDBY_LINES["primary_slot_name"]], text  # readable by all
    finally:
        pair17.sql(f"drop role {role}")


def test_decoding_on_a_standby_needs_primary_dsn_for_heartbeats_and_backfills(pair17, fspace):
    standby, primary = pair17.standby, pair17.primary
    fix = ("set source.primary_dsn to the primary's connection string (cdc writes heartbeats, the re-sync "
           "marker and backfills' watermarks there)")
    rc, found, text = doctor(config(standby, fspace, source={"heartbeat": "10s"}))
    assert line(found, "primary_dsn") == [(
        "fail", "primary_dsn",
        "unset, and this server is a standby, which cannot be written to: source.heartbeat (cdc refuses to "
        "start)", fix)], text
    assert line(found, "hot_standby_feedback") == [STANDBY_LINES["hot_standby_feedback"]], text
    assert not line(found, "failover") and not line(found, "sync_replication_slots")  # no source.failover
    assert rc == 2
    subs = [{"name": "all", "tables": ["public.orders"], "sink": "stdout", "snapshot": True}]
    rc, found, text = doctor(config(standby, fspace, subscriptions=subs))
    assert line(found, "primary_dsn") == [(
        "fail", "primary_dsn",
        "unset, and this server is a standby, which cannot be written to: subscription all's backfills "
        "(snapshot: true) would fail", fix)], text
    rc, found, text = doctor(config(standby, fspace))
    assert line(found, "primary_dsn") == [(
        "pass", "primary_dsn",
        "unset: nothing configured writes into the WAL (source.heartbeat, snapshot: true, re-sync); an "
        "on-demand cdc backfill would need it", None)], text
    rc, found, text = doctor(config(standby, fspace, source={"heartbeat": "10s", "primary_dsn": primary.dsn}))
    assert line(found, "primary_dsn") == [(
        "pass", "primary_dsn", f"reaches {primary.host}:{primary.port}, a primary: heartbeats and backfills "
        "write there", None)], text
    rc, found, text = doctor(config(standby, fspace, source={"heartbeat": "10s", "primary_dsn": standby.dsn}))
    assert line(found, "primary_dsn") == [(
        "fail", "primary_dsn", f"reaches {standby.host}:{standby.port}, a standby too: heartbeats and "
        "backfills cannot write there",
        "point source.primary_dsn at the primary (with several hosts, add target_session_attrs=read-write)")], text
    # decoding here (no source.failover): without hot_standby_feedback the slot may be invalidated
    standby.set(hot_standby_feedback=False)
    try:
        rc, found, text = doctor(config(standby, fspace))
        assert line(found, "hot_standby_feedback") == [(
            "warn", "hot_standby_feedback",
            "is off, so the primary may remove catalog rows the slot here needs: the slot is then invalidated "
            "(source.on_slot_lost applies)",
            "as a superuser, on this standby (which should stream from a physical slot: primary_slot_name)",
            "ALTER SYSTEM SET hot_standby_feedback = 'on'; SELECT pg_catalog.pg_reload_conf();", None)], text
    finally:
        restore(pair17, standby, hot_standby_feedback=True)


def test_source_ddl_and_the_event_trigger(server, space):
    """source.ddl: the trigger cdc run would create (superuser, source.create), missing without
    create, and there once a superuser ran the statements cdc run wrote."""
    path = config(server, space, source={"ddl": True})
    rc, found, text = doctor(path)
    assert line(found, "ddl_trigger") == [(
        "pass", "ddl_trigger", "cdc's DDL event trigger is missing or older than this cdc; cdc run creates it "
        "(source.create, a superuser role)", None)], text
    path = config(server, space, source={"ddl": True, "create": False})
    server.sql(f"create publication {space['pub']} for table {space['schema']}.orders")
    server.sql(f"select pg_create_logical_replication_slot('{space['slot']}', 'pgoutput')")
    rc, found, text = doctor(path)
    assert line(found, "ddl_trigger") == [(
        "fail", "ddl_trigger", "cdc's DDL event trigger is missing or older than this cdc; source.create is off",
        "have a superuser run the statements of docs/events.md#ddl-events (cdc run writes them to "
        "state_dir/ddl-trigger.sql)")], text
    assert rc == 2
    run = subprocess.run([CDC_BIN, "run", "-c", path], capture_output=True, text=True, timeout=60)
    sql = os.path.join(space["dir"], "state", "ddl-trigger.sql")
    assert run.returncode == 1 and f"-f {sql}" in run.stderr, run.stderr
    try:
        r = subprocess.run([os.path.join(find_bindir(), "psql"), "-X", "-v", "ON_ERROR_STOP=1", "-d", server.dsn,
                            "-f", sql], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rc, found, text = doctor(path)
        assert line(found, "ddl_trigger") == [
            ("pass", "ddl_trigger", "cdc.capture_ddl() and its event triggers are there", None)], text
        server.sql("alter event trigger cdc_sql_drop disable")
        rc, found, text = doctor(path)
        assert line(found, "ddl_trigger") == [(
            "fail", "ddl_trigger", "cdc's event trigger cdc_sql_drop is disabled, and source.ddl needs it: "
            "ALTER EVENT TRIGGER cdc_sql_drop ENABLE (or set source.ddl: false)", None)], text
    finally:
        server.sql("drop event trigger if exists cdc_ddl_command_end")
        server.sql("drop event trigger if exists cdc_sql_drop")
        server.sql("drop schema if exists cdc cascade")


def test_kafka_schema_registry_answers_and_takes_the_tables_schemas(server, space, kafka):
    """format: avro: the registry answers (its level), and each table's schemas as cdc would register
    them now may be their subjects' next versions; after a change the registry would refuse (integer
    to text under BACKWARD), the check fails with the registry's reason and the command that
    changes the subject's level."""
    from registry_double import RegistryDouble
    schema = space["schema"]
    topic = f"cdc.{schema}.orders"
    kafka.create_topic(topic, 1)
    with RegistryDouble() as reg:
        path = config(server, space, subscriptions=[
            {"name": "k", "tables": [f"{schema}.orders"], "sink": "kafka", "format": "avro"}],
            kafka={"brokers": kafka.bootstrap, "schema_registry": {"url": reg.url}})
        rc, found, text = doctor(path)
        assert line(found, "kafka_schema_registry") == [
            ("pass", "kafka_schema_registry", "the schema registry answers; its compatibility level is BACKWARD",
             None)], text
        assert line(found, "kafka_schema_subjects") == [
            ("pass", "kafka_schema_subjects",
             "2 subjects may take the schemas cdc would register for the tables as they are now", None)], text
        assert reg.subjects() == {}  # the doctor registers nothing
        # the value's schema the doctor asked about, as it was when status was an integer
        asked = next(json.loads(r["body"])["schema"] for r in reg.requests
                     if r["path"].startswith(f"/compatibility/subjects/{topic}-value/"))
        old = asked.replace('{"name":"status","type":["null","string"]', '{"name":"status","type":["null","int"]')
        assert old != asked
        reg.registry.register(f"{topic}-value", old)
        rc, found, text = doctor(path)
        (f,) = line(found, "kafka_schema_subjects")
        assert f[0] == "fail" and f[2].startswith(
            f"subject {topic}-value (compatibility BACKWARD) refuses the schema cdc registers for the table as it "
            "is now: cdc would hold its rows until it is accepted: "), text
        assert "{errorType:'MISSING_UNION_BRANCH', description:'reader union lacking writer type: RECORD'" in f[2], text
        assert f[3:] == ("change the table back, or the subject's compatibility level", None,
                         "curl -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' -d "
                         f"'{{\"compatibility\":\"NONE\"}}' '{reg.url}/config/{topic}-value'")
        assert rc == 2
        subprocess.run(["sh", "-c", f[5]], check=True, capture_output=True, timeout=60)  # the fix, as printed
        rc, found, text = doctor(path)
        assert line(found, "kafka_schema_subjects")[0][0] == "pass", text
        # a registry that does not answer
    rc, found, text = doctor(path)
    (f,) = line(found, "kafka_schema_registry")
    assert f[0] == "fail" and f[2].startswith(f"schema registry {reg.url}: GET /config: "), text
    assert f[3].startswith("check kafka.schema_registry: url")


def test_a_misspelt_table_fails_with_the_closest_names(server, space):
    """Issue 31: public.ordres in source.publish and in a subscription's tables was a warning without
    a suggestion; a table named one by one that does not exist is a failure (cdc run stops on it),
    with the closest names; a glob that matches nothing yet stays a warning."""
    s = space["schema"]
    path = config(server, space, source={"publish": [f"{s}.ordres", f"{s}.new_*"]},
                  subscriptions=[{"name": "orders", "tables": [f"{s}.ordres"], "sink": "stdout"},
                                 {"name": "later", "tables": [f"{s}.new_*"], "sink": "stdout"}])
    rc, found, text = doctor(path)
    assert line(found, "publication", "fail") == [(
        "fail", "publication", f"source.publish names table {s}.ordres, which does not exist: did you mean "
        f"{s}.orders?", "correct the name in source.publish, or create the table first")], text
    assert line(found, "publication", "warn") == [(
        "warn", "publication", f"source.publish pattern {s}.new_* matches no table yet",
        "create the tables, or correct source.publish")], text
    assert line(found, "tables") == [
        ("fail", "tables", f"subscription orders names table {s}.ordres, which does not exist: did you mean "
         f"{s}.orders?: cdc refuses it", "correct the name in the subscription's tables, or create the table first"),
        ("warn", "tables", "subscription later: its tables match no table yet",
         "create the tables, or correct the subscription's tables: key")], text
    assert rc == 2

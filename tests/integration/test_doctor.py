"""test_doctor.py: `cdc doctor` against real servers, each set up wrong in one way.

One PostgreSQL for the module (max_slot_wal_keep_size set, so a healthy setup passes every check);
each test breaks one thing in its own schema (or in a server of its own, for settings that need a
restart) and asserts the exact line (status, detail, fix) and the exit code. Kafka checks run against
the mock cluster (tests/kafka/mock_cluster.c). librdkafka's mock answers no DescribeConfigs, so the
brokers' auto.create.topics.enable and transaction.max.timeout.ms and a topic's cleanup.policy show
here only as unknown (a warning naming why). PostgreSQL 18's idle_replication_slot_timeout is checked
on an 18 server of its own (TempPostgres(version=18)).
"""

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile

import pytest

from conftest import CDC_BIN, to_yaml, drop_slot
from pg import TempPostgres, find_bindir

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


def doctor(path, *extra, user=None):
    """Runs cdc doctor; returns (exit code, the findings as (status, check, detail, fix) tuples, the
    text)."""
    args = [CDC_BIN, "doctor", "-c", path] + list(extra)
    if user:
        args = ["runuser", "-u", user, "--"] + args
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.stderr == "", p.stderr
    lines, found = p.stdout.splitlines(), []
    for i, line in enumerate(lines[:-1]):
        if line.startswith("      fix: "):
            continue
        status, rest = line.split("  ", 1)
        check, detail = rest.split(": ", 1)
        fix = lines[i + 1][len("      fix: "):] if lines[i + 1].startswith("      fix: ") else None
        found.append((status, check, detail, fix))
    assert lines[-1].startswith("doctor: "), p.stdout
    return p.returncode, found, p.stdout


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
            f'FOR TABLES IN SCHEMA "{space["schema"]}"', None) in found
    assert ("pass", "slot", f"{space['slot']} does not exist; cdc will create it (plugin pgoutput)",
            None) in found
    # read only: neither the slot nor the publication it would create exists, nor state_dir
    assert not server.sql("select 1 from pg_replication_slots where slot_name = %s", (space["slot"],))
    assert not server.sql("select 1 from pg_publication where pubname = %s", (space["pub"],))
    assert not os.path.exists(os.path.join(space["dir"], "state"))
    # --json: the same findings, the same exit code
    p = subprocess.run([CDC_BIN, "doctor", "-c", path, "--json"], capture_output=True, text=True)
    doc = json.loads(p.stdout)
    assert p.returncode == 0 and doc["exit"] == 0 and doc["status"] == "pass"
    assert doc["counts"] == {"pass": len(found), "warn": 0, "fail": 0}
    assert [(c["status"], c["check"], c["detail"], c["fix"]) for c in doc["checks"]] == found


def test_the_readme_least_privilege_role_with_a_schema_glob_is_caught_before_the_first_start(server, space):
    """The new user's case: publish: ["public.*"] with a role that has LOGIN REPLICATION and owns
    its tables, not superuser. cdc would run FOR TABLES IN SCHEMA, which only a superuser may."""
    role = f"app_cdc{space['n']}"
    server.sql(f"create role {role} login replication")
    try:
        server.sql(f"alter table {space['schema']}.orders owner to {role}")
        path = config(server, space, dsn=server.dsn.replace("user=postgres", f"user={role}"))
        rc, found, text = doctor(path)
        s, p = space["schema"], space["pub"]
        assert line(found, "publication") == [(
            "fail", "publication",
            f'does not exist, and cdc would run CREATE PUBLICATION "{p}" FOR TABLES IN SCHEMA "{s}", which '
            f"only a superuser may; role {role} is not one",
            f'create it beforehand as a superuser: CREATE PUBLICATION "{p}" FOR TABLES IN SCHEMA "{s}"; or '
            f'list the tables in source.publish (e.g. ["public.orders"]), which cdc publishes FOR TABLE '
            f"as their owner")], text
        assert line(found, "role") == [("pass", "role", f"role {role}: LOGIN REPLICATION", None)]
        assert rc == 2
        # and the fix it names works: with the table listed, cdc publishes FOR TABLE as the owner
        path = config(server, space, dsn=server.dsn.replace("user=postgres", f"user={role}"),
                      source={"publish": [f"{s}.orders"]})
        server.sql(f"grant create on database postgres to {role}")
        rc, found, text = doctor(path)
        assert line(found, "publication") == [(
            "pass", "publication",
            f'does not exist; cdc will create it at its first start: CREATE PUBLICATION "{p}" FOR TABLE '
            f'"{s}"."orders"', None)], text
    finally:
        server.sql(f"alter table {space['schema']}.orders owner to postgres")
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
            f"refused", f"as a superuser: ALTER ROLE \"{role}\" REPLICATION")], text
        assert rc == 2
    finally:
        server.sql(f"drop role {role}")


def test_a_table_without_a_key_that_a_snapshot_reads(server, space):
    s = space["schema"]
    server.sql(f"create table {s}.nokey (v int)")
    path = config(server, space, subscriptions=[
        {"name": "snap", "tables": [f"{s}.nokey"], "sink": "stdout", "snapshot": True}])
    rc, found, text = doctor(path)
    assert line(found, "backfill") == [(
        "fail", "backfill",
        f"{s}.nokey has neither a primary key nor a unique index on NOT NULL columns, and a backfill "
        f"reads a table in key order", f'ALTER TABLE "{s}"."nokey" ADD PRIMARY KEY (...)')], text
    assert rc == 2


def test_replica_identity_default_with_changed(server, space):
    s = space["schema"]
    path = config(server, space, subscriptions=[
        {"name": "paid", "tables": [f"{s}.orders"], "sink": "stdout", "operations": ["update"],
         "changed": ["status"]}])
    rc, found, text = doctor(path)
    assert line(found, "replica_identity") == [(
        "fail", "replica_identity",
        "subscription paid uses changed:, which needs the old row of updates, and 1 of its tables do not "
        "send it (REPLICA IDENTITY is not FULL): cdc refuses to start",
        f'ALTER TABLE "{s}"."orders" REPLICA IDENTITY FULL')], text
    assert rc == 2
    server.sql(f"alter table {s}.orders replica identity full")
    rc, found, text = doctor(path)
    assert line(found, "replica_identity") == [(
        "pass", "replica_identity",
        "subscription paid uses changed:: its 1 tables are REPLICA IDENTITY FULL", None)], text
    assert rc == 0


def test_a_missing_slot_without_create(server, space):
    path = config(server, space, source={"create": False})
    server.sql(f"create publication {space['pub']} for table {space['schema']}.orders")
    rc, found, text = doctor(path)
    slot = space["slot"]
    assert line(found, "slot") == [(
        "fail", "slot", f"{slot} does not exist",
        f"SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput'); or set source.create: true")], text
    assert rc == 2


def test_a_missing_publication_without_create(server, space):
    path = config(server, space, source={"create": False})
    server.sql(f"select pg_create_logical_replication_slot('{space['slot']}', 'pgoutput')")
    rc, found, text = doctor(path)
    assert line(found, "publication") == [(
        "fail", "publication", f"{space['pub']} does not exist",
        f'CREATE PUBLICATION "{space["pub"]}" FOR TABLE ...; or set source.create: true')], text
    assert rc == 2


def test_a_subscription_table_not_in_the_publication(server, space):
    s = space["schema"]
    server.sql(f"create table {s}.other (id int primary key)")
    server.sql(f"create publication {space['pub']} for table {s}.orders")
    path = config(server, space)
    rc, found, text = doctor(path)
    assert line(found, "tables") == [(
        "warn", "tables",
        f"subscription all: 1 of its 2 tables are not in publication {space['pub']}, so their changes never "
        f'reach cdc: "{s}"."other"', f'ALTER PUBLICATION "{space["pub"]}" ADD TABLE "{s}"."other"')], text
    assert rc == 1


def test_a_slot_with_another_plugin(server, space):
    slot = space["slot"]
    server.sql(f"select pg_create_logical_replication_slot('{slot}', 'test_decoding')")
    rc, found, text = doctor(config(server, space))
    assert line(found, "slot") == [(
        "fail", "slot", f"{slot} is a logical slot with plugin test_decoding, and cdc needs plugin pgoutput",
        f"choose another source.slot, or drop this one if nothing else uses it: SELECT "
        f"pg_drop_replication_slot('{slot}')")], text
    assert rc == 2


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
            f'GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message({sig}) TO "{role}"')], text
        assert rc == 2
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
            "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB' (what the disk can spare); SELECT "
            "pg_reload_conf(); and alert on cdc_source_safe_wal_size_bytes (deploy/monitoring)")], text
        assert rc == 1
    finally:
        server.sql("alter system reset max_slot_wal_keep_size")
        server.sql("select pg_reload_conf()")


def test_wal_level_replica():
    with TempPostgres(wal_level="replica") as other:
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            rc, found, text = doctor(config(other, sp, source={"create": False}))
            assert line(found, "wal_level") == [(
                "fail", "wal_level", "is replica, and logical decoding needs logical",
                "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (on a managed service, its "
                "logical replication parameter, e.g. rds.logical_replication = 1)")], text
            assert rc == 2
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
                "pass", "idle_replication_slot_timeout", "0 (off)", None)], text
            other.sql("alter system set idle_replication_slot_timeout = '1h'")
            other.sql("select pg_reload_conf()")
            rc, found, text = doctor(config(other, sp))
            assert line(found, "idle_replication_slot_timeout") == [(
                "warn", "idle_replication_slot_timeout",
                "is 1h: the server invalidates a slot nobody streamed that long, so a cdc stopped longer "
                "loses its slot",
                "ALTER SYSTEM SET idle_replication_slot_timeout = 0; SELECT pg_reload_conf(); or set "
                "source.on_slot_lost: resync")], text
            assert rc == 1, text  # a warning, no failure
        finally:
            shutil.rmtree(sp["dir"], ignore_errors=True)


def test_no_free_replication_slot():
    with TempPostgres(max_replication_slots=1, max_slot_wal_keep_size="1GB") as other:
        other.sql("select pg_create_physical_replication_slot('taken')")
        sp = {"n": 0, "schema": "public", "dir": tempfile.mkdtemp(prefix="cdc-doctor-"), "slot": "s",
              "pub": "p"}
        try:
            rc, found, text = doctor(config(other, sp))
            assert line(found, "max_replication_slots") == [(
                "fail", "max_replication_slots", "all 1 in use: no room for slot s",
                "ALTER SYSTEM SET max_replication_slots = 2; then restart PostgreSQL (or drop a slot "
                "nothing uses: SELECT pg_drop_replication_slot('NAME'))")], text
            assert rc == 2
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
    assert line(found, "state_dir") == [(
        "fail", "state_dir", f"{state} is not writable by uid {uid}",
        f"chown {state} to cdc's user (uid {uid}), or set state_dir")], text
    assert rc == 2
    os.chmod(state, 0o755)


def test_a_socket_path_that_is_not_a_socket(server, space):
    path = os.path.join(space["dir"], "status.sock")
    with open(path, "w") as f:
        f.write("not a socket")
    rc, found, text = doctor(config(server, space))
    assert line(found, "sockets", "fail") == [(
        "fail", "sockets",
        f"status.socket {path} exists and is not a socket (cdc never replaces what is not a socket)",
        f"remove {path}, or set status.socket to another path")], text
    assert rc == 2
    assert stat.S_ISREG(os.stat(path).st_mode)


def test_a_socket_directory_that_does_not_exist(server, space):
    d = os.path.join(space["dir"], "run")
    path = config(server, space, subscriptions=[
        {"name": "q", "tables": [f"{space['schema']}.orders"], "sink": "socket"}],
        subscribers={"socket": os.path.join(d, "events.sock")})
    rc, found, text = doctor(path)
    assert line(found, "sockets", "fail") == [(
        "fail", "sockets", f"subscribers.socket {d}/events.sock: directory {d} does not exist",
        f"mkdir -p {d} (writable by cdc's user), or set subscribers.socket")], text
    assert rc == 2


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
                                             None)], text
    (f,) = line(found, "kafka_topics")
    assert f[0] == "warn" and f[2].startswith(
        f"1 missing ({topic}), and whether the brokers create topics on first use is unknown "
        "(auto.create.topics.enable: DescribeConfigs: "), text
    assert f[3] == f"kafka-topics.sh --create --topic {topic}"
    assert rc == 1
    kafka.create_topic(topic, 1)
    rc, found, text = doctor(kafka_config(server, space, kafka))
    assert line(found, "kafka_topics") == [("pass", "kafka_topics", "1 topic present", None)], text
    assert rc == 0


def test_kafka_exactly_once_positions_topic_and_transaction_timeout(server, space, kafka):
    positions = f"cdc.positions.{space['n']}"
    kafka.create_topic(f"cdc.{space['schema']}.orders", 1)
    path = kafka_config(server, space, kafka, exactly_once=True, positions_topic=positions)
    rc, found, text = doctor(path)
    assert line(found, "kafka_positions_topic") == [(
        "fail", "kafka_positions_topic",
        f"{positions} does not exist (one the brokers create on first use is not compacted, and the "
        "position is read back from its beginning at every start)",
        f"kafka-topics.sh --create --topic {positions} --partitions 1 --config cleanup.policy=compact")], text
    (f,) = line(found, "kafka_transactions")
    assert f[0] == "warn" and f[2].startswith(
        "the producer's transaction.timeout.ms is 600000; the brokers' transaction.max.timeout.ms is "
        "unknown (DescribeConfigs: "), text
    assert rc == 2
    kafka.create_topic(positions, 1)
    rc, found, text = doctor(path)
    (f,) = line(found, "kafka_positions_topic")
    assert f[0] == "warn" and f[2].startswith(f"{positions} exists; its cleanup.policy is unknown "
                                              "(DescribeConfigs: "), text
    assert f[3] == (f"kafka-configs.sh --alter --entity-type topics --entity-name {positions} "
                    "--add-config cleanup.policy=compact")
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

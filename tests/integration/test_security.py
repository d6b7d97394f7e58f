"""test_security.py: hostile input and security, against a PostgreSQL server of this module's own
(TLS on, with a CA and certificates made here by openssl; password authentication for one role;
every statement and replication command in the server log):

- hostile identifiers: publication, schema and table names with quotes, spaces, semicolons,
  backslashes, unicode and upper case are created, streamed and reported byte for byte, and the
  server runs exactly the statements cdc means (the victim tables survive); slot names that
  PostgreSQL would refuse are refused by `cdc check-config`;
- TLS: libpq's options in source.dsn reach libpq as they are (verify-full streams over TLS, a wrong
  CA fails with libpq's certificate error and a hint); librdkafka's TLS properties reach librdkafka
  (its own errors for a missing CA file, handshake errors against a plaintext broker, never a
  silent fallback);
- secrets: passwords in source.dsn (key=value and URI) and Kafka secrets appear in no log line,
  command output or status answer, through authentication failures, bad hosts, bad connection
  strings, config errors and a refused reload;
- sockets: the status and subscriber sockets get subscribers.mode, a uid without access gets
  EACCES, and a uid outside status.control_uids gets 403 for PUT and DELETE.

Tests that need another uid (EACCES, 403) run a child as `nobody` and so need root; as another user
they are skipped (and say so), and a skipped test has shown nothing.
"""

import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

import psycopg2
import psycopg2.sql
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, CdcFactory, drop_slot, to_yaml, wait_for  # noqa: E402
from pg import TempPostgres  # noqa: E402

ROLE, ROLE_PASSWORD = "cdc_pw", "Pw-kv-S3cr3t-7d1e"


# --- the module's server ------------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=60)


def make_ca(d, name):
    """A self-signed CA: (cert path, key path)."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=d)
    return os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")


def make_server_cert(d, ca):
    """server.crt / server.key for localhost and 127.0.0.1, signed by ca."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", os.path.basename(ca[0]), "-CAkey",
            os.path.basename(ca[1]), "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile",
            "san.ext", cwd=d)
    return os.path.join(d, "server.crt"), os.path.join(d, "server.key")


class Certs:
    def __init__(self, d):
        self.dir = d
        self.ca = make_ca(d, "cdc-test-ca")[0]
        self.wrong_ca = make_ca(d, "some-other-ca")[0]
        self.server_cert, self.server_key = make_server_cert(d, (self.ca, os.path.join(d, "cdc-test-ca.key")))


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="cdc-certs-", dir="/tmp")
    try:
        c = Certs(d)
        os.chmod(d, 0o755)
        if os.geteuid() == 0:  # the server runs as postgres and insists on owning its key
            pw = pwd.getpwnam("postgres")
            for f in (c.server_cert, c.server_key):
                os.chown(f, pw.pw_uid, pw.pw_gid)
        os.chmod(c.server_key, 0o600)
        yield c
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def spg(certs):
    """TLS on; every statement and replication command logged; ROLE logs in with a password over
    TCP (everyone else is trusted, as in tests/pg.py)."""
    with TempPostgres(ssl=True, ssl_cert_file=certs.server_cert, ssl_key_file=certs.server_key,
                      log_statement="all", log_replication_commands=True) as server:
        server.sql(psycopg2.sql.SQL("create role {} login replication superuser password {}").format(
            psycopg2.sql.Identifier(ROLE), psycopg2.sql.Literal(ROLE_PASSWORD)))
        hba = os.path.join(server.datadir, "pg_hba.conf")
        with open(hba) as f:
            trusted = f.read()
        with open(hba, "w") as f:
            f.write("# test_security.py: a password for ROLE over TCP\n"
                    f"host all {ROLE} 127.0.0.1/32 scram-sha-256\n"
                    f"host replication {ROLE} 127.0.0.1/32 scram-sha-256\n"
                    f"host all {ROLE} ::1/128 scram-sha-256\n"
                    f"host replication {ROLE} ::1/128 scram-sha-256\n" + trusted)
        server.sql("select pg_reload_conf()")
        yield server


class Factory(CdcFactory):
    """conftest's factory on this module's server; cleanup quotes the publication's name."""

    def cleanup(self):
        for p in self.all_processes:
            p.close()
        for c in self.instances:
            drop_slot(self.pg, c.slot)
            self.pg.sql(psycopg2.sql.SQL("drop publication if exists {}").format(
                psycopg2.sql.Identifier(c.publication)))
        shutil.rmtree(self.sockdir, ignore_errors=True)


@pytest.fixture
def scdc(spg, tmp_path, request):
    if not (os.path.isfile(CDC_BIN) and os.access(CDC_BIN, os.X_OK)):
        pytest.fail(f"{CDC_BIN} not built (run make)")
    f = Factory(spg, tmp_path, "public", request.node.name)
    yield f
    f.cleanup()


def log_since(server, offset):
    with open(server.logfile, errors="replace") as f:
        f.seek(offset)
        return f.read()


def log_size(server):
    return os.path.getsize(server.logfile)


def ident(*names):
    return psycopg2.sql.SQL(".").join(psycopg2.sql.Identifier(n) for n in names)


def http(sock, path, method="GET", body=None, timeout=10):
    """(status code, body text) of one request over a Unix socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(sock)
    data = (body or "").encode()
    req = f"{method} {path} HTTP/1.1\r\nHost: cdc\r\nConnection: close\r\n"
    if body is not None:
        req += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    s.sendall(req.encode() + b"\r\n" + data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    s.close()
    head, _, rest = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest.decode()


def run_cdc(*args, timeout=30):
    return subprocess.run([CDC_BIN, *args], capture_output=True, text=True, timeout=timeout)


# --- hostile identifiers ------------------------------------------------------------------------

WEIRD_SCHEMA = 'we"ird'
WEIRD_TABLES = ["ta ble", "Robert'); DROP TABLE students;--"]
# As the config writes them: schema.table, each part in double quotes with "" for a quote.
WEIRD_PATTERNS = ['"we""ird"."ta ble"', '"we""ird"."Robert\'); DROP TABLE students;--"']


@pytest.fixture
def weird_tables(spg):
    """Two victims the hostile names aim at (public.t, public.students, one row each) and the
    weird tables."""
    for t in ("t", "students"):
        spg.sql(f"drop table if exists public.{t}")
        spg.sql(f"create table public.{t} (id int primary key)")
        spg.sql(f"insert into public.{t} values (1)")
    spg.sql(psycopg2.sql.SQL("drop schema if exists {} cascade").format(ident(WEIRD_SCHEMA)))
    spg.sql(psycopg2.sql.SQL("create schema {}").format(ident(WEIRD_SCHEMA)))
    for t in WEIRD_TABLES:
        spg.sql(psycopg2.sql.SQL("create table {} (id int primary key, \"Note; x\" text)").format(
            ident(WEIRD_SCHEMA, t)))
    yield
    spg.sql(psycopg2.sql.SQL("drop schema if exists {} cascade").format(ident(WEIRD_SCHEMA)))


def victims_intact(spg):
    return [spg.sql(f"select count(*) from public.{t}")[0][0] for t in ("t", "students")] == [1, 1]


def sql_quote(s, q):
    return q + s.replace(q, q + q) + q


HOSTILE_PUBLICATIONS = ['pub"; DROP TABLE t; --', "Pub With Space", "'x'",
                        "Ünï\\code '); DROP TABLE students; -- \"€\""]


@pytest.mark.parametrize("publication", HOSTILE_PUBLICATIONS)
def test_hostile_publication_and_table_names(spg, scdc, weird_tables, publication):
    mark = log_size(spg)
    c = scdc(source={"publication": publication}, publish=WEIRD_PATTERNS,
             subscriptions=[{"name": "weird", "tables": ['"we""ird".*'], "sink": "stdout"}])
    p = c.start()
    for i, t in enumerate(WEIRD_TABLES):
        spg.sql(psycopg2.sql.SQL("insert into {} values (%s, %s)").format(ident(WEIRD_SCHEMA, t)),
                (i + 1, f"row of {t}"))
    evs = p.wait_events(2)
    assert [(e["op"], e["schema"], e["table"], e["new"]) for e in evs] == [
        ("insert", WEIRD_SCHEMA, t, {"id": i + 1, "Note; x": f"row of {t}"}) for i, t in enumerate(WEIRD_TABLES)]

    # The publication has exactly that name and exactly those tables; nothing else ran.
    assert spg.sql("select count(*) from pg_publication where pubname = %s", (publication,)) == [(1,)]
    assert spg.sql("select schemaname, tablename from pg_publication_tables where pubname = %s order by 2",
                   (publication,)) == [(WEIRD_SCHEMA, t) for t in sorted(WEIRD_TABLES)]
    assert victims_intact(spg)
    log = log_since(spg, mark)
    pub_ident = sql_quote(publication, '"')
    tables = ", ".join(f"TABLE {sql_quote(WEIRD_SCHEMA, chr(34))}.{sql_quote(t, chr(34))}" for t in WEIRD_TABLES)
    assert f"statement: CREATE PUBLICATION {pub_ident} FOR {tables}\n" in log
    assert f"publication_names {sql_quote(pub_ident, chr(39))}, " in log
    assert "ERROR" not in log and "DROP" not in log.replace("DROP TABLE students", "").replace("DROP TABLE t;", "")

    # Reported as it is: /status, /metrics and cdc status --json.
    code, body = http(c.config["status"]["socket"], "/status")
    assert code == 200 and json.loads(body)["source"]["publication"] == publication
    code, body = http(c.config["status"]["socket"], "/metrics")
    info = [s for f in text_string_to_metric_families(body) for s in f.samples if s.name == "cdc_source_info"]
    assert [s.labels["publication"] for s in info] == [publication]
    out = run_cdc("status", "-c", c.path, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["source"]["publication"] == publication
    assert p.terminate() == 0, p.describe()

    # Started again, it finds the publication by its name rather than creating another.
    mark = log_size(spg)
    p = c.start()
    spg.sql(psycopg2.sql.SQL("delete from {} where id = 1").format(ident(WEIRD_SCHEMA, WEIRD_TABLES[0])))
    ev = p.wait_events(1)[0]
    assert (ev["op"], ev["schema"], ev["table"], ev["key"]) == ("delete", WEIRD_SCHEMA, WEIRD_TABLES[0], {"id": 1})
    assert "CREATE PUBLICATION" not in log_since(spg, mark)
    assert p.terminate() == 0, p.describe()
    assert victims_intact(spg)


def test_missing_publication_hint_is_quoted(spg, scdc, weird_tables):
    c = scdc(source={"publication": "Pub With Space", "create": False}, publish=WEIRD_PATTERNS)
    spg.sql(f"select pg_create_logical_replication_slot('{c.slot}', 'pgoutput')")
    p = c.run()
    assert p.wait_exit() == 1
    assert ('publication "Pub With Space" does not exist: create it (CREATE PUBLICATION "Pub With Space" '
            "FOR TABLE ...) or set source.create: true") in p.stderr()


def test_replica_identity_hint_runs_as_it_is(spg, scdc, weird_tables):
    """The ALTER TABLE that cdc suggests for `changed` works when pasted, whatever the names."""
    c = scdc(publish=WEIRD_PATTERNS, subscriptions=[
        {"name": "notes", "tables": [WEIRD_PATTERNS[1]], "operations": ["update"], "changed": ["Note; x"],
         "sink": "stdout"}])
    p = c.run()
    assert p.wait_exit() == 1
    m = re.search(r"whose replica identity does not send the old row of an update: (ALTER TABLE .*? REPLICA "
                  r"IDENTITY FULL)\"", p.stderr())
    assert m, p.describe()
    assert m.group(1) == ('ALTER TABLE "we""ird"."Robert\'); DROP TABLE students;--" REPLICA IDENTITY FULL')
    spg.sql(m.group(1))
    assert victims_intact(spg)
    p = c.start()
    spg.sql(psycopg2.sql.SQL("insert into {} values (1, 'a')").format(ident(WEIRD_SCHEMA, WEIRD_TABLES[1])))
    spg.sql(psycopg2.sql.SQL("update {} set \"Note; x\" = 'b'").format(ident(WEIRD_SCHEMA, WEIRD_TABLES[1])))
    ev = p.wait_events(1)[0]
    assert (ev["op"], ev["table"], ev["old"]["Note; x"], ev["new"]["Note; x"]) == ("update", WEIRD_TABLES[1], "a", "b")
    assert p.terminate() == 0


@pytest.mark.parametrize("slot", ["Cdc_Slot", "cdc-slot", "a" * 64, 'x"; DROP TABLE t; --', "", "slöt"])
def test_check_config_refuses_slot_names_postgres_refuses(tmp_path, slot):
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml({"source": {"dsn": "host=localhost", "slot": slot}, "subscriptions": []}))
    out = run_cdc("check-config", "-c", str(path))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"{path}:3:9: source.slot: invalid name ")
    assert out.stderr.endswith("(expected [a-z0-9_]{1,63}, PostgreSQL's rule for slot names)\n")
    # cdc run refuses it the same way, before connecting anywhere.
    out = run_cdc("run", "-c", str(path))
    assert out.returncode == 2 and "source.slot: invalid name" in out.stderr


@pytest.mark.parametrize("publication,ok", [("a" * 63, True), ("a" * 64, False), ("tab\there", False),
                                            ("line\nbreak", False)])
def test_check_config_publication_limits(tmp_path, publication, ok):
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml({"source": {"dsn": "host=localhost", "publication": publication}, "subscriptions": []}))
    out = run_cdc("check-config", "-c", str(path))
    if ok:
        assert out.returncode == 0 and f"\n  publication: {publication}\n" in out.stdout
    else:
        assert out.returncode == 2
        assert out.stderr.startswith(f"{path}:3:16: source.publication: invalid name ")
        assert out.stderr.endswith("(expected 1 to 63 bytes without control characters)\n")

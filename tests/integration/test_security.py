"""test_security.py: hostile input and security, against a PostgreSQL server of this module's own
(TLS on, with a CA and certificates made here by openssl; password authentication for one role;
every statement and replication command in the server log):

- hostile identifiers: publication, schema and table names with quotes, spaces, semicolons,
  backslashes, unicode and upper case are created, streamed and reported byte for byte, and the
  server runs exactly the statements cdc means (the victim tables survive); slot names that
  PostgreSQL would refuse are refused by `cdc check-config`;
- TLS: librdkafka's TLS properties reach librdkafka (its own errors for a missing CA file, handshake
  errors against a plaintext broker, never a silent fallback); PostgreSQL's TLS is test_tls.py's;
- secrets: passwords in source.dsn (key=value and URI) and Kafka secrets appear in no log line,
  command output or status answer, through authentication failures, bad hosts, bad connection
  strings, config errors and a refused reload;
- sockets: the status and subscriber sockets get subscribers.mode, a uid without access gets
  EACCES, and a uid outside status.control_uids gets 403 for PUT and DELETE; state_dir (spool,
  spill files, position) is owner-only.

Tests that need another uid (EACCES, 403) run a child as `nobody` and so need root; as another user
they are skipped (and say so), and a skipped test has shown nothing.
"""

import json
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile

import psycopg2
import psycopg2.sql
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, CdcFactory, cdc_factory, drop_slot, to_yaml, wait_for  # noqa: E402
from pg import TempPostgres, server_tls_files  # noqa: E402
from test_status import http as status_http  # noqa: E402

ROLE, ROLE_PASSWORD = "cdc_pw", "Pw-kv-S3cr3t-7d1e"
URI_PASSWORD = "Pw-uri-S3cr3t-4b2a"   # the same role's password, changed for the URI phase
WRONG_PASSWORD = "Pw-wrong-S3cr3t-0f0f"
SASL_PASSWORD = "Kafka-sasl-S3cr3t-91c3"
KEY_PASSWORD = "Kafka-key-S3cr3t-5e77"  # the passphrase of the Kafka client key (certs fixture)
SECRETS = [ROLE_PASSWORD, URI_PASSWORD, WRONG_PASSWORD, SASL_PASSWORD, KEY_PASSWORD]


# --- the module's server ------------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE, timeout=60, env=dict(os.environ, KEYPW=KEY_PASSWORD))


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


def make_client_cert(d, ca):
    """client.crt / client.key, the key encrypted with KEY_PASSWORD."""
    openssl("genpkey", "-algorithm", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-aes256", "-pass",
            "env:KEYPW", "-out", "client.key", cwd=d)
    openssl("req", "-new", "-key", "client.key", "-passin", "env:KEYPW", "-out", "client.csr", "-subj",
            "/CN=cdc-client", cwd=d)
    openssl("x509", "-req", "-in", "client.csr", "-CA", os.path.basename(ca[0]), "-CAkey",
            os.path.basename(ca[1]), "-CAcreateserial", "-out", "client.crt", "-days", "2", cwd=d)
    return os.path.join(d, "client.crt"), os.path.join(d, "client.key")


class Certs:
    def __init__(self, d):
        self.dir = d
        ca = make_ca(d, "cdc-test-ca")
        self.ca = ca[0]
        self.wrong_ca = make_ca(d, "some-other-ca")[0]
        self.server_cert, self.server_key = make_server_cert(d, ca)
        self.client_cert, self.client_key = make_client_cert(d, ca)


@pytest.fixture(scope="module")
def certs():
    d = tempfile.mkdtemp(prefix="cdc-certs-", dir="/tmp")
    try:
        c = Certs(d)
        server_tls_files(d, c.server_cert, c.server_key)
        yield c
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def spg(certs):
    """TLS on; every statement and replication command logged; ROLE logs in with a password over
    TCP (everyone else is trusted, as in tests/pg.py)."""
    with TempPostgres(ssl=True, ssl_cert_file=certs.server_cert, ssl_key_file=certs.server_key,
                      log_statement="all", log_replication_commands=True) as server:
        server.password_role(ROLE, ROLE_PASSWORD)
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
    with cdc_factory(spg, tmp_path, request, cls=Factory) as f:
        yield f


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
    return status_http((sock, path), method, body, timeout)


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
    # PostgreSQL 14 lists the tables after one TABLE; 15 repeats it per table
    items = [f"{sql_quote(WEIRD_SCHEMA, chr(34))}.{sql_quote(t, chr(34))}" for t in WEIRD_TABLES]
    tables = "TABLE " + (", TABLE " if spg.version >= 15 else ", ").join(items)
    assert f"statement: CREATE PUBLICATION {pub_ident} FOR {tables} WITH (publish_via_partition_root = true)\n" in log
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
    """The CREATE PUBLICATION that cdc (and cdc doctor) print works when pasted, whatever the names
    (issue 31: it read FOR TABLE ...)."""
    c = scdc(source={"publication": "Pub With Space", "create": False}, publish=WEIRD_PATTERNS)
    spg.sql(f"select pg_create_logical_replication_slot('{c.slot}', 'pgoutput')")
    p = c.run()
    assert p.wait_exit() == 1
    m = re.search(r'publication "Pub With Space" does not exist\. fix: as the tables\' owner or a superuser, '
                  r'or set source\.create: true; sql: (CREATE PUBLICATION "Pub With Space" .*?;)"$', p.stderr(), re.M)
    assert m, p.describe()
    try:
        spg.sql(m.group(1))
        p = c.start()
        assert p.terminate() == 0, p.describe()
    finally:
        spg.sql('drop publication if exists "Pub With Space"')


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


# --- Kafka's TLS ----------------------------------------------------------------------------------

def kafka_config(kafka, **props):
    return {"brokers": kafka.bootstrap,
            "properties": dict({"linger.ms": "5", "reconnect.backoff.max.ms": "500"}, **props)}


@pytest.mark.parametrize("props,words", [
    # librdkafka's own errors, naming the property and the file
    ({"security.protocol": "ssl", "ssl.ca.location": "/nonexistent/cdc-ca.pem"},
     ["cannot create the Kafka producer: ssl.ca.location failed", "fopen(/nonexistent/cdc-ca.pem"]),
    ({"security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "bogus"},
     ['kafka property ssl.endpoint.identification.algorithm: Invalid value "bogus" for configuration property '
      '"ssl.endpoint.identification.algorithm"']),
    ({"security.protocol": "sasl_ssl", "sasl.mechanism": "NOPE"},
     ["cannot create the Kafka producer: Unsupported SASL mechanism: NOPE"]),
    ({"security.protocol": "tls"}, ['kafka property security.protocol: Invalid value "tls"']),
])
def test_kafka_tls_and_sasl_properties_reach_librdkafka(spg, scdc, kafka, props, words):
    c = scdc(publish=["public.*"], kafka=kafka_config(kafka, **props),
             subscriptions=[{"name": "k", "tables": ["public.*"], "sink": "kafka"}])
    p = c.run()
    assert p.wait_exit() == 2, p.describe()
    err = p.stderr()
    for w in words:
        assert w in err, p.describe()
    assert "cannot start a sink" in err


def test_kafka_ssl_against_a_plaintext_broker_never_falls_back(spg, scdc, kafka, kafka_reader, certs):
    """librdkafka's mock brokers have no TLS listener: with security.protocol ssl and a valid CA,
    cdc must fail the handshake, say so, and deliver nothing; the same config without TLS delivers
    the row (so TLS, nothing else, held it back)."""
    spg.sql("create table if not exists public.ktls (id int primary key)")
    topic = f"sec.ktls.{os.getpid()}"
    sub = [{"name": "k", "tables": ["public.ktls"], "sink": "kafka", "topic": topic}]
    c = scdc(publish=["public.ktls"], subscriptions=sub,
             kafka=kafka_config(kafka, **{"security.protocol": "ssl", "ssl.ca.location": certs.ca}))
    reader = kafka_reader([topic])
    p = c.start()
    spg.sql("insert into public.ktls values (1)")
    wait_for(lambda: "in state SSL_HANDSHAKE" in p.stderr(), 20, what=p.describe())
    assert "ssl://127.0.0.1:" in p.stderr()
    wait_for(lambda: json.loads(http(c.config["status"]["socket"], "/status")[1])["kafka"]["in_flight"] == 1, 10,
             what="the row in flight")
    wait_for(lambda: p.stderr().count("in state SSL_HANDSHAKE") >= 2, 20, what=p.describe())  # retried, still TLS
    st = json.loads(http(c.config["status"]["socket"], "/status")[1])
    assert (st["kafka"]["delivered"], st["kafka"]["in_flight"], st["kafka"]["errors"]) == (0, 1, 0), st
    assert reader.snapshot() == []
    p.kill()  # a stop would wait 30 s for the message in flight

    plain = scdc(source={"slot": c.slot, "publication": c.publication}, publish=["public.ktls"],
                 subscriptions=sub, kafka=kafka_config(kafka), state_dir=c.state_dir)
    plain.instances = []  # the slot and publication are c's to drop
    p = plain.start()
    msgs = reader.wait(1, 30)
    assert [(m.event.table, m.header("cdc-op")) for m in msgs] == [("ktls", "insert")]
    assert p.terminate() == 0, p.describe()
    spg.sql("drop table public.ktls")


# --- secrets ------------------------------------------------------------------------------------

def assert_no_secret(where, text):
    for s in SECRETS:
        assert s not in text, f"{s!r} leaked in {where}:\n{text}"


def role_dsn(spg, password, host="localhost"):
    return f"host={host} port={spg.port} dbname=postgres user={ROLE} password={password} sslmode=require"


def secret_kafka(kafka, certs):
    """Every Kafka secret in use: SASL over TLS with an encrypted client key. The mock has neither,
    so nothing is delivered; librdkafka's configuration and security debug output is on."""
    return kafka_config(kafka, **{
        "security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "cdc",
        "sasl.password": SASL_PASSWORD, "ssl.ca.location": certs.ca,
        "ssl.certificate.location": certs.client_cert, "ssl.key.location": certs.client_key,
        "ssl.key.password": KEY_PASSWORD, "debug": "conf,security,broker"})


def test_secrets_stay_out_of_logs_commands_and_status(spg, scdc, kafka, certs, tmp_path):
    spg.sql("create table if not exists public.sec_t (id int primary key)")
    spg.sql("create table if not exists public.sec_k (id int primary key)")
    subs = [{"name": "rows", "tables": ["public.sec_t"], "sink": "stdout"},
            {"name": "k", "tables": ["public.sec_k"], "sink": "kafka"}]
    c = scdc(source={"dsn": role_dsn(spg, ROLE_PASSWORD)}, publish=["public.sec_t", "public.sec_k"],
             subscriptions=subs, kafka=secret_kafka(kafka, certs), log={"level": "debug"})
    seen = {}
    p = c.start()
    spg.sql("insert into public.sec_t values (1)")
    assert p.wait_events(1)[0]["new"] == {"id": 1}
    # librdkafka got the secrets (it says so, redacted) and tried SASL over TLS.
    wait_for(lambda: "sasl.password = [redacted]" in p.stderr(), 10, what=p.describe())
    wait_for(lambda: "in state SSL_HANDSHAKE" in p.stderr(), 20, what=p.describe())
    sock = c.config["status"]["socket"]
    wait_for(lambda: json.loads(http(sock, "/status")[1])["source"]["connected"], 10, what="connected")
    for path in ("/status", "/metrics", "/subscriptions", "/healthz", "/readyz"):
        seen[path] = http(sock, path)[1]
    for args in (["status", "-c", c.path], ["status", "-s", sock, "--json"], ["check-config", "-c", c.path]):
        out = run_cdc(*args)
        assert out.returncode == 0, out.stderr
        seen[" ".join(args)] = out.stdout + out.stderr
    checked = seen[f"check-config -c {c.path}"]
    assert "password=******** sslmode=require" in checked
    assert 'sasl.password: "********"' in checked and 'ssl.key.password: "********"' in checked

    # Reloads: a file with errors beside the secrets, a YAML syntax error, a new password.
    good = open(c.path).read()
    broken = {
        "errors": good.replace('    sink: "stdout"\n', '    sink: "stdout"\n    operations: ["explode"]\n') +
        f'bogus_key: "{SASL_PASSWORD}"\n',
        "syntax": good.replace("subscriptions:", f'oops: [unterminated, "{ROLE_PASSWORD}"\nsubscriptions:'),
        "new dsn": good.replace(f"password={ROLE_PASSWORD}", f"password={WRONG_PASSWORD}"),
    }
    for what, text in broken.items():
        assert text.count("\n") > good.count("\n") or what == "new dsn", what
        assert text != good, what
        with open(c.path, "w") as f:
            f.write(text)
        n = p.stderr().count("reload")
        p.signal(signal.SIGHUP)
        wait_for(lambda: p.stderr().count("reload") > n or "take effect at the next restart" in p.stderr()[-2000:],
                 10, what=f"reload ({what})\n{p.describe()}")
        out = run_cdc("check-config", "-c", c.path)
        assert out.returncode == (0 if what == "new dsn" else 2), out
        if what == "errors":
            assert 'subscriptions[0].operations: unknown' in out.stderr and '"bogus_key"' in out.stderr, out
        seen[f"check-config ({what})"] = out.stdout + out.stderr
        out = run_cdc("status", "-c", c.path)
        seen[f"status -c ({what})"] = out.stdout + out.stderr
    assert p.stderr().count("reload refused; keeping the running configuration") == 2
    # One event, one line: the multi-line error lists of the refused reloads are escaped.
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (debug|info |warn |error) ", ln)
               for ln in p.stderr().splitlines()), p.stderr()
    assert "source and state_dir changes take effect at the next restart" in p.stderr()
    with open(c.path, "w") as f:
        f.write(good)
    assert p.terminate() == 0, p.describe()
    seen["run"] = p.stderr() + p.stdout_text()

    # Failures: wrong password, nothing listening, no such socket directory.
    for what, dsn, expect in [
        ("wrong password", role_dsn(spg, WRONG_PASSWORD), f'password authentication failed for user "{ROLE}"'),
        ("refused", role_dsn(spg, ROLE_PASSWORD, host="127.0.0.1").replace(f"port={spg.port}", "port=1"),
         "Connection refused"),
        ("no socket", f"host=/nonexistent/cdc-sock user={ROLE} password={ROLE_PASSWORD}",
         'on socket "/nonexistent/cdc-sock/.s.PGSQL.5432" failed: No such file or directory'),
    ]:
        bad = scdc(source={"dsn": dsn}, publish=["public.sec_t"], subscriptions=subs[:1])
        q = bad.run()
        wait_for(lambda: "not streaming; retrying" in q.stderr(), 20, what=q.describe())
        assert expect in q.stderr(), q.describe()
        assert q.terminate() == 0
        seen[what] = q.stderr() + q.stdout_text()
    assert "(check the password: source.password, source.dsn, PGPASSWORD or ~/.pgpass)" in seen["wrong password"]
    assert_all = [(k, v) for k, v in seen.items()]
    for where, text in assert_all:
        assert_no_secret(where, text)
    spg.sql("drop table public.sec_t, public.sec_k")


def test_secrets_in_uri_dsns(spg, scdc):
    spg.sql(psycopg2.sql.SQL("alter role {} password {}").format(psycopg2.sql.Identifier(ROLE),
                                                                psycopg2.sql.Literal(URI_PASSWORD)))
    try:
        spg.sql("create table if not exists public.sec_u (id int primary key)")
        uri = f"postgresql://{ROLE}:{URI_PASSWORD}@localhost:{spg.port}/postgres?sslmode=require"
        subs = [{"name": "rows", "tables": ["public.sec_u"], "sink": "stdout"}]
        c = scdc(source={"dsn": uri}, publish=["public.sec_u"], subscriptions=subs)
        p = c.start()
        spg.sql("insert into public.sec_u values (1)")
        assert p.wait_events(1)[0]["new"] == {"id": 1}
        seen = {"/status": http(c.config["status"]["socket"], "/status")[1]}
        out = run_cdc("check-config", "-c", c.path)
        assert out.returncode == 0 and f"postgresql://{ROLE}:********@localhost:" in out.stdout
        seen["check-config"] = out.stdout + out.stderr
        assert p.terminate() == 0
        seen["run"] = p.stderr()

        # The wrong password in a URI, and URIs libpq cannot parse (it would quote them whole).
        wrong = scdc(source={"dsn": uri.replace(URI_PASSWORD, WRONG_PASSWORD)}, publish=["public.sec_u"],
                     subscriptions=subs)
        q = wrong.run()
        wait_for(lambda: "password authentication failed" in q.stderr(), 20, what=q.describe())
        assert q.terminate() == 0
        seen["wrong"] = q.stderr()
        for what, dsn, expect in [
            ("ipv6", f"postgresql://{ROLE}:{URI_PASSWORD}@[::1:{spg.port}/postgres",
             'source.dsn is not a valid connection string: end of string reached when looking for matching "]" '
             f'in IPv6 host address in URI: "postgresql://{ROLE}:********@[::1:{spg.port}/postgres"'),
            ("percent", f"postgresql://{ROLE}:{URI_PASSWORD}%zz@localhost/postgres",
             "source.dsn is not a valid connection string (check the quoting of its password"),
            ("query", f"postgresql://localhost/postgres?password={URI_PASSWORD}&x",
             'source.dsn is not a valid connection string: missing key/value separator "=" in URI query '
             'parameter: "x"'),
        ]:
            bad = scdc(source={"dsn": dsn}, publish=["public.sec_u"], subscriptions=subs)
            q = bad.run()
            assert q.wait_exit() == 1, q.describe()  # no retry can fix it
            assert expect in q.stderr(), q.describe()
            seen[what] = q.stderr()
        for where, text in seen.items():
            assert_no_secret(where, text)
    finally:
        spg.sql(psycopg2.sql.SQL("alter role {} password {}").format(psycopg2.sql.Identifier(ROLE),
                                                                    psycopg2.sql.Literal(ROLE_PASSWORD)))
        spg.sql("drop table if exists public.sec_u")


def test_config_errors_do_not_quote_secrets(tmp_path):
    """Secrets in the wrong shape or beside errors: the messages name the key, never the value."""
    path = tmp_path / "c.yaml"
    cases = [
        f'source:\n  dsn: {{password: "{ROLE_PASSWORD}"}}\n',
        f'kafka:\n  brokers: b\n  properties: {{sasl.password: ["{SASL_PASSWORD}"]}}\n',
        f'kafka:\n  brokers: b\n  properties: {{ssl.key.password: "{KEY_PASSWORD}", ssl.key.password: x}}\n',
        f'source:\n  dsn: "password={ROLE_PASSWORD}"\n  dns: "password={WRONG_PASSWORD}"\n',
        f'source:\n  dsn: "password={ROLE_PASSWORD}\n',
    ]
    for text in cases:
        path.write_text(text)
        for cmd in ("check-config", "run"):
            out = run_cdc(cmd, "-c", str(path))
            assert out.returncode == 2 and out.stderr.startswith(f"{path}:"), (text, out)
            assert_no_secret(f"{cmd} of {text!r}", out.stdout + out.stderr)


# --- sockets ------------------------------------------------------------------------------------

def socket_paths(c):
    return c.config["status"]["socket"], c.config["subscribers"]["socket"]


def start_with_sockets(scdc, mode=None, **top):
    spg = scdc.pg
    spg.sql("create table if not exists public.sock_t (id int primary key)")
    subscribers = {"socket": os.path.join(scdc.sockdir, "events.sock")}
    if mode:
        subscribers["mode"] = mode
    c = scdc(publish=["public.sock_t"], subscribers=subscribers,
             subscriptions=[{"name": "jobs", "tables": ["public.sock_t"], "sink": "socket"}], **top)
    return c, c.start()


@pytest.mark.parametrize("mode,want", [(None, 0o660), ("0600", 0o600), ("0640", 0o640)])
def test_socket_modes(scdc, mode, want):
    c, p = start_with_sockets(scdc, mode)
    for path in socket_paths(c):
        st = os.stat(path)
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == want, (path, oct(st.st_mode))
        assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    assert f"mode={want:04o}" in p.stderr()
    assert p.terminate() == 0


def test_subscriber_socket_path_that_is_not_a_socket_is_refused(scdc):
    """A regular file at subscribers.socket is someone's data, not a socket left by a crashed cdc:
    cdc refuses to start, names the path, and leaves the file as it was (never unlinks it)."""
    scdc.pg.sql("create table if not exists public.sock_t (id int primary key)")
    path = os.path.join(scdc.sockdir, "events.sock")
    with open(path, "w") as f:
        f.write("not a socket\n")
    c = scdc(publish=["public.sock_t"], subscribers={"socket": path},
             subscriptions=[{"name": "jobs", "tables": ["public.sock_t"], "sink": "socket"}])
    p = c.run()
    assert p.wait_exit(30) != 0, p.describe()
    assert f"subscribers.socket {path}: exists and is not a socket" in p.stderr(), p.describe()
    assert stat.S_ISREG(os.lstat(path).st_mode)
    with open(path) as f:
        assert f.read() == "not a socket\n"


def test_world_writable_mode_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(to_yaml({"subscribers": {"mode": "0666"}}))
    out = run_cdc("check-config", "-c", str(path))
    assert out.returncode == 2
    assert out.stderr == (f'{path}:2:9: subscribers.mode: mode "0666" lets any local user write to the sockets '
                          '(use e.g. "0660" and a group)\n')


# A client that runs as nobody (see as_nobody): connects to each socket given and, for the status
# socket, sends the requests given; prints one JSON result per line.
CLIENT = r'''
import errno, json, socket, sys
def request(path, method, target, body):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    data = body.encode() if body is not None else b""
    head = f"{method} {target} HTTP/1.1\r\nHost: cdc\r\nConnection: close\r\n"
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    s.sendall(head.encode() + b"\r\n" + data)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    h, _, rest = out.partition(b"\r\n\r\n")
    return int(h.split()[1]), rest.decode()
spec = json.loads(sys.argv[1])
for path in spec["connect"]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        print(json.dumps(["connect", path, "ok"]))
    except OSError as e:
        print(json.dumps(["connect", path, errno.errorcode.get(e.errno, str(e.errno))]))
    finally:
        s.close()
for method, target, body in spec.get("requests", []):
    print(json.dumps([method, target] + list(request(spec["status"], method, target, body))))
'''

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: runs a client as nobody (setuid) to show "
                               "what a uid without access gets; SKIPPED, NOT SHOWN")


def as_nobody(spec, groups=()):
    """Runs CLIENT with uid and gid nobody and the given supplementary groups; its results."""
    nobody = pwd.getpwnam("nobody")

    def drop():
        os.setgroups(list(groups))
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
    out = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(spec)], preexec_fn=drop, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(x) for x in out.stdout.splitlines()], nobody.pw_uid


@root_only
def test_uid_without_access_gets_eacces(scdc):
    os.chmod(scdc.sockdir, 0o711)  # anyone may reach the sockets: their own modes decide
    c, p = start_with_sockets(scdc)
    status_sock, events_sock = socket_paths(c)
    got, _ = as_nobody({"connect": [status_sock, events_sock]})
    assert got == [["connect", status_sock, "EACCES"], ["connect", events_sock, "EACCES"]]
    # In cdc's group (the way to grant access with mode 0660), the same uid connects.
    got, uid = as_nobody({"connect": [status_sock, events_sock]}, groups=[os.getegid()])
    assert got == [["connect", status_sock, "ok"], ["connect", events_sock, "ok"]]
    wait_for(lambda: "subscriber connected pid=" in p.stderr() and f"uid={uid} " in p.stderr(), 10,
             what=p.describe())
    assert p.terminate() == 0


@root_only
def test_control_endpoints_refuse_uids_outside_control_uids(scdc):
    os.chmod(scdc.sockdir, 0o711)
    c, p = start_with_sockets(scdc)  # control_uids default: cdc's own uid and root
    status_sock = socket_paths(c)[0]
    body = json.dumps({"tables": ["public.sock_t"], "sink": "stdout"})
    got, uid = as_nobody({"connect": [], "status": status_sock,
                          "requests": [["PUT", "/subscriptions/evil", body], ["DELETE", "/subscriptions/jobs", None],
                                       ["GET", "/subscriptions", None]]}, groups=[os.getegid()])
    refusal = {"error": f"uid {uid} may not change subscriptions (status.control_uids)"}
    assert [(m, t, code) for m, t, code, _ in got] == [("PUT", "/subscriptions/evil", 403),
                                                        ("DELETE", "/subscriptions/jobs", 403),
                                                        ("GET", "/subscriptions", 200)]
    assert json.loads(got[0][3]) == refusal and json.loads(got[1][3]) == refusal
    assert [s["name"] for s in json.loads(got[2][3])["subscriptions"]] == ["jobs"]  # nothing changed
    for method, name in (("PUT", "evil"), ("DELETE", "jobs")):
        assert (f'control request refused method={method} subscription={name} uid={uid} ') in p.stderr()
    # root, allowed by default, is not refused (what it gets is the endpoint's business).
    assert http(status_sock, "/subscriptions/jobs", "DELETE")[0] != 403
    assert p.terminate() == 0


@root_only
def test_control_uids_admits_the_uid_named(scdc):
    os.chmod(scdc.sockdir, 0o711)
    nobody = pwd.getpwnam("nobody").pw_uid
    c, p = start_with_sockets(scdc, status={"socket": os.path.join(scdc.sockdir, "status.sock"),
                                            "control_uids": [nobody]})
    got, _ = as_nobody({"connect": [], "status": socket_paths(c)[0],
                        "requests": [["DELETE", "/subscriptions/nosuch", None]]}, groups=[os.getegid()])
    assert got[0][2] != 403, got
    assert f"control request method=DELETE subscription=nosuch uid={nobody} " in p.stderr()
    # and root, no longer named, is refused
    code, text = http(socket_paths(c)[0], "/subscriptions/nosuch", "DELETE")
    assert code == 403 and json.loads(text)["error"] == "uid 0 may not change subscriptions (status.control_uids)"
    assert p.terminate() == 0


def test_state_dir_is_private(scdc):
    """Spooled rows, spill files and positions are data at rest: owner only."""
    c, p = start_with_sockets(scdc)
    scdc.pg.sql("insert into public.sock_t select generate_series(1, 3)")
    wait_for(lambda: json.loads(http(socket_paths(c)[0], "/status")[1])["subscriptions"][0]["head_offset"] == 4,
             10, what="the schema event and three rows spooled")
    assert p.terminate() == 0
    seen = []
    for root, dirs, files in os.walk(c.state_dir):
        for name in dirs + files:
            path = os.path.join(root, name)
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            seen.append(os.path.relpath(path, c.state_dir))
            assert mode & 0o077 == 0, (path, oct(mode))
    assert stat.S_IMODE(os.stat(c.state_dir).st_mode) == 0o700
    assert {"position", "spool", "spill"} <= set(seen) and any(s.startswith("spool/jobs/") for s in seen), seen
    scdc.pg.sql("delete from public.sock_t")

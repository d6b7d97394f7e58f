"""test_secrets.py: secrets kept out of cdc.yaml, against a server of this module's own where one role
logs in with a password (scram-sha-256 over TCP):

- source.password as {file: PATH}: cdc streams with it, check-config prints the {file: PATH} and
  nothing prints the password; a SIGHUP reads the file again and the next connection uses the new
  password, without a restart (and without the restart warning);
- source.dsn as {file: PATH}, the whole connection string in a file;
- libpq's own ways: passfile in the connection string, PGPASSFILE, a service file.

Kafka's sasl.password from a file, and its reload, are in test_kafka_sasl.py.
"""

import json
import os
import signal
import subprocess

import psycopg2.sql
import pytest

from conftest import CDC_BIN, cdc_factory, wait_for
from pg import TempPostgres
from test_status import http

ROLE = "cdc_secret"
FIRST, SECOND = "Pw-first-S3cr3t-4410", "Pw-second-S3cr3t-8c21"


@pytest.fixture(scope="module")
def ppg():
    """The role ROLE logs in with a password over TCP; everyone else is trusted (tests/pg.py)."""
    with TempPostgres() as server:
        server.password_role(ROLE, FIRST)
        server.sql("create table public.sec (id int primary key)")
        yield server


@pytest.fixture
def pcdc(ppg, tmp_path, request):
    with cdc_factory(ppg, tmp_path, request) as f:
        yield f
    ppg.sql(psycopg2.sql.SQL("alter role {} password {}").format(psycopg2.sql.Identifier(ROLE),
                                                                  psycopg2.sql.Literal(FIRST)))


def role_dsn(pg):
    return f"host=127.0.0.1 port={pg.port} dbname=postgres user={ROLE}"


def secret_file(tmp_path, name, text):
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def run_cdc(*args):
    return subprocess.run([CDC_BIN, *args], capture_output=True, text=True, timeout=30)


def everything_printed(c, p):
    """What cdc says to anyone: its log, check-config, status (text and JSON), the status socket."""
    sock = c.config["status"]["socket"]
    seen = {"log": p.stderr() + p.stdout_text()}
    for path in ("/status", "/metrics", "/subscriptions"):
        seen[path] = http((sock, path))[1]
    for args in (["check-config", "-c", c.path], ["status", "-c", c.path], ["status", "-s", sock, "--json"]):
        out = run_cdc(*args)
        seen[" ".join(args)] = out.stdout + out.stderr
    return seen


def assert_never_printed(seen, *secrets):
    for where, text in seen.items():
        for s in secrets:
            assert s not in text, f"{s!r} printed in {where}:\n{text}"


def insert_and_see(pg, p, i):
    pg.sql("insert into public.sec values (%s)", (i,))
    return p.wait_events(1, pred=lambda e: e.get("new") == {"id": i})


def test_password_from_a_file_is_read_again_on_sighup(ppg, pcdc, tmp_path):
    pwfile = secret_file(tmp_path, "pg-password", FIRST + "\n")
    c = pcdc(source={"dsn": role_dsn(ppg), "password": {"file": pwfile}}, publish=["public.sec"],
             subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    out = run_cdc("check-config", "-c", c.path)
    assert out.returncode == 0, out.stderr
    assert f'  dsn: "{role_dsn(ppg)}"\n  password: {{file: {pwfile}}}\n' in out.stdout
    p = c.start()
    insert_and_see(ppg, p, 1)

    # The password changes on the server: cdc's next connection is refused...
    ppg.sql(psycopg2.sql.SQL("alter role {} password {}").format(psycopg2.sql.Identifier(ROLE),
                                                                  psycopg2.sql.Literal(SECOND)))
    ppg.sql("select pg_terminate_backend(pid) from pg_stat_activity where usename = %s", (ROLE,))
    wait_for(lambda: f'password authentication failed for user "{ROLE}"' in p.stderr(), 20,
             what=f"the old password refused\n{p.describe()}")
    # ...until the file holds the new one and a SIGHUP reads it again: no restart.
    secret_file(tmp_path, "pg-password", SECOND + "\n")
    p.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded subscriptions" in p.stderr(), 10, what=p.describe())
    c.wait_streaming(p, timeout=40)
    insert_and_see(ppg, p, 2)
    assert "take effect at the next restart" not in p.stderr()
    assert p.running()
    seen = everything_printed(c, p)
    assert json.loads(seen["/status"])["source"]["connected"]
    assert p.terminate() == 0, p.describe()
    seen["log"] = p.stderr() + p.stdout_text()
    assert_never_printed(seen, FIRST, SECOND)


def test_whole_dsn_from_a_file(ppg, pcdc, tmp_path):
    dsnfile = secret_file(tmp_path, "dsn", f"{role_dsn(ppg)} password={FIRST}\n")
    c = pcdc(source={"dsn": {"file": dsnfile}}, publish=["public.sec"],
             subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    p = c.start()
    insert_and_see(ppg, p, 11)
    seen = everything_printed(c, p)
    assert f"  dsn: {{file: {dsnfile}}}\n" in seen[f"check-config -c {c.path}"]
    # The connection string in /status is masked like one written in the file.
    assert json.loads(seen["/status"])["source"]["publication"] == c.publication
    assert p.terminate() == 0
    seen["log"] = p.stderr() + p.stdout_text()
    assert_never_printed(seen, FIRST)


@pytest.mark.parametrize("way", ["passfile", "PGPASSFILE", "service"])
def test_libpq_password_files(ppg, pcdc, tmp_path, way):
    """libpq's own mechanisms reach it as they are: cdc adds nothing and needs no password key."""
    pgpass = secret_file(tmp_path, "pgpass", f"127.0.0.1:{ppg.port}:*:{ROLE}:{FIRST}\n")
    env = dict(os.environ)
    env.pop("PGPASSWORD", None)
    dsn = role_dsn(ppg)
    if way == "passfile":
        dsn += f" passfile={pgpass}"
    elif way == "PGPASSFILE":
        env["PGPASSFILE"] = pgpass
    else:
        services = secret_file(tmp_path, "pg_service.conf",
                               f"[cdcsvc]\nhost=127.0.0.1\nport={ppg.port}\ndbname=postgres\nuser={ROLE}\n"
                               f"password={FIRST}\n")
        env["PGSERVICEFILE"] = services
        dsn = "service=cdcsvc"
    c = pcdc(source={"dsn": dsn}, publish=["public.sec"],
             subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    p = c.start(env=env)
    insert_and_see(ppg, p, {"passfile": 21, "PGPASSFILE": 22, "service": 23}[way])
    assert p.terminate() == 0
    assert FIRST not in p.stderr()


def doctor_lines(path, check):
    out = run_cdc("doctor", "-c", path, "--json")
    assert out.returncode in (0, 1, 2), out.stderr
    return [(c["status"], c["detail"], c["fix"]) for c in json.loads(out.stdout)["checks"] if c["check"] == check]


def test_doctor_names_the_secrets_in_clear(ppg, pcdc, tmp_path):
    private = secret_file(tmp_path, "private", FIRST)
    shared = secret_file(tmp_path, "shared", FIRST)
    os.chmod(shared, 0o644)
    c = pcdc(source={"dsn": f"{role_dsn(ppg)} password={FIRST}", "password": {"file": private}},
             publish=["public.sec"], subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    st = os.stat(private)
    assert doctor_lines(c.path, "secrets") == [
        ("warn", f"source.dsn is written in {c.path} in clear: whoever reads the file reads it",
         "put it in a file only cdc's user may read (chmod 0400) and write source.dsn: {file: PATH} (for the "
         "password: source.password: {file: PATH}, or libpq's passfile)"),
        ("pass", f"source.password comes from {private} (mode 0600, owner uid {st.st_uid}, group {st.st_gid})", None)]
    c = pcdc(source={"dsn": role_dsn(ppg), "password": {"file": "shared"}}, publish=["public.sec"],
             subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    assert doctor_lines(c.path, "secrets") == [
        ("warn", f"source.password comes from {shared}, which every user of this machine may read (mode 0644)",
         f"chmod o-r {shared}")]
    c = pcdc(source={"dsn": role_dsn(ppg) + f" passfile={private}"}, publish=["public.sec"],
             subscriptions=[{"name": "rows", "tables": ["public.sec"], "sink": "stdout"}])
    assert doctor_lines(c.path, "secrets") == [
        ("pass", "no secret in the configuration (a password, if any, is libpq's: PGPASSWORD, .pgpass, a passfile "
         "or a service file)", None)]

"""test_readme.py: the README's walk-through ("Five minutes with cdc") pasted into a shell, as a new
user does, five times in a row, each time on a fresh database, against a real PostgreSQL.

The block runs as written: read from the README, fed line by line to bash, in a directory of its own
holding `build/cdc` (the binary under test) and a Makefile whose `make` has nothing to do. The server
listens on /var/run/postgresql (the block's source.dsn, as on Debian) and on a port of its own, which
psql and cdc take from PGPORT, as a user's environment would give them."""

import json
import os
import pwd
import re
import subprocess

import pytest

from conftest import CDC_BIN, ROOT
from pg import TempPostgres

RUNS = 5
SOCKET_DIR = "/var/run/postgresql"  # the block's dsn: host=/var/run/postgresql


def walkthrough():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    m = re.search(r"^## Five minutes with cdc\n.*?^```sh\n(.*?)^```$", text, re.S | re.M)
    assert m, "README.md has no sh block under 'Five minutes with cdc'"
    return m.group(1)


@pytest.fixture(scope="module")
def server():
    """A server with a Unix socket in /var/run/postgresql too (made as Debian's postgresql-common
    makes it, where it is missing)."""
    if not os.path.isdir(SOCKET_DIR):
        os.makedirs(SOCKET_DIR)
        pw = pwd.getpwnam("postgres")
        os.chown(SOCKET_DIR, pw.pw_uid, pw.pw_gid)
        os.chmod(SOCKET_DIR, 0o2775)
    pg = TempPostgres()
    pg.settings["unix_socket_directories"] = f"{SOCKET_DIR},{pg.sockdir}"
    with pg:
        yield pg


def fresh(pg):
    """The database as the block expects it: no table orders, no slot cdc_slot, no publication."""
    pg.sql("drop table if exists public.orders")
    pg.sql("select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = 'cdc_slot'")
    pg.sql("drop publication if exists cdc_pub")


def paste(pg, block, where):
    os.makedirs(os.path.join(where, "build"))
    os.symlink(CDC_BIN, os.path.join(where, "build", "cdc"))
    with open(os.path.join(where, "Makefile"), "w") as f:
        f.write("all:\n\t@test -x build/cdc\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "CDC_", "MAKE"))}
    env.update(PGPORT=str(pg.port), PGUSER="postgres", LANG="C.UTF-8")
    # After the block, the test waits for what is left of it and tells cdc's exit status.
    script = block + 'wait %1; echo "cdc run exited with $?"\nwait\n'
    with open(os.path.join(where, "out"), "w") as out:
        p = subprocess.run(["bash", "--norc", "--noprofile", "-s"], input=script, text=True, cwd=where, env=env,
                           stdout=out, stderr=subprocess.STDOUT, timeout=120)
    with open(os.path.join(where, "out")) as f:
        return p.returncode, f.read()


def test_readme_walkthrough_pasted_five_times(server, tmp_path):
    block = walkthrough()
    for run in range(1, RUNS + 1):
        fresh(server)
        rc, out = paste(server, block, str(tmp_path / f"run{run}"))
        where = f"run {run} of {RUNS}:\n{out}"
        assert rc == 0, where
        events = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
        tail = [e for e in events if e.get("subscription") == "orders"]
        run_stdout = [e for e in events if e.get("subscription") == "paid"]
        # cdc tail: the table's schema event, the insert, the update, each with its spool offset.
        assert [(e["op"], e["offset"]) for e in tail] == [("schema", 1), ("insert", 2), ("update", 3)], where
        assert tail[1]["new"] == {"id": 1, "status": "new", "amount": "120"}, where
        assert tail[2]["new"] == {"id": 1, "status": "paid", "amount": "120"}, where
        # cdc run's stdout: the paid subscription's update, and no schema event (operations: [update]).
        assert [(e["op"], e["new"]["status"]) for e in run_stdout] == [("update", "paid")], where
        assert "cdc run exited with 0" in out and "is cdc running?" not in out, where
        # cdc status --wait answered once cdc streamed, before the insert.
        assert re.search(r"^source +streaming +slot=cdc_slot .*\n(.*\n)*INSERT 0 1$", out, re.M), where

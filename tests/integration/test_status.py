"""test_status.py: the status socket of a running cdc (HTTP/1.1 over the Unix socket): /status
figures against what happened, /metrics through Prometheus' own text parser, /healthz and /readyz
across a PostgreSQL outage, `cdc status`, and no password anywhere."""

import json
import os
import signal
import socket
import subprocess
import time

from prometheus_client.parser import text_string_to_metric_families

from conftest import CDC_BIN, wait_for
from subscriber_helpers import Subscriber


def http(path, method="GET", body=None, timeout=10):
    """(status code, body text) of one request: path is (address, target), the address a Unix
    socket's path or a (host, port) pair."""
    addr, target = path
    if isinstance(addr, tuple):
        s = socket.create_connection(addr, timeout=timeout)
    else:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
    req = f"{method} {target} HTTP/1.1\r\nHost: cdc\r\nConnection: close\r\n"
    data = (body or "").encode()
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


def status_sock(c):
    return c.config["status"]["socket"]


def get(c, path):
    return http((status_sock(c), path))


def test_status_metrics_and_cdc_status(pg, schema, cdc):
    pg.sql(f"create table {schema}.jobs (id int primary key)")
    c, p = cdc.start(subscriptions=[
        {"name": "jobs", "tables": [f"{schema}.jobs"], "operations": ["insert"], "sink": "socket"},
        {"name": "all", "tables": [f"{schema}.*"], "sink": "stdout"}],
        source={"dsn": pg.dsn + " password=hunter2-secret"})
    s = Subscriber(c.config["subscribers"]["socket"], "jobs", heartbeat_ms=100)
    pg.sql(f"insert into {schema}.jobs select generate_series(1, 5)")
    evs = s.events(5, 20)
    s.ack([evs[2].offset])
    s.wait_acked(3)

    def figures():
        code, body = get(c, "/status")
        assert code == 200, body
        st = json.loads(body)
        subs = {x["name"]: x for x in st["subscriptions"]}
        return st if subs["jobs"]["delivered"] == 5 and subs["jobs"]["acked_offset"] == 3 else None
    wait_for(figures, 10, what="status figures")
    st = figures()
    assert st["ready"] is True and st["source"]["connected"] is True
    assert st["source"]["slot"] == c.slot and st["source"]["publication"] == c.publication
    assert st["source"]["server_version"].startswith(f"{pg.version}.")
    subs = {x["name"]: x for x in st["subscriptions"]}
    assert {k: subs["jobs"][k] for k in ("sink", "matched", "delivered", "head_offset", "acked_offset",
                                          "pending", "consumers", "dead", "dropped")} == {
        "sink": "socket", "matched": 5, "delivered": 5, "head_offset": 5, "acked_offset": 3, "pending": 2,
        "consumers": 1, "dead": 0, "dropped": 0}
    # all: the rows and the schema event before them (an event like the others)
    assert subs["all"]["sink"] == "stdout" and subs["all"]["matched"] == 6 and subs["all"]["head_offset"] is None
    assert "kafka" not in st
    # The socket sink's group commits: the transaction's five events waited for one at least (one
    # fsync per batch, not per event), and each took some time.
    sync = st["socket"]["spool_sync_ms"]
    assert 1 <= sync["count"] <= 5 and 0 < sync["p50"] <= sync["p99"] <= sync["max"] < 10_000, sync

    code, body = get(c, "/metrics")
    assert code == 200
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    samples = {(s_.name, tuple(sorted(s_.labels.items()))): s_.value for f in fams.values() for s_ in f.samples}
    assert samples[("cdc_subscription_matched_events_total", (("sink", "socket"), ("subscription", "jobs")))] == 5
    assert samples[("cdc_subscription_pending_events", (("subscription", "jobs"),))] == 2
    assert samples[("cdc_ready", ())] == 1
    # Rendered bytes: the stdout sink's are the JSON lines without their commit fields.
    assert 6 * 100 < subs["all"]["bytes"] < 6 * 1000 and subs["jobs"]["bytes"] > 5 * 10
    assert samples[("cdc_subscription_delivered_bytes_total", (("sink", "stdout"), ("subscription", "all")))] == \
        subs["all"]["bytes"]
    assert fams["cdc_delivery_latency_seconds"].samples  # socket: commit to durably spooled
    assert samples[("cdc_delivery_latency_seconds_count", (("sink", "socket"),))] == 5
    assert samples[("cdc_socket_spool_sync_seconds_count", ())] == sync["count"]
    assert samples[("cdc_socket_spool_sync_seconds_bucket", (("le", "+Inf"),))] == sync["count"]

    assert get(c, "/healthz") == (200, "ok\n")
    assert get(c, "/readyz") == (200, "ready\n")
    code, body = get(c, "/subscriptions")
    assert code == 200 and [x["name"] for x in json.loads(body)["subscriptions"]] == ["jobs", "all"]
    code, body = http((status_sock(c), "/subscriptions/new"), "PUT", "{}")
    assert code == 400 and json.loads(body)["details"] == ['body:1:1: missing required key "tables"']

    out = subprocess.run([CDC_BIN, "status", "-c", c.path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("jobs "))
    assert line.split()[:9] == ["jobs", "socket", "5", "5", "2", "2", "3", "1", "0"]
    assert f"socket  spool group commits={sync['count']}  p50=" in out.stdout, out.stdout
    out = subprocess.run([CDC_BIN, "status", "-s", status_sock(c), "--json"], capture_output=True, text=True,
                         timeout=30)
    assert json.loads(out.stdout)["source"]["slot"] == c.slot

    everything = p.stderr() + json.dumps(st) + body
    assert "hunter2-secret" not in everything
    assert p.terminate() == 0


def test_event_loop_lag_and_receive_latency_show_a_stopped_process(pg, schema, cdc):
    """cdc stopped (SIGSTOP) for half a second, a transaction committed meanwhile: the first tick of
    its event loop after it goes on comes at least 0.4 s late (its ticks are 100 ms apart), and that
    transaction was read from the slot at least 0.5 s after its commit, in /status and /metrics."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    wait_for(lambda: get(c, "/readyz") == (200, "ready\n"), 10, what="ready")
    pg.sql(f"insert into {schema}.t values (0)")
    n = len(p.wait_events(1, 20))

    def late_over(seconds):
        """(ticks in all, ticks more than seconds late) from /metrics."""
        fam = {f.name: f for f in text_string_to_metric_families(get(c, "/metrics")[1])}["cdc_event_loop_lag_seconds"]
        le = {s_.labels["le"]: s_.value for s_ in fam.samples if s_.name.endswith("_bucket")}
        return le["+Inf"], le["+Inf"] - le[seconds]
    wait_for(lambda: late_over("0.25")[0] >= 5, 10, what="five ticks")
    _, before = late_over("0.25")
    received = json.loads(get(c, "/status")[1])["receive_latency_ms"]
    assert received["count"] >= 1 and received["max"] < 500, received
    os.kill(p.pid, signal.SIGSTOP)
    try:
        pg.sql(f"insert into {schema}.t values (1)")
        time.sleep(0.5)
    finally:
        os.kill(p.pid, signal.SIGCONT)
    p.wait_events(n + 1, 20)
    wait_for(lambda: late_over("0.25")[1] > before, 10, what="a tick more than 0.25 s late")

    def status():  # once published with the transaction read (figures are up to a second old)
        st = json.loads(get(c, "/status")[1])
        return st if st["receive_latency_ms"]["count"] > received["count"] else None
    wait_for(status, 10, what="the transaction's receive latency")
    st = status()
    assert st["event_loop_lag_ms"]["max"] >= 400 and st["event_loop_lag_ms"]["count"] >= 5, st
    assert st["receive_latency_ms"]["max"] >= 500, st
    assert p.terminate() == 0


def test_readyz_follows_the_database(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start()
    wait_for(lambda: get(c, "/readyz") == (200, "ready\n"), 10, what="ready")
    pg.stop(mode="fast")
    try:
        wait_for(lambda: get(c, "/readyz")[0] == 503, 30, what="503 while PostgreSQL is down")
        code, body = get(c, "/readyz")
        assert "not streaming" in body
        assert get(c, "/healthz") == (200, "ok\n")  # the loop itself is fine
        assert json.loads(get(c, "/status")[1])["source"]["connected"] is False
    finally:
        pg.start()
    wait_for(lambda: get(c, "/readyz") == (200, "ready\n"), 60, what="ready again")
    time.sleep(0.1)
    assert p.running()
    assert p.terminate() == 0


def test_slot_health_warns_when_safe_wal_size_runs_low(pg, schema, cdc):
    """max_slot_wal_keep_size of 64MB lets a slot keep 5 segments (80 MiB) past its restart_lsn's
    segment; a consumer-less socket subscription whose spool is full (when_full: block) holds the
    slot while ~75 MB of WAL is written: safe_wal_size falls under a fifth of 64MB (or below 0)."""
    pg.sql(f"create table {schema}.jobs (id int primary key)")
    pg.sql(f"create table {schema}.filler (b text)")
    c, p = cdc.start(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "sink": "socket",
                                     "retention": {"max_events": 5, "when_full": "block"}}],
                     publish=[f"{schema}.jobs"])
    wait_for(lambda: json.loads(get(c, "/status")[1])["source"]["wal_status"] == "reserved", 20,
             what="wal_status")
    assert json.loads(get(c, "/status")[1])["source"]["safe_wal_size"] is None  # no limit set
    pg.sql("alter system set max_slot_wal_keep_size = '64MB'")
    pg.sql("select pg_reload_conf()")
    try:
        pg.sql(f"insert into {schema}.jobs select generate_series(1, 10)")
        wait_for(lambda: get(c, "/readyz")[0] == 503, 20, what="the spool to fill")
        for _ in range(5):
            pg.sql(f"insert into {schema}.filler select repeat('x', 1900) from generate_series(1, 7500)")

        def warned():
            src = json.loads(get(c, "/status")[1])["source"]
            return src if src["warnings"] else None
        wait_for(warned, 30, what="a warning in /status")
        src = warned()
        keep = 64 << 20
        if src["wal_status"] in ("reserved", "extended"):
            assert src["safe_wal_size"] < keep // 5
            assert src["warnings"] == [
                f"safe_wal_size is low: {src['safe_wal_size']} of max_slot_wal_keep_size {keep} bytes left before "
                "the slot loses WAL; find what holds cdc back (a full spool, a Kafka outage)"]
        else:
            assert src["wal_status"] in ("unreserved", "lost")
            assert "wal_status " + src["wal_status"] in src["warnings"][0]
        assert "the replication slot is in danger" in p.stderr()
        code, body = get(c, "/metrics")
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        assert fams["cdc_source_safe_wal_size_bytes"].samples[0].value < keep // 5
    finally:
        pg.sql("alter system reset max_slot_wal_keep_size")
        pg.sql("select pg_reload_conf()")
    p.kill()


def test_json_logs_have_fields_and_no_password(pg, schema, cdc):
    pg.sql(f"create table {schema}.t (id int primary key)")
    c, p = cdc.start(log={"format": "json", "level": "debug"},
                     source={"dsn": pg.dsn + " password=hunter2-secret"})
    pg.sql(f"insert into {schema}.t values (1)")
    p.wait_events(1, 20)
    assert p.terminate() == 0
    lines = [json.loads(x) for x in p.stderr().splitlines()]
    assert all(set(x) >= {"time", "level", "msg"} for x in lines)
    by_msg = {x["msg"]: x for x in lines}
    assert by_msg["starting"]["slot"] == c.slot and by_msg["starting"]["state_dir"] == c.state_dir
    # A quoted value that itself holds quotes comes out whole.
    # PostgreSQL 14 has no TABLES IN SCHEMA: the schema's tables are listed
    assert by_msg["created publication"]["sql"] == (
        f'CREATE PUBLICATION "{c.publication}" FOR TABLES IN SCHEMA "{schema}"' if pg.version >= 15 else
        f'CREATE PUBLICATION "{c.publication}" FOR TABLE "{schema}"."t"') + " WITH (publish_via_partition_root = true)"
    assert by_msg["stopped"]["flushed_lsn"].count("/") == 1
    assert "hunter2-secret" not in p.stderr()


def test_status_names_each_consumer(pg, schema, cdc):
    """Two named consumers of a shared subscription and a reader of its dead letters: /status lists
    each with its pid, uid, mode, state and figures, and `cdc status` shows them under the
    subscription's row. /status used to have only a count."""
    pg.sql(f"create table {schema}.jobs (id int primary key)")
    c, p = cdc.start(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "sink": "socket",
                                     "operations": ["insert"], "consumers": "shared"}])
    path = c.config["subscribers"]["socket"]
    alpha = Subscriber(path, "jobs", consumer="alpha", max_unacked=2)
    pg.sql(f"insert into {schema}.jobs select generate_series(1, 2)")
    assert [e.offset for e in alpha.events(2, 20)] == [1, 2]
    beta = Subscriber(path, "jobs", consumer="beta", max_unacked=3)
    pg.sql(f"insert into {schema}.jobs select generate_series(3, 5)")
    assert [e.offset for e in beta.events(3, 20)] == [3, 4, 5]
    alpha.ack([1])
    beta.ack([3, 4])
    alpha.answers(1)
    beta.answers(1)
    gamma = Subscriber(path, "jobs", consumer="gamma", dead_letters=True)
    t0 = time.time()

    def jobs():
        code, body = get(c, "/status")
        sub = json.loads(body)["subscriptions"][0]
        return sub if sub["acked"] == 3 and len(sub["dead_letter_readers"]) == 1 else None
    sub = wait_for(jobs, 10, what="the consumers in /status")
    me = {"pid": os.getpid(), "uid": os.getuid(), "mode": "shared", "active": True, "reading": True}
    since = [x.pop("connected_since") for x in sub["attached"] + sub["dead_letter_readers"]]
    assert sub["attached"] == [dict(me, name="alpha", in_flight=1, delivered=2, acked=1),
                               dict(me, name="beta", in_flight=1, delivered=3, acked=2)]
    assert sub["dead_letter_readers"] == [dict(me, name="gamma", mode="failover", in_flight=0, delivered=0,
                                               acked=0)]
    for s_ in since:  # RFC 3339, in UTC, within the test's run
        when = time.mktime(time.strptime(s_[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert s_.endswith("Z") and t0 - 60 < when <= t0 + 1, s_
    out = subprocess.run([CDC_BIN, "status", "-c", c.path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = [x.split() for x in out.stdout.splitlines() if x.startswith("  ")]
    assert [r[:-1] for r in rows] == [
        ["CONSUMER", "PID", "UID", "READS", "MODE", "STATE", "IN_FLIGHT", "DELIVERED", "ACKED"],
        ["alpha", str(os.getpid()), str(os.getuid()), "events", "shared", "active", "1", "2", "1"],
        ["beta", str(os.getpid()), str(os.getuid()), "events", "shared", "active", "1", "3", "2"],
        ["gamma", str(os.getpid()), str(os.getuid()), "dead", "letters", "failover", "active", "0", "0", "0"]]
    assert p.terminate() == 0


def test_relative_paths_are_taken_from_the_config_files_directory(pg, schema, cdc):
    """Issue 31: state_dir and both sockets, written relative in the file, are the same files for every
    command, wherever it runs: they are taken from the configuration file's directory. A command
    that cannot connect names the path it tried."""
    from conftest import CdcProcess, to_yaml
    pg.sql(f"create table {schema}.jobs (id int primary key)")
    c = cdc(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "sink": "socket"}])
    top = cdc.sockdir  # short: socket paths have at most 107 bytes
    conf, elsewhere = os.path.join(top, "conf"), os.path.join(top, "elsewhere")
    os.makedirs(conf)
    os.makedirs(elsewhere)
    with open(os.path.join(conf, "cdc.yaml"), "w") as f:
        f.write(to_yaml(dict(c.config, state_dir="./state", status={"socket": "./status.sock"},
                             subscribers={"socket": "events.sock"})))

    def cli(*args, cwd=elsewhere):
        return subprocess.run([CDC_BIN] + list(args), capture_output=True, text=True, timeout=60, cwd=cwd)

    out = cli("check-config", "-c", "conf/cdc.yaml", cwd=top)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "state_dir: conf/state" in lines and lines.count("  socket: conf/status.sock") == 1
    assert "  socket: conf/events.sock" in lines
    out = cli("check-config", "-c", os.path.join(conf, "cdc.yaml"))
    assert f"state_dir: {conf}/state" in out.stdout.splitlines()

    p = CdcProcess([CDC_BIN, "run", "-c", os.path.join(conf, "cdc.yaml")], os.path.join(cdc.tmp_path, "rel.stdout"),
                   os.path.join(cdc.tmp_path, "rel.stderr"))
    cdc.all_processes.append(p)
    c.wait_streaming(p)
    assert os.path.isdir(os.path.join(conf, "state")) and os.path.exists(os.path.join(conf, "status.sock"))
    out = cli("status", "-c", "../conf/cdc.yaml")
    assert out.returncode == 0 and "\nsource  streaming  slot=" in out.stdout, out.stderr
    pg.sql(f"insert into {schema}.jobs values (7)")
    out = cli("tail", "-c", "../conf/cdc.yaml", "jobs", "--count", "2")
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["op"] for x in out.stdout.splitlines()] == ["schema", "insert"]
    assert p.terminate() == 0
    out = cli("status", "-c", "../conf/cdc.yaml")
    assert out.returncode == 1 and out.stderr.startswith("cdc status: no status socket at ../conf/status.sock: ")
    assert os.listdir(elsewhere) == []


def test_check_config_prints_the_effective_control_uids():
    """Issue 31: status.control_uids' default is root and the uid cdc runs as; check-config prints
    it as it applies to the user who runs it (it printed []), and an empty list is that default."""
    import pwd
    import tempfile
    d = tempfile.TemporaryDirectory(prefix="cdc-uids-")  # readable by nobody, unlike pytest's tmp_path
    os.chmod(d.name, 0o755)
    path = os.path.join(d.name, "cdc.yaml")
    with open(path, "w") as f:
        f.write("status: {control_uids: []}\n")
    os.chmod(path, 0o644)
    users = [(None, os.geteuid())]
    if os.geteuid() == 0:  # as cdc's own user would: the uid of nobody stands in
        users.append((["runuser", "-u", "nobody", "--"], pwd.getpwnam("nobody").pw_uid))
    for prefix, uid in users:
        out = subprocess.run((prefix or []) + [CDC_BIN, "check-config", "-c", path], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        want = "  control_uids: [0]" if uid == 0 else f"  control_uids: [0, {uid}]"
        assert want in out.stdout.splitlines(), out.stdout
    d.cleanup()

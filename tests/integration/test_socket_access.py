"""test_socket_access.py: who may read which socket subscription (allow: {uids, gids}), checked
with SO_PEERCRED at Subscribe, as consumers of other uids meet it. The consumers' sockets are
connected by child processes that run as those uids (and hand the connected socket back), so cdc
sees their credentials:

- a consumer of uid A reads the subscription allowed to A and is refused the one allowed only to B,
  and the other way round; a group (the peer's own or a supplementary one) lets its members in;
  the dead letters are guarded by the same list; a subscription without allow is open to whoever
  can connect; each refusal is an Error PERMISSION_DENIED naming the uid and the subscription,
  counted in /status and /metrics;
- acks of someone else's subscription are impossible: a refused connection's acks are dropped, and
  an ack on one's own subscription names offsets of that subscription only;
- a reload that takes a uid off a list disconnects its consumer; cdc tail is refused with the
  same words, and exits 1.

Tests that switch uids need root and are skipped otherwise (and say so); the last test, run as any
user, shows a refusal of the test's own uid.
"""

import grp
import json
import os
import pwd
import signal
import socket
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import CDC_BIN, to_yaml, wait_for
from subscriber_helpers import ServerError, Subscriber, pb
from test_status import http

# Uids and groups with no entry in /etc/passwd: only their numbers matter to cdc.
UA, GA = 42001, 42001
UB, GB = 42002, 42002
UC, GC = 42003, 42003  # a member of GT, a supplementary group
GT = 42099

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: connects as other uids (setuid); "
                               "SKIPPED, NOT SHOWN")


def connect_as(path, uid, gid, groups=()):
    """A socket connected to path by a child running as uid, gid and the supplementary groups (the
    socket's own group among them, so that its mode lets the child in): SO_PEERCRED says so."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.setgroups(list(groups) + [os.stat(path).st_gid])
            os.setgid(gid)
            os.setuid(uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socket.send_fds(child, [b"ok"], [s.fileno()])
            code = 0
        except BaseException as e:
            child.sendall(repr(e).encode())
        finally:
            os._exit(code)
    child.close()
    msg, fds, _, _ = socket.recv_fds(parent, 1024, 1)
    os.waitpid(pid, 0)
    parent.close()
    assert fds, f"the child could not connect: {msg!r}"
    return socket.socket(fileno=fds[0])


def subscribe_as(path, uid, gid, subscription, groups=(), **kw):
    return Subscriber(path, subscription, sock=connect_as(path, uid, gid, groups), **kw)


def refusal(path, uid, gid, subscription, groups=(), **kw):
    """The Error a consumer of uid gets for Subscribe: (code name, message)."""
    with pytest.raises(ServerError) as err:
        subscribe_as(path, uid, gid, subscription, groups, **kw)
    return err.value.code, err.value.message


def denied_message(uid, gid, subscription, groups=(0,), again=False, dead=False):
    """What cdc says to a consumer of uid, gid and supplementary groups (connect_as adds the socket's
    group, root's here: 0) that the allow list of subscription does not admit."""
    sup = [g for g in groups if g != gid]
    groups_text = f"group {gid}" + ("; supplementary groups " + ", ".join(map(str, sup)) if sup else "")
    return (f"uid {uid} ({groups_text}) {'no longer may' if again else 'may not'} read "
            f"{'the dead letters of ' if dead else ''}subscription {subscription}: neither its uid nor its groups "
            "are in the subscription's allow list (allow: uids, gids)")


def metric(sock, name):
    code, body = http((sock, "/metrics"))
    assert code == 200
    return {s.labels["subscription"]: s.value for f in text_string_to_metric_families(body) for s in f.samples
            if s.name == name}


def status_subs(sock):
    return {s["name"]: s for s in json.loads(http((sock, "/status"))[1])["subscriptions"]}


def subs(schema, **allow):
    out = []
    for name in ("team_a", "team_b", "team_c", "open"):
        s = {"name": name, "tables": [f"{schema}.jobs"], "sink": "socket", "max_deliveries": 2}
        if name in allow:
            s["allow"] = allow[name]
        out.append(s)
    return out


def start(pg, schema, cdc, **allow):
    pg.sql(f"create table if not exists {schema}.jobs (id int primary key)")
    c = cdc(subscriptions=subs(schema, **allow))
    os.chmod(cdc.sockdir, 0o711)  # anyone may reach the sockets: their modes and the allow lists decide
    return c, c.start()


ALLOW = {"team_a": {"uids": [UA]}, "team_b": {"uids": [UB]}, "team_c": {"gids": [GT]}}


@root_only
def test_each_consumer_reads_only_its_subscriptions(pg, schema, cdc):
    c, p = start(pg, schema, cdc, **ALLOW)
    path, status = c.config["subscribers"]["socket"], c.config["status"]["socket"]
    # A reads A's, B reads B's: each is refused the other's.
    a = subscribe_as(path, UA, GA, "team_a")
    b = subscribe_as(path, UB, GB, "team_b")
    assert (a.subscribed.subscription, b.subscribed.subscription) == ("team_a", "team_b")
    assert refusal(path, UA, GA, "team_b") == ("PERMISSION_DENIED", denied_message(UA, GA, "team_b"))
    assert refusal(path, UB, GB, "team_a") == ("PERMISSION_DENIED", denied_message(UB, GB, "team_a"))
    # A group lets its members in, as a supplementary group and as the peer's own.
    cc = subscribe_as(path, UC, GC, "team_c", groups=[GT])
    own = subscribe_as(path, UB, GT, "team_c")
    assert refusal(path, UA, GA, "team_c") == ("PERMISSION_DENIED", denied_message(UA, GA, "team_c"))
    # The dead letters are guarded by the same list.
    dead = subscribe_as(path, UB, GB, "team_b", dead_letters=True)
    assert refusal(path, UA, GA, "team_b", dead_letters=True) == (
        "PERMISSION_DENIED", denied_message(UA, GA, "team_b", dead=True))
    # Without allow: whoever the socket's mode lets in.
    opened = [subscribe_as(path, u, g, "open") for u, g in ((UA, GA), (UB, GB))]

    # Each refusal counted, by subscription; and logged with the uid and the subscription.
    want = {"team_a": 1, "team_b": 2, "team_c": 1, "open": 0}  # the figures are published every second
    wait_for(lambda: metric(status, "cdc_subscription_denied_subscribes_total") == want, 10,
             what=f"the refusals in /metrics: {metric(status, 'cdc_subscription_denied_subscribes_total')}")
    assert {n: s["denied"] for n, s in status_subs(status).items()} == want
    assert f'error="{denied_message(UA, GA, "team_b")}"' in p.stderr()
    for s in [a, b, cc, own, dead] + opened:
        assert not s.closed
        s.close()
    assert p.terminate() == 0


@root_only
def test_acks_of_someone_elses_subscription_are_impossible(pg, schema, cdc):
    c, p = start(pg, schema, cdc, **ALLOW)
    path, status = c.config["subscribers"]["socket"], c.config["status"]["socket"]
    b = subscribe_as(path, UB, GB, "team_b")
    pg.sql(f"insert into {schema}.jobs select generate_series(1, 3)")
    got = b.events(4, 20)  # the schema event and three rows, in flight to B
    offsets = [e.offset for e in got]
    assert offsets == [1, 2, 3, 4]

    # A's Subscribe to B's subscription and the acks right behind it, in one write: refused, the
    # acks read and dropped with everything after the Error.
    s = Subscriber(path, "team_b", sock=connect_as(path, UA, GA), expect_subscribed=False)
    s.ack(offsets)
    f = s.recv(10)
    assert (f.WhichOneof("kind"), f.error.code) == ("error", pb.Error.PERMISSION_DENIED)
    assert s.recv(10) is None and s.closed
    # Subscribed to its own, A's acks name its own subscription's offsets: never delivered there.
    a = subscribe_as(path, UA, GA, "team_a", max_unacked=1)
    a.events(1, 20)  # team_a's schema event, offset 1, in flight to A
    a.ack(offsets[1:])
    [acked] = a.answers(1)
    assert [(r.offset, r.reason) for r in acked.refused] == [(o, pb.Refused.NOT_DELIVERED) for o in offsets[1:]]
    wait_for(lambda: status_subs(status)["team_a"]["refused"] == 3, 10, what="A's refused acks in /status")
    st = status_subs(status)
    assert (st["team_b"]["acked_offset"], st["team_b"]["in_flight"], st["team_b"]["acked"]) == (0, 4, 0)
    assert st["team_a"]["acked_offset"] == 0
    # B's own acks count.
    b.ack(offsets)
    b.wait_acked(4)
    for x in (a, b):
        x.close()
    assert p.terminate() == 0


@root_only
def test_a_reload_that_takes_a_uid_off_disconnects_its_consumer(pg, schema, cdc):
    c, p = start(pg, schema, cdc, **ALLOW)
    path = c.config["subscribers"]["socket"]
    a = subscribe_as(path, UA, GA, "team_a")
    with open(c.path) as f:
        text = f.read()
    c.config["subscriptions"] = subs(schema, team_a={"uids": [UB]}, team_b=ALLOW["team_b"], team_c=ALLOW["team_c"])
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    assert text != to_yaml(c.config)
    p.signal(signal.SIGHUP)
    f = a.recv(20)
    assert (f.WhichOneof("kind"), f.error.code, f.error.message) == (
        "error", pb.Error.PERMISSION_DENIED, denied_message(UA, GA, "team_a", again=True))
    assert a.recv(10) is None and a.closed
    b = subscribe_as(path, UB, GB, "team_a")
    assert b.subscribed.subscription == "team_a"
    b.close()
    assert p.terminate() == 0


@root_only
def test_cdc_tail_is_refused_with_the_uid_and_subscription(pg, schema, cdc):
    c, p = start(pg, schema, cdc, **ALLOW)
    path = c.config["subscribers"]["socket"]
    gid = os.stat(path).st_gid

    def as_a():
        os.setgroups([gid])
        os.setgid(GA)
        os.setuid(UA)
    out = subprocess.run([CDC_BIN, "tail", "-s", path, "team_b", "--timeout", "5"], preexec_fn=as_a, cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"cdc tail: {denied_message(UA, GA, 'team_b', groups=[gid])}\n"
    assert p.terminate() == 0


def test_a_uid_not_in_the_list_is_refused(pg, schema, cdc):
    """Whoever runs the tests: its own uid is not in the list, so it is refused (root too: a list
    names everyone it admits)."""
    me = os.geteuid()
    c, p = start(pg, schema, cdc, team_a={"uids": [me + 1]}, team_b={"uids": [me]})
    path = c.config["subscribers"]["socket"]
    with pytest.raises(ServerError) as err:
        Subscriber(path, "team_a")
    assert err.value.code == "PERMISSION_DENIED"
    assert err.value.message.startswith(f"uid {me} (group {os.getegid()}")
    assert err.value.message.endswith(" may not read subscription team_a: neither its uid nor its groups are in "
                                      "the subscription's allow list (allow: uids, gids)")
    ok = Subscriber(path, "team_b")
    assert ok.subscribed.subscription == "team_b"
    ok.close()
    wait_for(lambda: metric(c.config["status"]["socket"], "cdc_subscription_denied_subscribes_total") ==
             {"team_a": 1, "team_b": 0, "team_c": 0, "open": 0}, 10, what="the refusal in /metrics")
    assert p.terminate() == 0


def test_doctor_lists_who_may_read_each_subscription(pg, schema, cdc):
    c, p = start(pg, schema, cdc, team_a={"uids": [0, UA]}, team_b={"gids": [0]})
    out = subprocess.run([CDC_BIN, "doctor", "-c", c.path, "--json"], capture_output=True, text=True, timeout=60)
    lines = [(x["status"], x["detail"]) for x in json.loads(out.stdout)["checks"] if x["check"] == "access"]
    path, status = c.config["subscribers"]["socket"], c.config["status"]["socket"]
    st = os.stat(path)
    me = f"uid {st.st_uid} ({pwd.getpwuid(st.st_uid).pw_name}), group {st.st_gid} ({grp.getgrgid(st.st_gid).gr_name})"
    control = "0 (root)" + ("" if st.st_uid == 0 else f", {st.st_uid} ({pwd.getpwuid(st.st_uid).pw_name})")
    assert lines == [
        ("pass", f"status.socket {status}: mode 0660, owner {me}: its owner and the members of its group may connect"),
        ("pass", f"status.control_uids: uids {control} may change subscriptions and start backfills over "
         "status.socket"),
        ("pass", f"subscribers.socket {path}: mode 0660, owner {me}: its owner and the members of its group may "
         "connect"),
        ("pass", f"subscription team_a: only uids 0 (root), {UA} and the groups (none) may read it"),
        ("pass", "subscription team_b: only uids (none) and the groups 0 (root) may read it"),
        ("pass", "subscription team_c: no allow list: whoever may connect to subscribers.socket may read it"),
        ("pass", "subscription open: no allow list: whoever may connect to subscribers.socket may read it"),
    ], out.stdout
    assert p.terminate() == 0

"""test_status_listener.py: the status endpoints over TCP (status.listen), as a client on the pod's
network meets them:

- a bearer token (status.token, from a file): a PUT without it, or with another, is refused (401)
  and changes nothing; with it, it is applied; with tcp_read: probes, /healthz and /readyz answer
  anyone and /metrics, /status, /subscriptions only the token's holders; the refusals are counted
  in /metrics; a SIGHUP reads the token's file again (the old token is refused from then on);
- cdc status and cdc backfill reach status.listen with -s http(s)://HOST:PORT --token-file;
- HTTPS (status.tls_cert, status.tls_key): the listener speaks TLS only, cdc status checks its
  certificate (--cacert) and names a wrong one, and a SIGHUP with new files has new connections
  served the new certificate.
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from conftest import CDC_BIN, to_yaml, wait_for
from pg import free_port

TOKEN, NEW_TOKEN = "tok-" + "a1" * 16, "tok-" + "b2" * 16


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return str(path)


def call(url, method="GET", body=None, token=None, context=None):
    """(status, body, headers) of one request; 4xx and 5xx answers are returned, not raised."""
    req = urllib.request.Request(url, data=body.encode() if body is not None else None, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def run_cdc(*args):
    return subprocess.run([CDC_BIN, *args], capture_output=True, text=True, timeout=60)


def doctor_listener(path):
    """cdc doctor's line about status.listen: (status, detail, fix)."""
    out = run_cdc("doctor", "-c", path, "--json")
    return [(x["status"], x["detail"], x["fix"]) for x in json.loads(out.stdout)["checks"]
            if x["check"] == "access" and x["detail"].startswith("status.listen ")]


def start(pg, schema, cdc, tmp_path, **status):
    pg.sql(f"create table {schema}.jobs (id int primary key)")
    port = free_port()
    token_file = write(tmp_path / "token", TOKEN + "\n")
    st = {"socket": os.path.join(cdc.sockdir, "status.sock"), "listen": f"127.0.0.1:{port}",
          "tcp_control": True, "token": {"file": token_file}, "tcp_read": "probes"}
    st.update(status)
    c, p = cdc.start(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "sink": "socket"}], status=st)
    return c, p, port, token_file


def test_a_put_over_tcp_needs_the_token(pg, schema, cdc, tmp_path):
    c, p, port, token_file = start(pg, schema, cdc, tmp_path)
    base = f"http://127.0.0.1:{port}"
    put = json.dumps({"tables": [f"{schema}.jobs"], "sink": "stdout"})

    # Without the token, or with another: 401, nothing changes.
    code, body, headers = call(f"{base}/subscriptions/extra", "PUT", put)
    assert (code, json.loads(body)) == (401, {"error": "this endpoint needs status.token over status.listen: "
                                                       "send Authorization: Bearer TOKEN"})
    assert headers["WWW-Authenticate"] == 'Bearer realm="cdc"'
    code, body, headers = call(f"{base}/subscriptions/extra", "PUT", put, token=NEW_TOKEN)
    assert (code, json.loads(body)) == (401, {"error": "the bearer token is not status.token"})
    assert headers["WWW-Authenticate"] == 'Bearer realm="cdc", error="invalid_token"'
    code, body, _ = call(f"{base}/subscriptions", token=TOKEN)
    assert code == 200 and [s["name"] for s in json.loads(body)["subscriptions"]] == ["jobs"]
    assert "control request refused method=PUT subscription=extra peer=127.0.0.1 reason=\"the bearer token " \
        "is not status.token\"" in p.stderr()
    # With it: applied.
    code, body, _ = call(f"{base}/subscriptions/extra", "PUT", put, token=TOKEN)
    assert code == 200 and (json.loads(body)["subscription"], json.loads(body)["action"]) == ("extra", "put")
    code, body, _ = call(f"{base}/subscriptions", token=TOKEN)
    assert [s["name"] for s in json.loads(body)["subscriptions"]] == ["jobs", "extra"]

    # tcp_read: probes: the probes answer anyone, the rest only the token's holders.
    assert call(f"{base}/healthz")[:2] == (200, "ok\n")
    assert call(f"{base}/readyz")[:2] == (200, "ready\n")
    for path in ("/metrics", "/status", "/subscriptions", "/backfills"):
        assert call(f"{base}{path}")[0] == 401, path
        assert call(f"{base}{path}", token=TOKEN)[0] == 200, path
    # The Unix socket asks for nothing: its mode and control_uids decide.
    out = run_cdc("status", "-c", c.path, "--json")
    assert out.returncode == 0, out.stderr
    # Every refusal counted: 2 PUTs and 4 GETs.
    wait_for(lambda: "\ncdc_status_unauthorized_requests_total 6\n" in call(f"{base}/metrics", token=TOKEN)[1], 10,
             what="the refusals in /metrics")

    # cdc status and cdc backfill over status.listen, with the token's file.
    out = run_cdc("status", "-s", base, "--token-file", token_file, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["source"]["slot"] == c.slot, out.stderr
    out = run_cdc("status", "-s", base, "--json")
    assert out.returncode == 1
    assert out.stderr == f"cdc status: {base} answered 401: " + json.dumps(
        {"error": "this endpoint needs status.token over status.listen: send Authorization: Bearer TOKEN"},
        separators=(",", ":")) + "\n"
    out = run_cdc("backfill", "-s", base, "--token-file", token_file, "jobs", "--no-wait")
    assert out.returncode == 0 and out.stdout.startswith("backfill "), out.stderr
    out = run_cdc("status", "-c", c.path, "--token-file", token_file)
    assert out.returncode == 2 and "--token-file and --cacert go with -s http://HOST:PORT or https://HOST:PORT" \
        in out.stderr

    # A SIGHUP reads the token's file again: the old token is refused from then on.
    write(token_file, NEW_TOKEN + "\n")
    n = p.stderr().count("reloaded subscriptions")
    p.signal(signal.SIGHUP)
    wait_for(lambda: p.stderr().count("reloaded subscriptions") > n, 10, what=p.describe())
    assert call(f"{base}/metrics", token=TOKEN)[0] == 401
    assert call(f"{base}/metrics", token=NEW_TOKEN)[0] == 200
    assert "take effect at the next restart" not in p.stderr()
    assert p.terminate() == 0
    for s in (TOKEN, NEW_TOKEN):
        assert s not in p.stderr() + run_cdc("check-config", "-c", c.path).stdout


def test_tcp_read_token_guards_the_probes_too(pg, schema, cdc, tmp_path):
    c, p, port, _ = start(pg, schema, cdc, tmp_path, tcp_control=False, tcp_read="token")
    base = f"http://127.0.0.1:{port}"
    assert call(f"{base}/healthz")[0] == 401
    assert call(f"{base}/healthz", token=TOKEN)[:2] == (200, "ok\n")
    # tcp_control off: a PUT is refused whatever it carries.
    code, body, _ = call(f"{base}/subscriptions/x", "PUT", "{}", token=TOKEN)
    assert (code, json.loads(body)["error"]) == (
        403, "changing subscriptions over TCP needs status.tcp_control: true; use the Unix socket")
    assert p.terminate() == 0
    # cdc doctor says who reaches the listener, and warns where reading is open beyond the loopback
    # or the token travels in clear beyond it.
    assert doctor_listener(c.path) == [(
        "pass", f"status.listen 127.0.0.1:{port} (plain HTTP, this machine's processes only (in a pod: its "
        "containers)): every endpoint needs status.token; changes off", None)]
    c.config["status"].update(listen=f"0.0.0.0:{port}", tcp_read="open")
    del c.config["status"]["token"]
    with open(c.path, "w") as f:
        f.write(to_yaml(c.config))
    assert doctor_listener(c.path) == [(
        "warn", f"status.listen 0.0.0.0:{port} (plain HTTP, whoever the network lets in): reading open to whoever "
        "reaches the port; changes off",
        "set status.tcp_read: probes (or token) with status.token: {file: PATH}, or listen on 127.0.0.1; a "
        "NetworkPolicy can keep others from the port")]


def openssl(d, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)


def make_cert(d, ca, name, cn):
    """name.crt / name.key for 127.0.0.1, signed by the CA ca (ca.crt, ca.key)."""
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={cn}")
    write(os.path.join(d, "san.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n", 0o644)
    openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext")


def peer_cn(port, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            return dict(x[0] for x in t.getpeercert()["subject"])["commonName"]


def test_https_listener(pg, schema, cdc, tmp_path):
    d = str(tmp_path)
    for ca in ("ca", "other-ca"):
        openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                f"{ca}.key", "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=cdc-test-{ca}")
    make_cert(d, "ca", "first", "cdc-status-1")
    make_cert(d, "ca", "second", "cdc-status-2")
    cert, key = os.path.join(d, "listener.crt"), os.path.join(d, "listener.key")
    for src, dst in (("first.crt", cert), ("first.key", key)):
        write(dst, open(os.path.join(d, src)).read())
    c, p, port, token_file = start(pg, schema, cdc, tmp_path, tls_cert=cert, tls_key=key)
    ca = os.path.join(d, "ca.crt")
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=ca)
    assert call(f"{url}/healthz", context=ctx)[:2] == (200, "ok\n")
    assert call(f"{url}/metrics", token=TOKEN, context=ctx)[0] == 200
    # Plain HTTP on the TLS port gets nothing.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        call(f"http://127.0.0.1:{port}/healthz")
    # cdc status checks the certificate against --cacert (and its names against the host).
    out = run_cdc("status", "-s", url, "--token-file", token_file, "--cacert", ca, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["source"]["slot"] == c.slot, out.stderr
    out = run_cdc("status", "-s", url, "--token-file", token_file, "--cacert", os.path.join(d, "other-ca.crt"))
    assert out.returncode == 1
    assert out.stderr.startswith(f"cdc status: {url}: status.listen's certificate is refused: unable to get local "
                                 "issuer certificate (the CA certificates trusted do not include the one that signed "
                                 "it): the certificate /CN=cdc-status-1, issued by /CN=cdc-test-ca"), out.stderr
    assert out.stderr.endswith(" (--cacert names its CA)\n"), out.stderr
    out = run_cdc("status", "-s", f"https://localhost:{port}", "--token-file", token_file, "--cacert", ca)
    assert out.returncode == 0, out.stderr
    assert doctor_listener(c.path) == [(
        "pass", f"status.listen 127.0.0.1:{port} (HTTPS, this machine's processes only (in a pod: its "
        "containers)): /healthz and /readyz open, the other reading endpoints need status.token; changes need "
        "status.token", None)]

    # New files and a SIGHUP: new connections get the new certificate, no restart.
    assert peer_cn(port, ca) == "cdc-status-1"
    for src, dst in (("second.crt", cert), ("second.key", key)):
        write(dst, open(os.path.join(d, src)).read())
    p.signal(signal.SIGHUP)
    wait_for(lambda: "status.listen serves the new certificate" in p.stderr(), 10, what=p.describe())
    assert peer_cn(port, ca) == "cdc-status-2"
    assert call(f"{url}/healthz", context=ctx)[:2] == (200, "ok\n")
    # A key that does not go with the certificate: logged, and the one in force stays.
    write(key, open(os.path.join(d, "first.key")).read())
    p.signal(signal.SIGHUP)
    wait_for(lambda: "status.listen keeps its certificate: the new one cannot be used" in p.stderr(), 10,
             what=p.describe())
    assert peer_cn(port, ca) == "cdc-status-2"
    assert p.terminate() == 0

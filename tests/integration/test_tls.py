"""test_tls.py: cdc over TLS to a PostgreSQL server of this module's own (ssl=on), with a certificate
chain made here by openssl: a root CA, an intermediate CA, the server's certificate signed by the
intermediate (the server sends both), and a client certificate signed by the root.

- sslmode=verify-full with sslrootcert naming the root: both of cdc's connections are TLS, and it
  streams;
- refused, each with a message that names the problem (libpq 15 says only "certificate verify
  failed": cdc asks the server itself and says what OpenSSL finds): a CA that did not sign the
  chain, a host name the certificate does not name, an expired certificate;
- a role that must show a client certificate (hostssl ... cert in pg_hba.conf): cdc streams with
  sslcert and sslkey, and without them, or with another name's certificate, is refused with the
  server's reason.
"""

import os
import shutil
import subprocess
import tempfile

import psycopg2.sql
import pytest

from conftest import cdc_factory, wait_for
from pg import TempPostgres, server_tls_files

CERT_ROLE = "cdc_cert"


def openssl(d, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   timeout=60)


def key_and_csr(d, name, cn):
    openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")


def sign(d, name, ca, days, ext=None):
    """name.crt from name.csr, signed by ca (a name: ca.crt and ca.key), valid for days (-1: expired
    since yesterday), with the extensions of the text ext."""
    args = ["x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", str(days)]
    if ext:
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext)
        args += ["-extfile", f"{name}.ext"]
    openssl(d, *args)


class Chain:
    """root -> intermediate -> server (localhost, 127.0.0.1); root -> client (CN=cdc_cert, and one for
    another name); an unrelated CA; the same server certificate expired."""

    def __init__(self, d):
        self.dir = d
        for ca in ("root", "other-ca"):
            openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=cdc-test-{ca}")
        key_and_csr(d, "intermediate", "cdc-test-intermediate")
        sign(d, "intermediate", "root", 2, "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
        key_and_csr(d, "server", "localhost")
        san = "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
        sign(d, "server", "intermediate", 2, san)
        os.rename(os.path.join(d, "server.crt"), os.path.join(d, "server-only.crt"))
        sign(d, "server", "intermediate", -1, san)
        os.rename(os.path.join(d, "server.crt"), os.path.join(d, "expired-only.crt"))
        for name in ("server", "expired"):  # what the server sends: its certificate, then the intermediate
            with open(os.path.join(d, f"{name}-chain.crt"), "w") as out:
                for part in (f"{name}-only.crt", "intermediate.crt"):
                    with open(os.path.join(d, part)) as f:
                        out.write(f.read())
        for name, cn in (("client", CERT_ROLE), ("stranger", "someone_else")):
            key_and_csr(d, name, cn)
            sign(d, name, "root", 2)
            os.chmod(os.path.join(d, f"{name}.key"), 0o600)  # libpq refuses a key others may read
        self.root = os.path.join(d, "root.crt")
        self.other_ca = os.path.join(d, "other-ca.crt")
        self.served = os.path.join(d, "served.crt")  # the server's ssl_cert_file: a copy it can swap
        shutil.copy(os.path.join(d, "server-chain.crt"), self.served)

    def path(self, name):
        return os.path.join(self.dir, name)

    def serve(self, name):
        """The server's certificate file becomes name-chain.crt (taken at the next reload)."""
        shutil.copy(self.path(f"{name}-chain.crt"), self.served)


@pytest.fixture(scope="module")
def chain():
    d = tempfile.mkdtemp(prefix="cdc-chain-", dir="/tmp")
    try:
        c = Chain(d)
        server_tls_files(d, c.served, c.path("server.key"))
        yield c
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def tpg(chain):
    """TLS on, client certificates checked against the root; CERT_ROLE logs in only with one."""
    with TempPostgres(ssl=True, ssl_cert_file=chain.served, ssl_key_file=chain.path("server.key"),
                      ssl_ca_file=chain.root) as server:
        server.sql(psycopg2.sql.SQL("create role {} login replication superuser").format(
            psycopg2.sql.Identifier(CERT_ROLE)))
        server.hba_first(*(f"hostssl {db} {CERT_ROLE} 127.0.0.1/32 cert" for db in ("all", "replication")),
                         *(f"host {db} {CERT_ROLE} 127.0.0.1/32 reject" for db in ("all", "replication")))
        server.sql("create table public.tls_t (id int primary key)")
        yield server


@pytest.fixture
def tcdc(tpg, tmp_path, request):
    with cdc_factory(tpg, tmp_path, request) as f:
        yield f


def tls_dsn(tpg, rootcert, host="localhost", user="postgres", mode="verify-full", **extra):
    dsn = f"host={host} port={tpg.port} dbname=postgres user={user} sslmode={mode} sslrootcert={rootcert}"
    return dsn + "".join(f" {k}={v}" for k, v in extra.items())


def streams(tpg, tcdc, dsn, row):
    c = tcdc(source={"dsn": dsn}, publish=["public.tls_t"],
             subscriptions=[{"name": "t", "tables": ["public.tls_t"], "sink": "stdout"}])
    p = c.start()
    tpg.sql("insert into public.tls_t values (%s)", (row,))
    assert [e["new"] for e in p.wait_events(1, pred=lambda e: e["new"]["id"] == row)] == [{"id": row}]
    return c, p


def cdc_backends(tpg, user):
    return tpg.sql("select a.backend_type, s.ssl, s.client_dn from pg_stat_activity a join pg_stat_ssl s "
                   "using (pid) where a.application_name = 'cdc' and a.usename = %s order by 1", (user,))


def refusal(tpg, tcdc, dsn):
    """The line cdc logs when its connection is refused (it keeps retrying and creates nothing)."""
    c = tcdc(source={"dsn": dsn}, publish=["public.tls_t"],
             subscriptions=[{"name": "t", "tables": ["public.tls_t"], "sink": "stdout"}])
    p = c.run()
    wait_for(lambda: "not streaming; retrying" in p.stderr(), 20, what=p.describe())
    line = next(x for x in p.stderr().splitlines() if "not streaming; retrying" in x)
    assert "cannot connect to PostgreSQL:" in line
    assert c.slot_row() is None  # never got as far as the slot
    assert p.terminate() == 0, p.describe()
    return line


def test_verify_full_through_a_chain(tpg, tcdc, chain):
    c, p = streams(tpg, tcdc, tls_dsn(tpg, chain.root), 1)
    # Both of cdc's connections, the walsender included, are TLS.
    wait_for(lambda: cdc_backends(tpg, "postgres") == [("client backend", True, None), ("walsender", True, None)],
             10, what=f"cdc's two connections over TLS: {cdc_backends(tpg, 'postgres')}")
    assert p.terminate() == 0, p.describe()


def test_a_ca_that_did_not_sign_the_chain_is_refused(tpg, tcdc, chain):
    line = refusal(tpg, tcdc, tls_dsn(tpg, chain.other_ca))
    assert "SSL error: certificate verify failed: unable to get local issuer certificate (the CA certificates " \
        "trusted do not include the one that signed it): the certificate /CN=localhost, issued by " \
        "/CN=cdc-test-intermediate, valid from " in line, line
    assert f"(checked against {chain.other_ca}) (sslrootcert in source.dsn must name the CA that signed the " \
        "server's certificate, or the root of its chain)" in line  # and what to do


def test_a_host_name_the_certificate_does_not_name_is_refused(tpg, tcdc, chain):
    """127.0.0.2 reaches the same server, but the certificate names localhost and 127.0.0.1: libpq
    says so itself; verify-ca, which does not check names, streams."""
    line = refusal(tpg, tcdc, tls_dsn(tpg, chain.root, host="cdc-test.invalid", hostaddr="127.0.0.1"))
    assert 'server certificate for "localhost" (and 1 other name) does not match host name "cdc-test.invalid" ' \
        "(sslmode=verify-full checks that the certificate names the host of source.dsn" in line, line
    c, p = streams(tpg, tcdc, tls_dsn(tpg, chain.root, host="cdc-test.invalid", hostaddr="127.0.0.1",
                                      mode="verify-ca"), 2)
    assert p.terminate() == 0


def test_an_expired_certificate_is_refused(tpg, tcdc, chain):
    chain.serve("expired")
    tpg.sql("select pg_reload_conf()")
    try:
        line = refusal(tpg, tcdc, tls_dsn(tpg, chain.root))
    finally:
        chain.serve("server")
        tpg.sql("select pg_reload_conf()")
    assert "SSL error: certificate verify failed: certificate has expired: the certificate /CN=localhost, " \
        "issued by /CN=cdc-test-intermediate, valid from " in line, line
    assert "(the server's certificate has expired: renew it, ssl_cert_file on the server)" in line


def test_a_role_that_needs_a_client_certificate(tpg, tcdc, chain):
    with_cert = tls_dsn(tpg, chain.root, user=CERT_ROLE, sslcert=chain.path("client.crt"),
                        sslkey=chain.path("client.key"))
    c, p = streams(tpg, tcdc, with_cert, 3)
    wait_for(lambda: cdc_backends(tpg, CERT_ROLE) == [("client backend", True, f"/CN={CERT_ROLE}"),
                                                      ("walsender", True, f"/CN={CERT_ROLE}")],
             10, what=f"cdc's connections with its certificate: {cdc_backends(tpg, CERT_ROLE)}")
    assert p.terminate() == 0
    # No certificate (libpq then sends none: the files at the default paths do not exist).
    line = refusal(tpg, tcdc, tls_dsn(tpg, chain.root, user=CERT_ROLE, sslcert="/nonexistent/cdc.crt"))
    assert "connection requires a valid client certificate (the role logs in with a client certificate: give " \
        "it with sslcert and sslkey in source.dsn)" in line, line
    # Another name's certificate, from the right CA.
    line = refusal(tpg, tcdc, tls_dsn(tpg, chain.root, user=CERT_ROLE, sslcert=chain.path("stranger.crt"),
                                      sslkey=chain.path("stranger.key")))
    assert f'certificate authentication failed for user "{CERT_ROLE}" (the client certificate\'s common name ' \
        "must be the role's name, or be mapped to it in pg_ident.conf)" in line, line

"""test_packages.py: the client libraries as their users install them, in fresh environments away
from the repository. Python: a wheel built offline (python3 -m build --no-isolation) and `pip
install proto/clients/python` into a new virtualenv (no package index; Debian's python3-protobuf
through --system-site-packages). TypeScript: `npm pack`'s tarball installed into a new npm project.
Each example worker, run from its installed package, processes the rows of a real cdc; both
packages carry cdc's VERSION."""

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

from npm import npm_ci

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY_CLIENT = os.path.join(ROOT, "proto", "clients", "python")
TS_CLIENT = os.path.join(ROOT, "proto", "clients", "typescript")
with open(os.path.join(ROOT, "VERSION")) as f:
    VERSION = f.read().strip()
with open("/usr/share/common-licenses/Apache-2.0") as f:  # Debian's base-files: the licence's text
    APACHE_2 = f.read()


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def jobs_cdc(pg, schema, cdc, n):
    """A running cdc with a socket subscription "jobs" holding n inserted rows."""
    pg.sql(f"create table {schema}.jobs (id int primary key, note text)")
    c, p = cdc.start(subscriptions=[{"name": "jobs", "tables": [f"{schema}.jobs"], "operations": ["insert"],
                                     "sink": "socket"}])  # rows only: the worker prints every event
    pg.sql(f"insert into {schema}.jobs select i, 'n' || i from generate_series(1, {n}) i")
    return c, p


def expected_lines(n):
    return [{"offset": i, "op": "insert", "table": "jobs", "row": {"id": i, "note": f"n{i}"}}
            for i in range(1, n + 1)]


# --- Python --------------------------------------------------------------------------------------

def test_python_wheel_builds_offline(tmp_path):
    run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(tmp_path), PY_CLIENT])
    wheel = tmp_path / f"cdc_client-{VERSION}-py3-none-any.whl"
    assert os.listdir(tmp_path) == [wheel.name]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"cdc_client-{VERSION}.dist-info/METADATA").decode()
        licence = z.read(f"cdc_client-{VERSION}.dist-info/LICENSE").decode()
    # The protobuf modules are generated into the wheel by the build; the .proto files stay out.
    assert {"cdc_client/_pb/__init__.py", "cdc_client/_pb/event_pb2.py", "cdc_client/_pb/subscriber_pb2.py",
            "cdc_client/__init__.py", "cdc_client/_protoc.py"} <= names
    assert not [n for n in names if n.endswith(".proto")]
    requires = [re.sub(r"[ ()]", "", ln.split(":", 1)[1]) for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    assert f"\nVersion: {VERSION}\n" in meta and requires == ["protobuf>=3.20"]
    # Apache-2.0 by its SPDX identifier, with the repository's LICENSE beside the metadata.
    assert "\nLicense: Apache-2.0\n" in meta and "\nLicense-File: LICENSE\n" in meta
    assert licence == APACHE_2


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A new virtualenv (seeing Debian's python3-protobuf) with `pip install proto/clients/python`."""
    d = tmp_path_factory.mktemp("venv") / "env"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(d)])
    pip = run([str(d / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", PY_CLIENT])
    assert f"Successfully installed cdc-client-{VERSION}" in pip
    return d


def test_python_client_installs_with_pip_and_its_worker_runs(pg, schema, cdc, venv, tmp_path):
    # Imported from the virtualenv, with the modules built at install time: no protoc on PATH.
    env = {"PATH": str(venv / "bin"), "LANG": "C.UTF-8"}
    where = run([str(venv / "bin" / "python"), "-c",
                 "import cdc_client, cdc_client._pb as pb, importlib.metadata as m; "
                 "print(cdc_client.__file__, pb.__file__, m.version('cdc-client'))"], env=env, cwd=tmp_path)
    client_file, pb_file, version = where.split()
    assert client_file.startswith(str(venv)) and pb_file.startswith(str(venv)) and version == VERSION
    n = 20
    c, p = jobs_cdc(pg, schema, cdc, n)
    out = run([str(venv / "bin" / "python"), os.path.join(PY_CLIENT, "examples", "worker.py"),
               c.config["subscribers"]["socket"], "jobs", "--count", str(n)], env=env, cwd=tmp_path)
    assert [json.loads(x) for x in out.splitlines()] == expected_lines(n)
    assert p.terminate() == 0


# --- TypeScript ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ts_tarball(tmp_path_factory):
    """`npm pack` of the TypeScript client (prepack builds it: the .proto files copied in, tsc)."""
    npm_ci(TS_CLIENT)
    d = tmp_path_factory.mktemp("pack")
    run(["npm", "pack", "--silent", "--pack-destination", str(d)], cwd=TS_CLIENT)
    tgz = d / f"cdc-client-{VERSION}.tgz"
    assert os.listdir(d) == [tgz.name]
    return tgz


def test_typescript_tarball_holds_the_built_client(ts_tarball):
    with tarfile.open(ts_tarball) as t:
        names = set(t.getnames())
        pkg = json.load(t.extractfile("package/package.json"))
        licence = t.extractfile("package/LICENSE").read().decode()
    assert pkg["version"] == VERSION and pkg["dependencies"] == {"protobufjs": "8.8.1"}
    assert pkg["license"] == "Apache-2.0" and licence == APACHE_2
    assert {"package/dist/src/index.js", "package/dist/src/index.d.ts", "package/dist/examples/worker.js",
            "package/proto/cdc/v1/event.proto", "package/proto/cdc/v1/subscriber.proto",
            "package/README.md"} <= names
    assert not [n for n in names if n.endswith(".ts") and not n.endswith(".d.ts")]  # compiled only


def test_typescript_tarball_installs_and_its_worker_runs(pg, schema, cdc, ts_tarball, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0", "private": True}))
    run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", str(ts_tarball)],
        cwd=app)
    installed = app / "node_modules" / "@cdc" / "client"
    # The application requires the package by name; it loads the schema it was packed with.
    got = run(["node", "-e", "const c = require('@cdc/client'); "
               "console.log(typeof c.Consumer, c.protoDir(), c.ServerFrame.fullName)"], cwd=app)
    assert got.split() == ["function", str(installed / "proto"), ".cdc.v1.ServerFrame"]
    n = 20
    c, p = jobs_cdc(pg, schema, cdc, n)
    out = run(["node", str(installed / "dist" / "examples" / "worker.js"), c.config["subscribers"]["socket"],
               "jobs", "--count", str(n)], cwd=app)
    assert [json.loads(x) for x in out.splitlines()] == expected_lines(n)
    assert p.terminate() == 0

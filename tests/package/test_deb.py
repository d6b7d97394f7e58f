"""test_deb.py: the Debian package of `make deb` ($CDC_DEB) as a user meets it, without installing it
on this machine: its files unpacked into a throwaway root (dpkg -x) with the base system's units
and /bin/kill beside them. The installed cdc runs (--version, check-config of the shipped example,
a stream from a real PostgreSQL), both units pass `systemd-analyze verify` and keep their
`systemd-analyze security` exposure, the man pages render without a groff warning and name every
command and option of `cdc --help`, and systemd-sysusers would create the cdc user."""

import os
import re
import shutil
import subprocess

import pytest

from conftest import CdcProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "VERSION")) as f:
    VERSION = f.read().strip()
DEB = os.environ.get("CDC_DEB", "")
UNITS = "lib/systemd/system"


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def deb():
    if not os.path.isfile(DEB):
        pytest.fail(f"CDC_DEB={DEB!r} is not a file: run make check-package (it runs make deb first)")
    return DEB


@pytest.fixture(scope="module")
def root(deb, tmp_path_factory):
    """The package's files under a throwaway root, and what the base system would add to them: the
    systemd units it ships (the targets cdc.service names) and /bin/kill (ExecReload)."""
    r = tmp_path_factory.mktemp("root")
    run(["dpkg", "-x", deb, str(r)])
    for name in os.listdir("/" + UNITS):
        if not os.path.exists(r / UNITS / name):
            src = os.path.join("/", UNITS, name)
            if os.path.isfile(src) and not os.path.islink(src):
                shutil.copy(src, r / UNITS / name)
    (r / "bin").mkdir(exist_ok=True)
    shutil.copy("/bin/kill", r / "bin" / "kill")
    return r


def field(deb, name):
    return run(["dpkg-deb", "-f", deb, name]).strip()


def test_package_files_and_control(deb):
    files = {ln.split()[-1] for ln in run(["dpkg-deb", "-c", deb]).splitlines() if not ln.startswith("d")}
    doc = "./usr/share/doc/cdc/"
    assert {f for f in files if not f.startswith(doc)} == {
        "./usr/bin/cdc", "./etc/cdc/cdc.yaml", f"./{UNITS}/cdc.service", f"./{UNITS}/cdc@.service",
        "./usr/lib/sysusers.d/cdc.conf", "./usr/share/man/man1/cdc.1.gz", "./usr/share/man/man5/cdc.yaml.5.gz",
        "./usr/share/lintian/overrides/cdc"}
    # The documentation: README.md and docs/*.md (the documents the man pages name), compressed or not.
    docs = {re.sub(r"\.gz$", "", f[len(doc):]) for f in files if f.startswith(doc)}
    assert docs == {"README.md", "changelog", "copyright"} | set(
        f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    arch = run(["dpkg", "--print-architecture"]).strip()
    assert os.path.basename(deb) == f"cdc_{VERSION}_{arch}.deb"
    assert (field(deb, "Package"), field(deb, "Version"), field(deb, "Architecture")) == ("cdc", VERSION, arch)
    # shlibs: every library the binary links, as a dependency on its Debian package.
    depends = {d.split()[0] for d in field(deb, "Depends").split(", ")}
    assert {"libpq5", "librdkafka1", "libprotobuf-c1", "libevent-2.1-7", "libyaml-0-2", "libmicrohttpd12",
            "libjson-c5", "libcurl4", "libjemalloc2", "libsystemd0", "libc6"} <= depends
    # The example configuration is a conffile: an administrator's edits survive upgrades.
    assert run(["dpkg-deb", "--info", deb, "conffiles"]).split() == ["/etc/cdc/cdc.yaml"]


def test_installed_cdc_runs(root):
    cdc = str(root / "usr" / "bin" / "cdc")
    assert run([cdc, "--version"]) == f"cdc {VERSION}\n"
    effective = run([cdc, "check-config", "-c", str(root / "etc" / "cdc" / "cdc.yaml")])
    # The example's paths are the unit's directories.
    for line in ("state_dir: /var/lib/cdc", "  socket: /run/cdc/status.sock", "  socket: /run/cdc/events.sock",
                 '  mode: "0660"'):
        assert line in effective.splitlines()


def test_installed_cdc_streams(pg, schema, cdc, root):
    """The packaged binary (dpkg-buildflags' hardening, its shared libraries) against a real server."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    c = cdc()
    p = CdcProcess([str(root / "usr" / "bin" / "cdc"), "run", "-c", c.path],
                   os.path.join(cdc.tmp_path, "deb.stdout"), os.path.join(cdc.tmp_path, "deb.stderr"))
    cdc.all_processes.append(p)
    c.wait_streaming(p)
    pg.sql(f"insert into {schema}.t values (1), (2)")
    assert [e["new"] for e in p.wait_events(2)] == [{"id": 1}, {"id": 2}]
    assert p.terminate() == 0


def verify(root, *units):
    """systemd-analyze verify under the root (MANPATH: the units' Documentation=man: pages)."""
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}"] + list(units), capture_output=True,
                          text=True, timeout=120, cwd=root,
                          env=dict(os.environ, MANPATH=str(root / "usr" / "share" / "man")))


def test_units_verify(root):
    p = verify(root, "cdc.service", "cdc@main.service")
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")
    # verify does catch a unit that cannot run: the same unit with a binary the root lacks.
    text = (root / UNITS / "cdc.service").read_text()
    (root / UNITS / "cdc-broken.service").write_text(text.replace("/usr/bin/cdc ", "/usr/bin/cdc-missing "))
    p = verify(root, "cdc-broken.service")
    assert p.returncode != 0 and "Command /usr/bin/cdc-missing is not executable" in p.stderr
    (root / UNITS / "cdc-broken.service").unlink()


def unit_settings(path):
    """KEY=VALUE lines of a unit file, comments left out."""
    out = []
    for ln in path.read_text().splitlines():
        if ln and not ln.startswith(("#", "[")):
            out.append(ln)
    return out


def test_unit_settings(root):
    s = unit_settings(root / UNITS / "cdc.service")
    for want in ("Type=notify", "ExecStart=/usr/bin/cdc run -c /etc/cdc/cdc.yaml",
                 "ExecReload=/bin/kill -HUP $MAINPID", "User=cdc", "Group=cdc", "StateDirectory=cdc",
                 "RuntimeDirectory=cdc", "ProtectSystem=strict", "NoNewPrivileges=yes", "CapabilityBoundingSet=",
                 "SystemCallFilter=@system-service", "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
                 "WantedBy=multi-user.target"):
        assert want in s, want
    # The template is the same unit with the instance's paths.
    t = unit_settings(root / UNITS / "cdc@.service")
    assert [(a, b) for a, b in zip(s, t) if a != b] == [
        ("Description=cdc: change data capture from a PostgreSQL logical replication slot",
         "Description=cdc %i: change data capture from a PostgreSQL logical replication slot"),
        ("ExecStart=/usr/bin/cdc run -c /etc/cdc/cdc.yaml", "ExecStart=/usr/bin/cdc run -c /etc/cdc/%i.yaml"),
        ("StateDirectory=cdc", "StateDirectory=cdc/%i"), ("RuntimeDirectory=cdc", "RuntimeDirectory=cdc/%i")]
    assert len(s) == len(t)


def test_unit_exposure(root):
    """systemd-analyze security, offline, of the units as shipped: at most 1.5 ("OK"; 1.2 today)."""
    for unit in ("cdc.service", "cdc@main.service"):
        out = run(["systemd-analyze", "security", "--offline=yes", f"--root={root}", "--no-pager", unit],
                  cwd=root)
        m = re.search(r"Overall exposure level for %s: (\d+\.\d+) (\w+)" % re.escape(unit), out)
        assert m, out
        assert float(m.group(1)) <= 1.5 and m.group(2) == "OK", out


def man(root, page):
    """The page as man renders it (ASCII, 80 columns); fails on any warning from groff."""
    p = subprocess.run(["man", "--warnings", "-E", "ascii", "-l", str(root / "usr" / "share" / "man" / page)],
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, MANWIDTH="80"))
    assert (p.returncode, p.stderr) == (0, ""), p.stderr
    return p.stdout


def test_man_pages_render_and_cover_the_commands(root):
    cdc = str(root / "usr" / "bin" / "cdc")
    page = man(root, "man1/cdc.1.gz")
    commands = re.findall(r"^  (\S+)", run([cdc, "--help"]).split("commands:")[1], re.M)
    assert {"run", "check-config", "status", "tail", "backfill"} <= set(commands)
    for command in commands:
        if command == "cdc":  # "cdc COMMAND --help"
            continue
        assert re.search(r"^ {7}%s\b" % re.escape(command), page, re.M), f"cdc(1) lacks the command {command}"
        usage = subprocess.run([cdc, command, "--help"], capture_output=True, text=True).stdout
        for option in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", usage)):
            assert option in page, f"cdc(1) lacks {command}'s option {option}"
    for section in ("SYNOPSIS", "COMMANDS", "OPTIONS", "EXIT STATUS", "SIGNALS", "SYSTEMD", "FILES",
                    "ENVIRONMENT", "SEE ALSO"):
        assert re.search(r"^%s$" % section, page, re.M), section
    # cdc.yaml(5) holds the configuration reference the binary writes: every key, its type and default.
    yaml_page = man(root, "man5/cdc.yaml.5.gz")
    reference = run([cdc, "config-reference"])
    keys = re.findall(r"^### `([^`]+)`\n\n\*(.*?)\* · default", reference, re.M)
    assert len(keys) > 50 and ("source.dsn", "libpq connection string") in keys
    for key, kind in keys:
        assert re.search(r"^ {7}%s\n {14}%s " % (re.escape(key), re.escape(kind.split()[0])), yaml_page, re.M), key


def test_sysusers_creates_the_cdc_user(root):
    out = subprocess.run(["systemd-sysusers", f"--root={root}", "--dry-run"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.search(r"Creating user 'cdc' \(cdc change data capture\) with UID \d+ and GID \d+", out.stderr + out.stdout)

"""test_deb.py: the Debian package of `make deb` ($CDC_DEB) as a user meets it, without installing it
on this machine: its files unpacked into a throwaway root (dpkg -x) with the base system's units
and /bin/kill beside them. The installed cdc runs (--version, check-config of the shipped example,
a stream from a real PostgreSQL), both units pass `systemd-analyze verify` and keep their
`systemd-analyze security` exposure, the man pages render without a groff warning and name every
command and option of `cdc --help`, and systemd-sysusers would create the cdc user."""

import gzip
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
    assert len(keys) > 50 and ("source.dsn", "libpq connection string, secret") in keys
    for key, kind in keys:
        assert re.search(r"^ {7}%s\n {14}%s " % (re.escape(key), re.escape(kind.split()[0])), yaml_page, re.M), key


def test_sysusers_creates_the_cdc_user(root):
    out = subprocess.run(["systemd-sysusers", f"--root={root}", "--dry-run"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.search(r"Creating user 'cdc' \(cdc change data capture\) with UID \d+ and GID \d+", out.stderr + out.stdout)


def test_license_is_apache_2(root):
    """Apache-2.0 (issue 31): the repository's LICENSE is the licence's text, the package's copyright
    file names it by its SPDX identifier for every file, and the README it installs says so."""
    with open(os.path.join(ROOT, "LICENSE")) as f, open("/usr/share/common-licenses/Apache-2.0") as g:
        assert f.read() == g.read()
    doc = root / "usr" / "share" / "doc" / "cdc"
    paragraphs = [p.splitlines() for p in (doc / "copyright").read_text().split("\n\n")]
    files = [p for p in paragraphs if p[0].startswith("Files:")]
    assert [(p[0], [ln for ln in p if ln.startswith("License:")]) for p in files] == [
        ("Files: *", ["License: Apache-2.0"])]
    licence = [p for p in paragraphs if p[0] == "License: Apache-2.0"]
    assert len(licence) == 1 and 'found in "/usr/share/common-licenses/Apache-2.0".' in "\n".join(licence[0])
    readme = doc / "README.md"
    text = readme.read_text() if readme.exists() else gzip.decompress((doc / "README.md.gz").read_bytes()).decode()
    assert "[Apache License, Version 2.0](LICENSE) (SPDX: `Apache-2.0`)" in text


# Stand-ins for what the maintainer scripts ask of systemd, dpkg and the user database: each logs
# its command line. Their questions get a fresh system's answers: deb-systemd-helper's
# debian-installed and was-enabled say no, dpkg-statoverride --list finds no override.
STAND_INS = ("deb-systemd-invoke", "deb-systemd-helper", "systemctl", "systemd-sysusers", "chgrp", "chmod",
             "userdel", "deluser", "groupdel", "delgroup")


@pytest.fixture
def maint(deb, tmp_path):
    """The package's maintainer scripts, run by chroot(8) in a root of their own the way dpkg runs
    them: dash and rm (real, so a removal shows on disk), the stand-ins above, /run/systemd/system
    (systemd is the init), and what the units made: /var/lib/cdc and /run/cdc with files in them.
    Returns run(script, *args), which gives the commands the script ran (missing script: none)."""
    r = tmp_path / "maint"
    info = r / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    run(["dpkg-deb", "-e", deb, str(info)])
    for prog in ("/bin/sh", "/bin/dash", "/bin/rm"):
        for lib in [prog] + re.findall(r"(/\S+) \(0x", run(["ldd", prog])):
            dest = r / os.path.relpath(os.path.realpath(lib), "/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(lib, dest)
            if os.path.realpath(lib) != lib:  # the name the loader asks for (e.g. /lib64/ld-linux-x86-64.so.2)
                (r / os.path.relpath(lib, "/")).parent.mkdir(parents=True, exist_ok=True)
                if not os.path.lexists(r / os.path.relpath(lib, "/")):
                    os.symlink(os.path.realpath(lib), r / os.path.relpath(lib, "/"))
    (r / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    for name in STAND_INS:
        (r / "usr" / "bin" / name).write_text(f'#!/bin/sh\necho "{name} $*" >> /calls\n'
                                              'case "$*" in *debian-installed*|*was-enabled*) exit 1;; esac\n')
        (r / "usr" / "bin" / name).chmod(0o755)
    (r / "usr" / "bin" / "dpkg-statoverride").write_text("#!/bin/sh\nexit 1\n")
    (r / "usr" / "bin" / "dpkg-statoverride").chmod(0o755)
    for d in ("run/systemd/system", "var/lib/cdc/main", "run/cdc/main", "etc/cdc", "dev"):
        (r / d).mkdir(parents=True, exist_ok=True)
    (r / "dev" / "null").write_text("")  # a file does for the scripts' >/dev/null
    (r / "var" / "lib" / "cdc" / "position").write_text("0/1\n")
    (r / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\ncdc:x:999:999::/var/lib/cdc:/usr/sbin/nologin\n")

    def run_script(script, *args):
        calls = r / "calls"
        calls.write_text("")
        if not (info / script).exists():
            return []
        p = subprocess.run(["chroot", str(r), "/bin/sh", f"/var/lib/dpkg/info/{script}"] + list(args),
                           capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DPKG_MAINTSCRIPT_PACKAGE": "cdc",
                                "DPKG_MAINTSCRIPT_NAME": script})
        assert p.returncode == 0, f"{script} {' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}"
        return calls.read_text().splitlines()
    run_script.root = r
    return run_script


def test_maintainer_scripts_stop_on_remove_restart_on_upgrade(maint):
    """Issue 31: debhelper's systemd scripts, the way dpkg calls them. A first install creates the user
    and starts nothing that is not enabled; an upgrade restarts what runs; a remove stops the service
    and its instances; a purge removes what the units made and keeps the user and group cdc."""
    install = maint("postinst", "configure")
    assert "systemd-sysusers cdc.conf" in install
    assert not [c for c in install if " enable " in f" {c} "]  # --no-enable: the administrator enables it
    # deb-systemd-invoke starts a unit only when it is enabled: on a first install, nothing starts.
    assert [c for c in install if c.startswith("deb-systemd-invoke")] == ["deb-systemd-invoke start cdc.service"]
    assert "chgrp cdc /etc/cdc/cdc.yaml" in install and "chmod 0640 /etc/cdc/cdc.yaml" in install

    # An upgrade: the old prerm (this one stands in) stops nothing; the new postinst restarts.
    assert not [c for c in maint("prerm", "upgrade", "0.2.0") if c.startswith("deb-systemd-invoke")]
    upgrade = maint("postinst", "configure", "0.0.9")
    assert [c for c in upgrade if c.startswith("deb-systemd-invoke")] == [
        "deb-systemd-invoke restart cdc.service", "deb-systemd-invoke try-restart cdc@*.service"]
    assert "systemctl --system daemon-reload" in upgrade and not [c for c in upgrade if c.startswith("chgrp")]

    remove = maint("prerm", "remove")
    assert sorted(c for c in remove if c.startswith("deb-systemd-invoke")) == [
        "deb-systemd-invoke stop cdc.service", "deb-systemd-invoke stop cdc@*.service"]
    maint("postrm", "remove")
    assert (maint.root / "var" / "lib" / "cdc" / "position").exists()  # remove keeps the state

    purge = maint("postrm", "purge")
    assert "deb-systemd-helper purge cdc.service" in purge
    assert not (maint.root / "var" / "lib" / "cdc").exists() and not (maint.root / "run" / "cdc").exists()
    assert not [c for c in purge if c.split()[0] in ("userdel", "deluser", "groupdel", "delgroup")]
    assert "cdc:x:999:999:" in (maint.root / "etc" / "passwd").read_text()


@pytest.fixture(scope="module")
def fresh(deb, tmp_path_factory):
    """A fresh install of the package as a root of its own to chroot(8) into: its files, the shared
    libraries its cdc links, and the cdc user and group systemd-sysusers would add (uid 999). No
    /run/cdc, no /var/lib/cdc: systemd makes them when the unit first starts."""
    r = tmp_path_factory.mktemp("fresh")
    run(["dpkg", "-x", deb, str(r)])
    cdc = r / "usr" / "bin" / "cdc"
    for lib in re.findall(r"(/\S+) \(0x", run(["ldd", str(cdc)])):
        for name in {lib, os.path.realpath(lib)}:
            dest = r / os.path.relpath(name, "/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                shutil.copy(os.path.realpath(lib), dest)
    for d in ("run", "var/lib", "tmp"):
        (r / d).mkdir(parents=True, exist_ok=True)
    (r / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\ncdc:x:999:999::/var/lib/cdc:/usr/sbin/nologin\n")
    (r / "etc" / "group").write_text("root:x:0:\ncdc:x:999:\n")
    assert not (r / "run" / "cdc").exists() and not (r / "var" / "lib" / "cdc").exists()
    return r


def doctor_in(root, config, uid):
    """cdc doctor of the root's configuration file, run by chroot as uid (and its group)."""
    p = subprocess.run(["chroot", f"--userspec={uid}:{uid}", str(root), "/usr/bin/cdc", "doctor", "-c", config],
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/"})
    return p.returncode, p.stdout + p.stderr


def test_doctor_on_a_fresh_install_knows_what_systemd_makes(fresh, pg, schema):
    """Issue 31: before `systemctl enable`, as the README says, doctor failed on /run/cdc (twice) and,
    as user cdc, on /var/lib/cdc: the unit's RuntimeDirectory= and StateDirectory= make them. The
    shipped example, pointed at a real server, now exits 0 or 1 (a real warning), as root and as cdc."""
    pg.sql(f"create table {schema}.orders (id int primary key)")
    example = (fresh / "etc" / "cdc" / "cdc.yaml").read_text()
    dsn = re.search(r'^  dsn: "(.*)"$', example, re.M).group(1)
    sound = example.replace(dsn, pg.dsn).replace('"public.*"', f'"{schema}.*"')
    assert sound != example and f'"{schema}.*"' in sound
    conf = fresh / "etc" / "cdc" / "cdc.yaml"
    conf.write_text(sound)
    os.chown(conf, 0, 999)
    conf.chmod(0o640)
    for uid in (0, 999):
        rc, out = doctor_in(fresh, "/etc/cdc/cdc.yaml", uid)
        assert rc in (0, 1) and "\nfail  " not in "\n" + out, out
        lines = out.splitlines()
        assert [ln for ln in lines if ln.startswith("pass  sockets: ")] == [
            f"pass  sockets: {key} /run/cdc/{name}: directory /run/cdc does not exist yet, made by systemd when "
            "cdc.service starts (RuntimeDirectory=cdc)"
            for key, name in (("status.socket", "status.sock"), ("subscribers.socket", "events.sock"))], out
        assert re.search(r"^pass  state_dir: /var/lib/cdc: does not exist yet, made by systemd when cdc.service "
                         r"starts \(StateDirectory=cdc\), [0-9.]+ [MG]iB free", out, re.M), out
    # An instance of cdc@.service: /etc/cdc/NAME.yaml, its own directories under them.
    main = fresh / "etc" / "cdc" / "main.yaml"
    main.write_text(sound.replace("/var/lib/cdc", "/var/lib/cdc/main").replace("/run/cdc/", "/run/cdc/main/"))
    main.chmod(0o644)
    rc, out = doctor_in(fresh, "/etc/cdc/main.yaml", 999)
    assert rc in (0, 1) and "\nfail  " not in "\n" + out, out
    assert ("pass  sockets: status.socket /run/cdc/main/status.sock: directory /run/cdc/main does not exist yet, "
            "made by systemd when cdc@main.service starts (RuntimeDirectory=cdc/%i)") in out.splitlines(), out
    assert re.search(r"^pass  state_dir: /var/lib/cdc/main: does not exist yet, made by systemd when "
                     r"cdc@main.service starts \(StateDirectory=cdc/%i\)", out, re.M), out
    # A file no unit runs is judged as before: the directories must be there.
    other = fresh / "tmp" / "other.yaml"
    other.write_text(sound)
    other.chmod(0o644)
    rc, out = doctor_in(fresh, "/tmp/other.yaml", 0)
    assert rc == 2 and "fail  sockets: status.socket /run/cdc/status.sock: directory /run/cdc does not exist" in out

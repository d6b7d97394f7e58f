#!/usr/bin/python3
"""check.py (`make check`): every part of the test suite, each run even when one before it failed,
then a summary: each part's counts and time, and a last line saying all passed or what failed.

    /usr/bin/python3 tests/check.py --pg-version 18 --pg-versions "14 15 16 17 18"

The parts are the Makefile's targets, run by make: first in turn (their output passes through as
it comes) format, build, unit, fuzz corpus, monitoring (the alert rules), docs; then three lanes side
by side (each part's output printed whole when it ends): the integration suite on --pg-version in
two halves (every other test each), and the tests marked matrix on every other version of --pg-versions (check-matrix-N), the client
libraries, the Debian package, the fault harness and the socket model, these on --pg-version too.
A failed build ends the run there: nothing else can run. Counts come from what each part prints (the C programs' "NAME: N passed, M failed", the fault
harness's "fault: N passed, M failed") and from pytest's JUnit XML (build/check/PART.xml, asked for
through PYTEST_ADDOPTS). Exits 1 if any part failed.
"""

import argparse
import os
import re
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "build", "check")
# "test_report: 323 passed, 0 failed" (tests/unit/test.h), "fault: 9 passed, 0 failed" (harness.py)
COUNTS = re.compile(r"^([\w.-]+): (\d+) passed, (\d+) failed$")
JUNIT_NOTE = re.compile(rb"^-+ generated xml file: .* -+\r?\n?$")


class Part:
    def __init__(self, name, target, pg=None, unit=""):
        """unit: what the counted lines count ("checks" of a C program, "inputs" of a corpus)."""
        self.name, self.target, self.pg, self.unit = name, target, pg, unit
        self.rc = None
        self.secs = 0.0
        self.passed = self.failed = self.skipped = 0
        self.programs = []  # (name, passed, failed) lines of C programs and harness runs
        self.pytest = False  # whether a JUnit file came

    @property
    def label(self):
        return f"{self.name} (PostgreSQL {self.pg})" if self.pg else self.name

    @property
    def ok(self):
        return self.rc == 0 and self.failed == 0

    def run(self, make_args, out=None):
        """Runs the part's make target; its output goes to stdout as it comes, or into out (a list
        of byte strings) when parts run side by side."""
        os.makedirs(OUT, exist_ok=True)
        junit = os.path.join(OUT, self.target + ".xml")
        if os.path.exists(junit):
            os.unlink(junit)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTEST_ADDOPTS"] = (env.get("PYTEST_ADDOPTS", "") + f" --junitxml={junit}").strip()
        started = time.monotonic()
        print(f"== {self.label}: make {self.target}{'' if out is None else ' (started)'}", flush=True)
        # close_fds=False: make's jobserver (make -j check) reaches the make below
        p = subprocess.Popen(["make", "--no-print-directory"] + self.target.split() + make_args, cwd=ROOT,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=False)
        for raw in p.stdout:
            if JUNIT_NOTE.match(raw):
                continue  # pytest's note of the XML file check.py asked for
            if out is None:
                sys.stdout.buffer.write(raw)
                sys.stdout.buffer.flush()
            else:
                out.append(raw)
            m = COUNTS.match(raw.decode(errors="replace").strip())
            if m:
                self.programs.append((m.group(1), int(m.group(2)), int(m.group(3))))
        self.rc = p.wait()
        self.secs = time.monotonic() - started
        for name, passed, failed in self.programs:
            self.passed += passed
            self.failed += failed
        if os.path.exists(junit):
            self.pytest = True
            for suite in ET.parse(junit).getroot().iter("testsuite"):
                tests, skipped = int(suite.get("tests", 0)), int(suite.get("skipped", 0))
                bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
                self.passed += tests - skipped - bad
                self.failed += bad
                self.skipped += skipped

    def counts(self):
        if self.rc is None:
            return "not run"
        if not self.programs and not self.pytest:
            return "passed" if self.rc == 0 else f"failed (exit {self.rc})"
        unit = f" {self.unit}" if self.unit else ""
        text = f"{self.passed:,}{unit} passed, {self.failed:,} failed"
        if self.pytest:
            text += f", {self.skipped:,} skipped"
        if self.unit:
            text += f" ({len(self.programs)} programs)"
        elif self.programs:
            text += f" (pytest, {len(self.programs)} harness runs)"
        if self.rc != 0 and self.failed == 0:
            text += f"; exit {self.rc}"
        return text


def duration(secs):
    return f"{int(secs) // 60}m{int(secs) % 60:02d}s"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pg-version", required=True, help="the version of the whole suite")
    ap.add_argument("--pg-versions", required=True, help="the versions of the matrix, space-separated")
    a = ap.parse_args()
    versions = a.pg_versions.split()
    # Every make below gets the same versions, whatever the environment says.
    make_args = [f"PG_VERSION={a.pg_version}", f"PG_VERSIONS={a.pg_versions}"]
    started = time.monotonic()
    first = [Part("format", "check-format"), Part("build", "all build/tests/kafka_mock"),
             Part("unit", "check-unit", unit="checks"), Part("fuzz corpus", "check-fuzz-corpus", unit="inputs"),
             Part("monitoring", "check-monitoring"), Part("docs", "check-docs")]
    # Then three lanes side by side, each part after the other in its lane: the integration
    # suite's two halves, and the rest (about as long together). Each part has its own servers, Kafka mock and
    # temporary directories; its output is printed whole when it ends.
    lanes = [[Part("integration 1/2", "check-integration-half-1", a.pg_version)],
             [Part("integration 2/2", "check-integration-half-2", a.pg_version)],
             [Part("matrix", f"check-matrix-{v}", v) for v in versions if v != a.pg_version] +
             [Part("clients", "check-clients", a.pg_version), Part("package", "check-package", a.pg_version),
              Part("fault", "check-fault", a.pg_version), Part("model", "check-model", a.pg_version)]]
    parts = first + [p for lane in lanes for p in lane]
    for part in first:
        part.run(make_args)
        if part.name == "build" and part.rc != 0:
            break
    else:
        lock = threading.Lock()

        def run_lane(lane):
            for part in lane:
                out = []
                part.run(make_args, out)
                with lock:
                    print(f"== {part.label}: {'passed' if part.ok else 'FAILED'} after {duration(part.secs)}",
                          flush=True)
                    sys.stdout.buffer.write(b"".join(out))
                    sys.stdout.buffer.flush()

        threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    total = time.monotonic() - started

    print()
    print(f"make check: PostgreSQL {a.pg_version} for the whole suite; the matrix on "
          f"{', '.join(v for v in versions if v != a.pg_version) or 'no other version'}")
    width = max(len(p.label) for p in parts)
    for p in parts:
        if p.name == "build" and p.rc == 0:
            continue
        mark = "ok  " if p.ok else "FAIL" if p.rc is not None else "    "
        print(f"  {mark} {p.label:<{width}}  {p.counts():<56} {duration(p.secs) if p.rc is not None else ''}")
    bad = [p for p in parts if p.rc is not None and not p.ok]
    unrun = [p for p in parts if p.rc is None]
    if not bad and not unrun:
        print(f"make check: all passed in {duration(total)}")
        return 0
    what = [f"{p.label} ({p.failed} failed)" if p.failed else f"{p.label} (exit {p.rc})" for p in bad]
    if unrun:
        what.append("not run: " + ", ".join(p.label for p in unrun))
    print(f"make check: FAILED in {duration(total)}: " + "; ".join(what))
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""test_demo.py: `make demo` as a new user meets it. Its build runs one compiler per core: the first
run spent 36 of its 42 s to the first event compiling one file at a time on 2 cores (issue 31)."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_make_demo_builds_on_every_core():
    # make -n prints the recipes without running them, but runs the recursive make (with -n too):
    # its command line is what make demo runs to build.
    p = subprocess.run(["make", "-n", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")})
    assert p.returncode == 0, p.stderr
    builds = [ln for ln in p.stdout.splitlines() if re.match(r"^make\b.*\ball$", ln)]
    assert builds == [f"make --no-print-directory -j{len(os.sched_getaffinity(0))} all"], p.stdout[:2000]

"""npm.py: `npm ci` for the tests that run Node.js code (the deploy validator, the TypeScript client),
done once per package-lock: a marker in node_modules records the lock it installed."""

import hashlib
import os
import shutil
import subprocess

import pytest


def npm_ci(directory):
    """`npm ci` in directory unless its node_modules already holds exactly the locked packages."""
    with open(os.path.join(directory, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    marker = os.path.join(directory, "node_modules", ".cdc-installed-lock")
    try:
        with open(marker) as f:
            if f.read().strip() == digest:
                return
    except OSError:
        pass
    if shutil.which("npm") is None:
        # Debian's nodejs comes without npm; where npm is missing, Debian's npm fits that nodejs.
        if os.geteuid() == 0 and shutil.which("apt-get"):
            subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "npm"],
                           check=True, timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        else:
            pytest.fail("npm not found: install Node.js (18 or later) with npm")
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=directory,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"npm ci in {directory} failed:\n{p.stdout}\n{p.stderr}"
    with open(marker, "w") as f:
        f.write(digest + "\n")

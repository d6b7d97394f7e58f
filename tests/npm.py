"""npm.py: `npm ci` for what the tests take from npm (the deploy validator, the TypeScript client,
the PostgreSQL servers of the version matrix), done once per package-lock: a marker in the
installed tree records the lock it installed."""

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess


def npm_ci(directory, ignore_scripts=False):
    """`npm ci` in directory unless it already holds exactly the locked packages. Returns True when
    it installed, False when the marker said they were there already; raises RuntimeError when npm
    is missing or fails. Processes that ask at the same moment (make check's two lanes) take turns
    on a lock file beside the lock."""
    with npm_lock(directory):
        return npm_ci_locked(directory, ignore_scripts)


@contextlib.contextmanager
def npm_lock(directory):
    """Holds directory's lock file (one holder at a time, across processes)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, ".cdc-npm-ci.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def npm_ci_locked(directory, ignore_scripts=False):
    """npm_ci for a caller that holds npm_lock(directory) already."""
    with open(os.path.join(directory, "package-lock.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    marker = os.path.join(directory, "node_modules", ".cdc-installed-lock")
    try:
        with open(marker) as f:
            if f.read().strip() == digest:
                return False
    except OSError:
        pass
    if shutil.which("npm") is None:
        # Debian's nodejs comes without npm; where npm is missing, Debian's npm fits that nodejs.
        if os.geteuid() == 0 and shutil.which("apt-get"):
            subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "npm"],
                           check=True, timeout=600, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        else:
            raise RuntimeError("npm not found: install Node.js (18 or later) with npm")
    cmd = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
    if ignore_scripts:
        cmd.append("--ignore-scripts")
    p = subprocess.run(cmd, cwd=directory, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"npm ci in {directory} failed:\n{p.stdout}\n{p.stderr}")
    with open(marker, "w") as f:
        f.write(digest + "\n")
    return True

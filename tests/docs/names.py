#!/usr/bin/env python3
"""names.py: measures the names issue 36 asked about, in the C sources of cdc/, decoder/ and
sinks/: parameters with one-letter names in the headers' prototypes, file names found in more than
one folder, and each folder's extern functions by prefix (from the built objects, so run make
first). Prints the counts and every offender; exits 0 (it measures, it does not judge).

    python3 tests/docs/names.py [REPO]
"""

import collections
import os
import re
import subprocess
import sys


def header_params(files):
    """[(header, parameter)] of every parameter of a prototype or function pointer, and the total."""
    one, total = [], 0
    for h in (f for f in files if f.endswith(".h")):
        with open(h) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"#define[^\n]*(\\\n[^\n]*)*", "", text)
        for m in re.finditer(r"\(([^()]*)\)\s*(?:CDC_[A-Z_]+(?:\([^)]*\))?\s*)*[;{]", text):
            params = m.group(1).strip()
            if not params or params == "void":
                continue
            for p in params.split(","):
                p = re.sub(r"\[[^\]]*\]$", "", p.strip()).strip()
                name = re.search(r"([A-Za-z_][A-Za-z0-9_]*)$", p)
                if p == "..." or not name or (len(p.split()) < 2 and "*" not in p):
                    continue
                total += 1
                if len(name.group(1)) == 1:
                    one.append((h, p))
    return one, total


def externs(root):
    """{folder: Counter of extern function prefixes} from build/obj."""
    by = collections.defaultdict(collections.Counter)
    for base, _, names in os.walk(os.path.join(root, "build", "obj")):
        folder = os.path.relpath(base, os.path.join(root, "build", "obj"))
        if not folder.startswith(("cdc", "decoder", "sinks")):
            continue
        for n in names:
            if not n.endswith(".o"):
                continue
            out = subprocess.run(["nm", "--defined-only", "-g", os.path.join(base, n)],
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] == "T":
                    by[folder][parts[2].split("_")[0]] += 1
    return by


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    os.chdir(root)
    files = subprocess.run(["git", "ls-files", "cdc", "decoder", "sinks"], capture_output=True,
                           text=True, check=True).stdout.split()
    one, total = header_params(files)
    print(f"one-letter parameters in headers: {len(one)} of {total}")
    for h, p in one:
        print(f"  {h}: {p}")
    names = collections.defaultdict(list)
    for f in files:
        names[os.path.basename(f)].append(f)
    dups = {n: fs for n, fs in names.items() if len(fs) > 1}
    print(f"file names in more than one folder: {len(dups)}")
    for n, fs in sorted(dups.items()):
        print(f"  {n}: {' '.join(fs)}")
    print("extern functions by folder and prefix (build/obj):")
    for folder, prefixes in sorted(externs(".").items()):
        print(f"  {folder}: {sum(prefixes.values())}: " + ", ".join(f"{p}_ {n}" for p, n in prefixes.most_common()))


if __name__ == "__main__":
    main()

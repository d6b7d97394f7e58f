#!/usr/bin/env python3
"""names.py: checks the names issue 36 asked about, in the C sources of cdc/, decoder/ and sinks/:
parameters with one-letter names in the headers' prototypes, file names found in more than one
folder, and each folder's extern functions by prefix (from the built objects, so run make first).
Prints the counts and every offender. With --check it exits 1 when there is an offender: an extern
without its folder's prefix (PREFIXES), a one-letter parameter in a header, or a file name used
twice. make check-docs runs it so.

The rule: every extern function of a folder starts with the folder's prefix, the folder's own name
(PREFIXES). One exception: decoder/base is a library of small independent modules, like
PostgreSQL's src/common or nginx's src/core, so there each extern starts with its own file's name
(json.c: json_, buf.c: buf_). main is the program's entry point and carries no prefix.

    python3 tests/docs/names.py [--check] [REPO]
"""

import collections
import os
import re
import subprocess
import sys

# Each folder's prefix: every extern function defined in the folder starts with it.
PREFIXES = {
    "cdc": "cdc_",
    "cdc/backfill": "backfill_",
    "cdc/cli": "cli_",
    "cdc/config": "cfg_",
    "cdc/daemon": "daemon_",
    "cdc/doctor": "doctor_",
    "cdc/match": "match_",
    "cdc/pipeline": "pipeline_",
    "cdc/source": "source_",
    "cdc/status": "status_",
    "decoder": "pgo_",
    "sinks": "sink_",
    "sinks/kafka": "kafka_",
    "sinks/nats": "nats_",
    "sinks/socket": "socket_",
    "sinks/stdout": "stdout_",
}
# Folders whose externs carry their file's name instead (file.c: file_).
BY_FILE = {"decoder/base"}
# The program's entry point, whose name C fixes.
EXEMPT = {"main"}


def required_prefix(folder, obj):
    """The prefix every extern of the object file obj (a name like json.o) in folder must carry."""
    if folder in BY_FILE:
        return os.path.splitext(obj)[0] + "_"
    return PREFIXES.get(folder)


def header_params(files):
    """[(header, parameter)] of every parameter of a prototype or function pointer, and the total."""
    one, total = [], 0
    for h in (f for f in files if f.endswith(".h")):
        with open(h) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"#define[^\n]*(\\\n[^\n]*)*", "", text)
        text = re.sub(r"__attribute__\s*\(\((?:[^()]|\([^()]*\))*\)\)", "", text)
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


def externs(root, sources):
    """[(folder, object file, function)] of every extern function defined in build/obj, in the
    objects of the given sources only (an object whose source is gone is left over)."""
    found = []
    top = os.path.join(root, "build", "obj")
    for base, _, names in os.walk(top):
        folder = os.path.relpath(base, top)
        if not folder.startswith(("cdc", "decoder", "sinks")):
            continue
        for n in sorted(names):
            if not n.endswith(".o") or os.path.join(folder, n[:-2] + ".c") not in sources:
                continue
            out = subprocess.run(["nm", "--defined-only", "-g", os.path.join(base, n)],
                                 capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] == "T":
                    found.append((folder, n, parts[2]))
    return sorted(found)


def unprefixed(found):
    """[(folder, object, function, prefix)] of the externs without their folder's prefix."""
    bad = []
    for folder, obj, name in found:
        prefix = required_prefix(folder, obj)
        if name not in EXEMPT and (prefix is None or not name.startswith(prefix)):
            bad.append((folder, obj, name, prefix))
    return bad


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    os.chdir(args[0] if args else ".")
    files = subprocess.run(["git", "ls-files", "cdc", "decoder", "sinks"], capture_output=True,
                           text=True, check=True).stdout.split()
    found = externs(".", set(files))
    if not found:
        sys.exit("names.py: no objects in build/obj: run make first")
    one, total = header_params(files)
    names = collections.defaultdict(list)
    for f in files:
        names[os.path.basename(f)].append(f)
    dups = {n: fs for n, fs in names.items() if len(fs) > 1}
    bad = unprefixed(found)
    if check and not (one or dups or bad):
        return
    # --check prints the offenders only; without it, the counts too.
    say = (lambda line, count: print(line) if count or not check else None)
    say(f"one-letter parameters in headers: {len(one)} of {total}", len(one))
    for h, p in one:
        print(f"  {h}: {p}")
    say(f"file names in more than one folder: {len(dups)}", len(dups))
    for n, fs in sorted(dups.items()):
        print(f"  {n}: {' '.join(fs)}")
    if not check:
        print("extern functions by folder and prefix (build/obj):")
        by = collections.defaultdict(collections.Counter)
        for folder, _, name in found:
            by[folder][name.split("_")[0]] += 1
        for folder, prefixes in sorted(by.items()):
            print(f"  {folder}: {sum(prefixes.values())}: "
                  + ", ".join(f"{p}_ {n}" for p, n in prefixes.most_common()))
    say(f"extern functions without their folder's prefix: {len(bad)} of {len(found)}", len(bad))
    for folder, obj, name, prefix in bad:
        need = prefix or "a prefix: the folder is not in PREFIXES"
        print(f"  {folder}/{obj[:-2]}.c: {name} (needs {need})")
    if check:
        print(f"names.py --check: {len(bad)} extern(s) without their folder's prefix, {len(one)} "
              f"one-letter parameter(s) in headers, {len(dups)} file name(s) used twice "
              "(the rule: tests/docs/names.py)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

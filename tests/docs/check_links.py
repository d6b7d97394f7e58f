"""check_links.py: every link of the repository's Markdown (README.md, docs/, deploy/, proto/,
tests/) that points inside the repository resolves: the file exists, and a #fragment names a
heading of it (GitHub's anchors: lower case, punctuation dropped, spaces to hyphens). A link out of
the repository (../shared and the like) is an error: the repository is its own reference.

    /usr/bin/python3 tests/docs/check_links.py     # exit 1 and one line per broken link
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        fenced = False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
                if fenced or not m:
                    continue
                slug = re.sub(r"[^\w\- ]", "", m.group(2).strip().lower()).replace(" ", "-")
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                out.add(slug if n == 0 else f"{slug}-{n}")
        cache[path] = out
    return cache[path]


def markdown_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.md"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if "node_modules/" not in f and os.path.exists(os.path.join(ROOT, f))]


def check(md):
    errors = []
    fenced = False
    with open(os.path.join(ROOT, md), encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            for m in LINK.finditer(re.sub(r"`[^`]*`", "", line)):
                target = m.group(1) or m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, frag = target.partition("#")
                full = os.path.normpath(os.path.join(ROOT, os.path.dirname(md), path)) if path \
                    else os.path.join(ROOT, md)
                where = f"{md}:{lineno}: {target}"
                if not (full + os.sep).startswith(ROOT + os.sep):
                    errors.append(f"{where}: points outside the repository")
                elif not os.path.exists(full):
                    errors.append(f"{where}: no such file")
                elif frag and full.endswith(".md") and frag not in anchors(full):
                    errors.append(f"{where}: no heading #{frag} in {os.path.relpath(full, ROOT)}")
    return errors


def main():
    files = markdown_files()
    errors = [e for md in files for e in check(md)]
    for e in errors:
        print(e)
    # Nothing may send a reader to the agreement files outside the repository.
    for md in files:
        with open(os.path.join(ROOT, md), encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if "../shared" in line or "CONTRACT.md" in line:
                    errors.append(f"{md}:{lineno}: refers to a file outside the repository")
                    print(errors[-1])
    print(f"check_links: {len(files)} Markdown files, {len(errors)} broken link(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

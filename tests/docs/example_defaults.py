"""A block of an example config that says "these are the defaults" (docs/subscriptions.md's `backfill:`
section) must show each key's default as docs/configuration.md has it (generated from cdc's key table).
Prints each key that differs and exits 1; exits 0 when they agree."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = ["docs/subscriptions.md"]
HEAD_RE = re.compile(r"^(\w+):\s+#.*these are the defaults")
KEY_RE = re.compile(r"^  (\w+): (\S+)")
DEFAULT_RE = re.compile(r"^### `([\w.]+)`\n\n\*[^*\n]*\* · default `([^`]*)`", re.M)


def defaults():
    """{dotted key: its default as docs/configuration.md writes it}."""
    with open(os.path.join(ROOT, "docs/configuration.md")) as f:
        return dict(DEFAULT_RE.findall(f.read()))


def claimed(path):
    """[(line number, dotted key, value)] of every block in path that says it shows the defaults."""
    out, section = [], None
    with open(os.path.join(ROOT, path)) as f:
        for n, line in enumerate(f, 1):
            head = HEAD_RE.match(line)
            if head:
                section = head.group(1)
                continue
            key = KEY_RE.match(line) if section else None
            if not key:
                section = None
                continue
            out.append((n, f"{section}.{key.group(1)}", key.group(2)))
    return out


def main():
    known, wrong, seen = defaults(), [], 0
    for path in EXAMPLES:
        for n, key, value in claimed(path):
            seen += 1
            if key not in known:
                wrong.append(f"{path}:{n}: {key} is not a key of docs/configuration.md")
            elif known[key] != value:
                wrong.append(f"{path}:{n}: {key}: {value}, but its default is {known[key]}")
    if not seen:
        wrong.append("no block that says 'these are the defaults' found in " + ", ".join(EXAMPLES))
    for w in wrong:
        print(w, file=sys.stderr)
    if not wrong:
        print(f"example_defaults: {seen} defaults shown, all as docs/configuration.md has them")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

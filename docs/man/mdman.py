#!/usr/bin/env python3
"""mdman.py: the man pages' sources (docs/man/*.md, a small Markdown) to roff for man(7).

    mdman.py --version V [--cdc BIN] PAGE.md > PAGE

The first line names the page: `# cdc(1) -- what it is`. Then `## SECTION` and `### Subsection`;
paragraphs (a line ending in a backslash breaks there); `* term:` with its description indented
below (a tagged paragraph); `- item` lists; ``` fenced blocks, shown as they are; tables (a row per
tagged paragraph: the first cell is the tag, the others follow with their column's name); inline
`code` (bold), *argument* (italic), **bold**, [text](link) (the text); <!-- comments --> left out.
A line `<!-- cdc config-reference -->` brings in what `cdc config-reference` (the --cdc binary)
writes, docs/configuration.md made from the key table itself: its sections become subsections and
each key a tagged paragraph, so cdc.yaml(5) cannot drift from the keys cdc accepts."""

import argparse
import datetime
import os
import re
import subprocess
import sys

SECTION_NAMES = {"1": "User Commands", "5": "File Formats", "7": "Miscellaneous", "8": "System Administration"}
INCLUDE = "<!-- cdc config-reference -->"


def escape(text):
    """Text as roff reads it literally: backslashes, and characters beyond ASCII as \\[uXXXX]."""
    text = text.replace("\\", "\\e")
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)


def line_start(line):
    """A line that would start with a control character gets a zero-width \\& first."""
    return "\\&" + line if line[:1] in (".", "'") else line


def inline(text):
    """The inline markup of one paragraph's text to roff fonts."""
    out, pos = [], 0
    for m in re.finditer(r"`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\[([^\]]+)\]\([^)]*\)", text):
        out.append(escape(text[pos:m.start()]))
        code, bold, italic, link = m.groups()
        if code is not None:
            # an option's hyphens are minus signs, so that a command copied from the page runs
            out.append("\\fB" + escape(code).replace("-", "\\-") + "\\fR")
        elif bold is not None:
            out.append("\\fB" + escape(bold) + "\\fR")
        elif italic is not None:
            out.append("\\fI" + inline(italic) + "\\fR")
        else:
            out.append(inline(link))
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def text_lines(lines):
    """Paragraph lines as roff: joined, with .br where a line ends in a backslash."""
    out, cur = [], []
    for ln in lines:
        ln = ln.strip()
        brk = ln.endswith("\\")
        cur.append(ln[:-1].rstrip() if brk else ln)
        if brk:
            out.append(line_start(inline(" ".join(cur))))
            out.append(".br")
            cur = []
    if cur:
        out.append(line_start(inline(" ".join(cur))))
    return out


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def table(lines):
    """A Markdown table as one tagged paragraph per row."""
    head = cells(lines[0])
    out = []
    for row in lines[2:]:
        c = cells(row)
        out += [".TP", line_start(inline(c[0]))]
        rest = [(h, v) for h, v in zip(head[1:], c[1:]) if v]
        if len(head) == 2:
            out.append(line_start(inline(rest[0][1] if rest else "")))
        else:
            out.append(line_start(inline("; ".join("%s: %s" % hv for hv in rest))))
    return out


def config_reference(cdc):
    """What `cdc config-reference` writes (a failure stops the build)."""
    if not cdc:
        sys.exit("mdman: %s needs --cdc" % INCLUDE)
    p = subprocess.run([cdc, "config-reference"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("mdman: cdc config-reference failed:\n" + p.stderr)
    return p.stdout.split("\n")


def body(lines, cdc, included=False):
    """roff for Markdown lines. In the page ## is a section and ### a subsection; in an included
    document # is left out, ## is a subsection and ### a tagged paragraph (a key), the paragraphs
    under it indented with it."""
    out = []
    under_tag = False  # paragraphs go on indented under a ### of an included document
    i = 0
    while i < len(lines):
        ln = lines[i]
        level = len(ln) - len(ln.lstrip("#")) if ln.startswith("#") else 0
        if not ln.strip():
            i += 1
        elif ln.strip() == INCLUDE:
            out += body(config_reference(cdc), cdc, included=True)
            i += 1
        elif ln.startswith("<!--"):
            while "-->" not in lines[i]:
                i += 1
            i += 1
        elif level and included:
            title = ln[level:].strip()
            if level == 2:
                out.append(".SS %s" % line_start(inline(title)))
            elif level == 3:
                out += [".TP", line_start(inline(title))]
            under_tag = level == 3
            i += 1
        elif level in (2, 3):
            out.append('.%s "%s"' % ("SH" if level == 2 else "SS", escape(ln[level:].strip().upper()
                                                                         if level == 2 else ln[level:].strip())))
            i += 1
        elif ln.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                sys.exit("mdman: line %d: a fenced block that never closes" % (i + 1))
            out += [".PP" if not under_tag else ".IP", ".RS 4" if not under_tag else ".RS", ".nf"]
            out += [line_start(escape(x)) for x in lines[i + 1:j]] + [".fi", ".RE"]
            i = j + 1
        elif ln.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out += table(lines[i:j])
            under_tag = False
            i = j
        elif ln.startswith("* ") and ln.rstrip().endswith(":"):
            j = i + 1
            while j < len(lines) and lines[j].startswith("  "):
                j += 1
            out += [".TP"] + text_lines([ln[2:].rstrip()[:-1]]) + text_lines(lines[i + 1:j])
            i = j
        elif ln.startswith("- "):
            j = i + 1
            while j < len(lines) and lines[j].startswith("  "):
                j += 1
            out += [".IP \\(bu 2"] + text_lines([ln[2:]] + lines[i + 1:j])
            i = j
        else:
            j = i
            while j < len(lines) and lines[j].strip() and not lines[j].startswith(("#", "```", "|", "<!--")):
                j += 1
            # the first paragraph under a tag is the tag's own; the next ones are indented with it
            if not (under_tag and out[-2] == ".TP"):
                out.append(".IP" if under_tag else ".PP")
            out += text_lines(lines[i:j])
            i = j
    return out


def convert(src, version, cdc):
    lines = src.split("\n")
    m = re.match(r"# (\S+)\((\d)\) -- (.*)$", lines[0])
    if not m:
        sys.exit("mdman: the first line must be '# NAME(SECTION) -- description'")
    name, section, what = m.groups()
    date = ""
    if os.environ.get("SOURCE_DATE_EPOCH"):
        date = datetime.datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]),
                                               datetime.timezone.utc).strftime("%Y-%m-%d")
    out = ['.TH "%s" "%s" "%s" "cdc %s" "%s"' % (name.upper(), section, date, version,
                                                 SECTION_NAMES.get(section, "")),
           ".SH NAME", "%s \\- %s" % (escape(name), inline(what))]
    return "\n".join(out + body(lines[1:], cdc)) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("page")
    p.add_argument("--version", required=True)
    p.add_argument("--cdc", help="the cdc binary, for the configuration reference")
    a = p.parse_args()
    with open(a.page, encoding="utf-8") as f:
        sys.stdout.write(convert(f.read(), a.version, a.cdc))


if __name__ == "__main__":
    main()

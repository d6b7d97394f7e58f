#!/usr/bin/env python3
"""rename_params.py: renames one-letter parameter names in the prototypes and function pointers of
the given headers, by the parameter's type (one name per type: TYPES below), and in the comment
just above a prototype (or after it on its line) that named the parameter by its letter. Prints
what it renamed. Inline functions defined in a header are left to the hand (their bodies too).
tests/docs/names.py then counts what is left.

    python3 tests/docs/rename_params.py $(git ls-files 'cdc/*.h' 'decoder/*.h' 'sinks/*.h')
"""
import re, sys

TYPES = {
    "sidecar": "sc", "doctor": "doc", "source": "src", "ctx": "cx", "cfg": "conf", "pipeline": "pipe",
    "emit": "em", "strack": "tracker", "node": "nd", "key": "entry", "keys": "table", "pred": "predicate",
    "rules": "rs", "buf": "buffer", "sink": "sk", "sink_set": "sinks", "bf_set": "set", "table": "tab",
    "arena": "ar", "rset": "ranges", "keyset": "keys", "chunk": "ck", "ProtobufCBinaryData": "uuid", "rd_kafka_headers_t": "headers", "rendered": "rec", "evconnlistener": "listener", "consumer": "cons", "queue": "qu", "progress": "prog", "catalog": "cat", "backfill": "bf", "bf_reader": "reader",
    "bf_window": "window", "bf_change": "change", "state_writer": "writer", "status_server": "server",
    "status_request": "request", "hist": "histogram", "ring": "rg", "json_commit": "commit",
    "pg_secrets": "secrets", "cfg_subscription": "sub", "cfg_overlay": "overlay", "cfg_strlist": "list",
    "report": "rep", "doctor_report": "rep", "ename": "names", "ktype": "kind", "bf_settings": "settings",
    "bf_result": "result", "bf_snapshot": "snapshot", "pair": "seen", "txn": "tx", "txn_stats": "stats",
    "spool": "sp", "sq": "queue", "conn": "cn", "frame": "fr", "socket_sink": "ss", "kafka_sink": "ks",
    "PGconn": "pgconn", "PGresult": "res", "Cdc__V1__Event": "event", "Cdc__V1__Row": "row",
    "Cdc__V1__Key": "key", "Cdc__V1__Column": "column", "Cdc__V1__Value": "val", "pgo_msg": "msg",
    "pgo_relation": "rel", "relcache": "cache", "bf_state": "state", "source_settings": "settings",
    "match_sub": "sub", "rules_sub": "sub", "worker": "wk", "net_buf": "buffer", "log_level": "level",
    "sink_commit": "commit", "sink_doctor": "dr", "sink_problems": "problems", "nats_stats": "stats",
    "kafka_stats": "stats", "pg_publication_plan": "plan", "source_slot_health": "health",
    "source_failover": "failover", "named": "names", "dbz_scratch": "scratch", "dbz_options": "opts",
    "dbz_fill": "fill", "evt_builder": "builder", "schema_cache": "cache", "ddl_event": "ddl",
}
SCALARS = {  # (type, letter) -> name; then type -> name
    ("size_t", "i"): "index", ("uint32_t", "i"): "index", ("int", "i"): "index",
    ("char", "c"): "ch", ("int", "c"): "ch", ("unsigned char", "c"): "ch",
    ("uint64_t", "v"): "value", ("int64_t", "v"): "value", ("double", "v"): "value", ("double", "q"): "quantile",
    ("bool", "v"): "value", ("char", "q"): "quote", ("int", "v"): "value", ("uint32_t", "v"): "value", ("unsigned", "v"): "value",
}
SCALAR_TYPE = {"size_t": "count", "const char": "text", "char": "text", "const void": "data", "void": "data",
               "uint64_t": "value", "int64_t": "value", "uint32_t": "value", "int32_t": "value", "int": "value",
               "bool": "flag", "uint8_t": "byte", "const uint8_t": "bytes", "uint8_t*": "bytes",
               "unsigned": "value", "double": "value", "const unsigned char": "bytes", "mode_t": "mode",
               "uid_t": "uid", "pid_t": "pid", "uint16_t": "value", "short": "value", "long": "value"}


def new_name(ptype, letter):
    base = re.sub(r"\bstruct\b|\bconst\b|\*", " ", ptype).split()
    base = " ".join(base)
    raw = re.sub(r"\*", "", ptype).strip()
    if (base, letter) in SCALARS:
        return SCALARS[(base, letter)]
    if base in TYPES:
        return TYPES[base]
    key = raw if raw in SCALAR_TYPE else base
    if key in SCALAR_TYPE:
        name = SCALAR_TYPE[key]
        if letter == "n" and base in ("size_t", "int", "uint32_t", "uint64_t", "unsigned"):
            return "count"
        if letter in ("s", "p") and "char" in base:
            return "text"
        return name
    parts = base.split("_")
    name = parts[-1] if parts[-1] not in ("t",) else base
    return name if name != base else name + "_arg"


def fix_comment(comment, renames):
    for old, new in renames:
        if old in ("a", "i", "A", "I"):
            continue
        comment = re.sub(r"(?<![\w'\u2019.\-/\\{%])(?<!\d )" + old + r"(?![\w\-(])(?!\.\w)", new, comment)
    return comment


def rewrite(text, path, log):
    current = []

    def fix_params(m):
        params = m.group(1)
        if not params.strip() or params.strip() == "void":
            return m.group(0)
        items = params.split(",")
        # split respecting nested parens (function pointer params)
        items, depth, cur = [], 0, ""
        for ch in params:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += ch
        items.append(cur)
        used = set()
        out = []
        for it in items:
            mm = re.match(r"^(\s*)(.*?[\s\*])([A-Za-z])(\s*(?:\[[^\]]*\])?\s*)$", it, re.S)
            if mm and "(" not in it and re.search(r"[A-Za-z_]", mm.group(2)) and "&" not in it:
                ptype = mm.group(2).strip()
                name = new_name(ptype, mm.group(3))
                while name in used:
                    name += "2" if not name[-1].isdigit() else ""
                    if name in used:
                        name = name[:-1] + str(int(name[-1]) + 1)
                used.add(name)
                log.append(f"{path}: {ptype} {mm.group(3)} -> {name}")
                current.append((mm.group(3), name))

                out.append(f"{mm.group(1)}{mm.group(2)}{name}{mm.group(4)}")
            else:
                nm = re.search(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[[^\]]*\])?\s*$", it)
                if nm:
                    used.add(nm.group(1))
                out.append(it)
        return "(" + ",".join(out) + ")" + m.group(2)

    # protect comments and preprocessor lines
    pieces = re.split(r"(/\*.*?\*/|//[^\n]*|^#[^\n]*(?:\\\n[^\n]*)*)", text, flags=re.S | re.M)

    def with_comments(i, m, replaced):
        """replaced: the prototype's new text; renames in current go into the comment just before
        (when this is the first declaration after it) and a comment after it on the same line."""
        if current:
            before = pieces[i][:m.start()]
            if i > 0 and pieces[i - 1].startswith("/*") and not re.search(r"[;{}]", before):
                pieces[i - 1] = fix_comment(pieces[i - 1], current)
            after = pieces[i][m.end():]
            if i + 1 < len(pieces) and "\n" not in after and pieces[i + 1].startswith("/*"):
                trailing.append((i + 1, list(current)))
        current.clear()
        return replaced

    trailing = []
    for i in range(0, len(pieces), 2):
        # a function pointer's own parameters: (*name)(...)
        pieces[i] = re.sub(r"(?<=\))(\s*)\(([^()]*)\)(?=\s*[,);])",
                           lambda m: with_comments(i, m, m.group(1) + fix_params(
                               re.match(r"\((.*)\)()", "(" + m.group(2) + ")", re.S)))
                           if re.search(r"\(\s*\*\s*\w*\s*\)\s*$", pieces[i][:m.start()]) else m.group(0),
                           pieces[i])
        pieces[i] = re.sub(r"\(([^()]*(?:\([^()]*\)[^()]*)*)\)(\s*(?:CDC_[A-Z_]+(?:\([^)]*\))?\s*)*;)",
                           lambda m: with_comments(i, m, fix_params(m)), pieces[i])
    for j, renames in trailing:
        pieces[j] = fix_comment(pieces[j], renames)
    return "".join(pieces)


if __name__ == "__main__":
    log = []
    for path in sys.argv[1:]:
        text = open(path).read()
        new = rewrite(text, path, log)
        if new != text:
            open(path, "w").write(new)
    print("\n".join(log))

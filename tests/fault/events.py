"""events.py: what the fault harness keeps of an event, whatever sink it came through.
Schema and DDL events are no changes: their Recs have op "schema" or "ddl" and only their place (the
harness keeps their offsets apart, for the socket offsets' density, and checks schema events with
tests/schema_check.py where a stream is read in order).

Every sink's events (Kafka's protobuf, the socket's protobuf, the JSON lines of `cdc tail` and of
the stdout sink) become one Rec: the row's table, id and version (the load generator's `ver`
column), op, marker (`note`), group (`grp`, what the filtered subscription matches on), and the
change's identity (commit_lsn, tx_index), xid and, for socket subscriptions, offset.

A delete carries its version only under REPLICA IDENTITY FULL (the old row): it is the deleted row's
ver + 1, as the load generator's ledger counts it. Without an old row `ver` is None and the
checker takes the version from the ledger's delete of that key (a key is deleted at most once).
"""

import json
import os
import sys
from collections import namedtuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tests/: pg, kafka_fixtures, subscriber_helpers, conftest

from kafka_fixtures import row_plain  # noqa: E402
from pg import lsn_to_int  # noqa: E402

# where: a place in the sink's stream the checker uses ("consumer run, line", "partition, offset").
Rec = namedtuple("Rec", "table id op ver note grp xid cl ti off where")

OPS = {1: "insert", 2: "update", 3: "delete", 4: "truncate", 5: "message", 6: "read", 7: "schema", 8: "ddl"}
NOT_CHANGES = ("schema", "ddl")


def _version(op, new, old):
    if op in ("insert", "update"):
        return new.get("ver")
    if op == "delete" and old and old.get("ver") is not None:
        return old["ver"] + 1
    return None


def _str(v):
    # Interned: a long run keeps millions of Recs, most of them naming the same few tables, ops
    # and markers.
    return sys.intern(v) if isinstance(v, str) else v


def _rec(table, key, op, new, old, xid, cl, ti, off, where):
    row = new if new else (old or {})
    return Rec(_str(table), key.get("id"), _str(op), _version(op, new, old), _str(row.get("note")),
               row.get("grp"), xid, cl, ti, off, where)


def from_json(e, where=None):
    """A Rec from an event as JSON (stdout sink, `cdc tail`)."""
    if e["op"] in NOT_CHANGES:
        return _rec(e["table"], {}, e["op"], None, None, e["xid"], lsn_to_int(e["commit_lsn"]), e["tx_index"],
                    e.get("offset"), where)
    return _rec(e["table"], e.get("key") or {}, e["op"], e.get("new"), e.get("old"), e["xid"],
                lsn_to_int(e["commit_lsn"]), e["tx_index"], e.get("offset"), where)


def from_proto(e, where=None):
    """A Rec from a cdc.v1.Event (Kafka value, socket delivery)."""
    off = e.offset if e.WhichOneof("offset_present") else None
    if OPS.get(e.op) in NOT_CHANGES:
        return _rec(e.table, {}, OPS[e.op], None, None, e.xid, e.commit_lsn, e.tx_index, off, where)
    new = row_plain(e.new_row) if e.HasField("new_row") else None
    old = row_plain(e.old_row) if e.HasField("old_row") else None
    key = row_plain(e.key) if e.HasField("key") else {}
    return _rec(e.table, key, OPS.get(e.op, str(e.op)), new, old, e.xid, e.commit_lsn, e.tx_index, off, where)


def to_line(r):
    """A Rec as one JSON line (the socket consumer's output file)."""
    return json.dumps(list(r[:-1]), separators=(",", ":")) + "\n"


def from_line(line, where=None):
    return Rec(*(_str(v) for v in json.loads(line)), where)


class LineFile:
    """Reads a file that another process appends lines to, incrementally: read_new() returns the
    complete lines added since the last call (a partial last line, such as one cut by a kill -9,
    waits for its newline; at the end it is left out). Keeps the byte offset of each read."""

    def __init__(self, path):
        self.path = path
        self.pos = 0
        self.lines = 0

    def read_new(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.pos += end + 1
        out = []
        for line in data[:end].split(b"\n"):
            self.lines += 1
            if line.strip():
                out.append((self.lines, line))
        return out

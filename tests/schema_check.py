"""schema_check.py: the promise of schema events (README "Schema events"), checked on a stream of
events as a consumer sees them (dicts in the form of cdc's JSON: stdout, cdc tail, or a client's
events turned into that form): each row of a subscription's table (insert, update, delete, read)
names its schema event in schema_id, comes after that schema event (the last one of its table in
the stream) and holds exactly its columns; a schema event is well formed.

    check = SchemaCheck(strict={"all"})
    rows = [e for e in events if not check.feed(e)]

strict: the subscriptions whose operations include schema: a row of theirs must follow a schema
event of its table. Other subscriptions' rows still carry a schema_id (checked for its form)."""

import re

ID_RE = re.compile(r"^[0-9a-f]{16}$")
ROW_OPS = ("insert", "update", "delete", "read")
REPLICA_IDENTITIES = ("default", "nothing", "full", "index", None)


class SchemaCheck:
    def __init__(self, strict=()):
        self.strict = set(strict)
        self.last = {}        # (subscription, schema, table) -> the last schema event
        self.schemas = []     # every schema event, in order
        self.columns = {}     # schema_id -> (its columns' names, as a set, its key's as a set)

    def feed(self, e):
        """Checks one event; returns True if it is a schema event (which rows are checked against)."""
        op = e.get("op")
        where = (e.get("subscription"), e.get("schema"), e.get("table"))
        if op == "schema":
            self._check_schema(e)
            self.last[where] = e
            columns = e["table_schema"]["columns"]
            names = [c["name"] for c in columns]
            self.columns[e["schema_id"]] = (names, set(names), {c["name"] for c in columns if c["key"]})
            self.schemas.append(e)
            return True
        if op not in ROW_OPS:
            assert "schema_id" not in e or e["schema_id"] is None, f"schema_id on a {op} event: {e}"
            return False
        assert ID_RE.match(e.get("schema_id") or ""), f"row without a schema_id: {e}"
        s = self.last.get(where)
        if s is None:
            assert where[0] not in self.strict, f"row before any schema event of its table: {e}"
            return False
        assert e["schema_id"] == s["schema_id"], (
            f"row names schema {e['schema_id']}, the last schema event of its table is "
            f"{s['schema_id']}:\n  schema: {s}\n  row: {e}")
        cols, colset, keys = self.columns[s["schema_id"]]
        toast = set(e.get("unchanged_toast") or ())
        new, old, key = e.get("new"), e.get("old"), e.get("key")
        if op in ("insert", "read", "update"):
            assert new is not None and new.keys() <= colset and colset <= new.keys() | toast, (
                f"row's columns {sorted(new or [])} (unchanged TOAST {sorted(toast)}) are not its "
                f"schema's {cols}:\n  schema: {s}\n  row: {e}")
        if old is not None:
            assert old.keys() <= colset, f"old row's columns not in the schema {cols}: {e}"
        if key is not None:
            assert key.keys() == keys, f"key columns {sorted(key)}, the schema's are {sorted(keys)}: {e}"
        return False

    @staticmethod
    def _check_schema(e):
        assert ID_RE.match(e.get("schema_id") or ""), f"schema event without an id: {e}"
        assert e.get("key") is None and e.get("new") is None and e.get("old") is None, e
        s = e.get("table_schema")
        assert isinstance(s, dict) and isinstance(s.get("columns"), list) and s["columns"], e
        assert s.get("replica_identity") in REPLICA_IDENTITIES, e
        names = set()
        for c in s["columns"]:
            assert set(c) == {"name", "type", "type_oid", "typmod", "key", "nullable", "renamed_from"}, c
            assert isinstance(c["name"], str) and c["name"] and c["name"] not in names, e
            names.add(c["name"])
            assert isinstance(c["type"], str) and c["type"], c
            assert isinstance(c["type_oid"], int) and isinstance(c["typmod"], int), c
            assert isinstance(c["key"], bool) and c["nullable"] in (True, False, None), c
            assert c["renamed_from"] is None or (isinstance(c["renamed_from"], str) and c["renamed_from"]), c


def wants_schema(subscription):
    """Whether a subscription's config (a dict, as the tests write it) gets schema events."""
    ops = subscription.get("operations")
    return ops is None or "schema" in ops

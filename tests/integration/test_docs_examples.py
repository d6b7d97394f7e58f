"""test_docs_examples.py: the JSON examples of the documentation against what cdc writes (issue 31:
docs/events.md's first example had no schema_id; docs/subscriptions.md said the default of
`operations` was "the first four").

Every ```json block of README.md and docs/*.md is matched by its look with a record of its kind that
cdc writes here against a real PostgreSQL: a stdout event, a socket subscription's schema and DDL
events (`cdc tail`), a dead letter (`cdc tail --dead`), `cdc doctor --json`. An example must have
the keys of the real record in the same order at every level, and values of the same JSON type
where neither is null. The Debezium examples of docs/kafka-formats.md are checked the same way
against tests/fixtures/debezium/, whose records tests/integration/test_kafka_formats.py compares
with what cdc writes to Kafka. A new example of a kind this test does not know fails it, so that
every example is checked. The annotated configuration of docs/subscriptions.md must pass
check-config, and its comment on `operations` must name the operations and the default that
check-config prints."""

import glob
import json
import os
import re
import subprocess

from conftest import CDC_BIN, ROOT, wait_for
from subscriber_helpers import Subscriber

DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "debezium")


def examples():
    """(file, line, text) of every ```json block."""
    out = []
    for path in DOCS:
        with open(path) as f:
            text = f.read()
        for m in re.finditer(r"^```json\n(.*?)^```$", text, re.S | re.M):
            out.append((os.path.relpath(path, ROOT), text[:m.start()].count("\n") + 2, m.group(1)))
    return out


def documents(text):
    """The JSON values of a block: one, or one per line when it holds several."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    out, buf = [], ""
    for ln in text.splitlines(keepends=True):
        buf += ln
        try:
            out.append(json.loads(buf))
            buf = ""
        except ValueError:
            continue
    assert not buf.strip(), f"not JSON: {buf!r}"
    return out


def kind(doc):
    """What an example shows, by its keys."""
    if "checks" in doc:
        return "doctor"
    if "before" in doc and "source" in doc:
        return "debezium"
    if doc.get("status") in ("BEGIN", "END"):
        return "debezium " + doc["status"]
    if "dead_letter" in doc:
        return "dead letter"
    if doc.get("op") in ("schema", "ddl"):
        return doc["op"]
    if "op" in doc and doc.get("offset") is None:
        return "stdout " + doc["op"]
    return None


def json_type(v):
    return "boolean" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else type(v).__name__


ROWS = ("key", "new", "old", "before", "after")  # a table's columns: the example's table is its own


def shape_problems(doc, real, path="$"):
    """How doc differs from real: keys (and their order) at every level, types where both are set;
    rows only in their type."""
    if doc is None or real is None:
        return []
    if json_type(doc) != json_type(real):
        return [f"{path}: {json_type(doc)} in the docs, {json_type(real)} in real output"]
    if isinstance(doc, dict) and path.rsplit(".", 1)[-1] not in ROWS:
        out = []
        if list(doc) != list(real):
            out.append(f"{path}: keys {list(doc)} in the docs, {list(real)} in real output")
        for k in doc:
            if k in real:
                out += shape_problems(doc[k], real[k], f"{path}.{k}")
        return out
    if isinstance(doc, list) and real:
        return [p for i, item in enumerate(doc) for p in shape_problems(item, real[0], f"{path}[{i}]")]
    return []


def fixture_value(name, pick):
    with open(os.path.join(FIXTURES, name)) as f:
        records = json.load(f)["records"]
    value = next(r["value"] for r in records if pick(r))
    # the fixtures write varying values as "<ms>", "<lsn>"...: the types they stand for
    types = {"<ms>": 0, "<us>": 0, "<ns>": 0, "<lsn>": 0, "<xid>": 0}

    def typed(v):
        if isinstance(v, dict):
            return {k: typed(x) for k, x in v.items()}
        if isinstance(v, list):
            return [typed(x) for x in v]
        return types.get(v, v) if isinstance(v, str) else v
    return typed(value)


def tail(c, *args):
    out = subprocess.run([CDC_BIN, "tail", "-c", c.path] + list(args), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(ln) for ln in out.stdout.splitlines()]


def test_json_examples_match_real_output(pg, schema, cdc):
    pg.sql(f"create table {schema}.orders (id int primary key, status varchar(20), amount numeric(10,2))")
    c, p = cdc.start(
        subscriptions=[{"name": "paid", "tables": [f"{schema}.orders"], "operations": ["update"], "sink": "stdout"},
                       {"name": "q", "tables": [f"{schema}.orders"], "sink": "socket"},
                       {"name": "dead", "tables": [f"{schema}.orders"], "operations": ["insert"], "sink": "socket",
                        "max_deliveries": 1}],
        source={"ddl": True})
    pg.sql(f"insert into {schema}.orders values (7, 'new', 120)")
    pg.sql(f"update {schema}.orders set status = 'paid' where id = 7")
    pg.sql(f"alter table {schema}.orders rename status to state")
    pg.sql(f"update {schema}.orders set state = 'shipped' where id = 7")
    real = {}
    real["stdout update"] = wait_for(lambda: next((e for e in p.raw_events() if e["op"] == "update"), None),
                                     what="the stdout update")
    for e in tail(c, "q", "--count", "6"):  # schema, insert, update, ddl, schema, update
        real.setdefault(e["op"], e)
    with Subscriber(c.config["subscribers"]["socket"], "dead") as s:
        (ev,) = s.events(1)
        s.nack([ev.offset], reason="ack timeout")
    real["dead letter"] = wait_for(lambda: tail(c, "dead", "--dead", "--timeout", "1", "--no-ack"),
                                   what="a dead letter")[0]
    doctor = subprocess.run([CDC_BIN, "doctor", "-c", c.path, "--json"], capture_output=True, text=True, timeout=60)
    real["doctor"] = json.loads(doctor.stdout)
    real["debezium"] = fixture_value("create.json", lambda r: True)
    for status in ("BEGIN", "END"):
        real["debezium " + status] = fixture_value("transaction.json",
                                                   lambda r, s=status: r["value"].get("status") == s)
    assert p.terminate() == 0
    assert {"stdout update", "schema", "ddl", "dead letter"} <= set(real), sorted(real)

    problems, seen = [], set()
    for path, line, text in examples():
        for doc in documents(text):
            k = kind(doc)
            if k not in real:
                problems.append(f"{path}:{line}: an example of a kind this test does not know ({k}): add it here")
                continue
            seen.add(k)
            problems += [f"{path}:{line}: {p}" for p in shape_problems(doc, real[k])]
    assert problems == [], "\n".join(problems)
    assert seen >= {"stdout update", "schema", "ddl", "dead letter", "doctor", "debezium", "debezium BEGIN"}


def test_the_annotated_configuration_and_its_operations_comment(tmp_path):
    with open(os.path.join(ROOT, "docs", "subscriptions.md")) as f:
        text = f.read()
    block = re.search(r"^## The configuration file, annotated\n.*?^```yaml\n(.*?)^```$", text, re.S | re.M).group(1)
    path = tmp_path / "annotated.yaml"
    path.write_text(block)
    out = subprocess.run([CDC_BIN, "check-config", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    comment = re.search(r"^ +operations: .*?# (.*)$", block, re.M).group(1)
    names, default = re.fullmatch(r"(.*) \(default: \[(.*)\]\)", comment).groups()
    # what check-config prints for a subscription without operations, and the names it takes
    path.write_text("subscriptions:\n  - {name: s, tables: [public.t]}\n")
    printed = subprocess.run([CDC_BIN, "check-config", "-c", str(path)], capture_output=True, text=True,
                             timeout=60).stdout
    assert f"    operations: [{default}]" in printed.splitlines(), (comment, printed)
    # the names: those check-config expects, in its order
    path.write_text("subscriptions:\n  - {name: s, tables: [public.t], operations: [nope]}\n")
    refused = subprocess.run([CDC_BIN, "check-config", "-c", str(path)], capture_output=True, text=True,
                             timeout=60).stderr
    assert f'unknown operation "nope" (expected {names})' in refused, (comment, refused)

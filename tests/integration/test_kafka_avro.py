"""test_kafka_avro.py: `format: avro`, Debezium's records through Confluent's AvroConverter, end to end:
PostgreSQL, cdc, the mock Kafka cluster and tests/registry_double.py (Confluent's Schema Registry
API). Every record is read with kcat and decoded by Apache Avro's own Python library (python3-avro)
with the schema the registry double gives for the id in its Confluent wire format header.

- the Debezium fixtures (tests/fixtures/debezium/*.json, less the JsonConverter-only ones) run in
  Avro: every field compared, bytes and decimals as Avro holds them, a row's missing columns null;
- every type cdc decodes: the Avro type of each field as docs/kafka-formats.md's table says;
- a column added mid-stream: a new version registered before the first row that has it;
- a registry that refuses a schema, or cannot be reached: the records wait (nothing after them is
  written, nothing is skipped), cdc says why, and everything arrives once the registry accepts;
- the subject name strategies, the compatibility of a subject cdc creates, basic auth and TLS."""

import base64
import decimal
import io
import json
import os
import signal
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import avro.io
import avro.schema
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from conftest import CDC_BIN, wait_for  # noqa: E402
from kafka_fixtures import kcat  # noqa: E402
from registry_double import RegistryDouble  # noqa: E402
from test_kafka import kafka_section, ksub  # noqa: E402
from test_kafka_formats import FIXTURES, read_topic, run_fixture  # noqa: E402
from test_security import make_ca, make_server_cert  # noqa: E402
from test_status import get  # noqa: E402

CONTENT_TYPE_AVRO = "application/vnd.confluent.avro"
CONTEXT = ("__debezium.context.connectorLogicalName", "__debezium.context.taskId",
           "__debezium.context.connectorName", "__debezium.context.runId")


@pytest.fixture
def registry():
    with RegistryDouble() as reg:
        yield reg


def avro_section(kafka, registry, settings=None, **extra):
    """The kafka section with registry's URL and settings in schema_registry."""
    return kafka_section(kafka, schema_registry=dict({"url": registry.url}, **(settings or {})), **extra)


# --- decoding ------------------------------------------------------------------------------------

_schemas = {}


def fetch_schema(url, sid, auth=None, context=None):
    """The schema of id sid, as a consumer gets it: GET /schemas/ids/ID."""
    if (url, sid) not in _schemas:
        req = urllib.request.Request(f"{url}/schemas/ids/{sid}")
        if auth:
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            _schemas[(url, sid)] = avro.schema.parse(json.loads(r.read())["schema"])
    return _schemas[(url, sid)]


def decode_avro(data, url, **kw):
    """(value, schema, id) of a record in the Confluent wire format; every byte must be read."""
    assert data[0] == 0, f"magic byte {data[0]}"
    sid = int.from_bytes(data[1:5], "big")
    schema = fetch_schema(url, sid, **kw)
    buf = io.BytesIO(data[5:])
    value = avro.io.DatumReader(schema).read(avro.io.BinaryDecoder(buf))
    assert buf.tell() == len(data) - 5, f"{len(data) - 5 - buf.tell()} bytes after the record"
    return value, schema, sid


def decoder(url, **kw):
    def decode(m):
        out = {"headers": dict(m["headers"]), "key": None, "value": None, "key_schema": None,
               "value_schema": None, "partition": m["partition"]}
        for part in ("key", "value"):
            if m[part] is not None:
                out[part], out[part + "_schema"], out[part + "_id"] = decode_avro(m[part], url, **kw)
        return out
    return decode


def as_avro(schema, v, path="$"):
    """A fixture's JSON value (JsonConverter's) as python3-avro reads the same value written with
    schema: base64 as bytes, Decimal's bytes as decimal.Decimal, floats rounded to 32 bits, a
    record's fields in the schema (a column the JSON row does not carry is null). Matchers
    ("<ms>") stay."""
    if isinstance(v, str) and v.startswith("<") and v.endswith(">"):
        return v
    t = schema.type
    if t == "union":
        if v is None:
            assert any(s.type == "null" for s in schema.schemas), f"{path}: null in {schema}"
            return None
        branches = [s for s in schema.schemas if s.type != "null"]
        assert len(branches) == 1, f"{path}: union {schema}"
        return as_avro(branches[0], v, path)
    if v is None:
        return None
    if t == "record":
        extra = set(v) - {f.name for f in schema.fields}
        assert not extra, f"{path}: fields {extra} not in the Avro record {schema.fullname}"
        return {f.name: as_avro(f.type, v.get(f.name), f"{path}.{f.name}") for f in schema.fields}
    if t == "array":
        return [as_avro(schema.items, x, f"{path}[{i}]") for i, x in enumerate(v)]
    if t == "bytes":
        raw = base64.b64decode(v)
        if schema.get_prop("logicalType") == "decimal":
            return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-schema.get_prop("scale"))
        return raw
    if t == "float":
        return struct.unpack("<f", struct.pack("<f", float(v)))[0]
    if t == "double":
        return float(v)
    return v


def expected_avro(want, got):
    """A fixture record as format avro has it: key and value through the schemas the record was
    written with, content-type Avro's."""
    out = dict(want, headers=dict(want.get("headers", {})))
    if "content-type" in out["headers"]:
        out["headers"]["content-type"] = CONTENT_TYPE_AVRO
    for part in ("key", "value"):
        if want[part] is not None and got[part + "_schema"] is not None:
            out[part] = as_avro(got[part + "_schema"], want[part], part)
    return out


# --- Debezium's shapes --------------------------------------------------------------------------

def avro_fixture(path):
    """Whether the fixture applies to Avro: JsonConverter's schemas, and leaving a TOASTed column
    out, do not."""
    sub = json.load(open(path))["subscription"]
    return not sub.get("schemas") and sub.get("unchanged_toast") != "omit"


AVRO_FIXTURES = [p for p in FIXTURES if avro_fixture(p)]


@pytest.mark.parametrize("path", AVRO_FIXTURES, ids=[os.path.basename(p)[:-5] for p in AVRO_FIXTURES])
def test_debezium_fixture_in_avro(pg, schema, cdc, kafka, registry, path):
    got = run_fixture(pg, schema, cdc, kafka, json.load(open(path)), sub_extra={"format": "avro"},
                      kafka_extra={"schema_registry": {"url": registry.url}},
                      decode_record=decoder(registry.url), expected=expected_avro)
    # every record in the wire format with a schema the registry holds under TopicNameStrategy's subject
    subjects = registry.subjects()
    for g in got:
        for part in ("key", "value"):
            if g[part] is not None:
                assert g[part + "_id"] in subjects[f"{g['topic']}-{part}"], (g["topic"], part, subjects)


# Each type's Avro type as docs/kafka-formats.md's table gives it: the field's type in the Value
# record (optional: ["null", T]), T as JSON.
AVRO_TYPES = {
    "id": "int",
    "b": "boolean", "i2": {"type": "int", "connect.type": "int16"}, "i4": "int", "i8": "long", "o": "long",
    "f4": "float", "f8": "double",
    "n": {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
          "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
          "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"},
    "nv": {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
           "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
           "connect.doc": "Variable scaled decimal", "connect.version": 1,
           "connect.name": "io.debezium.data.VariableScaleDecimal"},
    "m": {"type": "bytes", "scale": 2, "precision": 64, "connect.version": 1, "connect.parameters": {"scale": "2"},
          "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"},
    "t": "string", "vc": "string", "c": "string", "nm": "string", "ch": "string", "ba": "bytes",
    "u": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Uuid"},
    "j": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"},
    "jb": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"},
    "x": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Xml"},
    "d": {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"},
    "tm": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTime"},
    "tm3": {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Time"},
    "ts": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"},
    "ts3": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.Timestamp"},
    "tz": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"},
    "tz3": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"},
    "ttz": {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTime"},
    "iv": {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroDuration"},
    "bt1": "boolean",
    "bt": {"type": "bytes", "connect.version": 1, "connect.parameters": {"length": "24"},
           "connect.name": "io.debezium.data.Bits"},
    "vb": {"type": "bytes", "connect.version": 1, "connect.parameters": {"length": "2147483647"},
           "connect.name": "io.debezium.data.Bits"},
    "p": {"type": "record", "name": "Point", "namespace": "io.debezium.data.geometry",
          "fields": [{"name": "x", "type": "double"}, {"name": "y", "type": "double"},
                     {"name": "wkb", "type": ["null", "bytes"], "default": None},
                     {"name": "srid", "type": ["null", "int"], "default": None}],
          "connect.doc": "Geometry (POINT)", "connect.version": 1, "connect.name": "io.debezium.data.geometry.Point"},
    "ip": "string", "r": "string",
    "ai": {"type": "array", "items": ["null", "int"]},
    "at": {"type": "array", "items": ["null", "string"]},
    "an": {"type": "array", "items": ["null", {
        "type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
        "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
        "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}]},
    "atz": {"type": "array", "items": ["null", {"type": "string", "connect.version": 1,
                                                "connect.name": "io.debezium.time.ZonedTimestamp"}]},
    "aiv": "string",
}


def test_every_type_has_its_avro_type_and_value(pg, schema, cdc, kafka, registry):
    """types.json in Avro (every field's value as python3-avro reads it, compared with the fixture's),
    and each field's Avro type as the documentation's table says, in the schema the registry
    holds."""
    fx = json.load(open(os.path.join(os.path.dirname(FIXTURES[0]), "types.json")))
    got = run_fixture(pg, schema, cdc, kafka, fx, sub_extra={"format": "avro"},
                      kafka_extra={"schema_registry": {"url": registry.url}},
                      decode_record=decoder(registry.url), expected=expected_avro)
    envelope = json.loads(registry.schema(got[0]["value_id"]))
    value = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    assert value["name"] == "Value" and value["namespace"] == "PostgreSQL_server." + schema + ".types"
    types = {}
    for f in value["fields"]:
        t = f["type"]
        if f["name"] != "id":  # a key column is required, the others optional with a null default
            assert isinstance(t, list) and t[0] == "null" and f["default"] is None, f
            t = t[1]
        types[f["name"]] = t
    assert sorted(types) == sorted(AVRO_TYPES)
    wrong = {k: (types[k], AVRO_TYPES[k]) for k in AVRO_TYPES if types[k] != AVRO_TYPES[k]}
    assert not wrong, wrong
    assert envelope["name"] == "Envelope" and envelope["namespace"] == f"cdc.{schema}.types"
    assert [f["name"] for f in envelope["fields"]] == ["before", "after", "source", "transaction", "op", "ts_ms",
                                                       "ts_us", "ts_ns"]
    assert envelope["connect.name"] == f"cdc.{schema}.types.Envelope" and envelope["connect.version"] == 2
    key = json.loads(registry.schema(got[0]["key_id"]))
    assert key == {"type": "record", "name": "Key", "namespace": f"PostgreSQL_server.{schema}.types",
                   "fields": [{"name": "id", "type": "int"}],
                   "connect.name": f"PostgreSQL_server.{schema}.types.Key"}


# --- schemas that change ------------------------------------------------------------------------

def read_avro(kafka, topic, n, p, registry):
    return [decoder(registry.url)(m) for m in read_topic(kafka, topic, n, p.describe)]


def test_a_column_added_mid_stream_registers_a_version_before_its_first_row(pg, schema, cdc, kafka, registry):
    pg.sql(f"create table {schema}.t (id int primary key, a text)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")], kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 'one')")
    first = read_avro(kafka, topic, 1, p, registry)
    before_alter = time.time()
    pg.sql(f"alter table {schema}.t add column b int")
    pg.sql(f"insert into {schema}.t values (2, 'two', 22)")
    pg.sql(f"update {schema}.t set a = 'uno' where id = 1")
    recs = read_avro(kafka, topic, 3, p, registry)
    assert p.terminate() == 0, p.describe()
    assert recs[0] == first[0]
    v1, v2 = registry.subjects()[f"{topic}-value"]
    assert [r["value_id"] for r in recs] == [v1, v2, v2]
    assert recs[0]["value"]["after"] == {"id": 1, "a": "one"}
    assert recs[1]["value"]["after"] == {"id": 2, "a": "two", "b": 22}
    assert recs[2]["value"]["after"] == {"id": 1, "a": "uno", "b": None}
    # the key's schema did not change: one version
    assert registry.subjects()[f"{topic}-key"] == [recs[0]["key_id"]]
    # version 2 was registered once, after the ALTER, under the subject's level (BACKWARD, which
    # allows a column with a null default); its id, which only the registry's answer gives, is in
    # the first record with the column
    registered = [t for s, t in registry.registrations() if s == f"{topic}-value"]
    assert len(registered) == 2 and registered[0] < before_alter < registered[1]
    assert registry.registry.level_of(f"{topic}-value") == "BACKWARD"
    assert [f["name"] for f in json.loads(registry.schema(v2))["fields"][0]["type"][1]["fields"]] == ["id", "a", "b"]


def test_a_refused_schema_holds_the_stream_until_the_registry_accepts_it(pg, schema, cdc, kafka, registry):
    """A column's type changes (int to text): BACKWARD refuses the new envelope (409). cdc says why,
    writes nothing of that row or after it, skips nothing, and once the subject's compatibility is
    NONE writes every record in order."""
    pg.sql(f"create table {schema}.t (id int primary key, v int)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")], kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1, 10)")
    read_avro(kafka, topic, 1, p, registry)
    pg.sql(f"alter table {schema}.t alter column v type text")
    pg.sql(f"insert into {schema}.t values (2, 'twenty')")
    pg.sql(f"insert into {schema}.t values (3, 'thirty')")
    wait_for(lambda: "the schema registry refused a schema" in p.stderr(), timeout=30,
             what=f"the refusal logged\n{p.describe()}")
    assert "HTTP 409 (error 40901): Schema being registered is incompatible with an earlier schema for " \
           f'subject "{topic}-value"' in p.stderr(), p.describe()
    assert "PUT /config/SUBJECT" in p.stderr()
    # the status socket's figures are up to a second old: the first ones may have no registry yet
    kafka_status = wait_for(lambda: (lambda k: k if k.get("schema_registry", {}).get("waiting") else None)(
        json.loads(get(c, "/status")[1])["kafka"]), timeout=10, what="/status to show the wait")
    assert kafka_status["schema_registry"]["subject"] == f"{topic}-value"
    assert "incompatible" in kafka_status["schema_registry"]["error"]
    # where a user looks: cdc status, /metrics, /readyz
    out = subprocess.run([CDC_BIN, "status", "-c", c.path], capture_output=True, text=True, timeout=30).stdout
    assert f"kafka   waiting for the registry: subject {topic}-value: schema registry " in out, out
    metrics = get(c, "/metrics")[1]
    assert "\ncdc_kafka_registry_waiting 1\n" in metrics and "\ncdc_kafka_schemas_registered 2\n" in metrics
    assert get(c, "/readyz")[0] == 503
    assert len(kcat(kafka.bootstrap, topic)) == 1  # nothing after the refused row
    registry.registry.set_level(f"{topic}-value", "NONE")
    p.signal(signal.SIGHUP)  # asks again at once (else within a minute)
    recs = read_avro(kafka, topic, 3, p, registry)
    assert p.terminate() == 0, p.describe()
    assert [r["value"]["after"] for r in recs] == [{"id": 1, "v": 10}, {"id": 2, "v": "twenty"},
                                                  {"id": 3, "v": "thirty"}]


def test_an_unreachable_registry_holds_the_stream_then_lets_it_go(pg, schema, cdc, kafka, registry):
    """Down (503), then a 422 once: said each time, nothing written meanwhile, then everything. The
    ids are kept: a new stream (the walsender killed) sends the schema events again, and cdc
    registers nothing again."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    registry.down()
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")], kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"insert into {schema}.t select generate_series(1, 5)")
    wait_for(lambda: "the schema registry cannot be asked" in p.stderr(), timeout=30,
             what=f"the failure logged\n{p.describe()}")
    assert "HTTP 503" in p.stderr()
    assert kcat(kafka.bootstrap, topic) == []
    registry.refuse(1, 422, "Invalid schema (test double)")
    registry.up()
    recs = read_avro(kafka, topic, 5, p, registry)
    assert "HTTP 422 (error 42201): Invalid schema (test double)" in p.stderr(), p.describe()
    assert [r["key"]["id"] for r in recs] == [1, 2, 3, 4, 5]
    posts = len([r for r in registry.requests if r["method"] == "POST"])
    pg.sql("select pg_terminate_backend(active_pid) from pg_replication_slots where slot_name = %s", (c.slot,))
    wait_for(lambda: p.stderr().count(" streaming slot=") >= 2, timeout=30, what=f"a new stream\n{p.describe()}")
    pg.sql(f"insert into {schema}.t values (6)")
    recs = read_avro(kafka, topic, 6, p, registry)
    assert p.terminate() == 0, p.describe()
    assert recs[5]["key"]["id"] == 6
    assert len([r for r in registry.requests if r["method"] == "POST"]) == posts


def test_a_truncate_first_gets_its_tables_schema(pg, schema, cdc, kafka, registry):
    """A truncate before any row of its table since cdc started: its schema event comes first, so
    its envelope has a schema; asked for with operations."""
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro",
                                operations=["insert", "update", "delete", "truncate"])],
            kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"truncate {schema}.t")
    recs = read_avro(kafka, topic, 1, p, registry)
    assert p.terminate() == 0, p.describe()
    assert recs[0]["key"] is None and recs[0]["value"]["op"] == "t"
    assert recs[0]["value"]["before"] is None and recs[0]["value"]["after"] is None
    assert registry.subjects()[f"{topic}-value"] == [recs[0]["value_id"]]


def test_a_key_avro_cannot_write_stops_the_sink_and_says_which(pg, schema, cdc, kafka, registry):
    """A numeric key's NaN has no Decimal (Debezium fails on it too): the key's field is required,
    so the event cannot be written; the Kafka sink stops with the column named, nothing skipped."""
    pg.sql(f"create table {schema}.t (id numeric(10,2) primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")], kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1.5)")
    pg.sql(f"insert into {schema}.t values ('NaN')")
    pg.sql(f"insert into {schema}.t values (2.5)")
    wait_for(lambda: "an event cannot be written in Avro: column id has no value in the key, but its Avro "
                     "field is required" in p.stderr(), timeout=30, what=f"the failure logged\n{p.describe()}")
    read_avro(kafka, topic, 1, p, registry)
    assert p.terminate() == 0, p.describe()
    # the row before it, maybe twice (each restart streams again from the slot), and nothing after it
    keys = {decoder(registry.url)(m)["key"]["id"] for m in kcat(kafka.bootstrap, topic)}
    assert keys == {decimal.Decimal("1.50")}


def test_names_are_made_valid_avro_names(pg, schema, cdc, kafka, registry):
    pg.sql(f'create table {schema}."order-items" ("item id" int primary key, "9lives" text, "prix €" int)')
    topic = f"cdc.{schema}.order-items"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.*"], format="avro")], kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f'insert into {schema}."order-items" values (1, \'cat\', 3)')
    recs = read_avro(kafka, topic, 1, p, registry)
    assert p.terminate() == 0, p.describe()
    assert recs[0]["key"] == {"item_id": 1}
    assert recs[0]["value"]["after"] == {"item_id": 1, "_9lives": "cat", "prix__": 3}
    assert recs[0]["value_schema"].fullname == f"cdc.{schema}.order_items.Envelope"
    assert recs[0]["key_schema"].fullname == f"cdc.{schema}.order_items.Key"
    assert recs[0]["value"]["source"]["table"] == "order-items"  # the data is the name itself


# --- subjects, compatibility, auth, TLS ----------------------------------------------------------

@pytest.mark.parametrize("strategy,key,value", [
    ("record", "{server}.{schema}.t.Key", "cdc.{schema}.t.Envelope"),
    ("topic_record", "cdc.{schema}.t-{server}.{schema}.t.Key", "cdc.{schema}.t-cdc.{schema}.t.Envelope"),
])
def test_subject_name_strategies(pg, schema, cdc, kafka, registry, strategy, key, value):
    pg.sql(f"create table {schema}.t (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro", subject_strategy=strategy,
                                server_name="srv")],
            kafka=avro_section(kafka, registry))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1)")
    recs = read_avro(kafka, topic, 1, p, registry)
    assert p.terminate() == 0, p.describe()
    names = {"server": "srv", "schema": schema}
    assert registry.subjects() == {key.format(**names): [recs[0]["key_id"]],
                                   value.format(**names): [recs[0]["value_id"]]}


def test_a_new_subject_gets_the_configured_compatibility(pg, schema, cdc, kafka, registry):
    pg.sql(f"create table {schema}.t (id int primary key)")
    pg.sql(f"create table {schema}.u (id int primary key)")
    topic = f"cdc.{schema}.t"
    kafka.create_topic(topic, 1)
    kafka.create_topic(f"cdc.{schema}.u", 1)
    # an existing subject keeps its level
    registry.registry.register(f"cdc.{schema}.u-value", '"string"')
    registry.registry.set_level(f"cdc.{schema}.u-value", "NONE")
    c = cdc(subscriptions=[ksub("k", [f"{schema}.*"], format="avro")],
            kafka=avro_section(kafka, registry, {"compatibility": "full_transitive"}))
    p = c.start()
    pg.sql(f"insert into {schema}.t values (1); insert into {schema}.u values (1)")
    read_avro(kafka, topic, 1, p, registry)
    read_avro(kafka, f"cdc.{schema}.u", 1, p, registry)
    assert p.terminate() == 0, p.describe()
    levels = registry.registry.subject_level
    assert levels[f"{topic}-value"] == levels[f"{topic}-key"] == "FULL_TRANSITIVE"
    assert levels[f"cdc.{schema}.u-value"] == "NONE" and levels[f"cdc.{schema}.u-key"] == "FULL_TRANSITIVE"


def test_basic_auth_and_tls(pg, schema, cdc, kafka, tmp_path):
    d = tempfile.mkdtemp(dir=tmp_path)
    ca = make_ca(d, "ca")
    cert, key = make_server_cert(d, ca)
    password = "Registry-S3cr3t-6a1f"
    with RegistryDouble(username="cdc", password=password, certfile=cert, keyfile=key) as reg:
        assert reg.url.startswith("https://")
        pg.sql(f"create table {schema}.t (id int primary key)")
        topic = f"cdc.{schema}.t"
        kafka.create_topic(topic, 1)
        # no CA: the registry's certificate is not trusted, said, nothing written
        c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")],
                kafka=avro_section(kafka, reg, {"username": "cdc", "password": password}))
        p = c.start()
        pg.sql(f"insert into {schema}.t values (0)")
        wait_for(lambda: "SSL certificate problem" in p.stderr(), timeout=30,
                 what=f"the TLS failure logged\n{p.describe()}")
        assert p.terminate() == 0, p.describe()
        assert kcat(kafka.bootstrap, topic) == []
        # the password from a file, a wrong one: 401, said, nothing written, the stream held...
        pwfile = os.path.join(d, "registry-password")
        with open(pwfile, "w") as f:
            f.write("wrong\n")
        os.chmod(pwfile, 0o600)
        c = cdc(subscriptions=[ksub("k", [f"{schema}.t"], format="avro")],
                kafka=avro_section(kafka, reg, {"username": "cdc", "password": {"file": pwfile},
                                                "ca_file": ca[0]}))
        p = c.start()
        pg.sql(f"insert into {schema}.t values (1)")
        wait_for(lambda: "HTTP 401" in p.stderr(), timeout=30, what=f"the 401 logged\n{p.describe()}")
        assert kcat(kafka.bootstrap, topic) == []
        # ...until the file holds the right one and a SIGHUP reads it again: the held row, then the
        # next, and the password in no log line or status answer
        with open(pwfile, "w") as f:
            f.write(password + "\n")
        p.signal(signal.SIGHUP)
        pg.sql(f"insert into {schema}.t values (2)")
        ctx = ssl.create_default_context(cafile=ca[0])
        msgs = wait_for(lambda: (lambda m: m if len(m) >= 2 else None)(kcat(kafka.bootstrap, topic)),
                        timeout=30, what=f"two records\n{p.describe()}")
        vals = [decode_avro(m["value"], reg.url, auth=("cdc", password), context=ctx)[0] for m in msgs]
        status = get(c, "/status")[1]
        assert p.terminate() == 0, p.describe()
        assert [v["after"]["id"] for v in vals] == [1, 2]  # a new slot: the first run's row is not in it
        assert password not in p.stderr() and password not in status
        out = subprocess.run([CDC_BIN, "check-config", "-c", c.path], capture_output=True, text=True).stdout
        assert password not in out and f"password: {{file: {pwfile}}}" in out, out


# --- the double itself ---------------------------------------------------------------------------

def test_registry_double_follows_confluents_api(registry):
    """What the tests lean on: ids, versions, compatibility and errors as Confluent's API reference
    says."""
    def call(method, path, body=None):
        req = urllib.request.Request(registry.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())
    rec = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "int"}]}
    added = dict(rec, fields=rec["fields"] + [{"name": "b", "type": ["null", "string"], "default": None}])
    changed = dict(rec, fields=[{"name": "a", "type": "string"}])
    assert call("POST", "/subjects/s-value/versions", {"schema": json.dumps(rec)}) == (200, {"id": 1})
    assert call("POST", "/subjects/s-value/versions", {"schema": json.dumps(rec)}) == (200, {"id": 1})
    assert call("POST", "/subjects/t-value/versions", {"schema": json.dumps(rec)}) == (200, {"id": 1})
    assert call("POST", "/subjects/s-value/versions", {"schema": json.dumps(added)}) == (200, {"id": 2})
    st, body = call("POST", "/subjects/s-value/versions", {"schema": json.dumps(changed)})
    assert st == 409 and body["error_code"] == 40901 and "incompatible" in body["message"]
    st, body = call("POST", "/subjects/s-value/versions", {"schema": "{not json"})
    assert st == 422 and body["error_code"] == 42201
    assert call("GET", "/subjects/s-value/versions") == (200, [1, 2])
    assert call("GET", "/subjects/s-value/versions/latest")[1]["id"] == 2
    assert call("GET", "/subjects/nope/versions")[1]["error_code"] == 40401
    assert call("GET", "/subjects/s-value/versions/9")[1]["error_code"] == 40402
    assert call("GET", "/schemas/ids/9")[1]["error_code"] == 40403
    assert call("GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert call("GET", "/config/s-value")[1]["error_code"] == 40408
    assert call("GET", "/config/s-value?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
    assert call("PUT", "/config/s-value", {"compatibility": "bogus"})[1]["error_code"] == 42203
    assert call("POST", "/compatibility/subjects/s-value/versions/latest?verbose=true",
                {"schema": json.dumps(changed)})[1]["is_compatible"] is False
    assert call("PUT", "/config/s-value", {"compatibility": "NONE"}) == (200, {"compatibility": "NONE"})
    assert call("POST", "/subjects/s-value/versions", {"schema": json.dumps(changed)}) == (200, {"id": 3})
    assert call("POST", "/subjects/s-value", {"schema": json.dumps(added)})[1]["version"] == 2

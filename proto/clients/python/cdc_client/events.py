"""events.py: cdc.v1.Event as a Python object with native values (int, Decimal, datetime, UUID,
parsed JSON...), the same fields as cdc's JSON events, with a schema event's columns (TableSchema)
and a DDL event's command (Ddl); a dead letter's history (DeadLetter) and an offset the server
refused to ack, nack or progress (Refused). The generated message stays at Event.pb."""
import dataclasses
import datetime
import decimal
import json
import uuid
from typing import Any, Dict, List, Optional

from ._proto import pb


def op_name(op: int) -> str:
    """"insert", "update"... as in cdc's JSON: the enum's name without OP_, in lower case; an op
    newer than the compiled schema: its number as text."""
    try:
        return pb.Op.Name(op)[3:].lower()
    except ValueError:
        return str(op)


_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def format_lsn(lsn: int) -> str:
    """An LSN as PostgreSQL writes it: "0/1A2B3C8"."""
    return "%X/%X" % (lsn >> 32, lsn & 0xFFFFFFFF)


def _timestamp(ts):
    tz = datetime.timezone.utc if ts.with_zone else None
    # PostgreSQL's infinities have no datetime: the nearest representable instants stand for them.
    if ts.micros == _INT64_MAX:
        return datetime.datetime.max.replace(tzinfo=tz)
    if ts.micros == _INT64_MIN:
        return datetime.datetime.min.replace(tzinfo=tz)
    d = _EPOCH + datetime.timedelta(microseconds=ts.micros)
    return d.replace(tzinfo=tz)


def _date(days):
    if days == _INT32_MAX:
        return datetime.date.max
    if days == _INT32_MIN:
        return datetime.date.min
    return _EPOCH_DATE + datetime.timedelta(days=days)


def _time(micros):
    s, us = divmod(micros, 1_000_000)
    if s >= 86400:  # 24:00:00, which PostgreSQL allows and datetime.time does not
        return datetime.time.max
    return datetime.time(s // 3600, s // 60 % 60, s % 60, us)


_CONVERT = {
    "null_value": lambda v: None,
    "int_value": lambda v: v.int_value,
    "float_value": lambda v: v.float_value,
    "bool_value": lambda v: v.bool_value,
    "numeric_value": lambda v: decimal.Decimal(v.numeric_value),  # "NaN", "Infinity" included
    "text_value": lambda v: v.text_value,
    "bytes_value": lambda v: v.bytes_value,
    "uuid_value": lambda v: uuid.UUID(bytes=v.uuid_value),
    "date_value": lambda v: _date(v.date_value),
    "time_value": lambda v: _time(v.time_value),
    "timestamp_value": lambda v: _timestamp(v.timestamp_value),
    "json_value": lambda v: json.loads(v.json_value),
    "other_value": lambda v: v.other_value.text,  # PostgreSQL's text form; type_name in Event.pb
    "binary_value": lambda v: v.binary_value,
}


def value(v) -> Any:
    """A cdc.v1.Value as a native Python value (see the README for the mapping). An unchanged
    TOAST value has none: row() leaves such columns out."""
    kind = v.WhichOneof("kind")
    if kind is None or kind == "unchanged_toast":
        raise ValueError("value has no native form: %s" % (kind or "no member set"))
    return _CONVERT[kind](v)


def row(r) -> Dict[str, Any]:
    """A cdc.v1.Row as {column: native value}, unchanged TOAST columns left out."""
    return {c.name: value(c.value) for c in r.columns if c.value.WhichOneof("kind") != "unchanged_toast"}


def _micros(us: int) -> datetime.datetime:
    return _EPOCH.replace(tzinfo=datetime.timezone.utc) + datetime.timedelta(microseconds=us)


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """What a dead letter went through in the subscription before it became one (read with
    dead_letters=True: Event.dead_letter). offset: among the dead letters (the Event's offset);
    original_offset: in the subscription; deliveries: how often it was delivered there; reason:
    why the last delivery failed (a Nack's reason, "ack timeout", "consumer went away"; "" for dead
    letters from before cdc kept it); dead_time: when it was moved (aware, UTC)."""
    offset: int
    original_offset: int
    deliveries: int
    reason: str
    dead_time: datetime.datetime

    @classmethod
    def from_pb(cls, d) -> "DeadLetter":
        return cls(offset=d.offset, original_offset=d.original_offset, deliveries=d.deliveries,
                   reason=d.reason, dead_time=_micros(d.dead_time))


@dataclasses.dataclass(frozen=True)
class Refused:
    """An offset of an Ack, Nack or Progress that had no effect, and why: reason is the name of
    cdc.v1.Refused.Reason ("NOT_DELIVERED", "ALREADY_ACKED", "OTHER_CONSUMER", "NOT_ACTIVE",
    "IN_REFUSED_ACK"; a reason newer than this client: its number as text)."""
    offset: int
    reason: str

    @classmethod
    def from_pb(cls, r) -> "Refused":
        try:
            name = pb.Refused.Reason.Name(r.reason)
        except ValueError:
            name = str(r.reason)
        return cls(offset=r.offset, reason=name)


@dataclasses.dataclass(frozen=True)
class SchemaColumn:
    """One column of a schema event, in the table's order. type: as PostgreSQL's format_type()
    prints it ("numeric(10,2)"); typmod -1 for none; key: in the rows' key; nullable: None when cdc
    does not know (it knows with source.ddl); renamed_from: its name in the subscription's previous
    schema event when a DDL event reported the rename, else None."""
    name: str
    type: str
    type_oid: int
    typmod: int
    key: bool
    nullable: Optional[bool]
    renamed_from: Optional[str]

    @classmethod
    def from_pb(cls, c) -> "SchemaColumn":
        return cls(name=c.name, type=c.type, type_oid=c.type_oid, typmod=c.typmod, key=c.key,
                   nullable=c.nullable if c.HasField("nullable") else None,
                   renamed_from=c.renamed_from or None)


@dataclasses.dataclass(frozen=True)
class TableSchema:
    """A schema event's columns (op "schema"): the rows of its table that follow (until its next
    schema event) have exactly these columns. replica_identity: "default", "nothing", "full",
    "index", or None when not known."""
    columns: List[SchemaColumn]
    replica_identity: Optional[str]

    @classmethod
    def from_pb(cls, s) -> "TableSchema":
        return cls(columns=[SchemaColumn.from_pb(c) for c in s.columns],
                   replica_identity=s.replica_identity or None)

    def column(self, name: str) -> Optional[SchemaColumn]:
        return next((c for c in self.columns if c.name == name), None)


@dataclasses.dataclass(frozen=True)
class DdlColumn:
    """A column of the table after a DDL command, by attnum (which a rename keeps)."""
    attnum: int
    name: str
    type: str
    type_oid: int
    typmod: int
    not_null: bool


@dataclasses.dataclass(frozen=True)
class Ddl:
    """A DDL event's command (op "ddl", source.ddl): event "ddl_command_end" or "sql_drop",
    command_tag ("ALTER TABLE"), object_type ("table", "table column"), object_identity
    ("public.orders.note"), the statement the client sent, the table's columns after it (none
    after a DROP TABLE)."""
    event: str
    command_tag: str
    object_type: str
    object_identity: str
    statement: str
    columns: List[DdlColumn]

    @classmethod
    def from_pb(cls, d) -> "Ddl":
        return cls(event=d.event, command_tag=d.command_tag, object_type=d.object_type,
                   object_identity=d.object_identity, statement=d.statement,
                   columns=[DdlColumn(attnum=c.attnum, name=c.name, type=c.type, type_oid=c.type_oid,
                                      typmod=c.typmod, not_null=c.not_null) for c in d.columns])


def schema_id_text(i: int) -> Optional[str]:
    """A schema id as cdc's JSON and Kafka headers write it: 16 hex digits; None for 0 (none)."""
    return "%016x" % i if i else None


@dataclasses.dataclass(frozen=True)
class Event:
    """One change. key/new/old are dicts of native values (None where the event has no such row);
    unchanged_toast names the columns of new whose TOASTed value did not change and was not sent.
    schema_id: a row's schema event (16 hex digits), and a schema event's own; table_schema: a
    schema event's columns; ddl: a DDL event's command (None otherwise). pb is the cdc.v1.Event as
    received (truncate, message, type OIDs, other_value type names)."""
    subscription: str
    offset: Optional[int]
    tag: Optional[str]
    op: str
    schema: str
    table: str
    lsn: int
    commit_lsn: int
    xid: int
    tx_index: int
    commit_time: datetime.datetime
    key: Optional[Dict[str, Any]]
    new: Optional[Dict[str, Any]]
    old: Optional[Dict[str, Any]]
    unchanged_toast: List[str]
    delivery_count: int
    origin: str
    pb: Any = dataclasses.field(repr=False, compare=False)
    # Which connection delivered it: an ack on a later connection is not sent (cdc redelivers it).
    connection_id: int = dataclasses.field(default=0, repr=False, compare=False)
    # Read from the dead letters: its history in the subscription; else None.
    dead_letter: Optional[DeadLetter] = None
    schema_id: Optional[str] = None
    table_schema: Optional[TableSchema] = None
    ddl: Optional[Ddl] = None

    @classmethod
    def from_pb(cls, e, connection_id=0, dead_letter=None) -> "Event":
        return cls(
            subscription=e.subscription,
            offset=e.offset if e.HasField("offset") else None,
            tag=e.tag if e.HasField("tag") else None,
            op=op_name(e.op),
            schema=e.schema,
            table=e.table,
            lsn=e.lsn,
            commit_lsn=e.commit_lsn,
            xid=e.xid,
            tx_index=e.tx_index,
            commit_time=_micros(e.commit_time),
            key=row(e.key) if e.HasField("key") else None,
            new=row(e.new_row) if e.HasField("new_row") else None,
            old=row(e.old_row) if e.HasField("old_row") else None,
            unchanged_toast=[c.name for c in e.new_row.columns if c.value.WhichOneof("kind") == "unchanged_toast"],
            delivery_count=e.delivery_count,
            origin=e.origin,
            pb=e,
            connection_id=connection_id,
            dead_letter=dead_letter,
            schema_id=schema_id_text(e.schema_id),
            table_schema=TableSchema.from_pb(e.table_schema) if e.HasField("table_schema") else None,
            ddl=Ddl.from_pb(e.ddl) if e.HasField("ddl") else None,
        )

    @property
    def row(self) -> Optional[Dict[str, Any]]:
        """The row the change leaves (new), or for a delete the row it removed (old if sent, else key)."""
        if self.new is not None:
            return self.new
        return self.old if self.old is not None else self.key

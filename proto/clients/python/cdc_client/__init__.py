"""cdc_client: a client of cdc's subscriber socket (proto/cdc/v1/subscriber.proto), built from the
.proto files at import time.

    from cdc_client import Consumer

    with Consumer("/run/cdc/events.sock", "jobs", consumer="worker-1") as c:
        for event in c:                 # reconnects with backoff when cdc restarts
            print(event.op, event.new)  # native values: int, Decimal, datetime, UUID, dict...
            c.ack(event)                # or c.nack(event, delay=30, reason="...")

Consumer is the worker's API; Connection is one raw connection (framing, Subscribe, Ack, Nack,
Progress) for tools and tests; pb holds the generated messages and enums."""
from ._proto import pb
from .connection import (FRAME_MAX, FRAME_SERVER_MAX, Connection, ConnectionClosed, PermissionDenied,
                         ProtocolError, ServerError, encode_frame, subscribe_frame)
from .consumer import Consumer
from .events import (DeadLetter, Ddl, DdlColumn, Event, Refused, SchemaColumn, TableSchema, format_lsn,
                     op_name, row, schema_id_text, value)

__all__ = ["Consumer", "Connection", "Event", "DeadLetter", "Refused", "TableSchema", "SchemaColumn", "Ddl",
           "DdlColumn", "schema_id_text", "ServerError", "PermissionDenied", "ConnectionClosed",
           "ProtocolError", "pb", "row", "value", "op_name", "format_lsn", "encode_frame", "subscribe_frame",
           "FRAME_MAX", "FRAME_SERVER_MAX"]

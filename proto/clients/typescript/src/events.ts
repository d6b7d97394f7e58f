// events.ts: cdc.v1.Event as a plain object with native values, the same fields as cdc's JSON
// events (camelCase), with a schema event's columns (TableSchema) and a DDL event's command (Ddl); a
// dead letter's history (DeadLetter) and an offset the server refused to ack, nack or progress
// (Refused). The decoded protobuf message stays at Event.raw.
import { Op, RefusedReason, big } from "./proto";

/** A column's value: see the README for the mapping from PostgreSQL types. */
export type Value = null | boolean | number | bigint | string | Buffer | Date | unknown;
export type Row = Record<string, Value>;

/** What a dead letter went through in the subscription before it became one (Event.deadLetter,
 * reading with deadLetters: true). */
export interface DeadLetter {
  /** Its offset among the dead letters (the Event's offset). */
  offset: bigint;
  /** Its offset in the subscription. */
  originalOffset: bigint;
  /** How often it was delivered there. */
  deliveries: number;
  /** Why the last delivery failed: the Nack's reason, "ack timeout", "consumer went away"; "" for
   * dead letters from before cdc kept it. */
  reason: string;
  /** When it was moved (milliseconds; deadTimeMicros has the microseconds). */
  deadTime: Date;
  deadTimeMicros: bigint;
}

/** An offset of an Ack, Nack or Progress that had no effect, and why: reason is the name of
 * cdc.v1.Refused.Reason ("NOT_DELIVERED", "ALREADY_ACKED", "OTHER_CONSUMER", "NOT_ACTIVE",
 * "IN_REFUSED_ACK"). */
export interface Refused {
  offset: bigint;
  reason: string;
}

/** One column of a schema event, in the table's order. */
export interface SchemaColumn {
  name: string;
  /** As PostgreSQL's format_type() prints it: "numeric(10,2)", "timestamp with time zone". */
  type: string;
  typeOid: number;
  /** -1 for none. */
  typmod: number;
  /** In the rows' key. */
  key: boolean;
  /** null when cdc does not know (it knows with source.ddl). */
  nullable: boolean | null;
  /** Its name in the subscription's previous schema event when a DDL event reported the rename. */
  renamedFrom: string | null;
}

/** A schema event's columns (op "schema"): the rows of its table that follow, until its next
 * schema event, have exactly these columns. */
export interface TableSchema {
  columns: SchemaColumn[];
  /** "default", "nothing", "full", "index"; null when not known. */
  replicaIdentity: string | null;
}

/** A column of the table after a DDL command, by attnum (which a rename keeps). */
export interface DdlColumn {
  attnum: number;
  name: string;
  type: string;
  typeOid: number;
  typmod: number;
  notNull: boolean;
}

/** A DDL event's command (op "ddl", source.ddl). */
export interface Ddl {
  /** "ddl_command_end" or "sql_drop". */
  event: string;
  /** "ALTER TABLE", "CREATE TABLE", "DROP TABLE", ... */
  commandTag: string;
  /** "table", "table column". */
  objectType: string;
  /** "public.orders", "public.orders.note". */
  objectIdentity: string;
  /** The statement the client sent (its first 16,384 characters). */
  statement: string;
  /** The table's columns after the command (none after a DROP TABLE). */
  columns: DdlColumn[];
}

export interface Event {
  subscription: string;
  /** The subscription's own position; the same on every redelivery. null where the sink has none. */
  offset: bigint | null;
  tag: string | null;
  /** "insert", "update", "delete", "truncate", "message", "read", "schema", "ddl" (an op newer than
   * the schema: its number). */
  op: string;
  schema: string;
  table: string;
  lsn: bigint;
  commitLsn: bigint;
  xid: number;
  txIndex: number;
  commitTime: Date;
  /** Microseconds since the Unix epoch (commitTime has milliseconds only). */
  commitTimeMicros: bigint;
  key: Row | null;
  new: Row | null;
  old: Row | null;
  /** Columns of new whose TOASTed value did not change and was not sent (left out of new). */
  unchangedToast: string[];
  deliveryCount: number;
  origin: string;
  /** The cdc.v1.Event as decoded by protobufjs (truncate, message, type OIDs...). */
  raw: any;
  /** Which connection delivered it: an ack on a later connection is not sent (cdc redelivers it). */
  connectionId: number;
  /** Read from the dead letters: its history in the subscription; else null. */
  deadLetter: DeadLetter | null;
  /** A row's schema event, and a schema event's own id: 16 hex digits, as in cdc's JSON and the
   * Kafka header cdc-schema-id; null where there is none. */
  schemaId: string | null;
  /** A schema event's columns; else null. */
  tableSchema: TableSchema | null;
  /** A DDL event's command; else null. */
  ddl: Ddl | null;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
const INT64_MIN = -(1n << 63n);
const INT64_MAX = (1n << 63n) - 1n;
const DATE_MS_MAX = 8.64e15; // the largest Date: stands for PostgreSQL's infinity

/** "0/1A2B3C8", as PostgreSQL writes an LSN. */
export function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

function int(v: unknown): number | bigint {
  const b = big(v);
  return b >= BigInt(Number.MIN_SAFE_INTEGER) && b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b;
}

function pad(n: number, w = 2): string {
  return String(n).padStart(w, "0");
}

function uuid(b: Uint8Array): string {
  const h = Buffer.from(b).toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function date(days: number): string {
  if (days === INT32_MAX) return "infinity";
  if (days === INT32_MIN) return "-infinity";
  return new Date(days * 86400000).toISOString().slice(0, 10);
}

function time(micros: unknown): string {
  const us = Number(big(micros));
  const s = Math.floor(us / 1e6);
  const frac = us % 1e6;
  return `${pad(Math.floor(s / 3600))}:${pad(Math.floor(s / 60) % 60)}:${pad(s % 60)}` + (frac ? "." + pad(frac, 6).replace(/0+$/, "") : "");
}

function timestamp(ts: { micros: unknown }): Date {
  const us = big(ts.micros);
  if (us === INT64_MAX) return new Date(DATE_MS_MAX);
  if (us === INT64_MIN) return new Date(-DATE_MS_MAX);
  // Floor division: a Date has milliseconds (the micros stay in Event.raw).
  const ms = us >= 0n ? us / 1000n : -((-us + 999n) / 1000n);
  return new Date(Number(ms));
}

const CONVERT: Record<string, (v: any) => Value> = {
  nullValue: () => null,
  intValue: (v) => int(v.intValue),
  floatValue: (v) => v.floatValue,
  boolValue: (v) => v.boolValue,
  numericValue: (v) => v.numericValue, // exact decimal text: "120.50", "NaN", "Infinity"
  textValue: (v) => v.textValue,
  bytesValue: (v) => Buffer.from(v.bytesValue),
  uuidValue: (v) => uuid(v.uuidValue),
  dateValue: (v) => date(v.dateValue),
  timeValue: (v) => time(v.timeValue),
  timestampValue: (v) => timestamp(v.timestampValue),
  jsonValue: (v) => JSON.parse(v.jsonValue),
  otherValue: (v) => v.otherValue.text, // PostgreSQL's text form; typeName in Event.raw
  binaryValue: (v) => Buffer.from(v.binaryValue),
};

/** A cdc.v1.Value (as decoded) as a native value. Unchanged TOAST values have none. */
export function value(v: any): Value {
  const kind: string | undefined = v?.kind;
  const f = kind ? CONVERT[kind] : undefined;
  if (!f) throw new Error(`value has no native form: ${kind ?? "no member set"}`);
  return f(v);
}

/** A cdc.v1.Row (as decoded) as {column: value}, unchanged TOAST columns left out. */
export function row(r: any): Row {
  const out: Row = {};
  for (const c of r.columns ?? []) {
    if (c.value?.kind !== "unchangedToast") out[c.name] = value(c.value);
  }
  return out;
}

export function opName(op: number): string {
  const name = Op.valuesById[op];
  return name ? name.slice(3).toLowerCase() : String(op);
}

/** A decoded cdc.v1.DeadLetter as a DeadLetter. */
export function deadLetterFromMessage(d: any): DeadLetter {
  const micros = big(d.deadTime);
  return {
    offset: big(d.offset),
    originalOffset: big(d.originalOffset),
    deliveries: d.deliveries,
    reason: d.reason,
    deadTime: timestamp({ micros }),
    deadTimeMicros: micros,
  };
}

/** A decoded cdc.v1.Refused as a Refused. */
export function refusedFromMessage(r: any): Refused {
  return { offset: big(r.offset), reason: RefusedReason.valuesById[r.reason] ?? String(r.reason) };
}

/** A schema id as cdc's JSON writes it (16 hex digits); null for 0 (none). */
export function schemaIdText(id: unknown): string | null {
  const b = BigInt.asUintN(64, big(id));
  return b === 0n ? null : b.toString(16).padStart(16, "0");
}

function tableSchema(s: any): TableSchema {
  return {
    columns: (s.columns ?? []).map((c: any) => ({
      name: c.name,
      type: c.type,
      typeOid: c.typeOid,
      typmod: c.typmod,
      key: c.key,
      nullable: c.nullablePresent === "nullable" ? c.nullable : null,
      renamedFrom: c.renamedFrom || null,
    })),
    replicaIdentity: s.replicaIdentity || null,
  };
}

function ddl(d: any): Ddl {
  return {
    event: d.event,
    commandTag: d.commandTag,
    objectType: d.objectType,
    objectIdentity: d.objectIdentity,
    statement: d.statement,
    columns: (d.columns ?? []).map((c: any) => ({
      attnum: c.attnum,
      name: c.name,
      type: c.type,
      typeOid: c.typeOid,
      typmod: c.typmod,
      notNull: c.notNull,
    })),
  };
}

/** A decoded cdc.v1.Event as an Event. */
export function fromMessage(e: any, connectionId = 0, deadLetter: DeadLetter | null = null): Event {
  const micros = big(e.commitTime);
  return {
    subscription: e.subscription,
    offset: e.offsetPresent === "offset" ? big(e.offset) : null,
    tag: e.tagPresent === "tag" ? e.tag : null,
    op: opName(e.op),
    schema: e.schema,
    table: e.table,
    lsn: big(e.lsn),
    commitLsn: big(e.commitLsn),
    xid: e.xid,
    txIndex: e.txIndex,
    commitTime: timestamp({ micros }),
    commitTimeMicros: micros,
    key: e.key ? row(e.key) : null,
    new: e.newRow ? row(e.newRow) : null,
    old: e.oldRow ? row(e.oldRow) : null,
    unchangedToast: (e.newRow?.columns ?? []).filter((c: any) => c.value?.kind === "unchangedToast").map((c: any) => c.name),
    deliveryCount: e.deliveryCount,
    origin: e.origin,
    raw: e,
    connectionId,
    deadLetter,
    schemaId: schemaIdText(e.schemaId ?? 0),
    tableSchema: e.tableSchema ? tableSchema(e.tableSchema) : null,
    ddl: e.ddl ? ddl(e.ddl) : null,
  };
}

/** The row the change leaves (new), or for a delete the row it removed (old if sent, else key). */
export function rowOf(e: Event): Row | null {
  return e.new ?? e.old ?? e.key;
}

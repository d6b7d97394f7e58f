// proto.ts: cdc's .proto files loaded with protobufjs at startup (nothing generated is checked in,
// so the client cannot drift from the schema): the package's own copy, made from the repository's
// proto/ when it is built or packed (scripts/copy-proto.js). $CDC_PROTO_PATH names another directory
// holding cdc/v1/*.proto.
import * as fs from "node:fs";
import * as path from "node:path";
import * as protobuf from "protobufjs";

export const PROTO_FILES = ["cdc/v1/event.proto", "cdc/v1/subscriber.proto"];

export function protoDir(): string {
  // dist/src/proto.js: two levels up is the package, and its proto/.
  const dir = path.resolve(process.env.CDC_PROTO_PATH || path.join(__dirname, "..", "..", "proto"));
  if (!fs.existsSync(path.join(dir, PROTO_FILES[1]))) {
    throw new Error(`@cdc/client: ${PROTO_FILES[1]} not found under ${dir} (build the package with npm run build, or set CDC_PROTO_PATH to the directory holding cdc/v1/*.proto)`);
  }
  return dir;
}

function load(): protobuf.Root {
  const dir = protoDir();
  const root = new protobuf.Root();
  // Imports ("cdc/v1/event.proto") are relative to proto/, as with protoc -Iproto.
  root.resolvePath = (_origin, target) => (path.isAbsolute(target) ? target : path.join(dir, target));
  root.loadSync(PROTO_FILES, { keepCase: false });
  root.resolveAll();
  return root;
}

export const root = load();
export const ClientFrame = root.lookupType("cdc.v1.ClientFrame");
export const ServerFrame = root.lookupType("cdc.v1.ServerFrame");
export const Op = root.lookupEnum("cdc.v1.Op");
export const StartFrom = root.lookupEnum("cdc.v1.StartFrom");
export const ConsumerMode = root.lookupEnum("cdc.v1.ConsumerMode");
export const ErrorCode = root.lookupEnum("cdc.v1.Error.Code");
export const RefusedReason = root.lookupEnum("cdc.v1.Refused.Reason");

/** A uint64/int64 as decoded (a number or a Long) as a bigint. */
export function big(v: unknown): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number") return BigInt(v);
  if (v === null || v === undefined) return 0n;
  return BigInt(String(v)); // Long.toString() is exact
}

/** A bigint as protobufjs encodes a 64-bit field exactly (a decimal string). */
export function long(v: bigint | number): string {
  return BigInt(v).toString();
}

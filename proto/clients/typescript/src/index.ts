// @cdc/client: a client of cdc's subscriber socket (proto/cdc/v1/subscriber.proto), loading the
// .proto files with protobufjs at startup. Consumer is the worker's API; Connection one raw
// connection (framing, Subscribe, Ack, Nack, Progress) for tools and tests.
export { Consumer, ConsumerOptions, Item, NackOptions } from "./consumer";
export { Connection, SubscribeOptions, Start, encodeFrame, subscribeFrame, FRAME_MAX, FRAME_SERVER_MAX } from "./connection";
export {
  DeadLetter,
  Ddl,
  DdlColumn,
  Event,
  Refused,
  Row,
  SchemaColumn,
  TableSchema,
  Value,
  formatLsn,
  fromMessage,
  opName,
  row,
  rowOf,
  schemaIdText,
  value,
} from "./events";
export { ConnectionClosed, PermissionDenied, ProtocolError, ServerError, TimeoutError } from "./errors";
export { root, ClientFrame, ServerFrame, protoDir } from "./proto";

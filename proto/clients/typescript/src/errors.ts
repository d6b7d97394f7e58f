// errors.ts: the errors the client raises.
import { ErrorCode } from "./proto";

/** An Error frame from cdc: code is the enum's name ("UNKNOWN_SUBSCRIPTION"...), codeValue its
 * number. The server closes the connection after it. */
export class ServerError extends Error {
  readonly code: string;
  readonly codeValue: number;
  readonly serverMessage: string;
  constructor(codeValue: number, message: string) {
    const code = ErrorCode.valuesById[codeValue] ?? String(codeValue);
    super(`${code}: ${message}`);
    this.name = "ServerError";
    this.code = code;
    this.codeValue = codeValue;
    this.serverMessage = message;
  }
}

/** PERMISSION_DENIED: the subscription's allow list (allow: uids, gids in cdc's configuration)
 * holds neither this process's uid nor its groups; the message names the uid and the subscription.
 * Connecting again cannot help: run the consumer as a user the list names, or have it added. */
export class PermissionDenied extends ServerError {
  constructor(codeValue: number, message: string) {
    super(codeValue, message);
    this.name = "PermissionDenied";
  }
}

/** The error an Error frame raises: PermissionDenied, or ServerError for the other codes. */
export function serverError(codeValue: number, message: string): ServerError {
  return codeValue === ErrorCode.values.PERMISSION_DENIED
    ? new PermissionDenied(codeValue, message)
    : new ServerError(codeValue, message);
}

/** The server broke the protocol (bad framing, an unexpected frame). */
export class ProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

/** An answer (Acked) did not come in time. */
export class TimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TimeoutError";
  }
}

/** The connection closed (or could not be made, or stayed silent) where the client needed it. */
export class ConnectionClosed extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConnectionClosed";
  }
}

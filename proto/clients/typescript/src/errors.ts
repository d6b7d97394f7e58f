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

'use strict';
// Errors of the Quiver client, one class per code the server puts in a Flight error.
//
// The server sends each failure as a gRPC status (the code's) whose trailers carry:
//   grpc-status-details-bin     a google.rpc.Status whose google.rpc.ErrorInfo names the code
//                               (reason NOT_FOUND, domain quiver) and its details (metadata)
//   x-arrow-status-message-bin  the server's one-line message, without what Arrow adds
// `fromGrpcError` picks the class by that code, or by the gRPC status when there is none.

const { status: Status } = require('@grpc/grpc-js');

class QuiverError extends Error {
  /**
   * @param {string} message the server's one-line message
   * @param {{code?: string|null, details?: object, grpcCode?: number|null, cause?: unknown}} [options]
   */
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    const ownCode = new.target.code;
    /** the machine-readable code (`not_found`, ...), or null when nothing said one */
    this.code = options.code ?? ownCode ?? null;
    /** the code and details the server sent ({} when none) */
    this.details = { ...(options.details || {}) };
    /** the gRPC status code of the failed call, when there was one */
    this.grpcCode = options.grpcCode ?? null;
  }
}
QuiverError.code = null;

function define(name, code, doc) {
  const cls = { [name]: class extends QuiverError {} }[name];
  cls.code = code;
  cls.description = doc;
  return cls;
}

const NotFound = define('NotFound', 'not_found', 'the dataset, version, tag, fragment or action does not exist');
const InvalidArgument = define('InvalidArgument', 'invalid_argument', 'a malformed request');
const AlreadyExists = define('AlreadyExists', 'already_exists', 'the dataset or tag to create exists');
const FailedPrecondition = define('FailedPrecondition', 'failed_precondition', "the dataset's state refuses the request");
const Unauthenticated = define('Unauthenticated', 'unauthenticated', 'a missing, malformed, forged or expired credential');
const PermissionDenied = define('PermissionDenied', 'permission_denied', 'a right the user lacks');
const Unavailable = define('Unavailable', 'unavailable', 'the server cannot be reached or is draining');
const Unimplemented = define('Unimplemented', 'unimplemented', 'an action, RPC, type or feature the server does not have');
const Cancelled = define('Cancelled', 'cancelled', 'the call was cancelled');
const DataCorrupt = define('DataCorrupt', 'data_corrupt', 'a file of the dataset is missing, truncated or malformed');
const Internal = define('Internal', 'internal', 'an unexpected server error (the message references the server log)');
const DeadlineExceeded = define('DeadlineExceeded', 'deadline_exceeded', 'the call ran past its timeout');

/** A commit lost to a concurrent one: `retryable` and the `version` it lost to. */
class CommitConflict extends QuiverError {
  constructor(message, options = {}) {
    super(message, options);
    const d = this.details;
    /** whether committing again (on a fresh read version) can succeed */
    this.retryable = d.retryable === true;
    /** the version the commit lost to, when the server says */
    this.version = Number.isInteger(d.version) ? d.version : null;
  }
}
CommitConflict.code = 'commit_conflict';

const CLASSES = [
  NotFound, InvalidArgument, AlreadyExists, CommitConflict, FailedPrecondition, Unauthenticated,
  PermissionDenied, Unavailable, Unimplemented, Cancelled, DataCorrupt, Internal, DeadlineExceeded,
];
const BY_CODE = new Map(CLASSES.map((cls) => [cls.code, cls]));

// When the server named no (known) code: the class the gRPC status stands for.
const BY_STATUS = new Map([
  [Status.NOT_FOUND, NotFound],
  [Status.INVALID_ARGUMENT, InvalidArgument],
  [Status.ALREADY_EXISTS, AlreadyExists],
  [Status.FAILED_PRECONDITION, FailedPrecondition],
  [Status.UNAUTHENTICATED, Unauthenticated],
  [Status.PERMISSION_DENIED, PermissionDenied],
  [Status.UNAVAILABLE, Unavailable],
  [Status.UNIMPLEMENTED, Unimplemented],
  [Status.CANCELLED, Cancelled],
  [Status.DEADLINE_EXCEEDED, DeadlineExceeded],
  [Status.INTERNAL, Internal],
]);

const CODE_IN_TEXT = /Python exception: (\{[^{}\n]*\})/;

function metadataText(metadata, key) {
  if (!metadata || typeof metadata.get !== 'function') return null;
  const values = metadata.get(key);
  if (!values || values.length === 0) return null;
  const v = values[0];
  return Buffer.isBuffer(v) ? v.toString('utf8') : String(v);
}

function parseObject(text) {
  if (!text) return null;
  try {
    const value = JSON.parse(text);
    return value && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch {
    return null;
  }
}

// -- google.rpc.Status, decoded by hand (varint and length-delimited fields are all it uses)

const ERROR_INFO_TYPE = 'type.googleapis.com/google.rpc.ErrorInfo';

/** The [field number, value] pairs of a protobuf message (numbers for varints, Buffers else). */
function protoFields(buf) {
  const out = [];
  let i = 0;
  const varint = () => {
    let value = 0;
    let scale = 1;
    for (;;) {
      if (i >= buf.length || scale > 2 ** 56) throw new Error('truncated varint');
      const byte = buf[i++];
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (!(byte & 0x80)) return value;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const number = Math.floor(key / 8);
    const kind = key % 8;
    if (kind === 0) out.push([number, varint()]);
    else if (kind === 2) {
      const length = varint();
      if (i + length > buf.length) throw new Error('truncated field');
      out.push([number, buf.subarray(i, i + length)]);
      i += length;
    } else if (kind === 1) i += 8;
    else if (kind === 5) i += 4;
    else throw new Error(`unsupported wire type ${kind}`);
  }
  if (i !== buf.length) throw new Error('truncated message');
  return out;
}

function metadataValue(text) {
  try {
    const value = JSON.parse(text);
    return typeof value === 'string' ? text : value;
  } catch {
    return text;
  }
}

/** The code and details of a google.rpc.Status with Quiver's ErrorInfo (null when none). */
function statusDetails(buf) {
  try {
    for (const [number, value] of protoFields(buf)) {
      if (number !== 3 || !Buffer.isBuffer(value)) continue;
      const any = new Map(protoFields(value));
      if (String(any.get(1)) !== ERROR_INFO_TYPE || !Buffer.isBuffer(any.get(2))) continue;
      let reason = '';
      let domain = '';
      const fields = {};
      for (const [n, v] of protoFields(any.get(2))) {
        if (n === 1) reason = v.toString('utf8');
        else if (n === 2) domain = v.toString('utf8');
        else if (n === 3 && Buffer.isBuffer(v)) {
          const entry = new Map(protoFields(v));
          fields[String(entry.get(1) || '')] = metadataValue(String(entry.get(2) || ''));
        }
      }
      if (domain === 'quiver' && reason) return { code: reason.toLowerCase(), ...fields };
    }
  } catch {
    return null;
  }
  return null;
}

/** The code and details of a failed call ({} when it carried none). */
function errorDetails(err) {
  const metadata = err && err.metadata;
  const raw = metadata && typeof metadata.get === 'function' ? metadata.get('grpc-status-details-bin') : [];
  if (raw && raw.length > 0) {
    const buf = Buffer.isBuffer(raw[0]) ? raw[0] : Buffer.from(String(raw[0]));
    const info = buf[0] === 0x7b ? parseObject(buf.toString('utf8')) : statusDetails(buf);
    if (info) return info;
  }
  // a server that cannot set statuses itself names GetSchema's code only in text
  for (const text of [metadataText(metadata, 'x-arrow-status-detail-bin'), err && err.details]) {
    const found = text && CODE_IN_TEXT.exec(text);
    const value = found && parseObject(found[1]);
    if (value && typeof value.code === 'string') return value;
  }
  return {};
}

const SUFFIXES = ['. Detail: ', '. gRPC client debug context: ', '. Client context: '];

/** The server's own one-line message out of a failed call. */
function serverMessage(err) {
  let text = metadataText(err && err.metadata, 'x-arrow-status-message-bin');
  if (!text) {
    text = String((err && (typeof err.details === 'string' ? err.details : err.message)) || '');
    for (const suffix of SUFFIXES) {
      const i = text.indexOf(suffix);
      if (i !== -1) text = text.slice(0, i);
    }
  }
  const line = text.trim().split('\n')[0].trim();
  return line || 'the server reported an error without a message';
}

/**
 * The QuiverError a failed gRPC call stands for: the class of the `code` in the server's
 * details (grpc-status-details-bin), else of the gRPC status; the message and details kept.
 */
function fromGrpcError(err) {
  if (err instanceof QuiverError) return err;
  const details = errorDetails(err);
  const grpcCode = typeof (err && err.code) === 'number' ? err.code : null;
  const message = serverMessage(err);
  let cls = typeof details.code === 'string' ? BY_CODE.get(details.code) : undefined;
  if (cls === undefined && grpcCode !== null) cls = BY_STATUS.get(grpcCode);
  if (cls !== undefined) return new cls(message, { details, grpcCode, cause: err });
  const code = typeof details.code === 'string' ? details.code : null;
  return new QuiverError(message, { code, details, grpcCode, cause: err });
}

module.exports = {
  QuiverError,
  NotFound,
  InvalidArgument,
  AlreadyExists,
  CommitConflict,
  FailedPrecondition,
  Unauthenticated,
  PermissionDenied,
  Unavailable,
  Unimplemented,
  Cancelled,
  DataCorrupt,
  Internal,
  DeadlineExceeded,
  ERROR_CLASSES: CLASSES,
  fromGrpcError,
  errorDetails,
  serverMessage,
};

'use strict';
// Descriptor and action bodies, the same JSON the Python client (clients/flight.py) sends.

const { InvalidArgument } = require('./errors');

const PUT_MODES = ['append', 'create', 'overwrite'];
const COMMIT_OPERATIONS = ['append', 'overwrite', 'create'];

function isInteger(v) {
  return (typeof v === 'number' && Number.isSafeInteger(v)) || typeof v === 'bigint';
}

function integer(name, v) {
  if (!isInteger(v)) throw new TypeError(`${name} must be an integer, not ${typeof v}`);
  return typeof v === 'bigint' ? Number(v) : v;
}

function checkDataset(dataset) {
  if (typeof dataset !== 'string' || dataset === '') {
    throw new TypeError('dataset must be a non-empty string');
  }
}

/** An `as_of` value as the server takes it: ISO 8601 text (a Date becomes UTC `...Z`). */
function asOfText(asOf) {
  if (typeof asOf === 'string') return asOf;
  if (asOf instanceof Date) {
    if (Number.isNaN(asOf.getTime())) throw new TypeError('asOf is an invalid Date');
    return asOf.toISOString();
  }
  throw new TypeError(`asOf must be a string or a Date, not ${typeof asOf}`);
}

/**
 * The JSON object of a read CMD descriptor; only the options that are set appear.
 * @param {string} dataset
 * @param {object} [options] columns, filter, version, tag, asOf, limit, withRowId,
 *   maxRowsPerEndpoint, appendedSince
 */
const READ_OPTIONS = new Set([
  'columns', 'filter', 'version', 'tag', 'asOf', 'limit', 'withRowId', 'maxRowsPerEndpoint', 'appendedSince',
]);

function readCommand(dataset, options = {}) {
  checkDataset(dataset);
  const unknown = Object.keys(options).filter((k) => !READ_OPTIONS.has(k) && options[k] !== undefined);
  if (unknown.length) throw new TypeError(`unknown read option(s): ${unknown.join(', ')}`);
  const { columns, filter, version, tag, asOf, limit, withRowId, maxRowsPerEndpoint, appendedSince } = options;
  const pins = [['version', version], ['tag', tag], ['asOf', asOf]].filter(([, v]) => v != null);
  if (pins.length > 1) {
    throw new InvalidArgument(`give at most one of version, tag and asOf (got ${pins.map(([n]) => n).join(', ')})`);
  }
  const cmd = { dataset };
  if (version != null) cmd.version = integer('version', version);
  if (tag != null) cmd.tag = String(tag);
  if (asOf != null) cmd.as_of = asOfText(asOf);
  if (columns != null) {
    if (typeof columns === 'string' || typeof columns[Symbol.iterator] !== 'function') {
      throw new TypeError('columns must be an array of column names');
    }
    cmd.columns = Array.from(columns, String);
  }
  if (filter != null) cmd.filter = String(filter);
  if (limit != null) cmd.limit = integer('limit', limit);
  if (withRowId) cmd.with_row_id = true;
  if (maxRowsPerEndpoint != null) cmd.max_rows_per_endpoint = integer('maxRowsPerEndpoint', maxRowsPerEndpoint);
  if (appendedSince != null) cmd.appended_since = integer('appendedSince', appendedSince);
  return cmd;
}

/** The JSON object of a DoPut CMD descriptor. */
function putCommand(dataset, { mode = 'append', commit = true, job } = {}) {
  checkDataset(dataset);
  if (!PUT_MODES.includes(mode)) {
    throw new InvalidArgument(`mode must be one of ${PUT_MODES.join(', ')}, not ${JSON.stringify(mode)}`);
  }
  const cmd = { dataset, mode };
  if (!commit) cmd.commit = false;
  if (job != null) cmd.job = String(job);
  return cmd;
}

/** The body of the `commit` action. */
function commitBody(dataset, fragments, { operation = 'append', readVersion, idempotencyKey, job } = {}) {
  checkDataset(dataset);
  if (!COMMIT_OPERATIONS.includes(operation)) {
    throw new InvalidArgument(`operation must be one of ${COMMIT_OPERATIONS.join(', ')}, not ${JSON.stringify(operation)}`);
  }
  const body = { dataset, operation, fragments: Array.from(fragments, String) };
  if (readVersion != null) body.read_version = integer('readVersion', readVersion);
  if (idempotencyKey != null) body.idempotency_key = String(idempotencyKey);
  if (job != null) body.job = String(job);
  return body;
}

/** UTF-8 JSON bytes, compact as the Python client writes them. */
function jsonBytes(value) {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

module.exports = { PUT_MODES, COMMIT_OPERATIONS, readCommand, putCommand, commitBody, asOfText, jsonBytes };

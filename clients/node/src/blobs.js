'use strict';
// Blob columns from the Node.js client as ranged reads: `client.takeBlobs` locates the
// blobs of some rows (the `take_blobs` action: row addresses and sizes, pinned to the
// version read) and each `RemoteBlob.read(offset, length)` fetches one byte range of one
// blob (the `read_blob` action), so a client reads only the bytes it needs.

const { readCommand } = require('./commands');

// What one read_blob answers at most (the server's limit, wire.requests.BLOB_RANGE_BYTES);
// longer reads take several.
const MAX_RANGE_BYTES = 64 * 1024 * 1024;
const SELECTORS = ['indices', 'ids', 'addresses'];

/** One blob on the server: its `size`, `rowAddress`, and ranged `read`s. */
class RemoteBlob {
  constructor(client, body, size) {
    this._client = client;
    this._body = body; // dataset, branch?, version, column, address
    this.size = size;
    this.rowAddress = body.address;
  }

  /** `length` bytes at `offset` (default: to the end) as a Buffer. */
  async read(offset = 0, length = this.size - offset) {
    if (!(Number.isInteger(offset) && Number.isInteger(length) && offset >= 0 && length >= 0
      && offset + length <= this.size)) {
      throw new RangeError(`range ${offset}+${length} is outside the blob of ${this.size} bytes`);
    }
    const parts = [];
    for (let start = offset; start < offset + length; start += MAX_RANGE_BYTES) {
      const n = Math.min(MAX_RANGE_BYTES, offset + length - start);
      const answers = await this._client._doAction('read_blob', { ...this._body, offset: start, length: n });
      const header = JSON.parse(Buffer.from(answers[0].body).toString('utf8'));
      const data = Buffer.concat(answers.slice(1).map((a) => Buffer.from(a.body)));
      if (data.length !== n || header.length !== n) {
        throw new Error(`read_blob answered ${data.length} of ${n} bytes`);
      }
      parts.push(data);
    }
    return Buffer.concat(parts);
  }

  /** The whole blob as a Buffer. */
  async readAll() {
    return this.read(0, this.size);
  }
}

/** [{rowAddress, blob: RemoteBlob | null}] of the rows the options select (one take_blobs). */
async function locate(client, dataset, column, options) {
  const { version, tag, asOf, ...selection } = options;
  const unknown = Object.keys(selection).filter((k) => !SELECTORS.includes(k));
  if (unknown.length) throw new TypeError(`unknown blob option(s): ${unknown.join(', ')}`);
  const body = { ...readCommand(dataset, { version, tag, asOf }), column: String(column) };
  for (const key of SELECTORS) {
    if (selection[key] != null) body[key] = Array.from(selection[key], Number);
  }
  const found = await client.action('take_blobs', body);
  const pinned = client._scoped({ dataset, version: found.version, column: String(column) });
  return found.blobs.map((b) => ({
    rowAddress: b.row_address,
    blob: b.size === null ? null : new RemoteBlob(client, { ...pinned, address: b.row_address }, b.size),
  }));
}

/**
 * The blobs of `column` for the rows one of `indices`, `ids` or `addresses` selects (with
 * `version` / `tag` / `asOf`): a RemoteBlob per row in the order given, null for a null blob.
 */
async function takeBlobs(client, dataset, column, options = {}) {
  return (await locate(client, dataset, column, options)).map((x) => x.blob);
}

/** [rowAddress, Buffer | null] of the selected rows' blobs, read whole (options as takeBlobs'). */
async function readBlobs(client, dataset, column, options = {}) {
  const located = await locate(client, dataset, column, options);
  return Promise.all(located.map(async ({ rowAddress, blob }) => [rowAddress, blob && await blob.readAll()]));
}

module.exports = { RemoteBlob, takeBlobs, readBlobs };

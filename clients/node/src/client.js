'use strict';
// A client of the Quiver Flight server over plain gRPC (@grpc/grpc-js), decoding Arrow IPC
// with Arrow JS. It speaks the contract of DESIGN.md §3 the way clients/flight.py does:
//
// - reads ask for one FlightInfo (one endpoint per fragment, every ticket pinned to the same
//   version) and fetch its endpoints with bounded concurrency, keeping their order; each
//   endpoint's locations are tried in turn while they answer UNAVAILABLE;
// - writes are one DoPut with a CMD descriptor {"dataset", "mode"} (the server commits), or
//   staged puts ({"commit": false}) settled by the `commit` / `abort` actions; a merge is
//   one DoPut with {"dataset", "merge": {...}} (the server merges and commits), a backfill
//   one DoPut with {"dataset", "backfill": "add_columns" | "update_columns"};
// - username and password are exchanged once per server for a bearer token (a Handshake
//   carrying `authorization: Basic ...`, answered with `authorization: Bearer ...`), sent with
//   every call and renewed once when a call is refused as unauthenticated;
// - every failure is a QuiverError subclass chosen by the code in the error's details.

const crypto = require('crypto');
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const { RecordBatch, RecordBatchReader, RecordBatchStreamWriter, Table, makeData, Struct } = require('apache-arrow');

const blobs = require('./blobs');
const errors = require('./errors');
const ipc = require('./ipc');
const {
  BRANCHED_ACTIONS, readCommand, splitSearchOptions, putCommand, commitBody, updateBody, mergeCommand,
  backfillCommand, jsonBytes,
} = require('./commands');
const { flightServiceClient } = require('./proto');

/** A write's idempotency key: the caller's, or a fresh one. */
function keyOf(key) {
  if (key == null) return crypto.randomUUID();
  if (typeof key !== 'string' || key === '' || key.length > 256) {
    throw new TypeError('idempotencyKey must be a string of 1 to 256 characters');
  }
  return key;
}

const { QuiverError, Unauthenticated, Unavailable, InvalidArgument } = errors;

const REUSE_CONNECTION = 'arrow-flight-reuse-connection://?';
const BATCH_ROWS = 64 * 1024; // rows per uploaded record batch, as the Python client
const DEFAULT_CONCURRENCY = 8;
const CHANNEL_OPTIONS = {
  // the server sends batches of up to ~8 MiB; gRPC's default limit is 4 MiB
  'grpc.max_receive_message_length': -1,
  'grpc.max_send_message_length': -1,
};

// ---------------------------------------------------------------------------------------------
// Helpers

function normalizeUri(uri) {
  if (typeof uri !== 'string' || uri === '') throw new TypeError('uri must be a non-empty string');
  return uri.includes('://') ? uri : `grpc://${uri}`;
}

/** The gRPC target and transport of a Flight location URI. */
function parseUri(uri) {
  const found = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]+)\/?$/.exec(uri);
  if (!found) throw new InvalidArgument(`not a Flight location: ${JSON.stringify(uri)}`);
  const scheme = found[1].toLowerCase();
  if (scheme === 'grpc' || scheme === 'grpc+tcp') return { target: found[2], tls: false };
  if (scheme === 'grpc+tls') return { target: found[2], tls: true };
  throw new InvalidArgument(`unsupported Flight location scheme ${scheme}:// (grpc, grpc+tcp, grpc+tls)`);
}

/** PEM bytes from a Buffer, PEM text, or the path of a PEM file. */
function pem(value) {
  if (value == null) return null;
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return Buffer.from(value);
  if (typeof value === 'string' && value.includes('-----BEGIN')) return Buffer.from(value, 'ascii');
  return fs.readFileSync(value);
}

function parseJson(raw, what) {
  if (raw == null || raw.length === 0) return null;
  try {
    return JSON.parse(Buffer.from(raw).toString('utf8'));
  } catch {
    throw new QuiverError(`the server answered ${what} with something other than JSON`);
  }
}

function parseJsonOrBytes(raw) {
  if (raw == null || raw.length === 0) return null;
  try {
    return JSON.parse(Buffer.from(raw).toString('utf8'));
  } catch {
    return Buffer.from(raw);
  }
}

function timestamp(ts) {
  if (!ts) return null;
  const ms = Number(ts.seconds) * 1000 + Math.floor((ts.nanos || 0) / 1e6);
  return ms === 0 ? null : new Date(ms);
}

function datasetName(descriptor) {
  if (!descriptor) return null;
  if (descriptor.type === 'PATH') return descriptor.path.length ? descriptor.path.join('/') : null;
  const cmd = parseJsonOrBytes(descriptor.cmd);
  return cmd && typeof cmd.dataset === 'string' ? cmd.dataset : null;
}

function unary(stub, method, request, metadata, options) {
  return new Promise((resolve, reject) => {
    stub[method](request, metadata, options, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

async function collect(call) {
  const out = [];
  for await (const message of call) out.push(message);
  return out;
}

/**
 * Run `fn(item, index, state)` over `items` with at most `limit` running at once; results in
 * the items' order. The first failure stops new starts (`state.stopped` turns true for the
 * running ones) and is thrown once every started call has settled.
 */
async function mapBounded(items, limit, fn) {
  const results = new Array(items.length);
  const state = { stopped: false };
  let next = 0;
  let failure = null;
  async function worker() {
    while (!state.stopped && next < items.length) {
      const i = next++;
      try {
        results[i] = await fn(items[i], i, state);
      } catch (err) {
        if (!state.stopped) {
          state.stopped = true;
          failure = err;
        }
      }
    }
  }
  const workers = Math.max(1, Math.min(limit, items.length));
  await Promise.all(Array.from({ length: workers }, worker));
  if (failure !== null) throw failure;
  return results;
}

/**
 * `batch` labelled with exactly `schema`, the FlightInfo's (Arrow JS tables need one schema;
 * streams may differ from it in metadata or dictionary ids, nothing else).
 */
function conform(batch, schema) {
  if (batch.schema === schema) return batch;
  const mine = schema.fields;
  const theirs = batch.schema.fields;
  const same =
    mine.length === theirs.length &&
    mine.every((f, i) => f.name === theirs[i].name && String(f.type) === String(theirs[i].type));
  if (!same) {
    throw new QuiverError(
      `the server sent batches of schema ${batch.schema} for a read of schema ${schema}`,
    );
  }
  const data = makeData({
    type: new Struct(mine),
    length: batch.numRows,
    nullCount: 0,
    children: batch.data.children,
  });
  return new RecordBatch(schema, data);
}

/** Arrow objects of another copy of Arrow JS (its ES module build) cannot be written. */
function checkArrowObject(value) {
  if (value instanceof Table || value instanceof RecordBatch) return;
  if (value && value.schema && Array.isArray(value.schema.fields)) {
    throw new TypeError(
      'this Arrow object comes from another copy of apache-arrow (an ES module import, or ' +
        "another version): build tables with the one the client uses, require('quiver-client').arrow",
    );
  }
}

/** Record batches of at most BATCH_ROWS rows out of what `write` accepts. */
async function* uploadBatches(data) {
  const slices = function* (batch) {
    if (batch.numRows <= BATCH_ROWS) {
      yield batch;
      return;
    }
    for (let start = 0; start < batch.numRows; start += BATCH_ROWS) {
      yield batch.slice(start, Math.min(start + BATCH_ROWS, batch.numRows));
    }
  };
  checkArrowObject(data);
  if (data instanceof Table) {
    for (const batch of data.batches) yield* slices(batch);
  } else if (data instanceof RecordBatch) {
    yield* slices(data);
  } else if (data != null && (typeof data[Symbol.asyncIterator] === 'function' || typeof data[Symbol.iterator] === 'function')) {
    for await (const batch of data) {
      checkArrowObject(batch);
      if (!(batch instanceof RecordBatch)) throw new TypeError('expected an iterable of Arrow RecordBatches');
      yield* slices(batch);
    }
  } else {
    throw new TypeError('write takes an Arrow Table, a RecordBatch or an (async) iterable of RecordBatches');
  }
}

function schemaOf(data) {
  if (data instanceof Table || data instanceof RecordBatch) return data.schema;
  if (data != null && data.schema && Array.isArray(data.schema.fields)) return data.schema; // a reader
  return null;
}

/**
 * The IPC messages (`{header, body, headerType}`) of `data`: the schema, then dictionary and
 * record batches, cut from Arrow JS's stream writer one batch at a time.
 */
async function* uploadMessages(data) {
  checkArrowObject(data);
  const writer = new RecordBatchStreamWriter();
  const chunks = writer[Symbol.asyncIterator]();
  const cutter = new ipc.MessageCutter();
  async function* drainUntil(headerType) {
    for (;;) {
      const { value, done } = await chunks.next();
      if (done) throw new Error('the Arrow IPC writer ended early');
      for (const message of cutter.push(value)) {
        yield message;
        if (message.headerType === headerType) return;
      }
    }
  }
  let schema = schemaOf(data);
  if (schema !== null) {
    writer.reset(undefined, schema);
    yield* drainUntil(ipc.HEADER.Schema);
  }
  for await (const batch of uploadBatches(data)) {
    if (schema === null) schema = batch.schema;
    writer.write(batch);
    yield* drainUntil(ipc.HEADER.RecordBatch);
  }
  if (schema === null) throw new TypeError('cannot write an empty iterable of batches: its schema is unknown');
}

// ---------------------------------------------------------------------------------------------
// The client

class Client {
  /**
   * Connect to a Quiver server: `grpc://host:port`, `grpc+tls://host:port` (a bare
   * `host:port` means `grpc://`). With `username` and `password` the Basic → Bearer handshake
   * happens here; otherwise one cheap call checks that the server answers.
   */
  static async connect(uri, options = {}) {
    const client = new Client(uri, options);
    try {
      const conn = await client._connection(client.uri);
      if (client._username === null && client._token === null) await client._probe(conn);
    } catch (err) {
      client.close();
      throw err;
    }
    return client;
  }

  /** Prefer `Client.connect`: the constructor does no network I/O. */
  constructor(uri, options = {}) {
    const { token, username, password, tlsRootCerts, certChain, privateKey, timeoutMs, concurrency } = options;
    if (token != null && (username != null || password != null)) {
      throw new TypeError('give either token, or username and password, not both');
    }
    if ((username == null) !== (password == null)) throw new TypeError('username and password go together');
    if ((certChain == null) !== (privateKey == null)) {
      throw new TypeError('certChain and privateKey go together (mutual TLS)');
    }
    if (timeoutMs != null && !(typeof timeoutMs === 'number' && timeoutMs > 0)) {
      throw new TypeError('timeoutMs must be a positive number');
    }
    this.uri = normalizeUri(uri);
    parseUri(this.uri);
    this.timeoutMs = timeoutMs ?? null;
    this.concurrency = concurrency ?? DEFAULT_CONCURRENCY;
    this._rootCerts = pem(tlsRootCerts);
    this._certChain = pem(certChain);
    this._privateKey = pem(privateKey);
    this._username = username ?? null;
    this._password = password ?? null;
    this._token = token == null ? null : /^bearer /i.test(token) ? token : `Bearer ${token}`;
    this._branch = null; // see `branch`
    this._connections = new Map(); // uri -> Promise<{uri, stub, authorization}>
    this._stubs = new Set();
    this._closed = false;
  }

  // -- connections -----------------------------------------------------------------------

  _credentials(tls) {
    if (!tls) return grpc.credentials.createInsecure();
    return grpc.credentials.createSsl(this._rootCerts, this._privateKey, this._certChain);
  }

  _callOptions() {
    return this.timeoutMs === null ? {} : { deadline: Date.now() + this.timeoutMs };
  }

  _metadata(conn) {
    const metadata = new grpc.Metadata();
    if (conn.authorization) metadata.set('authorization', conn.authorization);
    return metadata;
  }

  _translate(err, uri) {
    const error = errors.fromGrpcError(err);
    if (error instanceof Unavailable && error.details.code === undefined && !error.message.includes(uri)) {
      error.message = `cannot reach ${uri}: ${error.message}`;
    }
    return error;
  }

  /** The connection to `uri`, opened (and authenticated) on first use. */
  _connection(uri) {
    if (this._closed) return Promise.reject(new QuiverError('the client is closed', { code: 'closed' }));
    let pending = this._connections.get(uri);
    if (pending === undefined) {
      pending = this._open(uri);
      this._connections.set(uri, pending);
      pending.catch(() => this._connections.delete(uri));
    }
    return pending;
  }

  async _open(uri) {
    const { target, tls } = parseUri(uri);
    const ServiceClient = flightServiceClient();
    const stub = new ServiceClient(target, this._credentials(tls), CHANNEL_OPTIONS);
    this._stubs.add(stub);
    const conn = { uri, stub, authorization: this._token };
    if (this._username !== null) {
      try {
        conn.authorization = await this._handshake(conn);
      } catch (err) {
        this._stubs.delete(stub);
        stub.close();
        throw err;
      }
    }
    return conn;
  }

  /** Basic credentials for a bearer token: the `authorization` header of the answer. */
  _handshake(conn) {
    return new Promise((resolve, reject) => {
      const metadata = new grpc.Metadata();
      const basic = Buffer.from(`${this._username}:${this._password}`, 'utf8').toString('base64');
      metadata.set('authorization', `Basic ${basic}`);
      const call = conn.stub.Handshake(metadata, this._callOptions());
      let bearer = null;
      let settled = false;
      const pick = (md) => {
        const values = md ? md.get('authorization') : [];
        if (values.length && /^bearer /i.test(String(values[0]))) bearer = String(values[0]);
      };
      call.on('metadata', pick);
      call.on('data', () => {});
      call.on('error', (err) => {
        if (!settled) {
          settled = true;
          reject(this._translate(err, conn.uri));
        }
      });
      call.on('status', (status) => {
        if (settled || status.code !== grpc.status.OK) return;
        settled = true;
        pick(status.metadata);
        if (bearer) resolve(bearer);
        else reject(new Unauthenticated('the server answered the handshake without a bearer token'));
      });
      call.end();
    });
  }

  async _reauthenticate(conn) {
    conn.authorization = await this._handshake(conn);
  }

  /** One call that needs no right: does the server answer at all (and the TLS handshake)? */
  async _probe(conn) {
    try {
      await collect(conn.stub.ListActions({}, this._metadata(conn), this._callOptions()));
    } catch (err) {
      const error = this._translate(err, conn.uri);
      if (error instanceof Unavailable || error instanceof errors.DeadlineExceeded) throw error;
      // anything else came from a server that answered
    }
  }

  /**
   * Run `call(stub, metadata, options)` at `uri`, translating its errors. With username and
   * password, a call refused as unauthenticated (an expired token) is retried once on a new
   * token.
   */
  async _rpc(call, uri = this.uri) {
    const conn = await this._connection(uri);
    try {
      return await call(conn.stub, this._metadata(conn), this._callOptions());
    } catch (err) {
      const error = err instanceof QuiverError ? err : this._translate(err, uri);
      if (!(error instanceof Unauthenticated) || this._username === null) throw error;
    }
    await this._reauthenticate(conn);
    try {
      return await call(conn.stub, this._metadata(conn), this._callOptions());
    } catch (err) {
      throw err instanceof QuiverError ? err : this._translate(err, uri);
    }
  }

  /** Close every connection; the client cannot be used afterwards. */
  close() {
    this._closed = true;
    for (const stub of this._stubs) stub.close();
    this._stubs.clear();
    this._connections.clear();
  }

  // -- calls -----------------------------------------------------------------------------

  /**
   * This client on branch `name` of every dataset it names: reads, searches, writes, row
   * changes, indices, maintenance, versions and tags act on that branch ('main': the main
   * line). It shares this client's connections.
   */
  branch(name) {
    const view = Object.create(this);
    view._branch = name === 'main' ? null : String(name);
    return view;
  }

  /** A command or action body on this client's branch, unless it names one itself. */
  _scoped(body) {
    if (this._branch === null || (body && body.branch != null)) return body;
    return { ...body, branch: this._branch };
  }

  /** `DoAction(name)` with a JSON body; the JSON result (an array if several, null if none). */
  async action(name, body = {}) {
    const scoped = BRANCHED_ACTIONS.has(name) ? this._scoped(body ?? {}) : body ?? {};
    const request = { type: String(name), body: jsonBytes(scoped) };
    const answers = await this._rpc((stub, md, o) => collect(stub.DoAction(request, md, o)));
    const results = answers.map((r) => parseJson(r.body, `action ${JSON.stringify(name)}`));
    if (results.length === 0) return null;
    return results.length === 1 ? results[0] : results;
  }

  /** `DoAction(name)` answered as its raw Results (for actions that answer bytes). */
  async _doAction(name, body) {
    const request = { type: String(name), body: jsonBytes(body) };
    return this._rpc((stub, md, o) => collect(stub.DoAction(request, md, o)));
  }

  /**
   * The blobs of `column` for the rows selected by one of `indices`, `ids` or `addresses`
   * (and `version` / `tag` / `asOf`): a RemoteBlob per row (null for a null blob) whose
   * `read(offset, length)` fetches only that byte range, pinned to the version located.
   */
  async takeBlobs(dataset, column, options = {}) {
    return blobs.takeBlobs(this, dataset, column, options);
  }

  /** [rowAddress, Buffer | null] of the selected rows' blobs, read whole. */
  async readBlobs(dataset, column, options = {}) {
    return blobs.readBlobs(this, dataset, column, options);
  }

  /** The server's actions, name → one-line description. */
  async listActions() {
    const actions = await this._rpc((stub, md, o) => collect(stub.ListActions({}, md, o)));
    return Object.fromEntries(actions.map((a) => [a.type, a.description]));
  }

  /** The server's health answer (throws Unavailable while it drains). */
  async healthcheck() {
    return (await this.action('healthcheck')) || {};
  }

  // -- catalog ---------------------------------------------------------------------------

  /** The names of the datasets under the server's root (that the user may read). */
  async datasets(prefix = '') {
    const request = { expression: Buffer.from(prefix, 'utf8') };
    const infos = await this._rpc((stub, md, o) => collect(stub.ListFlights(request, md, o)));
    return infos.map((info) => datasetName(info.flight_descriptor)).filter((n) => n !== null);
  }

  /** Version, schema, fragments, rows and tags of a dataset (the `describe` action). */
  async describe(dataset, { version, tag, asOf } = {}) {
    return this.action('describe', readCommand(dataset, { version, tag, asOf }));
  }

  /** The FlightInfo of a read: Arrow schema, endpoints (tickets, locations), totals. */
  async flightInfo(dataset, options = {}) {
    const descriptor = { type: 'CMD', cmd: jsonBytes(readCommand(dataset, this._scoped(options))) };
    const info = await this._rpc((stub, md, o) => unary(stub, 'GetFlightInfo', descriptor, md, o));
    return {
      schema: ipc.decodeSchema(info.schema),
      endpoints: info.endpoint.map((e) => ({
        ticket: e.ticket ? e.ticket.ticket : Buffer.alloc(0),
        locations: e.location.map((l) => l.uri),
        expirationTime: timestamp(e.expiration_time),
        appMetadata: parseJsonOrBytes(e.app_metadata),
      })),
      totalRecords: Number(info.total_records),
      totalBytes: Number(info.total_bytes),
      ordered: info.ordered,
      appMetadata: parseJsonOrBytes(info.app_metadata),
    };
  }

  /** The Arrow schema a read with these options returns (GetSchema). */
  async schema(dataset, { columns, version, tag, asOf, withRowId } = {}) {
    const options = { columns, version, tag, asOf, withRowId };
    const descriptor = { type: 'CMD', cmd: jsonBytes(readCommand(dataset, this._scoped(options))) };
    try {
      const answer = await this._rpc((stub, md, o) => unary(stub, 'GetSchema', descriptor, md, o));
      return ipc.decodeSchema(answer.schema);
    } catch (err) {
      if (!(err instanceof errors.Unimplemented)) throw err;
      return (await this.flightInfo(dataset, options)).schema; // a server without GetSchema
    }
  }

  // -- reads -----------------------------------------------------------------------------

  _locations(endpoint) {
    const uris = endpoint.locations.map((u) => (u === '' || u === REUSE_CONNECTION ? this.uri : u));
    // Tickets are self-contained: when no advertised replica answers, the server this
    // client talks to is the last resort.
    if (!uris.includes(this.uri)) uris.push(this.uri);
    return uris;
  }

  /** One DoGet at `uri`, read up to its schema (a refused ticket shows there). */
  _doGet(ticket, uri) {
    return this._rpc(async (stub, md, o) => {
      const call = stub.DoGet({ ticket }, md, o);
      const box = { error: null };
      async function* bytes() {
        try {
          for await (const data of call) {
            if (data.data_header.length) yield* ipc.frameMessage(data.data_header, data.data_body);
          }
        } catch (err) {
          box.error = err;
          throw err;
        }
        yield ipc.endOfStream();
      }
      try {
        const reader = await RecordBatchReader.from(bytes());
        await reader.open();
        if (box.error) throw box.error;
        return { reader, call, box };
      } catch (err) {
        call.cancel();
        throw box.error || err;
      }
    }, uri);
  }

  /** A DoGet stream of `endpoint` from the first of its locations (but `exclude`) that answers. */
  async _openEndpoint(endpoint, exclude = []) {
    let last = null;
    for (const uri of this._locations(endpoint)) {
      if (exclude.includes(uri)) continue;
      try {
        await this._connection(uri);
      } catch (err) {
        if (!(err instanceof QuiverError)) throw err;
        last = err; // cannot connect to (or authenticate at) this replica
        continue;
      }
      try {
        return { ...(await this._doGet(endpoint.ticket, uri)), uri };
      } catch (err) {
        if (err instanceof Unavailable) last = err;
        else if (err instanceof Unauthenticated && uri !== this.uri) last = err; // a replica not taking our token
        else throw err;
      }
    }
    throw last;
  }

  /**
   * The record batches of one endpoint of a FlightInfo, in order. A stream that breaks with
   * Unavailable (its replica went away or drains) is read again from the endpoint's next
   * location; the ticket pins the rows and their order, so the rows already yielded are
   * skipped and every row comes once.
   */
  async *endpointBatches(endpoint) {
    const failed = [];
    let sent = 0; // rows yielded so far
    for (;;) {
      const { reader, call, box, uri } = await this._openEndpoint(endpoint, failed);
      let skip = sent;
      try {
        for await (let batch of reader) {
          if (skip) {
            if (batch.numRows <= skip) {
              skip -= batch.numRows;
              continue;
            }
            batch = batch.slice(skip);
            skip = 0;
          }
          sent += batch.numRows;
          yield batch;
        }
        if (box.error) throw box.error;
        return;
      } catch (err) {
        const error = err instanceof QuiverError ? err : this._translate(box.error || err, uri);
        if (!(error instanceof Unavailable)) throw error;
        failed.push(uri);
        if (this._locations(endpoint).every((u) => failed.includes(u))) throw error;
      } finally {
        call.cancel(); // a no-op once the stream ended; stops it when the reader broke off
      }
    }
  }

  async _fetch(endpoint, state) {
    const batches = [];
    for await (const batch of this.endpointBatches(endpoint)) {
      if (state.stopped) break;
      batches.push(batch);
    }
    return batches;
  }

  /**
   * Read a dataset (one version of it) into an Arrow Table: the endpoints of one FlightInfo
   * fetched by up to `concurrency` calls at once, concatenated in endpoint order.
   */
  async read(dataset, options = {}) {
    const { concurrency = this.concurrency, limit, ...rest } = options;
    if (!(Number.isInteger(concurrency) && concurrency >= 1)) throw new TypeError('concurrency must be an integer >= 1');
    const info = await this.flightInfo(dataset, { ...rest, limit });
    const parts = await mapBounded(info.endpoints, concurrency, (e, _i, state) => this._fetch(e, state));
    const batches = parts.flat().map((b) => conform(b, info.schema));
    let table = new Table(info.schema, batches);
    // a batch of searches holds `limit` rows per query
    const batch = Array.isArray(rest.fullTextQuery) || info.schema.fields.some((f) => f.name === 'query_index');
    if (limit != null && !batch && table.numRows > Number(limit)) table = table.slice(0, Number(limit));
    return table;
  }

  /**
   * The `k` rows nearest to query vector `q` by `column`, nearest first with `_distance` (an
   * array of vectors: each one's, after its `query_index`). Options: metric, nprobes,
   * minimumNprobes, maximumNprobes, refineFactor, useIndex, and the read options columns,
   * filter, prefilter, withRowId, version | tag | asOf.
   */
  async nearest(dataset, column, q, k = 10, options = {}) {
    const { searching, reading } = splitSearchOptions(options);
    return this.read(dataset, { ...reading, nearest: { column, q, k, ...searching } });
  }

  /**
   * The `limit` rows matching a full-text query best (text, `{query, columns}` or a
   * structured query), best first with `_score`. Options: columns, filter, prefilter,
   * fastSearch, withRowId, version | tag | asOf.
   */
  async fullTextSearch(dataset, query, limit = 10, options = {}) {
    if (Array.isArray(query)) throw new TypeError('fullTextSearch takes one query; fullTextSearchBatch an array');
    return this.read(dataset, { ...options, fullTextQuery: query, limit });
  }

  /** Each query's `limit` best rows, the answers in turn, each row after its `query_index`. */
  async fullTextSearchBatch(dataset, queries, limit = 10, options = {}) {
    if (!Array.isArray(queries) || queries.length === 0) {
      throw new TypeError('queries must be a non-empty array of full-text queries');
    }
    return this.read(dataset, { ...options, fullTextQuery: queries, limit });
  }

  /**
   * The `k` best rows of a vector search (`q` by `column`) and a full-text search (`text`)
   * fused as LanceDB's hybrid search fuses them: reciprocal rank fusion (`rrfK`) or a linear
   * combination (`fusion: 'linear'`, `weight` for the vector side), scores normalised by
   * value or rank (`normalize`); best first with `_relevance_score`. Other options as
   * `nearest`'s.
   */
  async hybrid(dataset, column, q, text, k = 10, options = {}) {
    const { fusion = 'rrf', rrfK, weight, normalize, ...rest } = options;
    const { searching, reading } = splitSearchOptions(rest);
    return this.read(dataset, {
      ...reading,
      nearest: { column, q, k, ...searching },
      fullTextQuery: text,
      limit: k,
      hybrid: { fusion, rrfK, weight, normalize },
    });
  }

  /** Stream a dataset: the endpoints one after another, in order, batch by batch. */
  async *stream(dataset, options = {}) {
    const { limit } = options;
    const info = await this.flightInfo(dataset, options);
    if (info.endpoints.length === 0) return;
    let left = limit == null ? null : Number(limit);
    for (const endpoint of info.endpoints) {
      for await (let batch of this.endpointBatches(endpoint)) {
        if (left !== null) {
          if (left <= 0) return;
          if (batch.numRows > left) batch = batch.slice(0, left);
          left -= batch.numRows;
        }
        yield conform(batch, info.schema);
      }
      if (left !== null && left <= 0) return;
    }
  }

  // -- writes ----------------------------------------------------------------------------

  async _put(command, data) {
    // no re-authentication here: a refused upload cannot be replayed
    const conn = await this._connection(this.uri);
    const call = conn.stub.DoPut(this._metadata(conn), this._callOptions());
    const answers = [];
    let failure = null;
    const finished = new Promise((resolve, reject) => {
      call.on('data', (result) => answers.push(result.app_metadata));
      call.on('error', (err) => {
        failure = err;
        reject(err);
      });
      call.on('status', (status) => {
        if (status.code === grpc.status.OK) resolve();
      });
    });
    finished.catch(() => {});
    try {
      let first = true;
      for await (const message of uploadMessages(data)) {
        if (failure) break;
        const flightData = { data_header: message.header, data_body: message.body };
        if (first) {
          flightData.flight_descriptor = { type: 'CMD', cmd: jsonBytes(this._scoped(command)) };
          first = false;
        }
        if (!call.write(flightData)) {
          await Promise.race([new Promise((resolve) => call.once('drain', resolve)), finished]);
        }
      }
      call.end();
      await finished;
    } catch (err) {
      call.cancel();
      if (failure) throw this._translate(failure, this.uri);
      throw err instanceof QuiverError ? err : this._translate(err, this.uri);
    }
    const result = parseJson(answers[0], 'DoPut');
    if (result === null || typeof result !== 'object' || Array.isArray(result)) {
      throw new QuiverError('the server answered DoPut without a JSON PutResult');
    }
    return result;
  }

  /**
   * Write and commit in one DoPut (`mode`: append, create or overwrite). `data` is an Arrow
   * Table, a RecordBatch or an (async) iterable of RecordBatches. Returns `{version, rows}`.
   */
  async write(dataset, data, { mode = 'append', idempotencyKey, retries = 3 } = {}) {
    const cmd = putCommand(dataset, { mode });
    cmd.idempotency_key = keyOf(idempotencyKey);
    return this._resent(() => this._put(cmd, data), data, retries);
  }

  /**
   * `send()` (a keyed write), sent again with the same key when the server answers
   * `Unavailable` (its storage kept failing: the write may or may not have committed), up
   * to `retries` times with backoff, when `data` can be sent again (a Table or a
   * RecordBatch; not a stream). The key makes a resent write commit once.
   */
  async _resent(send, data, retries) {
    const again = data === undefined || data instanceof Table || data instanceof RecordBatch;
    for (let attempt = 0; ; attempt += 1) {
      try {
        return await send();
      } catch (err) {
        if (!(err instanceof errors.Unavailable) || !again || attempt >= retries) throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** attempt, 8000)));
      }
    }
  }

  /** Write data files without committing; the opaque fragments to `commit` or `abort`. */
  async stage(dataset, data, { mode = 'append', job } = {}) {
    const answer = await this._put(putCommand(dataset, { mode, commit: false, job }), data);
    if (!Array.isArray(answer.fragments)) {
      throw new QuiverError('the server answered a staged DoPut without fragments');
    }
    return answer.fragments.map(String);
  }

  /** Make staged fragments visible in one new version (all or none). */
  async commit(dataset, fragments, options = {}) {
    return this.action('commit', commitBody(dataset, fragments, options));
  }

  /** Remove the files of staged fragments (and, with `job`, of every put of the job). */
  async abort(dataset, fragments = [], { job } = {}) {
    const body = { dataset, fragments: Array.from(fragments, String) };
    if (job != null) body.job = String(job);
    return this.action('abort', body);
  }

  // -- table operations --------------------------------------------------------------------

  /**
   * Delete the rows matching a SQL predicate: `{version, deleted_rows}`. Keyed and sent
   * again on `Unavailable` as `write` is (options `idempotencyKey`, `retries`).
   */
  async delete(dataset, predicate, { idempotencyKey, retries = 3 } = {}) {
    const body = { dataset, predicate, idempotency_key: keyOf(idempotencyKey) };
    return this._resent(() => this.action('delete', body), undefined, retries);
  }

  /**
   * Set columns to SQL expressions (`{score: 'score * 2'}`) on the rows matching the SQL
   * `where` (every row when absent), in one new version: `{version, updated_rows}`.
   */
  async update(dataset, updates, where, { idempotencyKey, retries = 3 } = {}) {
    const body = updateBody(dataset, updates, where);
    body.idempotency_key = keyOf(idempotencyKey);
    return this._resent(() => this.action('update', body), undefined, retries);
  }

  /**
   * Merge the rows of `data` (as `write` takes it) into `dataset` on the `on` columns (a name
   * or an array; null or absent: the dataset's unenforced primary key), in one new version,
   * as pylance's `merge_insert`. The defaults upsert. Options: `whenMatched` ('update_all',
   * only where `matchedCondition`, SQL over `source.` and `target.` columns, holds; 'delete',
   * 'fail' or 'nothing'), `whenNotMatched` ('insert_all' or null), `whenNotMatchedBySource`
   * ('delete', only the target rows matching `bySourceFilter` when given; or null),
   * `conflictRetries`. Returns `{version, rows, inserted_rows, updated_rows, deleted_rows}`.
   */
  async merge(dataset, data, on, options = {}) {
    const { idempotencyKey, retries = 3, ...clauses } = options || {};
    const cmd = mergeCommand(dataset, on, clauses);
    cmd.idempotency_key = keyOf(idempotencyKey);
    return this._resent(() => this._put(cmd, data), data, retries);
  }

  /**
   * Apply rows naming their `_rowaddr` (a uint64 column, as a read with `columns:
   * ['_rowaddr', ...]` returns it) in one new version: new columns (`mode` 'add_columns', the
   * default; rows not named get NULL, no data file is rewritten) or new values of existing
   * columns ('update_columns'). `data` as `write` takes it. Returns `{version, rows}` (and
   * `updated_rows` for 'update_columns'); an address that is not a live row is refused by
   * the server (`InvalidArgument`) and commits nothing.
   */
  async backfill(dataset, data, mode = 'add_columns', { idempotencyKey, retries = 3 } = {}) {
    const cmd = backfillCommand(dataset, mode);
    cmd.idempotency_key = keyOf(idempotencyKey);
    return this._resent(() => this._put(cmd, data), data, retries);
  }

  /** Every version, oldest first. */
  async versions(dataset) {
    const answer = await this.action('list_versions', { dataset });
    return answer && Array.isArray(answer.versions) ? answer.versions : [];
  }

  /** Tag name → `{version, created_at, updated_at}`. */
  async tags(dataset) {
    const answer = await this.action('list_tags', { dataset });
    return answer && answer.tags && typeof answer.tags === 'object' ? answer.tags : {};
  }

  async createTag(dataset, tag, version) {
    const body = { dataset, tag };
    if (version != null) body.version = Number(version);
    return this.action('create_tag', body);
  }

  async deleteTag(dataset, tag) {
    return this.action('delete_tag', { dataset, tag });
  }

  /** Make an old version (a number, or a tag name) the latest, as a new version. */
  /** Create branch `name` from a version of this client's branch (a number, a tag, or the latest). */
  async createBranch(dataset, name, version) {
    const body = { dataset, name };
    if (version != null) body[typeof version === 'string' ? 'tag' : 'version'] = version;
    return this.action('create_branch', body);
  }

  /** The branches of a dataset, oldest parent version first. */
  async branches(dataset) {
    const answer = await this.action('list_branches', { dataset });
    return answer && Array.isArray(answer.branches) ? answer.branches : [];
  }

  /** Delete a branch and the files it wrote (refused while branches were created from it). */
  async deleteBranch(dataset, name) {
    return this.action('delete_branch', { dataset, name });
  }

  async restore(dataset, version) {
    return this.action('restore', typeof version === 'string' ? { dataset, tag: version } : { dataset, version: Number(version) });
  }

  async addColumns(dataset, columns) {
    return this.action('add_columns', { dataset, columns });
  }

  async dropColumns(dataset, columns) {
    return this.action('drop_columns', { dataset, columns: typeof columns === 'string' ? [columns] : Array.from(columns) });
  }

  async alterColumns(dataset, ...alterations) {
    return this.action('alter_columns', { dataset, alterations });
  }

  async dropDataset(dataset) {
    return this.action('drop_dataset', { dataset });
  }

  /**
   * Build an index of `column` in the server and commit it: {version, name}. BTREE and BITMAP
   * as pylance's create_scalar_index; IVF_FLAT, IVF_PQ, IVF_SQ and IVF_RQ as pylance's
   * create_index (options metric, numPartitions, numSubVectors, numBits, sampleRate, maxIters,
   * targetPartitionSize, ivfCentroids and pqCodebook as arrays of arrays; m, efConstruction
   * and maxLevel for the graphs of IVF_HNSW_* indices; rabitqModel, pylance's build_rq_model
   * JSON, for an IVF_RQ index's rotation). `onProgress` is
   * called with each stage of the build ({stage, index, ...}) as the server reports it.
   */
  async createIndex(dataset, column, indexType, options = {}) {
    const { onProgress, ...rest } = options;
    const body = { dataset, column, index_type: indexType };
    const keys = {
      name: 'name',
      replace: 'replace',
      metric: 'metric',
      numPartitions: 'num_partitions',
      numSubVectors: 'num_sub_vectors',
      numBits: 'num_bits',
      sampleRate: 'sample_rate',
      maxIters: 'max_iters',
      targetPartitionSize: 'target_partition_size',
      ivfCentroids: 'ivf_centroids',
      pqCodebook: 'pq_codebook',
      m: 'm',
      efConstruction: 'ef_construction',
      maxLevel: 'max_level',
      rabitqModel: 'rabitq_model',
      train: 'train',
    };
    for (const [key, value] of Object.entries(rest)) {
      if (!(key in keys)) throw new TypeError(`createIndex has no option ${JSON.stringify(key)}`);
      if (value !== undefined) body[keys[key]] = value;
    }
    return this._build('create_index', body, onProgress);
  }

  /**
   * Index the fragments no index covers (pylance's optimize_indices): {version, optimized}.
   * `retrain` trains vector indices again; `onProgress` hears of each stage.
   */
  async optimizeIndices(dataset, { numIndicesToMerge, indexNames, retrain, onProgress } = {}) {
    const body = { dataset };
    if (numIndicesToMerge !== undefined) body.num_indices_to_merge = numIndicesToMerge;
    if (indexNames !== undefined) body.index_names = Array.from(indexNames);
    if (retrain !== undefined) body.retrain = retrain;
    return this._build('optimize_indices', body, onProgress);
  }

  /** A build action; with `onProgress`, each {"progress": stage} result goes to it as it comes. */
  async _build(name, body, onProgress) {
    if (onProgress === undefined) return this.action(name, body);
    const request = { type: name, body: jsonBytes({ ...body, progress: true }) };
    return this._rpc(async (stub, md, o) => {
      let result = null;
      for await (const answer of stub.DoAction(request, md, o)) {
        const doc = parseJson(answer.body, `action ${JSON.stringify(name)}`);
        if (doc && typeof doc === 'object' && Object.keys(doc).length === 1 && 'progress' in doc) {
          onProgress(doc.progress);
        } else {
          result = doc;
        }
      }
      return result;
    });
  }

  /** Drop the index `name` (every segment) as a new version: {version}. */
  async dropIndex(dataset, name) {
    return this.action('drop_index', { dataset, name });
  }
}

module.exports = { Client, mapBounded, parseUri, normalizeUri, uploadMessages, REUSE_CONNECTION };

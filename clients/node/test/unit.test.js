'use strict';
// Parts of the client that need no server: error mapping, command bodies, URIs, the bounded
// parallel map and the IPC framing of uploads and downloads.

const test = require('node:test');
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const arrow = require('apache-arrow');

const quiver = require('../src');
const { mapBounded, parseUri, uploadMessages } = require('../src/client');
const ipc = require('../src/ipc');

function grpcError(code, details, trailers = {}) {
  const metadata = new grpc.Metadata();
  for (const [k, v] of Object.entries(trailers)) metadata.set(k, k.endsWith('-bin') ? Buffer.from(v) : v);
  return Object.assign(new Error(`${code} ${details}`), { code, details, metadata });
}

test('every error class is chosen by the code in the details, whatever the gRPC status', () => {
  for (const cls of quiver.ERROR_CLASSES) {
    const err = quiver.fromGrpcError(
      grpcError(grpc.status.UNKNOWN, 'boom. Detail: Failed', {
        'grpc-status-details-bin': JSON.stringify({ code: cls.code, extra: 1 }),
        'x-arrow-status-message-bin': 'boom',
      }),
    );
    assert.ok(err instanceof cls, cls.name);
    assert.ok(err instanceof quiver.QuiverError);
    assert.equal(err.code, cls.code);
    assert.equal(err.message, 'boom');
    assert.deepEqual(err.details, { code: cls.code, extra: 1 });
    assert.equal(err.grpcCode, grpc.status.UNKNOWN);
    assert.equal(err.name, cls.name);
  }
});

test('without a code the gRPC status decides; unknown codes stay QuiverError with their code', () => {
  const cases = [
    [grpc.status.NOT_FOUND, quiver.NotFound],
    [grpc.status.INVALID_ARGUMENT, quiver.InvalidArgument],
    [grpc.status.UNAUTHENTICATED, quiver.Unauthenticated],
    [grpc.status.PERMISSION_DENIED, quiver.PermissionDenied],
    [grpc.status.UNAVAILABLE, quiver.Unavailable],
    [grpc.status.DEADLINE_EXCEEDED, quiver.DeadlineExceeded],
    [grpc.status.UNIMPLEMENTED, quiver.Unimplemented],
  ];
  for (const [status, cls] of cases) {
    const err = quiver.fromGrpcError(grpcError(status, 'it failed. Detail: x'));
    assert.ok(err instanceof cls, cls.name);
    assert.equal(err.message, 'it failed');
    assert.deepEqual(err.details, {});
  }
  const odd = quiver.fromGrpcError(
    grpcError(grpc.status.UNKNOWN, 'odd', { 'grpc-status-details-bin': '{"code":"brand_new"}' }),
  );
  assert.equal(odd.constructor, quiver.QuiverError);
  assert.equal(odd.code, 'brand_new');
  const bare = quiver.fromGrpcError(grpcError(grpc.status.UNKNOWN, ''));
  assert.equal(bare.code, null);
  assert.equal(bare.message, 'the server reported an error without a message');
});

test('GetSchema errors name their code in text only', () => {
  const err = quiver.fromGrpcError(
    grpcError(grpc.status.NOT_FOUND, 'dataset \'x\' does not exist. Detail: Python exception: {"code":"not_found"}'),
  );
  assert.ok(err instanceof quiver.NotFound);
  assert.equal(err.message, "dataset 'x' does not exist");
  assert.deepEqual(err.details, { code: 'not_found' });
  const denied = quiver.fromGrpcError(
    grpcError(grpc.status.UNKNOWN, 'no', { 'x-arrow-status-detail-bin': 'Python exception: {"code":"permission_denied"}' }),
  );
  assert.ok(denied instanceof quiver.PermissionDenied);
});

test('the details are a google.rpc.Status whose ErrorInfo names the code', () => {
  // wire.status.encode('commit_conflict', 'lost', {retryable: true, version: 7}) in Python
  const details = Buffer.from(
    '080e12046c6f73741a660a28747970652e676f6f676c65617069732e636f6d2f676f6f676c652e7270632e4572726f72496e666f123a0a0f434f4d4d49545f434f4e464c49435412067175697665721a110a09726574727961626c651204747275651a0c0a0776657273696f6e120137',
    'hex',
  );
  const err = quiver.fromGrpcError(grpcError(grpc.status.UNAVAILABLE, 'lost. Detail: Unavailable', {
    'grpc-status-details-bin': details,
  }));
  assert.ok(err instanceof quiver.CommitConflict);
  assert.deepEqual(err.details, { code: 'commit_conflict', retryable: true, version: 7 });
  assert.equal(err.message, 'lost');
  assert.equal(err.grpcCode, grpc.status.UNAVAILABLE);
  const garbage = quiver.fromGrpcError(grpcError(grpc.status.NOT_FOUND, 'gone', {
    'grpc-status-details-bin': Buffer.from([0x0a, 0xff]),
  }));
  assert.ok(garbage instanceof quiver.NotFound); // unreadable details: the status decides
  assert.deepEqual(garbage.details, {});
});

test('a commit conflict carries retryable and the version it lost to', () => {
  const err = quiver.fromGrpcError(
    grpcError(grpc.status.UNAVAILABLE, 'lost', {
      'grpc-status-details-bin': '{"code":"commit_conflict","retryable":true,"version":7}',
    }),
  );
  assert.ok(err instanceof quiver.CommitConflict);
  assert.ok(!(err instanceof quiver.Unavailable)); // the code wins over the gRPC status
  assert.equal(err.retryable, true);
  assert.equal(err.version, 7);
  const plain = new quiver.CommitConflict('lost');
  assert.equal(plain.retryable, false);
  assert.equal(plain.version, null);
});

test('read commands carry only the options given, in the server\'s names', () => {
  assert.deepEqual(quiver.readCommand('sales'), { dataset: 'sales' });
  assert.deepEqual(
    quiver.readCommand('team/sales', {
      columns: ['id', 'x'], filter: 'x > 5', version: 3n, limit: 10, withRowId: true,
      maxRowsPerEndpoint: 100, appendedSince: 1,
    }),
    { dataset: 'team/sales', version: 3, columns: ['id', 'x'], filter: 'x > 5', limit: 10,
      with_row_id: true, max_rows_per_endpoint: 100, appended_since: 1 },
  );
  assert.deepEqual(quiver.readCommand('s', { asOf: new Date(Date.UTC(2026, 0, 31)) }), {
    dataset: 's', as_of: '2026-01-31T00:00:00.000Z',
  });
  assert.throws(() => quiver.readCommand('s', { version: 1, tag: 'q3' }), quiver.InvalidArgument);
  assert.throws(() => quiver.readCommand('s', { columns: 'id' }), TypeError);
  assert.throws(() => quiver.readCommand('s', { version: 1.5 }), TypeError);
  assert.throws(() => quiver.readCommand(''), TypeError);
  assert.throws(() => quiver.readCommand('s', { asOf: 5 }), TypeError);
  assert.throws(() => quiver.readCommand('s', { colums: ['id'] }), /unknown read option\(s\): colums/);
  assert.deepEqual(quiver.readCommand('s', { tag: undefined, version: null }), { dataset: 's' });
});

test('search filters: a full-text query or a vector search filtering the other search', () => {
  assert.deepEqual(
    quiver.readCommand('docs', { nearest: { column: 'vec', q: [1, 2], k: 3 }, searchFilter: { fullTextQuery: 'kiwi' } }),
    { dataset: 'docs', nearest: { column: 'vec', q: [1, 2], k: 3 }, search_filter: { full_text_query: 'kiwi' } },
  );
  assert.deepEqual(
    quiver.readCommand('docs', {
      fullTextQuery: 'kiwi', prefilter: true, searchFilter: { nearest: { column: 'vec', q: [1, 2], k: 4 } },
    }),
    { dataset: 'docs', full_text_query: 'kiwi', prefilter: true,
      search_filter: { nearest: { column: 'vec', q: [1, 2], k: 4 } } },
  );
  assert.throws(() => quiver.readCommand('docs', { fullTextQuery: 'x', searchFilter: { other: 1 } }), quiver.InvalidArgument);
});

test('search read commands: nearest, hybrid, batches', () => {
  assert.deepEqual(
    quiver.readCommand('d', {
      nearest: { column: 'v', q: new Float32Array([1, 0.5]), k: 3n, refineFactor: 2, useIndex: false },
      fullTextQuery: 'fox', limit: 3, hybrid: { fusion: 'linear', weight: 0.25, normalize: 'rank' },
    }),
    { dataset: 'd', limit: 3, full_text_query: 'fox',
      nearest: { column: 'v', q: [1, 0.5], k: 3, refine_factor: 2, use_index: false },
      hybrid: { fusion: 'linear', weight: 0.25, normalize: 'rank' } },
  );
  assert.deepEqual(quiver.readCommand('d', { nearest: { column: 'v', q: [[1, 2], [3, 4]] } }), {
    dataset: 'd', nearest: { column: 'v', q: [[1, 2], [3, 4]] },
  });
  assert.deepEqual(quiver.readCommand('d', { nearest: { column: 'v', q: [1], searchEffort: 0.25 } }), {
    dataset: 'd', nearest: { column: 'v', q: [1], search_effort: 0.25 },
  });
  assert.deepEqual(quiver.readCommand('d', { nearest: { column: 'v', q: [1], approxMode: 'fast' } }), {
    dataset: 'd', nearest: { column: 'v', q: [1], approx_mode: 'fast' },
  });
  assert.deepEqual(quiver.readCommand('d', { fullTextQuery: ['a', { match: { terms: 'b' } }] }), {
    dataset: 'd', full_text_query: ['a', { match: { terms: 'b' } }],
  });
  assert.throws(() => quiver.readCommand('d', { fullTextQuery: [] }), TypeError);
  assert.throws(() => quiver.readCommand('d', { nearest: { q: [1] } }), /nearest.column/);
  assert.throws(() => quiver.readCommand('d', { nearest: { column: 'v', q: 'x' } }), /nearest.q/);
  assert.throws(() => quiver.readCommand('d', { nearest: { column: 'v', nprobe: 3 } }), /unknown nearest option/);
  assert.throws(() => quiver.readCommand('d', { hybrid: {} }), quiver.InvalidArgument);
  const both = { nearest: { column: 'v', q: [1] }, fullTextQuery: 'x' };
  assert.throws(() => quiver.readCommand('d', { ...both, hybrid: { fusion: 'max' } }), quiver.InvalidArgument);
  assert.throws(() => quiver.readCommand('d', { ...both, hybrid: { rrfK: 'x' } }), TypeError);
  assert.throws(
    () => quiver.readCommand('d', { ...both, fullTextQuery: ['x', 'y'], hybrid: {} }),
    /not a batch/,
  );
});

test('put commands and commit bodies', () => {
  assert.deepEqual(quiver.putCommand('s'), { dataset: 's', mode: 'append' });
  assert.deepEqual(quiver.putCommand('s', { mode: 'create', commit: false, job: 'j' }), {
    dataset: 's', mode: 'create', commit: false, job: 'j',
  });
  assert.throws(() => quiver.putCommand('s', { mode: 'upsert' }), quiver.InvalidArgument);
  assert.deepEqual(quiver.commitBody('s', ['qf1.a'], { readVersion: 4, idempotencyKey: 'k' }), {
    dataset: 's', operation: 'append', fragments: ['qf1.a'], read_version: 4, idempotency_key: 'k',
  });
  assert.throws(() => quiver.commitBody('s', [], { operation: 'merge' }), quiver.InvalidArgument);
});

test('update bodies: column -> SQL expression, where only when given', () => {
  assert.deepEqual(quiver.updateBody('s', { x: 'x * 2', s: "'new'" }, 'id < 4'), {
    dataset: 's', updates: { x: 'x * 2', s: "'new'" }, where: 'id < 4',
  });
  assert.deepEqual(quiver.updateBody('s', new Map([['x', '-x']])), { dataset: 's', updates: { x: '-x' } });
  assert.deepEqual(quiver.updateBody('s', { x: '1' }, null), { dataset: 's', updates: { x: '1' } });
  assert.throws(() => quiver.updateBody('s', {}), quiver.InvalidArgument);
  assert.throws(() => quiver.updateBody('s', { x: '  ' }), quiver.InvalidArgument);
  assert.throws(() => quiver.updateBody('s', { x: 2 }), TypeError);
  assert.throws(() => quiver.updateBody('s', ['x']), TypeError);
  assert.throws(() => quiver.updateBody('s', null), TypeError);
  assert.throws(() => quiver.updateBody('s', { x: '1' }, 5), TypeError);
  assert.throws(() => quiver.updateBody('', { x: '1' }), TypeError);
});

test('merge commands: the clauses in the server\'s names, when_not_matched always sent', () => {
  // the defaults upsert on the primary key; when_not_matched is sent even then
  assert.deepEqual(quiver.mergeCommand('s'), {
    dataset: 's', merge: { when_matched: 'update_all', when_not_matched: 'insert_all' },
  });
  assert.deepEqual(quiver.mergeCommand('s', 'id', { whenNotMatched: null }), {
    dataset: 's', merge: { when_matched: 'update_all', when_not_matched: null, on: ['id'] },
  });
  assert.deepEqual(JSON.parse(JSON.stringify(quiver.mergeCommand('s', ['a', 'b'], { whenMatched: 'delete', whenNotMatched: null }))), {
    dataset: 's', merge: { when_matched: 'delete', when_not_matched: null, on: ['a', 'b'] },
  });
  assert.deepEqual(
    quiver.mergeCommand('s', new Set(['id']), {
      matchedCondition: 'source.x > target.x', whenNotMatchedBySource: 'delete', bySourceFilter: 'id < 10',
      conflictRetries: 3n,
    }),
    { dataset: 's', merge: {
      when_matched: 'update_all', when_not_matched: 'insert_all', on: ['id'], matched_condition: 'source.x > target.x',
      when_not_matched_by_source: 'delete', by_source_filter: 'id < 10', conflict_retries: 3,
    } },
  );
  assert.deepEqual(quiver.mergeCommand('s', null, { whenMatched: 'nothing', conflictRetries: 0 }).merge, {
    when_matched: 'nothing', when_not_matched: 'insert_all', conflict_retries: 0,
  });
  for (const [on, options] of [
    [undefined, { whenMatched: 'explode' }],
    [undefined, { whenMatched: null }],
    [undefined, { whenNotMatched: 'insert' }],
    [undefined, { whenNotMatchedBySource: 'insert_all' }],
    [[], {}],
    ['id', { whenMatched: 'delete', matchedCondition: 'target.x > 1' }],
    ['id', { bySourceFilter: 'id < 3' }],
    ['id', { conflictRetries: -1 }],
  ]) {
    assert.throws(() => quiver.mergeCommand('s', on, options), quiver.InvalidArgument, JSON.stringify([on, options]));
  }
  assert.throws(() => quiver.mergeCommand('s', 'id', { when_matched: 'delete' }), /unknown merge option\(s\): when_matched/);
  assert.throws(() => quiver.mergeCommand('s', 5), TypeError);
  assert.throws(() => quiver.mergeCommand('s', ['id', '']), TypeError);
  assert.throws(() => quiver.mergeCommand('s', 'id', { conflictRetries: 1.5 }), TypeError);
  assert.throws(() => quiver.mergeCommand('s', 'id', { matchedCondition: 1 }), TypeError);
  assert.throws(() => quiver.mergeCommand('', 'id'), TypeError);
});

test('backfill commands: exactly dataset and backfill, add_columns by default', () => {
  assert.deepEqual(quiver.backfillCommand('s'), { dataset: 's', backfill: 'add_columns' });
  assert.deepEqual(quiver.backfillCommand('s', undefined), { dataset: 's', backfill: 'add_columns' });
  const update = quiver.backfillCommand('s', 'update_columns');
  assert.deepEqual(update, { dataset: 's', backfill: 'update_columns' });
  // the descriptor's bytes: the server refuses any other key
  assert.equal(JSON.stringify(update), '{"dataset":"s","backfill":"update_columns"}');
  for (const mode of ['explode', 'add_column', 'ADD_COLUMNS', '', 'append', 'merge']) {
    assert.throws(() => quiver.backfillCommand('s', mode), (e) => e instanceof quiver.InvalidArgument && e.grpcCode === null
      && /add_columns, update_columns/.test(e.message), mode);
  }
  for (const mode of [null, 5, true, ['add_columns'], { backfill: 'add_columns' }]) {
    assert.throws(() => quiver.backfillCommand('s', mode), TypeError, JSON.stringify(mode));
  }
  assert.throws(() => quiver.backfillCommand('', 'add_columns'), TypeError);
  assert.throws(() => quiver.backfillCommand(5), TypeError);
  assert.throws(() => quiver.backfillCommand(), TypeError);
});

test('Flight location URIs', () => {
  assert.deepEqual(parseUri('grpc://127.0.0.1:8815'), { target: '127.0.0.1:8815', tls: false });
  assert.deepEqual(parseUri('grpc+tcp://h:1'), { target: 'h:1', tls: false });
  assert.deepEqual(parseUri('grpc+tls://[::1]:443/'), { target: '[::1]:443', tls: true });
  assert.throws(() => parseUri('http://h:1'), quiver.InvalidArgument);
  assert.throws(() => parseUri('h:1'), quiver.InvalidArgument);
  assert.equal(new quiver.Client('h:1').uri, 'grpc://h:1');
  assert.throws(() => new quiver.Client('grpc://h:1', { username: 'u' }), TypeError);
  assert.throws(() => new quiver.Client('grpc://h:1', { token: 't', username: 'u', password: 'p' }), TypeError);
  assert.throws(() => new quiver.Client('grpc://h:1', { certChain: 'x' }), TypeError);
});

test('mapBounded keeps order, never runs more than its limit, and stops at the first failure', async () => {
  let running = 0;
  let peak = 0;
  const delays = [30, 5, 20, 1, 15, 2, 9, 4, 12, 3];
  const results = await mapBounded(delays, 3, async (ms, i) => {
    running++;
    peak = Math.max(peak, running);
    await new Promise((r) => setTimeout(r, ms));
    running--;
    return i * 10;
  });
  assert.deepEqual(results, delays.map((_, i) => i * 10));
  assert.equal(peak, 3);

  const started = [];
  await assert.rejects(
    mapBounded([0, 1, 2, 3, 4, 5, 6, 7], 2, async (x, _i, state) => {
      started.push(x);
      await new Promise((r) => setTimeout(r, 5));
      if (x === 1) throw new Error('endpoint 1 failed');
      assert.equal(typeof state.stopped, 'boolean');
      return x;
    }),
    /endpoint 1 failed/,
  );
  assert.ok(started.length < 8, `started ${started}`);
});

const CAT = new arrow.Dictionary(new arrow.Utf8(), new arrow.Int32());

function dictTable(words, n, start) {
  const ids = BigInt64Array.from({ length: n }, (_, i) => BigInt(start + i) * 3_000_000_000n);
  const cats = arrow.vectorFromArray(
    Array.from({ length: n }, (_, i) => (i % 7 === 0 ? null : words[i % words.length])),
    CAT,
  );
  return new arrow.Table({ id: arrow.makeVector(ids), cat: cats });
}

test('uploads cut into messages re-frame into the same table, dictionaries replaced per batch', async () => {
  const first = dictTable(['a', 'b'], 100_000, 0); // more than one 64K-row upload batch
  const second = dictTable(['c', 'd', 'e'], 10, 100_000);
  const table = new arrow.Table([...first.batches, ...second.batches]);
  const messages = [];
  for await (const m of uploadMessages(table)) messages.push(m);
  const kinds = messages.map((m) => m.headerType);
  assert.equal(kinds[0], ipc.HEADER.Schema);
  assert.equal(kinds.filter((k) => k === ipc.HEADER.RecordBatch).length, 3); // 65536 + 34464 + 10
  assert.ok(kinds.filter((k) => k === ipc.HEADER.DictionaryBatch).length >= 2);
  for (const m of messages) assert.equal(ipc.messageInfo(m.header).bodyLength, m.body.byteLength);
  const bytes = Buffer.concat([...messages.flatMap((m) => ipc.frameMessage(m.header, m.body)), ipc.endOfStream()]);
  const back = arrow.tableFromIPC(bytes);
  assert.equal(back.numRows, table.numRows);
  assert.deepEqual(back.getChild('cat').toArray(), table.getChild('cat').toArray());
  assert.deepEqual(Array.from(back.getChild('id')), Array.from(table.getChild('id')));
  assert.equal(back.getChild('id').get(100_009), 100_009n * 3_000_000_000n);
});

test('the message cutter takes bytes in any chunking', () => {
  const table = dictTable(['x', 'y'], 50, 0);
  const bytes = arrow.tableToIPC(table, 'stream');
  const whole = new ipc.MessageCutter().push(bytes);
  const cutter = new ipc.MessageCutter();
  const pieces = [];
  for (let i = 0; i < bytes.length; i += 7) pieces.push(...cutter.push(bytes.subarray(i, i + 7)));
  assert.equal(pieces.length, whole.length);
  assert.equal(whole.length, 3); // schema, dictionary, batch: the end marker is no message
  pieces.forEach((m, i) => {
    assert.deepEqual(m.header, whole[i].header);
    assert.deepEqual(m.body, whole[i].body);
  });
});

test('an empty table uploads its schema alone; objects of another Arrow copy are refused clearly', async () => {
  const schema = new arrow.Schema([new arrow.Field('a', new arrow.Int64(), true)]);
  const messages = [];
  for await (const m of uploadMessages(new arrow.Table(schema))) messages.push(m);
  assert.deepEqual(messages.map((m) => m.headerType), [ipc.HEADER.Schema]);
  const foreign = { schema: { fields: [] }, batches: [] };
  await assert.rejects(async () => {
    for await (const m of uploadMessages(foreign)) void m;
  }, /another copy of apache-arrow/);
  await assert.rejects(async () => {
    for await (const m of uploadMessages([])) void m;
  }, /empty iterable/);
});

test('the FlightInfo schema decodes from its IPC encapsulation', () => {
  const table = dictTable(['x'], 3, 0);
  const [schemaMessage] = new ipc.MessageCutter().push(arrow.tableToIPC(table, 'stream'));
  const encapsulated = Buffer.concat(ipc.frameMessage(schemaMessage.header, schemaMessage.body));
  const schema = ipc.decodeSchema(encapsulated);
  assert.deepEqual(schema.fields.map((f) => `${f.name}:${f.type}`), ['id:Int64', 'cat:Dictionary<Int32, Utf8>']);
  assert.equal(ipc.decodeSchema(Buffer.alloc(0)), null);
});

test('a stream broken by Unavailable resumes at the next location, each row once', async () => {
  const batch = (from, n) => new arrow.Table({ id: arrow.makeVector(BigInt64Array.from({ length: n }, (_, i) => BigInt(from + i))) }).batches[0];
  const all = [batch(0, 3), batch(3, 4), batch(7, 2), batch(9, 5)];
  class Flaky extends quiver.Client {
    constructor() {
      super('grpc://primary:1');
      this.opened = [];
    }
    async _openEndpoint(endpoint, exclude) {
      const uri = this._locations(endpoint).find((u) => !exclude.includes(u));
      this.opened.push(uri);
      // replica a breaks after 2 batches; replica b sends other cuts of the same rows, then breaks too
      const plan = { 'grpc://a:1': [all[0], all[1], 'break'], 'grpc://b:1': [batch(0, 5), batch(5, 5), 'break'] }[uri] || all;
      async function* reader() {
        for (const b of plan) {
          if (b === 'break') throw new quiver.Unavailable('the server shut down during the stream; retry the ticket');
          yield b;
        }
      }
      return { reader: reader(), call: { cancel() {} }, box: { error: null }, uri };
    }
  }
  const client = new Flaky();
  const endpoint = { ticket: Buffer.from('t'), locations: ['grpc://a:1', '', 'grpc://b:1'] };
  assert.deepEqual(client._locations(endpoint), ['grpc://a:1', 'grpc://primary:1', 'grpc://b:1']);
  const ids = [];
  const tricky = { ...endpoint, locations: ['grpc://a:1', 'grpc://b:1'] };
  for await (const b of client.endpointBatches(tricky)) ids.push(...Array.from(b.getChild('id')));
  assert.deepEqual(ids, Array.from({ length: 14 }, (_, i) => BigInt(i)));
  assert.deepEqual(client.opened, ['grpc://a:1', 'grpc://b:1', 'grpc://primary:1']);
  const hopeless = new Flaky();
  const only = { ticket: Buffer.from('t'), locations: ['grpc://a:1'] };
  hopeless._locations = () => ['grpc://a:1'];
  await assert.rejects(async () => {
    for await (const b of hopeless.endpointBatches(only)) void b;
  }, quiver.Unavailable);
  client.close();
  hopeless.close();
});

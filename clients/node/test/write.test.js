'use strict';
// Writes through the plain server of tests/node: create, append, overwrite, staged puts with
// commit / abort / idempotency keys, and a commit conflict. Each dataset the pytest side
// checks is left with the table written (as an IPC stream in `writtenDir`), which pylance
// must read back equal.

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { Client, CommitConflict, AlreadyExists, NotFound, arrow } = require('../src');
const { serverConfig, SKIP, assertTablesEqual } = require('./helpers');

const config = serverConfig();

// One set of type objects, so that tables built apart share one schema.
const TYPES = {
  id: new arrow.Int64(),
  big: new arrow.Int64(),
  ubig: new arrow.Uint64(),
  n: new arrow.Int32(),
  f: new arrow.Float64(),
  s: new arrow.Utf8(),
  cat: new arrow.Dictionary(new arrow.Utf8(), new arrow.Int32()),
  flag: new arrow.Bool(),
  day: new arrow.DateDay(),
  ts: new arrow.TimestampMicrosecond('UTC'),
  items: new arrow.List(new arrow.Field('item', new arrow.Int32(), true)),
  point: new arrow.Struct([new arrow.Field('a', new arrow.Int32(), true), new arrow.Field('b', new arrow.Utf8(), true)]),
  vec: new arrow.FixedSizeList(4, new arrow.Field('item', new arrow.Float32(), true)),
};

/** `n` rows from `start`: nulls in every nullable column, 64-bit extremes, unicode, nesting. */
function rows(start, n, words) {
  const at = (f) => Array.from({ length: n }, (_, k) => f(start + k, k));
  const columns = {
    id: at((i) => BigInt(i)),
    big: at((i, k) => (k === 0 ? 2n ** 63n - 1n : k === 1 ? -(2n ** 63n) : i % 9 === 0 ? null : BigInt(i) * 1_000_000_007n * (i % 2 ? -1n : 1n))),
    ubig: at((i) => 2n ** 64n - 1n - BigInt(i)),
    n: at((i) => (i % 10 === 3 ? null : (i * 37) % 1000)),
    f: at((i) => (i % 8 === 1 ? null : i / 4)),
    s: at((i) => (i % 6 === 5 ? null : `ü${i}日${'x'.repeat(i % 5)}`)),
    cat: at((i) => (i % 7 === 0 ? null : words[i % words.length])),
    flag: at((i) => (i % 11 === 0 ? null : i % 2 === 0)),
    day: at((i) => new Date(Date.UTC(2020, 0, 1 + (i % 1000)))),
    ts: at((i) => (i % 12 === 0 ? null : Date.UTC(2026, 0, 1) + i * 1000)),
    items: at((i) => (i % 5 === 0 ? null : Array.from({ length: i % 4 }, (_, j) => (j === 1 ? null : i + j)))),
    point: at((i) => (i % 13 === 0 ? null : { a: i % 100, b: i % 3 ? `p${i}` : null })),
    vec: at((i) => (i % 17 === 0 ? null : [i, i + 0.5, -i, 0.25])),
  };
  return new arrow.Table(
    Object.fromEntries(Object.entries(columns).map(([k, v]) => [k, arrow.vectorFromArray(v, TYPES[k])])),
  );
}

/** `n` rows of an id and a 4-value vector spread over the sphere (a seeded sequence). */
function vectorRows(n) {
  let seed = 7;
  const next = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  const vec = Array.from({ length: n }, () => [next(), next(), next(), next()]);
  return new arrow.Table({
    id: arrow.vectorFromArray(Array.from({ length: n }, (_, i) => BigInt(i)), new arrow.Int64()),
    v: arrow.vectorFromArray(vec, new arrow.FixedSizeList(4, new arrow.Field('item', new arrow.Float32(), true))),
  });
}

function concat(...tables) {
  return new arrow.Table(tables.flatMap((t) => t.batches));
}

function leave(name, table) {
  fs.writeFileSync(path.join(config.writtenDir, `${name}.arrows`), arrow.tableToIPC(table, 'stream'));
}

describe('writes', { skip: !config && SKIP }, () => {
  let client;
  before(async () => {
    client = await Client.connect(config.uri, { timeoutMs: 120_000 });
  });
  after(() => client && client.close());

  test('create and append (100,000 rows, several upload batches), read back equal', async () => {
    const first = rows(0, 100_000, ['alpha', 'beta', 'gamma']);
    const second = rows(100_000, 2_000, ['delta', 'alpha']); // another dictionary
    assert.deepEqual(await client.write('node_created', first, { mode: 'create' }), { version: 1, rows: 100_000 });
    await assert.rejects(client.write('node_created', first, { mode: 'create' }), AlreadyExists);
    const appended = await client.write('node_created', second.batches); // default mode: append
    assert.deepEqual(appended, { version: 2, rows: 2_000 });
    const all = concat(first, second);
    const back = await client.read('node_created');
    assert.equal(back.numRows, 102_000);
    assert.equal(back.getChild('big').get(0), 2n ** 63n - 1n);
    assert.equal(back.getChild('cat').get(100_001), 'alpha');
    assertTablesEqual(back, all, 'node_created');
    const v1 = await client.read('node_created', { version: 1, columns: ['id', 'cat'] });
    assert.equal(v1.numRows, 100_000);
    leave('node_created', all);
  });

  test('overwrite replaces the rows in a new version', async () => {
    const before = rows(0, 10, ['a']);
    const after = rows(500, 25, ['b', 'c']);
    await client.write('node_overwritten', before, { mode: 'create' });
    assert.deepEqual(await client.write('node_overwritten', after, { mode: 'overwrite' }), { version: 2, rows: 25 });
    assertTablesEqual(await client.read('node_overwritten'), after, 'overwritten');
    assertTablesEqual(await client.read('node_overwritten', { version: 1 }), before, 'version 1');
    leave('node_overwritten', after);
  });

  test('a write, an update and a delete repeated with their idempotency keys commit once', async () => {
    const first = rows(0, 20, ['a']);
    assert.deepEqual(await client.write('node_keyed', first, { mode: 'create', idempotencyKey: 'c-1' }), { version: 1, rows: 20 });
    const again = await client.write('node_keyed', first, { mode: 'create', idempotencyKey: 'c-1' });
    assert.deepEqual(again, { version: 1, rows: 20, duplicate: true });
    const more = rows(20, 5, ['b']);
    assert.equal((await client.write('node_keyed', more, { idempotencyKey: 'a-1' })).version, 2);
    assert.deepEqual(await client.write('node_keyed', more, { idempotencyKey: 'a-1' }), { version: 2, rows: 5, duplicate: true });
    const updated = await client.update('node_keyed', { n: 'n + 1000' }, 'id < 3', { idempotencyKey: 'u-1' });
    assert.deepEqual(await client.update('node_keyed', { n: 'n + 1000' }, 'id < 3', { idempotencyKey: 'u-1' }), { version: updated.version, duplicate: true });
    const deleted = await client.delete('node_keyed', 'id >= 20', { idempotencyKey: 'd-1' });
    assert.deepEqual(await client.delete('node_keyed', 'id >= 20', { idempotencyKey: 'd-1' }), { version: deleted.version, duplicate: true });
    const back = await client.read('node_keyed');
    assert.equal(back.numRows, 20);
    const n = new Map(back.toArray().map((r) => [r.id, r.n]));
    for (let i = 0n; i < 3n; i += 1n) {
      const original = first.toArray().find((r) => r.id === i).n;
      assert.equal(n.get(i), original === null ? null : original + 1000); // once, not twice
    }
    await assert.rejects(client.write('node_keyed', more, { idempotencyKey: '' }), TypeError);
  });

  test('staged puts become visible at commit only; keys commit once; abort removes files', async () => {
    const a = rows(0, 300, ['x']);
    const b = rows(300, 200, ['y']);
    const c = rows(500, 100, ['z']);
    const created = await client.stage('node_staged', a, { mode: 'create' });
    assert.ok(created.length >= 1 && created.every((f) => f.startsWith('qf1.')));
    assert.equal((await client.datasets()).includes('node_staged'), false);
    assert.deepEqual(await client.commit('node_staged', created, { operation: 'create' }), { version: 1, rows: 300 });
    const more = await client.stage('node_staged', b);
    assert.equal((await client.read('node_staged')).numRows, 300); // invisible until committed
    const committed = await client.commit('node_staged', more, { idempotencyKey: 'node-job-1', readVersion: 1 });
    assert.equal(committed.version, 2);
    const again = await client.commit('node_staged', more, { idempotencyKey: 'node-job-1' });
    assert.equal(again.duplicate, true);
    const dropped = await client.stage('node_staged', c);
    const aborted = await client.abort('node_staged', dropped);
    assert.ok(aborted.removed_files >= 1, JSON.stringify(aborted));
    const all = concat(a, b);
    assertTablesEqual(await client.read('node_staged'), all, 'staged');
    assert.equal((await client.describe('node_staged')).version, 2);
    leave('node_staged', all);
  });

  test('a table without rows creates a dataset of its schema only', async () => {
    const schema = rows(0, 1, ['a']).schema;
    assert.deepEqual(await client.write('node_empty', new arrow.Table(schema), { mode: 'create' }), { version: 1, rows: 0 });
    const back = await client.read('node_empty');
    assert.equal(back.numRows, 0);
    assert.deepEqual(back.schema.fields.map((f) => `${f.name}:${f.type}`), schema.fields.map((f) => `${f.name}:${f.type}`));
    const batches = [];
    for await (const b of client.stream('node_empty')) batches.push(b);
    assert.equal(batches.length, 0);
  });

  test('a commit that lost to a concurrent overwrite is a CommitConflict with the winner', async () => {
    await client.write('node_conflict', rows(0, 20, ['a']), { mode: 'create' });
    const readVersion = (await client.describe('node_conflict')).version;
    const staged = await client.stage('node_conflict', rows(100, 5, ['b']));
    const won = await client.write('node_conflict', rows(0, 5, ['c']), { mode: 'overwrite' });
    const err = await client.commit('node_conflict', staged, { readVersion }).then(
      () => assert.fail('the commit should have conflicted'),
      (e) => e,
    );
    assert.ok(err instanceof CommitConflict, `${err.name}: ${err.message}`);
    assert.equal(err.code, 'commit_conflict');
    assert.equal(err.retryable, false);
    assert.equal(err.version, won.version);
    assert.equal((await client.read('node_conflict')).numRows, 5);
    await client.abort('node_conflict', staged);
  });

  test('blob columns: written, read as bytes and by byte ranges', async () => {
    const sizes = [5, 0, 100_000, 5_000_000];
    const values = sizes.map((n, i) => Buffer.alloc(n, 65 + i));
    values.splice(1, 0, null); // a null blob
    const blobField = new arrow.Field('b', new arrow.LargeBinary(), true, new Map([['lance-encoding:blob', 'true']]));
    const table = new arrow.Table({
      id: arrow.vectorFromArray(values.map((_, i) => BigInt(i)), new arrow.Int64()),
      b: arrow.vectorFromArray(values, blobField.type),
    });
    const withMeta = new arrow.Table(new arrow.Schema([table.schema.fields[0], blobField]), table.batches.map(
      (batch) => new arrow.RecordBatch(new arrow.Schema([table.schema.fields[0], blobField]), batch.data),
    ));
    await client.write('node_blobs', withMeta, { mode: 'create' });
    const blobs = await client.takeBlobs('node_blobs', 'b', { indices: [4, 1, 0] });
    assert.equal(blobs[1], null);
    assert.equal(blobs[0].size, 5_000_000);
    assert.deepEqual(await blobs[0].read(4_999_990), Buffer.alloc(10, 68));
    assert.deepEqual(await blobs[2].readAll(), Buffer.from('AAAAA'));
    const whole = await client.readBlobs('node_blobs', 'b', { indices: [3, 2] });
    assert.deepEqual(whole.map(([, data]) => data && data.length), [100_000, 0]);
    const bytes = await client.read('node_blobs', { columns: ['b'], blobHandling: 'all_binary' });
    assert.deepEqual(Array.from(bytes.getChild('b'), (v) => v && v.length), [5, null, 0, 100_000, 5_000_000]);
    await assert.rejects(client.takeBlobs('node_blobs', 'id', { indices: [0] }), (e) => e.grpcCode === 3 && /not a blob column/.test(e.message));
    await assert.rejects(blobs[0].read(0, 5_000_001), RangeError);
  });

  test('a branch: written and read through a branch view, the main line untouched', async () => {
    const base = rows(0, 20, ['a']);
    await client.write('node_branched', base, { mode: 'create' });
    assert.deepEqual(await client.createBranch('node_branched', 'dev'), { name: 'dev', version: 1 });
    const dev = client.branch('dev');
    assert.deepEqual(await dev.write('node_branched', rows(20, 5, ['b'])), { version: 2, rows: 5 });
    assert.deepEqual(await dev.delete('node_branched', 'id < 3'), { version: 3, deleted_rows: 3 });
    const onDev = await dev.read('node_branched', { columns: ['id'] });
    assert.deepEqual(Array.from(onDev.getChild('id')), Array.from({ length: 22 }, (_, k) => BigInt(k + 3)));
    assert.equal((await client.read('node_branched', { branch: 'dev', version: 2 })).numRows, 25);
    assert.equal((await dev.describe('node_branched')).branch, 'dev');
    assertTablesEqual(await client.read('node_branched'), base, 'the main line');
    const listed = (await client.branches('node_branched')).map((b) => [b.name, b.parent_branch, b.parent_version]);
    assert.deepEqual(listed, [['dev', null, 1]]);
    assert.deepEqual(await client.deleteBranch('node_branched', 'dev'), { name: 'dev', deleted: true });
    await assert.rejects(dev.read('node_branched'), NotFound);
    leave('node_branched', base);
  });

  test('tags, delete, restore and schema evolution through actions', async () => {
    await client.write('node_ops', rows(0, 50, ['a', 'b']), { mode: 'create' });
    assert.deepEqual(await client.createTag('node_ops', 'start'), { tag: 'start', version: 1 });
    assert.deepEqual(await client.delete('node_ops', 'id < 10'), { version: 2, deleted_rows: 10 });
    assert.equal((await client.addColumns('node_ops', { n2: 'n * 2' })).version, 3);
    const now = await client.read('node_ops', { columns: ['id', 'n', 'n2'] });
    assert.equal(now.numRows, 40);
    assert.equal(now.getChild('id').get(0), 10n);
    assert.equal(now.getChild('n2').get(0), now.getChild('n').get(0) * 2);
    assert.equal((await client.read('node_ops', { tag: 'start' })).numRows, 50);
    assert.equal((await client.restore('node_ops', 'start')).version, 4);
    assert.equal((await client.read('node_ops')).numRows, 50);
    assert.deepEqual(Object.keys(await client.tags('node_ops')), ['start']);
    assert.deepEqual(await client.action('delete_tag', { dataset: 'node_ops', tag: 'start' }), { tag: 'start', deleted: true });
    assert.deepEqual(await client.createIndex('node_ops', 'id', 'BTREE'), { version: 5, name: 'id_idx' });
    assert.deepEqual(await client.createIndex('node_ops', 'n', 'BITMAP', { name: 'by_n' }), { version: 6, name: 'by_n' });
    const indexed = await client.read('node_ops', { filter: 'id = 20', columns: ['id'] });
    assert.equal(indexed.numRows, 1);
    assert.deepEqual(await client.optimizeIndices('node_ops'), { version: 6, optimized: false });
    await client.write('node_ops', rows(100, 10, ['a', 'b']));
    assert.deepEqual(await client.optimizeIndices('node_ops', { numIndicesToMerge: 0 }), { version: 8, optimized: true });
    assert.deepEqual(await client.dropIndex('node_ops', 'by_n'), { version: 9 });
    await client.write('node_vec', vectorRows(4000), { mode: 'create' });
    const stages = [];
    const built = await client.createIndex('node_vec', 'v', 'IVF_PQ', {
      numPartitions: 4, numSubVectors: 2, metric: 'cosine', onProgress: (s) => stages.push(s),
    });
    assert.deepEqual(built, { version: 2, name: 'v_idx' });
    assert.deepEqual([...new Set(stages.map((s) => s.stage))].slice(0, 3), ['sample', 'train', 'encode']);
    const trained = stages.filter((s) => s.stage === 'train').at(-1);
    assert.deepEqual([trained.done, trained.total], [3, 3]); // the centroids and 2 codebooks
    assert.equal(stages.at(-1).stage, 'commit');
    const encoded = stages.filter((s) => s.stage === 'encode').at(-1);
    assert.equal(encoded.done, 4000);
    assert.equal((await client.createIndex('node_vec', 'v', 'IVF_FLAT', { name: 'flat', ivfCentroids: [[1, 0, 0, 0], [0, 1, 0, 0]] })).name, 'flat');
    await assert.rejects(client.createIndex('node_vec', 'v', 'IVF_PQ', { onProgress: () => {} }), (e) => e.grpcCode === 3 && /num_sub_vectors/.test(e.message));
    await assert.rejects(client.createIndex('node_vec', 'v', 'IVF_PQ', { bogus: 1 }), TypeError);
    // IVF_RQ options reach the server (which refuses 4 dimensions: they must be multiples of 8)
    await assert.rejects(client.createIndex('node_vec', 'v', 'IVF_RQ', { numBits: 3, rabitqModel: '{}' }), (e) => e.grpcCode === 3 && /divisible by 8 for IVF_RQ/.test(e.message));
    // an HNSW form with its graph options, searched with ef
    await client.write('node_graph', vectorRows(1000), { mode: 'create' });
    const hnsw = await client.createIndex('node_graph', 'v', 'IVF_HNSW_SQ', { numPartitions: 2, m: 8, efConstruction: 40, maxLevel: 4 });
    assert.deepEqual(hnsw, { version: 2, name: 'v_idx' });
    const found = await client.read('node_graph', { nearest: { column: 'v', q: [1, 0, 0, 0], k: 5, ef: 20 } });
    assert.equal(found.numRows, 5);
    await assert.rejects(client.read('node_graph', { nearest: { column: 'v', q: [1, 0, 0, 0], k: 5, ef: 2 } }), (e) => e.grpcCode === 3 && /ef/.test(e.message));
    assert.equal((await client.optimizeIndices('node_vec', { retrain: true })).optimized, true);
    assert.equal((await client.dropDataset('node_ops')).dropped, true);
  });
});

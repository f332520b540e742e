'use strict';
// Row changes through the plain server of tests/node: `update` (an action), `merge` (a
// merge DoPut): upserts, partial-schema updates, conditional updates, matched deletes,
// replace-range merges, the primary key as default keys, and `backfill` (a DoPut of rows
// naming their `_rowaddr`): a computed column added, values corrected in place; and
// refusals (an ambiguous source, `fail` on a match, unknown columns, addresses of no live
// row) that commit nothing. After every step the whole table is compared with the rows
// expected (in `id` order: an update or a merge rewrites the rows it changes into new
// fragments); the final tables are left in `writtenDir` for pylance.

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const { Client, InvalidArgument, arrow } = require('../src');
const { serverConfig, SKIP, normalize } = require('./helpers');

const config = serverConfig();

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
const COLUMNS = Object.keys(TYPES); // a dataset's columns as `row` gives them
TYPES.score = new arrow.Float64(); // the column a backfill adds
TYPES._rowaddr = new arrow.Uint64();
const WORDS = ['alpha', 'beta', 'gamma', 'delta'];

/** Row `i` of variant `v` (0: as created; others: the values a change brings), with nulls. */
function row(i, v = 0) {
  const b = BigInt(i);
  return {
    id: b,
    big: i === 1 ? 2n ** 63n - 1n : i === 2 ? -(2n ** 63n) : i % 9 === 0 ? null : b * 1_000_000_007n * (v % 2 ? -1n : 1n),
    ubig: 2n ** 64n - 1n - b - BigInt(v),
    n: i % 10 === 3 ? null : (i * 37 + v * 101) % 1000,
    f: i % 8 === 1 ? null : i / 4 + v,
    s: i % 6 === 5 ? null : `ü${i}日v${v}`,
    cat: i % 7 === 0 ? null : WORDS[(i + v) % WORDS.length],
    flag: i % 11 === 0 ? null : (i + v) % 2 === 0,
    day: new Date(Date.UTC(2020, 0, 1 + ((i + v) % 1000))),
    ts: i % 12 === 0 ? null : Date.UTC(2026, 0, 1) + i * 1000 + v,
    items: i % 5 === 0 ? null : Array.from({ length: (i + v) % 4 }, (_, j) => (j === 1 ? null : i + j + v)),
    point: i % 13 === 0 ? null : { a: (i + v) % 100, b: i % 3 ? `p${i}v${v}` : null },
    vec: i % 17 === 0 ? null : [i, i + 0.5, -i, v],
  };
}

function range(start, end) {
  return Array.from({ length: end - start }, (_, k) => start + k);
}

/** An Arrow table of plain rows, in the columns `names` (default: those of `row`). */
function build(rows, names = COLUMNS) {
  return new arrow.Table(Object.fromEntries(names.map((k) => [k, arrow.vectorFromArray(rows.map((r) => r[k]), TYPES[k])])));
}

const byId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** The rows of a table as comparable plain objects, in `id` order. */
function sortedRows(table) {
  const names = table.schema.fields.map((f) => f.name);
  const columns = names.map((n) => table.getChild(n));
  const out = Array.from({ length: table.numRows }, (_, j) => ({
    key: BigInt(table.getChild('id').get(j)),
    row: Object.fromEntries(names.map((n, c) => [n, normalize(columns[c].get(j))])),
  }));
  out.sort((a, b) => byId({ id: a.key }, { id: b.key }));
  return out.map((x) => x.row);
}

/**
 * The dataset as the server reads it is `expected` (plain rows, in the columns `names`):
 * schema, then row by row.
 */
async function assertRows(client, dataset, expected, label, names = COLUMNS) {
  const got = await client.read(dataset);
  const want = build([...expected].sort(byId), names);
  const fields = (t) => t.schema.fields.map((f) => `${f.name}: ${f.type} ${f.nullable ? 'null' : 'not null'}`);
  assert.deepEqual(fields(got), fields(want), `${label}: schema`);
  const a = sortedRows(got);
  const e = sortedRows(want);
  assert.deepEqual(a.map((r) => r.id), e.map((r) => r.id), `${label}: ids`);
  for (let j = 0; j < e.length; j++) assert.deepEqual(a[j], e[j], `${label}: row id=${e[j].id}`);
  return want;
}

function leave(name, table) {
  fs.writeFileSync(path.join(config.writtenDir, `${name}.arrows`), arrow.tableToIPC(table, 'stream'));
}

/** A refusal of the server (not of the client's own checks) that commits nothing. */
async function assertRefused(client, dataset, call, pattern, expected, names = COLUMNS) {
  const before = (await client.describe(dataset)).version;
  const err = await call().then(
    () => assert.fail('the server should have refused'),
    (e) => e,
  );
  assert.ok(err instanceof InvalidArgument, `${err.name}: ${err.message}`);
  assert.equal(err.code, 'invalid_argument');
  assert.equal(err.details.code, 'invalid_argument', 'the code came from the server');
  assert.notEqual(err.grpcCode, null, 'a server error, not a client-side check');
  assert.match(err.message, pattern);
  assert.equal((await client.describe(dataset)).version, before, 'nothing committed');
  await assertRows(client, dataset, expected, `after the refused ${pattern}`, names);
}

describe('row changes', { skip: !config && SKIP }, () => {
  let client;
  before(async () => {
    client = await Client.connect(config.uri, { timeoutMs: 120_000 });
  });
  after(() => client && client.close());

  test('update sets SQL expressions on the rows matching where, or on every row', async () => {
    const ds = 'node_updated';
    await client.write(ds, build(range(0, 25).map((i) => row(i))), { mode: 'create' });
    await client.write(ds, build(range(25, 40).map((i) => row(i)))); // a second fragment
    let expected = range(0, 40).map((i) => row(i));

    assert.deepEqual(await client.update(ds, { n: 'n * 2', s: "'upd'" }, 'id % 4 = 1'), { version: 3, updated_rows: 10 });
    expected = expected.map((r) => (r.id % 4n === 1n ? { ...r, n: r.n === null ? null : r.n * 2, s: 'upd' } : r));
    await assertRows(client, ds, expected, 'update where');

    const answer = await client.update(ds, new Map([['f', 'f + 1'], ['flag', 'NOT flag']]));
    assert.deepEqual(answer, { version: 4, updated_rows: 40 });
    expected = expected.map((r) => ({ ...r, f: r.f === null ? null : r.f + 1, flag: r.flag === null ? null : !r.flag }));
    await assertRows(client, ds, expected, 'update every row');

    assert.equal((await client.update(ds, { big: 'big - 1' }, 'id < 0')).updated_rows, 0);
    await assertRows(client, ds, expected, 'update of no row');
    await assertRefused(client, ds, () => client.update(ds, { nope: '1' }), /nope/, expected);
    await assertRefused(client, ds, () => client.update(ds, { n: '1' }, 'nope > 1'), /nope/, expected);
    // refused before any call
    await assert.rejects(client.update(ds, {}), (e) => e instanceof InvalidArgument && e.grpcCode === null);
    await assert.rejects(client.update(ds, { n: 1 }), TypeError);
    leave(ds, build(expected.sort(byId)));
  });

  test('merge: upsert, partial update, conditional update, matched delete, replace a range', async () => {
    const ds = 'node_merged';
    await client.write(ds, build(range(0, 15).map((i) => row(i))), { mode: 'create' });
    await client.write(ds, build(range(15, 30).map((i) => row(i))));
    let expected = new Map(range(0, 30).map((i) => [i, row(i)]));
    const rows = () => [...expected.values()];

    // the defaults upsert: 10 rows updated, 5 inserted
    let answer = await client.merge(ds, build(range(20, 35).map((i) => row(i, 1))), 'id');
    assert.deepEqual(answer, { version: 3, rows: 15, inserted_rows: 5, updated_rows: 10, deleted_rows: 0 });
    for (const i of range(20, 35)) expected.set(i, row(i, 1));
    await assertRows(client, ds, rows(), 'upsert');

    // a source of some columns: those set on the matched rows, the others kept; 50 not inserted
    const partial = [0, 1, 2, 3, 50].map((i) => ({ id: BigInt(i), n: i === 2 ? null : 900 + i, s: `partial ${i}` }));
    answer = await client.merge(ds, build(partial, ['id', 'n', 's']), ['id'], { whenNotMatched: null });
    assert.deepEqual(answer, { version: 4, rows: 5, inserted_rows: 0, updated_rows: 4, deleted_rows: 0 });
    for (const p of partial.slice(0, 4)) expected.set(Number(p.id), { ...expected.get(Number(p.id)), n: p.n, s: p.s });
    await assertRows(client, ds, rows(), 'partial-schema update');

    // only the matched rows where the condition holds are updated; none inserted
    answer = await client.merge(ds, build(range(4, 10).map((i) => row(i, 2))), 'id', {
      matchedCondition: 'target.id % 2 = 0 AND source.ubig < target.ubig',
      whenNotMatched: null,
    });
    assert.deepEqual(answer, { version: 5, rows: 6, inserted_rows: 0, updated_rows: 3, deleted_rows: 0 });
    for (const i of [4, 6, 8]) expected.set(i, row(i, 2));
    await assertRows(client, ds, rows(), 'conditional update');

    // matched rows deleted; the unmatched 100 not inserted
    answer = await client.merge(ds, build([10, 11, 12, 100].map((i) => row(i, 5))), 'id', {
      whenMatched: 'delete',
      whenNotMatched: null,
    });
    assert.deepEqual(answer, { version: 6, rows: 4, inserted_rows: 0, updated_rows: 0, deleted_rows: 3 });
    for (const i of [10, 11, 12]) expected.delete(i);
    await assertRows(client, ds, rows(), 'matched delete');

    // replace the range 13 <= id < 20: 13 and 14 updated, 15..19 deleted, 99 inserted
    answer = await client.merge(ds, build([13, 14, 99].map((i) => row(i, 3))), 'id', {
      whenNotMatchedBySource: 'delete',
      bySourceFilter: 'id >= 13 AND id < 20',
    });
    assert.deepEqual(answer, { version: 7, rows: 3, inserted_rows: 1, updated_rows: 2, deleted_rows: 5 });
    for (const i of range(15, 20)) expected.delete(i);
    for (const i of [13, 14, 99]) expected.set(i, row(i, 3));
    await assertRows(client, ds, rows(), 'replace a range');

    // 'nothing' on a match, insert the rest
    answer = await client.merge(ds, build([0, 98].map((i) => row(i, 4))).batches, 'id', { whenMatched: 'nothing' });
    assert.deepEqual(answer, { version: 8, rows: 2, inserted_rows: 1, updated_rows: 0, deleted_rows: 0 });
    expected.set(98, row(98, 4));
    await assertRows(client, ds, rows(), 'insert if not exists');

    // refusals of the server commit nothing
    const twice = build([row(25, 6), row(40, 6), row(25, 7)]); // two source rows for target 25
    await assertRefused(client, ds, () => client.merge(ds, twice, 'id'), /Ambiguous/, rows());
    await assertRefused(client, ds, () => client.merge(ds, build([row(0, 8)]), 'id', { whenMatched: 'fail' }), /when_matched_fail/, rows());
    await assertRefused(client, ds, () => client.merge(ds, build([row(0, 8)]), ['nope']), /'nope'/, rows());
    await assertRefused(client, ds, () => client.merge(ds, build([row(0, 8)])), /primary key/, rows()); // no key
    // refused before any call
    await assert.rejects(client.merge(ds, twice, 'id', { whenMatched: 'explode' }), (e) => e instanceof InvalidArgument && e.grpcCode === null);
    await assert.rejects(client.merge(ds, twice, 'id', { whenNotMatched: 'insert' }), InvalidArgument);
    leave(ds, build(rows().sort(byId)));
  });

  test('merge without `on` joins on the unenforced primary key', async () => {
    const ds = 'node_merge_pk';
    const keyed = (table) => {
      const schema = new arrow.Schema(table.schema.fields.map((f) => (f.name === 'id'
        ? new arrow.Field('id', f.type, false, new Map([['lance-schema:unenforced-primary-key', 'true']]))
        : f)));
      return new arrow.Table(schema, table.batches.map((b) => new arrow.RecordBatch(schema, b.data)));
    };
    await client.write(ds, keyed(build(range(0, 10).map((i) => row(i)))), { mode: 'create' });
    const answer = await client.merge(ds, build(range(5, 15).map((i) => row(i, 1))));
    assert.deepEqual(answer, { version: 2, rows: 10, inserted_rows: 5, updated_rows: 5, deleted_rows: 0 });
    const expected = [...range(0, 5).map((i) => row(i)), ...range(5, 15).map((i) => row(i, 1))];
    const got = await client.read(ds);
    assert.deepEqual(sortedRows(got), sortedRows(build(expected)));
    assert.equal(got.schema.fields[0].nullable, false);
    leave(ds, build(expected));
  });

  test('backfill by _rowaddr: a computed column added, values corrected in place, bad addresses refused', async () => {
    const ds = 'node_backfilled';
    const WITH_SCORE = [...COLUMNS, 'score'];
    await client.write(ds, build(range(0, 20).map((i) => row(i))), { mode: 'create' });
    await client.write(ds, build(range(20, 35).map((i) => row(i)))); // a second fragment
    const addressOf = async () => {
      const t = await client.read(ds, { columns: ['_rowaddr', 'id'] });
      assert.equal(String(t.schema.fields[0].type), 'Uint64');
      return new Map(Array.from({ length: t.numRows }, (_, j) => [Number(t.getChild('id').get(j)), t.getChild('_rowaddr').get(j)]));
    };
    const first = await addressOf();
    // fragment id in the high 32 bits, row offset in the low 32
    for (const i of range(0, 35)) assert.equal(first.get(i), i < 20 ? BigInt(i) : (1n << 32n) + BigInt(i - 20), `_rowaddr of ${i}`);
    assert.deepEqual(await client.delete(ds, 'id = 7 OR id = 30'), { version: 3, deleted_rows: 2 });
    const expected = new Map(range(0, 35).filter((i) => i !== 7 && i !== 30).map((i) => [i, row(i)]));
    const rows = () => [...expected.values()];

    // read _rowaddr and n, compute score; rows with id % 5 = 4 are not named and get NULL
    const read = await client.read(ds, { columns: ['_rowaddr', 'n', 'id'] });
    assert.deepEqual(read.schema.fields.map((f) => f.name), ['_rowaddr', 'n', 'id']);
    assert.equal(read.numRows, 33);
    const scoreOf = (n, id) => (n === null ? null : n / 8 + Number(id));
    const named = [];
    for (let j = 0; j < read.numRows; j++) {
      const id = Number(read.getChild('id').get(j));
      assert.equal(read.getChild('_rowaddr').get(j), first.get(id), `_rowaddr of ${id} after the delete`);
      if (id % 5 !== 4) named.push({ _rowaddr: read.getChild('_rowaddr').get(j), score: scoreOf(read.getChild('n').get(j), id), id });
    }
    named.reverse(); // the server sorts the addresses itself
    const source = build(named, ['_rowaddr', 'score']);
    const half = Math.floor(named.length / 2);
    const batches = [...build(named.slice(0, half), ['_rowaddr', 'score']).batches, ...build(named.slice(half), ['_rowaddr', 'score']).batches];
    assert.deepEqual(await client.backfill(ds, batches), { version: 4, rows: named.length });
    for (const [i, r] of expected) expected.set(i, { ...r, score: i % 5 === 4 ? null : scoreOf(r.n, i) });
    assert.ok(rows().some((r) => r.score === null) && rows().some((r) => r.score !== null));
    await assertRows(client, ds, rows(), 'add_columns', WITH_SCORE);

    // correct score (NULLs included) and s on the rows with id % 3 = 0, in place
    const fixes = rows().filter((r) => r.id % 3n === 0n).map((r) => ({
      _rowaddr: first.get(Number(r.id)),
      score: -Number(r.id),
      s: r.id % 2n ? null : `fixed ${r.id}`,
    }));
    assert.ok(fixes.some((f) => expected.get(Math.abs(f.score)).score === null), 'a NULL corrected');
    const answer = await client.backfill(ds, build(fixes, ['_rowaddr', 's', 'score']), 'update_columns');
    assert.deepEqual(answer, { version: 5, rows: fixes.length, updated_rows: fixes.length });
    for (const f of fixes) {
      const i = -f.score;
      expected.set(i, { ...expected.get(i), score: f.score, s: f.s });
    }
    await assertRows(client, ds, rows(), 'update_columns', WITH_SCORE);
    const after = await addressOf();
    for (const i of expected.keys()) assert.equal(after.get(i), first.get(i), `_rowaddr of ${i} kept`);

    // refusals of the server commit nothing
    const nowhere = build([{ _rowaddr: 999n << 32n, score: 1 }], ['_rowaddr', 'score']);
    const zz = new arrow.Table({ _rowaddr: arrow.vectorFromArray([999n << 32n], new arrow.Uint64()), zz: arrow.vectorFromArray([1], new arrow.Int32()) });
    await assertRefused(client, ds, () => client.backfill(ds, zz), /not a live row/, rows(), WITH_SCORE);
    await assertRefused(client, ds, () => client.backfill(ds, nowhere, 'update_columns'), /not a live row/, rows(), WITH_SCORE);
    const deleted = build([{ _rowaddr: first.get(7), score: 7 }, { _rowaddr: first.get(8), score: 8 }], ['_rowaddr', 'score']);
    await assertRefused(client, ds, () => client.backfill(ds, deleted, 'update_columns'), /not a live row/, rows(), WITH_SCORE);
    await assertRefused(client, ds, () => client.backfill(ds, source), /already exists/, rows(), WITH_SCORE);
    // refused before any call
    await assert.rejects(client.backfill(ds, source, 'explode'), (e) => e instanceof InvalidArgument && e.grpcCode === null);
    await assert.rejects(client.backfill(ds, source, null), TypeError);
    assert.equal((await client.describe(ds)).version, 5);
    leave(ds, build(rows().sort(byId), WITH_SCORE));
  });
});

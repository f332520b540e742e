'use strict';
// Reads against the plain server of tests/node: every case compared whole with what the
// Python client read (pylance- and Quiver-written datasets, every type, versions, tags,
// as-of, filters, projections, limits), streams, and the location fallback.

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');

const { Client, NotFound, arrow } = require('../src');
const { serverConfig, SKIP, readIpc, assertTablesEqual, exactText } = require('./helpers');

const config = serverConfig();

describe('reads', { skip: !config && SKIP }, () => {
  let client;
  before(async () => {
    client = await Client.connect(config.uri, { timeoutMs: 120_000 });
  });
  after(() => client && client.close());

  for (const [name, c] of Object.entries(config ? config.cases : {})) {
    test(`${name}: ${c.dataset} ${JSON.stringify(c.options)} equals the Python client's table`, async () => {
      const expected = readIpc(c.expected);
      const table = await client.read(c.dataset, c.options);
      assert.equal(table.numRows, c.rows);
      assertTablesEqual(table, expected, name);
      for (const [column, values] of Object.entries(c.exact)) {
        assert.deepEqual(exactText(table.getChild(column)), values, `${name}: exact ${column}`);
      }
    });
  }

  test('nearest, hybrid and full-text helpers read what the search options read', async () => {
    const cases = config.cases;
    const q = cases.vectors_nearest.options.nearest.q;
    assertTablesEqual(await client.nearest('hy_docs', 'v', q, 7), readIpc(cases.vectors_nearest.expected), 'nearest');
    assertTablesEqual(
      await client.hybrid('hy_docs', 'v', q, 'apple fox', 10),
      readIpc(cases.hybrid_rrf.expected),
      'hybrid',
    );
    const linear = cases.hybrid_linear.options;
    assertTablesEqual(
      await client.hybrid('hy_docs', 'v', q, linear.fullTextQuery, 6, {
        ...linear.hybrid, nprobes: 2, filter: linear.filter, columns: linear.columns,
      }),
      readIpc(cases.hybrid_linear.expected),
      'hybrid linear',
    );
    assertTablesEqual(
      await client.fullTextSearchBatch('fts_texts', cases.texts_batch.options.fullTextQuery, 5),
      readIpc(cases.texts_batch.expected),
      'batch',
    );
    assertTablesEqual(
      await client.fullTextSearch('fts_texts', 'apple fox', 12),
      readIpc(cases.texts_search.expected),
      'search',
    );
    await assert.rejects(client.nearest('hy_docs', 'v', q, 3, { nprobe: 2 }), /unknown search option/);
    await assert.rejects(client.fullTextSearch('fts_texts', ['a']), TypeError);
  });

  test('64-bit integers stay exact BigInts, past 2^53 and at both ends of int64', async () => {
    const table = await client.read('q_sales', { columns: ['id', 'big', 'ubig'], filter: 'id < 3' });
    assert.equal(String(table.schema.fields[1].type), 'Int64');
    assert.equal(table.getChild('big').get(0), 2n ** 63n - 1n);
    assert.equal(table.getChild('big').get(1), -(2n ** 63n));
    assert.equal(table.getChild('ubig').get(0), 2n ** 64n - 1n);
    assert.equal(typeof table.getChild('id').get(2), 'bigint');
  });

  test('dictionary, nested and null values decode to Arrow JS types', async () => {
    const table = await client.read('q_sales', { filter: 'id >= 10 AND id < 14' });
    const cat = table.getChild('cat');
    assert.ok(arrow.DataType.isDictionary(cat.type));
    assert.deepEqual([...cat], ['gamma', null, 'alpha', 'beta']);
    assert.deepEqual(table.getChild('point').get(0).toJSON(), { a: 10, b: 'p10' });
    assert.equal(table.getChild('x').get(0), null); // id 10 % 5 == 0
    assert.deepEqual([...table.getChild('tags').get(1)], ['t2', 't2']);
  });

  test('parallel reads keep endpoint order and the same rows at every concurrency', async () => {
    const info = await client.flightInfo('q_sales');
    assert.ok(info.endpoints.length >= 10, `${info.endpoints.length} endpoints`);
    assert.deepEqual(info.appMetadata, { dataset: 'q_sales', version: 2 });
    assert.equal(info.totalRecords, 4000);
    const one = await client.read('q_sales', { concurrency: 1 });
    const many = await client.read('q_sales', { concurrency: 16 });
    assert.deepEqual(Array.from(many.getChild('id')), Array.from({ length: 4000 }, (_, i) => BigInt(i)));
    assertTablesEqual(many, one, 'concurrency 16 vs 1');
  });

  test('every endpoint advertises the dead replica first: reads fell back to the live one', async () => {
    const info = await client.flightInfo('pl_types');
    for (const e of info.endpoints) {
      assert.deepEqual(e.locations, [config.deadLocation, config.uri]);
      assert.ok(e.expirationTime instanceof Date && e.expirationTime > new Date());
      assert.equal(typeof e.appMetadata.fragment_id, 'number');
    }
    const batches = [];
    for await (const b of client.endpointBatches(info.endpoints[0])) batches.push(b);
    assert.equal(batches.reduce((n, b) => n + b.numRows, 0), info.endpoints[0].appMetadata.rows);
  });

  test('an endpoint whose every location is dead fails with Unavailable', async () => {
    const info = await client.flightInfo('q_sales');
    const lone = new Client(config.deadLocation, { timeoutMs: 10_000 });
    try {
      const endpoint = { ...info.endpoints[0], locations: [config.deadLocation] };
      await assert.rejects(async () => {
        for await (const b of lone.endpointBatches(endpoint)) void b;
      }, (err) => err.name === 'Unavailable' && err.message.includes(config.deadLocation));
    } finally {
      lone.close();
    }
  });

  test('stream yields the same batches as read, in order, and honours limit', async () => {
    const expected = readIpc(config.cases.sales_full.expected);
    const batches = [];
    for await (const batch of client.stream('q_sales')) {
      assert.ok(batch instanceof arrow.RecordBatch);
      batches.push(batch);
    }
    assert.ok(batches.length > 1);
    assertTablesEqual(new arrow.Table(batches), expected, 'stream');
    let rows = 0;
    let seen = 0;
    for await (const batch of client.stream('q_sales', { limit: 450, columns: ['id'] })) {
      rows += batch.numRows;
      seen++;
      assert.equal(batch.schema.fields.length, 1);
    }
    assert.equal(rows, 450);
    assert.ok(seen >= 2); // 400-row fragments: the limit cut the second endpoint's stream
  });

  test('breaking off a stream early leaves the client usable', async () => {
    for await (const batch of client.stream('q_wide')) {
      assert.ok(batch.numRows > 0);
      break;
    }
    const table = await client.read('q_sales', { columns: ['id'], limit: 5 });
    assert.deepEqual(Array.from(table.getChild('id')), [0n, 1n, 2n, 3n, 4n]);
  });

  test('batches over gRPC\'s default 4 MiB message size arrive', async () => {
    let largest = 0;
    for await (const batch of client.stream('q_wide')) {
      // the batch's body: every column's values, plus the string offsets
      const body = batch.data.children.reduce(
        (n, c) => n + c.values.byteLength + (c.valueOffsets ? c.valueOffsets.byteLength : 0),
        0,
      );
      largest = Math.max(largest, body);
    }
    assert.ok(largest > 4 * 1024 * 1024, `largest batch body ${largest}`);
  });

  test('schema, describe, versions, tags and datasets', async () => {
    const schema = await client.schema('pl_history', { tag: 'after_rename', columns: ['id', 'label'] });
    assert.deepEqual(schema.fields.map((f) => f.name), ['id', 'label']);
    const described = await client.describe('pl_history', { version: 2 });
    assert.equal(described.version, 2);
    assert.ok(described.latest_version >= 13);
    assert.ok(described.schema.some((f) => f.name === 's'));
    const versions = await client.versions('pl_history');
    assert.deepEqual(versions.map((v) => v.version), Array.from({ length: versions.length }, (_, i) => i + 1));
    const tags = await client.tags('pl_history');
    assert.equal(tags.after_rename.version, 11);
    assert.equal(tags.v2tag.version, 2);
    const names = await client.datasets();
    for (const n of ['pl_types', 'pl_history', 'q_sales', 'q_wide']) assert.ok(names.includes(n), n);
    assert.deepEqual((await client.datasets('pl_t')).sort(), ['pl_types', 'pl_types_legacy']);
    const actions = await client.listActions();
    assert.ok('commit' in actions && 'describe' in actions);
    assert.deepEqual(await client.healthcheck(), { status: 'serving' });
  });

  test('reading a dataset that does not exist is NotFound', async () => {
    await assert.rejects(client.read('no_such_dataset'), NotFound);
  });
});

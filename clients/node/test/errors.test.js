'use strict';
// Failures against the plain server of tests/node: each arrives with the gRPC status of its
// Quiver code, as the class of that code, with the server's one-line message and details.

const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');

const quiver = require('../src');
const { serverConfig, SKIP } = require('./helpers');

const { Client } = quiver;
const config = serverConfig();

async function failure(promise) {
  return promise.then(
    (value) => assert.fail(`expected a failure, got ${JSON.stringify(value)}`),
    (err) => err,
  );
}

function expectError(err, cls, pattern) {
  assert.ok(err instanceof cls, `${err && err.name}: ${err && err.message} is not ${cls.name}`);
  assert.ok(err instanceof quiver.QuiverError);
  assert.equal(err.code, cls.code);
  assert.equal(err.details.code, cls.code);
  assert.match(err.message, pattern);
  assert.ok(!err.message.includes('\n'));
  assert.ok(!err.message.includes('Detail:'), err.message);
}

describe('errors', { skip: !config && SKIP }, () => {
  let client;
  before(async () => {
    client = await Client.connect(config.uri, { timeoutMs: 60_000 });
  });
  after(() => client && client.close());

  test('every code the server sends has its class', () => {
    const known = new Set(quiver.ERROR_CLASSES.map((cls) => cls.code));
    for (const code of config.serverCodes) assert.ok(known.has(code), code);
    assert.ok(config.serverCodes.length >= 12, config.serverCodes.join());
  });

  test('the gRPC status follows the code', async () => {
    const { status } = require('@grpc/grpc-js');
    assert.equal((await failure(client.read('missing_ds'))).grpcCode, status.NOT_FOUND);
    assert.equal((await failure(client.schema('missing_ds'))).grpcCode, status.NOT_FOUND);
    assert.equal((await failure(client.read('q_sales', { filter: 'x >' }))).grpcCode, status.INVALID_ARGUMENT);
    assert.equal((await failure(client.describe('../etc'))).grpcCode, status.INVALID_ARGUMENT);
  });

  test('not_found: dataset, version, tag, action target', async () => {
    expectError(await failure(client.read('missing_ds')), quiver.NotFound, /missing_ds/);
    expectError(await failure(client.read('q_sales', { version: 999 })), quiver.NotFound, /999/);
    expectError(await failure(client.read('q_sales', { tag: 'nope' })), quiver.NotFound, /nope/);
    expectError(await failure(client.describe('missing_ds')), quiver.NotFound, /missing_ds/);
    expectError(await failure(client.schema('missing_ds')), quiver.NotFound, /missing_ds/);
  });

  test('invalid_argument: bad filter, bad column, bad name, a filter failing mid-stream', async () => {
    expectError(await failure(client.read('q_sales', { filter: 'x >' })), quiver.InvalidArgument, /filter/);
    expectError(await failure(client.read('q_sales', { columns: ['nope'] })), quiver.InvalidArgument, /nope/);
    expectError(await failure(client.read('../etc')), quiver.InvalidArgument, /name/);
    expectError(await failure(client.read('q_sales', { filter: 'id / 0 > 1' })), quiver.InvalidArgument, /./);
    const bad = quiver.arrow.tableFromArrays({ _rowid: new BigInt64Array([1n]) });
    expectError(await failure(client.write('node_reserved', bad, { mode: 'create' })), quiver.InvalidArgument, /_rowid/);
  });

  test('already_exists: a tag that exists', async () => {
    expectError(await failure(client.createTag('q_sales', 'first', 1)), quiver.AlreadyExists, /first/);
  });

  test('failed_precondition: appended rows past an overwrite, with version and operation', async () => {
    const t = quiver.arrow.tableFromArrays({ id: new BigInt64Array([1n, 2n]) });
    await client.write('node_precondition', t, { mode: 'create' });
    await client.write('node_precondition', t, { mode: 'overwrite' });
    const err = await failure(client.read('node_precondition', { appendedSince: 1 }));
    expectError(err, quiver.FailedPrecondition, /version 2/);
    assert.equal(err.details.version, 2);
    assert.equal(typeof err.details.operation, 'string');
  });

  test('unimplemented: an action the server does not have', async () => {
    expectError(await failure(client.action('no_such_action', {})), quiver.Unimplemented, /no_such_action/);
  });

  test('data_corrupt: a truncated data file names dataset and file, not the server\'s paths', async () => {
    const err = await failure(client.read('q_broken'));
    expectError(err, quiver.DataCorrupt, /q_broken/);
    assert.equal(err.details.dataset, 'q_broken');
    assert.match(String(err.details.file), /^data\//);
    assert.ok(!err.message.includes(config.writtenDir.split('/').slice(0, -1).join('/')), err.message);
  });

  test('a call past timeoutMs is DeadlineExceeded', async () => {
    const hasty = await Client.connect(config.uri, { timeoutMs: 1 }).catch((e) => e);
    if (hasty instanceof Client) {
      try {
        const err = await failure(hasty.read('q_wide'));
        assert.ok(err instanceof quiver.DeadlineExceeded, `${err.name}: ${err.message}`);
        assert.equal(err.code, 'deadline_exceeded');
      } finally {
        hasty.close();
      }
    } else {
      assert.ok(hasty instanceof quiver.DeadlineExceeded, `${hasty.name}: ${hasty.message}`);
    }
  });

  test('a closed client refuses calls; an unreachable server fails connect with Unavailable', async () => {
    const c = await Client.connect(config.uri);
    c.close();
    const err = await failure(c.datasets());
    assert.equal(err.code, 'closed');
    const down = await failure(Client.connect(config.deadLocation, { timeoutMs: 10_000 }));
    assert.ok(down instanceof quiver.Unavailable, `${down.name}: ${down.message}`);
    assert.ok(down.message.includes(config.deadLocation));
  });
});

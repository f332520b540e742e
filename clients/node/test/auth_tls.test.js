'use strict';
// Basic → Bearer authentication over TLS, per-dataset rights, token renewal, and mutual TLS,
// against the two secure servers of tests/node.

const { describe, test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');

const quiver = require('../src');
const { serverConfig, SKIP, readIpc, assertTablesEqual } = require('./helpers');

const { Client } = quiver;
const config = serverConfig();

async function failure(promise) {
  return promise.then(
    (value) => assert.fail(`expected a failure, got ${value}`),
    (err) => err,
  );
}

describe('auth and TLS', { skip: !config && SKIP }, () => {
  const opened = [];
  const open = async (uri, options) => {
    const c = await Client.connect(uri, options);
    opened.push(c);
    return c;
  };
  after(() => opened.forEach((c) => c.close()));
  const tls = config ? config.tls : {};

  test('a user with rights reads over TLS what the Python client read', async () => {
    const alice = await open(config.authUri, { username: 'alice', password: config.users.alice, tlsRootCerts: tls.ca_cert });
    const table = await alice.read('q_sales');
    assertTablesEqual(table, readIpc(config.cases.sales_full.expected), 'alice over TLS');
    const w = await alice.write('node_auth', quiver.arrow.tableFromArrays({ id: new BigInt64Array([7n]) }), { mode: 'create' });
    assert.equal(w.version, 1);
  });

  test('wrong password and missing credentials are Unauthenticated', async () => {
    const err = await failure(Client.connect(config.authUri, { username: 'alice', password: 'wrong', tlsRootCerts: tls.ca_cert }));
    assert.ok(err instanceof quiver.Unauthenticated, `${err.name}: ${err.message}`);
    assert.equal(err.details.code, 'unauthenticated');
    assert.ok(!err.message.includes('wrong'));
    const anonymous = await open(config.authUri, { tlsRootCerts: fs.readFileSync(tls.ca_cert) });
    const refused = await failure(anonymous.read('q_sales'));
    assert.ok(refused instanceof quiver.Unauthenticated, `${refused.name}: ${refused.message}`);
  });

  test('rights are per dataset: PermissionDenied for reads and writes not granted', async () => {
    const reader = await open(config.authUri, { username: 'reader', password: config.users.reader, tlsRootCerts: tls.ca_cert });
    assert.equal((await reader.read('q_sales', { columns: ['id'] })).numRows, 4000);
    const names = await reader.datasets();
    assert.ok(names.length >= 3 && names.every((n) => n.startsWith('q_')), names.join());
    const denied = await failure(reader.read('pl_types'));
    assert.ok(denied instanceof quiver.PermissionDenied, `${denied.name}: ${denied.message}`);
    assert.equal(denied.details.code, 'permission_denied');
    const table = quiver.arrow.tableFromArrays({ id: new BigInt64Array([1n]) });
    const noWrite = await failure(reader.write('q_sales', table));
    assert.ok(noWrite instanceof quiver.PermissionDenied, `${noWrite.name}: ${noWrite.message}`);
  });

  test('an expired bearer token is renewed once, transparently; a given token works too', async () => {
    const alice = await open(config.authUri, { username: 'alice', password: config.users.alice, tlsRootCerts: tls.ca_cert });
    const conn = await alice._connection(alice.uri);
    const first = conn.authorization;
    assert.match(first, /^Bearer /);
    const byToken = await open(config.authUri, { token: first.slice('Bearer '.length), tlsRootCerts: tls.ca_cert });
    assert.equal((await byToken.read('q_sales', { limit: 3 })).numRows, 3);
    await new Promise((r) => setTimeout(r, 3500)); // the server's --token-ttl is 3 s
    const expired = await failure(byToken.read('q_sales', { limit: 3 }));
    assert.ok(expired instanceof quiver.Unauthenticated, `${expired.name}: ${expired.message}`);
    assert.equal((await alice.read('q_sales', { limit: 3 })).numRows, 3);
    assert.notEqual(conn.authorization, first);
  });

  test('TLS is verified: another CA, or plaintext to a TLS port, cannot connect', async () => {
    const wrongCa = await failure(Client.connect(config.authUri, { username: 'alice', password: config.users.alice, tlsRootCerts: tls.other_ca_cert, timeoutMs: 10_000 }));
    assert.ok(wrongCa instanceof quiver.Unavailable, `${wrongCa.name}: ${wrongCa.message}`);
    const plain = await failure(Client.connect(config.authUri.replace('grpc+tls://', 'grpc://'), { timeoutMs: 10_000 }));
    assert.ok(plain instanceof quiver.Unavailable, `${plain.name}: ${plain.message}`);
  });

  test('mutual TLS: a client certificate of the CA reads; none, or another CA\'s, cannot', async () => {
    const certified = await open(config.mtlsUri, {
      tlsRootCerts: fs.readFileSync(tls.ca_cert, 'utf8'), // PEM text
      certChain: tls.client_cert, // a path
      privateKey: fs.readFileSync(tls.client_key), // a Buffer
    });
    assertTablesEqual(await certified.read('q_sales'), readIpc(config.cases.sales_full.expected), 'mutual TLS');
    const none = await failure(
      (async () => {
        const c = await open(config.mtlsUri, { tlsRootCerts: tls.ca_cert, timeoutMs: 10_000 });
        return c.read('q_sales');
      })(),
    );
    assert.ok(none instanceof quiver.QuiverError, String(none));
    assert.ok(['unavailable', 'deadline_exceeded', 'internal'].includes(none.code), `${none.name}: ${none.message}`);
    const stranger = await failure(
      (async () => {
        const c = await open(config.mtlsUri, { tlsRootCerts: tls.ca_cert, certChain: tls.other_client_cert, privateKey: tls.other_client_key, timeoutMs: 10_000 });
        return c.read('q_sales');
      })(),
    );
    assert.ok(stranger instanceof quiver.QuiverError, String(stranger));
    assert.ok(['unavailable', 'deadline_exceeded', 'internal'].includes(stranger.code), `${stranger.name}: ${stranger.message}`);
  });
});

'use strict';
// Shared by the tests: the configuration the pytest driver (tests/node) writes, and table
// comparisons that look at schemas, types, every value and every null.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const arrow = require('apache-arrow');

/** The servers and cases of tests/node/test_node_client.py, or null outside that run. */
function serverConfig() {
  const path = process.env.QUIVER_NODE_TEST_CONFIG;
  return path ? JSON.parse(fs.readFileSync(path, 'utf8')) : null;
}

const SKIP = 'needs the servers of tests/node/test_node_client.py (QUIVER_NODE_TEST_CONFIG)';

function readIpc(path) {
  return arrow.tableFromIPC(fs.readFileSync(path));
}

/** A comparable plain value: BigInts, NaN and -0 spelled out, rows and vectors as arrays. */
function normalize(v) {
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case 'bigint':
      return `${v}n`;
    case 'number':
      if (Number.isNaN(v)) return 'NaN';
      return Object.is(v, -0) ? '-0' : v;
    case 'string':
    case 'boolean':
      return v;
    default:
      break;
  }
  if (v instanceof Date) return `date:${v.getTime()}`;
  if (ArrayBuffer.isView(v)) return Array.from(v, normalize);
  if (v instanceof arrow.MapRow) return Array.from(v, ([k, x]) => [normalize(k), normalize(x)]);
  if (v instanceof arrow.StructRow) {
    return Object.fromEntries(Object.entries(v.toJSON()).map(([k, x]) => [k, normalize(x)]));
  }
  if (typeof v[Symbol.iterator] === 'function') return Array.from(v, normalize);
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, normalize(x)]));
}

function fieldSummary(f) {
  return {
    name: f.name,
    type: String(f.type),
    nullable: f.nullable,
    metadata: Object.fromEntries(f.metadata || []),
  };
}

/** Same schema (names, types, nullability, metadata), same values and nulls, column by column. */
function assertTablesEqual(actual, expected, label = '') {
  assert.deepEqual(actual.schema.fields.map(fieldSummary), expected.schema.fields.map(fieldSummary), `${label}: schema`);
  assert.deepEqual(Object.fromEntries(actual.schema.metadata), Object.fromEntries(expected.schema.metadata), `${label}: schema metadata`);
  assert.equal(actual.numRows, expected.numRows, `${label}: rows`);
  for (let i = 0; i < expected.numCols; i++) {
    const name = expected.schema.fields[i].name;
    const a = actual.getChildAt(i);
    const e = expected.getChildAt(i);
    assert.equal(a.nullCount, e.nullCount, `${label}: nulls of ${name}`);
    const av = Array.from({ length: a.length }, (_, j) => normalize(a.get(j)));
    const ev = Array.from({ length: e.length }, (_, j) => normalize(e.get(j)));
    const first = ev.findIndex((x, j) => !isDeepEqual(x, av[j]));
    assert.equal(first, -1, `${label}: ${name} differs first at row ${first}: ${JSON.stringify(av[first])} != ${JSON.stringify(ev[first])}`);
    if (arrow.DataType.isTimestamp(e.type)) {
      // get() gives lossy float milliseconds: the stored 64-bit integers must match too
      assert.deepEqual(rawValues(a), rawValues(e), `${label}: raw values of ${name}`);
    }
  }
}

/** The stored values of a flat fixed-width column, chunk by chunk, nulls as null. */
function rawValues(vector) {
  const out = [];
  for (const data of vector.data) {
    for (let j = 0; j < data.length; j++) {
      out.push(data.getValid(j) ? String(data.values[data.offset + j]) : null);
    }
  }
  return out;
}

function isDeepEqual(a, b) {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

/** A column's values as exact text, as the Python side writes them (64-bit ints as decimals). */
function exactText(vector) {
  return Array.from({ length: vector.length }, (_, j) => {
    const v = vector.get(j);
    return v === null ? null : String(v);
  });
}

module.exports = { serverConfig, SKIP, readIpc, normalize, assertTablesEqual, exactText };

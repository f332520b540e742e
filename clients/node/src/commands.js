'use strict';
// Descriptor and action bodies, the same JSON the Python client (clients/flight.py) sends.

const { InvalidArgument } = require('./errors');

const PUT_MODES = ['append', 'create', 'overwrite'];
const COMMIT_OPERATIONS = ['append', 'overwrite', 'create'];
const WHEN_MATCHED = ['update_all', 'delete', 'fail', 'nothing'];
const BACKFILL_MODES = ['add_columns', 'update_columns'];

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
 *   maxRowsPerEndpoint, appendedSince; a search: fullTextQuery (a query, or an array of them:
 *   a batch), nearest ({column, q, k, metric, nprobes, minimumNprobes, maximumNprobes,
 *   searchEffort, refineFactor, ef, useIndex}), both with hybrid ({fusion, rrfK, weight, normalize}),
 *   prefilter, fastSearch; searchFilter ({fullTextQuery} filtering a vector search, or
 *   {nearest} filtering a full-text search: pylance's query filters); blobHandling
 *   ('all_binary': blob columns as their bytes)
 */
const READ_OPTIONS = new Set([
  'branch', 'columns', 'filter', 'version', 'tag', 'asOf', 'limit', 'withRowId', 'maxRowsPerEndpoint', 'appendedSince',
  'fullTextQuery', 'prefilter', 'fastSearch', 'nearest', 'hybrid', 'searchFilter', 'blobHandling',
]);
const BLOB_HANDLING = ['blobs_descriptions', 'all_descriptions', 'all_binary'];
// a vector search's options: the server's keys by their JavaScript names
const NEAREST_OPTIONS = {
  column: 'column', q: 'q', k: 'k', metric: 'metric', nprobes: 'nprobes',
  minimumNprobes: 'minimum_nprobes', maximumNprobes: 'maximum_nprobes',
  refineFactor: 'refine_factor', ef: 'ef', useIndex: 'use_index', distanceRange: 'distance_range',
  searchEffort: 'search_effort', approxMode: 'approx_mode',
};
const HYBRID_OPTIONS = { fusion: 'fusion', rrfK: 'rrf_k', weight: 'weight', normalize: 'normalize' };
const FUSIONS = ['rrf', 'linear'];
const NORMALIZATIONS = ['score', 'rank'];

function isNumbers(v) {
  return (ArrayBuffer.isView(v) && !(v instanceof DataView))
    || (Array.isArray(v) && v.length > 0 && v.every((x) => typeof x === 'number'));
}

/** The query vector(s) as JSON: one vector (an array or typed array of numbers) or a list. */
function queryVectors(q) {
  if (isNumbers(q)) return Array.from(q, Number);
  if (Array.isArray(q) && q.length > 0 && q.every(isNumbers)) return q.map((v) => Array.from(v, Number));
  throw new TypeError('nearest.q must be a vector (an array or typed array of numbers) or a non-empty array of them');
}

/** The `nearest` object of a read: `{column, q, k, metric, nprobes, refineFactor, ...}`. */
function nearestObject(nearest) {
  if (nearest === null || typeof nearest !== 'object' || Array.isArray(nearest)) {
    throw new TypeError('nearest must be an object {column, q, k, ...}');
  }
  const unknown = Object.keys(nearest).filter((k) => !(k in NEAREST_OPTIONS) && nearest[k] !== undefined);
  if (unknown.length) throw new TypeError(`unknown nearest option(s): ${unknown.join(', ')}`);
  if (typeof nearest.column !== 'string' || nearest.column === '') {
    throw new TypeError('nearest.column must be a non-empty string');
  }
  const out = {};
  for (const [key, wire] of Object.entries(NEAREST_OPTIONS)) {
    const value = nearest[key];
    if (value == null) continue;
    if (key === 'q') out.q = queryVectors(value);
    else if (['k', 'nprobes', 'minimumNprobes', 'maximumNprobes', 'refineFactor', 'ef'].includes(key)) {
      out[wire] = integer(`nearest.${key}`, value);
    } else out[wire] = value;
  }
  return out;
}

/** The fusion options of a hybrid search: `{fusion, rrfK, weight, normalize}`. */
function hybridObject(hybrid) {
  if (hybrid === null || typeof hybrid !== 'object' || Array.isArray(hybrid)) {
    throw new TypeError('hybrid must be an object {fusion, rrfK, weight, normalize}');
  }
  const unknown = Object.keys(hybrid).filter((k) => !(k in HYBRID_OPTIONS) && hybrid[k] !== undefined);
  if (unknown.length) throw new TypeError(`unknown hybrid option(s): ${unknown.join(', ')}`);
  if (hybrid.fusion != null && !FUSIONS.includes(hybrid.fusion)) {
    throw new InvalidArgument(`hybrid.fusion must be one of ${FUSIONS.join(', ')}, not ${JSON.stringify(hybrid.fusion)}`);
  }
  if (hybrid.normalize != null && !NORMALIZATIONS.includes(hybrid.normalize)) {
    throw new InvalidArgument(`hybrid.normalize must be one of ${NORMALIZATIONS.join(', ')}, not ${JSON.stringify(hybrid.normalize)}`);
  }
  for (const key of ['rrfK', 'weight']) {
    if (hybrid[key] != null && !(typeof hybrid[key] === 'number' && Number.isFinite(hybrid[key]))) {
      throw new TypeError(`hybrid.${key} must be a finite number`);
    }
  }
  const out = {};
  for (const [key, wire] of Object.entries(HYBRID_OPTIONS)) if (hybrid[key] != null) out[wire] = hybrid[key];
  return out;
}

const READ_KEYS = ['columns', 'filter', 'prefilter', 'withRowId', 'version', 'tag', 'asOf', 'branch'];

// The actions that act on one branch of their dataset (the server's `BRANCHED_ACTIONS`)
const BRANCHED_ACTIONS = new Set([
  'commit', 'apply_staged', 'abort', 'describe', 'list_versions', 'delete', 'update', 'restore',
  'create_tag', 'add_columns', 'drop_columns', 'alter_columns', 'create_index', 'optimize_indices',
  'drop_index', 'compact', 'cleanup', 'create_branch', 'take_blobs', 'read_blob',
]);

/** A search's options split into the vector search's and the read's (unknown ones refused). */
function splitSearchOptions(options) {
  const searching = {};
  const reading = {};
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    if (key in NEAREST_OPTIONS && !['column', 'q', 'k'].includes(key)) searching[key] = value;
    else if (READ_KEYS.includes(key)) reading[key] = value;
    else throw new TypeError(`unknown search option: ${key}`);
  }
  return { searching, reading };
}

function isTextQuery(q) {
  return typeof q === 'string' || (q !== null && typeof q === 'object' && !Array.isArray(q));
}

function readCommand(dataset, options = {}) {
  checkDataset(dataset);
  const unknown = Object.keys(options).filter((k) => !READ_OPTIONS.has(k) && options[k] !== undefined);
  if (unknown.length) throw new TypeError(`unknown read option(s): ${unknown.join(', ')}`);
  const {
    branch, columns, filter, version, tag, asOf, limit, withRowId, maxRowsPerEndpoint, appendedSince,
    fullTextQuery, prefilter, fastSearch, nearest, hybrid, searchFilter, blobHandling,
  } = options;
  const pins = [['version', version], ['tag', tag], ['asOf', asOf]].filter(([, v]) => v != null);
  if (pins.length > 1) {
    throw new InvalidArgument(`give at most one of version, tag and asOf (got ${pins.map(([n]) => n).join(', ')})`);
  }
  const cmd = { dataset };
  if (branch != null) cmd.branch = String(branch);
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
  if (fullTextQuery != null) {
    const batch = Array.isArray(fullTextQuery);
    if (batch ? !(fullTextQuery.length > 0 && fullTextQuery.every(isTextQuery)) : !isTextQuery(fullTextQuery)) {
      throw new TypeError(
        'fullTextQuery must be a string, {query, columns}, a structured query object, or a non-empty array of them',
      );
    }
    cmd.full_text_query = fullTextQuery;
  }
  if (nearest != null) cmd.nearest = nearestObject(nearest);
  if (hybrid != null) {
    if (nearest == null || fullTextQuery == null) {
      throw new InvalidArgument('hybrid goes with both nearest and fullTextQuery');
    }
    if (Array.isArray(fullTextQuery)) throw new InvalidArgument('a hybrid search takes one fullTextQuery, not a batch');
    cmd.hybrid = hybridObject(hybrid);
  }
  if (searchFilter != null) cmd.search_filter = searchFilterObject(searchFilter);
  if (prefilter) cmd.prefilter = true;
  if (fastSearch) cmd.fast_search = true;
  if (blobHandling != null) {
    if (!BLOB_HANDLING.includes(blobHandling)) {
      throw new InvalidArgument(`blobHandling must be one of ${BLOB_HANDLING.join(', ')}, not ${JSON.stringify(blobHandling)}`);
    }
    cmd.blob_handling = blobHandling;
  }
  return cmd;
}

/** A read's search_filter: {fullTextQuery} (a query) or {nearest} (a vector search). */
function searchFilterObject(value) {
  const keys = value && typeof value === 'object' ? Object.keys(value) : [];
  if (keys.length === 1 && keys[0] === 'fullTextQuery' && isTextQuery(value.fullTextQuery)) {
    return { full_text_query: value.fullTextQuery };
  }
  if (keys.length === 1 && keys[0] === 'nearest') return { nearest: nearestObject(value.nearest) };
  throw new InvalidArgument('searchFilter must be {fullTextQuery: query} or {nearest: {column, q, k...}}');
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

/**
 * The body of the `update` action: `updates` maps column names to SQL expressions (an
 * object or a Map), set on the rows matching the SQL `where` (every row when absent).
 */
function updateBody(dataset, updates, where) {
  checkDataset(dataset);
  if (updates == null || typeof updates !== 'object' || Array.isArray(updates)) {
    throw new TypeError('updates must be an object (or a Map) of column name -> SQL expression');
  }
  const entries = updates instanceof Map ? Array.from(updates) : Object.entries(updates);
  if (entries.length === 0) throw new InvalidArgument('updates must name at least one column');
  for (const [column, expression] of entries) {
    if (typeof column !== 'string' || column === '') throw new TypeError('updates must be keyed by column names');
    if (typeof expression !== 'string') {
      throw new TypeError(`updates[${JSON.stringify(column)}] must be a SQL expression (a string), not ${typeof expression}`);
    }
    if (expression.trim() === '') throw new InvalidArgument(`updates[${JSON.stringify(column)}] is an empty SQL expression`);
  }
  const body = { dataset, updates: Object.fromEntries(entries) };
  if (where != null) {
    if (typeof where !== 'string') throw new TypeError(`where must be a SQL filter (a string), not ${typeof where}`);
    body.where = where;
  }
  return body;
}

const MERGE_OPTIONS = new Set([
  'whenMatched', 'matchedCondition', 'whenNotMatched', 'whenNotMatchedBySource', 'bySourceFilter', 'conflictRetries',
]);

function optionalSql(name, v) {
  if (v == null) return null;
  if (typeof v !== 'string') throw new TypeError(`${name} must be a SQL filter (a string), not ${typeof v}`);
  return v;
}

/**
 * The JSON object of a merge DoPut's CMD descriptor (as `merge_command` of wire/requests.py):
 * the uploaded rows merged into `dataset` on the `on` columns (default: its unenforced
 * primary key), committed as one version. The defaults upsert.
 * @param {string} dataset
 * @param {string|string[]|null} [on]
 * @param {object} [options] whenMatched ('update_all' | 'delete' | 'fail' | 'nothing'),
 *   matchedCondition, whenNotMatched ('insert_all' | null), whenNotMatchedBySource
 *   ('delete' | null), bySourceFilter, conflictRetries
 */
function mergeCommand(dataset, on, options = {}) {
  checkDataset(dataset);
  if (options === null || typeof options !== 'object') throw new TypeError('merge options must be an object');
  const unknown = Object.keys(options).filter((k) => !MERGE_OPTIONS.has(k) && options[k] !== undefined);
  if (unknown.length) throw new TypeError(`unknown merge option(s): ${unknown.join(', ')}`);
  const {
    whenMatched = 'update_all',
    matchedCondition,
    whenNotMatched = 'insert_all',
    whenNotMatchedBySource = null,
    bySourceFilter,
    conflictRetries,
  } = options;
  if (!WHEN_MATCHED.includes(whenMatched)) {
    throw new InvalidArgument(`whenMatched must be one of ${WHEN_MATCHED.join(', ')}, not ${JSON.stringify(whenMatched)}`);
  }
  if (whenNotMatched !== null && whenNotMatched !== 'insert_all') {
    throw new InvalidArgument(`whenNotMatched must be 'insert_all' or null, not ${JSON.stringify(whenNotMatched)}`);
  }
  if (whenNotMatchedBySource !== null && whenNotMatchedBySource !== 'delete') {
    throw new InvalidArgument(`whenNotMatchedBySource must be 'delete' or null, not ${JSON.stringify(whenNotMatchedBySource)}`);
  }
  const condition = optionalSql('matchedCondition', matchedCondition);
  if (condition !== null && whenMatched !== 'update_all') {
    throw new InvalidArgument(`matchedCondition goes with whenMatched 'update_all', not ${JSON.stringify(whenMatched)}`);
  }
  const sourceFilter = optionalSql('bySourceFilter', bySourceFilter);
  if (sourceFilter !== null && whenNotMatchedBySource !== 'delete') {
    throw new InvalidArgument("bySourceFilter goes with whenNotMatchedBySource 'delete'");
  }
  // when_not_matched is always sent: absent, the server inserts (an upsert)
  const merge = { when_matched: whenMatched, when_not_matched: whenNotMatched };
  if (on != null) {
    let keys;
    if (typeof on === 'string') keys = [on];
    else if (typeof on[Symbol.iterator] === 'function') keys = Array.from(on);
    else throw new TypeError('on must be a column name or an array of column names');
    if (keys.length === 0) throw new InvalidArgument('on must name at least one column (or be omitted for the primary key)');
    if (!keys.every((k) => typeof k === 'string' && k !== '')) throw new TypeError('on must hold column names (non-empty strings)');
    merge.on = keys;
  }
  if (condition !== null) merge.matched_condition = condition;
  if (whenNotMatchedBySource !== null) merge.when_not_matched_by_source = whenNotMatchedBySource;
  if (sourceFilter !== null) merge.by_source_filter = sourceFilter;
  if (conflictRetries != null) {
    const retries = integer('conflictRetries', conflictRetries);
    if (retries < 0) throw new InvalidArgument(`conflictRetries must be >= 0, not ${retries}`);
    merge.conflict_retries = retries;
  }
  return { dataset, merge };
}

/**
 * The JSON object of a backfill DoPut's CMD descriptor (as `backfill_command` of
 * wire/requests.py): the uploaded rows name their `_rowaddr` and carry new columns
 * ('add_columns'; rows not named get NULL) or new values of existing columns
 * ('update_columns'), applied and committed as one version. The server takes exactly these
 * two keys.
 * @param {string} dataset
 * @param {'add_columns'|'update_columns'} [mode]
 */
function backfillCommand(dataset, mode = 'add_columns') {
  checkDataset(dataset);
  if (typeof mode !== 'string') throw new TypeError(`mode must be a string, not ${mode === null ? 'null' : typeof mode}`);
  if (!BACKFILL_MODES.includes(mode)) {
    throw new InvalidArgument(`mode must be one of ${BACKFILL_MODES.join(', ')}, not ${JSON.stringify(mode)}`);
  }
  return { dataset, backfill: mode };
}

/** UTF-8 JSON bytes, compact as the Python client writes them. */
function jsonBytes(value) {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

module.exports = {
  BRANCHED_ACTIONS,
  PUT_MODES,
  COMMIT_OPERATIONS,
  WHEN_MATCHED,
  BACKFILL_MODES,
  readCommand,
  splitSearchOptions,
  putCommand,
  commitBody,
  updateBody,
  mergeCommand,
  backfillCommand,
  asOfText,
  jsonBytes,
};

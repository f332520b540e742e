// Type declarations of quiver-client, the Node.js client of the Quiver Flight server.

import * as arrow from 'apache-arrow';
import type { RecordBatch, Schema, Table } from 'apache-arrow';

export { arrow };

/** PEM bytes, PEM text, or the path of a PEM file. */
export type Pem = Buffer | Uint8Array | string;

export interface ConnectOptions {
  /** A bearer token (with or without the `Bearer ` prefix); not with username/password. */
  token?: string;
  /** Exchanged once per server for a bearer token (Basic → Bearer handshake). */
  username?: string;
  password?: string;
  /** The CA that signed the server's certificate (for `grpc+tls://`). */
  tlsRootCerts?: Pem;
  /** Client certificate and key, for servers that ask for one (mutual TLS). */
  certChain?: Pem;
  privateKey?: Pem;
  /** Deadline of every call, streams included, in milliseconds. */
  timeoutMs?: number;
  /** Endpoints `read` fetches at once (default 8). */
  concurrency?: number;
}

export interface VersionOptions {
  version?: number | bigint;
  tag?: string;
  /** ISO 8601 text, or a Date (sent as UTC). */
  asOf?: string | Date;
}

export interface ReadOptions extends VersionOptions {
  /** A branch of the dataset (default: the main line). */
  branch?: string;
  columns?: string[];
  /** A SQL filter evaluated by the server: `"x > 5 AND s LIKE 'a%'"`. */
  filter?: string;
  limit?: number | bigint;
  withRowId?: boolean;
  maxRowsPerEndpoint?: number;
  /** Only the rows appends added after this version. */
  appendedSince?: number;
  /**
   * A full-text search: the query text, `{query, columns}`, or a structured query
   * (`{match: {terms, column, operator, boost}}`, `multi_match`, `combined_fields`, `boolean`,
   * `boost`). The
   * rows come best first with `_score` (one endpoint).
   */
  fullTextQuery?: string | Record<string, unknown> | Array<string | Record<string, unknown>>;
  /**
   * A search filtering the search, as pylance's query filters: `{fullTextQuery}` keeps a
   * vector search's rows the query matches, `{nearest}` ranks a full-text search's rows by a
   * vector search (with `prefilter`, the other search runs first).
   */
  searchFilter?: { fullTextQuery: string | Record<string, unknown> } | { nearest: NearestQuery };
  /**
   * A vector search: the `k` rows nearest to `q` by `column` with `_distance` (an array of
   * vectors: each one's rows after its `query_index`). With `fullTextQuery`: a hybrid search.
   */
  nearest?: NearestQuery;
  /** How a hybrid search (`nearest` and `fullTextQuery`) fuses its two lists. */
  hybrid?: HybridOptions;
  /** With `fullTextQuery` or `nearest`: apply `filter` before the search rather than after it. */
  prefilter?: boolean;
  /** With `fullTextQuery`: only the rows an INVERTED index covers. */
  fastSearch?: boolean;
  /** 'all_binary': blob columns as their bytes (by default, their descriptions). */
  blobHandling?: 'blobs_descriptions' | 'all_descriptions' | 'all_binary';
}

/** Which rows' blobs: exactly one of `indices`, `ids` or `addresses`, at a version. */
export interface BlobSelection extends VersionOptions {
  indices?: number[];
  ids?: number[];
  addresses?: number[];
}

/** One blob on the server, read by byte ranges. */
export class RemoteBlob {
  readonly size: number;
  readonly rowAddress: number;
  /** `length` bytes at `offset` (default: to the end). */
  read(offset?: number, length?: number): Promise<Buffer>;
  readAll(): Promise<Buffer>;
}

export type QueryVector = number[] | Float32Array | Float64Array;

export interface NearestOptions {
  metric?: 'l2' | 'cosine' | 'dot' | string;
  nprobes?: number;
  minimumNprobes?: number;
  maximumNprobes?: number;
  /** pylance's initial IVF budget in [0, 1] (0.5: its automatic choice); overrides nprobes. */
  searchEffort?: number;
  /** How IVF_RQ indices estimate distances, as pylance's approx_mode (others ignore it). */
  approxMode?: 'fast' | 'normal' | 'accurate';
  refineFactor?: number;
  useIndex?: boolean;
  /** Keep rows at lower <= distance < upper (null: no bound), as pylance's distance_range. */
  distanceRange?: [number | null, number | null];
}

export interface NearestQuery extends NearestOptions {
  column: string;
  q: QueryVector | QueryVector[];
  k?: number;
}

export interface HybridOptions {
  /** Reciprocal rank fusion (default) or a linear combination of normalised scores. */
  fusion?: 'rrf' | 'linear';
  rrfK?: number;
  /** The vector side's weight in a linear combination. */
  weight?: number;
  normalize?: 'score' | 'rank';
}

/** A search's read options: the columns, filter, pins and row ids of the rows found. */
export interface SearchReadOptions extends VersionOptions {
  columns?: string[];
  filter?: string;
  prefilter?: boolean;
  withRowId?: boolean;
}

export interface ParallelReadOptions extends ReadOptions {
  /** Endpoints fetched at once (default: the client's `concurrency`). */
  concurrency?: number;
}

export interface Endpoint {
  ticket: Buffer;
  locations: string[];
  expirationTime: Date | null;
  /** `{version, fragment_id, row_range?, rows}` */
  appMetadata: Record<string, unknown> | Buffer | null;
}

export interface FlightInfo {
  schema: Schema;
  endpoints: Endpoint[];
  /** Exact without a filter, -1 with one. */
  totalRecords: number;
  totalBytes: number;
  ordered: boolean;
  /** `{dataset, version}` */
  appMetadata: Record<string, unknown> | Buffer | null;
}

/** One stage of an index build, as the server reports it. */
export interface IndexBuildStage {
  stage: 'bounds' | 'sample' | 'train' | 'encode' | 'write' | 'commit' | string;
  index: string;
  rows?: number;
  done?: number;
  total?: number;
}

export interface CreateIndexOptions {
  name?: string;
  replace?: boolean;
  metric?: 'l2' | 'cosine' | 'dot' | string;
  numPartitions?: number;
  numSubVectors?: number;
  /** PQ code bits (4 or 8), or an IVF_RQ index's bits per dimension (1-9) */
  numBits?: number;
  sampleRate?: number;
  maxIters?: number;
  targetPartitionSize?: number;
  ivfCentroids?: number[][];
  pqCodebook?: number[][][];
  m?: number;
  efConstruction?: number;
  maxLevel?: number;
  /** an IVF_RQ index's rotation: pylance's build_rq_model JSON */
  rabitqModel?: string;
  train?: boolean;
  onProgress?: (stage: IndexBuildStage) => void;
}

export type WriteMode = 'append' | 'create' | 'overwrite';
export type WriteData = Table | RecordBatch | Iterable<RecordBatch> | AsyncIterable<RecordBatch>;

export interface CommitOptions {
  operation?: WriteMode;
  readVersion?: number;
  idempotencyKey?: string;
  job?: string;
}

export type WhenMatched = 'update_all' | 'delete' | 'fail' | 'nothing';

/** A write's idempotency key (default: a fresh one) and how often it is resent on `Unavailable`. */
export interface KeyedOptions {
  idempotencyKey?: string;
  retries?: number;
}

export interface MergeOptions extends KeyedOptions {
  /** What matched target rows become (default `'update_all'`). */
  whenMatched?: WhenMatched;
  /** With `'update_all'`: update only where this SQL over `source.` and `target.` columns holds. */
  matchedCondition?: string;
  /** `'insert_all'` (the default) inserts source rows that match nothing; `null` does not. */
  whenNotMatched?: 'insert_all' | null;
  /** `'delete'` removes target rows no source row matches (those matching `bySourceFilter`). */
  whenNotMatchedBySource?: 'delete' | null;
  bySourceFilter?: string;
  /** Times the merge is planned again on a newer version after losing to a concurrent commit. */
  conflictRetries?: number;
}

export interface MergeResult {
  version: number;
  /** Source rows uploaded. */
  rows: number;
  inserted_rows?: number;
  updated_rows?: number;
  deleted_rows?: number;
  /** The idempotency key had committed already (the counts are then absent). */
  duplicate?: boolean;
}

/** 'add_columns': new columns (rows not named get NULL); 'update_columns': new values of existing ones. */
export type BackfillMode = 'add_columns' | 'update_columns';

export interface BackfillResult {
  version: number;
  /** Source rows uploaded. */
  rows: number;
  /** With 'update_columns': the rows given new values. */
  updated_rows?: number;
  duplicate?: boolean;
}

export interface Describe {
  dataset: string;
  version: number;
  latest_version: number;
  timestamp: string;
  data_storage_version: string;
  rows: number;
  fragments: number;
  schema: { name: string; type: string; nullable: boolean }[];
  tags: Record<string, unknown>;
  [key: string]: unknown;
}

export class Client {
  /** Connect (and authenticate); `grpc://host:port`, `grpc+tls://host:port` or `host:port`. */
  static connect(uri: string, options?: ConnectOptions): Promise<Client>;
  /** No network I/O: prefer `Client.connect`. */
  constructor(uri: string, options?: ConnectOptions);
  readonly uri: string;
  timeoutMs: number | null;
  concurrency: number;

  /** One dataset version as a Table, endpoints fetched in parallel, rows in endpoint order. */
  read(dataset: string, options?: ParallelReadOptions): Promise<Table>;
  nearest(dataset: string, column: string, q: QueryVector | QueryVector[], k?: number, options?: NearestOptions & SearchReadOptions): Promise<Table>;
  fullTextSearch(dataset: string, query: string | Record<string, unknown>, limit?: number, options?: SearchReadOptions & { fastSearch?: boolean }): Promise<Table>;
  fullTextSearchBatch(dataset: string, queries: Array<string | Record<string, unknown>>, limit?: number, options?: SearchReadOptions & { fastSearch?: boolean }): Promise<Table>;
  hybrid(dataset: string, column: string, q: QueryVector, text: string | Record<string, unknown>, k?: number, options?: NearestOptions & HybridOptions & SearchReadOptions): Promise<Table>;
  /** Record batches as they arrive, endpoint after endpoint. */
  stream(dataset: string, options?: ReadOptions): AsyncGenerator<RecordBatch, void, undefined>;
  flightInfo(dataset: string, options?: ReadOptions): Promise<FlightInfo>;
  /** The batches of one endpoint, trying its locations in turn. */
  endpointBatches(endpoint: Endpoint): AsyncGenerator<RecordBatch, void, undefined>;
  schema(dataset: string, options?: VersionOptions & { columns?: string[]; withRowId?: boolean }): Promise<Schema>;
  describe(dataset: string, options?: VersionOptions): Promise<Describe>;
  /** Dataset names (that the user may read), optionally those starting with `prefix`. */
  datasets(prefix?: string): Promise<string[]>;

  /**
   * One DoPut, committed by the server: `{version, rows}`. It carries an idempotency key (a
   * fresh one unless given) and is sent again up to `retries` (3) times on `Unavailable`
   * when `data` is a Table or a RecordBatch: it commits once (`duplicate: true` on a repeat).
   */
  write(dataset: string, data: WriteData, options?: { mode?: WriteMode } & KeyedOptions): Promise<{ version: number; rows: number; duplicate?: boolean }>;
  /** Data files written, nothing visible: the fragments to `commit` or `abort`. */
  stage(dataset: string, data: WriteData, options?: { mode?: WriteMode; job?: string }): Promise<string[]>;
  commit(dataset: string, fragments: Iterable<string>, options?: CommitOptions): Promise<{ version: number; rows: number; duplicate?: boolean }>;
  abort(dataset: string, fragments?: Iterable<string>, options?: { job?: string }): Promise<{ removed_files: number; kept_files: number }>;

  /** Any action with a JSON body: its JSON result (an array if several, null if none). */
  action(name: string, body?: Record<string, unknown>): Promise<any>;
  listActions(): Promise<Record<string, string>>;
  healthcheck(): Promise<{ status: string }>;
  /** Keyed and sent again on `Unavailable` as `write` is. */
  delete(dataset: string, predicate: string, options?: KeyedOptions): Promise<{ version: number; deleted_rows: number; duplicate?: boolean }>;
  /** Set columns to SQL expressions on the rows matching `where` (every row without it); keyed as `write`. */
  update(dataset: string, updates: Record<string, string> | Map<string, string>, where?: string | null, options?: KeyedOptions): Promise<{ version: number; updated_rows: number; duplicate?: boolean }>;
  /** Merge `data` on the `on` columns (null/absent: the primary key); the defaults upsert. */
  merge(dataset: string, data: WriteData, on?: string | string[] | null, options?: MergeOptions): Promise<MergeResult>;
  /** Apply rows naming their `_rowaddr` (uint64, as a read of `_rowaddr` gives it): new columns or new values. */
  backfill(dataset: string, data: WriteData, mode?: BackfillMode, options?: KeyedOptions): Promise<BackfillResult>;
  versions(dataset: string): Promise<{ version: number; timestamp: string; rows: number; fragments: number }[]>;
  tags(dataset: string): Promise<Record<string, { branch: string | null; version: number; created_at: string; updated_at: string }>>;
  createTag(dataset: string, tag: string, version?: number): Promise<{ tag: string; version: number }>;
  deleteTag(dataset: string, tag: string): Promise<{ tag: string; deleted: boolean }>;
  /** A version number, or a tag name. */
  restore(dataset: string, version: number | string): Promise<{ version: number; restored: number }>;
  /** This client on a branch of every dataset it names ('main': the main line); connections shared. */
  branch(name: string): Client;
  /** Create a branch from a version of this client's branch (a number, a tag, or the latest). */
  createBranch(dataset: string, name: string, version?: number | string): Promise<{ name: string; version: number }>;
  branches(dataset: string): Promise<Array<{ name: string; parent_branch: string | null; parent_version: number; create_at: number; metadata: Record<string, string> }>>;
  deleteBranch(dataset: string, name: string): Promise<{ name: string; deleted: boolean }>;
  takeBlobs(dataset: string, column: string, selection: BlobSelection): Promise<Array<RemoteBlob | null>>;
  readBlobs(dataset: string, column: string, selection: BlobSelection): Promise<Array<[number, Buffer | null]>>;
  addColumns(dataset: string, columns: Record<string, string>): Promise<{ version: number }>;
  dropColumns(dataset: string, columns: string | string[]): Promise<{ version: number }>;
  alterColumns(dataset: string, ...alterations: { path: string; name?: string; nullable?: boolean; data_type?: string }[]): Promise<{ version: number }>;
  dropDataset(dataset: string): Promise<{ dataset: string; dropped: boolean }>;
  /** Build a BTREE or BITMAP index of `column` in the server and commit it. */
  createIndex(dataset: string, column: string, indexType: 'BTREE' | 'BITMAP' | 'NGRAM' | 'INVERTED' | 'IVF_FLAT' | 'IVF_PQ' | 'IVF_SQ' | 'IVF_RQ' | string, options?: CreateIndexOptions): Promise<{ version: number; name: string }>;
  /** Index the fragments no index covers (pylance's optimize_indices). */
  optimizeIndices(dataset: string, options?: { numIndicesToMerge?: number; indexNames?: string[]; retrain?: boolean; onProgress?: (stage: IndexBuildStage) => void }): Promise<{ version: number; optimized: boolean }>;
  /** Drop the index `name` (every segment) as a new version. */
  dropIndex(dataset: string, name: string): Promise<{ version: number }>;
  /** Close every connection. */
  close(): void;
}

/** Every failed call: the server's one-line message, its code and its details. */
export class QuiverError extends Error {
  constructor(message: string, options?: { code?: string | null; details?: Record<string, unknown>; grpcCode?: number | null; cause?: unknown });
  static readonly code: string | null;
  /** `not_found`, `invalid_argument`, ... (`closed` for a closed client, null when unknown). */
  code: string | null;
  details: Record<string, any>;
  grpcCode: number | null;
}
export class NotFound extends QuiverError {}
export class InvalidArgument extends QuiverError {}
export class AlreadyExists extends QuiverError {}
export class FailedPrecondition extends QuiverError {}
export class Unauthenticated extends QuiverError {}
export class PermissionDenied extends QuiverError {}
export class Unavailable extends QuiverError {}
export class Unimplemented extends QuiverError {}
export class Cancelled extends QuiverError {}
export class DataCorrupt extends QuiverError {}
export class Internal extends QuiverError {}
export class DeadlineExceeded extends QuiverError {}
/** A commit lost to a concurrent one. */
export class CommitConflict extends QuiverError {
  /** Whether committing again (on a fresh read version) can succeed. */
  retryable: boolean;
  /** The version it lost to, when the server says. */
  version: number | null;
}
export const ERROR_CLASSES: (typeof QuiverError)[];

/** The QuiverError a failed gRPC call stands for. */
export function fromGrpcError(err: unknown): QuiverError;
export function errorDetails(err: unknown): Record<string, unknown>;
export function serverMessage(err: unknown): string;

export function readCommand(dataset: string, options?: ReadOptions): Record<string, unknown>;
export function putCommand(dataset: string, options?: { mode?: WriteMode; commit?: boolean; job?: string }): Record<string, unknown>;
export function commitBody(dataset: string, fragments: Iterable<string>, options?: CommitOptions): Record<string, unknown>;
export function updateBody(dataset: string, updates: Record<string, string> | Map<string, string>, where?: string | null): Record<string, unknown>;
export function mergeCommand(dataset: string, on?: string | string[] | null, options?: MergeOptions): Record<string, unknown>;
export function backfillCommand(dataset: string, mode?: BackfillMode): { dataset: string; backfill: BackfillMode };

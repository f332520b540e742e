"""MINHASHLSH indices as pylance 14 builds them: near-duplicate search over a text column.

Every text is tokenized (the full-text analyzer, without stemming or stop words by
default), its shingles (`shingle_size` consecutive tokens joined with 0x1F) hashed with
XXH64 (seed 42), and its signature made of `num_hashes` 16-bit values: for permutation i,
`(c_i * min(a_i * x + b_i)) >> 48` over the shingle hashes x, the coefficients drawn from
SplitMix64 seeded 42 (`format/_kernels.c`: `minhash_sign`). The signature splits into
`num_bands` bands, each keyed `(band << 56) | (XXH64(band's values) & (2^56 - 1))`
(`minhash_bands`). A text without tokens has no signature and is never indexed or found.

A segment is two files in `_indices/<uuid>/`:
- `signatures.lance`: `_rowid` (uint64) and `signature` (fixed_size_list<uint16>[k]), one row
  per indexed row, its row number the document id;
- `bands.lance`: `band_key` (uint64) and `doc_id` (uint32), sorted by key then document, in
  logical pages of 4096 rows whose largest keys a global buffer (the page table) holds.
Both repeat the details (`MinHashLshIndexDetails`, hex) in their schema metadata. Two rows
are candidates of each other when they share a band key; a candidate's distance is the
fraction of signature values that differ. These are the constants and files of pylance's
signature version 0 and index file version 0, which it checks known answers against.
"""

from __future__ import annotations

import bisect
import functools
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from quiver.format._kernels import minhash_bands, minhash_sign
from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.file.parallel import map_parallel
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams
from quiver.format.index.fts.build import DEFAULT_PARAMS
from quiver.format.index.fts.build import details as tokenizer_details
from quiver.format.index.wire import fields, varint
from quiver.format.io.lru import ByteLRU, OpenOnce
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

MINHASH_DETAILS = "/lance.index.pb.MinHashLshIndexDetails"
SIGNATURES_FILE, BANDS_FILE = "signatures.lance", "bands.lance"
FILES = (SIGNATURES_FILE, BANDS_FILE)
PAGE_ROWS = 4096  # band rows per logical page of bands.lance
SIGNATURE_VERSION = 0
INDEX_VERSION = 0
_DETAILS_KEY, _VERSION_KEY = "minhash_lsh_details", "minhash_lsh_index_version"
_DOCS_KEY, _PAGE_ROWS_KEY = "minhash_lsh_num_docs", "minhash_lsh_page_rows"
_PAGE_TABLE_KEY = "minhash_lsh_page_table_buffer"
_NO_COMPRESSION = {"lance-encoding:compression": "none"}
_ROWS_PER_WRITE = 1 << 16
_SIGN_SLICE_ROWS = 1 << 17  # rows a task signs when a column is signed on every core
_MASK64 = (1 << 64) - 1
# the analyzer options pylance records for a MinHash index's tokenizer, by name
_TOKENIZER_KEYS = tuple(
    k for k in DEFAULT_PARAMS if k not in ("with_position", "custom_stop_words")
)


def _default_tokenizer() -> AnalyzerParams:
    return AnalyzerParams(stem=False, remove_stop_words=False)


@dataclass(frozen=True)
class MinHashParams:
    """The parameters of one MINHASHLSH index: all its signatures depend on."""

    num_hashes: int = 128
    num_bands: int = 16
    shingle_size: int = 3
    tokenizer: AnalyzerParams = field(default_factory=_default_tokenizer)

    @classmethod
    def from_options(cls, options: dict[str, Any], where: str) -> MinHashParams:
        """`create_scalar_index(..., "MINHASHLSH", **options)`: num_hashes, num_bands,
        shingle_size and a `tokenizer` dict of the full-text options (stemming and stop
        words off unless asked for)."""
        unknown = sorted(set(options) - {"num_hashes", "num_bands", "shingle_size", "tokenizer"})
        if unknown:
            raise InvalidInputError(f"{where}: unknown MINHASHLSH index option {unknown[0]!r}")
        tokenizer = dict(options.get("tokenizer") or {})
        if tokenizer.get("custom_stop_words") is not None:
            raise InvalidInputError(
                f"{where}: a MINHASHLSH index cannot record custom_stop_words in its details"
            )
        bad = sorted(set(tokenizer) - set(_TOKENIZER_KEYS) - {"with_position"})
        if bad:
            raise InvalidInputError(f"{where}: unknown MINHASHLSH tokenizer option {bad[0]!r}")
        defaults = _default_tokenizer()
        doc = {k: getattr(defaults, k) for k in _TOKENIZER_KEYS} | tokenizer
        params = cls(
            num_hashes=_count(options.get("num_hashes", 128), "num_hashes", where),
            num_bands=_count(options.get("num_bands", 16), "num_bands", where),
            shingle_size=_count(options.get("shingle_size", 3), "shingle_size", where),
            tokenizer=AnalyzerParams.from_json({**doc, "with_position": False}, where),
        )
        params.check(where)
        return params

    def check(self, where: str) -> None:
        """pylance's ranges: 1 to 4096 hashes, a multiple of 1 to 256 bands."""
        if not 1 <= self.num_hashes <= 4096:
            raise InvalidInputError(f"{where}: num_hashes must be 1 to 4096 (num_hashes <= 4096)")
        if not 1 <= self.num_bands <= 256:
            raise InvalidInputError(f"{where}: num_bands must be 1 to 256")
        if self.num_hashes % self.num_bands:
            raise InvalidInputError(f"{where}: num_hashes must be a multiple of num_bands")

    # -- details ------------------------------------------------------------------------
    def details(self) -> bytes:
        """The `MinHashLshIndexDetails` message (pylance's field numbers)."""
        t = self.tokenizer
        tokenizer = tokenizer_details(
            {k: getattr(t, k) for k in _TOKENIZER_KEYS} | {"with_position": False}, 2
        )
        return (
            _varint_field(1, self.num_hashes)
            + _varint_field(2, self.num_bands)
            + _varint_field(3, self.shingle_size)
            + _key(4, 2)
            + varint(len(tokenizer))
            + tokenizer
        )

    @classmethod
    def from_details(cls, blob: bytes, where: str) -> MinHashParams:
        """The parameters an index's details record (UnsupportedFeatureError for a
        signature version other than 0)."""
        try:
            top = fields(blob)
            inner = fields(top.get(4, [b""])[0])
        except (IndexError, ValueError, TypeError) as e:
            raise CorruptFileError(where, f"bad MinHashLshIndexDetails: {e}") from None
        if top.get(5, [0])[0] != SIGNATURE_VERSION:
            raise UnsupportedFeatureError(
                f"{where}: MinHash signature version {top[5][0]} is not supported (0 is)"
            )
        tokenizer = {
            "base_tokenizer": inner.get(1, [b"simple"])[0].decode(),
            "language": json.loads(inner.get(2, [b'"English"'])[0]),
            "max_token_length": inner.get(4, [None])[0],
            "lower_case": bool(inner.get(5, [0])[0]),
            "stem": bool(inner.get(6, [0])[0]),
            "remove_stop_words": bool(inner.get(7, [0])[0]),
            "ascii_folding": bool(inner.get(8, [0])[0]),
        }
        params = cls(
            num_hashes=int(top.get(1, [0])[0]),
            num_bands=int(top.get(2, [0])[0]),
            shingle_size=int(top.get(3, [0])[0]),
            tokenizer=AnalyzerParams.from_json(tokenizer, where),
        )
        params.check(where)
        return params

    # -- signing ------------------------------------------------------------------------
    @property
    def coefficients(self) -> np.ndarray:
        """a, b and c of every permutation (uint64, k each), from SplitMix64 seeded 42."""
        return _coefficients(self.num_hashes)

    @property
    def analyzer(self) -> Analyzer:
        return _analyzer(self.tokenizer)

    def sign(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(signatures: uint16 (rows, k), signed: bool per row, False without tokens); a
        large column is signed in slices on every core (the split and the hashing run in
        compiled kernels without the GIL: 1 M documents, 2.4 s on one core), each into its
        rows of the result."""
        n, k = len(texts), self.num_hashes
        out = np.empty((n, k), np.uint16)
        signed = np.empty(n, np.uint8)
        map_parallel(
            lambda lo: self._sign(texts.slice(lo, _SIGN_SLICE_ROWS), out[lo:], signed[lo:]),
            list(range(0, n, _SIGN_SLICE_ROWS)),
        )
        return out, signed.astype(bool)

    def _sign(self, texts: pa.Array, out: np.ndarray, signed: np.ndarray) -> None:
        """Sign `texts` into the first rows of `out` and `signed` (views of the result)."""
        n = len(texts)
        found = self.analyzer.occurrences(texts, positions=False)
        vocabulary = pa.array(found.vocabulary, pa.large_string())
        tokens = vocabulary.take(pa.array(found.token_ids)) if len(found.token_ids) else vocabulary
        ends = np.frombuffer(tokens.buffers()[1], np.int64)[1 : len(tokens) + 1]
        data = tokens.buffers()[2] or b""
        per_doc = np.bincount(np.asarray(found.rows, np.int64), minlength=n)
        doc_ends = np.cumsum(per_doc, dtype=np.int64)
        minhash_sign(
            data, ends, doc_ends, self.shingle_size, self.coefficients,
            out[:n].reshape(-1), signed[:n],
        )  # fmt: skip

    def band_keys(self, signatures: np.ndarray) -> np.ndarray:
        """The band keys (uint64 (rows, num_bands)) of signatures (uint16 (rows, k)), many
        rows in slices on every core (the kernel runs without the GIL)."""
        signatures = np.ascontiguousarray(signatures)
        keys = np.empty((len(signatures), self.num_bands), np.uint64)

        def fill(lo: int) -> None:
            hi = min(len(signatures), lo + _SIGN_SLICE_ROWS)
            out = keys[lo:hi].reshape(-1)  # a view: rows are contiguous
            minhash_bands(signatures[lo:hi], self.num_hashes, self.num_bands, out)

        map_parallel(fill, list(range(0, len(signatures), _SIGN_SLICE_ROWS)))
        return keys


@functools.lru_cache(maxsize=16)
def _analyzer(params: AnalyzerParams) -> Analyzer:
    return Analyzer(params)


@functools.lru_cache(maxsize=16)
def _coefficients(k: int) -> np.ndarray:
    state = 42

    def draw() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)

    pairs = [(draw() | 1, draw()) for _ in range(k)]
    c = [draw() | 1 for _ in range(k)]
    out = np.array([a for a, _ in pairs] + [b for _, b in pairs] + c, dtype=np.uint64)
    out.setflags(write=False)  # shared by every caller (cached)
    return out


def _count(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{where}: {name} must be a positive integer, not {value!r}")
    return value


def _key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def _varint_field(number: int, value: int) -> bytes:
    return _key(number, 0) + varint(value) if value else b""


# -- building -----------------------------------------------------------------------------------
def _schemas(params: MinHashParams, docs: int) -> tuple[LanceSchema, LanceSchema]:
    hex_details = params.details().hex()
    common = {_DETAILS_KEY: hex_details, _VERSION_KEY: str(INDEX_VERSION)}
    item = pa.field("item", pa.uint16(), nullable=False)
    signatures = pa.schema(
        [
            pa.field("_rowid", pa.uint64(), nullable=False),
            pa.field(
                "signature",
                pa.list_(item, params.num_hashes),
                nullable=False,
                metadata={"lance-encoding:structural-encoding": "fullzip", **_NO_COMPRESSION},
            ),
        ],
        metadata=common,
    )
    bands = pa.schema(
        [
            pa.field("band_key", pa.uint64(), nullable=False, metadata=_NO_COMPRESSION),
            pa.field("doc_id", pa.uint32(), nullable=False, metadata=_NO_COMPRESSION),
        ],
        metadata={
            **common,
            _DOCS_KEY: str(docs),
            _PAGE_ROWS_KEY: str(PAGE_ROWS),
            _PAGE_TABLE_KEY: "1",
        },
    )
    return LanceSchema.from_arrow(signatures), LanceSchema.from_arrow(bands)


def build_minhash(
    store: ObjectStore,
    directory: str,
    values: pa.Array,
    row_ids: np.ndarray,
    params: MinHashParams,
    version: str = "2.2",
) -> list[tuple[str, int]]:
    """Write one segment over `values` (text) of the rows `row_ids`; its (file, size)s."""
    signatures, signed = params.sign(values)
    ids = np.asarray(row_ids, np.uint64)[signed]
    return _write_segment(store, directory, ids, signatures[signed], params, version)


def _band_table(keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The band table of band keys (documents, bands): (key, document) pairs by key, then
    document, as one part per band to write one after the other. Band j's keys all start
    with byte j, so the table is each band's pairs sorted apart, band after band: sorts of
    a band's column, on every core (16 M keys of 1 M documents: 1.8 s sorted at once, one
    core)."""
    docs = np.arange(len(keys), dtype=np.uint32)
    return map_parallel(
        lambda j: _sorted_pairs(np.ascontiguousarray(keys[:, j]), docs.copy()),
        list(range(keys.shape[1])),
    )


def _page_table(parts: list[np.ndarray]) -> bytes:
    """The last key of every `PAGE_ROWS` rows of the band table (the parts' keys back to
    back; the last page may be short), little-endian uint64s: where a search finds the
    pages a key's rows are in."""
    rows = sum(len(k) for k in parts)
    last = np.arange(PAGE_ROWS - 1, rows, PAGE_ROWS)
    if rows % PAGE_ROWS:
        last = np.append(last, rows - 1)
    starts = np.cumsum([0] + [len(k) for k in parts])
    part = np.searchsorted(starts, last, side="right") - 1
    found = np.empty(len(last), np.uint64)
    for j in np.unique(part).tolist():
        mine = part == j
        found[mine] = parts[j][last[mine] - starts[j]]
    return found.astype("<u8").tobytes()


def _sorted_pairs(keys: np.ndarray, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key, document) pairs sorted by key, then document: an unstable sort of the keys
    (2.5x a stable one), then the runs of equal keys (copies of a text) put in order."""
    order = np.argsort(keys)
    keys, docs = keys[order], docs[order]
    tied = np.flatnonzero(keys[1:] == keys[:-1])
    if len(tied):
        members = np.union1d(tied, tied + 1)
        docs[members] = docs[members][np.lexsort((docs[members], keys[members]))]
    return keys, docs


def remap_minhash(
    store: ObjectStore, directory: str, target: str, apply: Any
) -> list[tuple[str, int]]:
    """The segment in `directory` written again into `target` with the row addresses
    compaction gave its rows (`apply(addresses, where)` -> (new addresses, alive)): their
    signatures kept, the deleted ones' dropped, the band table made again."""
    with IndexFile(store, f"{directory}/{SIGNATURES_FILE}") as file:
        params = MinHashParams.from_details(bytes.fromhex(file.text(_DETAILS_KEY)), file.path)
        rows = file.read(["_rowid", "signature"])
        version = file.version
        where = file.path
    values = rows.column(1).combine_chunks()
    if values.null_count or values.values.null_count:
        raise CorruptFileError(where, "a signature holds nulls")
    signatures = values.values.to_numpy(zero_copy_only=False).astype(np.uint16)
    signatures = signatures.reshape(rows.num_rows, params.num_hashes)
    ids, alive = apply(rows.column(0).to_numpy(), where)
    return _write_segment(store, target, ids[alive], signatures[alive], params, version)


def _write_segment(
    store: ObjectStore,
    directory: str,
    ids: np.ndarray,
    signatures: np.ndarray,
    params: MinHashParams,
    version: str,
) -> list[tuple[str, int]]:
    """The two files of a segment of these rows (`ids`) and signatures, in this order. The
    signatures file is written on a thread of its own while the band table is sorted and
    written (1 M documents: 0.75 s of its 3 s of writing overlapped); when either write
    fails, the other stops at its next batch and the first failure is raised."""
    signatures = np.ascontiguousarray(signatures)
    docs = len(ids)
    if docs >= 1 << 32:
        raise InvalidInputError(f"{store.uri_of(directory)}: a segment holds at most 2^32 rows")
    sig_schema, band_schema = _schemas(params, docs)
    sig_arrow = sig_schema.to_arrow()

    bands_failed = threading.Event()

    def signature_tables():  # noqa: ANN202 - a generator of tables
        for lo in range(0, docs, _ROWS_PER_WRITE):
            if bands_failed.is_set():
                raise _Abandoned(directory)
            hi = min(docs, lo + _ROWS_PER_WRITE)
            values_ = pa.array(signatures[lo:hi].ravel(), pa.uint16())
            column = pa.FixedSizeListArray.from_arrays(values_, type=sig_arrow.field(1).type)
            yield pa.table([pa.array(ids[lo:hi], pa.uint64()), column], schema=sig_arrow)

    with ThreadPoolExecutor(1, thread_name_prefix="quiver-minhash-write") as pool:
        signed = pool.submit(
            write_index_file,
            store, f"{directory}/{SIGNATURES_FILE}", sig_schema, signature_tables(), version,
        )  # fmt: skip
        try:
            bands = _write_bands(store, directory, band_schema, params, signatures, signed, version)
        except BaseException:
            bands_failed.set()  # (the band keys, the sort or the write)
            raise
        return [(SIGNATURES_FILE, signed.result()), (BANDS_FILE, bands)]


def _write_bands(
    store: ObjectStore,
    directory: str,
    band_schema: Any,
    params: MinHashParams,
    signatures: np.ndarray,
    signed: Future,
    version: str,
) -> int:
    """The band table of these signatures, sorted and written; stops at its next batch
    when the signatures file's write (`signed`) has failed."""
    band_arrow = band_schema.to_arrow()
    parts = _band_table(params.band_keys(signatures)) if len(signatures) else []
    page_table = _page_table([k for k, _ in parts])

    def band_tables():  # noqa: ANN202
        step = _ROWS_PER_WRITE * 4
        for keys, doc_ids in parts:
            for lo in range(0, len(keys), step):
                if signed.done() and signed.exception() is not None:
                    raise signed.exception()  # type: ignore[misc]
                arrays = [
                    pa.array(keys[lo : lo + step], pa.uint64()),
                    pa.array(doc_ids[lo : lo + step], pa.uint32()),
                ]
                yield pa.table(arrays, schema=band_arrow)

    return write_index_file(
        store, f"{directory}/{BANDS_FILE}", band_schema, band_tables(), version,
        buffers=[page_table],
    )  # fmt: skip


class _Abandoned(Exception):
    """The signatures file's write stops: the band table's failed (its error is raised)."""


# -- searching ----------------------------------------------------------------------------------
class MinHashSegment:
    """One open segment: its page table in memory; bands and signatures read as needed."""

    def __init__(self, store: ObjectStore, directory: str, params: MinHashParams) -> None:
        self.params = params
        self._signatures = IndexFile(store, f"{directory}/{SIGNATURES_FILE}")
        self._bands = IndexFile(store, f"{directory}/{BANDS_FILE}")
        where = self._bands.path
        try:
            for f in (self._signatures, self._bands):
                recorded = MinHashParams.from_details(bytes.fromhex(f.text(_DETAILS_KEY)), f.path)
                if recorded != params:
                    raise CorruptFileError(f.path, "its details differ from the index's")
                if int(f.text(_VERSION_KEY)) > INDEX_VERSION:
                    raise UnsupportedFeatureError(
                        f"{f.path}: MinHash index file version {f.text(_VERSION_KEY)} is not "
                        f"supported ({INDEX_VERSION} is)"
                    )
            self.num_docs = int(self._bands.text(_DOCS_KEY))
            self._page_rows = int(self._bands.text(_PAGE_ROWS_KEY))
            raw = self._bands.global_buffer(int(self._bands.text(_PAGE_TABLE_KEY)))
            if self._page_rows < 1 or len(raw) % 8:
                raise CorruptFileError(where, "bad page rows or page table")
            self._page_table = np.frombuffer(raw, "<u8").astype(np.uint64).tolist()
            rows = self._bands.num_rows
            if len(self._page_table) != -(-rows // self._page_rows):
                raise CorruptFileError(where, "the page table does not match the rows")
            if self.num_docs != self._signatures.num_rows:
                raise CorruptFileError(where, "its document count is not the signatures'")
        except BaseException:
            self.close()
            raise

    def candidates(self, keys: np.ndarray) -> np.ndarray:
        """The document ids (sorted, unique) sharing any of the band `keys`."""
        table = self._page_table
        wanted: dict[int, list[int]] = {}  # page -> the keys to look up in it
        for key in sorted({int(k) for k in keys}):
            first = bisect.bisect_left(table, key)
            if first == len(table):
                continue
            last = min(bisect.bisect_right(table, key), len(table) - 1)
            for page in range(first, last + 1):
                wanted.setdefault(page, []).append(key)
        pages = self._pages(sorted(wanted))
        found = []
        for page, page_keys in wanted.items():
            band, docs = pages[page]
            lookup = np.asarray(page_keys, np.uint64)
            lo, hi = np.searchsorted(band, lookup, "left"), np.searchsorted(band, lookup, "right")
            found.extend(docs[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if b > a)
        if not found:
            return np.empty(0, np.uint32)
        docs = np.unique(np.concatenate(found))
        if len(docs) and int(docs[-1]) >= self.num_docs:
            raise CorruptFileError(self._bands.path, f"document id {int(docs[-1])} out of range")
        return docs

    def _pages(self, pages: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """(band keys, documents) of logical pages of the band table (ascending), decoded:
        those PAGES does not hold read together in one round (`IndexFile.read_ranges`,
        the pages' indexes kept by the open file), then held for the next searches, as
        pylance's page cache holds them."""
        out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        missing = []
        for page in pages:
            held = PAGES.get((self._bands.path, page))  # index files are never rewritten
            if held is None:
                missing.append(page)
            else:
                out[page] = held
        if not missing:
            return out
        rows = self._bands.num_rows
        spans = [(p * self._page_rows, min(rows, (p + 1) * self._page_rows)) for p in missing]
        table = self._bands.read_ranges(["band_key", "doc_id"], spans)
        keys = table.column(0).to_numpy()
        docs = table.column(1).to_numpy()
        at = 0
        for page, (lo, hi) in zip(missing, spans, strict=True):
            held = (keys[at : at + hi - lo].copy(), docs[at : at + hi - lo].copy())
            at += hi - lo
            PAGES.put((self._bands.path, page), held, held[0].nbytes + held[1].nbytes)
            out[page] = held
        return out

    def load(self) -> _Loaded:
        """The whole segment, decoded."""
        bands = self._bands.read(["band_key", "doc_id"])
        keys, docs = bands.column(0).to_numpy(), bands.column(1).to_numpy()
        if len(docs) and int(docs.max()) >= self.num_docs:
            raise CorruptFileError(self._bands.path, "a document id is out of range")
        if len(keys) > 1 and bool(np.any(keys[1:] < keys[:-1])):
            raise CorruptFileError(self._bands.path, "band keys are not in order")
        row_ids, signatures = self._decoded(self._signatures.read(["_rowid", "signature"]))
        return _Loaded(keys, docs.astype(np.uint32), row_ids.astype(np.uint64), signatures)

    def signatures(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row ids, signatures (len, k)) of documents `docs` (sorted, unique)."""
        if not len(docs):
            return np.empty(0, np.uint64), np.empty((0, self.params.num_hashes), np.uint16)
        rows = self._signatures.take(["_rowid", "signature"], docs.astype(np.uint64))
        return self._decoded(rows)

    def _decoded(self, rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
        values = rows.column(1).combine_chunks()
        if values.null_count or values.values.null_count:
            raise CorruptFileError(self._signatures.path, "a signature holds nulls")
        flat = values.values.to_numpy(zero_copy_only=False).astype(np.uint16)
        return rows.column(0).to_numpy(), flat.reshape(rows.num_rows, self.params.num_hashes)

    def close(self) -> None:
        for f in (getattr(self, "_signatures", None), getattr(self, "_bands", None)):
            if f is not None:
                f.close()


@dataclass(frozen=True)
class _Loaded:
    """A whole segment decoded: its band table and its signature table."""

    keys: np.ndarray  # uint64, ascending
    docs: np.ndarray  # uint32, the document of each key
    row_ids: np.ndarray  # uint64 per document
    signatures: np.ndarray  # uint16 (documents, num_hashes)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.keys, self.docs, self.row_ids, self.signatures))

    def candidates(self, keys: np.ndarray) -> np.ndarray:
        wanted = np.unique(np.asarray(keys, np.uint64))
        lo = np.searchsorted(self.keys, wanted, "left")
        hi = np.searchsorted(self.keys, wanted, "right")
        found = [self.docs[a:b] for a, b in zip(lo.tolist(), hi.tolist(), strict=True) if b > a]
        return np.unique(np.concatenate(found)) if found else np.empty(0, np.uint32)


# Segments held decoded once searched (they are never rewritten: keyed by directory), each up
# to half the budget; a larger one is read page by page at every search. A segment takes
# 12 bytes per band and 8 + 2 per hash per document: 456 bytes at the defaults.
LOADED: ByteLRU[_Loaded] = ByteLRU(128 << 20)
# Pages of the band tables of larger segments, decoded (48 KiB each at 4096 rows).
PAGES: ByteLRU[tuple[np.ndarray, np.ndarray]] = ByteLRU(64 << 20)


# Segments too large to hold decoded, open between searches (their page tables read, their
# files' page indexes kept): they are searched page by page.
_OPEN: OpenOnce[MinHashSegment] = OpenOnce(16)


def search_segment(
    store: ObjectStore, directory: str, params: MinHashParams, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(row ids, signatures) of the documents of a segment sharing a band key in `keys`."""
    cache_key = (store.uri_of(directory), params.details())
    loaded = LOADED.get(cache_key)
    if loaded is None:
        segment = _OPEN.get(cache_key, lambda: MinHashSegment(store, directory, params))
        per_doc = 12 * params.num_bands + 8 + 2 * params.num_hashes
        if segment.num_docs * per_doc > LOADED.max_bytes // 2:
            return segment.signatures(segment.candidates(keys))
        loaded = segment.load()
        LOADED.put(cache_key, loaded, loaded.nbytes)
        _OPEN.forget(cache_key)  # held decoded: its files are not read again
    docs = loaded.candidates(keys)
    return loaded.row_ids[docs], loaded.signatures[docs]


def distances(query: np.ndarray, signatures: np.ndarray) -> np.ndarray:
    """1 - the fraction of equal values, per row (float32), pylance's `_distance`."""
    if not len(signatures):
        return np.empty(0, np.float32)
    equal = np.count_nonzero(signatures == query, axis=1).astype(np.float32)
    return np.float32(1) - equal / np.float32(query.shape[-1])

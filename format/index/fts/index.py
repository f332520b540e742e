"""One INVERTED (full-text) index segment as pylance 14 writes it under ``_indices/{uuid}/``.

- ``metadata.lance``: the analyzer's ``params`` (JSON), the ``partitions`` (a JSON list of
  ids), ``token_set_format`` (``fst``, or ``arrow`` for a plain token table) and the
  posting codec;
- per partition P (each a disjoint share of the rows, with its own token ids):
  ``part_P_tokens.lance`` (the token dictionary), ``part_P_docs.lance`` (document i: its
  ``_rowid`` and ``_num_tokens``; ``total_tokens`` in the metadata) and
  ``part_P_invert.lance`` (row = token id: ``_length`` documents, ``_posting`` blocks).

Only documents with at least one token are indexed. An index is opened once per process
(`open_inverted`: token dictionaries and document tables read then, kept while in use);
searches read the posting lists of their tokens.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.files import IndexFile
from quiver.format.index.fts import bm25
from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams
from quiver.format.index.fts.fst import FstMap
from quiver.format.index.fts.postings import (
    BLOCK,
    FIXED32,
    VARINT,
    block_scores,
    checked_blocks,
    decode_positions,
    decode_positions_v1,
)
from quiver.format.index.fts.wide import WIDE, decode, quantized_lengths
from quiver.format.io.lru import ByteLRU, OpenOnce
from quiver.format.io.store import ObjectStore
from quiver.format.table.frag_reuse import FragReuse


def cache_arrays(cache: ByteLRU[tuple[np.ndarray, ...]], key: Hashable, arrays: tuple) -> None:
    """Keep derived arrays in `cache`, read-only (searches share them)."""
    for array in arrays:
        array.setflags(write=False)
    cache.put(key, arrays, sum(a.nbytes for a in arrays))


V2_POSITIONS = ("_compressed_position", "_position_block_offset")
ELEMENT_COLUMN = "_doc_index_0"  # documents of list elements: their positions in the lists
V1_POSITIONS = ("_position",)
# (document ids, frequencies) per partition and token, kept across searches: queries repeat
# their frequent words
POSTINGS: ByteLRU[tuple[np.ndarray, ...]] = ByteLRU(64 << 20)
# (block bytes, offsets, stored best scores) per partition and token, as read
BLOCKS: ByteLRU[tuple[np.ndarray, ...]] = ByteLRU(64 << 20)


@dataclass
class Partition:
    """One partition: token ids, its documents' row ids and lengths, its postings file."""

    tokens: FstMap | dict[str, int]
    row_ids: np.ndarray  # uint64, by document id
    lengths: np.ndarray  # tokens per document (float32)
    total_tokens: int
    invert: IndexFile
    df: np.ndarray  # documents per token id
    codec: str
    position_columns: tuple[str, ...]  # the columns positions are in (none without)
    # documents of list elements (pylance's LIST_ELEMENT granularity): each one's position
    # in its row's list (None: documents are rows)
    elements: np.ndarray | None = None
    block: int = BLOCK  # documents per full posting block (128, or 256: `wide`)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: dict[str, int | None] = field(default_factory=dict)

    def token_id(self, token: str) -> int | None:
        """The token's id here (None: absent), looked up once per token."""
        if token not in self._ids:
            if len(self._ids) > 1 << 16:
                self._ids.clear()
            self._ids[token] = self.tokens.get(token)
        return self._ids[token]

    @functools.cached_property
    def scored_lengths(self) -> np.ndarray:
        """The document lengths searches weigh with: exact, or quantized in partitions of
        256-document blocks (pylance's)."""
        return quantized_lengths(self.lengths) if self.block == WIDE else self.lengths

    @functools.cached_property
    def by_row_id(self) -> tuple[np.ndarray, np.ndarray]:
        """(row ids ascending, their documents' scored lengths): a row's length found by a
        search (combined-fields queries weigh every column's length)."""
        order = np.argsort(self.row_ids, kind="stable")
        return self.row_ids[order], self.scored_lengths[order]

    def postings(self, token_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(document ids, frequencies) of one token (decoded once, then cached)."""
        return self.fetch([token_id])[0]

    def fetch(self, token_ids: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """`postings` of several distinct tokens, the uncached ones read in one take (a
        query's words: one read of the posting column, not one per word)."""
        found: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for tid in token_ids:
            cached = POSTINGS.get((self.invert.path, tid))
            if cached is not None:
                found[tid] = (cached[0], cached[1])
        wanted = [t for t in token_ids if t not in found]
        if wanted:
            for tid, (data, offsets, _) in zip(wanted, self.blocks(wanted), strict=True):
                length, where = int(self.df[tid]), self.invert.path
                postings = decode(data, offsets, None, length, self.codec, self.block, where)
                cache_arrays(POSTINGS, (self.invert.path, tid), postings)
                found[tid] = postings
        return [found[t] for t in token_ids]

    def blocks(self, token_ids: Sequence[int]) -> list[tuple[np.ndarray, ...]]:
        """Per token: its posting blocks as stored (bytes, offsets) and their stored best
        scores. The uncached ones are read in one take and kept: a few bits per posting,
        and a search of one word decodes only the blocks its best rows can be in."""
        found: dict[int, tuple[np.ndarray, ...]] = {}
        for tid in token_ids:
            cached = BLOCKS.get((self.invert.path, tid))
            if cached is not None:
                found[tid] = cached
        wanted = sorted({t for t in token_ids if t not in found})
        if wanted:
            with self.lock:  # one reader per file: its page caches are not shared safely
                rows = self.invert.take_list_bytes("_posting", np.array(wanted, np.uint64))
            where = self.invert.path
            for i, tid in enumerate(wanted):
                data, offsets = checked_blocks(*rows.row(i), int(self.df[tid]), where, self.block)
                # wide blocks store no best score: no bound, block-max searches step aside
                scores = (
                    np.full(len(offsets) - 1, np.inf, np.float32)
                    if self.block == WIDE
                    else block_scores(data, offsets, where)
                )
                read = (np.array(data), offsets, scores)
                cache_arrays(BLOCKS, (where, tid), read)
                found[tid] = read
        return [found[t] for t in token_ids]

    def positions(self, token_id: int) -> np.ndarray:
        """Every position of one token, its documents' in `postings` order (each
        document's as many as its frequency); UnsupportedFeatureError without them."""
        if not self.position_columns:
            raise UnsupportedFeatureError(
                f"{self.invert.path}: position is not found but required for phrase queries, "
                "try recreating the index with position"
            )
        key = (self.invert.path, token_id, "positions")
        cached = POSTINGS.get(key)
        if cached is not None:
            return cached[0]
        _, freqs = self.postings(token_id)
        with self.lock:
            row = self.invert.take(list(self.position_columns), np.array([token_id], np.uint64))
        where = self.invert.path
        if self.position_columns == V2_POSITIONS:
            stream = row.column(0)[0].as_py() or b""
            offsets = row.column(1)[0].as_py() or []
            found = decode_positions(stream, offsets, freqs, where, self.block)
        else:
            found = decode_positions_v1(row.column(0)[0].as_py() or [], where)
        if len(found) != int(freqs.sum()):
            raise CorruptFileError(where, f"{len(found)} positions for {int(freqs.sum())}")
        cache_arrays(POSTINGS, key, (found,))
        return found


def readable_format(metadata: dict[str, bytes], where: str) -> str:
    """An index's `format_version` ("1", "2", "3"), from its metadata; UnsupportedFeatureError
    for what Quiver does not read (format 3's 256-document posting blocks, later formats)."""
    version = metadata.get("format_version", b"1").decode()
    block = metadata.get("posting_block_size", b"128").decode()
    if version not in ("1", "2", "3"):
        raise UnsupportedFeatureError(
            f"{where}: full-text index format version {version} (1, 2 and 3 are read)"
        )
    if block not in ("128", "256") or (block == "256" and version != "3"):
        raise UnsupportedFeatureError(
            f"{where}: a full-text index of format {version} with {block}-document posting "
            "blocks (128-document blocks, and 256 in format 3, are read)"
        )
    return version


class InvertedIndex:
    """An open INVERTED index segment (close it, or use it as a context manager)."""

    def __init__(self, store: ObjectStore, directory: str, reuse: FragReuse | None = None) -> None:
        self.where = store.uri_of(directory)
        self.partitions: list[Partition] = []
        self._vocabulary: list[str] | None = None
        with IndexFile(store, f"{directory}/metadata.lance") as meta:
            try:
                params = json.loads(meta.text("params"))
                ids = json.loads(meta.text("partitions"))
            except ValueError:
                raise CorruptFileError(meta.path, "params or partitions are not JSON") from None
            token_format = meta.metadata.get("token_set_format", b"arrow").decode()
            self.format_version = int(readable_format(meta.metadata, self.where))
        self.params = AnalyzerParams.from_json(params, self.where)
        self.analyzer = Analyzer(self.params)
        try:
            for pid in ids:
                part = open_partition(store, directory, int(pid), token_format)
                if reuse is not None:
                    # documents of rows a compaction moved answer with the rows' addresses
                    # now (GONE: dropped, in no fragment); statistics stay as built, as
                    # pylance reads an index through a fragment reuse index
                    part.row_ids = reuse.apply(part.row_ids)[0]
                self.partitions.append(part)
        except BaseException:
            self.close()
            raise
        self.num_docs = sum(len(p.row_ids) for p in self.partitions)
        self.total_tokens = sum(p.total_tokens for p in self.partitions)

    def vocabulary(self) -> list[str]:
        """Every token of this segment (all partitions'), sorted; read once."""
        if self._vocabulary is None:
            tokens: set[str] = set()
            for p in self.partitions:
                tokens.update(p.tokens if isinstance(p.tokens, dict) else dict(p.tokens.items()))
            self._vocabulary = sorted(tokens)
        return self._vocabulary

    def document_frequency(self, token: str) -> int:
        """Documents of this segment holding `token`, over every partition."""
        total = 0
        for p in self.partitions:
            tid = p.token_id(token)
            if tid is not None and 0 <= tid < len(p.df):
                total += int(p.df[tid])
        return total

    def prefetch(self, tokens: Sequence[str]) -> None:
        """Read the posting lists of `tokens` not cached yet, one take per partition."""
        for p in self.partitions:
            ids = [t for t in (p.token_id(token) for token in tokens) if t is not None]
            ids = [t for t in ids if 0 <= t < len(p.df)]
            if len(ids) > 1:
                p.fetch(ids)

    def weighted(
        self, token: str, token_idf: np.float32, avgdl: np.float32
    ) -> list[tuple[np.ndarray, np.ndarray, bool]]:
        """Per partition holding `token`: its documents' row ids, their BM25 weights under
        the given statistics, and whether the row ids ascend."""
        return [
            bm25.gathered(docs, counts, p.row_ids, p.scored_lengths, token_idf, avgdl, self.where)
            for p, docs, counts in self._postings(token)
        ]

    def blocks(self, token: str) -> list[tuple[Partition, int, tuple[np.ndarray, ...]]]:
        """Per partition holding `token`: it, the token's id there and its posting blocks
        as stored, with their best scores (`Partition.blocks`)."""
        return [(p, tid, p.blocks([tid])[0]) for p, tid in self._holding(token)]

    def _postings(self, token: str) -> Iterator[tuple[Partition, np.ndarray, np.ndarray]]:
        """Per partition holding `token`: it, and the token's (document ids, frequencies)."""
        for p, tid in self._holding(token):
            docs, counts = p.postings(tid)
            yield p, docs, counts

    def _holding(self, token: str) -> Iterator[tuple[Partition, int]]:
        """The partitions holding `token`, and its id in each."""
        for p in self.partitions:
            tid = p.token_id(token)
            if tid is None:
                continue
            if not 0 <= tid < len(p.df):
                raise CorruptFileError(self.where, f"token id {tid} outside the postings")
            yield p, tid

    def matches(self, token: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row ids, frequencies, document lengths) of the documents holding `token`."""
        ids, freqs, lengths = [], [], []
        for p, docs, counts in self._postings(token):
            if len(docs) and int(docs.max()) >= len(p.row_ids):
                raise CorruptFileError(self.where, "a posting names a document that is not there")
            ids.append(p.row_ids[docs])
            freqs.append(counts)
            lengths.append(p.scored_lengths[docs])
        if not ids:
            empty = np.empty(0, np.uint64)
            return empty, np.empty(0, np.uint32), np.empty(0, np.float32)
        return np.concatenate(ids), np.concatenate(freqs), np.concatenate(lengths)

    def close(self) -> None:
        for p in self.partitions:
            p.invert.close()

    def __enter__(self) -> InvertedIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Open indices kept (their token dictionaries and document tables: a few bytes per document).
OPEN_INDICES = 16
_OPEN: OpenOnce[InvertedIndex] = OpenOnce(OPEN_INDICES)


def open_partition(store: ObjectStore, directory: str, pid: int, token_format: str) -> Partition:
    """Partition `pid` of the index segment in `directory`, open (its postings file stays
    open: close `invert` when done)."""
    prefix = f"{directory}/part_{pid}"
    with IndexFile(store, f"{prefix}_tokens.lance") as tf:
        if token_format == "fst":
            raw = tf.read(["_token_fst_bytes"]).column(0)[0].as_py()
            tokens: FstMap | dict[str, int] = FstMap(raw, tf.path)
        else:
            t = tf.read(["_token", "_token_id"])
            tokens = dict(zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True))
    with IndexFile(store, f"{prefix}_docs.lance") as df:
        names = [f.name for f in df.schema.fields]
        elements = ELEMENT_COLUMN in names  # documents of list elements: their positions
        docs = df.read(["_rowid", "_num_tokens", *([ELEMENT_COLUMN] if elements else [])])
        row_ids = docs.column(0).to_numpy().astype(np.uint64)
        lengths = docs.column(1).to_numpy().astype(np.float32)
        positions = docs.column(2).to_numpy().astype(np.uint32) if elements else None
        total = df.metadata.get("total_tokens")
        total_tokens = int(total) if total is not None else int(lengths.sum())
    invert = IndexFile(store, f"{prefix}_invert.lance")
    try:
        df_counts = invert.read(["_length"]).column(0).to_numpy().astype(np.int64)
        codec = invert.metadata.get("posting_tail_codec", FIXED32.encode()).decode()
        if codec not in (VARINT, FIXED32):
            raise UnsupportedFeatureError(f"{invert.path}: posting codec {codec!r}")
    except BaseException:
        invert.close()
        raise
    block = int(invert.metadata.get("posting_block_size", b"128").decode() or 128)
    if block not in (BLOCK, WIDE):
        invert.close()
        raise UnsupportedFeatureError(f"{invert.path}: posting blocks of {block} documents")
    held = {f.name for f in invert.schema.fields}
    with_positions = next((c for c in (V2_POSITIONS, V1_POSITIONS) if set(c) <= held), ())
    return Partition(
        tokens, row_ids, lengths, total_tokens, invert, df_counts, codec, with_positions,
        elements=positions, block=block,
    )  # fmt: skip


def open_inverted(
    store: ObjectStore, directory: str, uuid: str, reuse: FragReuse | None = None
) -> InvertedIndex:
    """The index in `directory` of `store`, opened once per process (by URI and uuid: an
    index's files never change), read through the version's fragment reuse index if any."""
    key = (store.uri_of(directory), uuid, reuse.uuid if reuse is not None else None)
    return _OPEN.get(key, lambda: InvertedIndex(store, directory, reuse))

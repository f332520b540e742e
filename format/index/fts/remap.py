"""Remapping an INVERTED index after compaction, as pylance 14 does: the index as if built
again over the rows it still holds, partition by partition.

Each partition keeps its id and its documents in their order, less the deleted ones; a
moved document takes its new row address. Postings lose the deleted documents and name the
others by their new ids (old id less the deleted ids below it), keeping frequencies and
positions; a token left without documents is dropped and the others are numbered again in
their old order. The statistics (`total_tokens`, document frequencies, block scores) are
those of the remaining documents. Token sets are written as tables (pylance reads them
beside its own transducers), so a remapped index has one token set format.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, UnsupportedFeatureError
from quiver.format.index.files import IndexFile, write_index_file
from quiver.format.index.fts.build import empty_partition, encoded_partition
from quiver.format.index.fts.index import (
    V2_POSITIONS,
    Partition,
    open_partition,
    readable_format,
)
from quiver.format.index.fts.postings import decode_positions, posting_blocks
from quiver.format.index.fts.wide import decode
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

METADATA = "metadata.lance"
# the new row address of each old one, and whether it is still alive (`AddressMap.apply`)
Moves = Callable[[np.ndarray, str], tuple[np.ndarray, np.ndarray]]


def remap_inverted(
    store: ObjectStore, directory: str, target: str, moves: Moves
) -> list[tuple[str, int]]:
    """Write the INVERTED index in `directory` again into `target` with the row addresses
    `moves` gives; (file, size) pairs. UnsupportedFeatureError for what Quiver cannot write
    again (format version 1, per-document positions): compaction then leaves the index
    covering the fragments it did not rewrite."""
    with IndexFile(store, f"{directory}/{METADATA}") as meta:
        version = readable_format(meta.metadata, meta.path)
        if version == "1":
            raise UnsupportedFeatureError(
                f"{meta.path}: remapping a format 1 full-text index (formats 2 and 3 are)"
            )
        try:
            ids = [int(p) for p in json.loads(meta.text("partitions"))]
        except (ValueError, TypeError):
            raise CorruptFileError(meta.path, "partitions are not a JSON list of ids") from None
        token_format = meta.metadata.get("token_set_format", b"arrow").decode()
        arrow = meta.schema.to_arrow()
        metadata = {**(arrow.metadata or {}), b"token_set_format": b"arrow"}
        meta_schema = LanceSchema.from_arrow(arrow.with_metadata(metadata))
        meta_table = meta.read([f.name for f in arrow])
        file_version = meta.version
    written: list[tuple[str, int]] = []
    try:
        for pid in ids:
            part = open_partition(store, directory, pid, token_format)
            try:
                tables = _remapped(part, moves)
            finally:
                part.invert.close()
            for suffix, table in tables.items():
                name = f"part_{pid}_{suffix}.lance"
                schema = LanceSchema.from_arrow(table.schema)
                size = write_index_file(store, f"{target}/{name}", schema, [table], file_version)
                written.append((name, size))
        size = write_index_file(
            store, f"{target}/{METADATA}", meta_schema, [meta_table], file_version
        )
        written.append((METADATA, size))
    except BaseException:
        for name, _ in written:
            with contextlib.suppress(Exception):
                store.delete(f"{target}/{name}")
        raise
    return written


def _remapped(part: Partition, moves: Moves) -> dict[str, pa.Table]:
    """One partition's tables over the documents still alive, at their new addresses."""
    where = part.invert.path
    with_positions = bool(part.position_columns)
    if with_positions and part.position_columns != V2_POSITIONS:
        raise UnsupportedFeatureError(f"{where}: remapping per-document positions")
    rows, alive = moves(part.row_ids, where)
    new_doc = np.cumsum(alive, dtype=np.int64) - 1
    tok, doc, freq, places = postings_of(part, with_positions)
    kept = alive[doc] if len(doc) else np.zeros(0, bool)
    if with_positions:
        places = places[np.repeat(kept, freq)]
    tok, doc, freq = tok[kept], new_doc[doc[kept]].astype(np.uint32), freq[kept]
    # tokens left with documents, numbered again in their old order
    held = np.bincount(tok, minlength=len(part.df)) > 0
    renumber = np.cumsum(held, dtype=np.int64) - 1
    by_id = tokens_by_id(part)
    vocabulary = [by_id[i] for i in np.flatnonzero(held).tolist()]
    lengths = part.lengths[alive].astype(np.uint32)
    elements = None if part.elements is None else part.elements[alive]
    if not len(lengths) or (not len(tok) and elements is None):
        return empty_partition(with_positions, elements is not None, part.block)
    return encoded_partition(
        renumber[tok], doc, freq, places if with_positions else None, lengths,
        rows[alive].astype(np.uint64), vocabulary, elements, part.block,
    )  # fmt: skip


def postings_of(
    part: Partition, with_positions: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every posting of a partition: token id, document, frequency (by token, then
    document), and the positions of each after another's (empty without)."""
    where = part.invert.path
    blobs = part.invert.read(["_posting"]).column(0).combine_chunks()
    streams = offsets = None
    if with_positions:
        table = part.invert.read(list(V2_POSITIONS))
        streams, offsets = table.column(0).to_pylist(), table.column(1).to_pylist()
    docs, freqs, places = [], [], []
    for t in range(len(part.df)):
        cell, length = blobs[t], int(part.df[t])
        values = cell.values if cell.is_valid else []
        data, bounds = posting_blocks(values, length, where, part.block)
        ids, fr = decode(data, bounds, None, length, part.codec, part.block, where)
        docs.append(ids)
        freqs.append(fr)
        if streams is not None and offsets is not None:
            found = decode_positions(streams[t] or b"", offsets[t] or [], fr, where, part.block)
            if len(found) != int(fr.sum()):
                raise CorruptFileError(where, f"{len(found)} positions for {int(fr.sum())}")
            places.append(found)
    tok = np.repeat(np.arange(len(part.df), dtype=np.int64), part.df.astype(np.int64))
    doc = np.concatenate(docs).astype(np.int64) if docs else np.zeros(0, np.int64)
    freq = np.concatenate(freqs) if freqs else np.zeros(0, np.uint32)
    if len(doc) and int(doc.max()) >= len(part.row_ids):
        raise CorruptFileError(where, "a posting names a document the partition lacks")
    pos = np.concatenate(places).astype(np.uint32) if places else np.zeros(0, np.uint32)
    return tok, doc, freq, pos


def tokens_by_id(part: Partition) -> list[str]:
    """The partition's tokens by id (ids dense from 0)."""
    pairs = sorted(part.tokens.items(), key=lambda p: p[1])
    if [i for _, i in pairs] != list(range(len(pairs))) or len(pairs) != len(part.df):
        raise CorruptFileError(part.invert.path, "token ids are not those of the postings")
    return [token for token, _ in pairs]

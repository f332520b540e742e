"""pylance 14's distributed INVERTED builds: partitions staged apart, merged into one.

Each worker calls `create_scalar_index(column, "INVERTED", fragment_ids=[...],
index_uuid=u)`, which writes one partition over those fragments into
`_indices/<u>/staging/`, numbered as pylance numbers it (the first fragment id, shifted 32
bits left): its documents, postings, tokens and a metadata file. `merge_index_metadata(u,
"INVERTED")` then merges every staged partition into the index's one partition: documents
one after another, each token's postings one partition after another (so they stay in
document order), block scores under the merged statistics; it writes `metadata.lance`
and removes the staged files. The caller commits the index with a CreateIndex.

Staged partitions of either engine merge alike (their token sets as transducers or
tables, positions or none); the staged partitions must agree on the tokenizer options.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.index.files import IndexFile
from quiver.format.index.fts import build
from quiver.format.index.fts.analyzer import Analyzer, AnalyzerParams
from quiver.format.index.fts.index import V2_POSITIONS, open_partition, readable_format
from quiver.format.index.fts.remap import postings_of, tokens_by_id
from quiver.format.io.store import ObjectStore

STAGING = "staging"
_STAGED = re.compile(r"part_(\d+)_metadata\.lance")


def staged_id(fragment_ids: list[int]) -> int:
    """The partition id pylance gives the partition of `fragment_ids` (in the caller's order)."""
    return int(fragment_ids[0]) << 32


def stage_partition(
    store: ObjectStore,
    directory: str,
    partition: int,
    texts: pa.Array,
    row_ids: np.ndarray,
    params: dict,
    version: str,
) -> list[tuple[str, int]]:
    """Write the partition of `texts` (their row ids beside) as staged partition
    `partition` of the index in `directory`; (file, size) pairs."""
    analyzer = Analyzer(AnalyzerParams.from_json(params, store.uri_of(directory)))
    block = int(params.get("block_size", build.BLOCK))
    elements = None
    if params.get(build.LIST_ELEMENT):
        texts, row_ids, elements = build.list_elements(texts, row_ids, store.uri_of(directory))
    tables = build.partition_tables(analyzer, texts, row_ids, elements, block)
    if not tables:
        tables = build.empty_partition(bool(params["with_position"]), elements is not None, block)
    staged = f"{directory}/{STAGING}"
    named = {f"part_{partition}_{suffix}.lance": t for suffix, t in tables.items()}
    named = {name: build.labelled(t, params) for name, t in named.items()}
    meta = build.metadata_table(params, [partition], rows=0)
    named[f"part_{partition}_metadata.lance"] = meta
    return build.write_tables(store, staged, named, version)


def merge_staged(store: ObjectStore, directory: str, version: str) -> list[tuple[str, int]]:
    """Merge every partition staged in `directory` into its one partition; (file, size)
    pairs of the index's files. InvalidInputError when nothing is staged or the staged
    partitions were built with different options."""
    where = store.uri_of(directory)
    staged = f"{directory}/{STAGING}"
    found = sorted(
        int(m.group(1))
        for m in (_STAGED.fullmatch(name) for name, _, _ in store.list_dir(staged))
        if m
    )
    if not found:
        raise InvalidInputError(f"{where}: no staged INVERTED partitions to merge")
    params, formats = None, []
    for pid in found:
        with IndexFile(store, f"{staged}/part_{pid}_metadata.lance") as meta:
            posting_format = int(readable_format(meta.metadata, meta.path))
            try:
                doc = json.loads(meta.text("params"))
            except ValueError:
                raise CorruptFileError(meta.path, "params are not JSON") from None
            formats.append(meta.metadata.get("token_set_format", b"arrow").decode())
            block = int(meta.metadata.get("posting_block_size", b"128").decode())
            analyzer = AnalyzerParams.from_json(doc, meta.path)
            options = build.params_of(analyzer, posting_format, block)
        if params is not None and options != params:
            raise InvalidInputError(
                f"{where}: staged partitions {found[0]} and {pid} were built with different "
                "tokenizer options or format versions"
            )
        params = options
    assert params is not None
    with_positions = bool(params["with_position"])
    vocabulary: dict[str, int] = {}
    toks, docs, freqs, places, lengths, rows = [], [], [], [], [], []
    element_lists: list[np.ndarray | None] = []
    offset = 0
    for pid, token_format in zip(found, formats, strict=True):
        part = open_partition(store, staged, pid, token_format)
        try:
            if with_positions and part.position_columns != V2_POSITIONS:
                raise InvalidInputError(f"{part.invert.path}: positions of another layout")
            tok, doc, freq, pos = postings_of(part, with_positions)
            ids = np.array(
                [vocabulary.setdefault(t, len(vocabulary)) for t in tokens_by_id(part)], np.int64
            )
        finally:
            part.invert.close()
        toks.append(ids[tok] if len(tok) else tok)
        docs.append(doc + offset)
        freqs.append(freq)
        places.append(pos)
        lengths.append(part.lengths)
        rows.append(part.row_ids)
        element_lists.append(part.elements)
        offset += len(part.row_ids)
    tok, doc = np.concatenate(toks), np.concatenate(docs)
    freq, pos = np.concatenate(freqs), np.concatenate(places)
    # by token, each token's postings partition after partition: documents stay ascending
    order = np.argsort(tok, kind="stable")
    if with_positions and len(order):
        starts = np.cumsum(freq, dtype=np.int64) - freq
        f = freq[order].astype(np.int64)
        at = np.repeat(starts[order], f) + np.arange(int(f.sum())) - np.repeat(np.cumsum(f) - f, f)
        pos = pos[at]
    length = np.concatenate(lengths).astype(np.uint32)
    block = int(params.get("block_size", build.BLOCK))
    held = [e for e in element_lists if e is not None]
    elements = np.concatenate(held) if held and len(held) == len(element_lists) else None
    if not len(tok) and elements is None:
        tables = build.empty_partition(with_positions, False, block)
    else:
        tables = build.encoded_partition(
            tok[order], doc[order].astype(np.uint32), freq[order],
            pos if with_positions else None, length,
            np.concatenate(rows).astype(np.uint64), list(vocabulary), elements, block,
        )  # fmt: skip
    named = {f"part_0_{suffix}.lance": build.labelled(t, params) for suffix, t in tables.items()}
    named["metadata.lance"] = build.metadata_table(params, [0])
    written = build.write_tables(store, directory, named, version)
    for name, _, _ in store.list_dir(staged):
        store.delete(f"{staged}/{name}")
    store.remove_empty_dir(staged)
    return written

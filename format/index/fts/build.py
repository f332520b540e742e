"""Building INVERTED indices that pylance 14 reads and searches as its own.

One partition of every live row of the column, written as pylance's format version 2:

- ``part_0_docs.lance``: per document (a row with at least one token, in scan order) its
  ``_rowid`` and ``_num_tokens``; ``total_tokens`` in the metadata;
- ``part_0_tokens.lance``: the token set as a table (``token_set_format`` ``arrow``:
  ``_token`` in byte order, ``_token_id``), which pylance reads beside its own ``fst`` form;
  token ids follow first appearance, as pylance numbers them;
- ``part_0_invert.lance``: per token id its document count (``_length``), posting blocks of
  128 documents (BitPacker4x document-id deltas and frequencies behind the block's best
  score and first id; the last, partial block as varints) and the best score of all
  (``_max_score``). Scores in blocks are BM25 with this partition's statistics, the upper
  bounds pylance prunes with; with ``with_position``, each token's positions too
  (``_compressed_position``, ``_position_block_offset``: `encode.encode_positions`);
- ``metadata.lance``: the analyzer's ``params`` and the format keys (and the positions'
  layout keys when it has them).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from quiver.format import _kernels
from quiver.format.errors import InvalidInputError, UnsupportedFeatureError
from quiver.format.index.files import write_index_file
from quiver.format.index.fts import bm25
from quiver.format.index.fts.analyzer import CODE_FLAGS, Analyzer, AnalyzerParams, ngram_counts
from quiver.format.index.fts.code_tokens import CodeOptions
from quiver.format.index.fts.encode import encode_positions, encode_postings
from quiver.format.index.fts.index import ELEMENT_COLUMN, readable_format
from quiver.format.index.fts.postings import BLOCK, VARINT
from quiver.format.index.fts.wide import WIDE, encode_wide
from quiver.format.index.wire import fields, varint
from quiver.format.io.store import ObjectStore
from quiver.format.table.schema import LanceSchema

INVERTED_DETAILS = "/lance.table.InvertedIndexDetails"
# in an index's parameters: its documents are the elements of lists of strings (pylance's
# document_granularity LIST_ELEMENT), each with its row id and position in the list
LIST_ELEMENT = "list_element"
INDEX_VERSION = 2  # the manifest's index_version: the posting format version (2 by default)
# format 3 with 128-document posting blocks is format 2's layout under another number
# (pylance 14 writes it for `format_version=3`); its 256-document blocks are another layout
_FORMAT_NAMES: dict[Any, int | None] = {None: None} | {
    name: n for n in (1, 2, 3) for name in (n, str(n), f"v{n}", f"V{n}")
}
FILES = ("metadata.lance", "part_0_tokens.lance", "part_0_docs.lance", "part_0_invert.lance")


def files_of(partitions: int) -> tuple[str, ...]:
    """Every file an index of `partitions` partitions has (to discard a failed build)."""
    parts = [f"part_{p}_{s}.lance" for p in range(partitions) for s in ("tokens", "docs", "invert")]
    return ("metadata.lance", *parts)


_EMPTY_ROARING = bytes.fromhex("3a30000000000000")
_ENCODED_POSTINGS = 1 << 21  # postings encoded at a time
_NO_PLACES = np.zeros(0, np.uint32)
# the build's memory: `memory_limit` (MiB) by default, and what a token occurrence costs
# while its partition is built (its analysis, sort and postings, measured)
MEMORY_LIMIT, DEFAULT_MEMORY_MIB = "memory_limit", 1024
_BYTES_PER_OCCURRENCE = 40
_BYTES_PER_WORD = 5  # a word and its separator, short words counted generously
# pylance's index parameters and their defaults (create_scalar_index's keyword arguments)
DEFAULT_PARAMS: dict[str, Any] = {
    "base_tokenizer": "simple",
    "language": "English",
    "with_position": False,
    "max_token_length": 40,
    "lower_case": True,
    "stem": True,
    "remove_stop_words": True,
    "custom_stop_words": None,
    "ascii_folding": True,
}
# the n-gram tokenizer's options (recorded by every index, used by `ngram` ones)
NGRAM_PARAMS: dict[str, Any] = {"min_ngram_length": 3, "max_ngram_length": 3, "prefix_only": False}
# pylance 14's code analyzer flags: every index records them (off but for a code index's)
_CODE_DEFAULTS = {f: getattr(CodeOptions(), f) for f in CODE_FLAGS}


def index_params(options: dict[str, Any], where: str) -> dict[str, Any]:
    """pylance's `create_scalar_index(..., "INVERTED", **options)` options with defaults;
    refused when unknown or not built by Quiver yet."""
    known = set(DEFAULT_PARAMS) | set(NGRAM_PARAMS) | set(CODE_FLAGS)
    known |= {"memory_limit", "num_workers", "block_size", "format_version"}
    known |= {"document_granularity", "analyzer"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidInputError(f"{where}: unknown INVERTED index option {unknown[0]!r}")
    granularity = options.get("document_granularity")
    granularity = getattr(granularity, "value", granularity)  # pylance's enum, or its value
    if granularity not in (None, "row", "list_element"):
        raise InvalidInputError(
            f"{where}: document_granularity must be ROW or LIST_ELEMENT, not {granularity!r}"
        )
    # pylance's default: LANCE_FTS_FORMAT_VERSION when set, else format 2
    asked = options.get("format_version", os.environ.get("LANCE_FTS_FORMAT_VERSION"))
    block = options.get("block_size")
    if block not in (None, 128, 256):
        raise InvalidInputError(f"{where}: block_size must be 128 or 256, not {block!r}")
    if (
        not isinstance(asked, int | str | None)
        or isinstance(asked, bool)
        or asked not in _FORMAT_NAMES
    ):
        raise InvalidInputError(
            f"{where}: format_version must be 1, 2 or 3 ('v1', 'v2', 'v3'), not {asked!r}"
        )
    number = _FORMAT_NAMES[asked]
    options = _code_analyzer(options, where)
    if options.get("base_tokenizer") == "code":
        if number in (1, 2):
            raise InvalidInputError(
                f"{where}: base_tokenizer='code' requires FTS format_version=3, got {number}"
            )
        number = 3
    if number in (1, 2) and block == WIDE:
        raise InvalidInputError(
            f"{where}: format_version={number} is incompatible with block_size=256; use "
            "format_version=3"
        )
    if number == 1:
        raise UnsupportedFeatureError(
            f"{where}: Quiver builds INVERTED format versions 2 and 3 (not format 1)"
        )
    if block == WIDE:  # 256-document blocks are format 3's alone (pylance: the default then)
        number = 3
    defaults = dict(DEFAULT_PARAMS)
    if options.get("base_tokenizer") in ("ngram", "code"):  # no stemming or stop words
        defaults |= {"stem": False, "remove_stop_words": False}  # unless asked
    params = {**defaults, **NGRAM_PARAMS}
    if options.get("base_tokenizer") == "code":
        params |= _CODE_DEFAULTS
    params |= {k: v for k, v in options.items() if k in params}
    AnalyzerParams.from_json(params, where)  # refuses tokenizers and values it cannot take
    for key in ("min_ngram_length", "max_ngram_length"):
        params[key] = int(params[key])  # (numpy integers too)
    params["format_version"] = number or INDEX_VERSION
    limit = options.get(MEMORY_LIMIT)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise InvalidInputError(f"{where}: memory_limit must be a positive MiB count")
        params[MEMORY_LIMIT] = limit
    if block == WIDE:
        params["block_size"] = WIDE
    if granularity == "list_element":  # each element of a list of strings a document
        params[LIST_ELEMENT] = True
    return params


def _code_analyzer(options: dict[str, Any], where: str) -> dict[str, Any]:
    """`options` with pylance's `analyzer` ("text", or "code": the code tokenizer) folded
    into `base_tokenizer`, refused as pylance refuses a mismatch."""
    analyzer = options.get("analyzer")
    if analyzer not in (None, "text", "code"):
        raise InvalidInputError(
            f"{where}: unknown analyzer {analyzer!r}, expected 'text' or 'code'"
        )
    base = options.get("base_tokenizer")
    if analyzer == "code" and base not in (None, "code"):
        raise InvalidInputError(
            f"{where}: analyzer='code' requires base_tokenizer='code', got {base!r}"
        )
    flags = [k for k in CODE_FLAGS if k in options]
    if flags and analyzer != "code" and base != "code":
        raise InvalidInputError(f"{where}: code analyzer flags require analyzer='code'")
    for key in flags:
        if not isinstance(options[key], bool):
            raise InvalidInputError(f"{where}: {key} must be true or false")
    out = {k: v for k, v in options.items() if k != "analyzer"}
    if analyzer == "code":
        out["base_tokenizer"] = "code"
    return out


def format_version(params: dict[str, Any]) -> int:
    """The posting format version an index of `params` is written as (2 or 3)."""
    return int(params.get("format_version", INDEX_VERSION))


def details(params: dict[str, Any], version: int | None = None) -> bytes:
    """The index's `InvertedIndexDetails` protobuf (pylance's field numbers); its posting
    format is `version`, else the format of `params`."""

    def field(number: int, wire: int, payload: bytes) -> bytes:
        return varint(number << 3 | wire) + payload

    def text(number: int, value: str) -> bytes:
        data = value.encode("utf-8")
        return field(number, 2, varint(len(data)) + data)

    def number(n: int, value: int) -> bytes:
        return field(n, 0, varint(int(value))) if value else b""

    out = text(1, params["base_tokenizer"]) + text(2, json.dumps(params["language"]))
    out += number(3, params["with_position"])
    if params["max_token_length"] is not None:
        out += number(4, params["max_token_length"])
    for n, key in ((5, "lower_case"), (6, "stem"), (7, "remove_stop_words"), (8, "ascii_folding")):
        out += number(n, params[key])
    ngrams = {**NGRAM_PARAMS, **params}
    out += number(9, ngrams["min_ngram_length"]) + number(10, ngrams["max_ngram_length"])
    out += number(11, ngrams["prefix_only"]) + number(12, params.get("block_size", BLOCK))
    if params["base_tokenizer"] == "code":  # the code flags (2 and 3 always, as pylance)
        flags = {**_CODE_DEFAULTS, **params}
        code = number(1, flags["split_identifiers"])
        code += field(2, 0, varint(int(flags["split_on_numerics"])))
        code += field(3, 0, varint(int(flags["preserve_original"])))
        code += number(4, flags["index_operators"])
        out += field(13, 2, varint(len(code)) + code)
    out += number(14, params.get(LIST_ELEMENT, 0))
    out += number(15, version or format_version(params))
    return out


@functools.lru_cache(maxsize=4096)  # asked by every search, of the same few indices
def lists_elements(details_value: bytes) -> bool:
    """Whether INVERTED details describe an index of list elements as documents (pylance's
    `document_granularity=LIST_ELEMENT`, field 14), which full-text queries never use and
    Quiver neither builds nor rewrites."""
    try:
        return fields(details_value).get(14, [0])[0] == 1
    except ValueError:
        return False


def partition_tables(
    analyzer: Analyzer,
    texts: pa.Array,
    row_ids: np.ndarray,
    elements: np.ndarray | None = None,
    block: int = BLOCK,
) -> dict[str, pa.Table]:
    """The three files of one partition over `texts` (by suffix: invert, docs, tokens), or
    none when no text has a token. Documents are the texts with a token; with `elements`
    (list elements as documents: each text's position in its list), every text is one,
    tokens or not, as pylance indexes list elements."""
    with_positions = analyzer.params.with_position
    found = analyzer.occurrences(texts, positions=with_positions)
    if not len(found.rows) and elements is None:
        return {}
    vocabulary = found.vocabulary
    if elements is None:  # documents: the rows with a token, in order
        change = np.empty(len(found.rows), bool)
        change[0] = True
        np.not_equal(found.rows[1:], found.rows[:-1], out=change[1:])
        starts = np.flatnonzero(change)
        lengths = np.diff(np.append(starts, len(found.rows))).astype(np.uint32)
        doc_rows = np.asarray(row_ids)[found.rows[starts]].astype(np.uint64)
        n_docs = len(starts)
        of_doc = np.cumsum(change, dtype=np.uint32)  # the document of each occurrence
        of_doc -= np.uint32(1)
        del change
    else:
        n_docs = len(texts)
        lengths = np.bincount(found.rows, minlength=n_docs).astype(np.uint32)
        doc_rows = np.asarray(row_ids).astype(np.uint64)
        of_doc = found.rows.astype(np.uint32)
    if not len(found.rows):
        return encoded_partition(
            np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.uint32),
            np.zeros(0, np.int32) if with_positions else None, lengths, doc_rows, [], elements,
            block,
        )  # fmt: skip
    # (token, document) occurrences -> per token its documents ascending and frequencies,
    # by a counting sort of the occurrences on their token (a compiled pass)
    n = len(found.rows)
    places = found.positions if with_positions else _NO_PLACES
    doc = np.empty(n, np.uint32)
    counts = np.empty(n, np.uint32)
    ordered = np.empty(n if with_positions else 0, np.uint32)
    ends = np.empty(len(vocabulary) + 1, np.int64)
    postings = _kernels.group_postings(
        of_doc, np.ascontiguousarray(found.token_ids, np.int32),
        np.ascontiguousarray(places, np.uint32), ends, doc, counts, ordered,
    )  # fmt: skip
    del of_doc, found, places
    tok = np.repeat(np.arange(len(vocabulary), dtype=np.int32), np.diff(ends))
    return encoded_partition(
        tok, doc[:postings], counts[:postings], ordered if with_positions else None, lengths,
        doc_rows, vocabulary, elements, block,
    )  # fmt: skip


def encoded_partition(
    tok: np.ndarray,
    doc: np.ndarray,
    counts: np.ndarray,
    places: np.ndarray | None,
    lengths: np.ndarray,
    doc_rows: np.ndarray,
    vocabulary: list[str],
    elements: np.ndarray | None = None,
    block: int = BLOCK,
) -> dict[str, pa.Table]:
    """The three tables of one partition (by suffix: invert, docs, tokens) from its
    postings: token id, document and frequency of each, sorted by token then document
    (every token id of `vocabulary` holding one at least), each one's positions after
    another's (`places`, None without positions), and per document its row id and length.
    Block scores are BM25 with this partition's statistics."""
    n_docs, total = len(lengths), int(lengths.sum())
    df = np.bincount(tok, minlength=len(vocabulary)).astype(np.uint32)
    bounds = np.concatenate([[0], np.cumsum(df)]).astype(np.int64)
    # pylance's block scores: BM25 of each posting with this partition's statistics
    norm = bm25.norms(lengths, bm25.mean_length(total, n_docs))
    idf = bm25.idf(df, n_docs)
    counts = counts.astype(np.uint32, copy=False)

    def encode(first: int, last: int) -> tuple[pa.Array, np.ndarray]:
        lo, hi = int(bounds[first]), int(bounds[last])
        group = bounds[first : last + 1] - lo
        scores = bm25.weights(idf[tok[lo:hi]], counts[lo:hi], norm[doc[lo:hi]])
        # upper bounds for pruning: a hair above, so float rounding never prunes an answer
        scores = np.nextafter(scores, np.float32(np.inf))
        encoded, best = encode_postings(group, doc[lo:hi], counts[lo:hi], scores)
        if block == WIDE:  # format 3's wide blocks: no best scores inside, `_max_score` as above
            encoded = encode_wide(group, doc[lo:hi], counts[lo:hi])
        return encoded, best

    # a group of tokens at a time (the encoder's temporaries stay a few times a group's),
    # two half-sized groups at once: numpy's loops and the packing kernel run without the GIL
    groups = _token_groups(bounds, _ENCODED_POSTINGS // 2)
    if len(groups) > 1:
        with ThreadPoolExecutor(2, thread_name_prefix="quiver-fts-encode") as pool:
            done = list(pool.map(lambda g: encode(*g), groups))
    else:
        done = [encode(*g) for g in groups]
    parts = [encoded for encoded, _ in done]
    bests = [best for _, best in done]
    postings = parts[0] if len(parts) == 1 else pa.concat_arrays(parts)
    best = np.concatenate(bests) if bests else np.zeros(0, np.float32)
    positions = None
    if places is not None:
        positions = encode_positions(bounds, counts, places, docs_per_block=block)
    return {
        "invert": _invert(postings, best, df, positions, block),
        "docs": _docs(doc_rows, lengths, total, elements),
        "tokens": _tokens(vocabulary),
    }


def occurrence_budget(params: dict[str, Any]) -> int:
    """Token occurrences one partition is built from: pylance's `memory_limit` (MiB, a
    build option) over what an occurrence costs while its partition is built."""
    limit = params.get(MEMORY_LIMIT) or DEFAULT_MEMORY_MIB
    return max(1, int(limit) * (1 << 20) // _BYTES_PER_OCCURRENCE)


def row_ranges(analyzer: AnalyzerParams, texts: pa.Array, budget: int) -> list[tuple[int, int]]:
    """Consecutive ranges [lo, hi) of `texts` whose token occurrences (estimated from
    their bytes: the n-grams of that many characters, a word per five bytes, a code token
    per three) stay within `budget` each, cut greedily; one range at least."""
    n = len(texts)
    size = pc.fill_null(pc.binary_length(texts), 0).to_numpy(zero_copy_only=False)
    size = size.astype(np.int64)
    if analyzer.base_tokenizer == "ngram":
        estimate = ngram_counts(size, analyzer)[0]
    else:  # (the code tokenizer's identifiers, parts and operators come denser)
        estimate = size // (3 if analyzer.base_tokenizer == "code" else _BYTES_PER_WORD) + 1
    total = np.cumsum(estimate)
    if not n or int(total[-1]) <= budget:
        return [(0, n)]
    ranges, start = [], 0
    while start < n:  # greedily: as many rows as fit (one at least)
        before = int(total[start - 1]) if start else 0
        stop = max(int(np.searchsorted(total, before + budget, side="right")), start + 1)
        ranges.append((start, min(stop, n)))
        start = stop
    return ranges


def _token_groups(bounds: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive token ranges [first, last) of about `size` postings each (a token's
    postings never split; at least one range, empty when there is no token)."""
    tokens = len(bounds) - 1
    if tokens <= 0:
        return [(0, 0)]
    cuts = np.searchsorted(bounds, np.arange(size, int(bounds[-1]), size), side="right") - 1
    edges = np.unique(np.concatenate([[0], cuts, [tokens]]).clip(0, tokens))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def empty_partition(
    with_positions: bool, elements: bool = False, block: int = BLOCK
) -> dict[str, pa.Table]:
    """The tables of a partition of no document."""
    positions = (pa.array([], pa.large_binary()), pa.array([], pa.list_(pa.uint32())))
    nothing = np.zeros(0, np.uint32)
    return {
        "invert": _invert(
            pa.array([], pa.list_(pa.large_binary())),
            np.zeros(0, np.float32),
            np.zeros(0, np.uint32),
            positions if with_positions else None,
            block,
        ),
        "docs": _docs(np.zeros(0, np.uint64), nothing, 0, nothing if elements else None),
        "tokens": _tokens([]),
    }


def list_elements(
    lists: pa.Array, row_ids: np.ndarray, where: str
) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """A list-of-strings column as documents: every element of every list (null elements
    too, as documents of no token; null and empty lists none), each with its row's id and
    its position in the list."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks()
    kind = lists.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not (
        pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
    ):
        raise InvalidInputError(
            f"{where}: an INVERTED index of list elements needs a list of strings, not {kind}"
        )
    offsets = np.asarray(lists.offsets.to_numpy(zero_copy_only=False), np.int64)
    counts = np.diff(offsets)
    if lists.null_count:
        counts[~np.asarray(lists.is_valid())] = 0
    values = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    inside = np.repeat(counts > 0, np.diff(offsets))  # elements of null lists left out
    rows = np.repeat(np.arange(len(lists)), counts)
    positions = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    texts = values.filter(pa.array(inside)) if not inside.all() else values
    return texts, np.asarray(row_ids)[rows], positions.astype(np.uint32)


def write_tables(
    store: ObjectStore, directory: str, tables: dict[str, pa.Table], version: str
) -> list[tuple[str, int]]:
    return [
        (name, write_index_file(
            store, f"{directory}/{name}", LanceSchema.from_arrow(t.schema), [t], version
        ))
        for name, t in tables.items()
    ]  # fmt: skip


def build_inverted(
    store: ObjectStore,
    directory: str,
    texts: pa.Array,
    row_ids: np.ndarray,
    version: str,
    params: dict[str, Any],
    previous: Sequence[tuple[ObjectStore, str]] = (),
    *,
    untrained: bool = False,
) -> list[tuple[str, int]]:
    """Write an INVERTED index of `texts` (their row ids beside) into `directory`; (file,
    size) pairs. With `previous` segments (their store and directory), the new index holds
    their partitions first, unchanged, then one over `texts`: pylance's way of bringing an
    index up to date, which keeps the statistics the old documents were indexed with.
    `untrained` (`train=False`): no partition at all, only the metadata, as pylance
    writes an index that `optimize_indices` fills later."""
    analyzer = Analyzer(AnalyzerParams.from_json(params, store.uri_of(directory)))
    files: list[tuple[str, int]] = []
    count = 0
    for old_store, old_dir in previous:
        for pid, token_format in _partitions_of(old_store, old_dir):
            files += _copy_partition(
                old_store, old_dir, pid, token_format, store, directory, count, version
            )
            count += 1
    elements = None
    if params.get(LIST_ELEMENT):
        texts, row_ids, elements = list_elements(texts, row_ids, store.uri_of(directory))
    block = int(params.get("block_size", BLOCK))
    ranges = [] if untrained else row_ranges(analyzer.params, texts, occurrence_budget(params))
    written = False
    for lo, hi in ranges:  # a partition per range: the build's memory stays the budget's
        part = elements[lo:hi] if elements is not None else None
        tables = partition_tables(analyzer, texts.slice(lo, hi - lo), row_ids[lo:hi], part, block)
        if not tables and (written or count or hi < len(texts)):
            continue
        if not tables:  # an index of no document: one empty partition, as pylance writes
            tables = empty_partition(bool(params["with_position"]), elements is not None, block)
        named = {
            f"part_{count}_{suffix}.lance": labelled(t, params) for suffix, t in tables.items()
        }
        files += write_tables(store, directory, named, version)
        count += 1
        written = True
        del tables, named
    meta = {"metadata.lance": metadata_table(params, list(range(count)))}
    files += write_tables(store, directory, meta, version)
    return files


def labelled(table: pa.Table, params: dict[str, Any]) -> pa.Table:
    """A partition's table with the format version of `params` where it records one."""
    metadata = table.schema.metadata or {}
    if b"format_version" not in metadata:
        return table
    version = str(format_version(params)).encode()
    return table.replace_schema_metadata({**metadata, b"format_version": version})


def params_of(analyzer: AnalyzerParams, format_version: int, block: int = BLOCK) -> dict[str, Any]:
    """The build parameters (`index_params`) of an index segment or staged partition: its
    analyzer's options, its format version (format 1 is brought up as format 2) and its
    posting block size."""
    version = max(2, format_version)
    options = {
        "base_tokenizer": analyzer.base_tokenizer,
        "language": analyzer.language,
        "max_token_length": analyzer.max_token_length,
        "lower_case": analyzer.lower_case,
        "stem": analyzer.stem,
        "remove_stop_words": analyzer.remove_stop_words,
        "custom_stop_words": list(analyzer.custom_stop_words)
        if analyzer.custom_stop_words
        else None,
        "ascii_folding": analyzer.ascii_folding,
        "with_position": analyzer.with_position,
        **(
            {k: getattr(analyzer.code, k) for k in CODE_FLAGS}
            if analyzer.base_tokenizer == "code"
            else {}
        ),
        "min_ngram_length": analyzer.min_ngram_length,
        "max_ngram_length": analyzer.max_ngram_length,
        "prefix_only": analyzer.prefix_only,
        "format_version": version,
    }
    if block == WIDE:
        options["block_size"] = WIDE
    return index_params(options, "index")


def _partitions_of(store: ObjectStore, directory: str) -> list[tuple[int, str]]:
    """(partition id, token set format) of an index segment."""
    from quiver.format.index.files import IndexFile

    with IndexFile(store, f"{directory}/metadata.lance") as meta:
        ids = json.loads(meta.text("partitions"))
        token_format = meta.metadata.get("token_set_format", b"arrow").decode()
        version = readable_format(meta.metadata, store.uri_of(directory))
    if version == "1":
        raise UnsupportedFeatureError(
            f"{store.uri_of(directory)}: bringing a format {version} full-text index up to "
            "date is not supported (rebuild it)"
        )
    return [(int(p), token_format) for p in ids]


def _copy_partition(
    src: ObjectStore,
    src_dir: str,
    pid: int,
    token_format: str,
    dst: ObjectStore,
    dst_dir: str,
    new_id: int,
    version: str,
) -> list[tuple[str, int]]:
    """One partition of an old segment as partition `new_id` of the new one: its documents
    and postings copied, its token set rewritten as a table (pylance's own are transducers,
    and one index has one token set format)."""
    from quiver.format.index.files import IndexFile
    from quiver.format.index.fts.fst import FstMap

    out = []
    for suffix in ("docs", "invert"):
        data = src.read_all(f"{src_dir}/part_{pid}_{suffix}.lance")
        name = f"part_{new_id}_{suffix}.lance"
        dst.put(f"{dst_dir}/{name}", data)
        out.append((name, len(data)))
    with IndexFile(src, f"{src_dir}/part_{pid}_tokens.lance") as tf:
        if token_format == "fst":
            raw = tf.read(["_token_fst_bytes"]).column(0)[0].as_py()
            pairs = sorted(FstMap(raw, tf.path).items(), key=lambda p: p[1])
        else:
            t = tf.read(["_token", "_token_id"])
            pairs = sorted(
                zip(t.column(0).to_pylist(), t.column(1).to_pylist(), strict=True),
                key=lambda p: p[1],
            )
    tokens = [token for token, _ in pairs]
    if [i for _, i in pairs] != list(range(len(pairs))):
        raise InvalidInputError(
            f"{src.uri_of(src_dir)}: token ids of partition {pid} are not dense"
        )
    out += write_tables(dst, dst_dir, {f"part_{new_id}_tokens.lance": _tokens(tokens)}, version)
    return out


_FORMAT = {"format_version": "2", "posting_block_size": str(BLOCK), "posting_tail_codec": VARINT}
_POSITIONS = {"positions_layout": "shared_stream_v2", "positions_codec": "packed_delta_v1"}


def _invert(
    postings: pa.Array,
    best: np.ndarray,
    df: np.ndarray,
    positions: tuple[pa.Array, pa.Array] | None = None,
    block: int = BLOCK,
) -> pa.Table:
    fields = [
        pa.field("_posting", pa.list_(pa.large_binary()), nullable=False),
        pa.field("_max_score", pa.float32(), nullable=False),
        pa.field("_length", pa.uint32(), nullable=False),
    ]
    columns = [postings, pa.array(best, pa.float32()), df]
    metadata = {**_FORMAT, "posting_block_size": str(block)}
    if positions is not None:
        fields += [
            pa.field("_compressed_position", pa.large_binary(), nullable=False),
            pa.field("_position_block_offset", pa.list_(pa.uint32()), nullable=False),
        ]
        columns += list(positions)
        metadata = {**metadata, **_POSITIONS}
    return pa.table(columns, schema=pa.schema(fields, metadata=metadata))


def _docs(
    rows: np.ndarray, lengths: np.ndarray, total: int, elements: np.ndarray | None = None
) -> pa.Table:
    fields = [
        pa.field("_rowid", pa.uint64(), nullable=False),
        pa.field("_num_tokens", pa.uint32(), nullable=False),
    ]
    columns = [rows, lengths]
    if elements is not None:  # each document's position in its row's list
        fields.append(pa.field(ELEMENT_COLUMN, pa.uint32(), nullable=False))
        columns.append(np.asarray(elements, np.uint32))
    schema = pa.schema(fields, metadata={"total_tokens": str(total)})
    return pa.table(columns, schema=schema)


def _tokens(tokens: list[str]) -> pa.Table:
    order = sorted(range(len(tokens)), key=lambda i: tokens[i].encode("utf-8"))
    schema = pa.schema(
        [
            pa.field("_token", pa.string(), nullable=False),
            pa.field("_token_id", pa.uint32(), nullable=False),
        ]
    )
    return pa.table(
        [pa.array([tokens[i] for i in order], pa.string()), pa.array(order, pa.uint32())],
        schema=schema,
    )


def metadata_table(params: dict[str, Any], partitions: list[int], rows: int = 1) -> pa.Table:
    """An index's `metadata.lance` table (a staged partition's has no row)."""
    internal = ("format_version", "block_size", LIST_ELEMENT, MEMORY_LIMIT, *CODE_FLAGS)
    doc = {
        "lance_tokenizer": "text",
        **{k: v for k, v in params.items() if k not in internal},
        **{k: params.get(k, v) for k, v in NGRAM_PARAMS.items()},
        "block_size": params.get("block_size", BLOCK),
        **{k: bool(params.get(k, False)) for k in CODE_FLAGS},
    }
    schema = pa.schema(
        [pa.field("deleted_fragments", pa.binary(), nullable=False)],
        metadata={
            **_FORMAT,
            "posting_block_size": str(params.get("block_size", BLOCK)),
            "format_version": str(format_version(params)),
            **(_POSITIONS if params.get("with_position") else {}),
            "params": json.dumps(doc, separators=(",", ":")),
            "partitions": json.dumps(partitions),
            "token_set_format": "arrow",
        },
    )
    return pa.table([pa.array([_EMPTY_ROARING] * rows, pa.binary())], schema=schema)

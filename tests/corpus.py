"""Shared Lance compatibility corpus: varied datasets written by pylance, the read-path oracle.

`build_corpus(root, storage_versions)` writes, for every requested storage version ("legacy",
"2.0", "2.1", "2.2", "2.3", ...), these datasets under ``root/<version>/<name>``:

- ``types``: every Arrow type pylance writes at that version (ints, floats incl. float16 and
  NaN/inf/-0.0, bool, string/large_string/binary/large_binary/views with "", unicode, NUL bytes
  and >300 byte values, decimal128/256, date/time/timestamp (with and without tz)/duration in
  every unit, nested structs, lists, large lists, list<struct>, list<list>, fixed-size lists,
  fixed_size_binary, dictionaries, maps, null and empty-struct columns, low-cardinality,
  constant, all-null, sorted and small-int columns, field and schema metadata), nulls in every
  nullable column, several fragments and several row groups (legacy) / pages (2.0).
- ``history``: create, 3 appends, deletes (a few rows, most of a fragment, a whole fragment),
  SQL ``add_columns``, ``drop_columns``, rename, appends after each schema change, tags and a
  branch whose commits must not leak into the main line.
- ``stable_row_ids``: stable row ids with appends, deletes, an update and a compaction, so row ids
  differ from row addresses and the row id sequences have holes.
- ``deletes_bitmap`` / ``deletes_arrow``: a >5000-row deletion (bitmap ``.bin`` file) and a few
  deleted rows (Arrow ``.arrow`` file); ``all_deleted``: every row deleted.
- ``empty`` (zero rows) and ``empty_append`` (a zero-row append: a version without new fragment).
- ``multi_file``: fragments with several data files (UDF and SQL ``add_columns``, ``merge``) and
  an all-null column added without any data file (2.x only).
- ``altered_type``: ``alter_columns`` with ``data_type``; old data files keep stale field ids.
- ``tombstone``: ``LanceFragment.update_columns`` so an old data file has a ``-2`` field.
- ``second_writer``: explicit ``data_storage_version`` then appends from other writer calls.
- ``mixed_file_versions`` (2.x only): appends written with another 2.x file version.
- ``overwrite``: overwrite with a different schema, append, restore of version 1.
- ``odd_names``: column and struct-child names with spaces, unicode, emoji, case, dashes.
- ``v1_manifest_paths``: ``enable_v2_manifest_paths=False`` (``_versions/<n>.manifest``).
- ``cleaned``: old versions removed by ``cleanup_old_versions`` (tagged version kept).
- ``encodings``: compression (zstd/lz4/fsst/none, level) and encoding hints (packed struct,
  structural encoding, dictionary, RLE, byte-stream-split).
- ``blob`` (2.x only): a ``lance-encoding:blob`` column, read back as descriptions.
- ``indexed``: a BTREE and a BITMAP scalar index next to the data.
- ``overlay`` (only with ``include_unstable=True``): pylance 14 data overlays (dense and sparse,
  layered, with nulls and deletes); pylance opens it only inside `unstable_overlays()`.

Type exclusions per version are in `TYPE_EXCLUSIONS`, skipped datasets/steps in
`DATASET_EXCLUSIONS`; anything else that fails at build time lands in `DISCOVERED_EXCLUSIONS`.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import os
import shutil
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import DataFile, write_fragments

ALL_STORAGE_VERSIONS: tuple[str, ...] = ("legacy", "2.0", "2.1", "2.2", "2.3")
SEED = 20240611

# (storage version or "*" for all, column of the "types" dataset) -> what pylance 14.0.2 said.
TYPE_EXCLUSIONS: dict[tuple[str, str], str] = {
    ("*", "list_view"): "LanceError(Schema): Unsupported data type: ListView(...)",
    ("*", "run_end_encoded"): "LanceError(Schema): Unsupported data type: RunEndEncoded(...)",
    ("*", "interval_mdn"): "LanceError(Schema): Unsupported data type: Interval(MonthDayNano)",
    ("*", "decimal32"): "LanceError(Schema): Unsupported data type: Decimal32(9, 2)",
    ("*", "decimal64"): "LanceError(Schema): Unsupported data type: Decimal64(18, 4)",
    ("legacy", "map"): "LanceError(Schema): FileWriter::write: unsupported data type: Map(...)",
    ("legacy", "list_map"): (
        "LanceError(Schema): FileWriter::write: unsupported data type: Map(...)"
    ),
    ("legacy", "struct_map"): "LanceError(Schema): FileWriter::write: unsupported data type: Map",
    ("legacy", "fsl_struct"): "PanicException: Expecting fixed stride data type, found Struct(...)",
    ("legacy", "empty_struct"): (
        "written, but reading panics: use StructArray::try_new_with_length or "
        "StructArray::new_empty_fields ... (Lance reader producer terminated before end of stream)"
    ),
    ("2.0", "map"): "Not supported: Lance v2.0 has no field encoding for 'map' with data type Map",
    ("2.0", "list_map"): "Not supported: Lance v2.0 has no field encoding for 'item' ... Map(...)",
    ("2.0", "struct_map"): "Not supported: Lance v2.0 has no field encoding for 'm' ... Map(...)",
    ("2.0", "fsl_struct"): (
        "written, but reading fails: index out of bounds: the len is 0 but the index is 0 "
        "(Lance reader producer terminated before end of stream)"
    ),
    ("2.1", "map"): "Not supported: Map data type is not enabled by the selected file format",
    ("2.1", "list_map"): "Not supported: Map data type is not enabled by the selected file format",
    ("2.1", "struct_map"): (
        "Not supported: Map data type is not enabled by the selected file format"
    ),
    ("2.1", "fsl_struct"): (
        "Not supported: FixedSizeList<Struct> is not enabled by the selected file format"
    ),
    ("2.1", "empty_struct"): (
        "written, but reading the table fails once other columns follow it: Encountered corrupt "
        "file variable width data block: invalid variable-width layout for Int32"
    ),
    ("2.2", "empty_struct"): (
        "written, but reading the table fails once other columns follow it: LanceError(Arrow): "
        "Invalid argument error: Need at least 8 bytes in buffers[0] in array of type Int64, "
        "but got 4"
    ),
    ("2.2", "fsl_struct"): (
        "written, but reading it with other columns fails: Invalid user input: cannot read "
        "columns of differing lengths together (id=8, name_nn=8, fsl_struct=16)"
    ),
    ("2.3", "empty_struct"): (
        "written, but reading the table fails once other columns follow it: Invalid user "
        "input: No-values plane has materialized leaf values"
    ),
    ("2.3", "fsl_struct"): (
        "written, but reading it with other columns fails: Invalid user input: cannot read "
        "columns of differing lengths together (id=200, name_nn=200, fsl_struct=400)"
    ),
}

# Storage versions that reject null struct values; their data has no null structs (the
# children are still null where the struct would have been).
NO_STRUCT_VALIDITY: dict[str, str] = {
    "2.0": (
        "Invalid user input: The struct field `struct` contains N null value(s), but Lance file "
        "version 2.0 does not encode struct validity; use file version 2.1 or later"
    ),
}

OVERLAY_ENV = "LANCE_ENABLE_UNSTABLE_DATA_OVERLAY_FILES"

# (storage version, "2.1+" or "*", dataset:step) -> a pylance 14 write limitation worked around.
WRITE_LIMITATIONS: dict[tuple[str, str], str] = {
    ("legacy", "history:add_columns"): (
        "Not supported: Fragment Updater: missing too many rows in merge, run compaction to "
        "materialize deletions first -- raised when a whole legacy row group of a fragment is "
        "deleted; history uses 100-row groups so no group is entirely deleted"
    ),
    ("legacy", "multi_file:merge"): (
        "Invalid user input: Column 'm' has null values of type: Float64, but storing nulls for "
        "this data type is not supported by the dataset's current Lance file format version: V1 "
        "-- merge/update_columns reject nulls on legacy (write_dataset silently drops them); the "
        "legacy merge covers every row and has no nulls"
    ),
    ("legacy", "tombstone:update_columns"): "same null check as multi_file:merge; no null updates",
    ("*", "overlay"): (
        "data overlays are unstable in pylance 14: committing one works, but opening, reading or "
        "writing that version fails (Not supported: This dataset cannot be read by this version "
        "of Lance ... Flags: 64, or 65 with deletion files) unless the environment variable "
        f"{OVERLAY_ENV} is set (to any value); see unstable_overlays()"
    ),
    ("2.1+", "types:slices"): (
        "writing a nested struct (struct<struct<...>>) array that is a slice with a non-zero "
        "offset panics (JoinError::Panic / 'assertion failed: end <= self.len()') or fails with "
        "'null_bit_buffer size too small. got 125 needed 250' when pylance splits it into "
        "files; the types table is concatenated from freshly built one-file chunks"
    ),
    ("2.0", "encodings:packed"): (
        "Invalid user input: Packed struct encoder currently only implemented for fixed-width "
        "data blocks -- the packed struct has no nulls"
    ),
}

# (storage version or "*", dataset or "dataset:step") -> why it is not in the corpus.
DATASET_EXCLUSIONS: dict[tuple[str, str], str] = {
    ("*", "empty_fragment"): (
        "pylance 14 never writes a zero-row fragment: write_dataset/write_fragments write none, "
        "LanceFragment.create raises 'Invalid user input: Input data was empty.', and an Append "
        "commit silently drops a FragmentMetadata with physical_rows=0"
    ),
    ("*", "odd_names:dotted"): (
        "LanceError(Schema): Top level field dotted.name cannot contain `.`. Maybe you meant to "
        "create a struct field?"
    ),
    ("legacy", "multi_file:null_column"): (
        "Not supported: Cannot add all-null columns to legacy dataset version."
    ),
    ("legacy", "mixed_file_versions"): (
        "Invalid user input: Cannot append data files in version 2.1 to a dataset with default "
        "version 0.1: V1 and V2 storage versions cannot be mixed"
    ),
    ("legacy", "blob"): (
        "written, but reading panics in arrow-array cast.rs: 'struct array' (Lance reader "
        "producer terminated before end of stream)"
    ),
}

# What pylance 14 returns that differs from what was written (the read path must match it).
ROUNDTRIP_NOTES: dict[str, str] = {
    "legacy": (
        "no validity for fixed-width data: nulls read back as 0 / False / 0.0 / epoch / zeroed "
        "fixed-size lists and binaries, null lists as [], null structs as structs of defaults; "
        "strings and binaries keep nulls but an empty value reads back as null; a null "
        "dictionary index reads back as index 0; empty datasets report data_storage_version "
        "'0.1'; max_rows_per_file is rounded up to whole row groups"
    ),
    "2.0": "dictionary columns read back with an extra null entry appended to the dictionary",
    "*": "string_view / binary_view columns are stored and read back as string / binary",
}

# Filled by build_corpus with what failed unexpectedly: (version, dataset or type) -> error.
DISCOVERED_EXCLUSIONS: dict[tuple[str, str], str] = {}


# The storage versions the session-wide `corpus` fixture is written at (read-compat tests
# parametrise the newer ones themselves).
CORPUS_STORAGE_VERSIONS: tuple[str, ...] = ("legacy", "2.0")


def pylance_table(uri: str | Path, version: int | str | None = None, **kwargs: Any) -> pa.Table:
    """What pylance, the reference engine, returns for the dataset at ``uri`` and ``version``."""
    return lance.dataset(str(uri), version=version).to_table(**kwargs)


@dataclass(frozen=True)
class CorpusDataset:
    """One dataset of the corpus, written by pylance at one storage version."""

    name: str
    uri: str
    storage_version: str
    features: tuple[str, ...]


def excluded(version: str, key: str) -> str | None:
    """Return why ``key`` (a type column or dataset) is excluded at ``version``, if it is."""
    for table in (TYPE_EXCLUSIONS, DATASET_EXCLUSIONS, DISCOVERED_EXCLUSIONS):
        reason = table.get((version, key)) or table.get(("*", key))
        if reason:
            return reason
    return None


@contextlib.contextmanager
def unstable_overlays() -> Iterator[None]:
    """Let pylance open datasets with data overlays (feature flag 64) inside the block."""
    previous = os.environ.get(OVERLAY_ENV)
    os.environ[OVERLAY_ENV] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ[OVERLAY_ENV]
        else:
            os.environ[OVERLAY_ENV] = previous


def _is_fatal(exc: BaseException) -> bool:
    """Whether an exception must propagate (pyo3 panics are BaseExceptions but not fatal)."""
    fatal = (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError, NameError, SyntaxError)
    return isinstance(exc, fatal)


def _describe(exc: BaseException) -> str:
    """First line of an exception, prefixed by its type."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


# --------------------------------------------------------------------------------------------
# Random data for the "types" dataset
# --------------------------------------------------------------------------------------------

_ALPHABET = np.array(list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789-_.,éüßøΩж日本語🙂🚀"))


@dataclass
class _Gen:
    """Seeded random generator plus the per-version data constraints."""

    rng: np.random.Generator
    struct_nulls: bool = True

    def mask(self, n: int, p: float = 0.1) -> np.ndarray:
        """A null mask with row 0 valid and row 1 null."""
        m = self.rng.random(n) < p
        if n > 1:
            m[0], m[1] = False, True
        return m

    def struct_mask(self, n: int) -> pa.Array | None:
        """A null mask for a struct array, or None where struct validity is unsupported."""
        return pa.array(self.mask(n)) if self.struct_nulls else None

    def texts(self, n: int, max_len: int = 24) -> list[str]:
        """Random unicode strings with "", a >300 byte value and an embedded NUL."""
        lens = self.rng.integers(0, max_len, size=n)
        chars = self.rng.choice(_ALPHABET, size=int(lens.sum()))
        out, pos = [], 0
        for length in lens:
            out.append("".join(chars[pos : pos + length]))
            pos += length
        specials = ["", "x", "long:" + "ü日-" * 120, "nul\x00byte", "🙂" * 90]
        out[: min(n, len(specials))] = specials[: min(n, len(specials))]
        return out

    def blobs(self, n: int, max_len: int = 24) -> list[bytes]:
        """Random byte strings with b"", a >300 byte value and NUL bytes."""
        lens = self.rng.integers(0, max_len, size=n)
        data = self.rng.bytes(int(lens.sum()))
        out, pos = [], 0
        for length in lens:
            out.append(data[pos : pos + length])
            pos += length
        specials = [b"", b"\x00", b"\xff" * 400, b"\x00\x01\x02"]
        out[: min(n, len(specials))] = specials[: min(n, len(specials))]
        return out

    def offsets(self, mask: np.ndarray, max_len: int = 4, large: bool = False) -> pa.Array:
        """List offsets with empty lists at null rows."""
        lens = self.rng.integers(0, max_len + 1, size=len(mask))
        lens[mask] = 0
        offs = np.zeros(len(mask) + 1, dtype=np.int64 if large else np.int32)
        np.cumsum(lens, out=offs[1:])
        return pa.array(offs)


def _with_nulls(values: list, mask: np.ndarray) -> list:
    """Replace masked positions of ``values`` with None."""
    return [None if m else v for v, m in zip(values, mask, strict=True)]


def _ints(dtype: type) -> Callable[[_Gen, int], pa.Array]:
    """Integer column over the full range of ``dtype`` (min and max included)."""
    info = np.iinfo(dtype)

    def make(g: _Gen, n: int) -> pa.Array:
        v = g.rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True)
        if n > 3:
            v[2], v[3] = info.max, info.min
        return pa.array(v, mask=g.mask(n))

    return make


def _floats(dtype: type) -> Callable[[_Gen, int], pa.Array]:
    """Float column with NaN, +-inf, -0.0 and extreme values."""
    info = np.finfo(dtype)

    def make(g: _Gen, n: int) -> pa.Array:
        v = (g.rng.standard_normal(n) * 1000).astype(dtype)
        specials = np.array([0.5, 0.0, np.nan, np.inf, -np.inf, -0.0, info.max, info.tiny], dtype)
        v[: min(n, len(specials))] = specials[: min(n, len(specials))]
        return pa.array(v, mask=g.mask(n))

    return make


def _temporal(typ: pa.DataType, low: int, high: int, step: int = 1) -> Callable:
    """Temporal column made by viewing random integers as ``typ``."""
    storage = pa.int32() if typ.bit_width == 32 else pa.int64()

    def make(g: _Gen, n: int) -> pa.Array:
        v = g.rng.integers(low, high, size=n, dtype=np.int64) * step
        return pa.array(v, mask=g.mask(n), type=pa.int64()).cast(storage).view(typ)

    return make


def _decimals(typ: pa.DataType) -> Callable[[_Gen, int], pa.Array]:
    """Decimal column including the largest and smallest representable values."""

    def make(g: _Gen, n: int) -> pa.Array:
        raw = g.rng.integers(-(10**15), 10**15, size=n)
        vals = [decimal.Decimal(f"{int(i)}E-{typ.scale}") for i in raw]
        nines = f"{'9' * typ.precision}E-{typ.scale}"  # strings: arithmetic would round
        if n > 3:
            vals[2], vals[3] = decimal.Decimal(nines), decimal.Decimal("-" + nines)
        return pa.array(_with_nulls(vals, g.mask(n)), type=typ)

    return make


def _strings(typ: pa.DataType, max_len: int = 24) -> Callable[[_Gen, int], pa.Array]:
    """String-like column of random unicode text."""
    return lambda g, n: pa.array(_with_nulls(g.texts(n, max_len), g.mask(n)), type=typ)


def _binaries(typ: pa.DataType) -> Callable[[_Gen, int], pa.Array]:
    """Binary-like column of random bytes."""
    return lambda g, n: pa.array(_with_nulls(g.blobs(n), g.mask(n)), type=typ)


def _bools(g: _Gen, n: int) -> pa.Array:
    """Boolean column."""
    return pa.array(g.rng.random(n) < 0.5, mask=g.mask(n))


def _struct(g: _Gen, n: int) -> pa.Array:
    """struct<a: int32 (with field metadata), b: string, c: float64>."""
    fields = [
        pa.field("a", pa.int32(), metadata={"child": "yes"}),
        pa.field("b", pa.string()),
        pa.field("c", pa.float64()),
    ]
    children = [_ints(np.int32)(g, n), _strings(pa.string())(g, n), _floats(np.float64)(g, n)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=g.struct_mask(n))


def _nested_struct(g: _Gen, n: int) -> pa.Array:
    """struct<inner: struct<x: int64, y: string>, flag: bool>."""
    inner = pa.StructArray.from_arrays(
        [_ints(np.int64)(g, n), _strings(pa.string())(g, n)],
        names=["x", "y"],
        mask=g.struct_mask(n),
    )
    return pa.StructArray.from_arrays(
        [inner, _bools(g, n)], names=["inner", "flag"], mask=g.struct_mask(n)
    )


def _list_of(child: Callable[[_Gen, int], pa.Array], large: bool = False) -> Callable:
    """List (or large list) column whose items come from ``child``."""

    def make(g: _Gen, n: int) -> pa.Array:
        mask = g.mask(n)
        offs = g.offsets(mask, large=large)
        values = child(g, int(offs[-1].as_py()))
        cls = pa.LargeListArray if large else pa.ListArray
        return cls.from_arrays(offs, values, mask=pa.array(mask))

    return make


def _fsl_of(child: Callable[[_Gen, int], pa.Array], size: int) -> Callable:
    """Fixed-size list column of ``size`` items from ``child``."""

    def make(g: _Gen, n: int) -> pa.Array:
        values = child(g, n * size)
        return pa.FixedSizeListArray.from_arrays(values, size, mask=pa.array(g.mask(n)))

    return make


def _dense_floats32(g: _Gen, n: int) -> pa.Array:
    """float32 values without nulls (vector embeddings)."""
    return pa.array(g.rng.standard_normal(n).astype(np.float32))


def _struct_of(**children: Callable[[_Gen, int], pa.Array]) -> Callable:
    """Struct column with the given child makers."""

    def make(g: _Gen, n: int) -> pa.Array:
        arrays = [f(g, n) for f in children.values()]
        return pa.StructArray.from_arrays(arrays, names=list(children), mask=g.struct_mask(n))

    return make


def _maps(g: _Gen, n: int) -> pa.Array:
    """map<string, int32> with unique keys per entry."""
    mask = g.mask(n)
    offs = g.offsets(mask)
    lens = np.diff(offs.to_numpy())
    keys = pa.array([f"k{j}" for length in lens for j in range(length)], pa.string())
    items = _ints(np.int32)(g, len(keys))
    return pa.MapArray.from_arrays(offs, keys, items, mask=pa.array(mask))


def _dictionary(index_type: pa.DataType, values: pa.Array) -> Callable:
    """Dictionary column with null indices."""

    def make(g: _Gen, n: int) -> pa.Array:
        idx = g.rng.integers(0, len(values), size=n)
        indices = pa.array(idx, mask=g.mask(n)).cast(index_type)
        return pa.DictionaryArray.from_arrays(indices, values)

    return make


def _fsb(g: _Gen, n: int) -> pa.Array:
    """fixed_size_binary(16)."""
    data = g.rng.bytes(16 * n)
    vals = [data[i * 16 : (i + 1) * 16] for i in range(n)]
    return pa.array(_with_nulls(vals, g.mask(n)), type=pa.binary(16))


def _long_text(g: _Gen, n: int) -> pa.Array:
    """Strings of 300..2000 bytes (large values, overflowing small pages)."""
    lens = g.rng.integers(300, 2000, size=n)
    base = "lorem ipsum dolor sit amet ünïcødé 日本語 " * 60
    starts = g.rng.integers(0, 100, size=n)
    vals = [base[s : s + length] for s, length in zip(starts, lens, strict=True)]
    return pa.array(_with_nulls(vals, g.mask(n)), type=pa.string())


def _low_card(g: _Gen, n: int) -> pa.Array:
    """Low-cardinality strings (dictionary-encoded by the writer)."""
    words = np.array(["red", "green", "blue", "", "ünïcødé"])
    return pa.array(_with_nulls(list(words[g.rng.integers(0, 5, size=n)]), g.mask(n)))


def _constant(g: _Gen, n: int) -> pa.Array:
    """A constant int32 column (no nulls, nullable field)."""
    return pa.array(np.full(n, 7, dtype=np.int32))


def _all_null(g: _Gen, n: int) -> pa.Array:
    """A nullable int64 column where every value is null."""
    return pa.nulls(n, pa.int64())


def _sorted(g: _Gen, n: int) -> pa.Array:
    """A sorted int64 column (delta/bit-packing friendly)."""
    return pa.array(np.cumsum(g.rng.integers(0, 5, size=n)) + 1_000_000, mask=g.mask(n))


def _small_ints(g: _Gen, n: int) -> pa.Array:
    """Small int64 values (bit-packing friendly)."""
    return pa.array(g.rng.integers(0, 16, size=n), mask=g.mask(n))


def _interval(g: _Gen, n: int) -> pa.Array:
    """month_day_nano intervals (not supported by pylance)."""
    vals = [(int(a), int(b), int(c)) for a, b, c in g.rng.integers(0, 100, size=(n, 3))]
    return pa.array(_with_nulls(vals, g.mask(n)), type=pa.month_day_nano_interval())


def _ree(g: _Gen, n: int) -> pa.Array:
    """Run-end encoded int64 (not supported by pylance)."""
    return pa.RunEndEncodedArray.from_arrays(pa.array([n], pa.int32()), pa.array([5]))


def _list_view(g: _Gen, n: int) -> pa.Array:
    """list_view<int32> (not supported by pylance)."""
    return _list_of(_ints(np.int32))(g, n).cast(pa.list_view(pa.int32()))


_DAY_MS = 86_400_000

# name -> (maker, field metadata or None)
TYPE_COLUMNS: dict[str, tuple[Callable[[_Gen, int], pa.Array], dict[str, str] | None]] = {
    "int8": (_ints(np.int8), None),
    "int16": (_ints(np.int16), None),
    "int32": (_ints(np.int32), {"unit": "cm", "description": "field metadata"}),
    "int64": (_ints(np.int64), None),
    "uint8": (_ints(np.uint8), None),
    "uint16": (_ints(np.uint16), None),
    "uint32": (_ints(np.uint32), None),
    "uint64": (_ints(np.uint64), None),
    "float16": (_floats(np.float16), None),
    "float32": (_floats(np.float32), None),
    "float64": (_floats(np.float64), None),
    "bool": (_bools, None),
    "utf8": (_strings(pa.string()), {"lang": "mixed", "empty": ""}),
    "large_utf8": (_strings(pa.large_string()), None),
    "binary": (_binaries(pa.binary()), None),
    "large_binary": (_binaries(pa.large_binary()), None),
    "string_view": (_strings(pa.string_view()), None),
    "binary_view": (_binaries(pa.binary_view()), None),
    "long_text": (_long_text, None),
    "decimal128": (_decimals(pa.decimal128(20, 4)), None),
    "decimal256": (_decimals(pa.decimal256(50, 10)), None),
    "date32": (_temporal(pa.date32(), -50_000, 50_000), None),
    "date64": (_temporal(pa.date64(), -50_000, 50_000, _DAY_MS), None),
    "time32_s": (_temporal(pa.time32("s"), 0, 86_400), None),
    "time32_ms": (_temporal(pa.time32("ms"), 0, _DAY_MS), None),
    "time64_us": (_temporal(pa.time64("us"), 0, _DAY_MS * 1000), None),
    "time64_ns": (_temporal(pa.time64("ns"), 0, _DAY_MS * 1_000_000), None),
    "ts_s": (_temporal(pa.timestamp("s"), -(2**34), 2**34), None),
    "ts_ms": (_temporal(pa.timestamp("ms"), -(2**44), 2**44), None),
    "ts_us": (_temporal(pa.timestamp("us"), -(2**54), 2**54), None),
    "ts_ns": (_temporal(pa.timestamp("ns"), -(2**62), 2**62), None),
    "ts_s_utc": (_temporal(pa.timestamp("s", "UTC"), 0, 2**32), None),
    "ts_ms_offset": (_temporal(pa.timestamp("ms", "+05:30"), 0, 2**42), None),
    "ts_us_new_york": (_temporal(pa.timestamp("us", "America/New_York"), 0, 2**52), None),
    "ts_ns_utc": (_temporal(pa.timestamp("ns", "UTC"), 0, 2**62), None),
    "dur_s": (_temporal(pa.duration("s"), -(2**40), 2**40), None),
    "dur_ms": (_temporal(pa.duration("ms"), -(2**40), 2**40), None),
    "dur_us": (_temporal(pa.duration("us"), -(2**50), 2**50), None),
    "dur_ns": (_temporal(pa.duration("ns"), -(2**60), 2**60), None),
    "struct": (_struct, {"description": "struct with child metadata"}),
    "nested_struct": (_nested_struct, None),
    "struct_list": (
        _struct_of(l=_list_of(_ints(np.int32)), v=_floats(np.float32)),
        None,
    ),
    "struct_fsl": (_struct_of(v=_fsl_of(_dense_floats32, 2)), None),
    "list_i32": (_list_of(_ints(np.int32)), None),
    "list_str": (_list_of(_strings(pa.string())), None),
    "list_bool": (_list_of(_bools), None),
    "large_list_i64": (_list_of(_ints(np.int64), large=True), None),
    "large_list_large_str": (_list_of(_strings(pa.large_string()), large=True), None),
    "list_struct": (_list_of(_struct), None),
    "list_list": (_list_of(_list_of(_ints(np.int32))), None),
    "list_null": (_list_of(lambda g, n: pa.nulls(n)), None),
    "fsl_f32_4": (_fsl_of(_dense_floats32, 4), None),
    "fsl_i32_3": (_fsl_of(_ints(np.int32), 3), None),
    "fsl_f16_2": (_fsl_of(_floats(np.float16), 2), None),
    "fsl_fsl": (_fsl_of(_fsl_of(_ints(np.int32), 2), 2), None),
    "fsl_struct": (_fsl_of(_struct, 2), None),
    "fixed_size_binary": (_fsb, None),
    "dict_str": (_dictionary(pa.int32(), pa.array(["alpha", "beta", "", "γάμμα"])), None),
    "dict_i8": (_dictionary(pa.int8(), pa.array(["x", "y", "z"])), None),
    "dict_int": (_dictionary(pa.int32(), pa.array([10, 20, 30], pa.int64())), None),
    "map": (_maps, None),
    "list_map": (_list_of(_maps), None),
    "struct_map": (_struct_of(m=_maps), None),
    "null": (lambda g, n: pa.nulls(n), None),
    "empty_struct": (lambda g, n: pa.array([{}] * n, pa.struct([])), None),
    "low_card": (_low_card, None),
    "constant": (_constant, None),
    "all_null": (_all_null, None),
    "sorted": (_sorted, None),
    "small_ints": (_small_ints, None),
    "list_view": (_list_view, None),
    "run_end_encoded": (_ree, None),
    "interval_mdn": (_interval, None),
    "decimal32": (_decimals(pa.decimal32(9, 2)), None),
    "decimal64": (_decimals(pa.decimal64(18, 4)), None),
}


def _struct_nulls_ok(version: str) -> bool:
    """Whether ``version`` stores null structs."""
    return version not in NO_STRUCT_VALIDITY


def type_column(name: str, n: int, version: str, chunk: int = 0) -> pa.Array:
    """Deterministic data for one column of the "types" dataset at ``version``."""
    maker, _ = TYPE_COLUMNS[name]
    rng = np.random.default_rng([SEED, zlib.crc32(name.encode()), chunk])
    return maker(_Gen(rng, _struct_nulls_ok(version)), n)


def _types_chunk(columns: Sequence[str], n: int, version: str, chunk: int) -> pa.Table:
    """One file's worth of the "types" table: ``id``, a non-nullable string, then ``columns``."""
    rng = np.random.default_rng([SEED, chunk])
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name_nn", pa.string(), nullable=False),
    ]
    arrays = [pa.array(np.arange(chunk * n, (chunk + 1) * n)), pa.array(_Gen(rng).texts(n))]
    for name in columns:
        arr = type_column(name, n, version, chunk)
        fields.append(pa.field(name, arr.type, metadata=TYPE_COLUMNS[name][1]))
        arrays.append(arr)
    schema = pa.schema(fields, metadata={"corpus": "types", "storage_version": version})
    return pa.Table.from_arrays(arrays, schema=schema)


def types_table(columns: Sequence[str], version: str, files: int = 3, rows: int = 1000) -> pa.Table:
    """The "types" table, built file by file: no input array is a slice (WRITE_LIMITATIONS)."""
    return pa.concat_tables(_types_chunk(columns, rows, version, i) for i in range(files))


# Legacy row groups of 100 rows (never entirely deleted by the builders, see
# WRITE_LIMITATIONS) and small 2.0 pages; 2.1+ ignores max_page_bytes for small columns.
_WRITE_LAYOUT = {"max_rows_per_group": 100, "max_page_bytes": 8192}


def _write(data: pa.Table, path: Path, version: str, **kwargs: object) -> lance.LanceDataset:
    """Create a dataset at ``version`` with small row groups / pages."""
    options = {**_WRITE_LAYOUT, **kwargs}
    return lance.write_dataset(data, str(path), data_storage_version=version, **options)


def _append(data: pa.Table, path: Path, **kwargs: object) -> lance.LanceDataset:
    """Append to a dataset (a separate writer call, storage version taken from the dataset)."""
    options = {**_WRITE_LAYOUT, **kwargs}
    return lance.write_dataset(data, str(path), mode="append", **options)


def _try_types(columns: Sequence[str], version: str, path: Path, **layout: int) -> str | None:
    """Write and read back a "types" table at ``path``; return the error, if any."""
    shutil.rmtree(path, ignore_errors=True)
    try:
        _write(types_table(columns, version, **layout), path, version, max_rows_per_file=1000)
        lance.dataset(str(path)).to_table()
    except BaseException as exc:
        if _is_fatal(exc):
            raise
        shutil.rmtree(path, ignore_errors=True)
        return _describe(exc)
    return None


def probe_type(name: str, version: str, scratch: Path) -> str | None:
    """Write and read back one "types" column (200 rows) at ``version``; return the error."""
    try:
        return _try_types([name], version, scratch, files=1, rows=200)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _build_types(path: Path, version: str) -> tuple[str, ...]:
    """Every writable Arrow type, nulls everywhere, several fragments and row groups/pages."""
    columns = [c for c in TYPE_COLUMNS if not excluded(version, c)]
    if _try_types(columns, version, path):
        # An unknown version (or pylance): add the columns one by one, keep what still works.
        kept: list[str] = []
        for name in columns:
            error = _try_types([*kept, name], version, path, files=2, rows=500)
            if error:
                DISCOVERED_EXCLUSIONS[(version, name)] = error
            else:
                kept.append(name)
        columns = kept
        error = _try_types(columns, version, path)
        if error:
            raise RuntimeError(error)
    features = ["types", "nulls", "multi_fragment", "multi_page", "field_metadata"]
    features += ["schema_metadata", "non_nullable", "large_values"]
    if any(c in columns for c in ("map", "list_map", "struct_map")):
        features.append("map")
    if _struct_nulls_ok(version):
        features.append("struct_nulls")
    return tuple(features)


# --------------------------------------------------------------------------------------------
# Table evolution datasets
# --------------------------------------------------------------------------------------------


def _rows(start: int, n: int, version: str, seed: int = 0) -> pa.Table:
    """Generic rows: id, x, s (nullable text), f, st (struct), tags (list<string>)."""
    g = _Gen(np.random.default_rng([SEED, seed, start]), _struct_nulls_ok(version))
    ids = np.arange(start, start + n, dtype=np.int64)
    st = pa.StructArray.from_arrays(
        [pa.array(ids.astype(np.int32) % 1000), _strings(pa.string(), 8)(g, n)],
        names=["a", "b"],
        mask=g.struct_mask(n),
    )
    return pa.table(
        {
            "id": ids,
            "x": pa.array(g.rng.integers(-1000, 1000, size=n), mask=g.mask(n, 0.05)),
            "s": _strings(pa.string())(g, n),
            "f": pa.array(g.rng.standard_normal(n), mask=g.mask(n, 0.05)),
            "st": st,
            "tags": _list_of(_strings(pa.string(), 6))(g, n),
        }
    )


def _build_history(path: Path, version: str) -> tuple[str, ...]:
    """Many versions: appends, deletes, add/drop/rename columns, tags and a branch."""
    _write(_rows(0, 600, version), path, version, max_rows_per_file=200)
    for i in range(3):  # versions 2, 3, 4
        _append(_rows(600 + 200 * i, 200, version), path)
    ds = lance.dataset(str(path))
    ds.delete("id % 97 = 3")  # v5: a few rows in many fragments
    ds.delete("id >= 210 AND id < 395")  # v6: most of fragment 1
    ds.delete("id >= 400 AND id < 600")  # v7: the whole of fragment 2
    ds.add_columns({"z": "x * 2"})  # v8
    extra = _rows(1200, 200, version)
    _append(extra.append_column("z", pc.multiply(extra["x"], 2)), path)  # v9
    lance.dataset(str(path)).drop_columns(["f"])  # v10
    lance.dataset(str(path)).alter_columns({"path": "s", "name": "label"})  # v11
    more = _rows(1400, 150, version)
    more = more.append_column("z", pc.multiply(more["x"], 2)).drop_columns(["f"])
    _append(more.rename_columns(["id", "x", "label", "st", "tags", "z"]), path)  # v12
    ds = lance.dataset(str(path))
    ds.delete("id >= 1400 AND id % 2 = 0")  # v13
    ds.tags.create("v2tag", 2)
    ds.tags.create("after_rename", 11)
    branch = ds.create_branch("dev", 8)
    _append(
        extra.append_column("z", pc.multiply(extra["x"], 2)).set_column(
            0, "id", pc.add(extra["id"], 10_000)
        ),
        Path(branch.uri),
    )
    features = ("versions", "appends", "deletes", "add_columns", "drop_columns", "rename")
    return (*features, "tags", "branches", "multi_fragment")


def _build_stable_row_ids(path: Path, version: str) -> tuple[str, ...]:
    """Stable row ids through appends, deletes, an update and a compaction."""
    _write(
        _rows(0, 1500, version), path, version, max_rows_per_file=500, enable_stable_row_ids=True
    )
    _append(_rows(1500, 500, version), path)
    ds = lance.dataset(str(path))
    ds.delete("id % 10 = 0")
    ds.delete("id >= 600 AND id < 900")
    ds.update({"f": "f + 1.0"}, where="id % 7 = 1")
    ds = lance.dataset(str(path))
    ds.optimize.compact_files(target_rows_per_fragment=1200)
    _append(_rows(2000, 100, version), path)
    lance.dataset(str(path)).delete("id % 13 = 5")
    return ("stable_row_ids", "deletes", "update", "compaction", "appends")


def _build_deletes_bitmap(path: Path, version: str) -> tuple[str, ...]:
    """A fragment with more than 5000 deleted rows, stored as a roaring bitmap."""
    _write(_rows(0, 9000, version), path, version, max_rows_per_file=8000, max_rows_per_group=1000)
    lance.dataset(str(path)).delete("id >= 1000 AND id < 7000")
    return ("deletes", "deletion_bitmap")


def _build_deletes_arrow(path: Path, version: str) -> tuple[str, ...]:
    """A few deleted rows across fragments, stored as Arrow arrays."""
    _write(_rows(0, 2000, version), path, version, max_rows_per_file=500)
    ds = lance.dataset(str(path))
    ds.delete("id IN (0, 3, 17, 499, 500, 1999)")
    ds.delete("id % 250 = 7")
    return ("deletes", "deletion_arrow", "multi_fragment")


def _build_all_deleted(path: Path, version: str) -> tuple[str, ...]:
    """Every row deleted: the latest version has no fragments."""
    _write(_rows(0, 300, version), path, version, max_rows_per_file=100)
    lance.dataset(str(path)).delete("id >= 150")
    lance.dataset(str(path)).delete("true")
    return ("deletes", "all_deleted", "no_fragments")


def _build_empty(path: Path, version: str) -> tuple[str, ...]:
    """A schema and zero rows."""
    _write(_rows(0, 10, version).slice(0, 0), path, version)
    return ("empty", "no_fragments")


def _build_empty_append(path: Path, version: str) -> tuple[str, ...]:
    """A zero-row append: a new version with the same fragments."""
    _write(_rows(0, 300, version), path, version, max_rows_per_file=200)
    _append(_rows(0, 10, version).slice(0, 0), path)
    _append(_rows(300, 50, version), path)
    return ("empty_append", "appends")


def _build_multi_file(path: Path, version: str) -> tuple[str, ...]:
    """Fragments with several data files (add_columns UDF/SQL, merge, all-null column)."""
    _write(_rows(0, 1200, version), path, version, max_rows_per_file=400)

    def udf(batch: pa.RecordBatch) -> pa.RecordBatch:
        """Two derived columns computed by pyarrow."""
        x = batch.column("x")
        return pa.record_batch(
            [pc.multiply(x, 3), pc.utf8_upper(batch.column("s"))], names=["x3", "s_upper"]
        )

    ds = lance.dataset(str(path))
    ds.add_columns(udf, read_columns=["x", "s"])
    lance.dataset(str(path)).add_columns({"y": "id + 1", "half": "CAST(id AS DOUBLE) / 2"})
    rng = np.random.default_rng(SEED)
    step = 1 if version == "legacy" else 2  # legacy merges reject nulls (WRITE_LIMITATIONS)
    ids = np.arange(0, 1200, step, dtype=np.int64)
    right = pa.table(
        {
            "id": pa.array(ids),
            "m": pa.array(rng.standard_normal(len(ids))),
            "m_s": pa.array([f"m{i}" for i in ids]),
        }
    )
    lance.dataset(str(path)).merge(right, "id")
    features = ["add_columns", "merge", "multi_data_file"]
    if not excluded(version, "multi_file:null_column"):
        lance.dataset(str(path)).add_columns([pa.field("n_str", pa.string())])
        features.append("column_without_data_file")
    _append(
        lance.dataset(str(path))
        .to_table()
        .slice(0, 100)
        .set_column(0, "id", pa.array(np.arange(5000, 5100, dtype=np.int64))),
        path,
    )
    return tuple(features)


def _build_altered_type(path: Path, version: str) -> tuple[str, ...]:
    """Columns cast with alter_columns; old data files keep the superseded field ids."""
    table = pa.table(
        {
            "id": pa.array(np.arange(800), pa.int32()),
            "x": pa.array(np.arange(800) * 3, pa.int32(), mask=np.arange(800) % 11 == 1),
            "f": pa.array(np.linspace(0, 1, 800), pa.float32()),
            "s": pa.array([f"v{i}" for i in range(800)], pa.string()),
        }
    )
    _write(table, path, version, max_rows_per_file=300)
    ds = lance.dataset(str(path))
    ds.alter_columns(
        {"path": "x", "data_type": pa.int64()}, {"path": "f", "data_type": pa.float64()}
    )
    lance.dataset(str(path)).alter_columns({"path": "s", "data_type": pa.large_string()})
    schema = lance.dataset(str(path)).schema
    _append(
        pa.table(
            {
                "id": pa.array([800, 801], pa.int32()),
                "x": [1, None],
                "f": [0.5, None],
                "s": ["new", None],
            },
            schema=schema,
        ),
        path,
    )
    return ("alter_type", "stale_field_ids")


def _build_tombstone(path: Path, version: str) -> tuple[str, ...]:
    """Fragment.update_columns rewrites a column: the old data file gets a -2 field."""
    table = _rows(0, 600, version).select(["id", "x", "s", "f"])
    ds = _write(table, path, version, max_rows_per_file=300)
    new_x = [-1, -2 if version == "legacy" else None, -5, -299]  # legacy: no null updates
    updates = pa.table(
        {"id": pa.array([1, 2, 5, 299], pa.int64()), "x": pa.array(new_x, pa.int64())}
    )
    frag_meta, fields_modified = ds.get_fragment(0).update_columns(updates, left_on="id")
    op = LanceOperation.Update(updated_fragments=[frag_meta], fields_modified=fields_modified)
    ds = lance.LanceDataset.commit(str(path), op, read_version=ds.version)
    ds.delete("id = 3")
    return ("tombstoned_fields", "update_columns", "multi_data_file")


def _build_second_writer(path: Path, version: str) -> tuple[str, ...]:
    """Explicit data_storage_version, then appends by separate writer calls."""
    lance.write_dataset(
        _rows(0, 500, version), str(path), data_storage_version=version, max_rows_per_file=250
    )
    lance.write_dataset(_rows(500, 300, version), str(path), mode="append", max_rows_per_file=120)
    reader = pa.RecordBatchReader.from_batches(
        _rows(0, 1, version).schema, _rows(800, 200, version).to_batches(max_chunksize=64)
    )
    lance.write_dataset(reader, str(path), mode="append")
    return ("explicit_version", "appends", "record_batch_reader")


def _build_mixed_file_versions(path: Path, version: str) -> tuple[str, ...]:
    """Appends written with another 2.x file version: data files of mixed versions."""
    other = "2.1" if version == "2.0" else "2.0"
    # Rows shaped for 2.0 (no null structs) so that either file version can store them.
    _write(_rows(0, 400, "2.0"), path, version, max_rows_per_file=200)
    _append(_rows(400, 300, "2.0"), path, data_storage_version=other)
    ds = lance.dataset(str(path))
    seen = {
        (f.file_major_version, f.file_minor_version)
        for fr in ds.get_fragments()
        for f in fr.data_files()
    }
    if len(seen) < 2:
        raise RuntimeError(f"appending with {other} did not mix file versions: {seen}")
    return ("mixed_file_versions", "appends")


def _build_overwrite(path: Path, version: str) -> tuple[str, ...]:
    """Overwrite with a different schema, append to it, then restore version 1."""
    _write(_rows(0, 300, version), path, version, max_rows_per_file=100)
    other = pa.table({"key": pa.array([f"k{i}" for i in range(200)]), "value": np.arange(200.0)})
    lance.write_dataset(other, str(path), mode="overwrite")
    _append(pa.table({"key": ["tail", None], "value": [None, -1.0]}, schema=other.schema), path)
    ds = lance.dataset(str(path), version=1)
    ds.restore()
    return ("overwrite", "schema_change", "restore")


def _build_odd_names(path: Path, version: str) -> tuple[str, ...]:
    """Column and struct-child names with spaces, unicode, emoji, case and dashes."""
    n = 250
    g = _Gen(np.random.default_rng(SEED), _struct_nulls_ok(version))
    st = pa.StructArray.from_arrays(
        [pa.array(np.arange(n)), _strings(pa.string())(g, n)], names=["in ner", "ü"]
    )
    table = pa.table(
        {
            "with space": pa.array(np.arange(n)),
            "ünïcødé": _strings(pa.string())(g, n),
            "日本語": pa.array(g.rng.standard_normal(n), mask=g.mask(n)),
            "emoji🙂": pa.array(g.rng.random(n) < 0.5),
            "UPPER": pa.array(np.arange(n) * 2),
            "MiXeD": pa.array(np.arange(n) * 3),
            "a-dash": pa.array(np.arange(n) * 4),
            "st ruct": st,
        }
    )
    _write(table, path, version, max_rows_per_file=100)
    return ("odd_names",)


def _build_v1_manifest_paths(path: Path, version: str) -> tuple[str, ...]:
    """Manifests named _versions/<n>.manifest (enable_v2_manifest_paths=False)."""
    _write(_rows(0, 200, version), path, version, enable_v2_manifest_paths=False)
    _append(_rows(200, 100, version), path)
    _append(_rows(300, 100, version), path)
    return ("v1_manifest_paths", "appends")


def _build_cleaned(path: Path, version: str) -> tuple[str, ...]:
    """Old versions removed by cleanup_old_versions; the tagged version is kept."""
    _write(_rows(0, 200, version), path, version, max_rows_per_file=100)
    for i in range(3):
        _append(_rows(200 + 100 * i, 100, version), path)
    ds = lance.dataset(str(path))
    ds.tags.create("kept", 2)
    ds.delete("id % 3 = 0")
    lance.dataset(str(path)).cleanup_old_versions(
        older_than=datetime.timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False
    )
    return ("cleaned_up", "tags", "deletes")


def _build_encodings(path: Path, version: str) -> tuple[str, ...]:
    """Compression and encoding hints given as field metadata."""
    n = 3000
    g = _Gen(np.random.default_rng(SEED), _struct_nulls_ok(version))

    def field(name: str, typ: pa.DataType, **meta: str) -> pa.Field:
        """A field with lance-encoding:* metadata."""
        return pa.field(name, typ, metadata={f"lance-encoding:{k}": v for k, v in meta.items()})

    words = [f"value-{i % 37}-" * 3 for i in range(n)]
    cols = {
        field("zstd_str", pa.string(), compression="zstd"): pa.array(_with_nulls(words, g.mask(n))),
        field("zstd9_int", pa.int64(), compression="zstd", **{"compression-level": "9"}): (
            pa.array(g.rng.integers(0, 1 << 40, size=n), mask=g.mask(n))
        ),
        field("lz4_str", pa.string(), compression="lz4"): _strings(pa.string())(g, n),
        field("fsst_str", pa.string(), compression="fsst"): pa.array(words),
        field("none_f64", pa.float64(), compression="none"): _floats(np.float64)(g, n),
        field("packed", pa.struct([("a", pa.int32()), ("b", pa.float64())]), packed="true"): (
            pa.StructArray.from_arrays(  # no nulls: 2.0 packs fixed-width data only
                [pa.array(np.arange(n, dtype=np.int32)), pa.array(g.rng.random(n))],
                names=["a", "b"],
            )
        ),
        field("miniblock", pa.string(), **{"structural-encoding": "miniblock"}): pa.array(words),
        field("fullzip", pa.string(), **{"structural-encoding": "fullzip"}): _long_text(g, n),
        field("dict_hint", pa.string(), **{"dict-divisor": "1"}): _low_card(g, n),
        field("rle", pa.int64(), **{"rle-threshold": "0.9"}): pa.array(
            np.repeat(np.arange(30), 100)
        ),
        field("bss", pa.float64(), bss="on"): pa.array(g.rng.random(n)),
    }
    table = pa.Table.from_arrays(list(cols.values()), schema=pa.schema(list(cols)))
    _write(table, path, version, max_rows_per_file=1500)
    return ("compression", "encoding_hints", "field_metadata")


def _build_blob(path: Path, version: str) -> tuple[str, ...]:
    """A large_binary column marked lance-encoding:blob (read back as blob descriptions)."""
    n = 60
    g = _Gen(np.random.default_rng(SEED))
    blobs = [bytes([i % 256]) * int(size) for i, size in enumerate(g.rng.integers(0, 5000, n))]
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    table = pa.table({"id": np.arange(n), "blob": _with_nulls(blobs, g.mask(n))}, schema=schema)
    _write(table, path, version, max_rows_per_file=25)
    lance.dataset(str(path)).to_table()
    return ("blob",)


def _build_indexed(path: Path, version: str) -> tuple[str, ...]:
    """Scalar indices (BTREE, BITMAP) next to the data, plus an append not covered by them."""
    _write(_rows(0, 1000, version), path, version, max_rows_per_file=400)
    ds = lance.dataset(str(path))
    ds.create_scalar_index("id", "BTREE")
    lance.dataset(str(path)).create_scalar_index("x", "BITMAP")
    _append(_rows(1000, 100, version), path)
    return ("scalar_index", "appends")


def _overlay_file(path: Path, table: pa.Table) -> DataFile:
    """Write ``table`` (some of the dataset's columns) as one uncommitted data file of ``path``."""
    (fragment,) = write_fragments(table, str(path), mode="append")
    (data_file,) = fragment.files
    return data_file


def _build_overlay(path: Path, version: str) -> tuple[str, ...]:
    """Data overlays: dense and sparse cell replacements layered over base data."""
    table = _rows(0, 900, version).select(["id", "x", "s", "f"])
    ds = _write(table, path, version, max_rows_per_file=300)
    ds.delete("id = 7 OR id = 301")
    ds = lance.dataset(str(path))
    dense = _overlay_file(
        path,
        pa.table({"x": pa.array([-1, None, -3, -4], pa.int64()), "s": ["ov1", "ov2", None, ""]}),
    )
    sparse = _overlay_file(
        path, pa.table({"x": pa.array([-100, -200], pa.int64()), "f": [1e300, None]})
    )
    other = _overlay_file(path, pa.table({"s": ["frag1", None]}))
    groups = [
        LanceOperation.DataOverlayGroup(
            0,
            [
                LanceOperation.DataOverlayFile(dense, [10, 3, 5, 7]),
                LanceOperation.DataOverlayFile(sparse, [[5, 20], [3, 299]]),
            ],
        ),
        LanceOperation.DataOverlayGroup(1, [LanceOperation.DataOverlayFile(other, [0, 299])]),
    ]
    lance.LanceDataset.commit(
        str(path), LanceOperation.DataOverlay(groups), read_version=ds.version
    )
    with unstable_overlays():
        lance.dataset(str(path)).delete("id = 20")
        lance.dataset(str(path)).to_table()
    return ("data_overlay", "unstable", "deletes")


BUILDERS: tuple[tuple[str, Callable[[Path, str], tuple[str, ...]]], ...] = (
    ("types", _build_types),
    ("history", _build_history),
    ("stable_row_ids", _build_stable_row_ids),
    ("deletes_bitmap", _build_deletes_bitmap),
    ("deletes_arrow", _build_deletes_arrow),
    ("all_deleted", _build_all_deleted),
    ("empty", _build_empty),
    ("empty_append", _build_empty_append),
    ("multi_file", _build_multi_file),
    ("altered_type", _build_altered_type),
    ("tombstone", _build_tombstone),
    ("second_writer", _build_second_writer),
    ("mixed_file_versions", _build_mixed_file_versions),
    ("overwrite", _build_overwrite),
    ("odd_names", _build_odd_names),
    ("v1_manifest_paths", _build_v1_manifest_paths),
    ("cleaned", _build_cleaned),
    ("encodings", _build_encodings),
    ("blob", _build_blob),
    ("indexed", _build_indexed),
    ("overlay", _build_overlay),
)


# Datasets pylance itself refuses to open by default; built only with include_unstable=True.
UNSTABLE_DATASETS: frozenset[str] = frozenset({"overlay"})


def build_corpus(
    root: Path,
    storage_versions: Sequence[str] = ("legacy", "2.0"),
    *,
    names: Sequence[str] | None = None,
    include_unstable: bool = False,
) -> list[CorpusDataset]:
    """Write the corpus (or the datasets ``names``) under ``root`` for each storage version."""
    root = Path(root)
    corpus: list[CorpusDataset] = []
    for version in storage_versions:
        for name, builder in BUILDERS:
            if names is not None and name not in names:
                continue
            if excluded(version, name) or (name in UNSTABLE_DATASETS and not include_unstable):
                continue
            path = root / version.replace(".", "_") / name
            try:
                features = builder(path, version)
                with unstable_overlays() if "unstable" in features else contextlib.nullcontext():
                    lance.dataset(str(path)).to_table()  # pylance must read what it wrote
            except BaseException as exc:
                if _is_fatal(exc):
                    raise
                shutil.rmtree(path, ignore_errors=True)
                DISCOVERED_EXCLUSIONS[(version, name)] = _describe(exc)
                continue
            corpus.append(CorpusDataset(name, str(path), version, features))
    return corpus

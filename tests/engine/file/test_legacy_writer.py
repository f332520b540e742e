"""The legacy (v0.1) data-file writer against pylance: same bytes, same reads."""

from __future__ import annotations

import decimal
import io
import os
import struct
from collections.abc import Callable, Sequence
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quiver.format.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from quiver.format.file.base import WrittenFile
from quiver.format.file.legacy import LegacyFileReader
from quiver.format.file.legacy_writer import LegacyFileWriter, encode_dictionaries
from quiver.format.io.store import open_store
from quiver.format.proto import file_pb2, table_pb2
from quiver.format.table.manifest import encode_manifest
from quiver.format.table.schema import LanceSchema

pytestmark = pytest.mark.compat

PYLANCE = ("lance", "14.0.2")  # pylance's writer version, for byte-for-byte comparisons
NAME = "x.lance"


# -- data ----------------------------------------------------------------------------------
def _nulls(rng: np.random.Generator, n: int, p: float) -> pa.Array | None:
    return pa.array(rng.random(n) < p) if p else None


def _mask(m: np.ndarray | None) -> pa.Array | None:
    return None if m is None else pa.array(m)


def _text(rng: np.random.Generator, n: int, p: float) -> list[str | None]:
    """Strings: empty, short, and longer than 64 bytes with multi-byte characters."""
    out: list[str | None] = []
    for k in rng.integers(0, 40, n):
        k = int(k)
        out.append("" if k == 0 else ("é" * (k % 7) + "z" * k + "€" * (k // 5)))
    for i in np.flatnonzero(rng.random(n) < p):
        out[i] = None
    return out


def _blobs(rng: np.random.Generator, n: int, p: float) -> list[bytes | None]:
    out: list[bytes | None] = [
        bytes(rng.integers(250, 256, int(k), dtype=np.uint8)) for k in rng.integers(0, 90, n)
    ]
    for i in np.flatnonzero(rng.random(n) < p):
        out[i] = None
    return out


def _lists(rng: np.random.Generator, n: int, p: float, make: Callable[[int], list]) -> list:
    return [None if rng.random() < p else make(int(k)) for k in rng.integers(0, 5, n)]


def _ints(rng: np.random.Generator, n: int, p: float, dtype: str) -> pa.Array:
    info = np.iinfo(dtype)
    vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return pa.array(vals, mask=None if not p else rng.random(n) < p)


def _floats(rng: np.random.Generator, n: int, p: float, dtype: str) -> pa.Array:
    special = np.array([np.nan, 0.0, -0.0, np.inf, -np.inf], dtype=dtype)
    vals = rng.standard_normal(n).astype(dtype)
    pick = rng.random(n) < 0.2
    vals[pick] = special[rng.integers(0, len(special), int(pick.sum()))]
    return pa.array(vals, mask=None if not p else rng.random(n) < p)


def _column(kind: str, rng: np.random.Generator, n: int, p: float) -> pa.Array:
    """A column of one kind, nulls with probability `p` (1.0: all null)."""
    m = None if not p else rng.random(n) < p
    if kind in ("i8", "u16", "i32", "i64", "u64"):
        dtype = {"i8": "int8", "u16": "uint16", "i32": "int32", "i64": "int64", "u64": "uint64"}
        return _ints(rng, n, p, dtype[kind])
    if kind == "f32":
        return _floats(rng, n, p, "float32")
    if kind == "f64":
        return _floats(rng, n, p, "float64")
    if kind == "f16":
        return pa.array(rng.standard_normal(n).astype(np.float16), mask=m)
    if kind == "bool":
        return pa.array(rng.random(n) < 0.5, mask=m)
    if kind == "date32":
        return pa.array(rng.integers(-5000, 20000, n).astype(np.int32), pa.date32(), mask=m)
    if kind == "date64":
        return pa.array(rng.integers(-5000, 20000, n) * 86_400_000, pa.date64(), mask=m)
    if kind == "time32":
        return pa.array(rng.integers(0, 86400, n).astype(np.int32), pa.time32("s"), mask=m)
    if kind == "time64":
        return pa.array(rng.integers(0, 86_400_000_000, n), pa.time64("us"), mask=m)
    if kind == "ts":
        return pa.array(rng.integers(0, 2**60, n), pa.timestamp("ns", "UTC"), mask=m)
    if kind == "dur":
        return pa.array(rng.integers(-(2**40), 2**40, n), pa.duration("ms"), mask=m)
    if kind == "dec128":
        ints = pa.array(rng.integers(-(10**12), 10**12, n), mask=m)
        return pc.cast(ints, pa.decimal128(24, 3))
    if kind == "dec256":
        ints = pa.array(rng.integers(-(10**15), 10**15, n), mask=m)
        return pc.cast(ints, pa.decimal256(40, 5))
    if kind == "str":
        return pa.array(_text(rng, n, p))
    if kind == "str_nn":  # not nullable: empty strings read back as empty, not null
        return pa.array(_text(rng, n, 0))
    if kind == "lstr":
        return pa.array(_text(rng, n, p), pa.large_string())
    if kind == "bin":
        return pa.array(_blobs(rng, n, p))
    if kind == "lbin":
        return pa.array(_blobs(rng, n, p), pa.large_binary())
    if kind == "fsb":
        raw = rng.integers(0, 256, 3 * n, dtype=np.uint8).tobytes()
        return pa.array([raw[3 * i : 3 * i + 3] for i in range(n)], pa.binary(3), mask=m)
    if kind == "fsl_i16":
        vals = pa.array(rng.integers(-999, 999, 3 * n).astype(np.int16))
        return pa.FixedSizeListArray.from_arrays(vals, 3, mask=_mask(m))
    if kind == "fsl_bool":
        vals = pa.array(rng.random(5 * n) < 0.5, mask=rng.random(5 * n) < 0.3)
        return pa.FixedSizeListArray.from_arrays(vals, 5)
    if kind == "fsl_fsl":
        inner = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(6 * n)), 2)
        return pa.FixedSizeListArray.from_arrays(inner, 3, mask=_mask(m))
    if kind == "dict_str":
        keys = pa.array(rng.integers(0, 4, n).astype(np.int16), mask=m)
        return pa.DictionaryArray.from_arrays(keys, pa.array(["red", "", "blue", "é" * 40]))
    if kind == "dict_int":
        keys = pa.array(rng.integers(0, 3, n).astype(np.uint8), mask=m)
        return pa.DictionaryArray.from_arrays(keys, pa.array([7, -1, 2**40], pa.int64()))
    if kind == "list":
        vals = _lists(rng, n, p, lambda k: [None if j == 2 else j for j in range(k)])
        return pa.array(vals, pa.list_(pa.int32()))
    if kind == "llist_str":
        vals = _lists(rng, n, p, lambda k: _text(rng, k, 0.3))
        return pa.array(vals, pa.large_list(pa.string()))
    if kind == "list_list":
        vals = _lists(rng, n, p, lambda k: [list(range(j)) for j in range(k)])
        return pa.array(vals, pa.list_(pa.list_(pa.int8())))
    if kind == "list_struct":
        t = pa.list_(pa.struct([("a", pa.float32()), ("b", pa.list_(pa.bool_()))]))
        vals = _lists(
            rng, n, p, lambda k: [{"a": float(j), "b": [j % 2 == 0] * j} for j in range(k)]
        )
        return pa.array(vals, t)
    if kind == "struct":
        kids = [
            _column("i64", rng, n, 0.2),
            _column("str", rng, n, 0.2),
            _column("list", rng, n, 0),
        ]
        inner = pa.StructArray.from_arrays([kids[0], _column("bool", rng, n, 0.5)], ["p", "q"])
        return pa.StructArray.from_arrays(
            [*kids, inner], names=["x", "y", "z", "w"], mask=_nulls(rng, n, p)
        )
    if kind == "list_dict":
        keys = pa.array(rng.integers(0, 3, 2 * n).astype(np.int32))
        values = pa.DictionaryArray.from_arrays(keys, pa.array(["a", "bb", "ccc"]))
        offsets = pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, values)
    if kind == "null":
        return pa.nulls(n)
    raise AssertionError(kind)


KINDS = [
    "i8", "u16", "i32", "i64", "u64", "f16", "f32", "f64", "bool", "date32", "date64",
    "time32", "time64", "ts", "dur", "dec128", "dec256", "str", "str_nn", "lstr", "bin",
    "lbin", "fsb", "fsl_i16", "fsl_bool", "fsl_fsl", "dict_str", "dict_int", "list", "llist_str",
    "list_list", "list_struct", "struct", "list_dict", "null",
]  # fmt: skip


def _table(n: int, seed: int, kinds: Sequence[str] = KINDS, p: float = 0.2) -> pa.Table:
    rng = np.random.default_rng(seed)
    cols = {k: _column(k, rng, n, p) for k in kinds}
    fields = [pa.field(k, v.type, nullable=not k.endswith("_nn")) for k, v in cols.items()]
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(fields))


# -- writing -------------------------------------------------------------------------------
def _write(
    uri: str,
    table: pa.Table,
    *,
    group: int,
    cuts: Sequence[int] = (),
    writer_version: tuple[str, str] | None = None,
) -> WrittenFile:
    """Write `table` with our writer in batches cut at `cuts`, plus a manifest for pylance."""
    store = open_store(uri)
    schema = LanceSchema.from_arrow(table.schema)
    kwargs = {"writer_version": writer_version} if writer_version else {}
    with store.open_write(f"data/{NAME}") as sink:
        w = LegacyFileWriter(sink, schema, max_rows_per_group=group, path_for_errors=NAME, **kwargs)
        bounds = [0, *sorted(set(cuts)), table.num_rows]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            for batch in table.slice(lo, hi - lo).to_batches():  # zero-copy: offsets kept
                w.write(batch)
        wf = w.finish()
    assert wf.size_bytes == os.path.getsize(os.path.join(uri, "data", NAME))
    # pylance loads legacy dictionaries from the head of the manifest file
    dict_bytes, dict_where = encode_dictionaries(w.dictionaries)
    protos = schema.to_protos()
    for f in protos:
        if f.id in dict_where:
            f.dictionary.offset, f.dictionary.length = dict_where[f.id]
    pb = table_pb2.Manifest(
        fields=protos,
        fragments=[
            table_pb2.DataFragment(
                id=0,
                files=[
                    table_pb2.DataFile(
                        path=NAME,
                        fields=wf.fields,
                        file_major_version=wf.major_version,
                        file_minor_version=wf.minor_version,
                        file_size_bytes=wf.size_bytes,
                    )
                ],
                physical_rows=wf.num_rows,
            )
        ],
        version=1,
        writer_version=table_pb2.Manifest.WriterVersion(library="quiver", version="0.1.0"),
        data_format=table_pb2.Manifest.DataStorageFormat(file_format="lance", version="0.1"),
        max_fragment_id=0,
    )
    pb.timestamp.GetCurrentTime()
    for k, v in schema.metadata.items():
        pb.schema_metadata[k] = v
    data = encode_manifest(pb)
    (pos,) = struct.unpack_from("<q", data, len(data) - 16)
    footer = struct.pack("<qHH4s", pos + len(dict_bytes), 0, 2, b"LANC")
    store.put("_versions/18446744073709551614.manifest", dict_bytes + data[:-16] + footer)
    return wf


def _compact(table: pa.Table) -> pa.Table:
    """`table` with freshly concatenated (unsliced) arrays, for pylance, which panics on
    some sliced structs; the rows and the bytes under nulls are unchanged."""
    cols = []
    for col in table.columns:
        a = col.combine_chunks()
        cols.append(pa.concat_arrays([a, a.slice(0, 0)]))
    return pa.Table.from_arrays(cols, schema=table.schema)


def _pylance(uri: str, table: pa.Table, group: int) -> tuple[bytes, pa.Table]:
    """The bytes of pylance's own legacy data file for `table`, and what pylance reads back."""
    ds = lance.write_dataset(
        _compact(table), uri, data_storage_version="legacy", max_rows_per_group=group
    )
    (frag,) = ds.get_fragments()
    (df,) = frag.data_files()
    with open(os.path.join(uri, "data", df.path), "rb") as f:
        return f.read(), lance.dataset(uri).to_table()  # reopened: nothing cached


def _ours(uri: str) -> bytes:
    with open(os.path.join(uri, "data", NAME), "rb") as f:
        return f.read()


def _our_read(uri: str, wf: WrittenFile, schema: pa.Schema) -> pa.Table:
    """Everything our legacy reader reads from the file, in one step."""
    store = open_store(uri)
    fields = LanceSchema.from_arrow(schema).fields
    r = LegacyFileReader.open(store, f"data/{NAME}", field_ids=wf.fields)
    (arrays,) = list(r.read(fields, [(0, r.num_rows)], max(r.num_rows, 1)))
    return pa.Table.from_arrays(arrays, schema=pa.schema([f.to_arrow() for f in fields]))


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    for name in want.column_names:
        g, w = got[name].combine_chunks(), want[name].combine_chunks()
        assert g.type == w.type, name
        if pa.types.is_float32(g.type) or pa.types.is_float64(g.type):  # NaN != NaN: bitwise
            bits = pa.int32() if pa.types.is_float32(g.type) else pa.int64()
            assert g.is_null().equals(w.is_null()), name
            g, w = g.fill_null(0).view(bits), w.fill_null(0).view(bits)
        assert g.equals(w), f"{name}: {g.to_pylist()[:8]} != {w.to_pylist()[:8]}"


def _first_diff(a: bytes, b: bytes) -> str:
    i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"{len(a)} vs {len(b)} bytes, first difference at {i}"


# -- the full table ------------------------------------------------------------------------
N, GROUP = 700, 128


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, bytes, pa.Table]:
    table = _table(N, seed=3)
    data, read = _pylance(str(tmp_path_factory.mktemp("ref") / "ds"), table, GROUP)
    return table, data, read


@pytest.mark.parametrize("cuts", [(), (1, 2, 77, 300, 301, 555), tuple(range(0, N, 128))])
def test_bytes_match_pylance(
    tmp_path: Path, reference: tuple[pa.Table, bytes, pa.Table], cuts: tuple[int, ...]
) -> None:
    """Whatever the write() sizes, the file is pylance's, byte for byte."""
    table, want, _ = reference
    uri = str(tmp_path / "ours")
    _write(uri, table, group=GROUP, cuts=cuts, writer_version=PYLANCE)
    got = _ours(uri)
    assert got == want, _first_diff(got, want)


def test_pylance_and_our_reader_read_it(
    tmp_path: Path, reference: tuple[pa.Table, bytes, pa.Table]
) -> None:
    table, _, want = reference
    uri = str(tmp_path / "ours")
    wf = _write(uri, table, group=GROUP, cuts=(5, 333))
    assert wf.num_rows == N and wf.column_indices == []
    assert (wf.major_version, wf.minor_version) == (0, 2)
    assert wf.fields == LanceSchema.from_arrow(table.schema).field_ids()
    _assert_same(lance.dataset(uri).to_table(), want)
    _assert_same(_our_read(uri, wf, table.schema), want)
    # nulls come back as pylance returns them: no validity survives
    assert want["i64"].null_count == 0 and want["str"].null_count > 0
    idx = [0, 127, 128, 129, 500, N - 1]
    cols = [c for c in table.column_names if c != "fsl_bool"]  # pylance's take panics on it
    _assert_same(lance.dataset(uri).take(idx, columns=cols), want.select(cols).take(idx))


def test_layout(tmp_path: Path, reference: tuple[pa.Table, bytes, pa.Table]) -> None:
    """Footer, groups spanning write() calls, page table shape, embedded schema, statistics."""
    table, _, _ = reference
    uri = str(tmp_path / "ours")
    wf = _write(uri, table, group=GROUP, cuts=(3, 200))
    data = _ours(uri)
    meta_pos, major, minor, magic = struct.unpack("<qHH4s", data[-16:])
    assert (major, minor, magic) == (0, 2, b"LANC")
    r = LegacyFileReader.open(open_store(uri), f"data/{NAME}")
    assert list(r.batch_offsets) == [0, 128, 256, 384, 512, 640, 700]
    assert r.schema is not None and r.schema.field_ids() == wf.fields
    pages = r._load_page_table()
    assert pages.shape == (len(wf.fields), 6, 2)
    struct_id = r.schema.field("struct").id
    assert not pages[struct_id].any()  # structs have no pages
    dict_field = r.schema.field("dict_str")
    assert dict_field.dictionary is not None and dict_field.dictionary[1] == 4
    (n,) = struct.unpack_from("<I", data, meta_pos)
    md = file_pb2.Metadata.FromString(data[meta_pos + 4 : meta_pos + 4 + n])
    (k,) = struct.unpack_from("<I", data, md.manifest_position)
    embedded = table_pb2.Manifest.FromString(data[md.manifest_position + 4 :][:k])
    assert embedded.writer_version.library == "quiver"
    assert embedded.data_format.version == "0.1" and embedded.version == 1
    stats_names = [f.name for f in md.statistics.schema if f.parent_id == -1]
    assert str(r.schema.field("i64").id) in stats_names
    assert str(r.schema.field("ts").id) not in stats_names  # pylance keeps none for these


def test_many_small_writes_and_tiny_groups(tmp_path: Path) -> None:
    table = _table(60, seed=11)
    want_bytes, want = _pylance(str(tmp_path / "ref"), table, 7)
    uri = str(tmp_path / "ours")
    wf = _write(uri, table, group=7, cuts=range(0, 60, 3), writer_version=PYLANCE)
    assert _ours(uri) == want_bytes
    _assert_same(_our_read(uri, wf, table.schema), want)


def test_sliced_input(tmp_path: Path) -> None:
    """Arrays with offsets (sliced batches, bit-unaligned booleans) are written correctly."""
    table = _table(300, seed=5).slice(13, 250)
    want_bytes, want = _pylance(str(tmp_path / "ref"), table, 64)
    uri = str(tmp_path / "ours")
    store = open_store(uri)
    with store.open_write(f"data/{NAME}") as sink:
        w = LegacyFileWriter(
            sink,
            LanceSchema.from_arrow(table.schema),
            max_rows_per_group=64,
            path_for_errors=NAME,
            writer_version=PYLANCE,
        )
        for b in table.to_batches():  # zero-copy slices, offsets kept
            for lo in range(0, b.num_rows, 41):
                w.write(b.slice(lo, 41))
        wf = w.finish()
    got = _ours(uri)
    assert got == want_bytes, _first_diff(got, want_bytes)
    _assert_same(_our_read(uri, wf, table.schema), want)


def test_statistics_edge_cases(tmp_path: Path) -> None:
    """All-null groups, NaN, signed zeros, infinities and long binary bounds, as pylance."""
    n = 40
    t = pa.table(
        {
            "i": pa.array([None] * 10 + list(range(30)), pa.int32()),
            "u": pa.array([None] * 10 + [2**64 - 1] * 30, pa.uint64()),
            "f": pa.array([float("nan")] * 10 + [-0.0, 0.0] * 5 + [None] * 10 + [np.inf] * 10),
            "g": pa.array([0.0] * 10 + [None] * 10 + [-np.inf, 1.5] * 10, pa.float32()),
            "b": pa.array([None] * 10 + [True] * 10 + [False] * 10 + [True, False] * 5),
            "s": pa.array([None] * 10 + ["\U0010ffff" * 17] * 10 + ["a" * 65] * 10 + [""] * 10),
            "y": pa.array([None] * 10 + [b"\xff" * 70] * 10 + [b"\xff" * 3] * 10 + [b""] * 10),
            "d": pa.array([None] * 10 + [decimal.Decimal("1.5")] * 30, pa.decimal128(5, 1)),
            "dt": pa.array([None] * 10 + list(range(30)), pa.date64()),
        }
    )
    want_bytes, want = _pylance(str(tmp_path / "ref"), t, 10)
    uri = str(tmp_path / "ours")
    wf = _write(uri, t, group=10, cuts=(3, 17), writer_version=PYLANCE)
    got = _ours(uri)
    assert got == want_bytes, _first_diff(got, want_bytes)
    _assert_same(_our_read(uri, wf, t.schema), want)
    assert wf.num_rows == n


def test_values_under_nulls_written_as_held(tmp_path: Path) -> None:
    """Like pylance, bytes under nulls are written as the buffers hold them (bools: False)."""
    valid = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little").tobytes())
    ints = pa.Array.from_buffers(
        pa.int64(), 3, [valid, pa.py_buffer(np.array([7, 8, 9]).tobytes())]
    )
    offs = pa.py_buffer(np.array([0, 1, 3, 4], np.int32).tobytes())
    strs = pa.Array.from_buffers(pa.string(), 3, [valid, offs, pa.py_buffer(b"abcd")])
    bools = pa.Array.from_buffers(pa.bool_(), 3, [valid, pa.py_buffer(b"\x07")])
    lists = pa.ListArray.from_buffers(
        pa.list_(pa.int32()), 3, [valid, offs], children=[pa.array([1, 2, 3, 4], pa.int32())]
    )
    t = pa.table({"i": ints, "s": strs, "b": bools, "l": lists})
    want_bytes, want = _pylance(str(tmp_path / "ref"), t, 2)
    uri = str(tmp_path / "ours")
    wf = _write(uri, t, group=2, writer_version=PYLANCE)
    assert _ours(uri) == want_bytes
    assert want.to_pylist()[1] == {"i": 8, "s": "bc", "b": False, "l": [2, 3]}
    _assert_same(_our_read(uri, wf, t.schema), want)


def test_dictionaries_differing_between_batches(tmp_path: Path) -> None:
    """pylance keeps the first batch's dictionary; we remap later batches' keys onto it."""
    t1 = pa.DictionaryArray.from_arrays(pa.array([0, 1, 1], pa.int8()), pa.array(["x", "y"]))
    t2 = pa.DictionaryArray.from_arrays(
        pa.array([2, 0, None, 1], pa.int8()), pa.array(["q", "x", "z"])
    )
    schema = pa.schema([("d", t1.type), ("l", pa.list_(t1.type))])
    b1 = pa.record_batch([t1, pa.ListArray.from_arrays(pa.array([0, 1, 1, 3]), t1)], schema)
    b2 = pa.record_batch([t2, pa.ListArray.from_arrays(pa.array([0, 0, 4, 4, 4]), t2)], schema)
    uri = str(tmp_path / "ours")
    wf = _write(uri, pa.Table.from_batches([b1, b2]), group=4, cuts=(3,))
    want = ["x", "y", "y", "z", "q", "x", "x"]  # the null key is written as key 0
    got = lance.dataset(uri).to_table()
    assert pc.cast(got["d"], pa.string()).to_pylist() == want
    assert [[str(v) for v in row] for row in got["l"].to_pylist()] == [
        ["x"],
        [],
        ["y", "y"],
        [],
        ["z", "q", "x", "x"],
        [],
        [],
    ]
    ours = _our_read(uri, wf, schema)
    assert pc.cast(ours["d"], pa.string()).to_pylist() == want
    assert ours["l"].equals(got["l"])


def test_dictionaries_given_up_front() -> None:
    """Dictionaries fixed up front (the dataset's) are stored whatever the batches hold."""
    t = pa.DictionaryArray.from_arrays(pa.array([0, 1, 0], pa.int32()), pa.array(["b", "c"]))
    arrow = pa.schema([("d", t.type)])
    schema = LanceSchema.from_arrow(arrow)
    fid = schema.fields[0].id
    sink = io.BytesIO()
    w = LegacyFileWriter(
        sink, schema, path_for_errors="mem", dictionaries={fid: pa.array(["a", "b"])}
    )
    w.write(pa.record_batch([t], arrow))
    w.finish()
    assert w.dictionaries[fid].to_pylist() == ["a", "b", "c"]
    store = open_store("memory://legacy-writer-dicts")
    store.put("x.lance", sink.getvalue())
    r = LegacyFileReader.open(store, "x.lance")
    (got,) = next(r.read(schema.fields, [(0, 3)]))
    assert got.indices.to_pylist() == [1, 2, 1]
    assert pc.cast(got, pa.string()).to_pylist() == ["b", "c", "b"]
    with pytest.raises(InvalidInputError, match="not a dictionary field"):
        LegacyFileWriter(io.BytesIO(), schema, path_for_errors="m", dictionaries={fid + 1: t})
    with pytest.raises(SchemaMismatchError, match="int64"):
        LegacyFileWriter(
            io.BytesIO(), schema, path_for_errors="m", dictionaries={fid: pa.array([1])}
        )


def test_extension_columns_are_written_as_storage() -> None:
    storage = pa.array([bytes([i]) * 16 for i in range(5)], pa.binary(16))
    uuids = pa.ExtensionArray.from_storage(pa.uuid(), storage)
    sink = io.BytesIO()
    w = LegacyFileWriter(
        sink,
        LanceSchema.from_arrow(pa.schema([("u", pa.binary(16))])),
        max_rows_per_group=2,
        path_for_errors="mem",
    )
    w.write(pa.table({"u": uuids}))
    w.finish()
    plain = io.BytesIO()
    w = LegacyFileWriter(
        plain,
        LanceSchema.from_arrow(pa.schema([("u", pa.binary(16))])),
        max_rows_per_group=2,
        path_for_errors="mem",
    )
    w.write(pa.table({"u": storage}))
    w.finish()
    assert sink.getvalue() == plain.getvalue()


def test_no_rows(tmp_path: Path) -> None:
    t = _table(0, seed=1, kinds=["i64", "str", "struct"])
    uri = str(tmp_path / "ours")
    wf = _write(uri, t, group=10)
    assert wf.num_rows == 0
    r = LegacyFileReader.open(open_store(uri), f"data/{NAME}")
    assert r.num_rows == 0 and r.num_batches == 0


def test_streams_one_group_at_a_time() -> None:
    """Full groups reach the sink as they fill; at most one group is held back."""

    class Sink(io.BytesIO):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def write(self, data) -> int:  # noqa: ANN001 - test double
            self.calls += 1
            return super().write(data)

    t = _table(1000, seed=2, kinds=["i64", "str", "list"])
    sink = Sink()
    w = LegacyFileWriter(
        sink, LanceSchema.from_arrow(t.schema), max_rows_per_group=100, path_for_errors="mem"
    )
    w.write(t.slice(0, 950).combine_chunks().to_batches()[0])
    assert sink.calls == 9 and w._pending_rows == 50
    size = len(sink.getvalue())
    w.write(t.slice(950).combine_chunks().to_batches()[0])
    assert w._pending_rows == 0 and len(sink.getvalue()) > size
    wf = w.finish()
    assert wf.size_bytes == len(sink.getvalue())
    assert w.finish() is wf


# -- hypothesis: random tables, group sizes and write sizes ---------------------------------
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 120),
    group=st.integers(1, 50),
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=6, unique=True),
    p=st.sampled_from([0.0, 0.3, 1.0]),
    cut_fracs=st.lists(st.floats(0, 1), max_size=5),
    lead=st.integers(0, 5),
)
def test_random_round_trips(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    n: int,
    group: int,
    kinds: list[str],
    p: float,
    cut_fracs: list[float],
    lead: int,
) -> None:
    table = _table(n + lead, seed, kinds, p).slice(lead)
    base = tmp_path_factory.mktemp("h")
    want_bytes, want = _pylance(str(base / "ref"), table, group)
    uri = str(base / "ours")
    cuts = [int(f * n) for f in cut_fracs]
    wf = _write(uri, table, group=group, cuts=cuts, writer_version=PYLANCE)
    got = _ours(uri)
    assert got == want_bytes, _first_diff(got, want_bytes)
    _assert_same(_our_read(uri, wf, table.schema), want)
    _assert_same(lance.dataset(uri).to_table(), want)


# -- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype,column",
    [
        (pa.map_(pa.string(), pa.int32()), "m"),
        (pa.struct([("m", pa.map_(pa.int8(), pa.int8()))]), "m.m"),
        (pa.list_(pa.struct([("x", pa.int8())]), 2), "m"),
        (pa.list_(pa.string(), 3), "m"),
        (pa.dictionary(pa.int8(), pa.float64()), "m"),
    ],
)
def test_unsupported_types(dtype: pa.DataType, column: str) -> None:
    schema = LanceSchema.from_arrow(pa.schema([("ok", pa.int8()), ("m", dtype)]))
    with pytest.raises(UnsupportedFeatureError, match=f"f.lance.*'{column}'"):
        LegacyFileWriter(io.BytesIO(), schema, path_for_errors="f.lance")


def _writer(schema: pa.Schema, **kwargs: object) -> LegacyFileWriter:
    return LegacyFileWriter(
        io.BytesIO(), LanceSchema.from_arrow(schema), path_for_errors="f.lance", **kwargs
    )


def test_batch_schema_mismatch() -> None:
    schema = pa.schema([pa.field("a", pa.int32()), pa.field("s", pa.string(), nullable=False)])
    w = _writer(schema)
    with pytest.raises(SchemaMismatchError, match="f.lance.*columns"):
        w.write(pa.record_batch({"s": ["x"], "a": pa.array([1], pa.int32())}))
    with pytest.raises(SchemaMismatchError, match="f.lance.*'a'.*int64"):
        w.write(pa.record_batch({"a": pa.array([1]), "s": ["x"]}))
    with pytest.raises(SchemaMismatchError, match="f.lance.*'s'.*not nullable"):
        w.write(
            pa.record_batch(
                [pa.array([1], pa.int32()), pa.array([None], pa.string())], schema=schema
            )
        )


def test_nested_nulls_in_non_nullable_field() -> None:
    item = pa.field("item", pa.int32(), nullable=False)
    schema = pa.schema([("l", pa.list_(item))])
    w = _writer(schema)
    bad = pa.ListArray.from_arrays(pa.array([0, 2]), pa.array([1, None], pa.int32()))
    with pytest.raises(SchemaMismatchError, match="'l.item'"):
        w.write(pa.record_batch([bad.cast(pa.list_(item), safe=False)], schema=schema))


def test_misuse() -> None:
    schema = pa.schema([("a", pa.int32())])
    with pytest.raises(InvalidInputError, match="max_rows_per_group"):
        _writer(schema, max_rows_per_group=0)
    with pytest.raises(InvalidInputError, match="no columns"):
        _writer(pa.schema([]))
    w = _writer(schema)
    w.finish()
    with pytest.raises(InvalidInputError, match="finished"):
        w.write(pa.record_batch({"a": pa.array([1], pa.int32())}))

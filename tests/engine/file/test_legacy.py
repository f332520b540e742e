"""The legacy (v0.1) data-file reader against files written and read back by pylance."""

from __future__ import annotations

import decimal
import os
import struct
from collections.abc import Iterator

import lance
import numpy as np
import pyarrow as pa
import pytest

from quiver.format.errors import CorruptFileError, InvalidInputError
from quiver.format.file.base import split_ranges
from quiver.format.file.legacy import LegacyFileReader
from quiver.format.io.store import FileReader, ObjectStore, open_store
from quiver.format.proto import table_pb2
from quiver.format.table.schema import LanceField, LanceSchema

pytestmark = pytest.mark.compat

N = 1000
ROWS_PER_GROUP = 100
ROWS_PER_FILE = 600


def _mask(rng: np.random.Generator, n: int, p: float = 0.2) -> np.ndarray:
    return rng.random(n) < p


def _strings(rng: np.random.Generator, n: int, *, nulls: bool = True) -> list[str | None]:
    lens = rng.integers(0, 12, n)
    out: list[str | None] = ["é" * int(k // 3) + "x" * int(k) for k in lens]
    if nulls:
        for i in np.flatnonzero(_mask(rng, n)):
            out[i] = None
    return out


def _lists(rng: np.random.Generator, n: int, make) -> list:  # noqa: ANN001 - test helper
    out = []
    for i in range(n):
        k = int(rng.integers(0, 5))
        out.append(None if i % 7 == 3 else make(k))
    return out


def _table(n: int = N, seed: int = 7) -> pa.Table:
    """A table with every type legacy files can hold, with nulls and empty values."""
    rng = np.random.default_rng(seed)
    m = _mask(rng, n)

    def ints(dtype: str) -> pa.Array:
        info = np.iinfo(dtype)
        vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        return pa.array(vals, mask=_mask(rng, n))

    inner = pa.struct([("d", pa.list_(pa.int64())), ("e", pa.bool_())])
    cols: dict[str, pa.Array] = {
        "i8": ints("int8"),
        "i16": ints("int16"),
        "i32": ints("int32"),
        "i64": ints("int64"),
        "u8": ints("uint8"),
        "u16": ints("uint16"),
        "u32": ints("uint32"),
        "u64": ints("uint64"),
        "bool": pa.array(rng.random(n) < 0.5, mask=m),
        "f16": pa.array(rng.standard_normal(n).astype(np.float16), mask=_mask(rng, n)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32), mask=_mask(rng, n)),
        "f64": pa.array(rng.standard_normal(n), mask=_mask(rng, n)),
        "dec128": pa.array(
            [decimal.Decimal(int(v)).scaleb(-3) for v in rng.integers(-(10**9), 10**9, n)],
            pa.decimal128(10, 3),
            mask=_mask(rng, n),
        ),
        "dec256": pa.array(
            [decimal.Decimal(int(v)).scaleb(-5) for v in rng.integers(-(10**15), 10**15, n)],
            pa.decimal256(40, 5),
            mask=_mask(rng, n),
        ),
        "date32": pa.array(rng.integers(0, 20000, n).astype(np.int32), pa.date32()),
        "date64": pa.array(rng.integers(0, 20000, n) * 86_400_000, pa.date64()),
        "t32s": pa.array(rng.integers(0, 86400, n).astype(np.int32), pa.time32("s")),
        "t32ms": pa.array(rng.integers(0, 86_400_000, n).astype(np.int32), pa.time32("ms")),
        "t64us": pa.array(rng.integers(0, 86_400_000_000, n), pa.time64("us")),
        "t64ns": pa.array(rng.integers(0, 86_400_000_000_000, n), pa.time64("ns"), mask=m),
        "ts_s": pa.array(rng.integers(0, 2**40, n), pa.timestamp("s")),
        "ts_ns_utc": pa.array(rng.integers(0, 2**60, n), pa.timestamp("ns", "UTC"), mask=m),
        "dur_ms": pa.array(rng.integers(-(2**40), 2**40, n), pa.duration("ms")),
        "fsb": pa.array(
            [bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(n)],
            pa.binary(3),
            mask=_mask(rng, n),
        ),
        "fsl_f32": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(4 * n).astype(np.float32)), 4, mask=pa.array(_mask(rng, n))
        ),
        "fsl_bool": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(3 * n) < 0.5), 3),
        "fsl_fsl": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(
                pa.array(rng.integers(-100, 100, 6 * n).astype(np.int8)), 2
            ),
            3,
        ),
        "str": pa.array(_strings(rng, n)),
        "str_nn": pa.array(_strings(rng, n, nulls=False)),
        "lstr": pa.array(_strings(rng, n), pa.large_string()),
        "bin": pa.array([None if s is None else s.encode() for s in _strings(rng, n)]),
        "lbin": pa.array(
            [None if s is None else s.encode() for s in _strings(rng, n)], pa.large_binary()
        ),
        "dict_str": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 5, n).astype(np.int32)),
            pa.array(["red", "green", "", "blue", "a much longer value"]),
        ),
        "dict_int": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 3, n).astype(np.int8)), pa.array([10, -20, 30], pa.int64())
        ),
        "null": pa.nulls(n),
        "st": pa.StructArray.from_arrays(
            [
                pa.array(rng.integers(0, 100, n).astype(np.int32), mask=_mask(rng, n)),
                pa.array(_strings(rng, n)),
                pa.array(
                    [
                        {"d": v, "e": bool(i % 2)}
                        for i, v in enumerate(
                            _lists(rng, n, lambda k: rng.integers(0, 9, k).tolist())
                        )
                    ],
                    inner,
                ),
            ],
            names=["a", "b", "c"],
            mask=pa.array(_mask(rng, n, 0.1)),
        ),
        "l_i32": pa.array(
            _lists(rng, n, lambda k: [None if j == 1 else int(j) for j in range(k)]),
            pa.list_(pa.int32()),
        ),
        "ll_str": pa.array(_lists(rng, n, lambda k: _strings(rng, k)), pa.large_list(pa.string())),
        "l_st": pa.array(
            _lists(
                rng,
                n,
                lambda k: [{"x": float(j), "y": _strings(rng, j)} for j in range(k)],
            ),
            pa.list_(pa.struct([("x", pa.float64()), ("y", pa.list_(pa.string()))])),
        ),
        "l_l": pa.array(
            _lists(rng, n, lambda k: [list(range(j)) for j in range(k)]),
            pa.list_(pa.list_(pa.int8())),
        ),
        "l_fsl": pa.array(
            _lists(rng, n, lambda k: [[float(j), -float(j)] for j in range(k)]),
            pa.list_(pa.list_(pa.float32(), 2)),
        ),
        "l_bool": pa.array(
            _lists(rng, n, lambda k: [j % 2 == 0 for j in range(k)]), pa.list_(pa.bool_())
        ),
    }
    fields = [pa.field(k, v.type, nullable=(k != "str_nn")) for k, v in cols.items()]
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(fields))


def _manifest(uri: str, version: int) -> table_pb2.Manifest:
    """The manifest of `version`, read by hand from `_versions/`."""
    vdir = os.path.join(uri, "_versions")
    for name in os.listdir(vdir):
        if not name.endswith(".manifest"):
            continue
        with open(os.path.join(vdir, name), "rb") as f:
            data = f.read()
        (pos,) = struct.unpack_from("<q", data, len(data) - 16)
        (n,) = struct.unpack_from("<I", data, pos)
        m = table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + n])
        if m.version == version:
            return m
    raise AssertionError(f"no manifest for version {version}")


class Legacy:
    """A legacy dataset written by pylance, its schema, expected table and files."""

    def __init__(self, uri: str) -> None:
        ds = lance.dataset(uri)
        self.uri = uri
        self.expected = ds.to_table()
        m = _manifest(uri, ds.version)
        self.schema = LanceSchema.from_protos(m.fields)
        self.store = open_store(uri)
        self.files: list[tuple[table_pb2.DataFile, int, int]] = []  # (file, row offset, rows)
        offset = 0
        for frag in m.fragments:
            for df in frag.files:
                self.files.append((df, offset, frag.physical_rows))
            offset += frag.physical_rows

    def reader(self, i: int = 0) -> LegacyFileReader:
        return LegacyFileReader.open(self.store, "data/" + self.files[i][0].path)

    def fields(self, i: int = 0) -> list[LanceField]:
        return self.schema.project_ids(self.files[i][0].fields).fields

    def expect(self, i: int, fields: list[LanceField]) -> pa.Table:
        _, off, n = self.files[i]
        return self.expected.slice(off, n).select([f.name for f in fields])


def _table_of(fields: list[LanceField], arrays: list[pa.Array]) -> pa.Table:
    for f, a in zip(fields, arrays, strict=True):
        assert a.type == f.arrow_type, f.name
    return pa.Table.from_arrays(arrays, schema=pa.schema([f.to_arrow() for f in fields]))


def _assert_tables(got: pa.Table, want: pa.Table) -> None:
    assert got.schema == want.schema
    if not got.equals(want):
        for name in got.column_names:
            g, w = got[name].combine_chunks(), want[name].combine_chunks()
            assert g.equals(w), f"{name}: {g.to_pylist()[:20]} != {w.to_pylist()[:20]}"
        raise AssertionError("tables differ")


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Legacy:
    uri = str(tmp_path_factory.mktemp("legacy") / "ds")
    lance.write_dataset(
        _table(),
        uri,
        data_storage_version="legacy",
        max_rows_per_group=ROWS_PER_GROUP,
        max_rows_per_file=ROWS_PER_FILE,
    )
    return Legacy(uri)


def test_layout(legacy: Legacy) -> None:
    assert len(legacy.files) >= 2
    for i, (df, _, rows) in enumerate(legacy.files):
        assert df.file_major_version == 0 and not df.column_indices
        r = legacy.reader(i)
        assert r.num_rows == rows and r.path.endswith(df.path)
        assert r.num_batches > 1 and r.schema is not None
        assert [f.id for f in r.schema.walk()] == list(df.fields)


def test_pylance_null_rules(legacy: Legacy) -> None:
    """What pylance reads back where the written data had nulls: no validity survives."""
    t = legacy.expected
    for name in ("i32", "bool", "f64", "dec128", "fsb", "fsl_f32", "l_i32", "st", "dict_str"):
        assert t[name].null_count == 0, name
    assert t["str"].null_count > 0 and "" not in t["str"].to_pylist()
    assert "" in t["str_nn"].to_pylist()


def test_read_all(legacy: Legacy) -> None:
    for i in range(len(legacy.files)):
        r, fields = legacy.reader(i), legacy.fields(i)
        steps = list(r.read(fields, [(0, r.num_rows)]))
        assert len(steps) == 1
        _assert_tables(_table_of(fields, steps[0]), legacy.expect(i, fields))


def _collect(fields: list[LanceField], steps: Iterator[list[pa.Array]]) -> list[pa.Table]:
    return [_table_of(fields, s) for s in steps]


@pytest.mark.parametrize(
    "ranges,batch_size",
    [
        ([(0, 600)], 64),
        ([(5, 250), (299, 301), (390, 600)], 37),
        ([(99, 101), (150, 151), (199, 450)], 1000),
        ([(0, 1), (599, 600)], 1),
    ],
)
def test_read_ranges(legacy: Legacy, ranges: list[tuple[int, int]], batch_size: int) -> None:
    r, fields = legacy.reader(0), legacy.fields(0)
    want = legacy.expect(0, fields)
    tables = _collect(fields, r.read(fields, ranges, batch_size))
    steps = list(split_ranges(ranges, batch_size))
    assert len(tables) == len(steps)
    for t, (s, e) in zip(tables, steps, strict=True):
        assert t.num_rows == e - s
        _assert_tables(t, want.slice(s, e - s))


@pytest.mark.parametrize("which", ["sparse", "dense", "one", "edges", "all"])
def test_take(legacy: Legacy, which: str) -> None:
    r, fields = legacy.reader(0), legacy.fields(0)
    rng = np.random.default_rng(3)
    n = r.num_rows
    idx = {
        "sparse": np.sort(rng.choice(n, 25, replace=False)),
        "dense": np.sort(rng.choice(n, n // 2, replace=False)),
        "one": np.array([321]),
        "edges": np.array([0, 99, 100, 101, 199, 200, n - 1]),
        "all": np.arange(n),
    }[which].astype(np.uint64)
    got = _table_of(fields, r.take(fields, idx))
    _assert_tables(got, legacy.expect(0, fields).take(idx.astype(np.int64)))


def test_take_empty(legacy: Legacy) -> None:
    r, fields = legacy.reader(0), legacy.fields(0)
    got = r.take(fields, np.zeros(0, dtype=np.uint64))
    assert [len(a) for a in got] == [0] * len(fields)
    assert [a.type for a in got] == [f.arrow_type for f in fields]


def test_projection(legacy: Legacy) -> None:
    r = legacy.reader(1)
    names = ["lstr", "i16", "l_st", "dict_int"]
    fields = legacy.schema.project(names).fields
    want = legacy.expect(1, fields)
    _assert_tables(_table_of(fields, next(r.read(fields, [(0, r.num_rows)]))), want)
    idx = np.array([1, 2, 150, 399], dtype=np.uint64)
    _assert_tables(_table_of(fields, r.take(fields, idx)), want.take(idx.astype(np.int64)))


def test_struct_subfields(legacy: Legacy) -> None:
    r = legacy.reader(0)
    st = legacy.schema.field("st")
    by_name = {c.name: c for c in st.children}
    d = by_name["c"].children[0]  # st.c.d: list<int64>
    pruned = st.project_ids({by_name["b"].id, d.id, d.children[0].id})
    assert pruned is not None
    assert pruned.arrow_type == pa.struct(
        [("b", pa.string()), ("c", pa.struct([("d", pa.list_(pa.int64()))]))]
    )
    full = legacy.expect(0, [st])["st"].combine_chunks()
    c = full.field("c")
    want = pa.StructArray.from_arrays(
        [full.field("b"), pa.StructArray.from_arrays([c.field("d")], fields=[c.type.field(0)])],
        fields=list(pruned.arrow_type),
    )
    (got,) = next(r.read([pruned], [(0, r.num_rows)], 10_000))
    assert got.equals(want)
    idx = np.array([3, 98, 99, 100, 555], dtype=np.uint64)
    (got,) = r.take([pruned], idx)
    assert got.equals(want.take(idx.astype(np.int64)))


class _Recording(FileReader):
    """A FileReader that records the ranges fetched through `read_ranges`."""

    def __init__(self, store: ObjectStore, path: str) -> None:
        super().__init__(store, path)
        self.seen: list[tuple[int, int]] = []

    def read_ranges(self, ranges):  # noqa: ANN001, ANN201 - test double
        self.seen.extend(ranges)
        return super().read_ranges(ranges)


def test_take_reads_only_needed_batches(legacy: Legacy) -> None:
    path = "data/" + legacy.files[0][0].path
    file = _Recording(legacy.store, path)
    r = LegacyFileReader(file, path_for_errors=path)
    fields = [f for f in legacy.fields(0) if not f.name.startswith("dict")]
    pages = r._load_page_table()
    first_col = fields[0].id - r._min_id  # i8 comes first: it opens each batch's region
    idx = np.array([410, 411, 450, 499], dtype=np.uint64)  # all in batch 4
    b = 4
    lo = int(pages[:, b - 1, 0].max())
    hi = int(pages[first_col, b + 1, 0])
    r.take(fields, idx)
    assert file.seen
    for start, length in file.seen:
        assert lo < start and start + length <= hi, (start, length, lo, hi)
    # and a read step that crosses a batch boundary reads two batches only
    file.seen.clear()
    list(r.read(fields, [(190, 210)]))
    lo, hi = int(pages[:, 0, 0].max()), int(pages[first_col, 3, 0])
    for start, length in file.seen:
        assert lo < start and start + length <= hi


def test_multiple_files_per_fragment(tmp_path: os.PathLike) -> None:
    """A column added later lives in its own file whose field ids do not start at 0."""
    uri = str(tmp_path / "ds")
    t = pa.table({"a": pa.array(range(250), pa.int32()), "s": [str(i) for i in range(250)]})
    ds = lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=100)
    ds.add_columns({"b": "a * 2", "c": "concat(s, '!')"})
    lg = Legacy(uri)
    assert len(lg.files) == 2
    r, fields = lg.reader(1), lg.fields(1)
    assert [f.id for f in fields] == [2, 3] and r._min_id == 2
    _assert_tables(_table_of(fields, next(r.read(fields, [(0, 250)]))), lg.expect(1, fields))
    idx = np.array([0, 150, 249], dtype=np.uint64)
    _assert_tables(_table_of(fields, r.take(fields, idx)), lg.expect(1, fields).take(idx))


def test_bad_requests(legacy: Legacy) -> None:
    r, fields = legacy.reader(0), legacy.fields(0)
    with pytest.raises(InvalidInputError):
        next(r.read(fields, [(0, r.num_rows + 1)]))
    with pytest.raises(InvalidInputError):
        r.take(fields, np.array([r.num_rows], dtype=np.uint64))


# -- corruption --------------------------------------------------------------------------
@pytest.fixture()
def small(tmp_path: os.PathLike) -> tuple[bytes, LanceSchema, ObjectStore]:
    uri = str(tmp_path / "small")
    t = pa.table({"i": list(range(300)), "s": [f"v{i}" for i in range(300)]})
    lance.write_dataset(t, uri, data_storage_version="legacy", max_rows_per_group=100)
    lg = Legacy(uri)
    with open(os.path.join(uri, "data", lg.files[0][0].path), "rb") as f:
        data = f.read()
    return data, lg.schema, open_store(str(tmp_path))


def _open(store: ObjectStore, data: bytes) -> LegacyFileReader:
    store.put("broken.lance", data)
    return LegacyFileReader.open(store, "broken.lance")


def test_corrupt_truncated(small: tuple[bytes, LanceSchema, ObjectStore]) -> None:
    data, _, store = small
    for cut in (len(data) // 2, 10, len(data) - 1):
        with pytest.raises(CorruptFileError, match="broken.lance"):
            _open(store, data[:cut])


def test_corrupt_magic(small: tuple[bytes, LanceSchema, ObjectStore]) -> None:
    data, _, store = small
    with pytest.raises(CorruptFileError, match="broken.lance.*magic"):
        _open(store, data[:-4] + b"LANX")


def test_corrupt_metadata(small: tuple[bytes, LanceSchema, ObjectStore]) -> None:
    data, _, store = small
    (pos,) = struct.unpack_from("<q", data, len(data) - 16)
    (n,) = struct.unpack_from("<I", data, pos)
    garbage = data[: pos + 4] + b"\xff" * n + data[pos + 4 + n :]
    with pytest.raises(CorruptFileError, match="broken.lance"):
        _open(store, garbage)
    bad_pos = data[:-16] + struct.pack("<q", len(data) * 2) + data[-8:]
    with pytest.raises(CorruptFileError, match="broken.lance"):
        _open(store, bad_pos)


def test_corrupt_page(small: tuple[bytes, LanceSchema, ObjectStore]) -> None:
    """A page table pointing past the end of the file is reported with the column name."""
    data, schema, store = small
    r = _open(store, data)
    pt = r.metadata.page_table_position
    s_id = schema.field("s").id
    at = pt + (s_id - r._min_id) * r.num_batches * 16  # s, batch 0: position
    broken = data[:at] + struct.pack("<q", len(data) * 4) + data[at + 8 :]
    r = _open(store, broken)
    with pytest.raises(CorruptFileError, match="broken.lance.*'s'"):
        next(r.read(schema.fields, [(0, 10)]))


def test_small_row_groups_random(tmp_path: os.PathLike) -> None:
    """Tiny row groups: every step and take crosses many batches."""
    uri = str(tmp_path / "ds")
    lance.write_dataset(
        _table(60, seed=11), uri, data_storage_version="legacy", max_rows_per_group=7
    )
    lg = Legacy(uri)
    r, fields = lg.reader(0), lg.fields(0)
    assert r.num_batches == 9
    want = lg.expect(0, fields)
    rng = np.random.default_rng(5)
    for _ in range(5):
        cuts = np.sort(rng.choice(61, 6, replace=False)).tolist()
        ranges = list(zip(cuts[::2], cuts[1::2], strict=True))
        bs = int(rng.integers(1, 20))
        got = _collect(fields, r.read(fields, ranges, bs))
        for t, (s, e) in zip(got, split_ranges(ranges, bs), strict=True):
            _assert_tables(t, want.slice(s, e - s))
        idx = np.sort(rng.choice(60, int(rng.integers(1, 60)), replace=False))
        _assert_tables(_table_of(fields, r.take(fields, idx.astype(np.uint64))), want.take(idx))


def test_reads_per_step(legacy: Legacy) -> None:
    """One coalesced read per nesting level, and only the requested columns' pages."""
    path = "data/" + legacy.files[0][0].path
    file = _Recording(legacy.store, path)
    r = LegacyFileReader(file, path_for_errors=path)
    fields = legacy.fields(0)
    calls = []
    orig = file.read_ranges

    def counting(ranges):  # noqa: ANN001, ANN202 - test double
        calls.append(len(ranges))
        return orig(ranges)

    file.read_ranges = counting  # type: ignore[method-assign]
    list(r.read(fields, [(0, 300)], 100))
    # list<struct<list<string>>> is the deepest: offsets, offsets, positions, value bytes;
    # the first step also loads the dictionaries (positions, bytes) before their keys
    assert len(calls) <= 3 * 4  # 3 steps
    file.seen.clear()
    f = legacy.schema.field("i32")
    list(r.read([f], [(0, 300)], 100))
    pages = r._load_page_table()[f.id - r._min_id]
    assert file.seen == [(int(pages[b, 0]), 100 * 4) for b in range(3)]

"""The Lance v2 container and 2.0 page decoders against files written and read by pylance."""

from __future__ import annotations

import decimal
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import same_values
from google.protobuf import any_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import arrow_types, random_array

from quiver.format.errors import (
    CorruptFileError,
    InvalidInputError,
    LanceError,
    UnsupportedFeatureError,
)
from quiver.format.file.base import split_ranges
from quiver.format.file.v20 import V2Container, V2FileReader
from quiver.format.file.v20 import decode as v20
from quiver.format.io.store import FileReader, ObjectStore, open_store
from quiver.format.proto import encodings_v2_0_pb2, file2_pb2, table_pb2
from quiver.format.table.schema import LanceField, LanceSchema

pytestmark = pytest.mark.compat

N = 3000
ROWS_PER_FILE = 1700
WRITE_OPTS = {
    "data_storage_version": "2.0",
    "max_rows_per_file": ROWS_PER_FILE,
    "data_cache_bytes": 48 * 1024,
    "max_page_bytes": 2048,
}


# -- dataset helpers -------------------------------------------------------------------------
def _manifest(uri: str) -> table_pb2.Manifest:
    """The newest manifest (V2 names: the smallest name is the newest version)."""
    names = sorted(n for n in os.listdir(f"{uri}/_versions") if n.endswith(".manifest"))
    data = Path(f"{uri}/_versions/{names[0]}").read_bytes()
    pos = struct.unpack("<q", data[-16:-8])[0]
    (length,) = struct.unpack("<I", data[pos : pos + 4])
    return table_pb2.Manifest.FromString(data[pos + 4 : pos + 4 + length])


def _is_packed(f: LanceField) -> bool:
    return f.logical_type == "struct" and f.metadata.get("packed") == b"true"


def _project(f: LanceField, ids: set[int]) -> LanceField | None:
    """Like `LanceField.project_ids`, but a packed struct (one column) stays whole."""
    if _is_packed(f):
        return f if f.id in ids else None
    return f.project_ids(ids)


def _write(uri: str, table: pa.Table, batch: int = 250, **opts: object) -> None:
    shutil.rmtree(uri, ignore_errors=True)
    # Separate allocations per batch so the writer's page accounting sees small arrays.
    batches = [
        b
        for i in range(0, table.num_rows, batch)
        for b in table.take(np.arange(i, min(i + batch, table.num_rows))).to_batches()
    ]
    reader = pa.RecordBatchReader.from_batches(table.schema, batches)
    lance.write_dataset(reader, uri, **{**WRITE_OPTS, **opts})


class Files:
    """The data files of a dataset with readers, projected fields and pylance's rows."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.manifest = _manifest(uri)
        self.schema = LanceSchema.from_protos(self.manifest.fields)
        self.store = open_store(uri)
        self.ds = lance.dataset(uri)

    def entries(self) -> list[tuple[table_pb2.DataFragment, table_pb2.DataFile]]:
        return [(fr, df) for fr in self.manifest.fragments for df in fr.files]

    def reader(
        self, df: table_pb2.DataFile, file: FileReader | None = None, **kwargs: bool
    ) -> V2FileReader:
        f = file or self.store.open(f"data/{df.path}")
        return V2FileReader(
            f, list(df.fields), list(df.column_indices), path_for_errors=df.path, **kwargs
        )

    def fields(self, df: table_pb2.DataFile) -> list[LanceField]:
        ids = {i for i in df.fields if i >= 0}
        return [p for f in self.schema.fields if (p := _project(f, ids)) is not None]

    def expected(self, fr: table_pb2.DataFragment) -> pa.Table:
        return self.ds.get_fragment(fr.id).to_table()


def assert_same(got: pa.Array, exp: pa.Array | pa.ChunkedArray, field: LanceField) -> None:
    """Exactly the field's type, and pylance's values and nulls (NaN equal to NaN)."""
    if isinstance(exp, pa.ChunkedArray):
        exp = exp.combine_chunks() if exp.num_chunks else pa.array([], exp.type)
    assert got.type == field.arrow_type, (field.name, got.type, field.arrow_type)
    got.validate(full=True)
    if pa.types.is_dictionary(got.type):
        # pylance concatenates page dictionaries, we unify them: compare decoded values.
        assert got.type == exp.type
        got, exp = got.cast(got.type.value_type), exp.cast(exp.type.value_type)
    assert len(got) == len(exp), field.name
    assert got.null_count == exp.null_count, field.name
    if not got.equals(exp):
        assert same_values(got.to_pylist(), exp.to_pylist()), field.name


def _concat_steps(steps: list[list[pa.Array]], j: int, t: pa.DataType) -> pa.Array:
    return pa.chunked_array([s[j] for s in steps], t).combine_chunks()


# -- the varied dataset --------------------------------------------------------------------
def _mask(rng: np.random.Generator, n: int, p: float = 0.15) -> np.ndarray:
    return rng.random(n) < p


def _strings(rng: np.random.Generator, n: int, nulls: bool = True) -> list[str | None]:
    lens = rng.integers(0, 14, n)
    out: list[str | None] = [f"{'é' * int(k // 4)}{'x' * int(k)}{i}" for i, k in enumerate(lens)]
    if nulls:
        for i in np.flatnonzero(_mask(rng, n)):
            out[i] = None
    return out


def _lists(rng: np.random.Generator, n: int, item: Callable[[int], list]) -> list:
    out = []
    for i in range(n):
        k = int(rng.integers(0, 6))
        out.append(None if rng.random() < 0.1 else item(k) if i % 9 else [])
    return out


def _types_table(n: int = N, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)

    def ints(dtype: str, nulls: bool = True) -> pa.Array:
        info = np.iinfo(dtype)
        vals = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        return pa.array(vals, mask=_mask(rng, n) if nulls else None)

    f64 = rng.standard_normal(n)
    f64[::97] = np.nan
    packed_t = pa.struct([("px", pa.int32()), ("py", pa.float64())])
    lst_st_t = pa.struct([("a", pa.int8()), ("b", pa.large_string())])
    st_t = pa.struct(
        [
            ("x", pa.int64()),
            ("y", pa.string()),
            ("z", pa.struct([("w", pa.list_(pa.float32(), 2))])),
        ]
    )
    levels = np.array(["INFO", "WARN", "ERROR", "DEBUG"])
    cols: dict[str, pa.Array] = {
        "i64": ints("int64", nulls=False),
        "ni32": ints("int32"),
        "i8": ints("int8"),
        "u16": ints("uint16"),
        "u64": ints("uint64"),
        "f16": pa.array(rng.standard_normal(n).astype(np.float16), mask=_mask(rng, n)),
        "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
        "f64": pa.array(f64, mask=_mask(rng, n)),
        "b": pa.array(rng.random(n) < 0.5),
        "nb": pa.array(rng.random(n) < 0.5, mask=_mask(rng, n)),
        "d128": pa.array(
            [decimal.Decimal(int(v)).scaleb(-3) for v in rng.integers(-(10**9), 10**9, n)],
            pa.decimal128(12, 3),
            mask=_mask(rng, n),
        ),
        "d256": pa.array(
            [decimal.Decimal(int(v)).scaleb(-5) for v in rng.integers(-(10**15), 10**15, n)],
            pa.decimal256(40, 5),
        ),
        "date32": pa.array(
            rng.integers(0, 20000, n).astype(np.int32), pa.date32(), mask=_mask(rng, n)
        ),
        "date64": pa.array(rng.integers(0, 20000, n) * 86_400_000, pa.date64()),
        "t32": pa.array(rng.integers(0, 86_400_000, n).astype(np.int32), pa.time32("ms")),
        "t64": pa.array(rng.integers(0, 86_400 * 10**9, n), pa.time64("ns"), mask=_mask(rng, n)),
        "ts": pa.array(rng.integers(0, 2**60, n), pa.timestamp("ns", "UTC"), mask=_mask(rng, n)),
        "ts_s": pa.array(rng.integers(0, 2**40, n), pa.timestamp("s")),
        "dur": pa.array(rng.integers(-(2**40), 2**40, n), pa.duration("ms")),
        "fsb": pa.array(
            [bytes(rng.integers(0, 256, 3, dtype=np.uint8)) for _ in range(n)],
            pa.binary(3),
            mask=_mask(rng, n),
        ),
        "s": pa.array(_strings(rng, n)),
        "s_nn": pa.array(_strings(rng, n, nulls=False)),
        "ls": pa.array(_strings(rng, n), pa.large_string()),
        "bin": pa.array([None if v is None else v.encode() for v in _strings(rng, n)]),
        "lbin": pa.array(
            [None if v is None else v.encode()[:5] for v in _strings(rng, n)], pa.large_binary()
        ),
        "lowcard": pa.array(levels[rng.integers(0, 4, n)], mask=_mask(rng, n)),
        "dict": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 4, n).astype(np.int32), mask=_mask(rng, n)),
            pa.array(["red", "green", "", "a much longer value"]),
        ),
        "dict_int": pa.DictionaryArray.from_arrays(
            pa.array(rng.integers(0, 3, n).astype(np.int8)), pa.array([10, -20, 30], pa.int64())
        ),
        "fsl": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(4 * n).astype(np.float32)), 4
        ),
        "nfsl": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.integers(-9, 9, 2 * n).astype(np.int16), mask=_mask(rng, 2 * n)),
            2,
            mask=pa.array(_mask(rng, n)),
        ),
        "fsl_bool": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(3 * n) < 0.5), 3),
        "fsl_fsl": pa.FixedSizeListArray.from_arrays(
            pa.FixedSizeListArray.from_arrays(
                pa.array(rng.integers(0, 9, 6 * n).astype(np.int8)), 2
            ),
            3,
        ),
        "st": pa.array(
            [
                {"x": int(v), "y": s, "z": {"w": [float(v), 1.5]}}
                for v, s in zip(rng.integers(0, 100, n), _strings(rng, n), strict=True)
            ],
            st_t,
        ),
        "lst": pa.array(
            _lists(rng, n, lambda k: rng.integers(0, 99, k).tolist()), pa.list_(pa.int32())
        ),
        "llst": pa.array(
            _lists(rng, n, lambda k: [None if j == 2 else f"v{j}" for j in range(k)]),
            pa.large_list(pa.string()),
        ),
        "lst_st": pa.array(
            _lists(rng, n, lambda k: [{"a": j, "b": "q" * j} for j in range(k)]),
            pa.list_(lst_st_t),
        ),
        "ll": pa.array(
            _lists(rng, n, lambda k: [None if j == 1 else list(range(j)) for j in range(k)]),
            pa.list_(pa.list_(pa.int64())),
        ),
        "l_fsl": pa.array(
            _lists(rng, n, lambda k: [[float(j), None] for j in range(k)]),
            pa.list_(pa.list_(pa.float64(), 2)),
        ),
        "st_l": pa.array(
            [{"l": [i] * (i % 3), "v": float(i)} for i in range(n)],
            pa.struct([("l", pa.list_(pa.int64())), ("v", pa.float32())]),
        ),
        "allnull_i": pa.nulls(n, pa.int32()),
        "allnull_s": pa.nulls(n, pa.string()),
        "allnull_l": pa.nulls(n, pa.list_(pa.int16())),
        "nul": pa.nulls(n),
        "packed": pa.array([{"px": i, "py": i / 2} for i in range(n)], packed_t),
    }
    fields = [
        pa.field(k, v.type, metadata={"packed": "true"} if k == "packed" else None)
        for k, v in cols.items()
    ]
    fields[[f.name for f in fields].index("ls")] = pa.field(
        "ls", pa.large_string(), metadata={"lance-encoding:compression": "zstd"}
    )
    fields[[f.name for f in fields].index("bin")] = pa.field(
        "bin", pa.binary(), metadata={"lance-encoding:compression": "lz4"}
    )
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(fields))


@pytest.fixture(scope="module")
def types_ds(tmp_path_factory: pytest.TempPathFactory) -> Files:
    uri = str(tmp_path_factory.mktemp("v2_0") / "types")
    _write(uri, _types_table())
    return Files(uri)


# -- structure -----------------------------------------------------------------------------
def test_files_are_2_0_with_many_pages(types_ds: Files) -> None:
    entries = types_ds.entries()
    assert len(entries) == 2  # two fragments
    for _, df in entries:
        assert (df.file_major_version, df.file_minor_version) == (2, 0)
        r = types_ds.reader(df)
        assert r.version == "2.0"
        cont = V2Container(types_ds.store.open(f"data/{df.path}"), df.path)
        assert (cont.footer.major, cont.footer.minor) == (0, 3)
        pages = {i: len(info.pages) for i, info in enumerate(cont.columns(range(cont.num_columns)))}
        col_of = dict(zip(df.fields, df.column_indices, strict=True))
        by_name = {f.name: f for f in types_ds.schema.walk()}
        # Value, string, offsets and item columns all span several pages.
        for name in ("i64", "s", "lowcard", "dict", "fsl", "nfsl", "lst", "ll", "lst_st"):
            assert pages[col_of[by_name[name].id]] > 1, name
        lst = types_ds.schema.field("lst")
        assert pages[col_of[lst.children[0].id]] > 1
        ll_inner = types_ds.schema.field("ll").children[0]
        assert pages[col_of[ll_inner.id]] > 1 and pages[col_of[ll_inner.children[0].id]] > 1


def test_num_rows_and_descriptor(types_ds: Files) -> None:
    for fr, df in types_ds.entries():
        r = types_ds.reader(df)
        assert r.num_rows == fr.physical_rows
        assert r.path == df.path


# -- full reads ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [7, 1000, 10**6])
def test_read_everything(types_ds: Files, batch_size: int) -> None:
    for fr, df in types_ds.entries():
        r = types_ds.reader(df)
        fields = types_ds.fields(df)
        assert [f.name for f in fields] == types_ds.schema.names
        exp = types_ds.expected(fr)
        steps = list(r.read(fields, [(0, r.num_rows)], batch_size))
        assert [len(s[0]) for s in steps] == [
            e - s for s, e in split_ranges([(0, r.num_rows)], batch_size)
        ]
        for j, f in enumerate(fields):
            assert all(len(s[j]) == len(s[0]) for s in steps)
            assert_same(_concat_steps(steps, j, f.arrow_type), exp[f.name], f)


def test_prepared_steps_match_random_access(
    types_ds: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of rows read through their pages' prepared readers (`step_rows`) equal those
    read through the general random-access plans, value for value and null for null, and
    the common encodings (fixed width, fixed-size lists, strings, dictionaries) have one."""
    import quiver.format.file.v20.reader as reader_module

    prepared: set[str] = set()
    real = reader_module.prepare_steps

    def counting(enc, n, t, locations, ctx):  # noqa: ANN001, ANN202 - the wrapped signature
        out = real(enc, n, t, locations, ctx)
        if out is not None:
            prepared.add(ctx.where.split("'")[1])  # "column 3 (field 'x', id 3) page 0"
        return out

    ranges = [(0, 1), (3, 250), (251, 900), (901, 1200)]
    for _fr, df in types_ds.entries():
        fields = types_ds.fields(df)
        monkeypatch.setattr(reader_module, "prepare_steps", counting)
        fast = list(types_ds.reader(df).read(fields, ranges, 97))
        monkeypatch.setattr(reader_module, "prepare_steps", lambda *a: None)
        general = list(types_ds.reader(df).read(fields, ranges, 97))
        assert len(fast) == len(general)
        for a_step, b_step in zip(fast, general, strict=True):
            for f, a, b in zip(fields, a_step, b_step, strict=True):
                assert_same(a, b, f)
    assert {"i64", "s", "s_nn", "lowcard", "fsl"} <= prepared


def test_read_ranges_and_steps(types_ds: Files) -> None:
    fr, df = types_ds.entries()[0]
    r = types_ds.reader(df)
    fields = types_ds.fields(df)
    exp = types_ds.expected(fr)
    n = r.num_rows
    ranges = [(0, 1), (5, 17), (290, 1033), (1040, 1041), (n - 300, n - 1), (n - 1, n)]
    steps = list(r.read(fields, ranges, 100))
    want = list(split_ranges(ranges, 100))
    assert len(steps) == len(want)
    for (s, e), arrays in zip(want, steps, strict=True):
        assert len(arrays) == len(fields)
        for f, a in zip(fields, arrays, strict=True):
            assert_same(a, exp[f.name].slice(s, e - s), f)


def test_empty_requests(types_ds: Files) -> None:
    _, df = types_ds.entries()[0]
    r = types_ds.reader(df)
    fields = types_ds.fields(df)
    assert list(r.read(fields, [])) == []
    assert list(r.read([], [(0, 10)], 4)) == [[], [], []]
    out = r.take(fields, np.array([], dtype=np.uint64))
    for f, a in zip(fields, out, strict=True):
        assert a.type == f.arrow_type and len(a) == 0


@pytest.mark.parametrize(
    "pick",
    [
        lambda n, rng: np.array([0]),
        lambda n, rng: np.array([n - 1]),
        lambda n, rng: np.array([0, 1, 2, 3, n - 2, n - 1]),
        lambda n, rng: np.unique(rng.integers(0, n, 50)),
        lambda n, rng: np.unique(rng.integers(0, n, n // 2)),
        lambda n, rng: np.arange(0, n, 3),
    ],
    ids=["first", "last", "ends", "sparse", "dense", "strided"],
)
def test_take(types_ds: Files, pick: Callable) -> None:
    rng = np.random.default_rng(11)
    for fr, df in types_ds.entries():
        r = types_ds.reader(df)
        fields = types_ds.fields(df)
        exp = types_ds.expected(fr)
        idx = pick(r.num_rows, rng).astype(np.uint64)
        out = r.take(fields, idx)
        for f, a in zip(fields, out, strict=True):
            assert_same(a, exp[f.name].take(pa.array(idx.astype(np.int64))), f)


def test_column_subsets_and_pruned_structs(types_ds: Files) -> None:
    fr, df = types_ds.entries()[1]
    r = types_ds.reader(df)
    exp = types_ds.expected(fr)
    for f in types_ds.fields(df):
        (a,) = r.take([f], np.array([1, 2, 500, r.num_rows - 1], dtype=np.uint64))
        assert_same(a, exp[f.name].take(pa.array([1, 2, 500, r.num_rows - 1])), f)
        (steps,) = zip(*r.read([f], [(3, 400)], 64), strict=True)
        assert_same(pa.chunked_array(steps).combine_chunks(), exp[f.name].slice(3, 397), f)
    st_field = types_ds.schema.field("st")
    x, y, z = st_field.children
    for keep in ({y.id}, {z.children[0].id}, {x.id, z.children[0].id}):
        pruned = st_field.project_ids(keep)
        assert pruned is not None
        (got,) = next(r.read([pruned], [(0, r.num_rows)], 10**6))
        full = exp["st"].combine_chunks()
        want_children = {c.name: full.field(c.name) for c in pruned.children}
        if any(c.name == "z" for c in pruned.children):
            want_children["z"] = pa.StructArray.from_arrays(
                [full.field("z").field("w")], fields=[pruned.children[-1].children[0].to_arrow()]
            )
        want = pa.StructArray.from_arrays(
            list(want_children.values()), fields=[c.to_arrow() for c in pruned.children]
        )
        assert_same(got, want, pruned)


def test_dictionary_columns_match_pylance_shape(types_ds: Files) -> None:
    fr, df = types_ds.entries()[0]
    r = types_ds.reader(df)
    exp = types_ds.expected(fr)
    fields = [types_ds.schema.field("dict"), types_ds.schema.field("lowcard")]
    d, low = next(r.read(fields, [(0, 60)], 100))
    assert d.type == pa.dictionary(pa.int32(), pa.string())
    assert low.type == pa.string()
    e = exp["dict"].combine_chunks().slice(0, 60)
    # Within one page we reproduce pylance exactly: nulls are null indices.
    assert d.indices.null_count == e.indices.null_count == d.null_count
    assert d.cast(pa.string()).equals(e.cast(pa.string()))


def test_reads_only_what_is_needed(types_ds: Files) -> None:
    """Column metadata of requested columns only; buffers of overlapping pages only."""
    _, df = types_ds.entries()[0]
    calls: list[tuple[int, int]] = []

    class Recording(FileReader):
        def read(self, start: int, length: int) -> bytes:
            calls.append((start, length))
            return super().read(start, length)

    store: ObjectStore = types_ds.store
    file = Recording(store, f"data/{df.path}")
    r = types_ds.reader(df, file)
    tail_start = file.size - min(64 * 1024, file.size)
    cont = V2Container(store.open(f"data/{df.path}"), df.path)
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    field = types_ds.schema.field("i64")
    info = cont.column(col_of[field.id])
    assert len(info.pages) > 3
    # Rows in the middle of page 2 only.
    lo = int(info.page_starts[2]) + 1
    calls.clear()
    list(r.read([field], [(lo, lo + 2)], 10))
    allowed = [info.pages[2].buffers[0]]
    for start, length in calls:
        if start >= tail_start:
            continue  # footer/metadata tail (or the metadata of this very column)
        assert any(start >= p and start + length <= p + s for p, s in allowed), (start, length)
    assert calls, "the page buffer must have been read"
    # A second field's column metadata is not read until it is requested.
    other = types_ds.schema.field("s")
    assert col_of[other.id] not in r._columns
    calls.clear()
    r.take([other], np.array([0], dtype=np.uint64))
    assert col_of[other.id] in r._columns


def _whole_page_take(r: V2FileReader, fields: list[LanceField], idx: np.ndarray) -> list[pa.Array]:
    """take() as it was: every overlapping page fetched and decoded whole."""
    from quiver.format.file.v20.reader import Ranges

    nodes = r._plan(fields)
    try:
        rng = Ranges.from_indices(idx.astype(np.int64))
        return r._materialize([(n, rng) for n in nodes], partial=False)
    finally:
        r._release(nodes)


def test_take_matches_whole_page_decoding(types_ds: Files) -> None:
    """Random-access take gives exactly what whole-page decoding gives, column by column."""
    rng = np.random.default_rng(21)
    for _, df in types_ds.entries():
        r = types_ds.reader(df)
        fields = types_ds.fields(df)
        for idx in (
            np.array([0, 1, 2, 7, 8, 9, 63, 64, 65]),
            np.unique(rng.integers(0, r.num_rows, 40)),
            np.arange(3, r.num_rows, 5),
            np.array([r.num_rows - 1]),
        ):
            got = r.take(fields, idx.astype(np.uint64))
            want = _whole_page_take(r, fields, idx)
            for f, a, b in zip(fields, got, want, strict=True):
                assert a.type == b.type, f.name
                a.validate(full=True)
                assert a.equals(b) or same_values(a.to_pylist(), b.to_pylist()), f.name


@pytest.fixture(scope="module")
def big_pages(tmp_path_factory: pytest.TempPathFactory) -> Files:
    """One file whose columns have several large (100s of KiB) pages of every simple kind."""
    n = 120_000
    rng = np.random.default_rng(8)
    levels = np.array(["alpha", "beta", "gamma"])
    strings = np.array([f"row-{i}-" + "x" * (i % 23) for i in range(n)], dtype=object)
    strings[_mask(rng, n)] = None
    t = pa.table(
        {
            "i64": pa.array(np.arange(n, dtype=np.int64)),
            "nf64": pa.array(rng.standard_normal(n), mask=_mask(rng, n)),
            "nb": pa.array(rng.random(n) < 0.5, mask=_mask(rng, n)),
            "s": pa.array(strings, pa.string()),
            "ls": pa.array(strings, pa.large_string()),
            "fsl": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(8 * n).astype(np.float32)), 8
            ),
            "low": pa.array(levels[rng.integers(0, 3, n)]),
            "lst": pa.array(
                [[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int64())
            ),
        }
    )
    uri = str(tmp_path_factory.mktemp("v2_0_big") / "big")
    _write(
        uri,
        t,
        batch=30_000,
        max_rows_per_file=n,
        max_page_bytes=512 * 1024,
        data_cache_bytes=1024 * 1024,
    )
    return Files(uri)


def test_take_reads_only_the_needed_bytes(big_pages: Files) -> None:
    """A sparse take reads a few KiB per column, not its (much larger) pages."""
    ((fr, df),) = big_pages.entries()
    calls: list[tuple[int, int]] = []

    class Recording(FileReader):
        def read(self, start: int, length: int) -> bytes:
            calls.append((start, length))
            return super().read(start, length)

    store: ObjectStore = big_pages.store
    file = Recording(store, f"data/{df.path}")
    r = big_pages.reader(df, file)
    exp = big_pages.expected(fr)
    cont = V2Container(store.open(f"data/{df.path}"), df.path)
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    tail_start = file.size - min(64 * 1024, file.size)
    n = r.num_rows
    idx = np.array([3, 4, 5, 1000, 20_001, 55_555, 77_000, 77_002, n - 1], dtype=np.uint64)
    for f in big_pages.fields(df):
        info = cont.column(col_of[f.id])
        r.take([f], np.array([0], dtype=np.uint64))  # metadata of the column
        calls.clear()
        (got,) = r.take([f], idx)
        assert_same(got, exp[f.name].take(pa.array(idx.astype(np.int64))), f)
        read = sum(length for start, length in calls if start < tail_start)
        (whole,) = _whole_page_take(r, [f], idx)
        assert got.equals(whole) or same_values(got.to_pylist(), whole.to_pylist()), f.name
        page_bytes = sum(s for p in info.pages for _, s in p.buffers)
        if f.name == "lst":
            continue  # list offsets are read page by page
        # A few bytes per wanted row (coalesced spans), against 100s of KiB of pages.
        assert read <= 16 * 1024, (f.name, read, page_bytes)
        assert read * 20 < page_bytes, (f.name, read, page_bytes)
    # Dense takes still return the right rows.
    idx = np.arange(0, n, 2, dtype=np.uint64)
    fields = big_pages.fields(df)
    for f, a in zip(fields, r.take(fields, idx), strict=True):
        assert_same(a, exp[f.name].take(pa.array(idx.astype(np.int64))), f)


def test_read_fast_path_slices_pages(big_pages: Files) -> None:
    """Steps inside one page are slices of it; steps across pages still come out right."""
    ((fr, df),) = big_pages.entries()
    r = big_pages.reader(df)
    exp = big_pages.expected(fr)
    fields = [big_pages.schema.field("i64"), big_pages.schema.field("nf64")]
    for ranges, batch in (([(0, r.num_rows)], 1000), ([(5, 70_000), (70_001, 90_000)], 777)):
        steps = list(r.read(fields, ranges, batch))
        want = pa.concat_arrays([exp["i64"].combine_chunks().slice(a, b - a) for a, b in ranges])
        assert _concat_steps(steps, 0, pa.int64()).equals(want)
        want = pa.concat_arrays([exp["nf64"].combine_chunks().slice(a, b - a) for a, b in ranges])
        assert _concat_steps(steps, 1, pa.float64()).equals(want)
    # Interleaving a take does not disturb a running read.
    it = r.read(fields, [(0, r.num_rows)], 5000)
    first = next(it)
    r.take(fields, np.array([1, 99_999], dtype=np.uint64))
    second = next(it)
    assert first[0].to_pylist() == list(range(5000))
    assert second[0].to_pylist() == list(range(5000, 10_000))


def test_packed_struct_and_compression(types_ds: Files) -> None:
    fr, df = types_ds.entries()[0]
    assert types_ds.schema.field("packed").children[0].id not in set(df.fields)
    cont = V2Container(types_ds.store.open(f"data/{df.path}"), df.path)
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    page = cont.column(col_of[types_ds.schema.field("packed").id]).pages[0]
    enc = encodings_v2_0_pb2.ArrayEncoding.FromString(page.encoding.value)
    assert enc.WhichOneof("array_encoding") == "packed_struct"
    page = cont.column(col_of[types_ds.schema.field("bin").id]).pages[0]
    enc = encodings_v2_0_pb2.ArrayEncoding.FromString(page.encoding.value)
    assert enc.binary.bytes.flat.compression.scheme == "lz4"


# -- more datasets -------------------------------------------------------------------------
def test_blob_column_reads_blob_bytes(tmp_path: Path) -> None:
    uri = str(tmp_path / "blob")
    vals = [
        None if i % 7 == 3 else b"" if i % 5 == 0 else bytes([i % 256]) * (i % 40)
        for i in range(300)
    ]
    schema = pa.schema([pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})])
    _write(uri, pa.table({"b": pa.array(vals, pa.large_binary())}, schema=schema), batch=100)
    files = Files(uri)
    for _, df in files.entries():
        r = files.reader(df, blob_descriptions=False)
        (f,) = files.fields(df)
        got = _concat_steps(list(r.read([f], [(0, r.num_rows)], 33)), 0, f.arrow_type)
        assert got.type == pa.large_binary()
        blobs = files.ds.take_blobs("b", indices=list(range(r.num_rows)))
        want = [None if b is None else b.read() for b in blobs]
        assert got.to_pylist() == want
        assert got.to_pylist() == vals[: r.num_rows]
        (t,) = r.take([f], np.array([3, 5, 6], dtype=np.uint64))
        assert t.to_pylist() == [vals[3], vals[5], vals[6]]


def test_extra_data_files_and_tombstones(tmp_path: Path) -> None:
    uri = str(tmp_path / "evolve")
    t = pa.table({"a": pa.array(range(500)), "b": pa.array([f"s{i}" for i in range(500)])})
    _write(uri, t, batch=100)
    ds = lance.dataset(uri)
    ds.add_columns({"c": "a * 2"})
    ds = lance.dataset(uri)
    updates = pa.table({"a": pa.array([1, 2, 5], pa.int64()), "b": pa.array(["u", None, "w"])})
    frag_meta, modified = ds.get_fragment(0).update_columns(updates, left_on="a")
    op = lance.LanceOperation.Update(updated_fragments=[frag_meta], fields_modified=modified)
    lance.LanceDataset.commit(uri, op, read_version=ds.version)
    files = Files(uri)
    entries = files.entries()
    assert any(-2 in df.fields for _, df in entries)
    assert len({df.path for _, df in entries}) > len(files.manifest.fragments)
    for fr, df in entries:
        fields = files.fields(df)
        if not fields:
            continue
        r = files.reader(df)
        exp = files.expected(fr)
        steps = list(r.read(fields, [(0, r.num_rows)], 64))
        for j, f in enumerate(fields):
            assert_same(_concat_steps(steps, j, f.arrow_type), exp[f.name], f)


def test_2_1_pages_are_unsupported(tmp_path: Path) -> None:
    uri = str(tmp_path / "v21")
    lance.write_dataset(pa.table({"x": [1, 2, 3]}), uri, data_storage_version="2.1")
    files = Files(uri)
    ((_, df),) = files.entries()
    r = files.reader(df)
    assert r.version == "2.1"
    with pytest.raises(UnsupportedFeatureError, match=r"column 0.*lance\.encodings21\.PageLayout"):
        list(r.read(files.fields(df), [(0, 3)]))


# -- hypothesis: random tables written by pylance ------------------------------------------
_LEAVES = [
    pa.int8(),
    pa.int32(),
    pa.uint64(),
    pa.float16(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.date32(),
    pa.timestamp("us"),
    pa.decimal128(22, 2),
    pa.binary(3),
    pa.list_(pa.float32(), 2),
]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    types=st.lists(arrow_types(_LEAVES), min_size=1, max_size=4),
    n=st.integers(1, 700),
    seed=st.integers(0, 2**32 - 1),
    p_null=st.sampled_from([0.0, 0.2, 1.0]),
    batch=st.integers(1, 300),
    page_bytes=st.sampled_from([512, 4096, 1 << 20]),
)
def test_random_tables_round_trip(
    tmp_path_factory: pytest.TempPathFactory,
    types: list[pa.DataType],
    n: int,
    seed: int,
    p_null: float,
    batch: int,
    page_bytes: int,
) -> None:
    rng = np.random.default_rng(seed)
    table = pa.table({f"c{i}": random_array(t, n, rng, p_null) for i, t in enumerate(types)})
    uri = str(tmp_path_factory.mktemp("hyp") / "ds")
    _write(
        uri,
        table,
        batch=97,
        max_rows_per_file=400,
        max_page_bytes=page_bytes,
        data_cache_bytes=page_bytes * 4,
    )
    files = Files(uri)
    for fr, df in files.entries():
        r = files.reader(df)
        fields = files.fields(df)
        exp = files.expected(fr)
        steps = list(r.read(fields, [(0, r.num_rows)], batch))
        for j, f in enumerate(fields):
            assert_same(_concat_steps(steps, j, f.arrow_type), exp[f.name], f)
        idx = np.unique(rng.integers(0, r.num_rows, 1 + r.num_rows // 5)).astype(np.uint64)
        for f, a in zip(fields, r.take(fields, idx), strict=True):
            assert_same(a, exp[f.name].take(pa.array(idx.astype(np.int64))), f)


# -- invalid input and corruption ----------------------------------------------------------
@pytest.fixture
def small(tmp_path: Path) -> Files:
    uri = str(tmp_path / "small")
    rng = np.random.default_rng(5)
    n = 600
    t = pa.table(
        {
            "i": pa.array(np.arange(n)),
            "s": pa.array(_strings(rng, n)),
            "l": pa.array(_lists(rng, n, lambda k: list(range(k))), pa.list_(pa.int32())),
            "st": pa.array([{"a": i % 7, "b": [i] * (i % 2)} for i in range(n)]),
            "nf": pa.array(rng.standard_normal(n), mask=_mask(rng, n)),
            "w": pa.array(_strings(rng, n, nulls=False)),
        }
    )
    _write(uri, t, batch=150, max_rows_per_file=n, max_page_bytes=1024, data_cache_bytes=5 * 1024)
    return Files(uri)


def _read_all(files: Files, df: table_pb2.DataFile) -> None:
    r = files.reader(df)
    fields = files.fields(df)
    for _ in r.read(fields, [(0, r.num_rows)], 128):
        pass
    r.take(fields, np.arange(0, r.num_rows, 7, dtype=np.uint64))


def _rewrite(path: Path, mutate: Callable[..., None]) -> None:
    """Rewrite the column metadata section of a v2 file after `mutate` edits each column.

    `mutate(index, column_metadata[, stash])`; `stash(bytes) -> (pos, size)` stores extra
    bytes (e.g. a deferred encoding) in the file.
    """
    data = path.read_bytes()
    a, b, c, gn, cn, major, minor = struct.unpack("<QQQIIHH", data[-40:-4])
    table = np.frombuffer(data[b : b + 16 * cn], dtype="<u8").reshape(cn, 2)
    gbo = data[c : c + 16 * gn]
    assert all(int(p) + int(s) <= a for p, s in np.frombuffer(gbo, "<u8").reshape(gn, 2))
    out = bytearray(data[:a])
    positions = []

    def stash(raw: bytes) -> tuple[int, int]:
        out.extend(raw)
        return len(out) - len(raw), len(raw)

    takes_stash = mutate.__code__.co_argcount == 3
    for i, (p, s) in enumerate(table):
        cm = file2_pb2.ColumnMetadata.FromString(data[int(p) : int(p) + int(s)])
        if takes_stash:
            mutate(i, cm, stash)
        else:
            mutate(i, cm)
        raw = cm.SerializeToString()
        positions.append((len(out), len(raw)))
        out += raw
    new_b = len(out)
    for p, s in positions:
        out += struct.pack("<QQ", p, s)
    new_c = len(out)
    out += gbo
    out += struct.pack("<QQQIIHH", a, new_b, new_c, gn, cn, major, minor) + b"LANC"
    path.write_bytes(bytes(out))


def _page_encoding(page: file2_pb2.ColumnMetadata.Page) -> encodings_v2_0_pb2.ArrayEncoding:
    msg = any_pb2.Any.FromString(page.encoding.direct.encoding)
    return encodings_v2_0_pb2.ArrayEncoding.FromString(msg.value)


def _set_page_encoding(page: file2_pb2.ColumnMetadata.Page, enc: object, url: str = "") -> None:
    msg = any_pb2.Any.FromString(page.encoding.direct.encoding)
    if url:
        msg.type_url = url
    if enc is not None:
        msg.value = enc.SerializeToString()
    page.encoding.direct.encoding = msg.SerializeToString()


def test_invalid_arguments(small: Files) -> None:
    ((_, df),) = small.entries()
    r = small.reader(df)
    fields = small.fields(df)
    with pytest.raises(InvalidInputError):
        list(r.read(fields, [(10, 5)]))
    with pytest.raises(InvalidInputError):
        list(r.read(fields, [(0, 10), (5, 20)]))
    with pytest.raises(InvalidInputError):
        list(r.read(fields, [(0, r.num_rows + 1)]))
    with pytest.raises(InvalidInputError):
        list(r.read(fields, [(0, 10)], 0))
    with pytest.raises(InvalidInputError):
        r.take(fields, np.array([5, 3], dtype=np.uint64))
    with pytest.raises(InvalidInputError):
        r.take(fields, np.array([r.num_rows], dtype=np.uint64))


def _data_path(files: Files) -> tuple[table_pb2.DataFile, Path]:
    ((_, df),) = files.entries()
    return df, Path(files.uri) / "data" / df.path


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: d[:-4] + b"LANX",
        lambda d: d[:30],
        lambda d: d[:-41],
        lambda d: d[: len(d) // 2] + d[-40:],
        lambda d: d[:-40] + struct.pack("<QQQIIHH", 10**12, 10**12, 10**12, 1, 9, 0, 3) + b"LANC",
        lambda d: d[:-40] + d[-40:-24] + struct.pack("<QIIHH", 0, 1, 10**6, 0, 3) + b"LANC",
        lambda d: d[:-8] + struct.pack("<HH", 0, 2) + b"LANC",
    ],
    ids=["magic", "tiny", "cut-footer", "cut-middle", "footer-offsets", "column-count", "legacy"],
)
def test_damaged_footer(small: Files, damage: Callable[[bytes], bytes]) -> None:
    df, path = _data_path(small)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CorruptFileError, match=df.path):
        _read_all(small, df)


def _mutators(files: Files, df: table_pb2.DataFile) -> dict[str, Callable]:
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    schema = files.schema
    i_col = col_of[schema.field("i").id]
    s_col = col_of[schema.field("s").id]
    l_col = col_of[schema.field("l").id]
    w_col = col_of[schema.field("w").id]

    def page_past_eof(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == s_col:
            cm.pages[1].buffer_offsets[1] = 10**9

    def binary_offsets(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == s_col:
            enc = _page_encoding(cm.pages[0])
            enc.binary.null_adjustment = 0  # nulls now look like huge end offsets
            _set_page_encoding(cm.pages[0], enc)

    def binary_bytes_short(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == w_col:  # strings without nulls: their offsets now reach past their bytes
            enc = _page_encoding(cm.pages[0])
            cm.pages[0].buffer_sizes[enc.binary.bytes.flat.buffer.buffer_index] = 3

    def binary_offsets_garbled(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == w_col:  # the end offsets are read from the string bytes
            enc = _page_encoding(cm.pages[0])
            flat = enc.binary.indices
            while flat.WhichOneof("array_encoding") == "nullable":
                flat = flat.nullable.no_nulls.values
            flat.flat.buffer.buffer_index = enc.binary.bytes.flat.buffer.buffer_index
            _set_page_encoding(cm.pages[0], enc)

    def list_items(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == l_col:
            enc = _page_encoding(cm.pages[0])
            enc.list.num_items = 1
            _set_page_encoding(cm.pages[0], enc)

    def list_items_missing(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == l_col + 1:
            del cm.pages[-1]

    def page_length(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            cm.pages[0].length += 1

    def flat_too_short(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            cm.pages[0].buffer_sizes[0] = 8

    def garbage_encoding(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            msg = any_pb2.Any.FromString(cm.pages[0].encoding.direct.encoding)
            msg.value = b"\xff\xff\xff"
            cm.pages[0].encoding.direct.encoding = msg.SerializeToString()

    def wrong_width(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            enc = _page_encoding(cm.pages[0])
            enc.nullable.no_nulls.values.flat.bits_per_value = 32
            _set_page_encoding(cm.pages[0], enc)

    def bad_buffer_index(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            enc = _page_encoding(cm.pages[0])
            enc.nullable.no_nulls.values.flat.buffer.buffer_index = 5
            _set_page_encoding(cm.pages[0], enc)

    return {
        "page-past-eof": page_past_eof,
        "binary-offsets": binary_offsets,
        "binary-bytes-short": binary_bytes_short,
        "binary-offsets-garbled": binary_offsets_garbled,
        "list-num-items": list_items,
        "list-items-missing": list_items_missing,
        "page-length": page_length,
        "flat-too-short": flat_too_short,
        "garbage-encoding": garbage_encoding,
        "wrong-width": wrong_width,
        "bad-buffer-index": bad_buffer_index,
    }


@pytest.mark.parametrize(
    "name",
    [
        "page-past-eof",
        "binary-offsets",
        "binary-bytes-short",
        "binary-offsets-garbled",
        "list-num-items",
        "list-items-missing",
        "page-length",
        "flat-too-short",
        "garbage-encoding",
        "wrong-width",
        "bad-buffer-index",
    ],
)
def test_corrupt_metadata(small: Files, name: str) -> None:
    df, path = _data_path(small)
    _rewrite(path, _mutators(small, df)[name])
    with pytest.raises(CorruptFileError, match=rf"{df.path}.*column \d+") as info:
        _read_all(small, df)
    assert "field" in str(info.value) or "column" in str(info.value)


@pytest.mark.parametrize("name", ["binary-bytes-short", "binary-offsets-garbled"])
def test_corrupt_strings_refused_when_streamed(small: Files, name: str) -> None:
    """A streaming step of strings without nulls takes their offsets as stored: checked all the
    same (the takes of test_corrupt_metadata check them on their own path)."""
    df, path = _data_path(small)
    _rewrite(path, _mutators(small, df)[name])
    r = small.reader(df)
    fields = small.fields(df)
    with pytest.raises(CorruptFileError, match=rf"{df.path}.*column \d+.*offsets"):
        for _ in r.read(fields, [(0, r.num_rows)], 128):
            pass


def test_unknown_encodings_are_unsupported(small: Files) -> None:
    df, path = _data_path(small)
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    i_col = col_of[small.schema.field("i").id]

    def bitpacked(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            enc = encodings_v2_0_pb2.ArrayEncoding()
            enc.bitpacked.compressed_bits_per_value = 3
            _set_page_encoding(cm.pages[0], enc)

    _rewrite(path, bitpacked)
    with pytest.raises(UnsupportedFeatureError, match=rf"{df.path}.*column {i_col}.*bitpacked"):
        _read_all(small, df)


def test_foreign_page_layout_is_unsupported(small: Files) -> None:
    df, path = _data_path(small)
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    i_col = col_of[small.schema.field("i").id]

    def layout(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            _set_page_encoding(cm.pages[-1], None, "/lance.encodings21.PageLayout")

    _rewrite(path, layout)
    with pytest.raises(
        UnsupportedFeatureError, match=rf"{df.path}.*column {i_col}.*encodings21\.PageLayout"
    ):
        _read_all(small, df)


def test_bad_column_mapping(small: Files) -> None:
    df, _ = _data_path(small)
    f = small.store.open(f"data/{df.path}")
    with pytest.raises(CorruptFileError, match="column 99"):
        V2FileReader(f, [0, 1], [0, 99], path_for_errors=df.path)
    with pytest.raises(CorruptFileError, match="column indices"):
        V2FileReader(f, [0, 1], [0], path_for_errors=df.path)
    r = V2FileReader(f, [0], [0], path_for_errors=df.path)
    with pytest.raises(CorruptFileError, match=r"field 's' \(id 1\) has no value column"):
        r.take([small.schema.field("s")], np.array([0], dtype=np.uint64))
    # Tombstoned and unmapped entries are ignored.
    r = V2FileReader(f, [-2, 1], [0, 1], path_for_errors=df.path)
    (a,) = r.take([small.schema.field("s")], np.array([0], dtype=np.uint64))
    assert len(a) == 1


@pytest.mark.parametrize("seed", range(6))
def test_fuzzed_bytes_raise_lance_errors(small: Files, seed: int) -> None:
    """Random damage anywhere yields right answers or Lance errors, nothing else."""
    df, path = _data_path(small)
    original = path.read_bytes()
    rng = np.random.default_rng(seed)
    a = struct.unpack("<Q", original[-40:-32])[0]
    for trial in range(40):
        data = bytearray(original)
        # Half the trials hit the metadata (column metadata, tables, footer), half anything.
        lo = a if trial % 2 == 0 else 0
        for pos in rng.integers(lo, len(data), int(rng.integers(1, 4))):
            data[int(pos)] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
        try:
            _read_all(small, df)
        except LanceError:
            pass
    path.write_bytes(original)


def test_deferred_encodings_and_column_buffers(small: Files) -> None:
    """Encodings stored out of line and values in column-level buffers read the same."""
    df, path = _data_path(small)
    r = small.reader(df)
    fields = small.fields(df)
    before = [
        _concat_steps(list(r.read(fields, [(0, r.num_rows)], 50)), j, f.arrow_type)
        for j, f in enumerate(fields)
    ]
    r.close()
    col_of = dict(zip(df.fields, df.column_indices, strict=True))
    i_col = col_of[small.schema.field("i").id]
    l_col = col_of[small.schema.field("l").id]

    # First move values of one page of "i" into a column buffer, then defer every encoding.
    def to_column_buffer(i: int, cm: file2_pb2.ColumnMetadata) -> None:
        if i == i_col:
            page = cm.pages[1]
            cm.buffer_offsets.append(page.buffer_offsets[0])
            cm.buffer_sizes.append(page.buffer_sizes[0])
            enc = _page_encoding(page)
            enc.nullable.no_nulls.values.flat.buffer.buffer_type = 1  # column
            _set_page_encoding(page, enc)
            del page.buffer_offsets[:]
            del page.buffer_sizes[:]

    def defer(i: int, cm: file2_pb2.ColumnMetadata, stash: Callable) -> None:
        for page in cm.pages:
            pos, size = stash(page.encoding.direct.encoding)
            page.encoding.indirect.buffer_location = pos
            page.encoding.indirect.buffer_length = size

    _rewrite(path, to_column_buffer)
    _rewrite(path, defer)
    r = small.reader(df)
    info = V2Container(small.store.open(f"data/{df.path}"), df.path).column(l_col)
    assert info.pages[0].encoding.deferred is not None
    after = [
        _concat_steps(list(r.read(fields, [(0, r.num_rows)], 50)), j, f.arrow_type)
        for j, f in enumerate(fields)
    ]
    for f, a, b in zip(fields, after, before, strict=True):
        assert_same(a, b, f)
    for f, a in zip(fields, r.take(fields, np.array([0, 7, 599], dtype=np.uint64)), strict=True):
        assert_same(a, before[fields.index(f)].take(pa.array([0, 7, 599])), f)


# -- decoders on hand-built pages (encodings the pylance 2.0 writer does not produce) --------
def _flat(bits: int, index: int, scheme: str = "") -> encodings_v2_0_pb2.ArrayEncoding:
    enc = encodings_v2_0_pb2.ArrayEncoding()
    enc.flat.bits_per_value = bits
    enc.flat.buffer.buffer_index = index
    if scheme:
        enc.flat.compression.scheme = scheme
    return enc


def _ctx(*buffers: bytes) -> v20.PageContext:
    return v20.PageContext("f.lance", "column 0 page 0", list(buffers))


def test_decode_fixed_size_binary_and_compression() -> None:
    import lz4.block
    import zstandard

    enc = encodings_v2_0_pb2.ArrayEncoding()
    enc.fixed_size_binary.byte_width = 2
    enc.fixed_size_binary.bytes.CopyFrom(_flat(8, 0))
    got = v20.decode_array(enc, 3, pa.string(), _ctx(b"abcdef"))
    assert got.to_pylist() == ["ab", "cd", "ef"]
    got = v20.decode_array(enc, 3, pa.binary(2), _ctx(b"abcdef"))
    assert got.to_pylist() == [b"ab", b"cd", b"ef"]

    values = np.arange(100, dtype="<i8").tobytes()
    frame = zstandard.ZstdCompressor().compress(values)
    prefixed = len(values).to_bytes(8, "little") + frame
    for raw in (frame, prefixed):
        got = v20.decode_array(_flat(64, 0, "zstd"), 100, pa.int64(), _ctx(raw))
        assert got.to_pylist() == list(range(100))
    got = v20.decode_array(_flat(64, 0, "lz4"), 100, pa.int64(), _ctx(lz4.block.compress(values)))
    assert got.to_pylist() == list(range(100))
    with pytest.raises(CorruptFileError, match="column 0 page 0"):
        v20.decode_array(_flat(64, 0, "zstd"), 200, pa.int64(), _ctx(b"\x00" * 8 + frame))
    with pytest.raises(UnsupportedFeatureError, match="brotli"):
        v20.decode_array(_flat(64, 0, "brotli"), 1, pa.int64(), _ctx(b"x" * 8))


def test_decode_nullable_binary_and_bad_dictionary() -> None:
    # Binary with its own null (end offset + null_adjustment) under a SomeNull wrapper.
    binary = encodings_v2_0_pb2.ArrayEncoding()
    binary.binary.indices.CopyFrom(_flat(64, 1))
    binary.binary.bytes.CopyFrom(_flat(8, 2))
    binary.binary.null_adjustment = 7
    enc = encodings_v2_0_pb2.ArrayEncoding()
    enc.nullable.some_nulls.validity.CopyFrom(_flat(1, 0))
    enc.nullable.some_nulls.values.CopyFrom(binary)
    ends = np.array([1, 3, 3 + 7, 3, 6], dtype="<u8").tobytes()
    validity = bytes([0b11110])  # row 0 null
    got = v20.decode_array(enc, 5, pa.large_string(), _ctx(validity, ends, b"xyyzzz"))
    assert got.to_pylist() == [None, "yy", None, "", "zzz"]

    d = encodings_v2_0_pb2.ArrayEncoding()
    d.dictionary.indices.CopyFrom(_flat(8, 0))
    d.dictionary.items.CopyFrom(binary)
    d.dictionary.items.binary.indices.flat.buffer.buffer_index = 1
    d.dictionary.num_dictionary_items = 2
    items = (np.array([1, 3], dtype="<u8").tobytes(), b"xyy")
    got = v20.decode_array(d, 4, pa.string(), _ctx(bytes([1, 0, 2, 2]), *items))
    assert got.to_pylist() == ["x", None, "yy", "yy"]
    with pytest.raises(CorruptFileError, match="dictionary index"):
        v20.decode_array(d, 2, pa.string(), _ctx(bytes([1, 3]), *items))
    with pytest.raises(CorruptFileError, match="cannot be read as int32"):
        v20.decode_array(_flat(64, 0), 1, pa.int32(), _ctx(b"x" * 8))

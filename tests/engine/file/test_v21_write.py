"""The Lance 2.1 / 2.2 data-file writer, checked by reading its files back with pylance."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from compare import assert_same_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lance.file import LanceFileReader
from strategies import random_array

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from quiver.format.file.base import WrittenFile
from quiver.format.file.v20 import V2Container
from quiver.format.file.v21.writer import StructuralFileWriter
from quiver.format.io.store import ObjectStore, open_store
from quiver.format.proto import encodings_v2_1_pb2 as pb21
from quiver.format.proto import table_pb2
from quiver.format.table.manifest import encode_manifest
from quiver.format.table.schema import LanceSchema

pytestmark = pytest.mark.compat

VERSIONS = ["2.1", "2.2"]
DATA = "data/x.lance"


# -- helpers ---------------------------------------------------------------------------------
def _batches(table: pa.Table, rows: int) -> Iterator[pa.RecordBatch]:
    """Batches of `rows` rows, each a slice (non-zero offsets) of the table."""
    for start in range(0, table.num_rows, rows):
        yield from table.slice(start, rows).to_batches()


def write_file(
    store: ObjectStore, table: pa.Table, version: str, *, rows: int = 250, **opts: object
) -> tuple[LanceSchema, WrittenFile, StructuralFileWriter]:
    """Write `table` with our writer in slices of `rows` rows."""
    schema = LanceSchema.from_arrow(table.schema)
    sink = store.open_write(DATA)
    w = StructuralFileWriter(sink, schema, version=version, path_for_errors=DATA, **opts)
    for b in _batches(table, rows):
        w.write(b)
    written = w.finish()
    sink.close()
    return schema, written, w


def one_file_dataset(uri: str, table: pa.Table, version: str, **opts: object) -> WrittenFile:
    """A version-1 dataset with one fragment holding a file written by our writer."""
    shutil.rmtree(uri, ignore_errors=True)
    store = open_store(uri)
    schema, written, _ = write_file(store, table, version, **opts)
    m = table_pb2.Manifest(
        fields=schema.to_protos(),
        version=1,
        writer_version=table_pb2.Manifest.WriterVersion(library="quiver", version="0.1.0"),
        data_format=table_pb2.Manifest.DataStorageFormat(file_format="lance", version=version),
        max_fragment_id=0,
    )
    m.timestamp.GetCurrentTime()
    frag = m.fragments.add(id=0, physical_rows=written.num_rows)
    frag.files.add(
        path="x.lance",
        fields=written.fields,
        column_indices=written.column_indices,
        file_major_version=written.major_version,
        file_minor_version=written.minor_version,
        file_size_bytes=written.size_bytes,
    )
    store.put("_versions/18446744073709551614.manifest", encode_manifest(m))
    return written


def layouts(uri: str) -> list[list[pb21.PageLayout]]:
    """Every column's page layouts, for the data file of a one-file dataset."""
    store = open_store(uri)
    c = V2Container(store.open(DATA), DATA)
    out = []
    for i in range(c.num_columns):
        info = c.column(i)
        out.append(
            [pb21.PageLayout.FromString(c.resolve(p.encoding, "page").value) for p in info.pages]
        )
    return out


def _rng_mask(rng: np.random.Generator, n: int, p: float) -> pa.Array | None:
    return pa.array(rng.random(n) < p) if p else None


def random_nested(t: pa.DataType, n: int, rng: np.random.Generator, p_null: float) -> pa.Array:
    """Random values of `t`, with null structs and maps (which the 2.0 helper leaves out)."""
    if pa.types.is_struct(t):
        kids = [random_nested(f.type, n, rng, p_null) for f in t]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=_rng_mask(rng, n, p_null))
    if pa.types.is_map(t):
        lens = rng.integers(0, 4, n)
        offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
        m = int(offsets[-1])
        keys = pa.array([f"k{i}é" for i in range(m)], t.key_type)
        items = random_nested(t.item_type, m, rng, p_null)
        return pa.MapArray.from_arrays(offsets, keys, items, mask=_rng_mask(rng, n, p_null))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lens = rng.integers(0, 4, n)
        offsets = np.concatenate(([0], np.cumsum(lens)))
        items = random_nested(t.value_type, int(offsets[-1]), rng, p_null)
        cls = pa.LargeListArray if pa.types.is_large_list(t) else pa.ListArray
        off = pa.array(offsets, pa.int64() if pa.types.is_large_list(t) else pa.int32())
        return cls.from_arrays(off, items, mask=_rng_mask(rng, n, p_null))
    if pa.types.is_string(t) and p_null == 0.5:  # long strings: full-zip pages
        return pa.array(
            ["é" * int(k) for k in rng.integers(0, 400, n)], t, mask=_rng_mask(rng, n, 0.2)
        )
    return random_array(t, n, rng, p_null)


_LEAVES = [
    pa.int8(),
    pa.int32(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.date32(),
    pa.timestamp("us"),
    pa.decimal128(24, 3),
    pa.binary(3),
    pa.list_(pa.float32(), 3),
    pa.list_(pa.float32(), 128),
    pa.dictionary(pa.int16(), pa.string()),
]


def nested_types(maps: bool) -> st.SearchStrategy[pa.DataType]:
    """Leaves nested in lists, large lists, (nullable) structs and, for 2.2, maps."""

    def extend(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        options = [
            st.builds(pa.list_, children),
            st.builds(pa.large_list, children),
            st.lists(children, min_size=1, max_size=3).map(
                lambda ts: pa.struct([(f"f{i}", t) for i, t in enumerate(ts)])
            ),
        ]
        if maps:
            options.append(children.map(lambda t: pa.map_(pa.string(), t)))
        return st.one_of(*options)

    return st.recursive(st.sampled_from(_LEAVES), extend, max_leaves=4)


# -- hypothesis: whole tables through pylance and our reader ---------------------------------
@pytest.mark.parametrize("version", VERSIONS)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_random_nested_tables_round_trip(
    tmp_path_factory: pytest.TempPathFactory, version: str, data: st.DataObject
) -> None:
    types = data.draw(st.lists(nested_types(maps=version != "2.1"), min_size=1, max_size=3))
    n = data.draw(st.integers(1, 400))
    seed = data.draw(st.integers(0, 2**32 - 1))
    p_null = data.draw(st.sampled_from([0.0, 0.2, 0.5, 1.0]))
    rows = data.draw(st.integers(1, 300))
    page_bytes = data.draw(st.sampled_from([256, 4096, 1 << 20]))
    rng = np.random.default_rng(seed)
    table = pa.table({f"c{i}": random_nested(t, n, rng, p_null) for i, t in enumerate(types)})
    uri = str(tmp_path_factory.mktemp("hyp") / "ds")
    one_file_dataset(uri, table, version, rows=rows, page_bytes=page_bytes)
    assert_same_table(lance.dataset(uri).to_table(), table, f"{version}: pylance reads ours")
    assert_same_table(dataset(uri).to_table(), table, f"{version}: we read ours")
    for path, values in _struct_fields(table):
        for engine in (lance.dataset, dataset):
            got = engine(uri).to_table(columns={"x": path}).column("x").combine_chunks()
            # values (a projection of a dictionary field reads decoded in Quiver, encoded
            # in pylance)
            assert got.to_pylist() == values.to_pylist(), (version, path, engine)


def _struct_fields(table: pa.Table) -> Iterator[tuple[str, pa.Array]]:
    """(path, values) of every field nested in structs alone (no list above it), a NULL
    wherever a struct above it is NULL (as a projection of the path reads it)."""
    pending = [(name, table.column(name).combine_chunks()) for name in table.column_names]
    while pending:
        path, array = pending.pop()
        if not pa.types.is_struct(array.type):
            continue
        for i in range(array.type.num_fields):
            child = pc.struct_field(array, [i])  # NULL under a NULL struct
            child_path = f"{path}.{array.type.field(i).name}"
            yield child_path, child
            pending.append((child_path, child))


@pytest.mark.parametrize("version", VERSIONS)
def test_struct_nulls_reach_their_fields_as_pylance_lays_them(tmp_path: Path, version: str):
    """A NULL struct makes every field below it NULL (down to a list): each such layer is
    written nullable, as pylance writes it, so pylance's reader of one field alone sees
    the NULLs (it saw the values under them when only the struct's layer was nullable)."""
    k = np.arange(8)
    inner = pa.StructArray.from_arrays(
        [pa.array([f"v{x}" for x in k]), pa.array(k, mask=k % 4 == 3)],
        names=["a", "b"],
        mask=pa.array(k % 3 == 1),
    )
    outer = pa.StructArray.from_arrays(
        [inner, pa.array(k * 1.5)], names=["inner", "f"], mask=pa.array(k % 5 == 2)
    )
    lists = pa.array([[1, 2], None, [], [3, None], [4], None, [5], [6]], pa.list_(pa.int64()))
    holder = pa.StructArray.from_arrays(
        [lists, pa.array(k)], names=["l", "x"], mask=pa.array(k % 4 == 0)
    )
    table = pa.table({"id": k, "o": outer, "s": holder})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    one_file_dataset(ours, table, version)
    lance.write_dataset(table, theirs, data_storage_version=version)
    [their_file] = Path(theirs, "data").glob("*.lance")

    def kinds(path: str) -> list[list[str]]:
        """Each column's repetition / definition layers (pylance's view of them)."""
        columns = LanceFileReader(path).metadata().columns
        return [re.findall(r"Repdef(\w+)", str(c.pages[0].encoding)) for c in columns]

    assert kinds(str(Path(ours, DATA))) == kinds(str(their_file))
    for path, values in _struct_fields(table):
        for uri in (ours, theirs):
            for engine in (lance.dataset, dataset):
                got = engine(uri).to_table(columns={"x": path}).column("x").combine_chunks()
                assert got.equals(values), (path, uri, engine)
    assert lance.dataset(ours).to_table(filter="o.inner.a = 'v1'").num_rows == 0


# -- specific shapes -------------------------------------------------------------------------
def _shapes(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    ints = rng.integers(0, 1 << 40, n)
    long_text = ["ü" * (200 + i % 300) if i % 5 else None for i in range(n)]
    return pa.table(
        {
            "id": pa.array(np.arange(n)),
            "small": pa.array(rng.integers(0, 1000, n)),
            "nint": pa.array(ints, mask=rng.random(n) < 0.1),
            "s": pa.array([f"s{i % 37}" if i % 9 else "" for i in range(n)]),
            "long": pa.array(long_text),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 128).astype(np.float32)), 128
            ),
            "lst": pa.array(
                [None if i % 13 == 0 else list(range(i % 5)) for i in range(n)],
                pa.list_(pa.int32()),
            ),
            "ls": pa.array(
                [[f"é{i}", None] if i % 3 else [] for i in range(n)], pa.large_list(pa.string())
            ),
            "st": pa.array(
                [
                    None if i % 7 == 0 else {"x": i if i % 2 else None, "y": [i] * (i % 3)}
                    for i in range(n)
                ],
                pa.struct([("x", pa.int32()), ("y", pa.list_(pa.int64()))]),
            ),
            "nul": pa.nulls(n, pa.int32()),
        }
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_layouts_and_multi_page_columns(tmp_path: Path, version: str) -> None:
    """Small pages: every column gets several pages; full-zip for wide values, all-null
    pages, and pylance (and we) read it all back, also with filters and take."""
    table = _shapes(5000)
    uri = str(tmp_path / "ds")
    written = one_file_dataset(uri, table, version, rows=777, page_bytes=16 * 1024)
    # leaf ids only: struct (st) and list parents get no column
    schema = LanceSchema.from_arrow(table.schema)
    leaf_ids = [f.id for top in schema.fields for f in top.walk() if not f.children]
    assert written.fields == leaf_ids
    assert written.column_indices == list(range(len(leaf_ids)))
    assert (written.major_version, written.minor_version) == (2, int(version[-1]))
    pages = layouts(uri)
    assert all(len(p) > 1 for p in pages[:-1]), [len(p) for p in pages]
    names = [f.name for top in schema.fields for f in top.walk() if not f.children]
    by_name = dict(zip(names, pages, strict=True))
    assert all(p.HasField("full_zip_layout") for p in by_name["vec"])
    assert any(p.HasField("full_zip_layout") for p in by_name["long"])
    assert all(p.HasField("constant_layout") for p in by_name["nul"])
    mb = [p.mini_block_layout for p in by_name["small"] if p.HasField("mini_block_layout")]
    assert all(m.has_large_chunk == (version == "2.2") for m in mb)
    ref = lance.dataset(uri)
    assert_same_table(ref.to_table(), table, "pylance reads ours")
    assert_same_table(dataset(uri).to_table(), table, "we read ours")
    idx = [0, 1, 999, 1000, 2500, 4998, 4999]
    assert_same_table(ref.take(idx), table.take(idx), "pylance take")
    flt = "small < 100 AND s != ''"
    exp = ref.to_table(filter=flt)
    assert exp.num_rows > 100
    expected = table.filter(
        pa.compute.and_(pa.compute.less(table["small"], 100), pa.compute.not_equal(table["s"], ""))
    )
    assert_same_table(exp, expected, "pylance filter")
    assert LanceFileReader(str(Path(uri) / DATA)).read_all().to_table().num_rows == 5000


@pytest.mark.parametrize("version", VERSIONS)
def test_many_chunks_of_lists_keep_random_access(tmp_path: Path, version: str) -> None:
    """Long lists and runs of empty/null lists spread rows over many mini-block chunks;
    the repetition index must let pylance take any row."""
    rng = np.random.default_rng(3)
    n = 3000
    lens = rng.choice([0, 1, 3, 40, 700], n, p=[0.3, 0.3, 0.2, 0.15, 0.05])
    values = [None if i % 17 == 0 else list(range(int(k))) for i, k in enumerate(lens)]
    values[100:900] = [[]] * 800  # a run of entries without values
    table = pa.table({"l": pa.array(values, pa.list_(pa.int64()))})
    uri = str(tmp_path / "ds")
    one_file_dataset(uri, table, version, rows=1000)
    ref = lance.dataset(uri)
    assert_same_table(ref.to_table(), table, "pylance reads ours")
    idx = sorted(rng.choice(n, 200, replace=False).tolist())
    assert_same_table(ref.take(idx), table.take(idx), "pylance take")
    assert_same_table(dataset(uri).take(idx), table.take(idx), "our take")


@pytest.mark.parametrize("version", VERSIONS)
def test_dense_levels_split_pages(tmp_path: Path, version: str) -> None:
    """Rows of many empty inner lists: more levels than one chunk holds per value, so the
    writer splits the page by rows rather than writing an unreadable chunk."""
    row = [[]] * 20000 + [[1]]
    table = pa.table({"l": pa.array([row, [[2, 3]], row], pa.list_(pa.list_(pa.int8())))})
    uri = str(tmp_path / "ds")
    one_file_dataset(uri, table, version)
    assert_same_table(lance.dataset(uri).to_table(), table, "pylance reads ours")


def test_streaming_keeps_memory_bounded(tmp_path: Path) -> None:
    """40 batches: every column buffers about one page and pages go out as they fill."""
    page = 64 * 1024
    store = open_store(str(tmp_path))
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(40):
        n = 5000
        ints = rng.integers(0, 1 << 40, n)
        batches.append(
            pa.record_batch(
                {
                    "i": pa.array(ints),
                    "s": pa.array(np.char.add("v", ints.astype(str)).astype(object)),
                    "l": pa.array([[float(i)] * (i % 4) for i in range(n)], pa.list_(pa.float32())),
                }
            )
        )
    schema = LanceSchema.from_arrow(batches[0].schema)
    sink = store.open_write(DATA)
    w = StructuralFileWriter(sink, schema, path_for_errors=DATA, page_bytes=page)
    for b in batches:
        w.write(b)
    written = w.finish()
    sink.close()
    assert all(v <= 2 * page for v in w.peak_buffered_bytes.values()), w.peak_buffered_bytes
    assert all(v > 10 for v in w.pages_written.values()), w.pages_written
    got = LanceFileReader(str(tmp_path / DATA)).read_all().to_table()
    assert got == pa.Table.from_batches(batches)
    assert written.num_rows == 200_000


# -- datasets: default version, appends both ways ---------------------------------------------
def test_default_storage_version_is_2_2(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = _shapes(300)
    write_dataset(table, uri)
    ref = lance.dataset(uri)
    assert ref.data_storage_version == "2.2"
    assert_same_table(ref.to_table(), table, "pylance reads ours")


@pytest.mark.parametrize("version", VERSIONS)
def test_appends_both_ways(tmp_path: Path, version: str) -> None:
    """pylance creates, we append, pylance appends, we append: every version identical, and
    the dataset keeps its storage version."""
    table = _shapes(1200)
    parts = [table.slice(i * 300, 300) for i in range(4)]
    uri = str(tmp_path / "ds")
    lance.write_dataset(parts[0], uri, data_storage_version=version)
    write_dataset(parts[1], uri, mode="append", max_rows_per_file=200)
    lance.write_dataset(parts[2], uri, mode="append")
    write_dataset(parts[3], uri, mode="append")
    ref = lance.dataset(uri)
    assert ref.data_storage_version == version
    for frag in ref.get_fragments():
        for f in frag.metadata.files:
            assert f.file_major_version == 2 and f.file_minor_version == int(version[-1])
    assert_same_table(ref.to_table(), pa.concat_tables(parts), "pylance reads the mixed dataset")
    assert_same_table(dataset(uri).to_table(), pa.concat_tables(parts), "we read it")
    ours_first = str(tmp_path / "ours")
    write_dataset(parts[0], ours_first, data_storage_version=version)
    lance.write_dataset(parts[1], ours_first, mode="append")
    assert_same_table(
        lance.dataset(ours_first).to_table(), pa.concat_tables(parts[:2]), "pylance appended"
    )
    assert lance.dataset(ours_first).data_storage_version == version


# -- refusals and checks -----------------------------------------------------------------------
def test_maps_are_refused_at_2_1(tmp_path: Path) -> None:
    table = pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32()))})
    with pytest.raises(UnsupportedFeatureError, match="map.*2.1"):
        write_dataset(table, str(tmp_path / "a"), data_storage_version="2.1")
    write_dataset(table, str(tmp_path / "b"), data_storage_version="2.2")
    assert_same_table(lance.dataset(str(tmp_path / "b")).to_table(), table, "2.2 map")


def test_unknown_versions_and_bad_batches(tmp_path: Path) -> None:
    with pytest.raises((UnsupportedFeatureError, InvalidInputError), match="2.4"):
        write_dataset(pa.table({"a": [1]}), str(tmp_path / "a"), data_storage_version="2.4")
    schema = LanceSchema.from_arrow(pa.schema([("a", pa.int64())]))
    store = open_store(str(tmp_path))
    w = StructuralFileWriter(store.open_write(DATA), schema, path_for_errors=DATA)
    with pytest.raises(SchemaMismatchError, match="'a'"):
        w.write(pa.record_batch({"a": pa.array(["x"])}))
    with pytest.raises(SchemaMismatchError):
        w.write(pa.record_batch({"b": pa.array([1])}))
    w.finish()
    with pytest.raises(InvalidInputError):
        w.write(pa.record_batch({"a": pa.array([1])}))


@pytest.mark.parametrize("version", VERSIONS)
def test_wide_fixed_size_lists_with_item_nulls(tmp_path: Path, version: str) -> None:
    """Full-zip vectors whose items have nulls carry a validity bitmap before each value,
    also inside lists; very wide vectors go full-zip too."""
    rng = np.random.default_rng(0)
    n = 300
    items = pa.array(
        rng.standard_normal(n * 128).astype(np.float32), mask=rng.random(n * 128) < 0.1
    )
    vec = pa.FixedSizeListArray.from_arrays(items, 128, mask=pa.array(rng.random(n) < 0.1))
    wide = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(n * 8192), mask=rng.random(n * 8192) < 0.01), 8192
    )
    table = pa.table(
        {
            "vec": vec,
            "lv": pa.array(
                [[x] if i % 3 else None for i, x in enumerate(vec.to_pylist())],
                pa.list_(pa.list_(pa.float32(), 128)),
            ),
            "wide": wide,
        }
    )
    uri = str(tmp_path / "ds")
    one_file_dataset(uri, table, version)
    for col in layouts(uri):
        assert all(p.HasField("full_zip_layout") for p in col)
    assert layouts(uri)[0][0].full_zip_layout.bits_per_value == 128 * 32 + 128
    assert_same_table(lance.dataset(uri).to_table(), table, "pylance reads ours")
    assert_same_table(dataset(uri).to_table(), table, "we read ours")


@pytest.mark.parametrize("version", VERSIONS)
def test_dictionary_columns(tmp_path: Path, version: str) -> None:
    """Dictionary-typed columns: batches with different dictionaries (nulls inside them
    too) share pages, and the keys keep their width."""
    batches = []
    for k in range(6):
        words = pa.array([f"w{k}-{i}é" if i % 11 else None for i in range(100)])
        idx = pa.array(
            [(i * 7) % 100 for i in range(300)], pa.int16(), mask=[i % 13 == 0 for i in range(300)]
        )
        batches.append(pa.record_batch({"d": pa.DictionaryArray.from_arrays(idx, words)}))
    table = pa.Table.from_batches(batches)
    uri = str(tmp_path / "ds")
    one_file_dataset(uri, table, version, rows=300)
    pages = layouts(uri)[0]
    assert all(p.mini_block_layout.num_dictionary_items > 100 for p in pages)
    for who, got in (("pylance", lance.dataset(uri).to_table()), ("ours", dataset(uri).to_table())):
        assert got.schema.field("d").type == table.schema.field("d").type, who
        assert got.column("d").to_pylist() == table.column("d").to_pylist(), who


@pytest.mark.parametrize("version", VERSIONS)
def test_multi_fragment_dataset_filters_and_take(tmp_path: Path, version: str) -> None:
    """A dataset of several of our files (fed by batches, some empty) answers pylance's
    filters, take and count_rows as the same data written by pylance does."""
    table = _shapes(2000).drop_columns(["vec"])
    schema = table.schema
    empty = pa.record_batch([c.slice(0, 0).combine_chunks() for c in table.columns], schema=schema)
    batches = [empty]
    for start in range(0, 2000, 300):
        batches.extend(table.slice(start, 300).to_batches())
        batches.append(empty)
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_dataset(
        pa.RecordBatchReader.from_batches(schema, batches),
        ours,
        data_storage_version=version,
        max_rows_per_file=700,
    )
    lance.write_dataset(table, theirs, data_storage_version=version, max_rows_per_file=700)
    a, b = lance.dataset(ours), lance.dataset(theirs)
    assert [f.physical_rows for f in a.get_fragments()] == [700, 700, 600]
    for flt in ("small < 300", "s LIKE 's1%'", "nint IS NULL", "st.x > 100", "id % 7 = 3"):
        assert_same_table(a.to_table(filter=flt), b.to_table(filter=flt), flt)
        assert a.count_rows(flt) == b.count_rows(flt)
    idx = [0, 5, 699, 700, 1401, 1999]
    assert_same_table(a.take(idx), b.take(idx), "take")
    assert_same_table(dataset(ours).to_table(), b.to_table(), "we read ours")


@pytest.mark.parametrize("version", VERSIONS)
def test_compressed_pages(tmp_path: Path, version: str) -> None:
    """Runs become RLE (also as dictionary indices), small integers bit-packed, 2.2
    constants inline; pylance and we read them all back."""
    n = 20_000
    rng = np.random.default_rng(5)
    table = pa.table(
        {
            "runs": pa.array(np.repeat(rng.integers(0, 1 << 62, n // 400), 400)),
            "small": pa.array(
                rng.integers(0, 50_000, n).astype(np.int32), mask=rng.random(n) < 0.05
            ),
            "const": pa.array(np.full(n, -3, np.int16)),
            "lruns": pa.array(
                [[k] * 3 for k in np.repeat(np.arange(n // 500), 500)], pa.list_(pa.int64())
            ),
        }
    )
    uri = str(tmp_path / "ds")
    one_file_dataset(uri, table, version, rows=3000)
    runs, small, const, lruns = (col[0] for col in layouts(uri))
    assert runs.mini_block_layout.value_compression.HasField("rle") or (
        runs.mini_block_layout.HasField("dictionary")
    )
    assert small.mini_block_layout.value_compression.HasField("inline_bitpacking")
    assert small.mini_block_layout.def_compression.HasField("out_of_line_bitpacking")
    assert lruns.mini_block_layout.value_compression.HasField("rle")
    if version == "2.2":
        assert const.constant_layout.inline_value == np.int16(-3).tobytes()
    assert_same_table(lance.dataset(uri).to_table(), table, "pylance reads ours")
    assert_same_table(dataset(uri).to_table(), table, "we read ours")


def test_constant_pages_are_pylance_s(tmp_path: Path) -> None:
    """2.2 pages whose values (NULLs aside) are all one scalar: the constant layout pylance
    writes (strings, long ones included, binaries, large strings, booleans, nullable
    columns with their definition levels), the file byte for byte as pylance's."""
    n = 1000
    table = pa.table(
        {
            "short": pa.array(["hello"] * n),
            "long": pa.array(["x" * 300] * n),
            "bin": pa.array([b"ab"] * n, pa.binary()),
            "large": pa.array(["hey"] * n, pa.large_string()),
            "empty": pa.array([""] * n),
            "mixed": pa.array(["a", "b"] * (n // 2)),
            "nullable_s": pa.array(["q"] * (n - 1) + [None]),
            "nullable_i": pa.array([7] * (n - 1) + [None], pa.int64()),
            "half_f": pa.array([1.5] * (n // 2) + [None] * (n // 2)),
            "flag": pa.array([True] * n),
            "nothing": pa.array([None] * n, pa.string()),
        }
    )
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_dataset(table, ours, data_storage_version="2.2")
    lance.write_dataset(table, theirs, data_storage_version="2.2")
    [mine] = list(Path(ours, "data").glob("*.lance"))
    [their] = list(Path(theirs, "data").glob("*.lance"))
    assert mine.read_bytes() == their.read_bytes()
    store = open_store(str(mine.parent))
    c = V2Container(store.open(mine.name), mine.name)
    first_pages = [
        pb21.PageLayout.FromString(c.resolve(c.column(i).pages[0].encoding, "page").value)
        for i in range(c.num_columns)
    ]
    layouts_by_name = dict(zip(table.column_names, first_pages, strict=True))
    assert [k for k, p in layouts_by_name.items() if not p.HasField("constant_layout")] == ["mixed"]
    assert_same_table(lance.dataset(ours).to_table(), table, "pylance reads ours")
    assert_same_table(dataset(ours).to_table(), table, "we read ours")

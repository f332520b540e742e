"""Lance 2.1 / 2.2 data files written by pylance read exactly as pylance reads them.

Each table is shaped to make pylance pick a given page layout or encoding (see the reference
§11): bitpacked, plain, dictionary, RLE and constant integers, short (mini-block) and long
(full-zip) strings, all-null pages, nullable structs, lists with null and empty lists,
nested lists, lists of structs, maps, fixed-size lists small (mini-block) and large
(full-zip). Whole tables are compared (types, values, nulls), plus scattered takes and
small-batch scans over several pages.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Sequence

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import arrow_types, random_array
from v21_files import one_file, open_reader

from quiver.format.dataset import dataset
from quiver.format.errors import CorruptFileError, LanceError, UnsupportedFeatureError
from quiver.format.file.base import split_ranges
from quiver.format.file.container import V2Container
from quiver.format.file.v21.page import PageWhere
from quiver.format.io.store import Spans, open_store
from quiver.format.proto import encodings_v2_1_pb2 as pb

VERSIONS = ("2.1", "2.2")
N = 3000
RNG_SEED = 6


def _strings(rng: np.random.Generator, n: int, long: bool = False) -> list[str | None]:
    words = ["", "a", "zürich", "日本語", "emoji 🎉", "x" * 40, "nul\x00byte"]
    out: list[str | None] = []
    for i in range(n):
        if i % 7 == 3:
            out.append(None)
        elif long:
            out.append(f"{i}:" + words[i % len(words)] * 3 + "L" * (250 + i % 300))
        else:
            out.append(f"{words[i % len(words)]}{int(rng.integers(0, 10**6))}")
    return out


def _with_nulls(values: list, every: int) -> list:
    return [None if i % every == 1 else v for i, v in enumerate(values)]


def table_ints(n: int) -> pa.Table:
    rng = np.random.default_rng(RNG_SEED)
    return pa.table(
        {
            "seq": pa.array(np.arange(n, dtype=np.int64)),
            "random": pa.array(rng.integers(-(2**62), 2**62, n)),
            "lowcard": pa.array(rng.integers(0, 1000, n)),
            "runs": pa.array(np.repeat(np.arange(n // 500 + 1), 500)[:n] * 12345),
            "constant": pa.array(np.full(n, 7, dtype=np.int64)),
            "nullable": pa.array(_with_nulls(rng.integers(-50, 50, n).tolist(), 5), pa.int64()),
            "i8": pa.array(rng.integers(-128, 127, n).astype(np.int8)),
            "u32": pa.array(rng.integers(0, 2**32, n).astype(np.uint32)),
            "f32": pa.array(rng.standard_normal(n).astype(np.float32)),
            "f64": pa.array(
                _with_nulls(
                    [float("nan"), float("inf"), -0.0, *rng.standard_normal(n - 3).tolist()], 9
                ),
                pa.float64(),
            ),
            "f16": pa.array(rng.standard_normal(n).astype(np.float16)),
        }
    )


def table_scalars(n: int) -> pa.Table:
    rng = np.random.default_rng(RNG_SEED + 1)
    base = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    return pa.table(
        {
            "b": pa.array(_with_nulls((rng.random(n) < 0.3).tolist(), 4)),
            "b_true": pa.array(np.ones(n, dtype=bool)),
            "dec": pa.array(
                _with_nulls(
                    [
                        decimal.Decimal(int(x)).scaleb(-3)
                        for x in rng.integers(-(10**12), 10**12, n)
                    ],
                    6,
                ),
                pa.decimal128(20, 3),
            ),
            "dec256": pa.array(
                [decimal.Decimal(i * 10**20 + 7).scaleb(-5) for i in range(n)], pa.decimal256(40, 5)
            ),
            "ts_tz": pa.array(
                _with_nulls(
                    [base + datetime.timedelta(seconds=int(s)) for s in rng.integers(0, 10**8, n)],
                    8,
                ),
                pa.timestamp("us", "Europe/Paris"),
            ),
            "ts_ns": pa.array(rng.integers(0, 2**60, n), pa.timestamp("ns", "UTC")),
            "date": pa.array(rng.integers(0, 30000, n).astype(np.int32), pa.date32()),
            "time": pa.array(rng.integers(0, 86400 * 10**6, n), pa.time64("us")),
            "dur": pa.array(rng.integers(-(10**9), 10**9, n), pa.duration("ms")),
            "fsb": pa.array([bytes([i % 256]) * 5 for i in range(n)], pa.binary(5)),
        }
    )


def table_strings(n: int) -> pa.Table:
    rng = np.random.default_rng(RNG_SEED + 2)
    short = _strings(rng, n)
    return pa.table(
        {
            "short": pa.array(short),
            "large": pa.array(short, pa.large_string()),
            "binary": pa.array([None if s is None else s.encode() for s in short], pa.binary()),
            "lowcard": pa.array(
                _with_nulls([["red", "green", "blue"][i % 3] for i in range(n)], 10)
            ),
            "long": pa.array(_strings(rng, n, long=True)),
            "long_large": pa.array(_strings(rng, n, long=True), pa.large_binary()),
            "dict": pa.array(_with_nulls([f"k{i % 17}" for i in range(n)], 9)).dictionary_encode(),
            "const": pa.array(["same ✓"] * n),
            "const_nulls": pa.array(_with_nulls(["same"] * n, 3)),
        }
    )


def table_nulls(n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(np.arange(n)),
            "null_i32": pa.nulls(n, pa.int32()),
            "null_str": pa.nulls(n, pa.string()),
            "null_type": pa.nulls(n),
            "null_list": pa.nulls(n, pa.list_(pa.int32())),
            "null_struct": pa.nulls(n, pa.struct([("x", pa.int32()), ("y", pa.string())])),
        }
    )


def table_structs(n: int) -> pa.Table:
    st = pa.struct([("x", pa.int32()), ("y", pa.string())])
    nested = pa.struct([("inner", st), ("z", pa.float64())])
    with_list = pa.struct([("tags", pa.list_(pa.string())), ("n", pa.int64())])
    return pa.table(
        {
            "st": pa.array(
                [
                    None
                    if i % 9 == 0
                    else {"x": i if i % 2 else None, "y": str(i) if i % 3 else None}
                    for i in range(n)
                ],
                st,
            ),
            "child_nulls": pa.array(
                [{"x": None, "y": None} if i % 2 else {"x": i, "y": "v"} for i in range(n)], st
            ),
            "nested": pa.array(
                [
                    None
                    if i % 11 == 0
                    else {"inner": None if i % 5 == 0 else {"x": i, "y": "é" * (i % 4)}, "z": i / 3}
                    for i in range(n)
                ],
                nested,
            ),
            "with_list": pa.array(
                [
                    None
                    if i % 13 == 0
                    else {"tags": None if i % 4 == 0 else ["t"] * (i % 3), "n": i}
                    for i in range(n)
                ],
                with_list,
            ),
        }
    )


def table_lists(n: int) -> pa.Table:
    item_st = pa.struct([("a", pa.int64()), ("b", pa.string())])
    return pa.table(
        {
            "lst": pa.array(
                [
                    None
                    if i % 11 == 0
                    else ([] if i % 4 == 0 else [j if j % 3 else None for j in range(i % 6)])
                    for i in range(n)
                ],
                pa.list_(pa.int32()),
            ),
            "no_nulls": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int64())),
            "const_items": pa.array(
                [[5, 5] if i % 4 else [] for i in range(n)], pa.list_(pa.int64())
            ),
            "nested": pa.array(
                [
                    None
                    if i % 7 == 0
                    else [None if j == 1 else list(range(j + i % 3)) for j in range(i % 4)]
                    for i in range(n)
                ],
                pa.list_(pa.list_(pa.int64())),
            ),
            "of_struct": pa.array(
                [
                    None
                    if i % 6 == 0
                    else [
                        None if j == 2 else {"a": j, "b": None if j % 2 else f"s{i}"}
                        for j in range(i % 4)
                    ]
                    for i in range(n)
                ],
                pa.list_(item_st),
            ),
            "large": pa.array(
                [[f"v{i}"] * (i % 3) if i % 5 else None for i in range(n)],
                pa.large_list(pa.string()),
            ),
            "long_items": pa.array(
                [
                    None if i % 9 == 0 else ["L" * (300 + j) for j in range(i % 3)]
                    for i in range(n // 3)
                ]
                + [[]] * (n - n // 3),
                pa.list_(pa.string()),
            ),
        }
    )


def table_maps(n: int) -> pa.Table:
    return pa.table(
        {
            "m": pa.array(
                [
                    None
                    if i % 5 == 0
                    else [(f"k{j}", None if j == 1 else i * j) for j in range(i % 4)]
                    for i in range(n)
                ],
                pa.map_(pa.string(), pa.int32()),
            )
        }
    )


def table_fsl(n: int) -> pa.Table:
    rng = np.random.default_rng(RNG_SEED + 3)
    small = rng.standard_normal((n, 4)).astype(np.float32).tolist()
    big = rng.standard_normal((n // 4, 128)).astype(np.float32)
    return pa.table(
        {
            "fsl4": pa.array(
                [
                    None
                    if i % 13 == 0
                    else [None if (i + j) % 17 == 0 else v for j, v in enumerate(r)]
                    for i, r in enumerate(small)
                ],
                pa.list_(pa.float32(), 4),
            ),
            "fsl128": pa.array(
                [None if i % 10 == 0 else big[i % len(big)].tolist() for i in range(n)],
                pa.list_(pa.float32(), 128),
            ),
            "fsl_i8": pa.array([[i % 100, -1] for i in range(n)], pa.list_(pa.int8(), 2)),
            "list_of_fsl128": pa.array(
                [
                    None
                    if i % 11 == 0
                    else [
                        None if j == 1 else big[(i + j) % len(big)].tolist() for j in range(i % 3)
                    ]
                    for i in range(n // 3)
                ]
                + [[]] * (n - n // 3),
                pa.list_(pa.list_(pa.float32(), 128)),
            ),
        }
    )


def _hinted(name: str, typ: pa.DataType, **meta: str) -> pa.Field:
    return pa.field(name, typ, metadata={f"lance-encoding:{k}": v for k, v in meta.items()})


def table_hints(n: int) -> pa.Table:
    """Field metadata that makes pylance pick the layouts and codecs defaults don't reach:
    full-zip for fixed-width values with def and rep levels, general zstd/lz4 compression,
    byte-stream-split, packed structs, mini-block for long strings."""
    rng = np.random.default_rng(RNG_SEED + 4)
    lists = [None if i % 7 == 0 else ([] if i % 5 == 0 else list(range(i % 6))) for i in range(n)]
    nested_fz = pa.list_(pa.list_(pa.int64()))  # full-zip, empty and null inner lists in rows
    cols = {
        _hinted("fz_int", pa.int64(), **{"structural-encoding": "fullzip"}): pa.array(
            _with_nulls(rng.integers(0, 1 << 40, n).tolist(), 4), pa.int64()
        ),
        _hinted("fz_list", pa.list_(pa.int32()), **{"structural-encoding": "fullzip"}): pa.array(
            lists, pa.list_(pa.int32())
        ),
        _hinted("fz_nested", nested_fz, **{"structural-encoding": "fullzip"}): pa.array(
            [
                None
                if i % 9 == 0
                else [[], None, rng.integers(0, 1 << 60, i % 4).tolist()][: i % 4]
                for i in range(n)
            ],
            nested_fz,
        ),
        _hinted("mb_long", pa.string(), **{"structural-encoding": "miniblock"}): pa.array(
            _strings(rng, n, long=True)
        ),
        _hinted("zstd_int", pa.int64(), compression="zstd"): pa.array(
            _with_nulls(rng.integers(0, 1 << 40, n).tolist(), 3), pa.int64()
        ),
        _hinted("lz4_str", pa.string(), compression="lz4"): pa.array(_strings(rng, n)),
        _hinted("bss", pa.float64(), bss="on", compression="zstd"): pa.array(rng.random(n)),
        _hinted("packed", pa.struct([("a", pa.int32()), ("b", pa.float64())]), packed="true"): (
            pa.StructArray.from_arrays(
                [pa.array(np.arange(n, dtype=np.int32)), pa.array(rng.random(n))], names=["a", "b"]
            )
        ),
    }
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(list(cols)))


def table_blob(n: int) -> pa.Table:
    """A blob column, whose scan returns descriptions: 2.1 a blob layout of (position, size);
    2.2 blob v2, a full-zip VariablePackedStruct of (kind, position, size, blob_id, uri)."""
    data = [
        None if i % 6 == 1 else (b"" if i % 6 == 2 else bytes([i % 251]) * (i % 500))
        for i in range(n)
    ]
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("blob", pa.large_binary(), metadata={"lance-encoding:blob": "true"}),
        ]
    )
    return pa.table(
        {"id": pa.array(np.arange(n)), "blob": pa.array(data, pa.large_binary())}, schema=schema
    )


TABLES = {
    "ints": table_ints,
    "scalars": table_scalars,
    "strings": table_strings,
    "nulls": table_nulls,
    "structs": table_structs,
    "lists": table_lists,
    "maps": table_maps,
    "fsl": table_fsl,
    "hints": table_hints,
    "blob": table_blob,
}


def _write(path: str, table: pa.Table, version: str, batch_rows: int | None = None) -> str:
    if batch_rows is None:
        lance.write_dataset(table, path, data_storage_version=version)
    else:  # small batches plus a tiny page budget: many pages per column
        # Fresh (unsliced) batches: pylance 14 panics on sliced nested structs.
        batches = [
            pa.RecordBatch.from_pylist(table.slice(s, batch_rows).to_pylist(), table.schema)
            for s in range(0, table.num_rows, batch_rows)
        ]
        rdr = pa.RecordBatchReader.from_batches(table.schema, batches)
        lance.write_dataset(
            rdr, path, data_storage_version=version, max_page_bytes=4096, data_cache_bytes=4096
        )
    return path


def _check(uri: str, what: str) -> None:
    ref = lance.dataset(uri)
    ours = dataset(uri)
    assert_same_table(ours.to_table(), ref.to_table(), what)
    n = ref.count_rows()
    rng = np.random.default_rng(1)
    idx = sorted(set(rng.integers(0, n, 40).tolist()) | {0, n - 1})
    assert_same_table(ours.take(idx), ref.take(idx), f"{what} take")
    every = list(range(1, n, 7))  # rows on both sides of most chunk boundaries
    assert_same_table(ours.take(every), ref.take(every), f"{what} take every 7th")
    for size in (7, 333):  # steps inside chunks and across chunk and page boundaries
        batches = list(ours.scanner(batch_size=size).to_batches())
        assert all(b.num_rows <= size for b in batches)
        table = pa.Table.from_batches(batches)
        assert_same_table(table, ref.to_table(), f"{what} batch_size={size}")


def _skip_reason(name: str, version: str) -> str | None:
    if name == "maps" and version == "2.1":
        return "pylance 14 refuses maps in 2.1 files"
    return None


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[tuple[str, str], str]:
    """Every table written once per version by pylance: (name, version) -> uri."""
    root = tmp_path_factory.mktemp("v21_tables")
    out = {}
    for version in VERSIONS:
        for name, build in TABLES.items():
            if _skip_reason(name, version) is None:
                out[name, version] = _write(str(root / version / name), build(N), version)
    return out


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", TABLES)
def test_reads_like_pylance(written, version, name):
    reason = _skip_reason(name, version)
    if reason:
        pytest.skip(reason)
    _check(written[name, version], f"{name} {version}")


def _walk_names(msg, out: set[str]) -> None:
    for fd, val in msg.ListFields():
        if fd.message_type is None:
            continue
        for v in val if isinstance(val, Sequence) else [val]:
            out.add(fd.name)
            _walk_names(v, out)


EXPECTED_ENCODINGS = {
    "mini_block_layout",
    "full_zip_layout",
    "constant_layout",
    "dictionary",
    "rle",
    "inline_bitpacking",
    "out_of_line_bitpacking",
    "fsst",
    "fixed_size_list",
    "variable",
    "flat",
    "general",
    "byte_stream_split",
    "packed_struct",
    "rep_compression",
    "def_compression",
}


@pytest.mark.parametrize("version", VERSIONS)
def test_tables_reach_every_layout_and_codec(written, version):
    """The tables above really make pylance use each layout and codec the reader decodes."""
    used: set[str] = set()
    full_zip_with_rep = full_zip_fixed_with_rep = False
    for (_, v), uri in written.items():
        if v != version:
            continue
        for frag in lance.dataset(uri).get_fragments():
            for df in frag.data_files():
                c = _container(f"{uri}/data/{df.path}")
                for col in range(c.num_columns):
                    for page in c.column(col).pages:
                        layout = pb.PageLayout.FromString(c.resolve(page.encoding, "t").value)
                        _walk_names(layout, used)
                        fz = layout.full_zip_layout
                        if layout.HasField("full_zip_layout") and fz.bits_rep:
                            full_zip_with_rep = True
                            full_zip_fixed_with_rep |= fz.WhichOneof("details") == "bits_per_value"
    # Blob columns: a blob layout in 2.1, blob v2 (VariablePackedStruct descriptions) in 2.2.
    blob = {"blob_layout"} if version == "2.1" else {"variable_packed_struct"}
    expected = EXPECTED_ENCODINGS | blob
    assert expected <= used, expected - used
    assert full_zip_with_rep and full_zip_fixed_with_rep


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["ints", "strings", "structs", "lists", "fsl"])
def test_many_pages(tmp_path, version, name):
    uri = _write(str(tmp_path / name), TABLES[name](N), version, batch_rows=400)
    ds = dataset(uri)
    frag = ds.get_fragments()[0]
    assert frag.count_rows() == N
    _check(uri, f"{name} {version} many pages")


def test_corrupt_chunk_metadata_names_file_column_and_page(tmp_path):
    uri = _write(
        str(tmp_path / "c"),
        pa.table({"a": pa.array(np.arange(5000)), "b": pa.array(np.arange(5000) * 3)}),
        "2.2",
    )
    path, df = one_file(uri)
    store = open_store(str(tmp_path / "c" / "data"))
    name = path.rsplit("/", 1)[1]
    with store.open(name) as f:
        page = V2Container(f, path).column(1).pages[0]
    pos, size = page.buffers[0]
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(b"\xff" * size)
    with pytest.raises(CorruptFileError) as err:
        dataset(uri).to_table(columns=["b"])
    msg = str(err.value)
    assert name in msg and "column 1" in msg and "page 0" in msg


def test_unknown_page_layout_is_unsupported(tmp_path):
    uri = _write(str(tmp_path / "u"), pa.table({"a": pa.array(np.arange(10))}), "2.1")
    path, df = one_file(uri)
    reader = open_reader(path, df)
    where = PageWhere(path, "column 0 (field 'a', id 0) page 0")
    with pytest.raises(UnsupportedFeatureError, match="page layout"):
        reader._decode_layout(pb.PageLayout(), [], 10, where)
    reader.close()


def test_take_reads_only_the_chunks_it_needs(tmp_path, monkeypatch):
    """A take of a few rows fetches far fewer bytes than the pages hold (mini-block chunks
    and full-zip rows), and still returns exactly pylance's rows."""
    n = 60000
    rng = np.random.default_rng(3)
    table = pa.table(
        {
            "i": pa.array(rng.integers(-(2**62), 2**62, n)),
            "lst": pa.array(
                [list(range(i % 9)) if i % 5 else None for i in range(n)], pa.list_(pa.int64())
            ),
            "long": pa.array([f"{i}" + "x" * (260 + i % 50) for i in range(n)]),
        }
    )
    fetched: list[int] = []
    original = V2Container.read_ranges

    def counting(self, ranges):
        for r in ranges:
            fetched.append(int((r.stops - r.starts).sum()) if isinstance(r, Spans) else r[1])
        return original(self, ranges)

    for version in VERSIONS:
        uri = _write(str(tmp_path / version), table, version)
        fetched.clear()
        monkeypatch.setattr(V2Container, "read_ranges", counting)
        idx = [5, 17, 20000, 20001, 59999]
        ours = dataset(uri).take(idx)
        monkeypatch.setattr(V2Container, "read_ranges", original)
        assert_same_table(ours, lance.dataset(uri).take(idx), f"take {version}")
        path, _ = one_file(uri)
        data_bytes = sum(
            size
            for col in range(3)
            for page in _container(path).column(col).pages
            for _, size in page.buffers
        )
        assert sum(fetched) < data_bytes / 20, (sum(fetched), data_bytes)


def _container(path: str) -> V2Container:
    folder, name = path.rsplit("/", 1)
    return V2Container(open_store(folder).open(name), path)


@pytest.mark.parametrize("version", VERSIONS)
def test_corrupt_pages_raise_corrupt_file_errors(tmp_path, version):
    """Bytes overwritten in page buffers (chunk metadata, chunk headers, levels, repetition
    indexes, full-zip control words) never crash the reader with a non-Lance error."""
    n = 2500
    table = pa.table(
        {
            "lst": pa.array(
                [[i, None] if i % 3 else ([] if i % 2 else None) for i in range(n)],
                pa.list_(pa.int64()),
            ),
            "long": pa.array([None if i % 4 == 0 else "y" * (300 + i % 7) for i in range(n)]),
            "s": pa.array(_with_nulls([f"s{i}" for i in range(n)], 5)),
        }
    )
    uri = _write(str(tmp_path / "src"), table, version)
    path, _ = one_file(uri)
    original = open(path, "rb").read()
    c = _container(path)
    spots = []
    for col in range(c.num_columns):
        for pos, size in c.column(col).pages[0].buffers:
            for off in sorted({0, 1, 2, 3, 5, 8, size // 2, max(size - 3, 0)}):
                if off < size:
                    spots.append(pos + off)
    outcomes = {"ok": 0, "corrupt": 0}
    for spot in spots:
        for byte in (0xFF, 0x00, 0x41):
            data = bytearray(original)
            data[spot] = byte if original[spot] != byte else byte ^ 0x80
            with open(path, "wb") as fh:
                fh.write(data)
            try:
                ds = dataset(uri)
                ds.to_table()
                ds.take([0, 7, n // 2, n - 1])
                outcomes["ok"] += 1
            except LanceError:
                outcomes["corrupt"] += 1
    with open(path, "wb") as fh:
        fh.write(original)
    assert outcomes["corrupt"] > len(spots)  # most header bytes matter


def test_unknown_compression_is_unsupported_naming_file_column_and_encoding(tmp_path):
    uri = _write(str(tmp_path / "u"), pa.table({"a": pa.array(np.arange(100))}), "2.2")
    path, df = one_file(uri)
    name = path.rsplit("/", 1)[1]
    reader = open_reader(path, df)
    c = _container(path)
    page = c.column(0).pages[0]
    layout = pb.PageLayout.FromString(c.resolve(page.encoding, "t").value)
    # field 14 of CompressiveEncoding (Range, a 2.3 codec) is unknown to 2.1/2.2 readers
    layout.mini_block_layout.value_compression.CopyFrom(
        pb.CompressiveEncoding.FromString(b"\x72\x00")
    )
    bufs = c.read_ranges(page.buffers)
    where = PageWhere(path, "column 0 (field 'a', id 0) page 0")
    with pytest.raises(UnsupportedFeatureError) as err:
        reader._decode_layout(layout, list(bufs), page.length, where)
    assert name in str(err.value) and "column 0" in str(err.value) and "Range" in str(err.value)
    layout.mini_block_layout.has_large_chunk = False  # the 2.1 chunk grammar in a 2.2 file
    with pytest.raises(CorruptFileError, match="has_large_chunk"):
        reader._decode_layout(layout, list(bufs), page.length, where)
    reader.close()


@pytest.mark.parametrize("version", VERSIONS)
def test_scan_keeps_only_the_pages_of_the_current_step(tmp_path, version):
    """Streaming a many-page file holds at most the pages the current step overlaps, and
    sparse ranges skip the pages between them."""
    uri = _write(str(tmp_path / "m"), table_lists(N), version, batch_rows=300)
    path, df = one_file(uri)
    schema = dataset(uri).lance_schema
    reader = open_reader(path, df)
    cols = None
    steps = 0
    ranges = [(0, 700), (1500, 1510), (2900, N)]
    pieces: list[list[pa.Array]] = []
    for arrays in reader.read(schema.fields, ranges, batch_size=128):
        cols = list(reader._columns.values())
        # a step spans at most two pages: decoded small pages plus mini-block page indexes
        assert all(len(c.cache) + len(c.indexes) <= 2 and len(c.steps) <= 2 for c in cols)
        assert max(len(c.info.pages) for c in cols) >= 5
        pieces.append(arrays)
        steps += 1
    # only the page the read ended in stays (for a following step) until close
    assert all(len(c.cache) + len(c.indexes) <= 1 and len(c.steps) <= 1 for c in cols)
    assert steps == len(list(split_ranges(ranges, 128)))
    ours = pa.Table.from_arrays(
        [pa.concat_arrays([p[i] for p in pieces]) for i in range(len(schema.fields))],
        names=[f.name for f in schema.fields],
    )
    full = lance.dataset(uri).to_table()
    expected = pa.concat_tables([full.slice(s, e - s) for s, e in ranges])
    assert_same_table(ours, expected, f"ranges {version}")
    reader.close()
    assert all(not c.cache and not c.indexes and not c.steps for c in cols)


# -- hypothesis: random nested tables written by pylance -------------------------------------
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
    pa.large_binary(),
    pa.date32(),
    pa.timestamp("us", "UTC"),
    pa.decimal128(22, 2),
    pa.binary(3),
    pa.list_(pa.float32(), 2),
    pa.dictionary(pa.int16(), pa.string()),
]


def _struct_nulls(arr: pa.Array, rng: np.random.Generator) -> pa.Array:
    """`arr` with some null top-level structs (2.1+ stores struct validity)."""
    if not pa.types.is_struct(arr.type) or not len(arr):
        return arr
    mask = pa.array(rng.random(len(arr)) < 0.2)
    kids = [arr.field(i) for i in range(arr.type.num_fields)]
    return pa.StructArray.from_arrays(kids, fields=list(arr.type), mask=mask)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    types=st.lists(arrow_types(_LEAVES), min_size=1, max_size=4),
    n=st.integers(30, 600),
    seed=st.integers(0, 2**32 - 1),
    p_null=st.sampled_from([0.0, 0.2, 0.7, 1.0]),
    version=st.sampled_from(VERSIONS),
    page_bytes=st.sampled_from([512, 1 << 20]),
)
def test_random_nested_tables(
    tmp_path_factory: pytest.TempPathFactory,
    types: list[pa.DataType],
    n: int,
    seed: int,
    p_null: float,
    version: str,
    page_bytes: int,
) -> None:
    rng = np.random.default_rng(seed)
    cols = {
        f"c{i}": _struct_nulls(random_array(t, n, rng, p_null), rng) for i, t in enumerate(types)
    }
    table = pa.table(cols)
    uri = str(tmp_path_factory.mktemp("hyp21") / "ds")
    batches = [
        pa.RecordBatch.from_pylist(table.slice(s, 97).to_pylist(), table.schema)
        for s in range(0, n, 97)
    ]
    lance.write_dataset(
        pa.RecordBatchReader.from_batches(table.schema, batches),
        uri,
        data_storage_version=version,  # one file: pylance 14 fails to split struct nulls
        max_page_bytes=page_bytes,
        data_cache_bytes=page_bytes * 4,
    )
    ours = dataset(uri)
    try:
        expected = lance.dataset(uri).to_table()
    except (OSError, pa.ArrowException):
        # pylance 14 cannot read some pages it writes for null structs over lists
        # ("Incorrect number of nulls for StructArray"); what was written is the oracle.
        expected = table
    assert_same_table(ours.to_table(), expected, f"{version} {types}")
    idx = sorted(set(rng.integers(0, n, 1 + n // 5).tolist()))
    assert_same_table(ours.take(idx), expected.take(idx), f"{version} take")


@pytest.mark.parametrize("version", VERSIONS)
def test_fsl_with_only_null_items(tmp_path, version):
    """Fixed-size lists whose items are all null: pylance writes full-zip FixedSizeList
    {Constant} (a validity byte per row, no item bytes), with and without list nulls, also
    inside a list (rep levels)."""
    fsl = pa.list_(pa.float32(), 2)
    items = pa.FixedSizeListArray.from_arrays(pa.nulls(20, pa.float32()), 2).cast(fsl)
    mask = pa.array([i % 3 == 0 for i in range(10)])
    outer_nulls = pa.FixedSizeListArray.from_arrays(pa.nulls(20, pa.float32()), 2, mask=mask)
    lists = pa.ListArray.from_arrays(pa.array([0, 2, 2, None, 5, 10], pa.int32()), items)
    table = pa.table(
        {
            "f": pa.concat_arrays([items] * 2),
            "g": pa.concat_arrays([outer_nulls.cast(fsl)] * 2),
            "l": pa.concat_arrays([lists] * 4),
        }
    )
    uri = _write(str(tmp_path / "f"), table, version)
    c = _container(one_file(uri)[0])
    layouts = {
        str(pb.PageLayout.FromString(c.resolve(p.encoding, "t").value).full_zip_layout)
        for col in range(c.num_columns)
        for p in c.column(col).pages
    }
    assert all("constant" in x and "has_validity: true" in x for x in layouts), layouts
    _check(uri, f"fsl null items {version}")


def _blob_v2_table(tmp_path, n: int) -> pa.Table:
    """Blob v2 values of every kind: inline (small), packed and dedicated sidecar files (the
    size thresholds lowered by field metadata), external URIs whole and ranged, empty and
    null blobs; also a blob inside a struct."""
    from lance.blob import Blob, BlobArray

    ext = tmp_path / "extern-ü.bin"
    ext.write_bytes(bytes(range(256)) * 8)
    uri = ext.as_uri()

    def value(i: int) -> Blob | None:
        k = i % 9
        if k == 1:
            return None
        if k == 2:
            return Blob.empty()
        if k == 3:
            return Blob.from_uri(uri)
        if k == 4:
            return Blob.from_uri(uri, position=i % 100, size=1 + i % 50)
        return Blob.from_bytes(bytes([i % 251]) * (i * 37 % 3000))

    blobs = BlobArray.from_pylist([value(i) for i in range(n)])
    inner = BlobArray.from_pylist([value(i + 5) for i in range(n)])
    meta = {
        "lance-encoding:blob-inline-size-threshold": "100",
        "lance-encoding:blob-dedicated-size-threshold": "1000",
    }
    ids = pa.array(np.arange(n))
    nested = pa.StructArray.from_arrays([ids, inner], names=["i", "b"])
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("blob", blobs.type, metadata=meta),
            pa.field("s", nested.type),
        ]
    )
    return pa.Table.from_arrays([ids, blobs, nested], schema=schema)


@pytest.mark.parametrize("page_bytes", [None, 2048])
def test_blob_v2_reads_as_pylance_descriptions(tmp_path, page_bytes):
    """2.2 blob v2 columns (full-zip VariablePackedStruct pages) scan, take and stream as
    pylance's struct<kind, position, size, blob_id, blob_uri> descriptions; the dataset
    schema is pylance's lance.blob.v2 extension type."""
    uri = str(tmp_path / "b")
    extra = {} if page_bytes is None else {"max_page_bytes": page_bytes}
    lance.write_dataset(
        _blob_v2_table(tmp_path, 600),
        uri,
        data_storage_version="2.2",
        allow_external_blob_outside_bases=True,
        **extra,
    )
    ref = lance.dataset(uri)
    kinds = ref.to_table().column("blob").combine_chunks().field("kind").drop_null()
    assert set(kinds.to_pylist()) == {0, 1, 2, 3}
    assert dataset(uri).schema.equals(ref.schema, check_metadata=False)
    _check(uri, f"blob v2 pages={page_bytes}")
    assert_same_table(dataset(uri).to_table(columns=["s"]), ref.to_table(columns=["s"]), "nested")


def test_blob_v2_bytes_and_corrupt_descriptions(tmp_path):
    """Reading blob v2 bytes (not descriptions) is refused by name; a description whose
    string length runs past its value is a CorruptFileError."""
    uri = str(tmp_path / "b")
    lance.write_dataset(
        _blob_v2_table(tmp_path, 30),
        uri,
        data_storage_version="2.2",
        allow_external_blob_outside_bases=True,
    )
    path, df = one_file(uri)
    fields = dataset(uri).lance_schema.fields
    reader = open_reader(path, df, blob_descriptions=False)
    with pytest.raises(UnsupportedFeatureError, match="field 'blob': reading blob v2 bytes"):
        reader.take(fields[1:2], np.arange(3))
    c = _container(path)
    page = c.column(1).pages[0]
    pos, size = page.buffers[0]
    with open(path, "r+b") as fh:  # row 0: control byte, u32 value length, then the fields
        fh.seek(pos + 5 + 1 + 8 + 8 + 4)
        fh.write((10**6).to_bytes(4, "little"))  # blob_uri's length
    with pytest.raises(CorruptFileError, match="VariablePackedStruct field 4"):
        dataset(uri).to_table(columns=["blob"])


def table_packed_variable(n: int) -> pa.Table:
    """Packed structs (`lance-encoding:packed`) with variable-width children: short strings
    and binary, long strings (FSST inside a field), a few 40 KB values (per-value general
    compression), only a string, fixed-size binary / float16 / date / fixed-size list /
    decimal / timestamp next to a string, struct nulls, unicode and NUL bytes; also inside a
    list (null and empty lists) and a struct."""
    words = ["", "a", "zürich", "日本語", "emoji 🎉", "nul\x00byte"]
    ids = pa.array(np.arange(n, dtype=np.int64))
    mask = pa.array([i % 5 == 2 for i in range(n)])
    short = pa.array([words[i % 6] + str(i) for i in range(n)])
    long_ = pa.array([words[i % 6] * 3 + "L" * (250 + i % 300) for i in range(n)])
    blobs = pa.array([bytes([i % 256]) * (40_000 if i % 97 == 0 else i % 70) for i in range(n)])
    kids = {
        "short": ([ids, short], ["i", "s"]),
        "long": ([ids, long_, short], ["i", "l", "s"]),
        "bin": ([blobs, ids], ["b", "i"]),
        "only": ([pa.array([str(i) * (i % 9) for i in range(n)], pa.large_string())], ["s"]),
        "mixed": (
            [
                pa.array([bytes([i % 256]) * 4 for i in range(n)], pa.binary(4)),
                short,
                pa.array(np.arange(n).astype(np.float16)),
                pa.array(np.arange(n, dtype=np.int32), pa.date32()),
                pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * n, dtype=np.float32)), 2),
                pa.array([decimal.Decimal(i).scaleb(-2) for i in range(n)], pa.decimal128(12, 2)),
                pa.array(np.arange(n) * 10**9, pa.timestamp("us", "UTC")),
            ],
            ["fsb", "s", "h", "d", "v", "dec", "ts"],
        ),
    }
    packed = {"lance-encoding:packed": "true"}
    fields, cols = [], []
    for name, (arrays, names) in kids.items():
        arr = pa.StructArray.from_arrays(arrays, names=names, mask=mask)
        fields.append(pa.field(name, arr.type, metadata=packed))
        cols.append(arr)
    st = cols[0]
    m = n // 4
    offs = np.minimum(np.concatenate([[0], np.cumsum(np.arange(m) % 5)]), n)
    lists = pa.ListArray.from_arrays(
        pa.array(offs, pa.int32()), st, mask=pa.array([i % 7 == 3 for i in range(m)])
    )
    item = pa.field("item", st.type, metadata=packed)
    fields.append(pa.field("list", pa.list_(item)))
    cols.append(pa.concat_arrays([lists] * 4).slice(0, n).cast(pa.list_(item)))
    outer = pa.StructArray.from_arrays(
        [ids, st], fields=[pa.field("x", pa.int64()), pa.field("q", st.type, metadata=packed)]
    )
    fields.append(pa.field("outer", outer.type))
    cols.append(outer)
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


@pytest.mark.parametrize("batch_rows", [None, 300])
def test_packed_struct_with_variable_width_children(tmp_path, batch_rows):
    """2.2 packed structs with string/binary children (full-zip VariablePackedStruct, its
    fields' values plain, FSST or general-compressed) read, take and stream as pylance's,
    from one page per column or several."""
    table = table_packed_variable(1200)
    uri = _write(str(tmp_path / "p"), table, "2.2", batch_rows=batch_rows)
    used: set[str] = set()
    c = _container(one_file(uri)[0])
    pages = [len(c.column(col).pages) for col in range(c.num_columns)]
    assert min(pages) == 1 if batch_rows is None else min(pages) > 1, pages
    for col in range(c.num_columns):
        for p in c.column(col).pages:
            _walk_names(pb.PageLayout.FromString(c.resolve(p.encoding, "t").value), used)
    assert {"variable_packed_struct", "fsst", "general"} <= used, used
    ref = lance.dataset(uri).to_table()
    assert_same_table(ref, table, "pylance reads what was written")
    ours = dataset(uri)
    what = f"packed variable batch_rows={batch_rows}"
    assert_same_table(ours.to_table(), ref, what)
    # pylance 14's own take panics on list<packed struct> pages ("DataBlockBuilder didn't see
    # any data"), so takes are checked against its scan.
    for idx in ([0, 5, 299, 300, 1199], list(range(1, 1200, 7))):
        assert_same_table(ours.take(idx), ref.take(idx), f"{what} take {len(idx)}")
    batches = list(ours.scanner(batch_size=333).to_batches())
    assert_same_table(pa.Table.from_batches(batches), ref, f"{what} batch_size=333")


def test_variable_packed_struct_is_refused_in_a_2_1_file(tmp_path):
    """pylance refuses to write VariablePackedStruct at 2.1; a 2.1 file holding one (here a
    2.2 file relabelled 2.1 in its footer) is corrupt."""
    table = table_packed_variable(40).select(["short"])
    uri = _write(str(tmp_path / "p"), table, "2.2")
    path, df = one_file(uri)
    with open(path, "r+b") as fh:  # footer: ... u16 major, u16 minor, "LANC"
        fh.seek(-6, 2)
        fh.write((1).to_bytes(2, "little"))
    reader = open_reader(path, df)
    assert reader.version == "2.1"
    fields = dataset(uri).lance_schema.fields
    with pytest.raises(CorruptFileError, match="VariablePackedStruct is not part of the Lance 2.1"):
        list(reader.read(fields, [(0, 40)]))
    with pytest.raises(CorruptFileError, match="VariablePackedStruct is not part of the Lance 2.1"):
        reader.take(fields, np.arange(3))


def test_dictionary_indices_outside_the_dictionary_are_corrupt_unless_null():
    """A null slot may hold any index; a visible one past the dictionary is corruption
    (it used to read as the dictionary's first item)."""
    from quiver.format.file.v21.page import PageWhere
    from quiver.format.file.v21.unravel import to_logical

    where = PageWhere("f.lance", "column 0 page 0")
    items = pa.array([b"a", b"b", b"c"], pa.large_binary())  # physical values
    idx = pa.array([0, 2, 7, 1], pa.uint8())
    masked = to_logical(idx, pa.string(), np.array([True, True, False, True]), items, where)
    assert masked.to_pylist() == ["a", "c", None, "b"]
    as_dict = to_logical(
        idx, pa.dictionary(pa.int32(), pa.string()), np.array([1, 1, 0, 1], bool), items, where
    )
    assert as_dict.to_pylist() == ["a", "c", None, "b"]
    for t in (pa.string(), pa.dictionary(pa.int32(), pa.string())):
        with pytest.raises(CorruptFileError, match="dictionary index 7 beyond the 3 items"):
            to_logical(idx, t, None, items, where)

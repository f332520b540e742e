"""Prepared readers of runs of rows of 2.1+ mini-block pages (`format.file.v21.steps`): used
for every mini-block page without lists, they read exactly what the general plan reads, and
a scan through them reads what pylance reads."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from v21_files import one_file, open_reader

from quiver.format.dataset import dataset
from quiver.format.errors import CorruptFileError
from quiver.format.file.parallel import run_plans
from quiver.format.file.v21 import reader as reader_module
from quiver.format.file.v21.reader import StructuralFileReader
from quiver.format.file.v21.steps import MiniBlockSteps
from quiver.format.file.v21.take import miniblock_index
from quiver.format.file.v21.writer import StructuralFileWriter
from quiver.format.io.store import open_store
from quiver.format.table.schema import LanceSchema

VERSIONS = ("2.1", "2.2")
N = 6000


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(11)
    words = ["", "a", "zürich", "日本語", "emoji 🎉", "x" * 40, "nul\x00byte"]
    null = rng.random(n) < 0.2
    short = [f"{words[i % 7]}{int(rng.integers(0, 10**6))}" for i in range(n)]
    category = [words[i % 5] for i in range(n)]
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "nullable": pa.array(rng.integers(-(2**40), 2**40, n), mask=null),
            "flag": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
            "x": pa.array(rng.standard_normal(n)),
            "category": pa.array(category),
            "category_nulls": pa.array(category, mask=null),
            "text": pa.array(short, mask=rng.random(n) < 0.05),
            "as_dict": pa.array(category).dictionary_encode(),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 8).astype(np.float32)), 8
            ),
            "point": pa.StructArray.from_arrays(
                [
                    pa.array(rng.integers(0, 100, n).astype(np.int32), mask=null[::-1].copy()),
                    pa.array(short),
                ],
                names=["a", "b"],
                mask=pa.array(rng.random(n) < 0.1),
            ),
            "tags": pa.array(
                [[i, i + 1][: i % 3] if i % 11 else None for i in range(n)], pa.list_(pa.int32())
            ),
        }
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], str]:
    """The table written by pylance per version, in large pages and in many small ones."""
    root = tmp_path_factory.mktemp("v21_steps")
    out = {}
    table = _table(N)
    for version in VERSIONS:
        for small in (False, True):
            uri = str(root / f"{version}-{small}")
            kw = {"max_page_bytes": 8192, "data_cache_bytes": 8192} if small else {}
            lance.write_dataset(table, uri, data_storage_version=version, **kw)
            out[version, small] = uri
    return out


def _reader(uri: str) -> tuple[StructuralFileReader, str]:
    path, df = one_file(uri)
    return open_reader(path, df), path


def _run(reader: StructuralFileReader, plan: object) -> object:
    return run_plans([plan], reader._container.read_ranges, parallel=False)[0]


def _ranges(rows: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Row ranges of a page: its ends, single rows, whole, and random spans."""
    out = {(0, 1), (rows - 1, rows), (0, rows), (rows // 2, rows)}
    for _ in range(40):
        lo = int(rng.integers(0, rows))
        out.add((lo, int(rng.integers(lo + 1, rows + 1))))
        out.add((lo, min(rows, lo + int(rng.integers(1, 40)))))
    return sorted(out)


@pytest.mark.parametrize("small", [False, True], ids=["large-pages", "small-pages"])
@pytest.mark.parametrize("version", VERSIONS)
def test_prepared_steps_read_what_the_general_plan_reads(written, version, small):
    uri = written[version, small]
    reader, _ = _reader(uri)
    schema = dataset(uri).lance_schema
    rng = np.random.default_rng(5)
    prepared = {}
    for f, cols in reader._plan(schema.fields):
        for col in cols:
            for k, page in enumerate(col.info.pages):
                kind = reader._layout(col, k).WhichOneof("layout")
                steps = _run(reader, reader._prepare_steps(col, k))
                lists = f.name == "tags"
                # every mini-block page without lists is prepared, no other page is
                assert (steps is not None) == (kind == "mini_block_layout" and not lists)
                prepared[f.name] = prepared.get(f.name, False) or steps is not None
                if steps is None:
                    continue
                assert isinstance(steps, MiniBlockSteps)
                for lo, hi in _ranges(page.length, rng):
                    got = _run(reader, steps.plan(lo, hi))
                    want = _run(reader, reader._page_plan(col, k, (lo, hi)))
                    assert got.type == want.type and len(got) == hi - lo
                    assert got.equals(want), (f.name, k, lo, hi)
    # the table reaches the prepared path with nulls, structs, dictionaries, strings, FSLs
    assert {n for n, p in prepared.items() if p} >= {
        "id",
        "nullable",
        "category",
        "category_nulls",
        "text",
        "vec",
        "point",
    }
    reader.close()


@pytest.mark.parametrize("small", [False, True], ids=["large-pages", "small-pages"])
@pytest.mark.parametrize("version", VERSIONS)
def test_scans_in_steps_read_like_pylance(written, version, small):
    uri = written[version, small]
    ref = lance.dataset(uri).to_table()
    for size in (13, 2048):
        batches = list(dataset(uri).scanner(batch_size=size).to_batches())
        assert all(b.num_rows <= size for b in batches)
        assert_same_table(pa.Table.from_batches(batches), ref, f"{version} batch_size={size}")
    projected = dataset(uri).to_table(columns=["point", "category"], filter="id % 3 = 1")
    assert_same_table(
        projected,
        lance.dataset(uri).to_table(columns=["point", "category"], filter="id % 3 = 1"),
        "projected and filtered",
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_chunk_header_past_its_chunk_is_corrupt_naming_the_page(tmp_path, version):
    uri = str(tmp_path / "c")
    lance.write_dataset(
        pa.table({"a": pa.array(np.arange(50_000) * 7919 % 100_003)}),
        uri,
        data_storage_version=version,
    )
    reader, path = _reader(uri)
    (col,) = reader._plan(dataset(uri).lance_schema.fields)[0][1]
    data_pos, _ = col.info.pages[0].buffers[1]
    reader.close()
    width = 4 if version == "2.2" else 2
    with open(path, "r+b") as fh:  # chunk 0: u16 levels, then its value buffer's size
        fh.seek(data_pos + 2)
        fh.write(b"\xff" * width)
    with pytest.raises(CorruptFileError) as err:
        dataset(uri).to_table(batch_size=1000)
    msg = str(err.value)
    assert "chunk 0: its buffers need" in msg
    assert "column 0 (field 'a', id 0) page 0" in msg and path.rsplit("/", 1)[1] in msg


def test_a_scan_holds_the_steps_of_its_current_pages_only(tmp_path):
    uri = str(tmp_path / "k")
    lance.write_dataset(_table(3000), uri, max_page_bytes=4096, data_cache_bytes=4096)
    reader, _ = _reader(uri)
    fields = dataset(uri).lance_schema.fields
    for _ in reader.read(fields, [(0, 3000)], batch_size=256):
        cols = list(reader._columns.values())
        # a step holds the prepared readers of the pages it overlaps, no others
        assert all(len(c.steps) <= 2 for c in cols)
        assert any(c.steps for c in cols)
    reader.close()
    assert all(not c.steps and not c.indexes for c in cols)


@pytest.mark.parametrize("version", VERSIONS)
def test_kept_page_indexes_serve_reads_at_random_places(tmp_path, monkeypatch, version):
    """A reader that keeps the indexes of pages a read moved past (index files' readers)
    reads the same rows at random places as one that drops them, and keeps at most the
    pages it was asked to keep besides the ones it stands in."""
    n = 20_000
    ints = np.arange(n, dtype=np.int64) * 7
    table = pa.table({"i": ints, "s": pa.array(np.char.add("v", ints.astype(str)).astype(object))})
    schema = LanceSchema.from_arrow(table.schema)
    store = open_store(str(tmp_path))
    sink = store.open_write("f.lance")
    writer = StructuralFileWriter(
        sink, schema, path_for_errors="f.lance", page_bytes=4096, version=version
    )
    for batch in table.to_batches(max_chunksize=1000):
        writer.write(batch)
    writer.finish()
    sink.close()
    ids = [f.id for f in schema.fields]

    def reader(**options: int) -> StructuralFileReader:
        return StructuralFileReader(
            store.open("f.lance"), ids, ids, path_for_errors="f.lance", **options
        )

    keeping, dropping = reader(kept_page_indexes=3), reader()
    # (each reader's own keeping: none from the small pages' cache shared by readers)
    monkeypatch.setattr(reader_module, "_SCAN_INDEX_BYTES", -1)
    rng = np.random.default_rng(8)
    reads = []
    for _ in range(40):
        ranges: list[tuple[int, int]] = []
        for s in np.sort(rng.choice(n - 100, 4, replace=False)).tolist():
            lo = max(s, ranges[-1][1]) if ranges else s  # sorted and disjoint
            ranges.append((lo, lo + int(rng.integers(1, 100))))
        reads.append(ranges)
    reads = reads + reads[-5:]  # pages read again soon after: their indexes kept
    parsed = {}
    answers = {}
    for name, r in (("keeping", keeping), ("dropping", dropping)):
        calls: list[int] = []

        def counted(*args, _calls=calls, **kwargs):  # noqa: ANN002, ANN003, ANN202
            _calls.append(1)
            return miniblock_index(*args, **kwargs)

        monkeypatch.setattr(reader_module, "miniblock_index", counted)
        answers[name] = [list(r.read(schema.fields, ranges, batch_size=128)) for ranges in reads]
        parsed[name] = len(calls)
        for col in r._columns.values():
            assert len(col.info.pages) > 8  # small pages: reads move between them
            if r is keeping:
                assert len(col.indexes) <= 3 + 2 and len(col.steps) <= 3 + 2
    for got, want in zip(answers["keeping"], answers["dropping"], strict=True):
        assert [pa.table(a, names=["i", "s"]) for a in got] == [
            pa.table(b, names=["i", "s"]) for b in want
        ]
    assert parsed["keeping"] < parsed["dropping"]  # kept indexes were not parsed again
    for ranges, steps in zip(reads, answers["dropping"], strict=True):  # all in one round
        together = keeping.read_at_once(schema.fields, ranges)
        want = [pa.concat_arrays([step[i] for step in steps]) for i in range(2)]
        assert [a.equals(b) for a, b in zip(together, want, strict=True)] == [True, True]
    assert all(len(c.indexes) > 1 for c in keeping._columns.values())
    assert all(len(c.indexes) <= 1 for c in dropping._columns.values())
    keeping.close()
    dropping.close()


def test_small_pages_indexes_are_parsed_once_for_every_reader(tmp_path, monkeypatch):
    """A scan of small pages leaves their indexes for the next reader of the file (a small
    table read again parses none); a file of another size under the same name is parsed
    afresh, and `forget_files` drops them."""
    table = pa.table({"i": np.arange(5_000, dtype=np.int64), "s": [f"v{i}" for i in range(5_000)]})
    schema = LanceSchema.from_arrow(table.schema)
    ids = [f.id for f in schema.fields]
    store = open_store(str(tmp_path))

    def write(rows: int) -> None:
        sink = store.open_write("f.lance")
        writer = StructuralFileWriter(sink, schema, path_for_errors="f.lance", page_bytes=4096)
        writer.write(table.slice(0, rows).to_batches()[0])
        writer.finish()
        sink.close()

    calls: list[int] = []

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return miniblock_index(*args, **kwargs)

    monkeypatch.setattr(reader_module, "miniblock_index", counted)

    def read(rows: int) -> pa.Table:
        r = StructuralFileReader(store.open("f.lance"), ids, ids, path_for_errors="f.lance")
        arrays = list(r.read(schema.fields, [(0, rows)], batch_size=1 << 20))
        r.close()
        return pa.Table.from_batches(
            [pa.record_batch(a, names=["i", "s"]) for a in arrays], table.schema
        )

    write(5_000)
    assert read(5_000).equals(table)
    first = len(calls)
    assert first > 4  # several small pages
    assert read(5_000).equals(table) and len(calls) == first  # none parsed again
    write(4_000)  # the same name, another file
    assert read(4_000).equals(table.slice(0, 4_000))
    assert len(calls) > first
    parsed = len(calls)
    reader_module.forget_files({"f.lance"})
    assert read(4_000).equals(table.slice(0, 4_000)) and len(calls) > parsed

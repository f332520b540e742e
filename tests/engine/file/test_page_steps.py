"""Read steps cut at page starts (`page_aligned_ranges`): the steps of a scan end where the
heaviest columns' pages start, so a step's arrays are slices of one page, not stitched."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format.dataset import dataset
from quiver.format.file.base import PageBreaks, page_aligned_ranges, split_ranges


def _starts(sizes: list[int]) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


@st.composite
def _case(draw: st.DrawFn) -> tuple[list[tuple[int, int]], int, list[PageBreaks]]:
    n = draw(st.integers(1, 3000))
    columns = []
    for _ in range(draw(st.integers(0, 4))):
        sizes = draw(st.lists(st.integers(1, 700), min_size=1, max_size=40))
        starts = _starts(sizes)
        starts = np.append(starts[starts < n], n)
        columns.append(PageBreaks(starts, draw(st.floats(0, 200))))
    cuts = sorted(draw(st.sets(st.integers(0, n), max_size=8)) | {0, n})
    ranges = [(a, b) for a, b in zip(cuts[::2], cuts[1::2], strict=False) if b > a]
    return ranges, draw(st.integers(1, 900)), columns


@settings(max_examples=300, deadline=None)
@given(_case())
def test_steps_tile_the_ranges(case: tuple[list[tuple[int, int]], int, list[PageBreaks]]) -> None:
    ranges, batch_size, breaks = case
    steps = page_aligned_ranges(ranges, batch_size, breaks)
    # the steps cover each range exactly, in order, and `split_ranges` keeps them whole
    assert list(split_ranges(steps, batch_size)) == steps
    it = iter(steps)
    for start, stop in ranges:
        cur = start
        mine = []
        while cur < stop:
            a, b = next(it)
            assert a == cur and cur < b <= stop
            mine.append(b - a)
            cur = b
        assert all(batch_size // 2 <= k <= batch_size for k in mine[:-1])
        assert 1 <= mine[-1] <= batch_size
    assert next(it, None) is None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_heaviest_column_is_never_stitched(data: st.DataObject) -> None:
    """Pages of at least half a step in a column outweighing all others together: no step
    contains one of its page starts."""
    batch_size = data.draw(st.integers(2, 500))
    half = batch_size // 2
    heavy = data.draw(st.lists(st.integers(half, 4 * batch_size), min_size=1, max_size=30))
    n = sum(heavy)
    light = []
    for _ in range(data.draw(st.integers(0, 3))):
        sizes = data.draw(st.lists(st.integers(1, 300), min_size=1, max_size=60))
        s = _starts(sizes)
        light.append(PageBreaks(np.append(s[s < n], n), data.draw(st.floats(0, 30))))
    breaks = [PageBreaks(_starts(heavy), 100.0), *light]
    steps = page_aligned_ranges([(0, n)], batch_size, breaks)
    inner = _starts(heavy)[1:-1]
    for a, b in steps:
        assert not ((inner > a) & (inner < b)).any(), (a, b)


def test_no_pages_or_one_page_leaves_plain_steps() -> None:
    assert page_aligned_ranges([(0, 10), (20, 25)], 4, []) == list(
        split_ranges([(0, 10), (20, 25)], 4)
    )
    one = PageBreaks(np.array([0, 25]), 8.0)
    assert page_aligned_ranges([(0, 25)], 4, [one]) == list(split_ranges([(0, 25)], 4))


def test_a_page_start_within_two_steps_is_hit() -> None:
    # steps of 100 rows; the page starts at 150: two steps of 75, then on
    steps = page_aligned_ranges([(0, 400)], 100, [PageBreaks(np.array([0, 150, 400]), 8.0)])
    assert steps[:2] == [(0, 75), (75, 150)]
    assert all(b - a <= 100 for a, b in steps)


# -- real files ---------------------------------------------------------------------------
@pytest.mark.parametrize("storage", ["2.0", "2.1", "2.2"])
def test_scan_steps_end_at_the_heavy_columns_pages(tmp_path: Path, storage: str) -> None:
    """A scan of pylance-written files with many pages: the same rows as pylance, and no
    batch stitches pages of the vector column (the heaviest)."""
    n = 20_000
    rng = np.random.default_rng(5)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)), 32)
    table = pa.table(
        {
            "id": pa.array(np.arange(n)),
            "s": pa.array([f"v{i % 97}-{'x' * (i % 13)}" if i % 11 else None for i in range(n)]),
            "vec": vec,
        }
    )
    uri = str(tmp_path / "ds.lance")
    # 2.1+ writers flush pages as batches arrive: feed small ones
    batches = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(1000))
    lance.write_dataset(
        batches,
        uri,
        data_storage_version=storage,
        max_rows_per_file=n,
        data_cache_bytes=256 * 1024,
        max_page_bytes=256 * 1024,
    )
    ds = dataset(uri)
    frag = ds.get_fragments()[0]
    with frag.reader(ds.lance_schema) as reader:
        breaks = [b for p in reader._plans for b in p.reader.page_breaks(p.fields)]
        heavy = max(breaks, key=lambda b: b.row_bytes)
        pages = np.diff(heavy.starts)
        assert len(pages) > 4, "the vector column should span many pages"
        batch_size = 2 * int(pages.min())  # every page at least half a step
        steps = reader.page_aligned([(0, n)], batch_size)
    inner = heavy.starts[1:-1]
    for a, b in steps:
        assert not ((inner > a) & (inner < b)).any(), (a, b)
    got = ds.scanner(batch_size=batch_size).to_table()
    assert got.equals(lance.dataset(uri).to_table())
    assert max(b.num_rows for b in ds.scanner(batch_size=batch_size).to_batches()) <= batch_size

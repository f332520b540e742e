"""Streaming scans: late materialisation, physical row ranges, memory estimates, readahead.

Results are compared with pylance's (whole tables); what a filtered scan fetches is counted at
the store, the one place every byte read passes.
"""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format.dataset import dataset, readahead
from quiver.format.dataset.fragment import FragmentReader
from quiver.format.dataset.readahead import ordered_readahead
from quiver.format.dataset.scan import FILTER_STEP_BATCHES, _even_step, _output_batches
from quiver.format.errors import InvalidInputError
from quiver.format.io.store import FileReader

ROWS = 30_000


def _table(n: int = ROWS, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    text = pa.array([None if i % 97 == 0 else f"row-{i}-" + "é" * (i % 13) for i in range(n)])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 8, np.float32)), 8)
    tags = pa.array([[f"t{j}" for j in range(i % 4)] if i % 11 else None for i in range(n)])
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "x": pa.array(np.where(np.arange(n) % 50 == 0, np.nan, x)),
            "cat": pa.array([["red", "green", None][i % 3] for i in range(n)]),
            "text": text,
            "vec": vec,
            "tags": tags,
        }
    )


@pytest.fixture(scope="module", params=["2.0", "2.1", "2.2"])
def uri(request, tmp_path_factory) -> str:
    """A dataset of three fragments with deletions, written by pylance."""
    path = str(tmp_path_factory.mktemp("scan") / f"d{request.param}.lance")
    lance.write_dataset(
        _table(), path, data_storage_version=request.param, max_rows_per_file=ROWS // 3
    )
    lance.dataset(path).delete("id % 7 = 3 OR (id >= 12000 AND id < 14000)")
    return path


FILTERS = [
    "x < 0.01",  # sparse: rows taken one by one
    "x < 0.6",  # dense: whole steps decoded and filtered
    "x < 0.2 OR id >= 25000",  # sparse and dense steps in one scan
    "cat = 'red' AND x > 0.5",
    "text IS NULL",
    "NOT (x < 0.5)",  # NaN rows compare false
    "id < 0",  # nothing matches
]


@pytest.mark.parametrize("filt", FILTERS)
@pytest.mark.parametrize("batch_size", [500, 8192])
def test_filtered_scans_match_pylance(uri: str, filt: str, batch_size: int):
    ref = lance.dataset(uri).to_table(filter=filt)
    got = dataset(uri).to_table(filter=filt, batch_size=batch_size)
    assert_same_table(got, ref, f"{filt} batch_size={batch_size}")


@pytest.mark.parametrize("filt", ["x < 0.05", "x < 0.7"])
def test_filtered_scans_with_row_ids_and_projections_match_pylance(uri: str, filt: str):
    cols = ["tags", "_rowid", "id", "vec"]
    ref = lance.dataset(uri).to_table(filter=filt, columns=cols, with_row_id=False)
    got = dataset(uri).to_table(filter=filt, columns=cols)
    assert_same_table(got, ref, f"{filt} {cols}")
    ref = lance.dataset(uri).to_table(filter=filt, with_row_address=True)
    got = dataset(uri).to_table(filter=filt, with_row_address=True)
    assert_same_table(got, ref, f"{filt} with _rowaddr")


def test_filter_limit_and_offset_match_pylance(uri: str):
    kw = {"filter": "x < 0.3", "limit": 777, "offset": 1234}
    assert_same_table(dataset(uri).to_table(**kw), lance.dataset(uri).to_table(**kw), str(kw))


@pytest.mark.parametrize("columns", [None, ["id"]])
def test_a_filter_failing_on_the_data_is_an_invalid_input_error(uri: str, columns):
    """Evaluated per step (late materialisation or not): the error names the filter."""
    filt = "CAST(text AS BIGINT) > 1"
    with pytest.raises(InvalidInputError, match="CAST"):
        dataset(uri).to_table(filter=filt, columns=columns)
    with pytest.raises(pa.ArrowInvalid):  # pylance fails too
        lance.dataset(uri).to_table(filter=filt, columns=columns)


class _CountingReads:
    """Counts the bytes every FileReader fetches (the two paths all reads take)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        self.lock = threading.Lock()
        original = FileReader.read

        def read(reader: FileReader, start: int, length: int) -> bytes:
            data = original(reader, start, length)
            with self.lock:
                self.bytes += len(data)
            return data

        monkeypatch.setattr(FileReader, "read", read)
        spans = FileReader.read_spans

        def read_spans(reader: FileReader, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
            data = spans(reader, starts, stops)
            with self.lock:
                self.bytes += len(data)
            return data

        monkeypatch.setattr(FileReader, "read_spans", read_spans)


@pytest.mark.parametrize("version", ["2.0", "2.2"])
def test_a_selective_filter_fetches_little_of_the_other_columns(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
):
    """A 1 % filter costs about a scan of its column plus 1 % of the others (wide rows, so
    mini-block chunks hold few rows and the pages' granularity shows)."""
    n = 40_000
    rng = np.random.default_rng(5)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 128, np.float32)), 128)
    table = pa.table({"x": rng.random(n), "vec": vec})
    uri = str(tmp_path / "wide.lance")
    lance.write_dataset(table, uri, data_storage_version=version)
    ds = dataset(uri)
    counter = _CountingReads(monkeypatch)
    ds.to_table(columns=["x"])
    filter_column = counter.bytes
    counter.bytes = 0
    ds.to_table()
    rest = counter.bytes - filter_column
    counter.bytes = 0
    got = ds.to_table(filter="x < 0.01")
    selective = counter.bytes
    assert_same_table(got, lance.dataset(uri).to_table(filter="x < 0.01"), "1 % filter")
    assert rest > 20 * filter_column  # the other column dominates the data
    assert selective < filter_column + 0.05 * rest, (filter_column, rest, selective)


@pytest.mark.parametrize("filt", [None, "x < 0.5"])
def test_physical_ranges_read_exactly_their_live_rows(uri: str, filt: str | None):
    ds = dataset(uri)
    ref = lance.dataset(uri)
    for frag in ds.get_fragments():
        n = frag.physical_rows
        for lo, hi in [(0, n), (0, 1), (n - 1, n), (n // 3, 2 * n // 3), (5, 5)]:
            scanner = ds.scanner(fragments=[frag], physical_range=(lo, hi), filter=filt)
            got = scanner.to_table()
            base = frag.fragment_id << 32
            where = f"_rowaddr >= {base + lo} AND _rowaddr < {base + hi}"
            full = where if filt is None else f"({filt}) AND {where}"
            want = ref.get_fragment(frag.fragment_id).to_table(filter=full)
            assert_same_table(got, want, f"fragment {frag.fragment_id} [{lo}, {hi}) {filt}")


def test_physical_ranges_are_checked(uri: str):
    ds = dataset(uri)
    frag = ds.get_fragments()[0]
    with pytest.raises(ValueError, match="outside fragment"):
        ds.scanner(fragments=[frag], physical_range=(0, frag.physical_rows + 1))
    with pytest.raises(ValueError, match="exactly one fragment"):
        ds.scanner(physical_range=(0, 1))


def test_memory_estimates_follow_columns_batches_fragments_and_ranges(uri: str):
    ds = dataset(uri)
    frag = ds.get_fragments()[0]
    one = ds.scanner(fragments=[frag], columns=["id"], batch_size=4096).memory_estimate()
    wide = ds.scanner(fragments=[frag], batch_size=4096).memory_estimate()
    big = ds.scanner(fragments=[frag], batch_size=8192).memory_estimate()
    huge = ds.scanner(fragments=[frag], batch_size=10**7).memory_estimate()
    bounded = ds.scanner(fragments=[frag], batch_size=4096, batch_bytes=4096 * 64)
    ranged = ds.scanner(fragments=[frag], physical_range=(0, 100), batch_size=8192)
    # a plain scan decodes several batches at once (its step); a batch never has more rows
    # than its fragment; `batch_bytes` keeps the step to one batch
    assert one < wide <= big <= huge
    assert huge == ds.scanner(fragments=[frag], batch_size=ROWS).memory_estimate()
    assert bounded.memory_estimate() < wide
    assert ranged.memory_estimate() < big
    # what one batch really holds stays within the estimate
    batch = next(ds.scanner(fragments=[frag], batch_size=4096).to_batches())
    assert 2 * batch.nbytes < wide


def test_a_readahead_producer_is_accounted_the_batch_it_may_always_queue(uri: str):
    # ordered_readahead lets each producer queue one batch past its byte ceiling: a server
    # stream with a 1-byte ceiling (flight_server.reads) holds a batch being sent, one queued
    # and one being decoded, and the budget must count all three when admitting it
    ds = dataset(uri)
    frag = ds.get_fragments()[0]
    inline = ds.scanner(fragments=[frag], batch_size=4096, fragment_readahead=1)
    ahead = ds.scanner(fragments=[frag], batch_size=4096, fragment_readahead=2, readahead_bytes=1)
    batch = next(inline.to_batches())
    assert ahead.memory_estimate() - inline.memory_estimate() >= batch.nbytes
    assert ahead.memory_estimate() >= 3 * batch.nbytes


def test_a_scan_holds_no_step_past_the_one_it_decodes(tmp_path: Path):
    """A consumer that drops each batch leaves the scan holding only the step it decodes:
    no generator of the chain (file reader, fragment, scanner) keeps the previous batch or
    its pages' pieces across its `yield`. Traced (numpy's) allocations peak at ~2.3 batches
    (a step's decoded columns and their decoding's scratch); holding the previous step
    took them to ~3.4."""
    n = 60_000
    rng = np.random.default_rng(5)
    table = pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64)),
            "text": pa.array([f"{v:x}" * 3 for v in rng.integers(0, 1 << 62, n)]),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(n * 32, np.float32)), 32
            ),
        }
    )
    path = str(tmp_path / "steps.lance")
    lance.write_dataset(table, path, data_storage_version="2.2")
    scanner = dataset(path).scanner(batch_size=1 << 20, batch_bytes=1 << 20, fragment_readahead=1)
    biggest = 0
    tracemalloc.start()
    try:
        for batch in scanner.to_batches():
            biggest = max(biggest, batch.nbytes)
            del batch
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert biggest > 512 << 10
    assert peak < 2.75 * biggest, (peak, biggest)


class _Sized:
    def __init__(self, nbytes: int, tag: int = 0) -> None:
        self.nbytes = nbytes
        self.tag = tag


def _recording(seen: dict[str, set[threading.Thread]], item: Callable[[int], object]):
    """Producers of three items (`item(i)`), each recording under its tag the threads that
    ran it."""

    def producer(tag: str):
        def make():
            for i in range(3):
                seen.setdefault(tag, set()).add(threading.current_thread())
                yield item(i)

        return make

    return producer


def test_readahead_holds_at_most_its_bytes():
    """Producers that outpace the consumer stop once the queued items reach `max_bytes`
    (each producer may still queue one item, so the head producer is never blocked)."""
    queued = []
    lock = threading.Lock()
    state = {"held": 0, "peak": 0}

    def producer(k: int):
        def make():
            for _ in range(30):
                with lock:
                    state["held"] += 1000
                    state["peak"] = max(state["peak"], state["held"])
                yield _Sized(1000)

        return make

    out = []
    for item in ordered_readahead(
        [producer(k) for k in range(4)], readahead=3, queue_size=100, max_bytes=5000
    ):
        time.sleep(0.001)
        with lock:
            state["held"] -= 1000
        out.append(item)
        queued.append(state["held"])
    assert len(out) == 120
    # produced-but-not-consumed items: the budget plus one item per running producer, plus the
    # one each producer has in hand while it waits for room
    assert state["peak"] <= 5000 + 2 * 3 * 1000, state["peak"]


def test_a_readahead_runs_in_the_callers_thread_while_others_keep_the_cores_busy(monkeypatch):
    """On two cores, a scan starting while another reads ahead runs its producers in the
    caller's thread (more threads would only trade the GIL); once the others have ended,
    scans read ahead in threads again."""
    monkeypatch.setattr(readahead, "_CPUS", 2)
    here = threading.current_thread()
    seen: dict[str, set[threading.Thread]] = {}
    producer = _recording(seen, lambda i: i)

    first = ordered_readahead([producer("a"), producer("a")], readahead=2)
    assert next(first) == 0
    assert list(ordered_readahead([producer("b"), producer("b")], readahead=2)) == [0, 1, 2] * 2
    assert seen["b"] == {here}
    assert here not in seen["a"]
    assert list(first) == [1, 2, 0, 1, 2]
    assert list(ordered_readahead([producer("c")], readahead=2)) == [0, 1, 2]
    assert here not in seen["c"]
    assert readahead._running == 0


def test_batches_sized_by_bytes_hold_fewer_wide_rows(uri: str):
    """`batch_bytes` caps batches near that size (never under 1024 rows) without changing
    the rows; narrow projections keep the row limit."""
    ds = dataset(uri)
    scanner = ds.scanner(batch_size=8192, batch_bytes=64 << 10)
    assert 1024 <= scanner._batch_size < 8192  # wide rows: fewer per step, never under 1024
    wide = list(scanner.to_batches())
    assert all(b.num_rows <= scanner._batch_size for b in wide)
    assert max(b.nbytes for b in wide) < 4 * (64 << 10)
    assert_same_table(pa.Table.from_batches(wide), lance.dataset(uri).to_table(), "by bytes")
    narrow = ds.scanner(columns=["id"], batch_size=2048, batch_bytes=1 << 30)
    assert narrow._batch_size == 2048
    with pytest.raises(ValueError, match="batch_bytes"):
        ds.scanner(batch_bytes=-1)


@pytest.mark.parametrize("filt", FILTERS)
def test_filters_step_by_their_own_columns_and_batch_by_bytes(
    uri: str, filt: str, monkeypatch: pytest.MonkeyPatch
):
    """With batches sized by bytes, the filter's narrow columns are read in larger steps
    than the batches; the matches still come in batches of at most the batch rows, in order,
    and a selective filter takes the other columns in fewer, larger takes."""
    ds = dataset(uri)
    scanner = ds.scanner(filter=filt, batch_size=4096, batch_bytes=256 << 10)
    first = ds.lance_schema.project(scanner._filter_columns()[0])
    assert scanner._filter_step(first) > scanner._batch_size
    # its takes may hold every chunk of a step: the memory estimate counts the larger step
    plain = ds.scanner(batch_size=4096, batch_bytes=256 << 10)
    assert scanner.memory_estimate() > plain.memory_estimate()
    takes = []
    original = FragmentReader.take

    def take(reader, schema, offsets, **kw):
        takes.append(len(offsets))
        return original(reader, schema, offsets, **kw)

    monkeypatch.setattr(FragmentReader, "take", take)
    batches = list(scanner.to_batches())
    assert all(0 < b.num_rows <= scanner._batch_size for b in batches)
    ref = lance.dataset(uri).to_table(filter=filt)
    assert_same_table(pa.Table.from_batches(batches, schema=ref.schema), ref, filt)
    if filt == "x < 0.01":  # ~1 %: a take per FILTER_STEP_BATCHES batches, not per batch
        step = scanner._filter_step(first)
        span = FILTER_STEP_BATCHES * scanner._batch_size
        most = sum(
            -(-f.physical_rows // step) + -(-f.physical_rows // span) for f in ds.get_fragments()
        )
        batches_of_rows = sum(
            -(-f.physical_rows // scanner._batch_size) for f in ds.get_fragments()
        )
        assert len(takes) <= most < batches_of_rows


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 400),
    st.data(),
    st.integers(1, 50),
    st.integers(1, 4),
)
def test_output_batches_cover_the_matches_in_order(n_live, data, batch_rows, span):
    matched = np.array(
        sorted(data.draw(st.sets(st.integers(0, n_live - 1), min_size=1))), dtype=np.int64
    )
    pieces = list(_output_batches(matched, n_live, batch_rows, span))
    assert pieces[0][0] == 0 and pieces[-1][1] == len(matched)
    for (_, hi, _), (lo, _, _) in zip(pieces[:-1], pieces[1:], strict=True):
        assert hi == lo  # contiguous, in order
    for lo, hi, dense in pieces:
        assert 0 < hi - lo <= batch_rows
        first, last = matched[lo] // batch_rows, matched[hi - 1] // batch_rows
        if dense:  # a dense batch is one stretch of batch_rows live rows
            assert first == last
        else:  # a take touches at most `span` stretches
            assert last - first < span


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5_000_000), st.integers(1, 2_000_000))
def test_filter_steps_are_even_and_never_leave_a_sliver(total, step):
    """A fragment's filter steps: at most an eighth over `step` rows, no more of them than
    that size needs, and the last short of the others by fewer rows than there are steps
    (1 M + 1 rows in steps of 349,525 is 3 steps, not 3 and one of a row)."""
    even = _even_step(total, step)
    assert 0 < even <= step + step // 8
    if total == 0:
        return
    count = -(-total // even)
    last = total - (count - 1) * even
    assert count <= -(-total // (step + step // 8))
    assert 0 < last and even - last < count


def test_sparse_takes_decode_only_the_wanted_fsst_strings(uri: str, monkeypatch):
    """FSST strings are compressed one by one: a sparse take decodes the wanted ones, not
    their chunks (2.1+), and returns pylance's rows."""
    import quiver.format.file.v21.compression as cz

    picked = []
    original = cz._fsst_selected

    def counting(enc, ch, select, where):
        out = original(enc, ch, select, where)
        if out is not None:
            picked.append(len(out))
        return out

    monkeypatch.setattr(cz, "_fsst_selected", counting)
    filt = "x < 0.02"
    got = dataset(uri).to_table(filter=filt, columns=["text", "id"], batch_size=4096)
    assert_same_table(got, lance.dataset(uri).to_table(filter=filt, columns=["text", "id"]), filt)
    if not uri.endswith("d2.0.lance"):
        assert picked and sum(picked) == got.num_rows


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"columns": ["id", "x"]},
        {"columns": {"id": "id", "twice": "x * 2"}},
        {"columns": ["text", "id"], "with_row_id": True},
        {"offset": 1000, "limit": 9000},
    ],
)
def test_a_plain_scan_decodes_in_steps_and_hands_on_batch_sized_slices(uri: str, kwargs):
    """Narrow rows are decoded several batches at a time and cut after: every batch but the
    last of each step holds `batch_size` live rows, deletions skipped, and the rows are
    pylance's in pylance's order."""
    got = list(dataset(uri).to_batches(batch_size=700, **kwargs))
    ref = lance.dataset(uri).to_table(**kwargs)
    sizes = [b.num_rows for b in got]
    assert max(sizes) == 700 and sizes.count(700) >= len(sizes) - 4  # 3 fragments
    assert_same_table(pa.Table.from_batches(got), ref, str(kwargs))

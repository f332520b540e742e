"""Nothing in the read path assumes a local filesystem: datasets read from `memory://`."""

from __future__ import annotations

import gc
import os
import uuid
from pathlib import Path

import fsspec
import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quiver.format.dataset import dataset
from quiver.format.io.store import open_store


def _copy_to_memory(local: Path, prefix: str) -> str:
    fs = fsspec.filesystem("memory")
    for path in local.rglob("*"):
        if path.is_file():
            fs.pipe_file(f"/{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())
    return f"memory://{prefix}"


def test_corpus_reads_from_memory_store(corpus):
    checked = 0
    for ds in corpus:
        if ds.name not in ("types", "history", "deletes_bitmap", "stable_row_ids"):
            continue
        uri = _copy_to_memory(Path(ds.uri), f"mem-{ds.storage_version}-{ds.name}")
        ref = lance.dataset(ds.uri)
        ours = dataset(uri)
        assert ours.version == ref.version
        expected = ref.to_table(columns=ref.schema.names[:6], with_row_id=True)
        got = ours.to_table(columns=ref.schema.names[:6], with_row_id=True)
        assert got.schema == expected.schema
        # NaN-free columns only: values compared exactly
        for name in expected.column_names:
            if not pa.types.is_floating(expected.schema.field(name).type):
                assert got.column(name).equals(expected.column(name)), (ds.name, name)
        first = ref.versions()[0]["version"]
        assert ours.checkout_version(first).count_rows() == ref.checkout_version(first).count_rows()
        checked += 1
    assert checked == 8  # four datasets at two storage versions


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3 << 20), st.integers(0, 40_000)), min_size=1, max_size=60),
    st.sampled_from(["file", "memory"]),
)
def test_read_ranges_return_exactly_the_bytes_asked_for(tmp_path_factory, ranges, where):
    """Unsorted, overlapping, touching, empty and large ranges, coalesced or mapped (local)
    or fetched together (a remote-like store): each comes back as the file's bytes."""
    data = np.random.default_rng(len(ranges)).integers(0, 256, 3 << 20, dtype=np.uint8)
    data = data.tobytes() + b"tail" * 20_000
    ranges = [(s, min(n, len(data) - s)) for s, n in ranges]
    if where == "file":
        root = str(tmp_path_factory.mktemp("ranges"))
    else:
        root = f"memory://ranges-{uuid.uuid4().hex}"
    store = open_store(root)
    store.put("blob.bin", data)
    reader = store.open("blob.bin")
    got = reader.read_ranges(ranges)
    assert [bytes(g) for g in got] == [data[s : s + n] for s, n in ranges]
    with pytest.raises(EOFError):
        reader.read_ranges([(0, 10), (len(data) - 5, 10)])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3 << 20), st.integers(0, 20_000)), min_size=1, max_size=80),
    st.sampled_from(["file", "memory"]),
)
def test_read_spans_concatenate_exactly_the_spans(tmp_path_factory, spans, where):
    """Sorted spans (touching, overlapping, empty; many scattered ones mapped at once on a
    local file, coalesced reads elsewhere) come back as their bytes back to back."""
    data = np.random.default_rng(len(spans)).integers(0, 256, 3 << 20, dtype=np.uint8)
    data = data.tobytes() + b"tail" * 10_000
    spans = sorted((s, min(s + n, len(data))) for s, n in spans)
    root = (
        str(tmp_path_factory.mktemp("spans"))
        if where == "file"
        else f"memory://spans-{uuid.uuid4().hex}"
    )
    store = open_store(root)
    store.put("blob.bin", data)
    reader = store.open("blob.bin")
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    stops = np.array([e for _, e in spans], dtype=np.int64)
    got = reader.read_spans(starts, stops)
    assert got.tobytes() == b"".join(data[s:e] for s, e in spans)
    with pytest.raises(EOFError):
        reader.read_spans(np.array([0, len(data) - 5]), np.array([10, len(data) + 5]))
    with pytest.raises(ValueError, match="sorted"):
        reader.read_spans(np.array([10, 0]), np.array([20, 5]))


def _mapped(path: str) -> tuple[int, int]:
    """(mappings of `path` in this process, KiB of them resident), from Linux's smaps."""
    count, total, current = 0, 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                current = len(parts) > 5 and parts[5] == path
                count += current
            elif current and parts[0] == "Rss:":
                total += int(parts[1])
    return count, total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux smaps")
def test_mapped_reads_share_one_mapping_and_leave_rss_when_released(tmp_path: Path):
    """Large local reads are views of one mapping of the file: their bytes are the file's,
    they outlive the reader's close, and once the last view of a read is gone its pages
    leave the process's resident set (the page cache keeps them)."""
    data = np.random.default_rng(7).integers(0, 256, 24 << 20, dtype=np.uint8).tobytes()
    store = open_store(str(tmp_path))
    store.put("blob.bin", data)
    reader = store.open("blob.bin")
    path = str(tmp_path / "blob.bin")
    first = reader.read(4096 + 3, 9 << 20)  # not page-aligned
    second = reader.read(12 << 20, 10 << 20)
    arrays = [np.frombuffer(first, np.uint8), np.frombuffer(second, np.uint8)[5:]]
    assert bytes(first) == data[4099 : 4099 + (9 << 20)]
    assert int(arrays[1].sum()) == int(
        np.frombuffer(data, np.uint8)[(12 << 20) + 5 : 22 << 20].sum()
    )
    count, kib = _mapped(path)
    assert count == 1 and kib >= 18 << 10  # one mapping; both reads touched and resident
    reader.close()
    assert bytes(second[:100]) == data[12 << 20 : (12 << 20) + 100]  # valid after close
    del first, arrays[0]
    gc.collect()
    assert _mapped(path)[1] <= 13 << 10  # the first read's pages left (the second's stay)
    del second, arrays
    gc.collect()
    assert _mapped(path)[1] == 0


def test_local_listing_matches_fsspecs(tmp_path: Path):
    """A local store lists a directory itself (every request lists _versions): the same
    names and sizes as fsspec's listing, sub-directories and dangling links left out, and
    nothing (not an error) for a directory that does not exist. A link's time is its
    target's, as its size is (fsspec's listing gives the link's own time, which differs
    when the two were made in different ticks of the clock)."""
    (tmp_path / "a.manifest").write_bytes(b"x" * 10)
    (tmp_path / "b.manifest").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "gone").symlink_to(tmp_path / "missing")
    (tmp_path / "alias").symlink_to(tmp_path / "a.manifest")
    os.utime(tmp_path / "alias", ns=(10**9, 10**9), follow_symlinks=False)  # the link's own
    store = open_store(str(tmp_path))
    got = sorted(store.list_dir("."))
    names = [
        (Path(e["name"]).name, int(e["size"]))
        for e in fsspec.filesystem("file").ls(str(tmp_path), detail=True)
        if e["type"] != "directory"
    ]
    expected = sorted((n, size, (tmp_path / n).stat().st_mtime) for n, size in names if n != "gone")
    assert [g[:2] for g in got] == [("a.manifest", 10), ("alias", 10), ("b.manifest", 0)]
    assert got == expected
    assert got[1][2] == got[0][2]  # the link's time is its target's
    assert store.list_dir("nowhere") == []
    assert store.list_dir("a.manifest") == []
    assert store.read_all("a.manifest") == b"x" * 10
    with pytest.raises(FileNotFoundError, match="does not exist"):
        store.read_all("nowhere")

"""Parsed data-file metadata is shared between readers of the same file, re-parsed when the
file is not the same any more, and bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import CorruptFileError
from quiver.format.file import container
from quiver.format.file.container import FOOTER_SIZE, V2Container, _FileMeta, _MetaCache
from quiver.format.io.store import open_store


@pytest.fixture(params=["2.0", "2.2"])
def data_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    table = pa.table({"id": pa.array(range(5000)), "s": [f"v{i}" for i in range(5000)]})
    write_dataset(table, str(tmp_path / "ds"), data_storage_version=request.param)
    (path,) = (tmp_path / "ds" / "data").iterdir()
    return path


def _container(path: Path) -> V2Container:
    store = open_store(str(path.parent))
    return V2Container(store.open(path.name), str(path))


def test_a_second_reader_reuses_the_parsed_columns(data_file: Path):
    first = _container(data_file)
    (info,) = first.columns([0])
    second = _container(data_file)
    assert second.columns([0])[0] is info  # not parsed again
    assert second.descriptor is first.descriptor
    assert second.footer == first.footer


def test_a_file_replaced_by_another_is_parsed_anew(data_file: Path, tmp_path: Path):
    table = dataset(str(tmp_path / "ds")).to_table()
    before = _container(data_file).columns([0])[0]
    other = pa.table({"id": pa.array(range(7)), "s": ["x"] * 7})
    write_dataset(other, str(tmp_path / "other"), data_storage_version="2.0")
    (replacement,) = (tmp_path / "other" / "data").iterdir()
    os.replace(replacement, data_file)  # another inode, size and footer under the same name
    after = _container(data_file)
    assert after.columns([0])[0] is not before
    assert after.num_rows == 7
    assert table.num_rows == 5000


def test_a_footer_changed_in_place_within_the_same_clock_tick_is_seen(data_file: Path):
    _container(data_file).columns([0, 1])
    st = os.stat(data_file)
    with open(data_file, "r+b") as f:  # same size, inode and (restored) time: only bytes differ
        f.seek(st.st_size - FOOTER_SIZE)
        f.write(b"\xff" * 8)
    os.utime(data_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(data_file).st_mtime_ns == st.st_mtime_ns
    with pytest.raises(CorruptFileError):
        _container(data_file)


def test_the_cache_drops_the_least_recently_used_past_its_weight():
    cache = _MetaCache(max_weight=10)
    metas = {k: _FileMeta((k,), None, None, []) for k in "abc"}  # type: ignore[arg-type]
    for k, m in metas.items():
        cache.put((k,), m)
    assert cache.get(("a",)) is metas["a"]  # a is now the most recently used
    cache.charge(metas["c"], 8)  # 1 + 1 + 9 > 10: b goes, the oldest
    assert cache.get(("b",)) is None
    assert cache.get(("c",)) is metas["c"] and cache.get(("a",)) is metas["a"]  # c, then a
    cache.charge(metas["a"], 5)  # 9 + 6 > 10: c goes, used before a
    assert cache.get(("c",)) is None and cache.get(("a",)) is metas["a"]
    cache.charge(metas["b"], 100)  # an entry no longer cached is not counted
    assert cache.get(("a",)) is metas["a"]


def test_the_process_cache_stays_within_its_weight(tmp_path: Path):
    cache = container.METADATA_CACHE
    for i in range(3):
        write_dataset(
            pa.table({"x": pa.array(range(100 * (i + 1)))}),
            str(tmp_path / f"d{i}"),
            data_storage_version="2.0",
        )
        dataset(str(tmp_path / f"d{i}")).to_table()
    assert 0 < cache._weight <= cache.max_weight
    assert cache._weight == sum(m.weight for m in cache._entries.values())


def test_a_message_table_started_afresh_gives_its_weight_back(data_file: Path):
    """Past 4096 parsed messages a file's table starts afresh: the cache's count of what the
    file holds drops with it, rather than counting the dropped messages for ever."""
    reader = _container(data_file)
    meta = reader._meta
    before = meta.weight - len(reader._messages)
    for i in range(5000):
        reader._remember(reader._messages, ("test", i), object())
    assert len(reader._messages) == 5000 - 4097
    assert meta.weight == before + len(reader._messages)
    cache = container.METADATA_CACHE
    assert cache._weight == sum(m.weight for m in cache._entries.values())

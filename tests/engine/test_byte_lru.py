"""`ByteLRU`: the byte budget holds when values are added and when a held value grows."""

from __future__ import annotations

from quiver.format.io.lru import ByteLRU, OpenOnce, forget_opened_in


def test_a_grown_value_pushes_out_the_least_recently_used() -> None:
    cache: ByteLRU[str] = ByteLRU(100)
    for key in "abc":
        cache.put(key, key.upper(), 30)
    cache.get("a")  # b is now the least recently used
    cache.resize("c", 50)  # 30 + 30 + 50 > 100: b goes
    assert [k for k in "abc" if cache.get(k) is not None] == ["a", "c"]
    cache.resize("a", 60)  # a, now the most recent, stays; c goes
    assert cache.get("a") == "A" and cache.get("c") is None
    cache.resize("a", 101)  # over the whole budget alone: dropped
    assert len(cache) == 0
    cache.resize("gone", 10)  # a key not held: nothing happens
    assert len(cache) == 0


class _Opened:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_open_objects_under_removed_directories_are_forgotten() -> None:
    """`forget_opened_in` drops, from every OpenOnce, the objects keyed under a removed
    directory (not closing them: a search may hold one), and nothing else."""
    cache: OpenOnce[_Opened] = OpenOnce(8)
    kept = cache.get(("file:///root/_indices/a", "u1"), _Opened)
    gone = cache.get(("file:///root/_indices/b", "u2"), _Opened)
    assert forget_opened_in({"file:///root/_indices/b"}) >= 1
    assert cache.get(("file:///root/_indices/a", "u1"), _Opened) is kept
    assert cache.get(("file:///root/_indices/b", "u2"), _Opened) is not gone
    assert not gone.closed and forget_opened_in(()) == 0


def test_cleanup_forgets_the_open_segments_of_removed_indices(tmp_path) -> None:
    """An INVERTED index a search opened, replaced, then cleaned up: its open segment is no
    longer held (its files' space can be given back), and searches still answer."""
    import datetime as dt

    import pyarrow as pa

    from quiver.format.dataset import dataset, write_dataset
    from quiver.format.index.fts import index as fts_index

    uri = str(tmp_path / "t.lance")
    write_dataset(pa.table({"text": ["a cat", "a dog", "the cat sat"]}), uri)
    dataset(uri).create_scalar_index("text", "INVERTED")
    assert dataset(uri).to_table(full_text_query="cat").num_rows == 2
    (old,) = [k for k in fts_index._OPEN._items if k[0].startswith(uri)]
    dataset(uri).create_scalar_index("text", "INVERTED", replace=True)
    dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0))
    assert old not in fts_index._OPEN._items
    assert dataset(uri).to_table(full_text_query="cat").num_rows == 2

"""`ByteLRU`: the byte budget holds when values are added and when a held value grows."""

from __future__ import annotations

from quiver.format.io.lru import ByteLRU


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

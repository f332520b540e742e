"""`appended_between`: the fragments appends added between two versions, pinned to the
version that added them, on datasets written by pylance and by this engine."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import quiver.format.dataset.changes as changes
from quiver.format.dataset import dataset, write_dataset
from quiver.format.dataset.changes import AppendedFragment, appended_between
from quiver.format.errors import InvalidInputError, NotAppendOnlyError, VersionNotFoundError
from quiver.format.io.store import open_store


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "s": pa.array([None if i % 4 == 0 else "é" * (i % 3) + f"{i}" for i in ids]),
            "st": pa.array(
                [{"a": i, "b": [i] * (i % 3)} for i in ids],
                pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))]),
            ),
        }
    )


def appended_rows(uri: str, found: list[AppendedFragment]) -> pa.Table:
    """The rows of each listed fragment, read by pylance at the version that appended it."""
    parts = []
    for a in found:
        frag = lance.dataset(uri, version=a.version).get_fragment(a.fragment_id)
        assert frag is not None
        parts.append(frag.to_table())
    return pa.concat_tables(parts) if parts else rows(0, 0).slice(0, 0)


def test_pylance_history(tmp_path: Path) -> None:
    """Appends listed, deletes and compactions skipped, each fragment read as appended."""
    uri = str(tmp_path / "p.lance")
    lance.write_dataset(rows(0, 10), uri)  # v1: creation
    lance.write_dataset(rows(10, 10), uri, mode="append", max_rows_per_file=4)  # v2: 3 frags
    lance.dataset(uri).delete("id < 3 OR id = 12")  # v3
    lance.dataset(uri).optimize.compact_files()  # v4: reserve_fragments, v5: rewrite
    lance.dataset(uri).create_scalar_index("id", "BTREE")  # v6: create_index
    lance.write_dataset(rows(20, 5), uri, mode="append")  # v7
    lance.dataset(uri).delete("id = 21")  # v8
    assert lance.dataset(uri).version == 8
    store = open_store(uri)

    found = appended_between(store, 1, 8)
    assert [a.version for a in found] == [2, 2, 2, 7]
    assert [a.rows for a in found] == [4, 4, 2, 5]
    got = appended_rows(uri, found)
    # the rows as appended: later deletes do not retract them
    assert got.equals(rows(10, 15))

    everything = appended_between(store, 0, 8)
    assert appended_rows(uri, everything).equals(rows(0, 25))
    assert appended_between(store, 2, 6) == []  # delete, compaction, index: no rows
    assert appended_between(store, 8, 8) == []
    assert [a.version for a in appended_between(store, 6, 7)] == [7]


def test_refused_operations(tmp_path: Path) -> None:
    uri = str(tmp_path / "r.lance")
    write_dataset(rows(0, 5), uri, mode="create")
    write_dataset(rows(5, 5), uri, mode="append")  # v2
    ds = lance.dataset(uri)
    ds.update({"s": "'changed'"}, where="id = 1")  # v3: update
    write_dataset(rows(10, 5), uri, mode="append")  # v4
    dataset(uri).add_columns({"y": "id * 2"})  # v5: merge
    write_dataset(rows(15, 5).append_column("y", pa.array(range(30, 40, 2))), uri, mode="append")
    write_dataset(rows(50, 2), uri, mode="overwrite")  # v7
    store = open_store(uri)
    with pytest.raises(NotAppendOnlyError, match=r"version 3 \(update\)") as e:
        appended_between(store, 1, 4)
    assert (e.value.version, e.value.operation) == (3, "update")
    assert [a.version for a in appended_between(store, 3, 4)] == [4]
    with pytest.raises(NotAppendOnlyError, match=r"version 5 \(merge\) changed the schema"):
        appended_between(store, 4, 6)
    assert [a.version for a in appended_between(store, 5, 6)] == [6]
    with pytest.raises(NotAppendOnlyError, match=r"version 7 \(overwrite\) replaced every row"):
        appended_between(store, 6, 7)


def test_bad_ranges_and_cleaned_versions(tmp_path: Path) -> None:
    uri = str(tmp_path / "b.lance")
    write_dataset(rows(0, 5), uri, mode="create")
    write_dataset(rows(5, 5), uri, mode="append")
    store = open_store(uri)
    with pytest.raises(InvalidInputError):
        appended_between(store, 2, 1)
    with pytest.raises(VersionNotFoundError, match="version 3 does not exist"):
        appended_between(store, 1, 3)
    write_dataset(rows(10, 5), uri, mode="append")  # v3
    ds = dataset(uri)
    ds.cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=1)  # v1, v2 go
    with pytest.raises(VersionNotFoundError, match="cleaned up"):
        appended_between(open_store(uri), 0, 3)
    assert [a.version for a in appended_between(open_store(uri), 2, 3)] == [3]


@pytest.mark.parametrize("compactor", ["ours", "pylance"])
def test_without_transaction_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compactor: str
) -> None:
    """Versions whose transaction is unknown are judged from their manifests; a compaction
    by either engine commits the same two versions."""
    uri = str(tmp_path / "n.lance")
    write_dataset(rows(0, 5), uri, mode="create")
    write_dataset(rows(5, 5), uri, mode="append")  # v2
    dataset(uri).delete("id = 6")  # v3
    write_dataset(rows(10, 5), uri, mode="append")  # v4
    engine = dataset(uri) if compactor == "ours" else lance.dataset(uri)
    engine.optimize.compact_files()  # v5: reserve_fragments, v6: rewrite
    assert [v["version"] for v in lance.dataset(uri).versions()] == [1, 2, 3, 4, 5, 6]
    store = open_store(uri)
    assert [a.version for a in appended_between(store, 4, 6)] == []
    monkeypatch.setattr(changes, "read_transaction", lambda store, manifest: None)
    found = appended_between(store, 0, 4)
    assert [a.version for a in found] == [1, 2, 4]
    assert appended_rows(uri, found).equals(rows(0, 15))
    # the reservation changes no fragment: judged an append of nothing
    assert appended_between(store, 4, 5) == []
    with pytest.raises(NotAppendOnlyError, match="version 6 has no transaction record"):
        appended_between(store, 4, 6)

"""`create_scalar_index(..., train=False)`: an index of no rows, which `optimize_indices`
fills; the same files, coverage and versions as pylance's, for every scalar type Quiver
builds, and the same answers before and after."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

import quiver
from quiver.format.errors import UnsupportedFeatureError
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store

CASES = [
    ("BTREE", "a", "a = 5"),
    ("BITMAP", "s", "s = 's1'"),
    ("ZONEMAP", "a", "a < 30"),
    ("BLOOMFILTER", "s", "s = 's1'"),
    ("NGRAM", "s", "contains(s, 's1')"),
    ("LABEL_LIST", "l", "array_has_any(l, ['t1'])"),
    ("INVERTED", "s", None),
]


def _contents(path: str) -> tuple[list[int], dict]:
    [index] = lance.dataset(path).list_indices()
    store = open_store(f"{path}/_indices/{index['uuid']}")
    files = {}
    for f in sorted(p.name for p in (Path(path) / "_indices" / index["uuid"]).iterdir()):
        with IndexFile(store, f) as ix:
            rows = ix.read([x.name for x in ix.schema.fields]).to_pylist()
            files[f] = (rows, ix.metadata.get(b"partitions") or ix.metadata.get("partitions"))
    return sorted(index["fragment_ids"]), files


@pytest.mark.parametrize(("kind", "column", "sql"), CASES)
def test_untrained_indices_as_pylance(tmp_path: Path, kind: str, column: str, sql: str) -> None:
    base = str(tmp_path / "base.lance")
    table = pa.table(
        {
            "a": list(range(100)),
            "s": [f"s{i % 5}" for i in range(100)],
            "l": [[f"t{i % 3}"] for i in range(100)],
        }
    )
    lance.write_dataset(table, base, max_rows_per_file=50)
    states = []
    for engine in (lance, quiver):
        path = str(tmp_path / f"{engine.__name__}.lance")
        shutil.copytree(base, path)
        engine.dataset(path).create_scalar_index(column, kind, train=False)
        covered, files = _contents(path)
        assert covered == []
        answers = []
        if sql is not None:
            want = lance.dataset(path).scanner(filter=sql, use_scalar_index=False).to_table()
            for reader in (lance, quiver):
                got = reader.dataset(path).to_table(filter=sql)
                assert_same_table(got.sort_by("a"), want.sort_by("a"), f"{kind} untrained")
            answers.append(want)
        engine.dataset(path).optimize.optimize_indices()
        [index] = lance.dataset(path).list_indices()
        stats = lance.dataset(path).stats.index_stats(index["name"])
        assert stats["num_unindexed_rows"] == 0
        if sql is not None:
            got = lance.dataset(path).to_table(filter=sql)
            assert_same_table(got.sort_by("a"), answers[0].sort_by("a"), f"{kind} after")
        states.append((files, sorted(index["fragment_ids"]), index["version"]))
    assert states[0] == states[1]


def test_untrained_vector_indices_are_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "v.lance")
    vectors = pa.FixedSizeListArray.from_arrays(pa.array([0.5] * 64, pa.float32()), 4)
    lance.write_dataset(pa.table({"v": vectors}), path)
    with pytest.raises(UnsupportedFeatureError, match="untrained"):
        quiver.dataset(path).create_index("v", "IVF_FLAT", num_partitions=1, train=False)

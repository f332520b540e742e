"""`create_scalar_index(..., train=False)` and `create_index(..., train=False)`: an index of
no rows, which `optimize_indices` fills; the same files (none for vector indices), coverage
and versions as pylance's, for every scalar type and vector kind Quiver builds, and the same
answers before and after."""

from __future__ import annotations

import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from compare import assert_same_table

import quiver
from quiver.format.index.files import IndexFile
from quiver.format.io.store import open_store
from quiver.format.proto import index_pb2
from quiver.format.table.indices import indices_of

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


VECTOR_CASES = [
    ("IVF_PQ", {"num_sub_vectors": 2, "num_bits": 4}),
    ("IVF_HNSW_SQ", {"m": 10}),
    ("IVF_FLAT", {"metric": "cosine"}),
    ("IVF_RQ", {"num_bits": 3}),
]


@pytest.mark.parametrize(("kind", "options"), VECTOR_CASES)
def test_untrained_vector_indices_as_pylance_s(tmp_path: Path, kind: str, options: dict) -> None:
    """`create_index(..., train=False)`: a segment of no files and no rows recording the
    index's kind and parameters, reported as pylance reports it and searched as no index;
    `optimize_indices` of either engine trains it over every row (pylance's partitions for
    the row count, the recorded parameters kept), each engine filling the other's."""
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((3000, 8)).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(np.arange(3000)),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 8),
        }
    )
    paths = {}
    for who, engine in (("pylance", lance), ("quiver", quiver)):
        paths[who] = path = str(tmp_path / f"{who}.lance")
        lance.write_dataset(table, path, max_rows_per_file=1000)
        engine.dataset(path).create_index("v", kind, num_partitions=2, train=False, **options)
    q = rng.standard_normal(8).astype(np.float32)
    nearest = {"column": "v", "q": q, "k": 5}
    records = []
    for path in paths.values():
        ds = lance.dataset(path)
        [segment] = ds.read_transaction(ds.version).operation.new_indices
        records.append(
            (segment.fragment_ids, segment.files, segment.index_version, segment.dataset_version)
        )
        details = _vector_details(path)
        assert details == _vector_details(paths["pylance"])
        stats = [e.dataset(path).stats.index_stats("v_idx") for e in (lance, quiver)]
        for s in stats:
            s.pop("updated_at_timestamp_ms")
        assert stats[0] == stats[1] and stats[0]["index_type"] == "N/A"
        assert [e.dataset(path).list_indices()[0]["type"] for e in (lance, quiver)] == [kind] * 2
        [described] = quiver.dataset(path).describe_indices()
        assert (described.index_type, described.total_size_bytes) == (kind, None)
        ours = quiver.dataset(path).to_table(nearest=nearest, columns=["id"])["id"]
        assert ours == lance.dataset(path).to_table(nearest=nearest, columns=["id"])["id"]
    assert records[0] == records[1]
    quiver.dataset(paths["pylance"]).optimize.optimize_indices()
    lance.dataset(paths["quiver"]).optimize.optimize_indices()
    filled = []
    for path in paths.values():
        ds = lance.dataset(path)
        op = ds.read_transaction(ds.version).operation
        [segment] = op.new_indices
        assert len(op.removed_indices) == 1 and segment.dataset_version == ds.version - 1
        stats = ds.stats.index_stats("v_idx")
        sub = stats["indices"][0]["sub_index"]
        filled.append(
            (
                stats["index_type"],
                stats["num_indexed_rows"],
                stats["indices"][0]["num_partitions"],
                sub.get("nbits"),
                (sub.get("params") or {}).get("m"),
                sorted(segment.fragment_ids),
            )
        )
        ours = quiver.dataset(path).to_table(nearest=nearest, columns=["id"])["id"]
        assert ours == lance.dataset(path).to_table(nearest=nearest, columns=["id"])["id"]
    assert filled[0] == filled[1] and filled[0][:3] == (kind, 3000, 1)


def _vector_details(path: str) -> tuple:
    [entry] = indices_of(quiver.dataset(path)._core.manifest)
    d = index_pb2.VectorIndexDetails.FromString(entry.details)
    hints = dict(d.runtime_hints)
    return (d.metric_type, d.WhichOneof("compression"), str(d.pq), str(d.hnsw), hints)

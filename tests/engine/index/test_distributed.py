"""Distributed index builds, pylance 14's protocol: `create_index_uncommitted` writes a segment
over some fragments and commits nothing, `merge_existing_index_segments` writes one covering
several, `commit_existing_index_segments` (or `commit` with `LanceOperation.CreateIndex`)
publishes them. Segments built by either engine are committed by either, and both engines
answer the same through the committed index."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import quiver
from quiver.format.dataset import LanceOperation, commit
from quiver.format.errors import InvalidInputError

ROWS, DIM = 4000, 8


def _table() -> pa.Table:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    return pa.table(
        {
            "id": pa.array(np.arange(ROWS)),
            "x": pa.array((np.arange(ROWS) * 7) % 1000),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
        }
    )


def _dataset(tmp_path: Path, name: str) -> str:
    path = str(tmp_path / f"{name}.lance")
    lance.write_dataset(_table(), path, max_rows_per_file=1000)
    return path


def _same_answers(path: str) -> None:
    rng = np.random.default_rng(5)
    for q in rng.standard_normal((4, DIM)).astype(np.float32):
        nearest = {"column": "v", "q": q, "k": 7}
        ours = quiver.dataset(path).to_table(nearest=nearest, columns=["id"])
        theirs = lance.dataset(path).to_table(nearest=nearest, columns=["id"])
        assert ours["id"] == theirs["id"]
    for sql in ("x = 14", "x < 30", "x IN (7, 700)"):
        ours = quiver.dataset(path).to_table(filter=sql, columns=["id"])["id"].to_pylist()
        theirs = lance.dataset(path).to_table(filter=sql, columns=["id"])["id"].to_pylist()
        assert sorted(ours) == sorted(theirs), sql


def _segments(path: str) -> dict[str, list[int]]:
    stats = {}
    ds = lance.dataset(path)
    for d in ds.describe_indices():
        segs = ds.stats.index_stats(d.name)["num_indexed_rows_per_delta"]
        stats[d.name] = segs
    return stats


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("IVF_PQ", {"num_sub_vectors": 2}),
        ("IVF_HNSW_SQ", {}),
        ("IVF_FLAT", {"metric": "cosine"}),
        ("IVF_RQ", {"num_bits": 3}),
    ],
)
def test_vector_segments_of_either_engine_committed_by_either(
    tmp_path: Path, kind: str, extra: dict
) -> None:
    """Workers build a segment per pair of fragments with shared centroids (and codebook,
    or rotation); the segments, half from each engine, are committed as one index by each
    engine."""
    rng = np.random.default_rng(1)
    centroids = rng.standard_normal((3, DIM)).astype(np.float32)
    if kind == "IVF_PQ":
        extra = {**extra, "pq_codebook": rng.standard_normal((2, 256, 4)).astype(np.float32)}
    if kind == "IVF_RQ":  # segments built apart share one rotation
        from lance.lance import indices

        extra = {**extra, "rabitq_model": indices.build_rq_model(DIM, num_bits=3, dtype="float32")}
    for committer in (lance, quiver):
        path = _dataset(tmp_path, committer.__name__)
        options = {"num_partitions": 3, "ivf_centroids": centroids, **extra}
        a = lance.dataset(path).create_index_uncommitted("v", kind, fragment_ids=[0, 1], **options)
        b = quiver.dataset(path).create_index_uncommitted("v", kind, fragment_ids=[2, 3], **options)
        assert lance.dataset(path).version == 1  # nothing committed
        assert (sorted(b.fragment_ids), b.name, b.dataset_version) == ([2, 3], "v_idx", 1)
        assert [f.path for f in b.files] == [f.path for f in a.files]
        assert b.index_details[0] == a.index_details[0] and b.index_version == a.index_version
        committer.dataset(path).commit_existing_index_segments("v_idx", "v", [a, b])
        ds = lance.dataset(path)
        assert ds.version == 2
        op = ds.read_transaction(2).operation
        assert sorted(sorted(i.fragment_ids) for i in op.new_indices) == [[0, 1], [2, 3]]
        assert _segments(path) == {"v_idx": [2000, 2000]}
        _same_answers(path)


def test_scalar_segments_merged_and_committed(tmp_path: Path) -> None:
    for engine in (lance, quiver):
        path = _dataset(tmp_path, engine.__name__)
        ds = engine.dataset(path)
        groups = ([0, 1], [2, 3])
        parts = [ds.create_index_uncommitted("x", "BTREE", fragment_ids=f) for f in groups]
        merged = ds.merge_existing_index_segments(parts)
        assert sorted(merged.fragment_ids) == [0, 1, 2, 3]
        assert merged.uuid not in {p.uuid for p in parts}
        bitmap = ds.create_index_uncommitted("id", "BITMAP", fragment_ids=[0, 1, 2, 3])
        ds.commit_existing_index_segments("x_idx", "x", [merged])
        # a segment committed through the low-level API, by the other engine
        other = quiver if engine is lance else lance
        operation = (
            LanceOperation.CreateIndex(new_indices=[bitmap])
            if other is quiver
            else lance.LanceOperation.CreateIndex(new_indices=[bitmap], removed_indices=[])
        )
        (commit if other is quiver else lance.LanceDataset.commit)(path, operation, read_version=2)
        assert _segments(path) == {"id_idx": [4000], "x_idx": [4000]}
        _same_answers(path)


def test_committing_replaces_the_index_of_that_name(tmp_path: Path) -> None:
    path = _dataset(tmp_path, "r")
    quiver.dataset(path).create_scalar_index("x", "BTREE")
    ds = quiver.dataset(path)
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.create_index_uncommitted("x", "BTREE", fragment_ids=[0])
    segments = [
        ds.create_index_uncommitted("x", "BTREE", fragment_ids=f, replace=True)
        for f in ([0, 1], [2, 3])
    ]
    ds.commit_existing_index_segments("x_idx", "x", segments)
    ds = lance.dataset(path)
    op = ds.read_transaction(ds.version).operation
    assert len(op.removed_indices) == 1 and len(op.new_indices) == 2
    _same_answers(path)


def test_bad_distributed_requests_are_refused(tmp_path: Path) -> None:
    path = _dataset(tmp_path, "bad")
    ds = quiver.dataset(path)
    with pytest.raises(InvalidInputError, match="fragment 9 is not in version 1"):
        ds.create_index_uncommitted("x", "BTREE", fragment_ids=[0, 9])
    with pytest.raises(InvalidInputError, match="create_index_uncommitted"):
        ds.create_scalar_index("x", "BTREE", fragment_ids=[0])
    with pytest.raises(InvalidInputError, match="create_index_uncommitted"):
        ds.create_index("v", "IVF_FLAT", num_partitions=1, fragment_ids=[0])
    a = ds.create_index_uncommitted("x", "BTREE", fragment_ids=[0])
    b = ds.create_index_uncommitted("id", "BTREE", fragment_ids=[1])
    with pytest.raises(InvalidInputError, match="different columns"):
        ds.commit_existing_index_segments("x_idx", "x", [a, b])
    with pytest.raises(InvalidInputError, match="not 'id'"):
        ds.commit_existing_index_segments("x_idx", "id", [a])
    with pytest.raises(InvalidInputError, match="twice"):
        ds.merge_existing_index_segments([a, a])
    with pytest.raises(InvalidInputError, match="not an index segment"):
        ds.commit_existing_index_segments("x_idx", "x", ["nope"])
    with pytest.raises(InvalidInputError, match="no option"):
        ds.create_index_uncommitted("x", "BTREE", frobnicate=1)
    assert lance.dataset(path).version == 1

"""Compactions that defer their index remap (`defer_index_remap`, the fragment reuse index),
against pylance 14: the same sequence of writes, deferred and immediate compactions and
index updates through either engine (or both, alternately) leaves the same manifests (index
bitmaps as recorded, the reuse index's versions) and the same answers through both engines,
and Quiver's searches use the indices as pylance does."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from pyroaring import BitMap

from quiver.format.dataset import dataset
from quiver.format.errors import CommitConflictError, InvalidInputError, UnsupportedFeatureError
from quiver.format.proto import table_pb2
from quiver.format.table.indices import indices_of

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
ROWS = 300


def _append(uri: str, i: int, **kw: Any) -> None:
    r = np.random.default_rng(i)
    table = pa.table(
        {
            "id": pa.array(np.arange(i * ROWS, (i + 1) * ROWS)),
            "v": pa.FixedSizeListArray.from_arrays(
                pa.array(r.normal(size=ROWS * 8).astype(np.float32)), 8
            ),
            "s": pa.array([f"w{j % 7}" for j in range(ROWS)]),
            "t": pa.array([" ".join(r.choice(WORDS, size=r.integers(1, 6))) for _ in range(ROWS)]),
        }
    )
    lance.write_dataset(table, uri, mode="append" if i else "create", **kw)


def _indexed(uri: str) -> str:
    """Four fragments, a BTREE, a BITMAP, an IVF_FLAT and an INVERTED index, a fifth of the
    rows deleted after."""
    for i in range(4):
        _append(uri, i)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("s", "BITMAP")
    ds.create_index("v", "IVF_FLAT", num_partitions=2)
    ds.create_scalar_index("t", "INVERTED")
    ds.delete("id % 5 = 0")
    return uri


def _state(uri: str) -> tuple[Any, ...]:
    """The latest manifest's fragments and indices as recorded (bitmaps, versions, the
    reuse index's versions and groups)."""
    manifest = dataset(uri).core.manifest
    out = []
    for e in indices_of(manifest, system=True):
        bitmap = sorted(BitMap.deserialize(e.pb.fragment_bitmap)) if e.pb.fragment_bitmap else None
        versions = None
        if e.is_system:
            details = table_pb2.FragmentReuseIndexDetails.FromString(e.details)
            versions = [
                (
                    v.dataset_version,
                    [
                        (
                            [(f.id, f.physical_rows, f.num_deleted_rows) for f in g.old_fragments],
                            [(f.id, f.physical_rows) for f in g.new_fragments],
                            bytes(g.changed_row_addrs),
                        )
                        for g in v.groups
                    ],
                )
                for v in details.inline.versions
            ]
        out.append((e.name, bitmap, e.pb.dataset_version, versions))
    return manifest.version, [int(f.id) for f in manifest.pb.fragments], sorted(out, key=str)


def _answers(ds: Any) -> tuple[Any, ...]:
    """A filter the BTREE and BITMAP narrow, a vector search and a full-text search."""
    q = np.random.default_rng(5).normal(size=8).astype(np.float32)
    ids = ds.to_table(filter="id in (4, 700, 1501, 2400) or s = 'w3'", columns=["id"])["id"]
    near = ds.to_table(nearest={"column": "v", "q": q, "k": 5}, columns=["id"])
    text = ds.to_table(full_text_query="beta", columns=["id"]).sort_by("id")
    return (
        sorted(ids.to_pylist()),
        near["id"].to_pylist(),
        np.round(near["_distance"].to_numpy(), 4).tolist(),
        text["id"].to_pylist(),
        np.round(text["_score"].to_numpy(), 4).tolist(),
    )


Step = Callable[[Callable[[str], Any], str], Any]
STEPS: list[tuple[str, Step]] = [
    ("deferred", lambda open_, u: open_(u).optimize.compact_files(
        defer_index_remap=True, target_rows_per_fragment=600)),
    ("appends", lambda open_, u: (_append(u, 4), _append(u, 5))),
    ("delete", lambda open_, u: open_(u).delete("id % 7 = 1")),
    ("deferred again", lambda open_, u: open_(u).optimize.compact_files(
        defer_index_remap=True, target_rows_per_fragment=2000)),
    ("optimize_indices", lambda open_, u: open_(u).optimize.optimize_indices()),
    ("more appends", lambda open_, u: (_append(u, 6), _append(u, 7))),
    ("deferred once more", lambda open_, u: open_(u).optimize.compact_files(
        defer_index_remap=True)),
    ("appends again", lambda open_, u: (_append(u, 8), _append(u, 9))),
    ("remapped at once", lambda open_, u: open_(u).optimize.compact_files()),
]  # fmt: skip


@pytest.mark.parametrize("engines", ["quiver", "alternately"])
def test_deferred_remaps_as_pylance_makes_them(tmp_path: Path, engines: str) -> None:
    """Each step through pylance on one dataset and through Quiver (or each engine in
    turn) on its twin: after every step the manifests record the same, and both engines
    answer the same on both."""
    theirs = _indexed(str(tmp_path / "theirs"))
    ours = _indexed(str(tmp_path / "ours"))
    for i, (step, run) in enumerate(STEPS):
        run(lance.dataset, theirs)
        quiver_turn = engines == "quiver" or i % 2 == 0
        run(dataset if quiver_turn else lance.dataset, ours)
        assert _state(ours) == _state(theirs), step
        expected = _answers(lance.dataset(theirs))
        for uri in (ours, theirs):
            for open_ in (lance.dataset, dataset):
                assert _answers(open_(uri)) == expected, (step, uri, open_)


@pytest.mark.filterwarnings("ignore:The .list_indices. method is deprecated")
def test_pylance_s_deferred_compaction_is_read_with_its_indices(tmp_path: Path) -> None:
    """A dataset pylance compacted without remapping its indices: Quiver narrows filters
    with them and searches them (pylance's approximate answers, not exact ones), lists the
    reuse index as pylance does and moves row addresses as pylance's `remap_row_addrs`."""
    uri = _indexed(str(tmp_path / "d"))
    lance.dataset(uri).optimize.compact_files(defer_index_remap=True)
    theirs, ours = lance.dataset(uri), dataset(uri)
    plan = ours.scanner(filter="id in (4, 700)", columns=["id"]).explain_plan(True)
    assert "narrowed by id_idx" in plan
    assert _answers(ours) == _answers(theirs)
    assert ours.list_indices() == [
        {**i, "fragment_ids": set(i["fragment_ids"])} for i in theirs.list_indices()
    ]
    assert [d.name for d in ours.describe_indices()] == [d.name for d in theirs.describe_indices()]
    assert ours.index_statistics("__lance_frag_reuse") == {"num_versions": 1}
    addrs = pa.array([0, 1, 5, None, (1 << 32) + 3, (2 << 32) + 299, (4 << 32) + 7], pa.uint64())
    assert ours.remap_row_addrs(addrs).equals(theirs.remap_row_addrs(addrs))
    with pytest.raises(InvalidInputError):
        ours.remap_row_addrs(["x"])


def test_large_reuse_details_live_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 200 KiB of moves the versions go to `details.binpb` in the reuse index's folder:
    Quiver reads pylance's (two million rows), pylance reads Quiver's (the limit lowered
    to write a small one so), and each engine answers through the other's."""
    from quiver.format.table import frag_reuse
    from quiver.format.table.indices import frag_reuse_of

    monkeypatch.setattr(frag_reuse, "INLINE_LIMIT", 100)
    sizes = {"ours": 3_000, "theirs": 500_000}
    for name, rows in sizes.items():
        uri = str(tmp_path / name)
        for i in range(4):
            ids = pa.table({"id": pa.array(np.arange(i * rows, (i + 1) * rows))})
            lance.write_dataset(ids, uri, mode="append" if i else "create")
        lance.dataset(uri).create_scalar_index("id", "BTREE")
        lance.dataset(uri).delete("id % 3 = 0")
        (dataset if name == "ours" else lance.dataset)(uri).optimize.compact_files(
            defer_index_remap=True
        )
        reuse = frag_reuse_of(dataset(uri).core.manifest)
        details = table_pb2.FragmentReuseIndexDetails.FromString(reuse.pb.index_details.value)
        assert details.WhichOneof("content") == "external"
        path = Path(uri) / "_indices" / reuse.uuid / details.external.path
        assert path.stat().st_size == details.external.size
        assert [len(v.groups) for v in reuse.versions] == [1]
        wanted = [4, rows + 2, 4 * rows - 1]
        sql = f"id in (3, {', '.join(map(str, wanted))})"
        for open_ in (lance.dataset, dataset):
            assert sorted(open_(uri).to_table(filter=sql)["id"].to_pylist()) == wanted
            assert "narrowed by id_idx" in dataset(uri).scanner(filter=sql).explain_plan()
        # a shallow clone reads the file in its source (the index's base path)
        clone = str(tmp_path / f"{name}-clone")
        lance.dataset(uri).shallow_clone(clone, lance.dataset(uri).version)
        assert frag_reuse_of(dataset(clone).core.manifest) is not None
        assert sorted(dataset(clone).to_table(filter=sql)["id"].to_pylist()) == wanted
        assert "narrowed by id_idx" in dataset(clone).scanner(filter=sql).explain_plan()


def test_deferring_is_refused_with_stable_row_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "d")
    for i in range(3):
        _append(uri, i, enable_stable_row_ids=True)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    version = lance.dataset(uri).version
    with pytest.raises(UnsupportedFeatureError, match="stable row ids"):
        dataset(uri).optimize.compact_files(defer_index_remap=True)
    assert lance.dataset(uri).version == version


def test_a_deferred_compaction_racing_another_is_retried(tmp_path: Path) -> None:
    """Two deferred compactions of different fragments read on one version: one commits,
    the other is refused as retryable (its reuse index would lose the first's moves) and
    commits when run again on the new version, both moves recorded."""
    uri = _indexed(str(tmp_path / "d"))
    first, second = dataset(uri), dataset(uri)
    first.optimize.compact_files(defer_index_remap=True, excluded_fragment_ids=[2, 3])
    with pytest.raises(CommitConflictError) as refused:
        second.optimize.compact_files(defer_index_remap=True, excluded_fragment_ids=[0, 1])
    assert refused.value.retryable
    dataset(uri).optimize.compact_files(defer_index_remap=True, excluded_fragment_ids=[4])
    versions = _state(uri)[2][0][3]
    assert [len(groups) for _, groups in versions] == [1, 1]
    assert _answers(dataset(uri)) == _answers(lance.dataset(uri))


def test_deferred_compactions_beside_readers(tmp_path: Path) -> None:
    """Searches running while deferred compactions commit answer as their version did."""
    uri = _indexed(str(tmp_path / "d"))
    before = _answers(dataset(uri))
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(5):
                ds = dataset(uri)
                assert _answers(ds) == _answers(lance.dataset(uri, version=ds.version))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    reader = threading.Thread(target=read)
    reader.start()
    dataset(uri).optimize.compact_files(defer_index_remap=True, target_rows_per_fragment=600)
    reader.join()
    assert not errors
    assert _answers(dataset(uri)) == before


@pytest.mark.xfail(strict=True, reason="pylance 14 bug: a compaction that remaps at once after "
                   "a deferred one leaves the BTREE's rows at their pre-deferred addresses "
                   "(pylance's own indexed reads then miss rows; Quiver's compaction applies "
                   "the recorded moves first: see the next test)")  # fmt: skip
def test_pylance_remapping_after_a_deferred_compaction(tmp_path: Path) -> None:
    uri = _deferred_then_remapped(tmp_path, lance.dataset)
    theirs = lance.dataset(uri)
    assert _rows(theirs, "s = 'w2'") == _rows(theirs, "s = 'w2'", use_scalar_index=False)


def test_quiver_remapping_after_a_deferred_compaction(tmp_path: Path) -> None:
    uri = _deferred_then_remapped(tmp_path, dataset)
    expected = _rows(lance.dataset(uri), "s = 'w2'", use_scalar_index=False)
    assert _rows(lance.dataset(uri), "s = 'w2'") == expected
    assert _rows(dataset(uri), "s = 'w2'") == expected


def _deferred_then_remapped(tmp_path: Path, open_: Callable[[str], Any]) -> str:
    """A BTREE, a deferred compaction, deletes, then a compaction (by `open_`'s engine)
    that remaps at once the fragment the deferred one wrote."""
    uri = str(tmp_path / "d")
    for i in range(4):
        _append(uri, i)
    lance.dataset(uri).create_scalar_index("s", "BTREE")
    lance.dataset(uri).delete("id % 3 = 0")
    lance.dataset(uri).optimize.compact_files(defer_index_remap=True, target_rows_per_fragment=500)
    lance.dataset(uri).delete("id % 5 = 1")
    open_(uri).optimize.compact_files(target_rows_per_fragment=10_000)
    return uri


def _rows(ds: Any, sql: str, **kw: Any) -> list[int]:
    return sorted(ds.to_table(filter=sql, columns=["id"], **kw)["id"].to_pylist())

"""INVERTED indices built apart, as pylance 14 builds them: `create_scalar_index(...,
fragment_ids=, index_uuid=)` stages a partition per call, `merge_index_metadata` merges the
staged partitions into the index's files, and a `LanceOperation.CreateIndex` of no details
commits it. Either engine stages, merges and commits, in every mix: both engines answer
every query as over pylance's own index built at once; the staged files are named as
pylance names them; the index then takes appends, `optimize_indices` and compaction."""

from __future__ import annotations

import importlib
import uuid
from pathlib import Path

import lance
import pytest
from fulltext_corpus import QUERIES, assert_same_answers, search, text_table

import quiver.format.dataset as qfd
from quiver.format.dataset import dataset
from quiver.format.errors import InvalidInputError

pytestmark = pytest.mark.compat
ENGINES = {"pylance": lance, "quiver": qfd}
GROUPS = ([1, 2], [3, 0], [4])


def _build_apart(path: str, stager: str, merger: str, committer: str, **options: object) -> str:
    """Stage GROUPS, merge, commit: the index's uuid."""
    index_uuid = str(uuid.uuid4())
    for group in GROUPS:
        ENGINES[stager].dataset(path).create_scalar_index(
            "text", "INVERTED", fragment_ids=group, index_uuid=index_uuid, **options
        )
    ENGINES[merger].dataset(path).merge_index_metadata(index_uuid, "INVERTED")
    ds = ENGINES[committer].dataset(path)
    index = importlib.import_module("lance.dataset").Index(
        uuid=index_uuid,
        name="text_idx",
        fields=[1],
        dataset_version=ds.version,
        fragment_ids={0, 1, 2, 3, 4},
        index_version=0,
    )
    if committer == "pylance":
        op = lance.LanceOperation.CreateIndex(new_indices=[index], removed_indices=[])
        lance.LanceDataset.commit(path, op, read_version=ds.version)
    else:
        op = qfd.LanceOperation.CreateIndex(new_indices=[index], removed_indices=[])
        qfd.commit(path, op, read_version=ds.version)
    return index_uuid


def _same_as_built_at_once(path: str, reference: str, what: str) -> None:
    want_of = lance.dataset(reference)
    for query in QUERIES:
        for extra in ({}, {"limit": 5}):
            want = search(want_of, full_text_query=query, **extra)
            for engine in (lance, qfd):
                got = search(engine.dataset(path), full_text_query=query, **extra)
                assert_same_answers(want, got, f"{what} {engine.__name__} {query!r} {extra}")


@pytest.mark.parametrize(
    ("stager", "merger", "committer"),
    [
        ("pylance", "quiver", "pylance"),
        ("quiver", "pylance", "pylance"),
        ("quiver", "quiver", "quiver"),
        ("pylance", "quiver", "quiver"),
    ],
)
@pytest.mark.parametrize("positions", [False, True], ids=["plain", "positions"])
def test_built_apart_answers_as_built_at_once(
    tmp_path: Path, stager: str, merger: str, committer: str, positions: bool
) -> None:
    table = text_table(1500, 61)
    reference, path = str(tmp_path / "reference"), str(tmp_path / "apart")
    for target in (reference, path):
        lance.write_dataset(table, target, max_rows_per_file=300)
    lance.dataset(reference).create_scalar_index("text", "INVERTED", with_position=positions)
    index_uuid = _build_apart(path, stager, merger, committer, with_position=positions)
    # committed without details, the index is listed as pylance lists it
    [listed] = lance.dataset(path).list_indices()
    assert listed["uuid"] == index_uuid
    assert dataset(path).list_indices() == lance.dataset(path).list_indices()
    _same_as_built_at_once(path, reference, f"{stager}/{merger}/{committer}")
    # the index then grows and moves as any other
    for target in (reference, path):
        lance.write_dataset(text_table(200, 62, start=1500), target, mode="append")
    dataset(path).optimize.optimize_indices()
    lance.dataset(reference).optimize.optimize_indices()
    _same_as_built_at_once(path, reference, "optimized")
    dataset(path).optimize.compact_files(target_rows_per_fragment=100_000)
    lance.dataset(reference).optimize.compact_files(target_rows_per_fragment=100_000)
    _same_as_built_at_once(path, reference, "compacted")


def test_staged_files_are_named_as_pylance_names_them(tmp_path: Path) -> None:
    names = {}
    for engine in ("pylance", "quiver"):
        path = tmp_path / engine
        lance.write_dataset(text_table(600, 63), str(path), max_rows_per_file=200)
        index_uuid = str(uuid.uuid4())
        for group in ([2], [0, 1]):
            ENGINES[engine].dataset(str(path)).create_scalar_index(
                "text", "INVERTED", fragment_ids=group, index_uuid=index_uuid
            )
        names[engine] = sorted(
            p.name for p in (path / "_indices" / index_uuid / "staging").iterdir()
        )
        assert len(lance.dataset(str(path)).list_indices()) == 0  # nothing committed
    assert names["quiver"] == names["pylance"]
    assert "part_8589934592_invert.lance" in names["quiver"]  # fragment 2, shifted 32 bits
    # fragment ids given as any iterable, a generator too
    index_uuid = str(uuid.uuid4())
    dataset(str(tmp_path / "quiver")).create_scalar_index(
        "text", "INVERTED", fragment_ids=(f for f in [1]), index_uuid=index_uuid
    )
    staged = tmp_path / "quiver" / "_indices" / index_uuid / "staging"
    assert (staged / "part_4294967296_invert.lance").exists()


def test_bad_distributed_builds_are_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    lance.write_dataset(text_table(400, 64), path, max_rows_per_file=200)
    ours = dataset(path)
    index_uuid = str(uuid.uuid4())
    with pytest.raises(InvalidInputError, match="no staged INVERTED partitions"):
        ours.merge_index_metadata(index_uuid, "INVERTED")
    with pytest.raises(InvalidInputError, match="create_index_uncommitted"):
        ours.merge_index_metadata(index_uuid, "BTREE")
    with pytest.raises(InvalidInputError, match="not a UUID"):
        ours.merge_index_metadata("nope", "INVERTED")
    with pytest.raises(InvalidInputError, match="fragment 9 is not in version"):
        ours.create_scalar_index("text", "INVERTED", fragment_ids=[9], index_uuid=index_uuid)
    with pytest.raises(InvalidInputError, match="create_index_uncommitted"):
        ours.create_scalar_index("id", "BTREE", fragment_ids=[0])
    ours.create_scalar_index("text", "INVERTED", fragment_ids=[0], index_uuid=index_uuid)
    ours.create_scalar_index(
        "text", "INVERTED", fragment_ids=[1], index_uuid=index_uuid, stem=False
    )
    with pytest.raises(InvalidInputError, match="different tokenizer options"):
        ours.merge_index_metadata(index_uuid, "INVERTED")


@pytest.mark.parametrize(("stager", "merger"), [("quiver", "quiver"), ("pylance", "quiver")])
def test_wide_blocks_built_apart(tmp_path: Path, stager: str, merger: str) -> None:
    """256-document posting blocks staged and merged apart answer as an index built at once
    (pylance's), by either engine."""
    table = text_table(1500, 65)
    reference, path = str(tmp_path / "reference"), str(tmp_path / "apart")
    for target in (reference, path):
        lance.write_dataset(table, target, max_rows_per_file=300)
    lance.dataset(reference).create_scalar_index(
        "text", "INVERTED", block_size=256, with_position=True
    )
    _build_apart(path, stager, merger, "quiver", block_size=256, with_position=True)
    _same_as_built_at_once(path, reference, f"wide {stager}/{merger}")

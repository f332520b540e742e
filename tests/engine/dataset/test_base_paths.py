"""Shallow clones: data and deletion files resolved through the manifest's base paths."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from quiver.format.dataset import dataset


@pytest.mark.parametrize("storage_version", ["legacy", "2.0"])
def test_shallow_clone_reads_through_base_paths(tmp_path: Path, storage_version: str):
    t = pa.table({"a": list(range(10)), "s": [f"v{i}" for i in range(10)]})
    src = lance.write_dataset(
        t, str(tmp_path / "src"), data_storage_version=storage_version, max_rows_per_file=4
    )
    src.delete("a = 1 OR a = 6")
    clone_uri = str(tmp_path / "clone")
    src.shallow_clone(clone_uri, src.version)
    lance.write_dataset(t.slice(0, 3), clone_uri, mode="append")
    ours, ref = dataset(clone_uri), lance.dataset(clone_uri)
    assert len(ours.manifest.pb.base_paths) == 1
    assert any(f.files[0].HasField("base_id") for f in ours.manifest.pb.fragments)
    for kwargs in ({}, {"with_row_id": True}, {"filter": "a > 2"}):
        assert ours.to_table(**kwargs) == ref.to_table(**kwargs), kwargs
    assert ours.take([0, 7, 3]) == ref.take([0, 7, 3])


@pytest.mark.parametrize("storage_version", ["legacy", "2.0"])
def test_our_shallow_clone_is_read_and_extended_by_pylance(tmp_path: Path, storage_version: str):
    from quiver.format.dataset import write_dataset

    t = pa.table({"a": list(range(10)), "s": [f"v{i}" for i in range(10)]})
    src_uri = str(tmp_path / "src")
    write_dataset(t, src_uri, data_storage_version=storage_version, max_rows_per_file=4)
    src = dataset(src_uri)
    src.delete("a = 2")
    src.tags.create("snap", 2)
    write_dataset(t.slice(0, 2), src_uri, mode="append")  # the clone must not see this
    clone_uri = str(tmp_path / "clone")
    clone = dataset(src_uri).shallow_clone(clone_uri, "snap")
    assert clone.version == 2
    expected = lance.dataset(src_uri, version=2).to_table()
    assert lance.dataset(clone_uri).to_table() == expected
    lance.write_dataset(t.slice(5, 1), clone_uri, mode="append")
    write_dataset(t.slice(6, 1), clone_uri, mode="append")
    dataset(clone_uri).delete("a = 0")
    ref = lance.dataset(clone_uri)
    assert ref.version == 5
    assert ref.to_table() == dataset(clone_uri).to_table()
    assert ref.to_table().column("a").to_pylist() == [1, 3, 4, 5, 6, 7, 8, 9, 5, 6]
    assert lance.dataset(src_uri).count_rows() == 11  # the source is untouched
    assert len(list((tmp_path / "clone" / "data").glob("*.lance"))) == 2  # only the appends


def _files(root: Path) -> list[str]:
    """The clone's files by directory (names of data files and indices are random)."""
    return sorted(str(p.parent.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("source_kind", ["plain", "shallow clone", "branch"])
def test_deep_clone_is_pylance_s_and_stands_alone(tmp_path: Path, source_kind: str):
    """A deep clone of a version with deletions and an index, from a plain dataset, from a
    shallow clone (its files behind a base path) and from a branch: the same version,
    rows, indices and files as pylance's deep clone, readable once the source is gone."""
    import shutil

    from quiver.format.dataset import write_dataset

    src = str(tmp_path / "src")
    write_dataset(pa.table({"a": list(range(300))}), src, max_rows_per_file=100)
    dataset(src).delete("a < 5")
    dataset(src).create_scalar_index("a", "BTREE")
    if source_kind == "shallow clone":
        dataset(src).shallow_clone(str(tmp_path / "shallow"))
        src = str(tmp_path / "shallow")
        write_dataset(pa.table({"a": [500]}), src, mode="append")
    reference = None
    if source_kind == "branch":
        write_dataset(pa.table({"a": [600]}), dataset(src).create_branch("dev"), mode="append")
        reference = ("dev", None)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    clone = dataset(src).deep_clone(str(mine), reference)
    expected = lance.dataset(src).deep_clone(str(theirs), reference)
    assert clone.version == expected.version
    assert _files(mine) == _files(theirs)
    shutil.rmtree(tmp_path / "src")
    if source_kind == "shallow clone":
        shutil.rmtree(tmp_path / "shallow")
    for uri in (mine, theirs):
        for reader in (dataset, lance.dataset):
            got = reader(str(uri))
            assert got.to_table() == lance.dataset(str(theirs)).to_table()
            assert got.to_table(filter="a = 7").num_rows == 1
    assert [i["name"] for i in lance.dataset(str(mine)).list_indices()] == ["a_idx"]

"""Branches: created, written, tagged, cleaned up and deleted by Quiver and by pylance in
turn, each engine reading what the other wrote (`_refs/branches/`, `tree/{name}/`)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from compare import assert_same_table

from quiver.format.dataset import dataset, write_dataset
from quiver.format.errors import (
    BranchNotFoundError,
    CommitConflictError,
    DatasetAlreadyExistsError,
    InvalidInputError,
)
from quiver.format.proto import transaction_pb2
from quiver.format.table import versions as _versions
from quiver.format.table.indices import index_section


def _rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "s": [f"v{i}" for i in range(start, start + n)],
        }
    )


def _base(path: Path) -> str:
    """A dataset of three versions with a BTREE index over `id`: create, index, append."""
    uri = str(path / "t.lance")
    lance.write_dataset(_rows(0, 300), uri, max_rows_per_file=100)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    lance.write_dataset(_rows(300, 50), uri, mode="append")
    return uri


def _same(uri: str, reference: object, message: str) -> None:
    """The version `reference` names reads the same in both engines, whole and filtered
    through the index."""
    ours = dataset(uri).checkout_version(reference)
    ref = lance.dataset(uri).checkout_version(reference)
    assert ours.version == ref.version, message
    assert_same_table(ours.to_table(), ref.to_table(), message)
    got = ours.to_table(filter="id >= 5 AND id < 9")
    assert_same_table(got, ref.to_table(filter="id >= 5 AND id < 9"), message)
    assert ours.scanner(filter="id = 5").index_pruning is not None, message


def test_branches_written_by_both_engines_in_turn(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    dev = dataset(uri).create_branch("dev", 2)  # Quiver branches from version 2
    assert (dev.version, dev.uri) == (2, f"{uri}/tree/dev")
    lance.write_dataset(
        _rows(1000, 10), lance.dataset(uri).checkout_version(("dev", None)), mode="append"
    )
    dataset(uri).checkout_version(("dev", None)).delete("id < 20")
    feat = lance.dataset(uri).checkout_version(("dev", 4)).create_branch("feat/x")
    assert feat.version == 4
    write_dataset(_rows(2000, 5), dataset(uri).checkout_version(("feat/x", None)), mode="append")
    lance.dataset(uri).checkout_version(("feat/x", None)).delete("id = 2001")
    for reference in [
        ("dev", 2),
        ("dev", 3),
        ("dev", 4),
        ("feat/x", 4),
        ("feat/x", 5),
        ("feat/x", 6),
        ("main", 3),
        (None, None),
    ]:
        _same(uri, reference, str(reference))
    # the main line never saw the branches' writes; every version reads alike
    assert dataset(uri).version == 3 and dataset(uri).count_rows() == 350
    assert dataset(uri).checkout_version(("feat/x", None)).count_rows() == 300 + 10 - 20 + 4
    ours, ref = dataset(uri).branches.list(), lance.dataset(uri).branches.list()
    assert ours.keys() == ref.keys() == {"dev", "feat/x"}
    for name in ours:
        mine, theirs = ours[name], ref[name]
        for key in ("parent_branch", "parent_version", "manifest_size", "metadata"):
            assert mine[key] == theirs[key], (name, key)
        assert [v for v, _ in mine["branch_identifier"]] == [
            v for v, _ in theirs["branch_identifier"]
        ]
    lineage = ours["feat/x"]["branch_identifier"]
    assert lineage[0] == ours["dev"]["branch_identifier"][0] and len(lineage) == 2


def test_a_branch_s_first_manifest_is_pylance_s(tmp_path: Path) -> None:
    """The same branch made by each engine from two datasets made alike: same base paths,
    file bases, index entries, transaction and ref (ids and times aside)."""
    uri, other = _base(tmp_path / "q"), _base(tmp_path / "p")
    for root in (uri, other):
        lance.dataset(root).create_branch("dev", 2)
        dev = lance.dataset(root).checkout_version(("dev", None))
        lance.write_dataset(_rows(500, 3), dev, mode="append")
    dataset(uri).checkout_version(("dev", 3)).create_branch("b/c")
    lance.dataset(other).checkout_version(("dev", 3)).create_branch("b/c")

    def described(root: str) -> dict:
        m = dataset(root).checkout_version(("b/c", None)).manifest
        base_of = {b.id: b for b in m.pb.base_paths}
        bases = sorted(
            (b.id, b.name, b.is_dataset_root, b.path.replace(root, "<root>"))
            for b in base_of.values()
        )
        section = index_section(m)
        txn = transaction_pb2.Transaction()
        txn.ParseFromString(
            (Path(root) / "tree/b/c/_transactions" / m.pb.transaction_file).read_bytes()
        )
        clone = txn.clone
        ref = json.loads((Path(root) / "_refs/branches/b%2Fc.json").read_text())
        # the size of the manifest branched from, each dataset's own (its timestamps'
        # varints make two manifests written alike differ by a byte or two)
        parent = dataset(root).checkout_version(("dev", 3)).core
        assert ref["manifestSize"] == _versions.find_entry(parent.store, 3).size, root
        return {
            "version": m.version,
            "branch": m.pb.branch,
            "bases": bases,
            "files": [[d.base_id for d in f.files] for f in m.pb.fragments],
            "indices": [(i.name, i.base_id) for i in section.indices],
            "flags": (m.pb.reader_feature_flags, m.pb.writer_feature_flags),
            "clone": (
                clone.is_shallow,
                clone.ref_name,
                clone.ref_version,
                clone.ref_path.replace(root, "<root>"),
                clone.branch_name,
                txn.read_version,
            ),
            "ref": {
                k: v for k, v in ref.items() if k not in ("createAt", "identifier", "manifestSize")
            },
            "lineage": [v for v, _ in ref["identifier"]["version_mapping"]],
            "hint": json.loads(
                (Path(root) / "tree/b/c/_versions/latest_version_hint.json").read_text()
            ),
        }

    assert described(uri) == described(other)


@pytest.mark.parametrize("name", ["", "main", "/a", "a/", "a b", "a..b", "a\\b", "a//b", "x" * 300])
def test_branch_names_both_engines_refuse(tmp_path: Path, name: str) -> None:
    uri = _base(tmp_path)
    with pytest.raises(InvalidInputError):
        dataset(uri).create_branch(name)
    with pytest.raises(Exception):  # noqa: B017 - pylance raises OSError or ValueError
        lance.dataset(uri).create_branch(name)
    assert not (tmp_path / "t.lance" / "_refs" / "branches").exists()


def test_missing_and_existing_branches(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    dataset(uri).create_branch("dev")
    with pytest.raises(DatasetAlreadyExistsError, match="branch 'dev' already exists"):
        dataset(uri).create_branch("dev", 1)
    assert dataset(uri).checkout_version(("dev", None)).version == 3  # the first one stands
    with pytest.raises(BranchNotFoundError, match="branch 'nope' does not exist"):
        dataset(uri).checkout_version(("nope", None))
    with pytest.raises(BranchNotFoundError):
        dataset(uri).branches.delete("nope")
    with pytest.raises(BranchNotFoundError):
        dataset(uri).create_branch("x", ("nope", 1))
    with pytest.raises(InvalidInputError, match="sort order"):
        dataset(uri).branches.list_ordered("sideways")
    assert sorted((tmp_path / "t.lance" / "_refs" / "branches").iterdir()) == [
        tmp_path / "t.lance" / "_refs/branches/dev.json"
    ]


def test_deleting_branches(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    dataset(uri).create_branch("a", 1)
    lance.dataset(uri).create_branch("a/b", 2)  # nested in a's directory, but from main
    write_dataset(_rows(900, 2), dataset(uri).checkout_version(("a/b", None)), mode="append")
    dataset(uri).checkout_version(("a", None)).create_branch("child")
    with pytest.raises(CommitConflictError, match=r"\('child', 1\)"):
        dataset(uri).branches.delete("a")
    lance.dataset(uri).branches.delete("child")
    dataset(uri).branches.delete("a")
    assert set(lance.dataset(uri).branches.list()) == {"a/b"}
    assert not (tmp_path / "t.lance/tree/a/_versions").exists()
    _same(uri, ("a/b", None), "a/b after a was deleted")
    dataset(uri).branches.delete("a/b")
    assert not (tmp_path / "t.lance/tree").exists() or not any(
        (tmp_path / "t.lance/tree").iterdir()
    )
    # a name can be used again: a new branch, with a new identity
    first = lance.dataset(uri).create_branch("a", 3)
    assert first.version == 3
    _same(uri, ("a", None), "a recreated")


def test_tags_on_branches(tmp_path: Path) -> None:
    uri = _base(tmp_path)
    dev = dataset(uri).create_branch("dev")
    write_dataset(_rows(700, 4), dev, mode="append")
    dataset(uri).tags.create("ours", ("dev", 4))
    lance.dataset(uri).tags.create("theirs", ("dev", 3))
    dataset(uri).checkout_version(("dev", None)).tags.create("plain", 3)  # a number on dev
    for tag, version in (("ours", 4), ("theirs", 3), ("plain", 3)):
        assert lance.dataset(uri).tags.list()[tag]["branch"] == "dev"
        assert dataset(uri).tags.list()[tag]["branch"] == "dev"
        assert_same_table(
            dataset(uri, version=tag).to_table(), lance.dataset(uri, version=tag).to_table(), tag
        )
        assert dataset(uri, version=tag).version == version
    assert (
        dataset(uri).tags.list()["plain"]["manifest_size"]
        == lance.dataset(uri).tags.list()["theirs"]["manifest_size"]
    )
    dataset(uri).tags.update("plain", ("main", 1))
    assert lance.dataset(uri, version="plain").count_rows() == 300
    dataset(uri).branches.replace_metadata("dev", {"owner": "me"})
    assert lance.dataset(uri).branches.list()["dev"]["metadata"] == {"owner": "me"}


def test_cleaning_up_a_branch(tmp_path: Path) -> None:
    """The same cleanup of a branch by each engine, on two datasets made alike: the same
    versions and files go; the version a child branch came from, and the main line, stay."""
    mine, theirs = tmp_path / "q", tmp_path / "p"
    uri, other = _base(mine), _base(theirs)
    for root in (uri, other):
        lance.dataset(root).create_branch("dev")
        for i in range(4):
            dev = lance.dataset(root).checkout_version(("dev", None))
            lance.write_dataset(_rows(800 + i, 1), dev, mode="append")
        lance.dataset(root).checkout_version(("dev", None)).delete("id < 10")
        lance.dataset(root).checkout_version(("dev", 5)).create_branch("kid")
    ours = (
        dataset(uri)
        .checkout_version(("dev", None))
        .cleanup_old_versions(older_than=dt.timedelta(0))
    )
    ref = (
        lance.dataset(other)
        .checkout_version(("dev", None))
        .cleanup_old_versions(older_than=dt.timedelta(0))
    )
    assert ours.old_versions == ref.old_versions == 4
    assert ours.bytes_removed == pytest.approx(ref.bytes_removed, abs=16)

    def files(root: Path) -> list[tuple[str, int]]:
        """The files left by directory and size (file and index names are random, and
        transactions and manifests vary by a byte or two from run to run)."""
        left = [p for p in root.rglob("*") if p.is_file()]
        where = [re.sub(r"[0-9a-f-]{36}", "<uuid>", str(p.parent.relative_to(root))) for p in left]
        varying = {"_transactions", "_versions"}
        sizes = [0 if varying & set(p.parts) else p.stat().st_size for p in left]
        return sorted(zip(where, sizes, strict=True))

    assert files(mine) == files(theirs)
    assert [
        v["version"] for v in lance.dataset(uri).checkout_version(("dev", None)).versions()
    ] == [5, 8]
    for reference in (("dev", None), ("kid", None), ("main", None)):
        _same(uri, reference, f"{reference} after the cleanup")
    assert _versions.list_branches(dataset(uri).core.store).keys() == {"dev", "kid"}

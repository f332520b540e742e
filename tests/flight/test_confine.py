"""The root confinement's own path resolution agrees with `os.path.realpath`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quiver.flight_server.confine import _real_path_below, check_dataset_dir
from quiver.flight_server.errors import PermissionDenied


@pytest.fixture
def tree(tmp_path: Path) -> tuple[str, str]:
    """A root reached through a link, holding plain directories, links inside and out."""
    real_root, outside = tmp_path / "real-root", tmp_path / "outside"
    for d in ("a.lance/data", "team/b.lance", "team/deep/c.lance", "file"):
        (real_root / d).mkdir(parents=True)
    (outside / "x.lance").mkdir(parents=True)
    os.symlink(real_root / "a.lance", real_root / "alias.lance")  # inside
    os.symlink(outside, real_root / "out")  # a directory leading out
    os.symlink(outside / "x.lance", real_root / "team" / "x.lance")  # a dataset leading out
    os.symlink("../team", real_root / "team" / "deep" / "up")  # relative, inside
    os.symlink(real_root, tmp_path / "root")
    return str(tmp_path / "root"), str(real_root)


@pytest.mark.parametrize(
    "rel",
    [
        "a.lance",
        "alias.lance",
        "team/b.lance",
        "team/deep/c.lance",
        "team/deep/up/b.lance",
        "team/x.lance",
        "out/x.lance",
        "out/missing.lance",
        "missing.lance",
        "missing/deeper.lance",
        "a.lance/data/none",
    ],
)
def test_resolution_matches_realpath(tree: tuple[str, str], rel: str) -> None:
    root, real_root = tree
    for r in (root, root + "/"):
        path = f"{r.rstrip('/')}/{rel}"
        assert _real_path_below(r, real_root, path) == os.path.realpath(path)


def test_links_out_are_refused_and_links_in_served(tree: tuple[str, str]) -> None:
    root, _ = tree
    for rel in ("a.lance", "alias.lance", "team/deep/up/b.lance", "new.lance"):
        check_dataset_dir(root, f"{root}/{rel}", rel)
    for rel in ("team/x.lance", "out/x.lance", "out/new.lance"):
        with pytest.raises(PermissionDenied, match="outside the server's root"):
            check_dataset_dir(root, f"{root}/{rel}", rel)

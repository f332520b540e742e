"""Dataset names: validation (before any storage access), URIs under the root, discovery.

A name is one or more ``/``-separated segments of ``[A-Za-z0-9_.-]`` (at most 249 each,
1024 in all, 16 levels deep); ``.`` and ``..``
segments, empty segments (so leading, trailing and doubled ``/``), and any other character
(``%``, NUL, ``\\``, spaces, non-ASCII...) are refused. A segment other than the last may
not end in ``.lance`` (that would reach inside another dataset's directory). Dataset
``team/sales`` is the Lance dataset at ``{root}/team/sales.lance``.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from quiver.flight_server.errors import InvalidArgument
from quiver.format.errors import InvalidInputError
from quiver.format.io.store import filesystem
from quiver.format.table.versions import check_branch_name

log = logging.getLogger("quiver.names")

SUFFIX = ".lance"
MAX_NAME_LENGTH = 1024
# a directory name holds 255 bytes at most, and the last segment gets ".lance"
MAX_SEGMENT_LENGTH = 255 - len(SUFFIX)
MAX_DEPTH = 16
_SEGMENT = re.compile(r"[A-Za-z0-9_.\-]+")


def _shown(name: object) -> str:
    """A name as quoted in messages: printable ASCII only, shortened."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_name(name: object) -> str:
    """Return `name` if it is a valid dataset name; InvalidArgument (one line) otherwise."""
    if not isinstance(name, str):
        raise InvalidArgument(f"dataset name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidArgument("dataset name is empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgument(f"dataset name is longer than {MAX_NAME_LENGTH} characters")
    if name.startswith("/") or name.endswith("/"):
        raise InvalidArgument(f"invalid dataset name {_shown(name)}: leading or trailing '/'")
    segments = name.split("/")
    if len(segments) > MAX_DEPTH:
        raise InvalidArgument(f"invalid dataset name {_shown(name)}: more than {MAX_DEPTH} levels")
    for i, seg in enumerate(segments):
        if not seg:
            raise InvalidArgument(f"invalid dataset name {_shown(name)}: empty segment")
        if seg in (".", ".."):
            raise InvalidArgument(f"invalid dataset name {_shown(name)}: '.' or '..' segment")
        if not _SEGMENT.fullmatch(seg):
            raise InvalidArgument(
                f"invalid dataset name {_shown(name)}: segments may only use A-Z a-z 0-9 _ . -"
            )
        if len(seg) > MAX_SEGMENT_LENGTH:
            raise InvalidArgument(
                f"invalid dataset name {_shown(name)}: a segment of {len(seg)} characters "
                f"(at most {MAX_SEGMENT_LENGTH})"
            )
        if i < len(segments) - 1 and seg.endswith(SUFFIX):
            raise InvalidArgument(
                f"invalid dataset name {_shown(name)}: only the last segment may end in '.lance'"
            )
    return name


class DatasetName(str):
    """A validated dataset name, on one of the dataset's branches when `branch` is set.

    It is the name everywhere a name is used (rights, metrics, logs, JSON), so every
    request path serves a branch unchanged; `DatasetHandles.uri` sends it to the branch's
    directory. Two names on different branches are different keys (a cached plan of
    version 3 of the main line is not version 3 of a branch).
    """

    branch: str | None

    def __new__(cls, name: str, branch: str | None = None) -> DatasetName:
        out = super().__new__(cls, name)
        out.branch = branch or None
        return out

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True and getattr(other, "branch", None) == self.branch

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((str(self), self.branch)) if self.branch else str.__hash__(self)

    def __repr__(self) -> str:
        shown = str.__repr__(self)
        return f"{shown} (branch {self.branch!r})" if self.branch else shown

    def __reduce__(self) -> tuple[Any, ...]:
        return (DatasetName, (str(self), self.branch))


def on_branch(name: str, branch: object) -> DatasetName:
    """`name` (validated) on `branch` (a branch name, or None for the main line)."""
    if branch is None:
        return DatasetName(validate_name(name))
    if not isinstance(branch, str):
        raise InvalidArgument(f"branch must be a string, not {type(branch).__name__}")
    if branch == "main":
        return DatasetName(validate_name(name))
    try:
        check_branch_name(branch)
    except InvalidInputError as e:
        raise InvalidArgument(str(e)) from None
    return DatasetName(validate_name(name), branch)


def branch_of(name: str) -> dict[str, str]:
    """The branch field of a signed token for `name`: {"b": branch}, or {} on the main line."""
    branch = getattr(name, "branch", None)
    return {"b": branch} if branch else {}


def name_from_path(path: Sequence[bytes | str]) -> str:
    """The dataset name of a PATH descriptor: its elements joined with '/' (then validated)."""
    if not path:
        raise InvalidArgument("PATH descriptor is empty; expected the dataset name")
    parts = []
    for p in path:
        if isinstance(p, bytes):
            try:
                p = p.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgument("PATH descriptor element is not UTF-8") from None
        parts.append(p)
    return validate_name("/".join(parts))


def normalize_root(root: str) -> str:
    """The storage root as a URI or absolute local path, without a trailing '/'."""
    root = str(root).strip()
    if not root:
        raise ValueError("the storage root is empty")
    if "://" in root:
        scheme, rest = root.split("://", 1)
        if scheme == "file":
            return os.path.abspath(rest or "/").rstrip("/") or "/"
        return f"{scheme}://{rest.rstrip('/')}"
    return os.path.abspath(os.path.expanduser(root)).rstrip("/") or "/"


def dataset_uri(root: str, name: str) -> str:
    """Where dataset `name` lives: ``{root}/{name}.lance`` (the name is validated first)."""
    validate_name(name)
    return f"{root.rstrip('/')}/{name}{SUFFIX}"


@dataclass(frozen=True)
class Found:
    """A dataset directory found under the root."""

    name: str
    uri: str


def discover(
    root: str,
    storage_options: dict[str, Any] | None = None,
    prefix: str = "",
    *,
    holding: str = "_versions",
) -> list[Found]:
    """Every dataset under the root (directories ``*.lance`` holding ``_versions``), by name.

    Directories whose names are not valid segments are skipped, as is the inside of every
    dataset. `prefix` keeps only names starting with it; `holding` names the subdirectory a
    dataset directory must have (the staging sweep also looks at never-committed ones).
    """
    fs, base = filesystem(root, storage_options)
    if isinstance(fs, LocalFileSystem):
        base = os.path.abspath(base)
    base = base.rstrip("/")
    out: list[Found] = []
    stack: list[tuple[str, list[str]]] = [(base, [])]
    while stack:
        path, segments = stack.pop()
        try:
            entries = fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        for e in entries:
            if e.get("type") != "directory":
                continue
            seg = posixpath.basename(str(e["name"]).rstrip("/"))
            if not _SEGMENT.fullmatch(seg) or seg in (".", ".."):
                continue
            full = f"{path}/{seg}"
            if seg.endswith(SUFFIX) and len(seg) > len(SUFFIX):
                name = "/".join([*segments, seg[: -len(SUFFIX)]])
                try:
                    validate_name(name)
                except InvalidArgument:
                    continue
                if name.startswith(prefix) and _has_dir(fs, f"{full}/{holding}"):
                    out.append(Found(name, f"{root.rstrip('/')}/{name}{SUFFIX}"))
            elif len(segments) + 1 < MAX_DEPTH:
                stack.append((full, [*segments, seg]))
    return sorted(out, key=lambda f: f.name)


def _has_dir(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isdir(path))
    except OSError:
        return False

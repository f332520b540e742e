"""Keeping datasets inside the root: symbolic links that lead out of it are refused.

On a local root, a dataset directory, or a directory on its path, may be a symbolic link;
it is served only when its real path stays inside the root's real path, and the entries of
a dataset directory (``data/``, ``_versions/``...) that are links must stay inside that
dataset's own directory. Deeper links are not followed when files are removed (`cleanup`
and `drop_dataset` remove a link, never what it points to). Object stores have no links.
"""

from __future__ import annotations

import functools
import os
import stat

from quiver.flight_server.errors import PermissionDenied


def _inside(path: str, parent: str) -> bool:
    """Whether real path `path` is `parent` or lies below it (both real, absolute)."""
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def _outside(name: str, what: str, boundary: str) -> PermissionDenied:
    return PermissionDenied(
        f"dataset {name!r}: {what} is a symbolic link leading outside {boundary}; it is not served"
    )


@functools.lru_cache(maxsize=64)
def _real_root(root: str) -> str:
    """The root's real path, resolved once: the root is the operator's, and resolving its
    every component again on each request cost more system calls than the request."""
    return os.path.realpath(root)


def _real_path_below(root: str, real_root: str, path: str) -> str:
    """`os.path.realpath(path)` for a path under `root`, looking only at the components
    below the root (one `lstat` each, where realpath looks at every component of the whole
    path); any symbolic link among them takes the general resolution."""
    prefix = root.rstrip(os.sep) + os.sep
    if not path.startswith(prefix):
        return os.path.realpath(path)
    real = real_root
    parts = path[len(prefix) :].split(os.sep)
    for i, part in enumerate(parts):
        if part in ("", ".", ".."):
            return os.path.realpath(path)
        here = os.path.join(real, part)
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:  # realpath keeps components that do not exist
            return os.path.join(here, *parts[i + 1 :])
        except OSError:
            return os.path.realpath(path)
        if stat.S_ISLNK(mode):
            return os.path.realpath(path)
        real = here
    return real


def inside_root(root: str, path: str) -> bool:
    """Whether local `path` (a path under `root`) resolves inside the root: no symbolic
    link on its way leads out."""
    real_root = _real_root(root)
    return _inside(_real_path_below(root, real_root, path), real_root)


def check_dataset_dir(root: str, path: str, name: str) -> None:
    """Refuse dataset `name` at local `path` when it, a directory on its way from `root`,
    or an entry of the dataset directory resolves outside where it belongs."""
    real_root = _real_root(root)
    real = _real_path_below(root, real_root, path)  # every existing component, and the rest
    if not _inside(real, real_root):
        what = "the dataset directory or a directory on its path"
        raise _outside(name, what, "the server's root")
    try:
        entries = list(os.scandir(real))
    except OSError:  # not there yet (a new dataset) or not a directory
        return
    for entry in entries:
        if entry.is_symlink() and not _inside(os.path.realpath(entry.path), real):
            raise _outside(name, f"its entry {entry.name!r}", "the dataset's directory")

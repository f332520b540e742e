"""Corrupt files as clients see them: which dataset, version, fragment and file to restore.

The engine's `CorruptFileError` names a file by its storage path, which a client must not
see; an operator needs the dataset, version and fragment as well. `data_corrupt` turns it
into a `DataCorrupt` error (code ``data_corrupt``) that names all four, the file relative
to the dataset's directory.
"""

from __future__ import annotations

from collections.abc import Callable

from quiver.flight_server.errors import DataCorrupt
from quiver.format.errors import CorruptFileError
from quiver.format.proto import table_pb2
from quiver.format.table.deletion import deletion_file_path
from quiver.format.table.manifest import parse_manifest_name

_KINDS = {
    "data": "data file",
    "_deletions": "deletion file",
    "_transactions": "transaction file",
    "_versions": "manifest",
    "_refs": "tag file",
    "_indices": "index file",
}


def relative_path(path: str, uri: str) -> str:
    """`path` relative to the dataset directory `uri` (paths outside it: their base name)."""
    for prefix in (uri, f"file://{uri}"):
        if path.startswith(prefix.rstrip("/") + "/"):
            return path[len(prefix.rstrip("/")) + 1 :]
    if "://" not in path and not path.startswith("/"):
        return path  # the engine already named it relative to the dataset
    return path.rstrip("/").rsplit("/", 1)[-1]


def fragment_holding(manifest: table_pb2.Manifest, file: str) -> int | None:
    """The id of the fragment whose data or deletion file is `file` (relative path), if any."""
    for frag in manifest.fragments:
        if any(f"data/{df.path}" == file for df in frag.files):
            return int(frag.id)
        if frag.HasField("deletion_file"):
            d = frag.deletion_file
            bitmap = d.file_type == table_pb2.DeletionFile.BITMAP
            if deletion_file_path(int(frag.id), d.read_version, d.id, bitmap) == file:
                return int(frag.id)
    return None


def data_corrupt(
    exc: CorruptFileError,
    name: str,
    uri: str,
    *,
    version: int | None,
    fragment_id: int | None,
    manifest_of: Callable[[int | None], table_pb2.Manifest | None],
) -> DataCorrupt:
    """The client's error for a corrupt file of dataset `name` (stored at `uri`).

    `version` and `fragment_id` are what the request read, when known; `manifest_of(v)`
    returns that version's manifest (None: the latest) to find the fragment holding the file.
    """
    file = relative_path(exc.path, uri)
    kind = _KINDS.get(file.split("/", 1)[0], "file")
    reason = exc.reason.replace(f"{exc.path}: ", "").replace(exc.path, file)
    if kind == "manifest":
        parsed = parse_manifest_name(file.rsplit("/", 1)[-1])
        version = parsed[0] if parsed is not None else version
        fragment_id = None
    elif fragment_id is None and kind in ("data file", "deletion file"):
        try:
            manifest = manifest_of(version)
        except Exception:  # noqa: BLE001 - the manifest may be what is damaged
            manifest = None
        if manifest is not None:
            fragment_id = fragment_holding(manifest, file)
            version = int(manifest.version) if version is None else version
    where = f"dataset {name!r}"
    if version is not None:
        where += f" version {version}"
    if fragment_id is not None:
        where += f" fragment {fragment_id}"
    details = {"dataset": name, "version": version, "fragment": fragment_id, "file": file}
    return DataCorrupt(
        f"{where}: {kind} {file} is damaged ({reason}); restore it from a backup",
        **{k: v for k, v in details.items() if v is not None},
    )

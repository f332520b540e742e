"""Finding versions: list `_versions/`, resolve latest / a number / a tag / a timestamp.

The latest version is found by listing `_versions/` (the hint file is only a hint). One
directory never mixes the V1 (``{n}.manifest``) and V2 (``{u64::MAX - n:020}.manifest``)
naming schemes.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from dataclasses import dataclass

from quiver.format.errors import (
    BranchNotFoundError,
    CorruptFileError,
    DatasetNotFoundError,
    InvalidInputError,
    TagNotFoundError,
    VersionNotFoundError,
)
from quiver.format.io.store import ObjectStore
from quiver.format.table.manifest import (
    Manifest,
    decode_manifest,
    manifest_name,
    parse_manifest_name,
)

VERSIONS_DIR = "_versions"
TAGS_DIR = "_refs/tags"
BRANCHES_DIR = "_refs/branches"
TREE_DIR = "tree"


@dataclass(frozen=True)
class ManifestEntry:
    """A manifest file found in `_versions/`."""

    version: int
    name: str
    size: int
    v2: bool
    mtime: float | None = None  # as listed (None when found by name)

    @property
    def path(self) -> str:
        """Path relative to the dataset root."""
        return f"{VERSIONS_DIR}/{self.name}"


def list_manifests(store: ObjectStore) -> dict[int, ManifestEntry]:
    """Every committed manifest of the dataset, by version."""
    out: dict[int, ManifestEntry] = {}
    schemes: set[bool] = set()
    for name, size, mtime in store.list_dir(VERSIONS_DIR):
        parsed = parse_manifest_name(name)
        if parsed is None:
            continue
        version, v2 = parsed
        schemes.add(v2)
        out[version] = ManifestEntry(version, name, size, v2, mtime)
    if len(schemes) > 1:
        raise CorruptFileError(
            store.uri_of(VERSIONS_DIR), "found both V1 and V2 manifest naming schemes"
        )
    return out


def list_manifests_through(store: ObjectStore, version: int) -> dict[int, ManifestEntry]:
    """`list_manifests`, and when the listing stops short of `version` (known to exist: a
    listing may lag behind the newest objects), the versions after it found by name, up to
    `version` and on as far as they go."""
    entries = list_manifests(store)
    v = max(entries) if entries else 0
    if v >= version:
        return entries
    while True:
        v += 1
        entry = _entry_by_name(store, v)
        if entry is not None:
            entries[v] = entry
        elif v > version:
            return entries


def _entry_by_name(store: ObjectStore, version: int) -> ManifestEntry | None:
    """The manifest of `version` by its V2 or V1 name, None if neither exists."""
    for v2 in (True, False):
        name = manifest_name(version, v2=v2)
        try:
            return ManifestEntry(version, name, store.size(f"{VERSIONS_DIR}/{name}"), v2)
        except FileNotFoundError:
            continue
    return None


# V2 names sort newest first: on S3 the newest is in the first few names of `_versions/`
# (temporary files, ".tmp...", sort before them)
FIRST_NAMES = 16


def latest_entry(store: ObjectStore) -> ManifestEntry:
    """The newest manifest; DatasetNotFoundError if there is none. Where the store lists
    in name order a page at a time (S3), the V2 naming scheme puts the newest first, so one
    small listing finds it however many versions there are."""
    first = store.list_first(VERSIONS_DIR, FIRST_NAMES)
    for name, size, mtime in sorted(first or ()):
        parsed = parse_manifest_name(name)
        if parsed is not None:
            if parsed[1]:  # V2; V1 names do not sort by version: list them all
                return ManifestEntry(parsed[0], name, size, True, mtime)
            break
    entries = list_manifests(store)
    if not entries:
        raise DatasetNotFoundError(f"no Lance dataset at {store.uri} (no manifests in _versions/)")
    return entries[max(entries)]


def load_manifest(store: ObjectStore, entry: ManifestEntry) -> Manifest:
    """Read and decode one manifest file."""
    try:
        data = store.read_all(entry.path)
    except FileNotFoundError:
        raise VersionNotFoundError(
            f"{store.uri}: version {entry.version} disappeared (cleaned up?)"
        ) from None
    manifest = decode_manifest(data, store.uri_of(entry.path))
    manifest.path = entry.path
    manifest.read_file = store.read_all
    if manifest.version != entry.version:
        raise CorruptFileError(
            store.uri_of(entry.path),
            f"file name says version {entry.version} but the manifest says {manifest.version}",
        )
    return manifest


def data_file_paths(manifest: Manifest) -> set[str]:
    """The data file paths (relative to `data/`) one version references."""
    return {file.path for frag in manifest.pb.fragments for file in frag.files}


def referenced_data_files(store: ObjectStore) -> set[str]:
    """The data file paths (relative to `data/`) any committed version references; versions
    removed by a concurrent cleanup while listing are skipped; a damaged one raises, since
    callers delete what no version references."""
    referenced: set[str] = set()
    for entry in list_manifests(store).values():
        try:
            referenced |= data_file_paths(load_manifest(store, entry))
        except VersionNotFoundError:
            continue
    return referenced


def find_entry(store: ObjectStore, version: int) -> ManifestEntry:
    """The manifest entry of one version, trying the V2 then the V1 name."""
    if version < 1:
        raise VersionNotFoundError(f"{store.uri}: version {version} does not exist (first is 1)")
    entry = _entry_by_name(store, version)
    if entry is not None:
        return entry
    if not list_manifests(store):
        raise DatasetNotFoundError(f"no Lance dataset at {store.uri}")
    raise VersionNotFoundError(f"{store.uri}: version {version} does not exist")


@dataclass(frozen=True)
class Tag:
    """A named reference to a version (`_refs/tags/{name}.json`)."""

    name: str
    version: int
    branch: str | None
    manifest_size: int | None
    created_at: dt.datetime | None
    updated_at: dt.datetime | None
    metadata: dict


def _parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    text = value.rstrip("Z")
    if "." in text:  # nanoseconds don't fit a datetime
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    try:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None


def read_tag(store: ObjectStore, name: str) -> Tag:
    """Read one tag; TagNotFoundError if it doesn't exist."""
    check_tag_name(name)
    path = tag_path(name)
    try:
        raw = store.read_all(path)
    except FileNotFoundError:
        raise TagNotFoundError(f"{store.uri}: tag {name!r} does not exist") from None
    try:
        doc = json.loads(raw)
        version = int(doc["version"])
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptFileError(store.uri_of(path), f"bad tag file: {e}") from None
    return Tag(
        name=name,
        version=version,
        branch=doc.get("branch"),
        manifest_size=doc.get("manifestSize"),
        created_at=_parse_time(doc.get("createdAt")),
        updated_at=_parse_time(doc.get("updatedAt")),
        metadata=doc.get("metadata") or {},
    )


def _ref_names(store: ObjectStore, directory: str) -> list[str]:
    """The names of the refs (tags or branches) stored under `directory`."""
    return [
        urllib.parse.unquote(file[: -len(".json")])
        for file, _, _ in store.list_dir(directory)
        if file.endswith(".json")
    ]


def _ref_path(directory: str, name: str) -> str:
    """Where a ref is stored; pylance percent-encodes the name ('/' too)."""
    return f"{directory}/{urllib.parse.quote(name, safe='')}.json"


def list_tags(store: ObjectStore) -> dict[str, Tag]:
    """All tags, by name."""
    return {tag: read_tag(store, tag) for tag in _ref_names(store, TAGS_DIR)}


def tag_path(name: str) -> str:
    """Where a tag is stored."""
    return _ref_path(TAGS_DIR, name)


# A tag is stored as "_refs/tags/<percent-encoded name>.json", written through a temporary
# "<that>#<32 hex digits>": both must fit the 255 bytes of a file name.
MAX_TAG_BYTES = 200


def check_tag_name(name: str) -> None:
    """Refuse tag names that are empty, could escape `_refs/tags/`, or are longer than
    `MAX_TAG_BYTES` once percent-encoded (too long for a file name)."""
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or "\\" in name
        or name.startswith(".")
        or "\x00" in name
        or name.endswith(".lock")
    ):
        raise InvalidInputError(f"invalid tag name {name[:40]!r}")
    stored = len(urllib.parse.quote(name, safe=""))
    if stored > MAX_TAG_BYTES:
        raise InvalidInputError(
            f"tag name {name[:40]!r}... is too long: {stored} bytes once percent-encoded "
            f"(at most {MAX_TAG_BYTES})"
        )


def branch_store(root: ObjectStore, branch: str) -> ObjectStore:
    """The store of a branch: a shallow clone at `tree/{branch}` under the dataset's root
    (a '/' in the name nests directories, as pylance lays them out)."""
    return root.child(f"{TREE_DIR}/{branch}")


def root_store(store: ObjectStore, branch: str | None) -> ObjectStore:
    """The dataset's root store, given the store of `branch` (None: the main line)."""
    if not branch:
        return store
    suffix = f"/{TREE_DIR}/{branch}"
    root, uri = store.root.rstrip("/"), store.uri.rstrip("/")
    if not root.endswith(suffix) or not uri.endswith(suffix):
        raise InvalidInputError(f"{store.uri} is on branch {branch!r} but not in its directory")
    return ObjectStore(store.fs, root[: -len(suffix)], uri[: -len(suffix)])


@dataclass(frozen=True)
class Branch:
    """A branch (`_refs/branches/{name}.json`): where it was created from, and the chain
    of (parent version, id) that tells it apart from an earlier branch of the same name."""

    name: str
    parent_branch: str | None
    parent_version: int
    identifier: tuple[tuple[int, str], ...]
    create_at: int  # seconds since the epoch
    manifest_size: int | None
    metadata: dict[str, str]

    def to_json(self) -> bytes:
        """The ref file's contents, as pylance writes them."""
        doc = {
            "parentBranch": self.parent_branch,
            "identifier": {"version_mapping": [list(pair) for pair in self.identifier]},
            "parentVersion": self.parent_version,
            "createAt": self.create_at,
            "manifestSize": self.manifest_size,
            "metadata": self.metadata,
        }
        return json.dumps(doc, indent=2).encode()


def branch_path(name: str) -> str:
    """Where a branch's ref is stored."""
    return _ref_path(BRANCHES_DIR, name)


def check_branch_name(name: str) -> None:
    """Refuse what pylance refuses as a branch name: empty, "main", a leading or trailing
    '/', '..', or a '/'-separated segment with characters other than letters, digits, '.',
    '-' and '_' (nor names too long for a file name once percent-encoded)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError("a branch name cannot be empty")
    if name == "main":
        raise InvalidInputError('"main" is reserved for the default branch')
    if name.startswith("/") or name.endswith("/"):
        raise InvalidInputError(f"branch name {name[:40]!r} cannot start or end with '/'")
    if ".." in name or "\\" in name:
        raise InvalidInputError(f"branch name {name[:40]!r} cannot contain '..' or '\\'")
    for segment in name.split("/"):
        if not segment or not all(c.isalnum() or c in ".-_" for c in segment):
            raise InvalidInputError(
                f"branch name {name[:40]!r}: segment {segment[:40]!r} must be letters, digits, "
                "'.', '-' or '_'"
            )
    if len(urllib.parse.quote(name, safe="")) > MAX_TAG_BYTES:
        raise InvalidInputError(f"branch name {name[:40]!r}... is too long")


def read_branch(root: ObjectStore, name: str) -> Branch:
    """Read one branch's ref; BranchNotFoundError if there is none."""
    path = branch_path(name)
    try:
        raw = root.read_all(path)
    except FileNotFoundError:
        raise BranchNotFoundError(f"{root.uri}: branch {name!r} does not exist") from None
    try:
        doc = json.loads(raw)
        mapping = doc.get("identifier", {}).get("version_mapping", [])
        return Branch(
            name=name,
            parent_branch=doc.get("parentBranch"),
            parent_version=int(doc["parentVersion"]),
            identifier=tuple((int(v), str(i)) for v, i in mapping),
            create_at=int(doc.get("createAt") or 0),
            manifest_size=doc.get("manifestSize"),
            metadata=dict(doc.get("metadata") or {}),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(root.uri_of(path), f"bad branch file: {e}") from None


def list_branches(root: ObjectStore) -> dict[str, Branch]:
    """Every branch, by name."""
    return {name: read_branch(root, name) for name in _ref_names(root, BRANCHES_DIR)}


# A version as pylance's APIs take one: a number on the current branch, a tag name, or
# (branch, number) where a None branch or "main" is the main line and a None number the
# latest version.
Reference = int | str | tuple[str | None, int | None] | None


def resolve_ref(
    store: ObjectStore, version: Reference, branch: str | None = None
) -> tuple[ObjectStore, str | None, int | None]:
    """(The store of the branch a reference names, that branch or None for the main line,
    its version number or None for the latest), from the store of `branch`, the one a
    plain number refers to."""
    if isinstance(version, tuple):
        if len(version) != 2:
            raise InvalidInputError(f"a version reference is (branch, version), not {version!r}")
        name, number = version
        root = root_store(store, branch)
        if name is None or name == "main":
            return root, None, number
        read_branch(root, name)
        return branch_store(root, name), name, number
    if not isinstance(version, str):
        return store, branch, version
    root = root_store(store, branch)
    tag = read_tag(root, version)
    return (branch_store(root, tag.branch) if tag.branch else root), tag.branch, tag.version


def resolve(
    store: ObjectStore,
    version: int | str | None = None,
    asof: dt.datetime | str | None = None,
) -> Manifest:
    """Load the manifest for a version number, a tag name, a timestamp, or the latest."""
    if version is not None and asof is not None:
        raise InvalidInputError("give either version or asof, not both")
    if isinstance(version, str):
        version = read_tag(store, version).version
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidInputError(f"version must be an int or a tag name, not {version!r}")
        return load_manifest(store, find_entry(store, version))
    if asof is not None:
        return resolve_asof(store, asof)
    return load_manifest(store, latest_entry(store))


def resolve_asof(store: ObjectStore, asof: dt.datetime | str) -> Manifest:
    """The newest version whose commit time, as `versions()` shows it, is before `asof`
    (naive datetimes are local time). That is pylance's rule: strictly before, so the time
    shown for a version finds the version before it."""
    if isinstance(asof, str):
        try:
            asof = dt.datetime.fromisoformat(asof.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"asof {asof!r} is not an ISO-8601 timestamp") from None
    if asof.tzinfo is not None:
        asof = asof.astimezone().replace(tzinfo=None)
    entries = list_manifests(store)
    if not entries:
        raise DatasetNotFoundError(f"no Lance dataset at {store.uri}")
    for v in sorted(entries, reverse=True):
        manifest = load_manifest(store, entries[v])
        if shown_time(manifest.pb.timestamp.ToNanoseconds()) < asof:
            return manifest
    raise VersionNotFoundError(f"{store.uri}: no version was committed before {asof}")


def shown_time(ns: int) -> dt.datetime:
    """A commit time (nanoseconds since the epoch) as pylance's `versions()` shows it: naive
    local time, computed in floating point as pylance computes it (so some versions show a
    microsecond before or after their commit)."""
    return dt.datetime.fromtimestamp(ns // 1e9) + dt.timedelta(microseconds=(ns % 1e9) // 1e3)

"""The index section of a manifest: which indices a version has and what each covers.

Every reader of a version's indices (compaction, cleanup, schema changes, index-pruned reads,
vector search, `describe`) goes through `indices_of`, so the section is parsed one way.
"""

from __future__ import annotations

import logging
import uuid as _uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace

from quiver.format.errors import LanceError
from quiver.format.io.store import ObjectStore
from quiver.format.proto import table_pb2
from quiver.format.table.frag_reuse import FRAG_REUSE_INDEX, FragReuse
from quiver.format.table.manifest import Manifest, read_section

log = logging.getLogger("quiver.format")

# Indices pylance keeps for its own bookkeeping, not over user columns.
SYSTEM_INDICES = frozenset({FRAG_REUSE_INDEX, "__lance_mem_wal"})
# the details type pylance gives INVERTED indices (see index.fts.build)
_INVERTED_DETAILS = "/lance.table.InvertedIndexDetails"


@dataclass(frozen=True)
class IndexEntry:
    """One index of a version, as its manifest records it."""

    uuid: str
    name: str
    field_ids: tuple[int, ...]
    dataset_version: int
    # None: an old index with no bitmap, covering the fragments of `dataset_version`
    fragment_ids: frozenset[int] | None
    details_type: str  # the type URL of index_details, e.g. ".../lance.index.pb.BTreeIndexDetails"
    details: bytes
    index_version: int
    files: tuple[tuple[str, int], ...]  # (path inside the index directory, size) when recorded
    pb: table_pb2.IndexMetadata

    @property
    def directory(self) -> str:
        """The index's folder, relative to the dataset root."""
        return f"_indices/{self.uuid}"

    @property
    def is_system(self) -> bool:
        return self.name in SYSTEM_INDICES


def index_section(manifest: Manifest) -> table_pb2.IndexSection | None:
    """The parsed index section of a manifest, or None when it has none."""
    if not manifest.pb.HasField("index_section"):
        return None
    return read_section(
        manifest, manifest.pb.index_section, table_pb2.IndexSection, "index section"
    )


def index_entry(pb: table_pb2.IndexMetadata) -> IndexEntry:
    """An IndexEntry from its protobuf record."""
    from pyroaring import BitMap

    ids = frozenset(BitMap.deserialize(pb.fragment_bitmap)) if pb.fragment_bitmap else None
    return IndexEntry(
        uuid=str(_uuid.UUID(bytes=bytes(pb.uuid.uuid))) if pb.uuid.uuid else "",
        name=pb.name,
        field_ids=tuple(int(f) for f in pb.fields),
        dataset_version=int(pb.dataset_version),
        fragment_ids=ids,
        details_type=pb.index_details.type_url or _known_by_files(pb),
        details=bytes(pb.index_details.value),
        index_version=int(pb.index_version) if pb.HasField("index_version") else 0,
        files=tuple((f.path, int(f.size_bytes)) for f in pb.files),
        pb=pb,
    )


def _known_by_files(pb: table_pb2.IndexMetadata) -> str:
    """The details type of a segment recorded without details, known by its files: an
    INVERTED index merged from staged partitions, committed by pylance as it is."""
    names = {f.path for f in pb.files}
    if "metadata.lance" in names and any(n.endswith("_invert.lance") for n in names):
        return _INVERTED_DETAILS
    return ""


# a version's index entries, parsed once per manifest object (manifests never change; a
# search planned for GetFlightInfo and again for DoGet read them four times): id -> (a weak
# reference to the manifest, its entries), dropped with the manifest
_ENTRIES: dict[int, tuple[weakref.ref, tuple[IndexEntry, ...], FragReuse | None]] = {}


def indices_of(manifest: Manifest, *, system: bool = False) -> list[IndexEntry]:
    """The indices of a version in manifest order; system indices only when asked.

    With a fragment reuse index, each one's `fragment_ids` are as its versions leave them
    (the fragments whose rows the index answers for, once its row addresses are remapped
    with `frag_reuse_of`), as pylance lists them; `pb` keeps the recorded bitmap."""
    return (
        list(_held(manifest)[0]) if system else [i for i in _held(manifest)[0] if not i.is_system]
    )


def frag_reuse_of(manifest: Manifest) -> FragReuse | None:
    """The version's fragment reuse index (pylance's deferred index remaps), or None."""
    return _held(manifest)[1]


def _held(manifest: Manifest) -> tuple[tuple[IndexEntry, ...], FragReuse | None]:
    key = id(manifest)
    held = _ENTRIES.get(key)
    if held is not None and held[0]() is manifest:
        return held[1], held[2]
    section = index_section(manifest)
    out = () if section is None else tuple(index_entry(pb) for pb in section.indices)
    reuse = None
    found = next((e for e in out if e.name == FRAG_REUSE_INDEX), None)
    # (with stable row ids indices hold row ids, which compaction keeps: nothing to replay,
    # and pylance 14 never writes one then)
    if found is not None and not manifest.uses_stable_row_ids:
        try:
            reuse = FragReuse.read(found.pb, manifest.path, _index_reader(manifest, found.pb))
        except (LanceError, OSError) as e:
            # without its moves every index covers only the fragments it was built on:
            # reads then scan the rewritten rows (correct, not narrowed)
            log.warning(
                "%s: fragment reuse index not read, indices not replayed: %s", manifest.path, e
            )
            return _hold(manifest, out, None)
        out = tuple(
            e
            if e.fragment_ids is None
            else replace(e, fragment_ids=reuse.fragment_ids(e.fragment_ids))
            for e in out
        )
    return _hold(manifest, out, reuse)


def _index_reader(manifest: Manifest, pb: table_pb2.IndexMetadata) -> Callable[[str], bytes] | None:
    """Whole files of an index's folder, read where the index lives: the dataset, or the
    base path it names (a shallow clone's indices live in its source)."""
    read = manifest.read_file
    if not pb.HasField("base_id") or read is None:
        return read
    store = getattr(read, "__self__", None)
    base = next((b for b in manifest.pb.base_paths if b.id == pb.base_id), None)
    if not isinstance(store, ObjectStore) or base is None:
        return None
    return store.sibling(base.path).read_all


def _hold(
    manifest: Manifest, out: tuple[IndexEntry, ...], reuse: FragReuse | None
) -> tuple[tuple[IndexEntry, ...], FragReuse | None]:
    key = id(manifest)
    _ENTRIES[key] = (weakref.ref(manifest, lambda _, k=key: _ENTRIES.pop(k, None)), out, reuse)
    return out, reuse

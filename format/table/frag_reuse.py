"""The fragment reuse index (`__lance_frag_reuse`): compactions whose index remap was deferred.

pylance's `compact_files(defer_index_remap=True)` (Quiver's too) rewrites fragments without
rewriting the indices over them. Instead it adds a version to this system index: per rewrite
group, the old fragments' digests (id, physical rows, deleted rows), the new ones', and the
old row addresses that survived, in order (a serialized 64-bit roaring treemap): the k-th
survivor is the k-th row of the new fragments. Readers replay the versions, oldest first,
over every index: a row address of an old fragment becomes its row's new address (none for
a row the compaction dropped), and an index's fragment bitmap trades a group's old
fragments for its new ones. BM25 statistics and everything else an index holds stay as
they are, as pylance reads them.

The versions live inline in the index's details, or, past 200 KiB, in `details.binpb` of
its folder (an `InlineContent` message).
"""

from __future__ import annotations

import array
import time
import uuid as _uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from pyroaring import BitMap, BitMap64

from quiver.format.errors import CorruptFileError, LanceError
from quiver.format.io.lru import ByteLRU
from quiver.format.proto import table_pb2
from quiver.format.table.addresses import AddressMap, Moved

__all__ = [
    "DETAILS_FILE",
    "DETAILS_TYPE",
    "FRAG_REUSE_INDEX",
    "FragReuse",
    "Rewritten",
    "next_frag_reuse",
]

FRAG_REUSE_INDEX = "__lance_frag_reuse"
DETAILS_TYPE = "/lance.table.FragmentReuseIndexDetails"
DETAILS_FILE = "details.binpb"
INLINE_LIMIT = 204_800  # bytes of content kept in the manifest (pylance's limit)

_Details = table_pb2.FragmentReuseIndexDetails
# composed maps of reuse indices, by uuid (8 bytes per row the compactions moved)
_MAPS: ByteLRU[AddressMap] = ByteLRU(512 << 20, 64)
_SHIFT = np.uint64(32)
_LOW = np.uint64(0xFFFFFFFF)


@dataclass(frozen=True)
class FragReuse:
    """The fragment reuse index of one version: its record and versions, oldest first."""

    pb: table_pb2.IndexMetadata
    versions: tuple[_Details.Version, ...]
    where: str

    @property
    def uuid(self) -> str:
        """Its uuid: a key for anything remapped through it (a new one per compaction)."""
        return str(_uuid.UUID(bytes=bytes(self.pb.uuid.uuid)))

    @classmethod
    def read(
        cls, pb: table_pb2.IndexMetadata, where: str, read_file: Callable[[str], bytes] | None
    ) -> FragReuse:
        """Its versions, from the details or from the file they name (`read_file` reads a
        path relative to the dataset root)."""
        details = _Details()
        try:
            details.ParseFromString(pb.index_details.value)
        except Exception:  # noqa: BLE001 - protobuf's decode errors have no common base
            raise CorruptFileError(where, "fragment reuse index details do not decode") from None
        content = details.WhichOneof("content")
        if content == "inline":
            inline = details.inline
        elif content == "external":
            ext = details.external
            uuid = str(_uuid.UUID(bytes=bytes(pb.uuid.uuid)))
            path = f"_indices/{uuid}/{ext.path}"
            if read_file is None:
                raise LanceError(f"{where}: cannot read the fragment reuse index's {path}")
            data = read_file(path)[ext.offset : ext.offset + ext.size]
            if len(data) != ext.size:
                raise CorruptFileError(where, f"{path} is shorter than its {ext.size} bytes")
            inline = _Details.InlineContent()
            try:
                inline.ParseFromString(data)
            except Exception:  # noqa: BLE001
                raise CorruptFileError(where, f"{path} does not decode") from None
        else:
            raise CorruptFileError(where, "fragment reuse index details have no content")
        versions = sorted(inline.versions, key=lambda v: int(v.dataset_version))
        return cls(pb, tuple(versions), where)

    def fragment_ids(self, ids: Iterable[int]) -> frozenset[int]:
        """An index's fragment bitmap as the versions leave it: a group whose old fragments
        it names (any of them) is replaced by the group's new fragments."""
        out = set(ids)
        for version in self.versions:
            for group in version.groups:
                old = {int(f.id) for f in group.old_fragments}
                if out & old:
                    out -= old
                    out.update(int(f.id) for f in group.new_fragments)
        return frozenset(out)

    @property
    def address_map(self) -> AddressMap:
        """Every version's moves as one map (old row address -> row address now), built
        once per process for each reuse index (a new one comes with every deferred
        compaction; every manifest read of a version shares it)."""
        found = _MAPS.get(self.uuid)
        if found is None:
            found = AddressMap.build([])
            for version in self.versions:
                moves = AddressMap.build([self._moved(g) for g in version.groups])
                found = moves if not len(found.fragments) else found.then(moves, self.where)
            _MAPS.put(self.uuid, found, found.targets.nbytes + found.lengths.nbytes * 3 + 256)
        return found

    def apply(self, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The addresses now of index row `addresses` (`GONE` for a dropped row) and which
        rows are still there."""
        return self.address_map.apply(addresses, self.where)

    @cached_property
    def old_physical_rows(self) -> dict[int, int]:
        """Physical rows of every fragment the versions rewrote (an index may name all the
        rows of one)."""
        return {
            int(f.id): int(f.physical_rows)
            for v in self.versions
            for g in v.groups
            for f in g.old_fragments
        }

    def _moved(self, group: _Details.Group) -> Moved:
        try:
            survivors = np.frombuffer(
                BitMap64.deserialize(group.changed_row_addrs).to_array(), dtype=np.uint64
            )
        except ValueError as e:
            raise CorruptFileError(self.where, f"bad fragment reuse row addresses: {e}") from None
        # the survivors are in address order: the old fragments' rows follow by id
        old = sorted(group.old_fragments, key=lambda f: int(f.id))
        out = []
        for f in old:
            rows = int(f.physical_rows)
            first = np.uint64(f.id) << _SHIFT
            lo, hi = np.searchsorted(survivors, [first, first + (_LOW + np.uint64(1))])
            offsets = (survivors[lo:hi] & _LOW).astype(np.int64)
            if len(offsets) and int(offsets[-1]) >= rows:
                raise CorruptFileError(
                    self.where, f"fragment reuse index names a row past fragment {f.id}'s end"
                )
            live = np.zeros(rows, dtype=bool)
            live[offsets] = True
            out.append((int(f.id), rows, live))
        if sum(int(np.count_nonzero(m)) for _, _, m in out) != len(survivors):
            raise CorruptFileError(
                self.where, "fragment reuse index names rows outside its old fragments"
            )
        try:
            return Moved(out, [(int(f.id), int(f.physical_rows)) for f in group.new_fragments])
        except LanceError as e:
            raise CorruptFileError(self.where, str(e)) from None


@dataclass(frozen=True)
class Rewritten:
    """One rewrite group as the index records it: the old fragments (id, physical rows,
    deleted rows, live mask or None), and the new (id, rows)."""

    old: Sequence[tuple[int, int, int, np.ndarray | None]]
    new: Sequence[tuple[int, int]]

    def group(self) -> _Details.Group:
        survivors = []
        for fid, rows, _, live in sorted(self.old, key=lambda f: f[0]):
            offsets = np.arange(rows) if live is None else np.flatnonzero(live)
            survivors.append((np.uint64(fid) << _SHIFT) | offsets.astype(np.uint64))
        addrs = np.concatenate(survivors) if survivors else np.empty(0, np.uint64)
        treemap = BitMap64(array.array("Q", addrs.tobytes()), optimize=True)
        digest = _Details.FragmentDigest
        return _Details.Group(
            changed_row_addrs=treemap.serialize(),
            old_fragments=[
                digest(id=fid, physical_rows=rows, num_deleted_rows=gone)
                for fid, rows, gone, _ in self.old
            ],
            new_fragments=[digest(id=fid, physical_rows=rows) for fid, rows in self.new],
        )


def next_frag_reuse(
    previous: FragReuse | None, dataset_version: int, groups: Sequence[Rewritten]
) -> tuple[table_pb2.IndexMetadata, bytes | None]:
    """The fragment reuse index after a compaction that deferred its remap (recorded at
    `dataset_version`): the previous one's versions and one more, its bitmap the new
    fragments of every version, as pylance 14 writes it. Returns the record and, when the
    content is past the inline limit, the bytes of its `details.binpb`."""
    version = _Details.Version(dataset_version=dataset_version, groups=[g.group() for g in groups])
    content = _Details.InlineContent(versions=[*(previous.versions if previous else ()), version])
    data = content.SerializeToString()
    details = _Details()
    external = None
    if len(data) > INLINE_LIMIT:
        details.external.CopyFrom(table_pb2.ExternalFile(path=DETAILS_FILE, size=len(data)))
        external = data
    else:
        details.inline.CopyFrom(content)
    covered = {int(f.id) for v in content.versions for g in v.groups for f in g.new_fragments}
    pb = table_pb2.IndexMetadata(
        name=FRAG_REUSE_INDEX,
        dataset_version=dataset_version,
        fragment_bitmap=BitMap(sorted(covered)).serialize(),
        index_version=previous.pb.index_version if previous is not None else 0,
        created_at=int(time.time() * 1000),
    )
    pb.uuid.uuid = _uuid.uuid4().bytes
    pb.index_details.type_url = DETAILS_TYPE
    pb.index_details.value = details.SerializeToString()
    return pb, external

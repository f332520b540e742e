"""How a commit carries a version's index section to the next one, as pylance 14 does.

A CreateIndex adds and removes segments; an overwrite drops every index; a rewrite
(compaction) moves its remapped indices to their new files (or, deferring the remap, leaves
a fragment reuse index); an update stops an index covering fragments whose indexed column
it rewrote; deletes, updates, merges and projections keep only the relevant indices.
"""

from __future__ import annotations

from collections.abc import Sequence

from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.indices import SYSTEM_INDICES, frag_reuse_of
from quiver.format.table.manifest import Manifest, read_section
from quiver.format.table.rowids import row_id_count
from quiver.format.table.transaction import ManifestContext, operation_of

__all__ = ["carry_indices", "index_section_of", "index_source", "stores_row_ids"]


def index_section_of(manifest: Manifest | None) -> bytes | None:
    """The previous version's index section, to carry over; with a fragment reuse index,
    every bitmap as its versions leave it (as pylance 14 carries them: it lists indices
    so, and commits what it lists)."""
    if manifest is None or not manifest.pb.HasField("index_section"):
        return None
    section = read_section(
        manifest, manifest.pb.index_section, table_pb2.IndexSection, "index section"
    )
    reuse = frag_reuse_of(manifest)
    if reuse is not None:
        from pyroaring import BitMap

        for index in section.indices:
            if index.fragment_bitmap:
                ids = reuse.fragment_ids(BitMap.deserialize(index.fragment_bitmap))
                index.fragment_bitmap = BitMap(sorted(ids)).serialize()
    return section.SerializeToString()


def index_source(
    base: Manifest | None, txn: transaction_pb2.Transaction, ctx: ManifestContext
) -> Manifest | None:
    """The manifest whose indices a commit carries: a restore brings back the restored
    version's (as pylance does), every other commit keeps the latest version's."""
    if operation_of(txn) == "restore" and ctx.load_version is not None:
        return ctx.load_version(txn.restore.version)
    return base


def _create_indices(
    section: bytes | None, body: transaction_pb2.Transaction.CreateIndex
) -> bytes | None:
    """The index section after a CreateIndex: the removed segments (by uuid) gone, the new
    ones appended, as pylance applies it."""
    pb = table_pb2.IndexSection()
    if section is not None:
        pb.ParseFromString(section)
    removed = {bytes(i.uuid.uuid) for i in body.removed_indices}
    kept = [i for i in pb.indices if bytes(i.uuid.uuid) not in removed]
    del pb.indices[:]
    pb.indices.extend(kept)
    pb.indices.extend(body.new_indices)
    return pb.SerializeToString() if pb.indices else None


def carry_indices(
    section: bytes | None,
    txn: transaction_pb2.Transaction,
    field_ids: set[int],
    stable: bool = False,
    fragments: Sequence[table_pb2.DataFragment] = (),
    reuse: table_pb2.IndexMetadata | None = None,
) -> bytes | None:
    """Carry indices over as pylance 14 does: none after an overwrite; a rewrite moves its
    indices to their remapped files (see `_rewrite_indices`); an update drops the
    fragments whose indexed columns it rewrote in place (`fields_modified`) and, with
    stable row ids, adds the fragments of rows it moved unchanged (see `_update_indices`).
    Fragment bitmaps otherwise stay as they are, also when a delete or update removes a
    fragment (a bitmap names the fragments whose rows the index holds; readers intersect
    it with the fragments that exist). Deletes, updates, merges and projections then keep
    only the relevant indices (`_retain_relevant`). `reuse` is the fragment reuse index a
    Rewrite that deferred its index remap leaves."""
    op = operation_of(txn)
    if op == "create_index":
        return _create_indices(section, txn.create_index)
    if section is None:
        return None
    if op == "overwrite":
        return None
    pb = table_pb2.IndexSection()
    pb.ParseFromString(section)
    kept = [i for i in pb.indices if set(i.fields) <= field_ids]
    if len(kept) != len(pb.indices):
        del pb.indices[:]
        pb.indices.extend(kept)
        section = pb.SerializeToString()
    if op == "rewrite":
        return _rewrite_indices(section, txn.rewrite, stable, reuse)
    if op not in ("delete", "update", "merge", "project"):
        return section
    if op == "update":
        _update_indices(pb, txn.update, stable, fragments)
    _retain_relevant(pb, {int(f.id) for f in fragments})
    return pb.SerializeToString()


def _bitmap(index: table_pb2.IndexMetadata):  # noqa: ANN202 - pyroaring is imported late
    from pyroaring import BitMap

    return BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else None


def _update_indices(
    pb: table_pb2.IndexSection,
    body: transaction_pb2.Transaction.Update,
    stable: bool,
    fragments: Sequence[table_pb2.DataFragment],
) -> None:
    """An update's effect on index coverage (pylance 14's `build_manifest`):
    - an index over a field in `fields_modified` stops covering the `updated_fragments`
      (their values of that field were rewritten in place);
    - with stable row ids and rows rewritten (update mode REWRITE_ROWS), a new fragment
      holding only moved rows (a row id for every row) joins every index that holds row
      ids (not addresses: a BTREE of index version 1 does not), covers none of
      `fields_for_preserving_frag_bitmap` and covered every fragment the rows came from:
      the index still holds those rows' ids with their unchanged values."""
    modified = set(body.fields_modified)
    updated = [int(f.id) for f in body.updated_fragments]
    moved_from = list(body.removed_fragment_ids) + updated
    pure: list[int] = []
    if stable and body.update_mode == transaction_pb2.Transaction.REWRITE_ROWS:
        # the committed copies have fresh ids: find them by their (unique) data files
        carried = {
            tuple(df.path for df in f.files)
            for f in body.new_fragments
            if f.HasField("inline_row_ids")
            and row_id_count(f.inline_row_ids) == int(f.physical_rows)
        }
        pure = [int(f.id) for f in fragments if tuple(df.path for df in f.files) in carried]
    preserving = set(body.fields_for_preserving_frag_bitmap)
    for index in pb.indices:
        bitmap = _bitmap(index)
        if bitmap is None:
            continue
        if modified & set(index.fields):
            for fid in updated:
                bitmap.discard(fid)
        if (
            pure
            and stores_row_ids(index)
            and not preserving & set(index.fields)
            and all(f in bitmap for f in moved_from)
        ):
            bitmap.update(pure)
        index.fragment_bitmap = bitmap.serialize()


def _retain_relevant(pb: table_pb2.IndexSection, existing: set[int]) -> None:
    """pylance 14's retention of indices after deletes, updates, merges and projections,
    judged by each index's effective coverage (its bitmap among the fragments that exist):
    of several segments of one name, those covering nothing are dropped while another
    covers something, else all but the oldest (all, for a vector index); a lone vector
    index covering nothing is dropped. System indices always stay."""

    def empty(index: table_pb2.IndexMetadata) -> bool:
        bitmap = _bitmap(index)
        return bitmap is None or not any(f in existing for f in bitmap)

    def vector(index: table_pb2.IndexMetadata) -> bool:
        return _kind(index) == "VectorIndexDetails"

    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for index in pb.indices:
        if index.name not in SYSTEM_INDICES:
            by_name.setdefault(index.name, []).append(index)
    keep: set[bytes] = set()
    for same in by_name.values():
        live = [i for i in same if not empty(i)]
        if live:
            keep.update(bytes(i.uuid.uuid) for i in live)
        elif len(same) > 1:
            oldest = min(same, key=lambda i: int(i.dataset_version))
            if not vector(oldest):
                keep.add(bytes(oldest.uuid.uuid))
        elif not vector(same[0]):
            keep.add(bytes(same[0].uuid.uuid))
    retained = [i for i in pb.indices if i.name in SYSTEM_INDICES or bytes(i.uuid.uuid) in keep]
    if len(retained) != len(pb.indices):
        del pb.indices[:]
        pb.indices.extend(retained)


def stores_row_ids(index: table_pb2.IndexMetadata) -> bool:
    """Whether an index of a dataset with stable row ids holds stable row ids (which
    compaction keeps) rather than row addresses: pylance 14 builds BITMAP, INVERTED, NGRAM,
    LABEL_LIST and vector indices so, and its BTREE ones with addresses, marked by
    index_version 1 (older BTREE ones, version 0, hold row ids). Others (ZONEMAP,
    BLOOMFILTER: per-fragment zones) and unknown kinds are treated as addresses."""
    kind = _kind(index)
    version = int(index.index_version) if index.HasField("index_version") else 0
    if kind == "BTreeIndexDetails":
        return version == 0
    return kind in _ROW_ID_INDICES


def _kind(index: table_pb2.IndexMetadata) -> str:
    return index.index_details.type_url.rsplit(".", 1)[-1]


_NEVER_REMAPPED = ("ZoneMapIndexDetails", "BloomFilterIndexDetails", "RTreeIndexDetails")
_ROW_ID_INDICES = (
    "BitmapIndexDetails",
    "InvertedIndexDetails",
    "NGramIndexDetails",
    "LabelListIndexDetails",
    "VectorIndexDetails",
    "MinHashLshIndexDetails",
    "RTreeIndexDetails",
)


def _rewrite_indices(
    section: bytes,
    body: transaction_pb2.Transaction.Rewrite,
    stable: bool,
    reuse: table_pb2.IndexMetadata | None = None,
) -> bytes:
    """The index section after a rewrite (compaction), as pylance applies one.

    An index the rewrite remapped (`rewritten_indices`: its data rewritten with the new row
    addresses) takes its new uuid, files and details, and its bitmap trades each wholly
    covered group's old fragments for the new ones (whose ids the rewrite reserved); with
    stable row ids so does, unchanged, an index that stores row ids (they survive
    compaction), and any other index, or a group whose new ids are not known yet, loses the
    old fragments (their rows are then scanned unindexed, never wrongly answered). Without
    stable row ids a ZONEMAP or BLOOMFILTER index (which pylance 14 never remaps) keeps its
    bitmap as it is, as pylance leaves it: the old fragments are gone (ids are never
    reused), so it covers none of the new rows.

    A rewrite that deferred its remap (`reuse`: the fragment reuse index it leaves) keeps
    every bitmap as it is (readers replay the moves) and replaces the reuse index."""
    from pyroaring import BitMap

    if reuse is not None:
        pb = table_pb2.IndexSection()
        pb.ParseFromString(section)
        kept = [i for i in pb.indices if i.name != reuse.name]
        del pb.indices[:]
        pb.indices.extend([*kept, reuse])
        return pb.SerializeToString()

    groups = [(g.old_fragments, g.new_fragments) for g in body.groups]
    if body.old_fragments or body.new_fragments:  # the pre-groups form
        groups.append((body.old_fragments, body.new_fragments))
    moves = [
        (BitMap(int(f.id) for f in old), BitMap(int(f.id) for f in new), all(f.id for f in new))
        for old, new in groups
    ]
    remapped = {bytes(r.old_id.uuid): r for r in body.rewritten_indices}
    pb = table_pb2.IndexSection()
    pb.ParseFromString(section)
    for index in pb.indices:
        bitmap = BitMap.deserialize(index.fragment_bitmap) if index.fragment_bitmap else BitMap()
        r = remapped.get(bytes(index.uuid.uuid))
        if r is None and not stable and _kind(index) in _NEVER_REMAPPED:
            continue
        if index.name in SYSTEM_INDICES:
            continue  # a fragment reuse index names the fragments of its versions
        for old, new, known in moves:
            covered = old.issubset(bitmap)
            bitmap -= old
            if covered and known and (r is not None or (stable and stores_row_ids(index))):
                bitmap |= new
        if r is not None:
            index.uuid.CopyFrom(r.new_id)
            if r.HasField("new_index_details"):
                index.index_details.CopyFrom(r.new_index_details)
            index.index_version = r.new_index_version
            del index.files[:]
            index.files.extend(r.new_index_files)
        index.fragment_bitmap = bitmap.serialize()
    return pb.SerializeToString()

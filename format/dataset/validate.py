"""`validate()`: the consistency checks pylance's `LanceDataset.validate` makes of a version,
each failure a CorruptFileError naming the manifest, data file or deletion file.

- fragment ids are unique and in increasing order;
- in each fragment: a data file's field ids increase (legacy files) or pair one to one with
  column indices (2.x files), no field is in two data files, legacy and 2.x files are not
  mixed, every data file holds the same number of rows and that is `physical_rows`;
- a deletion file holds `num_deleted_rows` offsets, all below `physical_rows`;
- indices have distinct uuids, and the segments of one index cover disjoint fragments.
"""

from __future__ import annotations

from collections import Counter

from quiver.format.dataset.core import DatasetCore
from quiver.format.dataset.fragment import fragment_of
from quiver.format.errors import CorruptFileError
from quiver.format.file.open import open_data_file
from quiver.format.proto import table_pb2
from quiver.format.table.indices import indices_of


def validate(core: DatasetCore) -> None:
    """Raise CorruptFileError at the first inconsistency of this version; None if none."""
    manifest = core.store.uri_of(core.manifest.path or "_versions")
    ids = [int(f.id) for f in core.manifest.pb.fragments]
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    if twice:
        raise CorruptFileError(manifest, f"fragment id {twice[0]} appears more than once")
    if ids != sorted(ids):
        raise CorruptFileError(manifest, "fragments are not in increasing fragment id order")
    for frag in core.manifest.pb.fragments:
        _fragment(core, frag)
    _indices(core, manifest)


def _fragment(core: DatasetCore, frag: table_pb2.DataFragment) -> None:
    seen: set[int] = set()
    legacy = [df.file_major_version == 0 and df.file_minor_version < 3 for df in frag.files]
    lengths = []
    for df, is_legacy in zip(frag.files, legacy, strict=True):
        store, path = core.resolve(
            f"data/{df.path}", df.base_id if df.HasField("base_id") else None
        )
        where = store.uri_of(path)
        if is_legacy and list(df.fields) != sorted(set(df.fields)):
            raise CorruptFileError(where, "field ids are unsorted or repeated")
        if not is_legacy and len(df.fields) != len(df.column_indices):
            raise CorruptFileError(where, "unequal numbers of field ids and column indices")
        repeated = seen.intersection(df.fields)
        if repeated:
            raise CorruptFileError(
                where, f"field {min(repeated)} is in another data file of fragment {frag.id}"
            )
        seen.update(df.fields)
        reader = open_data_file(store, path, df)
        try:
            lengths.append((int(reader.num_rows), where))
        finally:
            reader.close()
    if any(legacy) and not all(legacy):
        raise CorruptFileError(
            lengths[0][1], f"fragment {frag.id} mixes legacy and Lance 2.x data files"
        )
    for rows, where in lengths:
        if rows != lengths[0][0]:
            raise CorruptFileError(
                where,
                f"holds {rows} rows where fragment {frag.id}'s other files hold {lengths[0][0]}",
            )
    if lengths and frag.physical_rows and frag.physical_rows != lengths[0][0]:
        raise CorruptFileError(
            lengths[0][1],
            f"fragment {frag.id} lists {frag.physical_rows} rows; its files hold {lengths[0][0]}",
        )
    if frag.HasField("deletion_file"):
        deleted = fragment_of(core, int(frag.id)).deleted_offsets  # checked below physical_rows
        listed = int(frag.deletion_file.num_deleted_rows)
        if listed and listed != len(deleted):
            raise CorruptFileError(
                core.store.uri_of(f"_deletions (fragment {frag.id})"),
                f"the deletion file holds {len(deleted)} rows; the manifest lists {listed}",
            )


def _indices(core: DatasetCore, manifest: str) -> None:
    entries = indices_of(core.manifest, system=True)
    uuids = Counter(e.uuid for e in entries)
    twice = sorted(u for u, n in uuids.items() if n > 1)
    if twice:
        raise CorruptFileError(manifest, f"index id {twice[0]} appears more than once")
    covered: dict[str, set[int]] = {}
    for e in entries:
        mine = set(e.fragment_ids or ())
        overlap = covered.setdefault(e.name, set()) & mine
        if overlap:
            raise CorruptFileError(
                manifest,
                f"index {e.name!r} has segments covering the same fragments {sorted(overlap)}",
            )
        covered[e.name] |= mine

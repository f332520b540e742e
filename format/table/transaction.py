"""Transactions and how each operation turns one manifest into the next.

A transaction records what one commit did (`lance.table.Transaction`); `build_manifest`
applies it to the manifest it is committed on top of, as a pure function, so the commit
loop can re-apply the same transaction to a newer manifest after a compatible conflict.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from quiver.format.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from quiver.format.proto import table_pb2, transaction_pb2
from quiver.format.table.manifest import (
    FLAG_BASE_PATHS,
    FLAG_COVERED_INDEX_METADATA,
    FLAG_DELETION_FILES,
    FLAG_DISABLE_TRANSACTION_FILE,
    FLAG_FRAGMENT_REUSE_INDEX,
    FLAG_MANAGED_BLOBS,
    FLAG_MIXED_DATA_FILE_VERSIONS,
    FLAG_STABLE_ROW_IDS,
    FLAG_TABLE_CONFIG,
    FLAG_USE_V2_FORMAT_DEPRECATED,
    READABLE_FLAGS,
    Manifest,
    storage_version_of_file,
)
from quiver.format.table.rowids import (
    decode_row_ids,
    decode_row_versions,
    encode_row_ids,
    encode_row_versions,
    row_id_count,
)

LIBRARY = "quiver"
LIBRARY_VERSION = "0.1.0"
IDEMPOTENCY_KEY = "quiver.idempotency_key"
_STICKY = (
    FLAG_COVERED_INDEX_METADATA
    | FLAG_MIXED_DATA_FILE_VERSIONS
    | FLAG_FRAGMENT_REUSE_INDEX
    | FLAG_MANAGED_BLOBS
)
WRITABLE_FLAGS = READABLE_FLAGS | FLAG_TABLE_CONFIG | FLAG_DISABLE_TRANSACTION_FILE
Fragment = table_pb2.DataFragment


def new_transaction(
    read_version: int, operation: str, body: object, *, properties: dict[str, str] | None = None
) -> transaction_pb2.Transaction:
    """A transaction of `operation` (a oneof name: "append", "delete", ...) on `read_version`."""
    txn = transaction_pb2.Transaction(read_version=read_version, uuid=str(uuid.uuid4()))
    getattr(txn, operation).CopyFrom(body)
    for k, v in (properties or {}).items():
        txn.transaction_properties[k] = v
    return txn


def operation_of(txn: transaction_pb2.Transaction) -> str | None:
    """The operation name of a transaction, or None when this engine doesn't know it."""
    return txn.WhichOneof("operation")


def transaction_file_name(txn: transaction_pb2.Transaction) -> str:
    """The file name under `_transactions/` pylance uses for a transaction."""
    return f"{txn.read_version}-{txn.uuid}.txn"


@dataclass
class ManifestContext:
    """What building a manifest needs beyond the previous manifest and the transaction."""

    storage_version: str | None = None  # data_format for create/overwrite
    stable_row_ids: bool = False  # create only
    config: dict[str, str] = field(default_factory=dict)  # create only
    load_version: Callable[[int], Manifest] | None = None  # for Restore
    # legacy datasets: dictionary values for the manifest head, and each field's place there
    legacy_dictionaries: tuple[bytes, dict[int, tuple[int, int]]] | None = None


def _assign_row_ids(frags: Iterable[Fragment], manifest: table_pb2.Manifest, version: int) -> None:
    """Give fragments without row ids fresh stable ids and version sequences."""
    for frag in frags:
        n = int(frag.physical_rows)
        kind = frag.WhichOneof("row_id_sequence")
        carried = row_id_count(frag.inline_row_ids) if kind == "inline_row_ids" else n
        if kind is None or carried < n:
            # rows without an id (a merge's inserted rows follow the ids its updated
            # rows carry) get the next ones
            start = manifest.next_row_id
            fresh = np.arange(start, start + n - (carried if kind else 0), dtype=np.uint64)
            if kind:
                fresh = np.concatenate([decode_row_ids(frag.inline_row_ids), fresh])
            frag.inline_row_ids = encode_row_ids(fresh)
            manifest.next_row_id = start + n - (carried if kind else 0)
        versions = np.full(n, version, dtype=np.uint64)
        if frag.WhichOneof("created_at_version_sequence") is None:
            frag.inline_created_at_versions = encode_row_versions(versions)
        if frag.WhichOneof("last_updated_at_version_sequence") is None:
            frag.inline_last_updated_at_versions = encode_row_versions(versions)


def _carry_created_at(new: list[Fragment], sources: list[Fragment], version: int) -> list[Fragment]:
    """Copies of an update's new fragments whose rewritten rows (those carrying their old
    row ids) keep the version that created them, as pylance records it; their other rows
    (inserted) and every row's last update are `version`."""
    all_ids, all_versions = [], []
    for frag in sources:
        if frag.WhichOneof("row_id_sequence") != "inline_row_ids":
            continue
        ids = decode_row_ids(frag.inline_row_ids)
        if frag.WhichOneof("created_at_version_sequence") == "inline_created_at_versions":
            versions = decode_row_versions(frag.inline_created_at_versions)
        else:
            versions = np.ones(len(ids), dtype=np.uint64)
        all_ids.append(ids)
        all_versions.append(versions)
    known = np.concatenate(all_ids) if all_ids else np.empty(0, np.uint64)
    order = np.argsort(known, kind="stable")
    known = known[order]
    known_versions = np.concatenate(all_versions)[order] if all_ids else known
    out = []
    for f in new:
        g = copy.deepcopy(f)
        if g.WhichOneof("row_id_sequence") == "inline_row_ids" and len(known):
            ids = decode_row_ids(g.inline_row_ids)
            versions = np.full(int(g.physical_rows), version, dtype=np.uint64)
            at = np.minimum(np.searchsorted(known, ids), len(known) - 1)
            found = known[at] == ids
            versions[: len(ids)][found] = known_versions[at[found]]
            g.inline_created_at_versions = encode_row_versions(versions)
        out.append(g)
    return out


def _mark_rewritten_rows(
    frags: Iterable[Fragment], before: Iterable[Fragment], version: int
) -> None:
    """Rows of fragments that gained data files (new or rewritten columns) were last updated
    by `version`, as pylance records it for add_columns and type-changing alter_columns."""
    files_before = {int(f.id): {df.path for df in f.files} for f in before}
    for frag in frags:
        if not {df.path for df in frag.files} <= files_before.get(int(frag.id), set()):
            versions = np.full(int(frag.physical_rows), version, dtype=np.uint64)
            frag.inline_last_updated_at_versions = encode_row_versions(versions)


def _next_fragment_id(manifest: table_pb2.Manifest) -> int:
    """The first unused fragment id: after the recorded maximum, else after the largest id in
    use (pylance's ``Manifest::max_fragment_id``; old manifests don't record it)."""
    if manifest.HasField("max_fragment_id"):
        return int(manifest.max_fragment_id) + 1
    return max((int(f.id) for f in manifest.fragments), default=-1) + 1


def _add_fragments(
    manifest: table_pb2.Manifest, frags: Iterable[Fragment], version: int, stable: bool
) -> list[Fragment]:
    """Append copies of `frags` with fresh ids (and row ids when the dataset has them)."""
    out = []
    next_id = _next_fragment_id(manifest)
    for f in frags:
        g = copy.deepcopy(f)
        g.id = next_id
        next_id += 1
        out.append(g)
    if out:
        manifest.max_fragment_id = next_id - 1
    if stable:
        _assign_row_ids(out, manifest, version)
    manifest.fragments.extend(out)
    return out


def apply_feature_flags(manifest: table_pb2.Manifest, previous: int) -> None:
    """Recompute the flag words as pylance does, keeping sticky bits."""
    flags = previous & _STICKY
    if any(f.HasField("deletion_file") for f in manifest.fragments):
        flags |= FLAG_DELETION_FILES
    if previous & FLAG_STABLE_ROW_IDS or any(
        f.WhichOneof("row_id_sequence") for f in manifest.fragments
    ):
        flags |= FLAG_STABLE_ROW_IDS
    if manifest.base_paths:
        flags |= FLAG_BASE_PATHS
    default = manifest.data_format.version
    if default and any(
        storage_version_of_file(df.file_major_version, df.file_minor_version) != default
        for f in manifest.fragments
        for df in f.files
    ):
        flags |= FLAG_MIXED_DATA_FILE_VERSIONS  # e.g. compaction into another file version
    manifest.reader_feature_flags = flags
    writer = flags | (FLAG_TABLE_CONFIG if manifest.config else 0)
    manifest.writer_feature_flags = writer


def check_writable(manifest: Manifest, dataset: str) -> None:
    """Refuse to commit on top of a manifest with writer feature flags we don't know."""
    unknown = manifest.pb.writer_feature_flags & ~WRITABLE_FLAGS & ~FLAG_USE_V2_FORMAT_DEPRECATED
    if unknown:
        raise UnsupportedFeatureError(
            f"{dataset} version {manifest.version} uses writer feature flags {unknown} "
            "that this engine cannot preserve; refusing to write"
        )


def _drop_unreferenced_files(m: table_pb2.Manifest) -> None:
    """Remove the data files none of whose fields is in the schema any more (as pylance
    does after a projection: dropping every column a file holds drops the file)."""
    ids = {f.id for f in m.fields}
    for frag in m.fragments:
        keep = [df for df in frag.files if any(i in ids for i in df.fields)]
        if len(keep) != len(frag.files):
            del frag.files[:]
            frag.files.extend(keep)


def _by_id(frags: Iterable[Fragment]) -> dict[int, Fragment]:
    return {int(f.id): f for f in frags}


def build_manifest(
    previous: Manifest | None,
    txn: transaction_pb2.Transaction,
    version: int,
    ctx: ManifestContext,
) -> table_pb2.Manifest:
    """The manifest of `version`: `txn` applied to `previous` (None when creating)."""
    op = operation_of(txn)
    if previous is None and op != "overwrite":
        raise InvalidInputError(f"a new dataset must be created by an overwrite, not {op}")
    prev_pb = previous.pb if previous is not None else table_pb2.Manifest()
    m = copy.deepcopy(prev_pb)
    m.ClearField("transaction_section")
    m.ClearField("transaction_section_deprecated")
    m.ClearField("index_section")
    m.ClearField("tag")
    stable = bool(prev_pb.reader_feature_flags & FLAG_STABLE_ROW_IDS) or (
        previous is None and ctx.stable_row_ids
    )
    if op == "append":
        _add_fragments(m, txn.append.fragments, version, stable)
    elif op == "overwrite":
        body = txn.overwrite
        del m.fragments[:]
        del m.fields[:]
        m.fields.extend(body.schema)
        m.schema_metadata.clear()
        m.schema_metadata.update(body.schema_metadata)
        if previous is None:
            m.config.update(ctx.config)
        m.config.update(body.config_upsert_values)
        if body.initial_bases:
            del m.base_paths[:]
            m.base_paths.extend(body.initial_bases)
        _add_fragments(m, body.fragments, version, stable)
        if ctx.storage_version:
            m.data_format.CopyFrom(
                table_pb2.Manifest.DataStorageFormat(
                    file_format="lance", version=ctx.storage_version
                )
            )
    elif op == "delete":
        body = txn.delete
        current = _by_id(m.fragments)
        gone = set(body.deleted_fragment_ids)
        for upd in body.updated_fragments:
            if upd.id in current:
                current[upd.id].deletion_file.CopyFrom(upd.deletion_file)
        keep = [f for f in m.fragments if f.id not in gone]
        del m.fragments[:]
        m.fragments.extend(keep)
    elif op == "update":
        body = txn.update
        gone = set(body.removed_fragment_ids)
        updated = _by_id(body.updated_fragments)
        frags = [updated.get(int(f.id), f) for f in m.fragments if f.id not in gone]
        new = list(body.new_fragments)
        if stable:
            sources = [f for f in prev_pb.fragments if f.id in gone or int(f.id) in updated]
            new = _carry_created_at(new, sources, version)
        del m.fragments[:]
        m.fragments.extend(frags)
        _add_fragments(m, new, version, stable)
    elif op == "rewrite":
        _apply_rewrite(m, txn.rewrite, version, stable)
    elif op == "merge":
        body = txn.merge
        del m.fragments[:]
        m.fragments.extend(body.fragments)
        if stable:
            _mark_rewritten_rows(m.fragments, prev_pb.fragments, version)
        del m.fields[:]
        m.fields.extend(body.schema)
        m.schema_metadata.clear()
        m.schema_metadata.update(body.schema_metadata)
    elif op == "project":
        del m.fields[:]
        m.fields.extend(txn.project.schema)
        _drop_unreferenced_files(m)
    elif op == "data_replacement":
        current = _by_id(m.fragments)
        for group in txn.data_replacement.replacements:
            frag = current.get(group.fragment_id)
            if frag is None:
                raise InvalidInputError(
                    f"data replacement names missing fragment {group.fragment_id}"
                )
            replaced = set(group.new_file.fields)
            for df in frag.files:
                df.fields[:] = [-2 if i in replaced else i for i in df.fields]
            live = [df for df in frag.files if any(i != -2 for i in df.fields)]
            del frag.files[:]
            frag.files.extend(live)
            frag.files.append(group.new_file)
    elif op == "restore":
        if ctx.load_version is None:
            raise InvalidInputError("restore needs a way to load the restored version")
        old = ctx.load_version(txn.restore.version).pb
        m = copy.deepcopy(old)
        m.ClearField("transaction_section")
        m.ClearField("transaction_section_deprecated")
        m.ClearField("index_section")
        m.max_fragment_id = max(prev_pb.max_fragment_id, old.max_fragment_id)
        m.next_row_id = max(prev_pb.next_row_id, old.next_row_id)
    elif op == "update_config":
        _apply_config(m, txn.update_config)
    elif op == "create_index":
        pass  # only the index section changes (`index_carry.carry_indices`)
    elif op == "reserve_fragments":
        base = _next_fragment_id(m)
        if txn.reserve_fragments.num_fragments:
            m.max_fragment_id = base + txn.reserve_fragments.num_fragments - 1
    else:
        raise UnsupportedFeatureError(f"cannot apply a {op or 'unknown'} transaction")

    m.version = version
    m.timestamp.FromNanoseconds(time.time_ns())
    m.writer_version.CopyFrom(
        table_pb2.Manifest.WriterVersion(library=LIBRARY, version=LIBRARY_VERSION)
    )
    if not m.HasField("data_format") and ctx.storage_version:
        m.data_format.CopyFrom(
            table_pb2.Manifest.DataStorageFormat(file_format="lance", version=ctx.storage_version)
        )
    # pylance keeps fragments in id order (its compaction planner asserts it) and every
    # pylance commit re-sorts them; rewritten fragments thus move to the end of the table
    m.fragments.sort(key=lambda f: f.id)
    if m.fragments and not m.HasField("max_fragment_id"):
        m.max_fragment_id = max(f.id for f in m.fragments)
    previous_flags = prev_pb.reader_feature_flags | prev_pb.writer_feature_flags
    if previous is None and ctx.stable_row_ids:
        previous_flags |= FLAG_STABLE_ROW_IDS
    apply_feature_flags(m, previous_flags if op != "restore" else m.reader_feature_flags)
    if m.reader_feature_flags & FLAG_STABLE_ROW_IDS:
        missing = [f.id for f in m.fragments if f.WhichOneof("row_id_sequence") is None]
        if missing:
            raise CorruptFileError(
                "manifest", f"stable row ids are enabled but fragments {missing} have none"
            )
    return m


def _apply_rewrite(
    m: table_pb2.Manifest, body: transaction_pb2.Transaction.Rewrite, version: int, stable: bool
) -> None:
    """Replace each group's old fragments by its new ones (which sort last: fresh ids)."""
    groups = list(body.groups)
    if not groups and (body.old_fragments or body.new_fragments):  # the pre-groups form
        groups = [
            transaction_pb2.Transaction.Rewrite.RewriteGroup(
                old_fragments=body.old_fragments, new_fragments=body.new_fragments
            )
        ]
    frags = list(m.fragments)
    present = {int(f.id) for f in frags}
    for g in groups:
        old_ids = {int(f.id) for f in g.old_fragments}
        if not old_ids:
            raise InvalidInputError("a rewrite group must name the fragments it replaces")
        missing = old_ids - present
        if missing:
            raise InvalidInputError(f"rewrite of fragments {sorted(missing)} that don't exist")
        # new ids continue after every id ever used, including the fragments being replaced;
        # a nonzero id was reserved beforehand (ReserveFragments, as compaction of indexed
        # fragments does so that remapped indices can name it) and is kept, as pylance does
        scratch = table_pb2.Manifest(next_row_id=m.next_row_id)
        first_free = _next_fragment_id(m)
        if first_free:
            scratch.max_fragment_id = first_free - 1
        reserved = [copy.deepcopy(f) for f in g.new_fragments if f.id]
        clash = {int(f.id) for f in reserved} & present
        if clash:
            raise InvalidInputError(f"rewrite gives new fragments ids in use: {sorted(clash)}")
        new = _add_fragments(scratch, [f for f in g.new_fragments if not f.id], version, stable)
        if stable:
            _assign_row_ids(reserved, scratch, version)
        new += reserved
        top = max([int(f.id) for f in reserved], default=-1)
        if scratch.HasField("max_fragment_id") or reserved:
            m.max_fragment_id = max(int(scratch.max_fragment_id), top, first_free - 1)
        m.next_row_id = scratch.next_row_id
        frags = [f for f in frags if f.id not in old_ids] + new
        present = (present - old_ids) | {int(f.id) for f in new}
    del m.fragments[:]
    m.fragments.extend(frags)


def _apply_update_map(target: object, update: transaction_pb2.Transaction.UpdateMap) -> None:
    if update.replace:
        target.clear()
    for entry in update.update_entries:
        if entry.HasField("value"):
            target[entry.key] = entry.value
        else:
            target.pop(entry.key, None)


def _apply_config(m: table_pb2.Manifest, body: transaction_pb2.Transaction.UpdateConfig) -> None:
    """Config, table, schema and field metadata updates, new and legacy field forms."""
    if body.HasField("config_updates"):
        _apply_update_map(m.config, body.config_updates)
    if body.HasField("table_metadata_updates"):
        _apply_update_map(m.table_metadata, body.table_metadata_updates)
    if body.HasField("schema_metadata_updates"):
        meta = {k: v.decode() for k, v in m.schema_metadata.items()}
        _apply_update_map(meta, body.schema_metadata_updates)
        m.schema_metadata.clear()
        m.schema_metadata.update({k: v.encode() for k, v in meta.items()})
    for field_id, update in body.field_metadata_updates.items():
        for proto in m.fields:
            if proto.id == field_id:
                meta = {k: v.decode() for k, v in proto.metadata.items()}
                _apply_update_map(meta, update)
                proto.metadata.clear()
                proto.metadata.update({k: v.encode() for k, v in meta.items()})
    m.config.update(body.upsert_values)
    for key in body.delete_keys:
        m.config.pop(key, None)
    for key, value in body.schema_metadata.items():
        m.schema_metadata[key] = value.encode()

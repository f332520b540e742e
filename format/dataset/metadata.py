"""Configuration and metadata updates, one `UpdateConfig` commit each, as pylance 14 writes
them: the table config (`update_config`, `delete_config_keys`), the table metadata
(`update_metadata`), the schema's metadata (`update_schema_metadata`) and fields' metadata
(`update_field_metadata`, fields named by path: "st.x"). A value of None removes its key;
`replace` replaces the whole map instead of merging into it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from quiver.format.dataset.core import DatasetCore
from quiver.format.errors import ColumnNotFoundError, InvalidInputError
from quiver.format.proto import transaction_pb2
from quiver.format.table.transaction import new_transaction

T = transaction_pb2.Transaction


def _update_map(values: Mapping[str, str | None], replace: bool, what: str) -> T.UpdateMap:
    """An UpdateMap of `values` (None: remove the key), checked to map strings to strings."""
    if not isinstance(values, Mapping):
        raise InvalidInputError(f"{what} must be a dict of strings, not {type(values).__name__}")
    out = T.UpdateMap(replace=bool(replace))
    for key, value in values.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise InvalidInputError(f"{what} must map strings to strings or None: {key!r}")
        entry = out.update_entries.add(key=key)
        if value is not None:
            entry.value = value
    return out


def _commit(core: DatasetCore, body: T.UpdateConfig) -> DatasetCore:
    return core.commit(new_transaction(core.version, "update_config", body))


def update_config(
    core: DatasetCore, values: Mapping[str, str | None], *, replace: bool = False
) -> DatasetCore:
    """Set (or with None remove) table config keys."""
    return _commit(core, T.UpdateConfig(config_updates=_update_map(values, replace, "config")))


def delete_config_keys(core: DatasetCore, keys: Iterable[str]) -> DatasetCore:
    """Remove table config keys (absent ones are no error)."""
    if isinstance(keys, str):
        raise InvalidInputError("keys must be a list of config keys, not a string")
    removed = _update_map(dict.fromkeys(keys), False, "config keys")
    return _commit(core, T.UpdateConfig(config_updates=removed))


def update_metadata(
    core: DatasetCore, values: Mapping[str, str | None], *, replace: bool = False
) -> DatasetCore:
    """Set (or remove) keys of the table metadata."""
    body = T.UpdateConfig(table_metadata_updates=_update_map(values, replace, "metadata"))
    return _commit(core, body)


def update_schema_metadata(
    core: DatasetCore, values: Mapping[str, str | None], *, replace: bool = False
) -> DatasetCore:
    """Set (or remove) keys of the schema's metadata."""
    body = T.UpdateConfig(schema_metadata_updates=_update_map(values, replace, "schema metadata"))
    return _commit(core, body)


def update_field_metadata(
    core: DatasetCore,
    updates: Mapping[str, Mapping[str, str | None]],
    *,
    replace: bool = False,
) -> DatasetCore:
    """Set (or remove) metadata keys of fields named by path ("a", "st.x")."""
    if not isinstance(updates, Mapping):
        raise InvalidInputError("field metadata updates must be a dict of field path -> dict")
    ids = {path: f.id for path, f in _paths(core)}
    body = T.UpdateConfig()
    for path, values in updates.items():
        if path not in ids:
            raise ColumnNotFoundError(
                f"{core.uri}: field {path!r} not found; fields are {', '.join(ids)}"
            )
        body.field_metadata_updates[ids[path]].CopyFrom(
            _update_map(values, replace, f"metadata of field {path!r}")
        )
    return _commit(core, body)


def _paths(core: DatasetCore) -> list[tuple[str, object]]:
    """(dotted path, field) of every field of the schema, parents first."""
    out = []

    def visit(field: object, prefix: str) -> None:
        path = f"{prefix}{field.name}"
        out.append((path, field))
        for child in field.children:
            visit(child, f"{path}.")

    for top in core.lance_schema.fields:
        visit(top, "")
    return out

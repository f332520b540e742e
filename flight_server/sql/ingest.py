"""Bulk ingest (`CommandStatementIngest`): an uploaded Arrow stream into a dataset, one
commit per call, through the same write path as a plain DoPut.

ADBC's `adbc_ingest` modes map onto the command's two options: create (the table must not
exist), append (it must), replace (overwrite it, or create it), create_append (either).
The target is `[schema.]table` as in SQL: dataset `team/sales` is schema `team`, table
`sales`; without a schema (or with `public`), a dataset at the top of the root.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow.flight as flight

from quiver.flight_server.errors import AlreadyExists, InvalidArgument, NotFound, Unimplemented
from quiver.flight_server.protocol import PutRequest
from quiver.flight_server.sql.catalog import (
    DEFAULT_SCHEMA,
    check_catalog,
    dataset_names,
    on_sql_branch,
    table_ref,
)
from quiver.flight_server.sql.messages import sql
from quiver.flight_server.uploads import uploaded_batches
from quiver.wire.requests import WRITE

if TYPE_CHECKING:
    from quiver.flight_server.service import DatasetService

_Options = sql.CommandStatementIngest.TableDefinitionOptions


def target_name(command: Any) -> str:
    """The dataset an ingest command names."""
    check_catalog(command.catalog if command.HasField("catalog") else None)
    if not command.table:
        raise InvalidArgument("bulk ingest needs a table name")
    schema = command.schema if command.HasField("schema") and command.schema else DEFAULT_SCHEMA
    base, branch, ref = table_ref(command.table)
    if ref is not None:
        raise InvalidArgument(f"bulk ingest into {command.table!r}: a version cannot be written")
    return on_sql_branch(dataset_names(schema, base)[0], branch)


def run(
    service: DatasetService,
    command: Any,
    reader: flight.MetadataRecordBatchReader,
    identity: Any,
    cancelled: Callable[[], bool],
) -> tuple[int, dict[str, Any]]:
    """Write the upload as the command's options say: rows written, and what to log."""
    if command.HasField("transaction_id"):
        raise Unimplemented("bulk ingest in a transaction is not supported")
    if command.temporary:
        raise Unimplemented("temporary tables are not supported; every table is a dataset")
    name = target_name(command)
    service.uri(name)  # validated before anything else
    service.authorize(identity, name, WRITE)  # refused before existence is told
    options = command.table_definition_options
    exists = service.handles.try_latest(name) is not None
    mode = _mode(name, exists, options)
    try:
        schema = reader.schema
    except Exception:  # noqa: BLE001 - a descriptor-only stream carries no rows
        raise InvalidArgument("bulk ingest needs an Arrow stream of rows") from None
    batches = uploaded_batches(reader)
    result = service.put(PutRequest(name, mode=mode), schema, batches, cancelled, identity)
    rows = int(result.get("rows", 0))
    return rows, {"dataset": name, "version": result.get("version"), "rows": rows}


def _mode(name: str, exists: bool, options: Any) -> str:
    """The write mode the options ask of a dataset that does (not) exist."""
    if exists:
        choice = options.if_exists
        if choice in (_Options.TABLE_EXISTS_OPTION_FAIL, _Options.TABLE_EXISTS_OPTION_UNSPECIFIED):
            raise AlreadyExists(
                f"table {name!r} already exists (ingest with mode append or replace)"
            )
        return "append" if choice == _Options.TABLE_EXISTS_OPTION_APPEND else "overwrite"
    choice = options.if_not_exist
    if choice == _Options.TABLE_NOT_EXIST_OPTION_FAIL:
        raise NotFound(f"table {name!r} does not exist (ingest with mode create)")
    return "create"

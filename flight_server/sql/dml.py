"""SQL statements that change datasets, run by Quiver's engine: DELETE, UPDATE, INSERT and
MERGE, each one commit.

The SQL engine only reads; the statements that write are parsed here (sqlglot, in the
Postgres dialect the engine's SQL resembles: double-quoted identifiers, `$1` parameters)
and become the engine's own row changes, which commit with conflict retries as pylance's
do:

- `DELETE FROM t [WHERE p]` → `delete(p)`;
- `UPDATE t SET c = e, ... [WHERE p]` → `update({c: e}, where=p)` (expressions over the
  row's own columns, in Lance's filter SQL);
- `INSERT INTO t [(columns)] <query | VALUES ...>` → the query run by the SQL engine and its
  rows appended (columns matched by position; columns left out are null);
- `MERGE INTO t USING <table | (query)> ON t.k = s.k [AND ...] WHEN ...` → `merge_insert`
  on the key columns, with `WHEN MATCHED [AND cond] THEN UPDATE SET * | DELETE`,
  `WHEN NOT MATCHED THEN INSERT *` and `WHEN NOT MATCHED BY SOURCE [AND cond] THEN DELETE`.

The caller needs the write right on the changed dataset, and the read right on every
dataset a query reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from quiver.flight_server.errors import InvalidArgument, NotFound, Unimplemented
from quiver.flight_server.protocol import MergeRequest, PutRequest
from quiver.flight_server.sql.catalog import (
    DEFAULT_SCHEMA,
    check_catalog,
    dataset_names,
    on_sql_branch,
    table_ref,
)
from quiver.format.expr.parse import LanceFilterDialect
from quiver.wire.requests import WRITE

if TYPE_CHECKING:
    from quiver.flight_server.sql.front import FlightSql

_DIALECT = "postgres"
_CHANGES = {"INSERT", "UPDATE", "DELETE", "MERGE"}


def is_change(query: str) -> bool:
    """Whether `query` is a statement that changes a dataset (by its first keyword)."""
    try:
        tokens = sqlglot.tokenize(query, read=_DIALECT)
    except TokenError:
        return False
    return bool(tokens) and tokens[0].token_type.name in _CHANGES


def run(
    front: FlightSql,
    query: str,
    parameters: list[pa.Scalar] | None,
    identity: Any,
    cancelled: Callable[[], bool],
) -> tuple[int, dict[str, Any]]:
    """Run one changing statement: the rows it changed, and what to log."""
    if not is_change(query):
        raise InvalidArgument(
            "an update statement must be INSERT, UPDATE, DELETE or MERGE; queries are sent "
            "with CommandStatementQuery"
        )
    try:
        statements = sqlglot.parse(query, read=_DIALECT)
    except (ParseError, TokenError) as e:
        raise InvalidArgument(f"SQL: {' '.join(str(e).split())}") from None
    if len(statements) != 1 or statements[0] is None:
        raise InvalidArgument("send one statement at a time")
    statement = statements[0]
    if parameters:
        statement = _bind(statement, parameters)
    change = _Change(front, identity, cancelled)
    if isinstance(statement, exp.Delete):
        return change.delete(statement)
    if isinstance(statement, exp.Update):
        return change.update(statement)
    if isinstance(statement, exp.Insert):
        return change.insert(statement, query, parameters)
    if isinstance(statement, exp.Merge):
        return change.merge(statement)
    raise InvalidArgument(f"SQL: {type(statement).__name__} statements are not supported")


def _bind(statement: exp.Expression, parameters: list[pa.Scalar]) -> exp.Expression:
    """`statement` with `$n` replaced by the n-th parameter value as a literal."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter | exp.Placeholder):
            text = node.name or (node.this.name if isinstance(node.this, exp.Expression) else "")
            if not text.isdigit() or not 1 <= int(text) <= len(parameters):
                raise InvalidArgument(f"SQL: no value bound for parameter ${text or '?'}")
            return exp.convert(parameters[int(text) - 1].as_py())
        return node

    return statement.transform(replace)


def _name(identifier: exp.Expression | None) -> str:
    """An identifier as the engine reads it: unquoted names folded to lower case."""
    if identifier is None:
        return ""
    if isinstance(identifier, exp.Identifier) and not identifier.quoted:
        return identifier.this.lower()
    return identifier.name


def _lance_sql(expression: exp.Expression) -> str:
    """An expression over one table's columns in Lance's filter SQL (qualifiers dropped)."""

    def unqualify(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            return exp.column(_name(node.this), quoted=True)
        if isinstance(node, exp.Select | exp.Subquery):
            raise Unimplemented("SQL: subqueries in DELETE and UPDATE are not supported")
        return node

    return expression.transform(unqualify).sql(dialect=LanceFilterDialect)


class _Change:
    """One changing statement for one caller."""

    def __init__(self, front: FlightSql, identity: Any, cancelled: Callable[[], bool]) -> None:
        self.front = front
        self.service = front.service
        self.identity = identity
        self.cancelled = cancelled

    def target(self, table: exp.Expression) -> str:
        """The dataset a statement changes, checked to exist and to be writable."""
        if isinstance(table, exp.Schema):
            table = table.this
        if not isinstance(table, exp.Table) or not table.name:
            raise InvalidArgument("SQL: the statement must name one table to change")
        check_catalog(_name(table.args.get("catalog")))
        schema = _name(table.args.get("db")) or DEFAULT_SCHEMA
        base, branch, ref = table_ref(_name(table.this))
        if ref is not None:
            raise InvalidArgument(
                f"SQL: {_name(table.this)!r} names a version; changes go to the latest"
            )
        candidates = dataset_names(schema, base)
        for name in candidates:
            self.service.uri(name)  # a valid name inside the root
            if self.service.handles.try_latest(name) is not None:
                self.service.authorize(self.identity, name, WRITE)
                target = on_sql_branch(name, branch)
                if branch is not None:
                    self.service.handles.try_latest(target)  # NotFound: no such branch
                return target
        self.service.authorize(self.identity, candidates[0], WRITE)
        raise NotFound(
            f"SQL: table {schema}.{base} does not exist (create a dataset with bulk ingest)"
        )

    def delete(self, statement: exp.Delete) -> tuple[int, dict[str, Any]]:
        name = self.target(statement.this)
        where = statement.args.get("where")
        predicate = _lance_sql(where.this) if where is not None else "true"
        ds = self.service.handles.open_latest(name)
        stats = self._change(name, ds, lambda: ds.delete(predicate))
        return stats["num_deleted_rows"], {"dataset": name, "version": ds.version}

    def update(self, statement: exp.Update) -> tuple[int, dict[str, Any]]:
        name = self.target(statement.this)
        if statement.args.get("from_") is not None or statement.args.get("from") is not None:
            raise Unimplemented("SQL: UPDATE ... FROM is not supported; use MERGE")
        updates = {}
        for assignment in statement.expressions:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
                raise InvalidArgument("SQL: UPDATE's SET takes column = expression pairs")
            updates[_name(assignment.this.this)] = _lance_sql(assignment.expression)
        where = statement.args.get("where")
        ds = self.service.handles.open_latest(name)
        condition = _lance_sql(where.this) if where is not None else None
        stats = self._change(name, ds, lambda: ds.update(updates, condition))
        return stats["num_rows_updated"], {"dataset": name, "version": ds.version}

    def _change(self, name: str, ds: Any, change: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Run a change of dataset `name` read at `ds`: a damaged file it reads names the
        dataset, version, fragment and file, a storage outage the dataset (as reads do)."""
        try:
            return change()
        except Exception as e:  # noqa: BLE001 - explained, or raised as it was
            raise self.service.explain(e, name, ds.version) from None

    def insert(
        self, statement: exp.Insert, query: str, parameters: list[pa.Scalar] | None
    ) -> tuple[int, dict[str, Any]]:
        if statement.args.get("conflict") is not None or statement.args.get("overwrite"):
            raise Unimplemented(
                "SQL: INSERT OVERWRITE and ON CONFLICT are not supported; use MERGE"
            )
        name = self.target(statement.this)
        columns = None
        if isinstance(statement.this, exp.Schema):
            columns = [_name(c) for c in statement.this.expressions]
        source = _insert_source(query)
        planned = self.front.engine.plan(source, self.identity, parameters=parameters)
        target = self.service.handles.open_current(name).schema
        names = _insert_columns(planned.schema, target, columns, name)
        rows = _aligned(self.front.engine.stream(planned), target, names, name)
        result = self.service.put(
            PutRequest(name, mode="append"), target, rows, self.cancelled, self.identity
        )
        return int(result.get("rows", 0)), {"dataset": name, "version": result.get("version")}

    def merge(self, statement: exp.Merge) -> tuple[int, dict[str, Any]]:
        target_table = statement.this
        name = self.target(target_table)
        target_alias = target_table.alias_or_name
        using = statement.args.get("using")
        if isinstance(using, exp.Table):
            source_alias = using.alias_or_name
            source_sql = f"SELECT * FROM {using.copy().sql(dialect=_DIALECT)}"
        elif isinstance(using, exp.Subquery):
            source_alias = using.alias_or_name
            source_sql = using.this.sql(dialect=_DIALECT)
        else:
            raise InvalidArgument("SQL: MERGE's USING must be a table or a (query) with an alias")
        target = self.service.handles.open_current(name).schema
        alias = using.args.get("alias")
        source_id = alias.this if alias is not None else using.this
        spec, values = _merge_spec(statement, target_alias, source_alias, target.names, source_id)
        if values is not None:  # SET / INSERT lists: the source as rows of the target's columns
            source_sql = _source_rows(source_sql, source_id, values)
        planned = self.front.engine.plan(source_sql, self.identity)
        rows, schema = self.front.engine.stream(planned), planned.schema
        if values is not None:  # the listed columns, computed values in their types
            schema = pa.schema([f for f in target if f.name in values])
            rows = _aligned(rows, schema, list(values), name)
        result = self.service.put(
            PutRequest(name, merge=spec), schema, rows, self.cancelled, self.identity
        )
        changed = sum(
            int(result.get(k, 0)) for k in ("inserted_rows", "updated_rows", "deleted_rows")
        )
        return changed, {"dataset": name, "version": result.get("version")}


def _insert_source(query: str) -> str:
    """The query of an INSERT (what follows the table and its column list), as written."""
    tokens = sqlglot.tokenize(query, read=_DIALECT)
    i = 2  # INSERT INTO
    while i < len(tokens) and tokens[i].token_type.name in ("VAR", "IDENTIFIER", "DOT", "STRING"):
        i += 1
    if i < len(tokens) and tokens[i].token_type.name == "L_PAREN":
        # a column list, unless the source itself is a parenthesised query
        following = tokens[i + 1].token_type.name if i + 1 < len(tokens) else ""
        if following not in ("SELECT", "WITH", "VALUES"):
            while i < len(tokens) and tokens[i].token_type.name != "R_PAREN":
                i += 1
            i += 1
    if i >= len(tokens):
        raise InvalidArgument("SQL: INSERT needs a query or VALUES")
    return query[tokens[i].start :]


def _insert_columns(
    schema: pa.Schema, target: pa.Schema, columns: list[str] | None, name: str
) -> list[str]:
    """The target columns an INSERT's values go to, by position: `columns`, else all."""
    names = columns if columns is not None else target.names
    if len(schema) != len(names):
        raise InvalidArgument(
            f"SQL: INSERT into {name!r} gives {len(schema)} values per row for {len(names)} columns"
        )
    unknown = [c for c in names if c not in target.names]
    if unknown:
        raise InvalidArgument(f"SQL: table {name!r} has no column {unknown[0]!r}")
    return names


def _aligned(
    batches: Iterator[pa.RecordBatch], target: pa.Schema, names: list[str], name: str
) -> Iterator[pa.RecordBatch]:
    """The inserted rows in the target's schema: source columns matched by position to
    `names`, the target's other columns null, every value cast."""
    position = {c: i for i, c in enumerate(names)}
    for batch in batches:
        arrays = []
        for field in target:
            if field.name in position:
                column = batch.column(position[field.name])
                try:
                    arrays.append(column.cast(field.type))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                    raise InvalidArgument(
                        f"SQL: column {field.name!r} of {name!r} is {field.type}; "
                        f"the value cannot be cast: {e}"
                    ) from None
            else:
                arrays.append(pa.nulls(batch.num_rows, field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=target)


def _merge_spec(
    statement: exp.Merge,
    target: str,
    source: str,
    columns: list[str],
    source_id: exp.Identifier,
) -> tuple[MergeRequest, dict[str, exp.Expression] | None]:
    """A MERGE's clauses as the engine's merge request, and, when they list columns
    (`UPDATE SET c = ...`, `INSERT (c, ...) VALUES (...)`, as dbt writes them), the value of
    each column of the target's `columns` the source's rows write (`_merge_values`)."""
    keys = []
    for condition in _conjuncts(statement.args.get("on")):
        if not (
            isinstance(condition, exp.EQ)
            and isinstance(condition.this, exp.Column)
            and isinstance(condition.expression, exp.Column)
            and _name(condition.this.this) == _name(condition.expression.this)
        ):
            raise Unimplemented(
                "SQL: MERGE's ON must be equalities of same-named columns (t.k = s.k AND ...)"
            )
        keys.append(_name(condition.this.this))
    when_matched, matched_condition, matched_when = "nothing", None, None
    insert = delete_by_source = False
    by_source_filter = None
    listed: dict[str, dict[str, exp.Expression] | None] = {}  # clause -> its column values
    whens = statement.args.get("whens")
    for when in whens.expressions if whens is not None else []:
        then, condition = when.args.get("then"), when.args.get("condition")
        deleting = isinstance(then, exp.Var) and then.name.upper() == "DELETE"
        if when.args.get("matched"):
            if isinstance(then, exp.Update):
                when_matched = "update_all"
                if not all(isinstance(e, exp.Star) for e in then.expressions):
                    listed["UPDATE SET"] = _assignments(then, columns)
                else:
                    listed["UPDATE SET"] = None
                if condition is not None:
                    matched_when = condition
                    matched_condition = _qualified(condition, target, source)
            elif deleting and condition is None:
                when_matched = "delete"
            else:
                raise Unimplemented(
                    "SQL: WHEN MATCHED supports THEN UPDATE SET (with an AND condition or "
                    "not) and THEN DELETE"
                )
        elif when.args.get("source"):
            if not deleting:
                raise Unimplemented("SQL: WHEN NOT MATCHED BY SOURCE supports THEN DELETE only")
            delete_by_source = True
            if condition is not None:
                by_source_filter = _lance_sql(condition)
        else:
            if not isinstance(then, exp.Insert) or condition:
                raise Unimplemented("SQL: WHEN NOT MATCHED supports THEN INSERT (with no AND)")
            insert = True
            listed["INSERT"] = None if isinstance(then.this, exp.Star) else _inserted(then, columns)
    values = _merge_values(listed, columns, keys, source_id)
    if values is not None and matched_when is not None:
        for ref in matched_when.find_all(exp.Column):
            if _name(ref.args.get("table")) == _name(source_id) and _name(ref.this) not in values:
                raise Unimplemented(
                    "SQL: a WHEN MATCHED condition may read the target's columns and the "
                    f"listed columns of the source ({ref.sql(dialect=_DIALECT)} is not listed)"
                )
    spec = MergeRequest(
        on=tuple(keys),
        when_matched=when_matched,
        matched_condition=matched_condition,
        insert=insert,
        delete_by_source=delete_by_source,
        by_source_filter=by_source_filter,
    )
    return spec, values


def _assignments(update: exp.Update, columns: list[str]) -> dict[str, exp.Expression]:
    """`UPDATE SET c = e, ...` as {c: e}, each c a column of the target."""
    values: dict[str, exp.Expression] = {}
    for assignment in update.expressions:
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise InvalidArgument("SQL: UPDATE's SET takes column = expression pairs")
        values[_target_column(assignment.this, columns)] = assignment.expression
    return values


def _inserted(insert: exp.Insert, columns: list[str]) -> dict[str, exp.Expression]:
    """`INSERT (c, ...) VALUES (e, ...)` (or `INSERT VALUES (e, ...)`, every column in
    order) as {c: e}."""
    given = insert.expression
    if not isinstance(given, exp.Tuple):
        raise InvalidArgument("SQL: MERGE's INSERT takes VALUES (...)")
    if isinstance(insert.this, exp.Tuple):
        names = [_target_column(c, columns) for c in insert.this.expressions]
    else:
        names = list(columns)
    if len(names) != len(given.expressions):
        raise InvalidArgument(
            f"SQL: MERGE's INSERT gives {len(given.expressions)} values for {len(names)} columns"
        )
    return dict(zip(names, given.expressions, strict=True))


def _target_column(column: exp.Expression, columns: list[str]) -> str:
    name = _name(column.this if isinstance(column, exp.Column) else column)
    if not isinstance(column, exp.Column) or name not in columns:
        raise InvalidArgument(f"SQL: the target table has no column {name!r}")
    return name


def _merge_values(
    listed: dict[str, dict[str, exp.Expression] | None],
    columns: list[str],
    keys: list[str],
    source_id: exp.Identifier,
) -> dict[str, exp.Expression] | None:
    """The value of each column the source's rows write, when a clause lists columns; None
    when every clause is `*` (the source's rows as they are).

    The rows carry the listed columns only: an updated row keeps its others, an inserted
    row has NULL there (the merge of a source lacking columns). One row of the source
    serves both clauses, so both must list the same columns with the same values (`*`
    being each column's same-named source column), from the source's columns alone (named
    by its alias: a bare `qty` could mean the target's); the rows carry each key column as
    the source's key, which they are matched by."""
    if all(values is None for values in listed.values()):
        return None
    source = _name(source_id)
    rows: dict[str, exp.Expression] = {}
    named: list[set[str]] = []
    for clause, values in listed.items():
        if values is None:
            values = {c: exp.column(c, table=source_id.copy(), quoted=True) for c in columns}
        elif clause == "UPDATE SET":  # an updated row's key is the one it was matched by
            missing = [k for k in keys if k not in values]
            values = {**values, **{k: exp.column(k, table=source_id.copy()) for k in missing}}
        named.append(set(values))
        for c, value in values.items():
            for ref in value.find_all(exp.Column):
                if _name(ref.args.get("table")) != source:  # (`c` alone: whose c?)
                    raise Unimplemented(
                        f"SQL: MERGE's {clause} values may read the source's columns only, "
                        f"named by its alias ({ref.sql(dialect=_DIALECT)} is not one)"
                    )
            known = rows.setdefault(c, value)
            if _unqualified(known, source) != _unqualified(value, source):
                raise Unimplemented(
                    f"SQL: MERGE's UPDATE SET and INSERT must give column {c!r} the same value"
                )
    if len(named) == 2 and named[0] != named[1]:
        differ = sorted(named[0] ^ named[1])
        raise Unimplemented(
            "SQL: MERGE's UPDATE SET and INSERT must list the same columns (one source row "
            f"serves both); only one lists {', '.join(differ)}"
        )
    for key in keys:
        if key not in rows:
            raise Unimplemented(f"SQL: MERGE's INSERT must give the key column {key!r}")
        if _unqualified(rows[key], source) != _unqualified(exp.column(key), source):
            raise Unimplemented(
                f"SQL: MERGE must write key column {key!r} as the source's {key!r}, which "
                "the rows are matched by"
            )
    return rows


def _unqualified(value: exp.Expression, source: str) -> str:
    """`value` as SQL with the source's qualifier dropped and names folded, to compare."""

    def strip(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and _name(node.args.get("table")) in ("", source):
            return exp.column(_name(node.this))
        return node

    return value.copy().transform(strip).sql(dialect=_DIALECT)


def _source_rows(
    source_sql: str, source_id: exp.Identifier, values: dict[str, exp.Expression]
) -> str:
    """The source query's rows as the target's columns, each its MERGE value."""
    select = ", ".join(
        f"{v.sql(dialect=_DIALECT)} AS {exp.to_identifier(c, quoted=True).sql(dialect=_DIALECT)}"
        for c, v in values.items()
    )
    return f"SELECT {select} FROM ({source_sql}) AS {source_id.sql(dialect=_DIALECT)}"


def _conjuncts(condition: exp.Expression | None) -> list[exp.Expression]:
    if condition is None:
        raise InvalidArgument("SQL: MERGE needs an ON condition")
    if isinstance(condition, exp.And):
        return _conjuncts(condition.this) + _conjuncts(condition.expression)
    if isinstance(condition, exp.Paren):
        return _conjuncts(condition.this)
    return [condition]


def _qualified(condition: exp.Expression, target: str, source: str) -> str:
    """A matched-rows condition in Lance's form: columns as `target.c` and `source.c`."""

    def requalify(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column):
            table = node.table
            if table not in (target, source):
                raise InvalidArgument(
                    f"SQL: column {node.name!r} in WHEN MATCHED must be qualified by "
                    f"{target!r} or {source!r}"
                )
            side = "target" if table == target else "source"
            return exp.column(_name(node.this), table=side)
        return node

    return condition.transform(requalify).sql(dialect=LanceFilterDialect)

"""pylance-style SQL value expressions (`a * 2`, `s || 'x'`, `CAST(f AS double)`) -> Arrow.

The grammar, typing and semantics are those of filters (see `format.expr`), plus pylance's
rule that the literal of a root `column <op> literal` takes the column's type for every
binary operator: `a * 2` on an int32 column is int32, `a + 1.5` is refused. The result's
nullability follows DataFusion's: columns carry theirs, literals are never NULL (except
NULL itself), operators are nullable when an operand is, COALESCE when all its arguments
are, IS NULL never is, and other functions always are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow._acero as acero  # pyarrow.acero also loads pyarrow.dataset: ~10 MB more
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.errors import FilterBindError, FilterSyntaxError, InvalidInputError
from quiver.format.expr.bind import Binder
from quiver.format.expr.parse import parse_filter
from quiver.format.expr.types import TypeRuleError

_ALWAYS_NULLABLE_FUNCTIONS = (
    exp.Anonymous,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Abs,
    exp.IsNan,
    exp.Nullif,
    exp.RegexpLike,
)


@dataclass(frozen=True)
class CompiledExpression:
    """A value expression bound to a schema: its Arrow expression, result field and inputs."""

    expression: pc.Expression
    type: pa.DataType
    nullable: bool
    columns: list[str] = field(default_factory=list)
    sql: str = ""
    # operations that fail on an arithmetic overflow, as pylance's do (named when one does)
    checked: tuple[str, ...] = ()

    def to_field(self, name: str) -> pa.Field:
        """The Arrow field of a column holding this expression's values."""
        return pa.field(name, self.type, self.nullable)


def _as_expression_error(e: InvalidInputError) -> InvalidInputError:
    """The same error, worded for an expression rather than a filter."""
    message = str(e)
    if message.startswith("filter "):
        message = "expression " + message[len("filter ") :]
    message = message.replace("is not supported in filters", "is not supported in expressions")
    return type(e)(message)


def compile_expression(
    sql: str, schema: pa.Schema, *, dataset: str | None = None
) -> CompiledExpression:
    """Compile a pylance SQL value expression against `schema`.

    Raises FilterSyntaxError / FilterBindError (worded for an expression) as filters do.
    """
    try:
        node = parse_filter(sql, dataset=dataset)
        binder = Binder(sql, schema, dataset)
        binder.null_on_row_errors = False
        binder.regexp_match_lists = True  # a value: the matches, not "has a match"
        try:
            bound = binder.bind_value_root(node)
        except (FilterSyntaxError, FilterBindError):
            raise
        except RecursionError:
            raise FilterSyntaxError(f"expression {sql!r} is too deeply nested to compile") from None
        except (TypeRuleError, pa.ArrowException, TypeError, ValueError, KeyError) as e:
            raise binder.bind_error(str(e)) from None
        except (AttributeError, IndexError) as e:
            raise binder.unsupported(f"this construct ({type(e).__name__}: {e})") from None
        if bound.const:
            nullable = bound.value is None or not bound.value.is_valid
        else:
            nullable = _nullable(node, binder)
    except (FilterSyntaxError, FilterBindError) as e:
        raise _as_expression_error(e) from None
    columns = [name for name in schema.names if name in binder.columns]
    expression, dtype = bound.expression(), bound.type
    encoded = _dictionary_field(node, bound.path, schema)
    if encoded is not None:  # a column as it is, dictionary-encoded as pylance returns it
        expression, dtype = pc.field(*bound.path), encoded
    return CompiledExpression(
        expression=expression,
        type=dtype,
        nullable=nullable,
        columns=columns,
        sql=sql,
        checked=tuple(dict.fromkeys(binder.checked_ops)),
    )


def _dictionary_field(
    node: exp.Expression, path: tuple[str, ...] | None, schema: pa.Schema
) -> pa.DataType | None:
    """The dictionary type of the field an expression that is only a column reference
    (`top`, `s.f`) names, which binding decodes for the functions and operators a larger
    expression applies; None for anything else."""
    while isinstance(node, exp.Paren):
        node = node.this
    if not path or not isinstance(node, (exp.Column, exp.Dot, exp.Bracket)):
        return None
    dtype = schema.field(path[0]).type
    for name in path[1:]:
        dtype = dtype.field(name).type
    return dtype if pa.types.is_dictionary(dtype) else None


def _nullable(node: exp.Expression, binder: Binder) -> bool:
    """Whether the value of `node` may be NULL, by DataFusion's rules."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, (exp.Column, exp.Dot)) or (
        isinstance(node, exp.Bracket) and binder._is_field(node)
    ):
        return _column_nullable(node, binder)
    if isinstance(node, exp.Null):
        return True
    if isinstance(node, (exp.Literal, exp.Boolean, exp.HexString, exp.Is)):
        return False
    if isinstance(node, exp.Coalesce):
        return all(_nullable(a, binder) for a in [node.this, *node.expressions])
    if isinstance(node, _ALWAYS_NULLABLE_FUNCTIONS):
        return True
    if isinstance(node, exp.Func) and not isinstance(node, (exp.Cast, exp.TryCast)):
        return True  # DataFusion's functions are nullable whatever their arguments
    return any(_nullable(child, binder) for child in node.iter_expressions())


def _column_nullable(node: exp.Expression, binder: Binder) -> bool:
    parts = binder._parts(node)
    top = binder._top_field(*parts[0])
    if top.nullable:
        return True
    dtype = top.type
    for name, _quoted in parts[1:]:
        child = dtype.field(dtype.get_field_index(name))
        if child.nullable:
            return True
        dtype = child.type
    return False


_OVERFLOW_MESSAGES = ("overflow", "does not fit in precision", "rescaling decimal value would")


def describe_data_error(error: Exception, checked: Sequence[str]) -> str:
    """Arrow's message for an evaluation failure; an arithmetic overflow (which pylance
    refuses too) names the operations that can overflow."""
    message = str(error)
    if checked and any(m in message.lower() for m in _OVERFLOW_MESSAGES):
        ops = ", ".join(repr(op) for op in checked)
        return f"arithmetic overflow in {ops} ({message})"
    return message


def evaluate_expressions(
    data: pa.RecordBatch | pa.Table, expressions: Sequence[tuple[str, CompiledExpression]]
) -> pa.RecordBatch:
    """One batch with a column per (name, expression), computed over the rows of `data`.

    Errors only seen while evaluating (a string that does not parse in a CAST) become
    InvalidInputError naming the expression.
    """
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    schema = pa.schema([e.to_field(name) for name, e in expressions])
    if not expressions:
        return pa.RecordBatch.from_struct_array(
            pa.StructArray.from_buffers(pa.struct([]), table.num_rows, [None])
        )
    plan = acero.Declaration.from_sequence(
        [
            acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
            acero.Declaration(
                "project",
                acero.ProjectNodeOptions(
                    [e.expression for _, e in expressions], [name for name, _ in expressions]
                ),
            ),
        ]
    )
    try:
        result = plan.to_table(use_threads=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        sqls = ", ".join(repr(x.sql) for _, x in expressions)
        checked = tuple(dict.fromkeys(op for _, x in expressions for op in x.checked))
        raise InvalidInputError(
            f"expression(s) {sqls} failed on the data: {describe_data_error(e, checked)}"
        ) from None
    arrays = []
    for (_name, compiled), column in zip(expressions, result.columns, strict=True):
        array = column.combine_chunks()
        if not array.type.equals(compiled.type):
            array = array.cast(compiled.type)
        arrays.append(array)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _family(type_: pa.DataType) -> str:
    """The kind of value a type holds, for telling whether a constant may be compared
    with a column as one of the column's values."""
    t = pa.types
    if t.is_integer(type_) or t.is_floating(type_) or t.is_decimal(type_):
        return "number"
    if t.is_string(type_) or t.is_large_string(type_) or t.is_string_view(type_):
        return "text"
    if t.is_binary(type_) or t.is_large_binary(type_) or t.is_fixed_size_binary(type_):
        return "binary"
    if t.is_date(type_) or t.is_timestamp(type_):
        return "date"
    if t.is_time(type_):
        return "time"
    return str(type_)


def exact_constant(sql: str, type_: pa.DataType) -> pa.Scalar | None:
    """The value of the constant expression `sql` as a scalar of `type_`, when it is one
    of that type's values exactly (a NULL scalar for NULL); None when it is not constant,
    of another kind (a string compared with a number), NaN, or changed by the cast. An
    index answering equality with it then holds the rows a filter `column = sql` keeps."""
    try:
        compiled = compile_expression(sql, pa.schema([]))
        if compiled.columns:
            return None
        value = evaluate_expressions(pa.table({"_": [0]}), [("v", compiled)]).column(0)
    except (InvalidInputError, pa.ArrowException, ValueError, TypeError):
        return None
    if pa.types.is_null(value.type):
        return pa.scalar(None, type_)
    if _family(value.type) != _family(type_):
        return None
    try:
        cast = value.cast(type_, safe=True)
        back = cast.cast(value.type, safe=True)
    except (pa.ArrowException, ValueError):
        return None
    if not pc.all(pc.equal(back, value)).as_py():  # NaN, or a value the cast changed
        return None
    return cast[0]

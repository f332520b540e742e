"""sqlglot filter tree -> `pyarrow.compute.Expression`, with pylance's typing and semantics.

Every node is bound to a `Typed`: its Arrow type and either a runtime expression or a
compile-time constant (constants fold, so `1 + 2`, `date '...'` or `CAST('1' AS INT)` never
reach Arrow as computations). On top of Arrow's kernels this reproduces what pylance
(DataFusion) does differently:

- literal resolution (see `types.resolve_literal`) in exactly the positions pylance applies
  it: comparisons, BETWEEN and IN reached from the root through AND/OR only;
- float comparisons in arrow-rs' total order, NaN signs included (see `floats`);
- DataFusion's unwrap of `CAST(x AS T) <op> constant` into a comparison of x itself;
- SQL three-valued logic for IN lists containing NULL and for NULL operands.
"""

from __future__ import annotations

import decimal
import difflib
from collections.abc import Callable
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.errors import FilterBindError, FilterSyntaxError
from quiver.format.expr import floats as F
from quiver.format.expr import plan as P
from quiver.format.expr import types as T
from quiver.format.expr.functions import FunctionCalls
from quiver.format.expr.geo import geo_kind
from quiver.format.expr.parse import LanceFilterDialect, describe_filter
from quiver.format.expr.typed import (
    ARITH_NODES,
    ARITH_SYMBOLS,
    ARROW_ERRORS,
    BINARY_NODES,
    CMP_NODES,
    NULL_BOOL,
    Typed,
    const,
    flatten,
    is_literal_node,
    literal_tree,
    side,
    unparen,
)

MAX_LOGIC_OPS = 4000


class Binder(FunctionCalls):
    """Binds one filter's sqlglot tree against an Arrow schema."""

    def __init__(self, sql: str, schema: pa.Schema, dataset: str | None) -> None:
        self.sql = sql
        self.schema = schema
        self.dataset = dataset
        self.columns: set[str] = set()
        self.logic_ops = 0
        # filters: a row an out-of-range CAST or a zero divisor would fail is NULL instead
        # (see `_divisor`); value expressions fail on it, as pylance's add_columns does
        self.null_on_row_errors = True
        # operations evaluated with Arrow's checked kernels, where pylance fails on an
        # integer overflow (`MIN / -1`, `abs(MIN)`); named when a row overflows
        self.checked_ops: list[str] = []

    # ------------------------------------------------------------------ errors

    def bind_error(self, message: str) -> FilterBindError:
        """A FilterBindError whose message names the filter (and dataset)."""
        return FilterBindError(f"{describe_filter(self.sql, self.dataset)}: {message}")

    def unsupported(self, what: str) -> FilterSyntaxError:
        """A FilterSyntaxError for SQL that parses but is outside the filter language."""
        return FilterSyntaxError(
            f"{describe_filter(self.sql, self.dataset)}: {what} is not supported in filters"
        )

    @staticmethod
    def _text(node: exp.Expression) -> str:
        try:
            return node.sql(dialect=LanceFilterDialect)
        except Exception:  # noqa: BLE001 - only used to word messages
            return type(node).__name__

    # ------------------------------------------------------------------ entry points

    def bind_root(self, node: exp.Expression) -> Typed:
        """Bind the whole filter and check that it is a predicate."""
        result = self.bind(node, resolve=True)
        if not pa.types.is_boolean(result.type):
            raise self.bind_error(
                f"the filter does not return a boolean (its type is {result.type})"
            )
        return result

    def bind_value_root(self, node: exp.Expression) -> Typed:
        """Bind a whole value expression (`a * 2`, `s || 'x'`), whatever its type.

        pylance resolves the literals of a root `column <op> literal` for every binary
        operator, arithmetic and concatenation included: `a * 2` on an int32 column is int32.
        """
        node = unparen(node)
        kind = type(node)
        if kind in ARITH_NODES or kind is exp.DPipe:
            left, right = self._operands(node, True)
            return self._binary(kind, left, right, node)
        return self.bind(node, resolve=True)

    def bind(self, node: exp.Expression, resolve: bool = False) -> Typed:
        """Bind one node; `resolve` marks positions where pylance resolves literals."""
        node = unparen(node)
        kind = type(node)
        if kind in (exp.And, exp.Or):
            children = flatten(node, kind)
            terms = [self.bind(child, resolve) for child in children]
            operands = terms
            while len(operands) > 1:  # pairwise, so long chains stay shallow
                pairs = [
                    self._logic(kind, operands[i], operands[i + 1])
                    for i in range(0, len(operands) - 1, 2)
                ]
                operands = pairs + ([operands[-1]] if len(operands) % 2 else [])
            return self._staged(kind, operands[0], terms, children)
        if kind in CMP_NODES or kind in (exp.NullSafeEQ, exp.NullSafeNEQ):
            left, right = self._operands(node, resolve)
            return self._binary(kind, left, right, node)
        if kind in ARITH_NODES or kind is exp.DPipe:
            return self._binary(kind, self.bind(node.this), self.bind(node.expression), node)
        if kind is exp.Not:
            return self._not(node, resolve)
        if kind is exp.In:
            return self._in(node, resolve, negated=False)
        if kind is exp.Between:
            return self._between(node, resolve, negated=False)
        if kind in (exp.Like, exp.ILike, exp.Escape):
            return self._like(node, negated=False)
        if kind is exp.Is:
            return self._is(node)
        if kind in (exp.Column, exp.Dot) or (kind is exp.Bracket and self._is_field(node)):
            return self._column(node)
        if kind is exp.Literal:
            return self._literal(node)
        if kind is exp.Boolean:
            return const(pa.scalar(bool(node.this)), self._text(node), literal=True)
        if kind is exp.Null:
            return const(pa.scalar(None), "NULL", literal=True)
        if kind is exp.HexString:
            return self._hex(node)
        if kind is exp.Neg:
            return self._neg(node)
        if kind in (exp.Cast, exp.TryCast):
            return self._cast_node(node)
        return self._function(node)

    # ------------------------------------------------------------------ columns

    @staticmethod
    def _is_field(node: exp.Bracket) -> bool:
        return len(node.expressions) == 1 and (
            isinstance(node.expressions[0], exp.Literal) and node.expressions[0].is_string
        )

    def _parts(self, node: exp.Expression) -> list[tuple[str, bool]]:
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise self.unsupported("'*'")
            return [(p.name, bool(p.args.get("quoted"))) for p in node.parts]
        if isinstance(node, exp.Dot):
            child = node.expression
            if not isinstance(child, exp.Identifier):
                raise self.unsupported(f"field access {self._text(node)!r}")
            return self._parts(node.this) + [(child.name, True)]
        if isinstance(node, exp.Bracket) and self._is_field(node):
            return self._parts(unparen(node.this)) + [(node.expressions[0].this, True)]
        raise self.unsupported(f"field access on {self._text(node)!r}")

    def _top_field(self, name: str, quoted: bool) -> pa.Field:
        for field in self.schema:
            if field.name == name:
                return field
        if not quoted:
            lower = name.lower()
            for field in self.schema:
                if field.name.lower() == lower:
                    return field
        names = self.schema.names
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise self.bind_error(
            f"no column named {name!r}{hint}; available columns: "
            + (", ".join(repr(n) for n in names) or "none")
        )

    def _column(self, node: exp.Expression) -> Typed:
        parts = self._parts(node)
        field = self._top_field(*parts[0])
        self.columns.add(field.name)
        path = [field.name]
        dtype = field.type
        geo = geo_kind(field)
        for name, _quoted in parts[1:]:
            if not pa.types.is_struct(dtype):
                raise self.bind_error(
                    f"cannot read field {name!r} of {'.'.join(path)!r}, which is {dtype}, "
                    "not a struct"
                )
            index = dtype.get_field_index(name)
            if index < 0:
                fields = ", ".join(repr(dtype.field(i).name) for i in range(dtype.num_fields))
                raise self.bind_error(
                    f"no field {name!r} in struct column {'.'.join(path)!r}; its fields: {fields}"
                )
            child = dtype.field(index)
            path.append(child.name)
            dtype = child.type
            geo = geo_kind(child)
        expr = pc.field(*path)
        if pa.types.is_dictionary(dtype):
            dtype = dtype.value_type
            expr = expr.cast(dtype)
        return Typed(type=dtype, expr=expr, path=tuple(path), sql=".".join(path), geo=geo)

    # ------------------------------------------------------------------ literals

    def _literal(self, node: exp.Literal) -> Typed:
        if node.is_string:
            return const(pa.scalar(node.this, pa.string()), self._text(node), literal=True)
        try:
            return const(T.number_literal(node.this), node.this, literal=True)
        except T.TypeRuleError as e:
            raise self.bind_error(str(e)) from None

    def _hex(self, node: exp.HexString) -> Typed:
        digits = node.this
        if len(digits) % 2:
            digits = "0" + digits
        try:
            value = bytes.fromhex(digits)
        except ValueError:
            raise self.bind_error(f"invalid hex literal X'{node.this}'") from None
        return const(pa.scalar(value, pa.binary()), f"X'{node.this}'", literal=True)

    def _neg(self, node: exp.Neg) -> Typed:
        if isinstance(node.this, exp.Literal) and not node.this.is_string:
            # pylance folds `-<number>` into a literal: int64 if it fits, else float64
            text = node.this.this
            value = self._literal(node.this).value
            if pa.types.is_int64(value.type):
                scalar = pa.scalar(-value.as_py(), pa.int64())
            else:
                scalar = pa.scalar(-float(value.as_py()), pa.float64())
            return const(scalar, f"-{text}", literal=True)
        operand = self.bind(node.this)
        if operand.is_null_const and T.is_null_type(operand.type):
            return operand
        if not T.is_numeric(operand.type) or pa.types.is_unsigned_integer(operand.type):
            raise self.bind_error(
                f"cannot negate {operand.sql or 'a value'} of type {operand.type}"
            )
        result = self._call(pc.negate, [operand], sql=f"-{operand.sql}")
        if result.const or not T.is_float(result.type):
            return result
        return replace(result, neg_nan=F.negated_neg_nan(side(operand)))

    # ------------------------------------------------------------------ helpers

    def _call(
        self,
        fn: Callable,
        args: list[Typed],
        out_type: pa.DataType | None = None,
        sql: str = "",
        **kwargs,
    ) -> Typed:
        """Apply a compute function: folded if all arguments are constants."""
        if all(a.const for a in args):
            try:
                result = fn(*[a.value for a in args], **kwargs)
            except ARROW_ERRORS as e:
                raise self.bind_error(f"cannot evaluate {sql or fn.__name__}: {e}") from None
            if out_type is not None and result.type != out_type:
                result = result.cast(out_type)
            return const(result, sql)
        if out_type is None:
            try:
                out_type = fn(*[pa.array([], a.type) for a in args], **kwargs).type
            except ARROW_ERRORS as e:
                raise self.bind_error(f"cannot evaluate {sql or fn.__name__}: {e}") from None
        expr = fn(*[a.expression() for a in args], **kwargs)
        return Typed(type=out_type, expr=expr, sql=sql)

    def _cast(self, x: Typed, target: pa.DataType, *, explicit: bool = False) -> Typed:
        """Cast a bound value to `target` (at compile time for constants); an `explicit`
        SQL CAST rounds decimals, as arrow-rs does, where implicit casts truncate."""
        if x.type == target:
            return x
        if T.is_date(x.type) and T.is_integer(target):
            # arrow-rs casts a date to its number (days, or milliseconds for date64)
            number = pa.int32() if pa.types.is_date32(x.type) else pa.int64()
            if x.const:
                x = replace(x, type=number, value=x.value.cast(number), path=None)
            else:
                x = Typed(type=number, expr=x.expr.cast(number), sql=x.sql)
            if x.type == target:
                return x
        if x.const:
            try:
                value = T.cast_constant(x.value, target)
            except T.TypeRuleError as e:
                raise self.bind_error(str(e)) from None
            return replace(x, type=value.type, value=value, path=None)
        try:
            pa.array([], x.type).cast(options=T.cast_options(target, x.type))
        except ARROW_ERRORS:
            raise self.bind_error(
                f"cannot cast {x.sql or 'a value'} ({x.type}) to {target}"
            ) from None
        neg_nan = x.neg_nan if T.is_float(x.type) and T.is_float(target) else None
        expr = T.cast_expression(
            x.expr,
            x.type,
            target,
            null_out_of_range=self.null_on_row_errors,
            round_decimals=explicit,
        )
        return Typed(type=target, expr=expr, sql=x.sql, neg_nan=neg_nan)

    def _as_bool(self, x: Typed, what: str) -> Typed:
        if pa.types.is_boolean(x.type):
            return x
        if T.is_null_type(x.type):
            return const(NULL_BOOL, x.sql)
        raise self.bind_error(f"{what} needs boolean operands, got {x.sql or 'a value'} ({x.type})")

    # ------------------------------------------------------------------ literal resolution

    def _resolve_literal(self, lit: Typed, column: Typed) -> Typed:
        coerced = T.resolve_literal(lit.value, column.type)
        if coerced is None:
            raise self.bind_error(
                f"cannot compare {column.sql!r} of type {column.type} with literal {lit.sql} "
                f"({lit.type}); write a literal of the column's type"
            )
        return const(coerced, lit.sql, literal=True)

    def _bind_resolved(self, node: exp.Expression, column: Typed) -> Typed:
        """Bind the other side of `column <op> ...`, converting its literals to the column type."""
        node = unparen(node)
        if is_literal_node(node):
            return self._resolve_literal(self.bind(node), column)
        if isinstance(node, BINARY_NODES):
            left = self._bind_resolved(node.this, column)
            right = self._bind_resolved(node.expression, column)
            return self._binary(type(node), left, right, node)
        return self.bind(node)

    def _operands(self, node: exp.Expression, resolve: bool) -> tuple[Typed, Typed]:
        left = self.bind(node.this)
        if resolve and left.path is not None and literal_tree(node.expression):
            return left, self._bind_resolved(node.expression, left)
        right = self.bind(node.expression)
        if resolve and right.path is not None and left.literal:
            left = self._resolve_literal(left, right)
        return left, right

    # ------------------------------------------------------------------ operators

    def _binary(self, kind: type, left: Typed, right: Typed, node: exp.Expression) -> Typed:
        if kind in (exp.And, exp.Or):
            return self._logic(kind, left, right)
        if kind in CMP_NODES:
            return self._compare(CMP_NODES[kind], left, right)
        if kind in (exp.NullSafeEQ, exp.NullSafeNEQ):
            return self._distinct(left, right, negated=kind is exp.NullSafeNEQ)
        if kind is exp.DPipe:
            return self._concat(left, right)
        return self._arith(kind, left, right, node)

    def _logic(self, kind: type, left: Typed, right: Typed) -> Typed:
        word = "AND" if kind is exp.And else "OR"
        self.logic_ops += 1
        if self.logic_ops > MAX_LOGIC_OPS:
            # Arrow flattens AND/OR chains when it evaluates them, recursively: thousands
            # of terms overflow its stack, so refuse them here
            raise FilterSyntaxError(
                f"{describe_filter(self.sql, self.dataset)} is too complex: more than "
                f"{MAX_LOGIC_OPS} AND/OR operations (use IN lists for long alternatives)"
            )
        left, right = self._as_bool(left, word), self._as_bool(right, word)
        fn = pc.and_kleene if kind is exp.And else pc.or_kleene
        return self._call(fn, [left, right], pa.bool_(), sql=f"{left.sql} {word} {right.sql}")

    def _not(self, node: exp.Not, resolve: bool) -> Typed:
        child = node.this
        if isinstance(child, exp.In):
            return self._in(child, resolve, negated=True)
        if isinstance(child, exp.Between):
            return self._between(child, resolve, negated=True)
        if isinstance(child, (exp.Like, exp.ILike, exp.Escape)):
            return self._like(child, negated=True)
        operand = self._as_bool(self.bind(child), "NOT")
        result = self._call(pc.invert, [operand], pa.bool_(), sql=f"NOT {operand.sql}")
        if operand.plan is not None:
            result = replace(result, plan=P.Negation(operand.plan))
        return result

    def _staged(
        self, kind: type, result: Typed, terms: list[Typed], children: list[exp.Expression]
    ) -> Typed:
        """`result` (an AND / OR chain of `terms`) with the plan that evaluates a term that
        could fail only on the rows the terms before it leave undecided, as pylance does."""
        if result.const:
            return result
        word = "AND" if kind is exp.And else "OR"
        bools = [self._as_bool(t, word) for t in terms]
        fn = pc.and_kleene if kind is exp.And else pc.or_kleene
        plan = P.stage(
            kind is exp.And,
            [
                (t.expression(), t.plan, not t.const and P.may_fail(child))
                for t, child in zip(bools, children, strict=True)
            ],
            lambda exprs: _pairwise(fn, exprs),
        )
        return result if plan is None else replace(result, plan=plan)

    def _unwrap_constant(self, x: Typed, c: Typed) -> Typed | None:
        """`c` converted for comparing with the value under `x`'s CAST, or None."""
        if x.uncast is None or not c.const:
            return None
        if c.is_null_const:
            return const(pa.scalar(None, x.uncast.type), c.sql)
        common = T.comparison_type(x.type, c.type)
        if common is None:
            return None
        try:
            value = T.cast_constant(c.value, common)
        except T.TypeRuleError:
            return None
        converted = T.unwrap_constant(value, x.uncast.type)
        return None if converted is None else const(converted, c.sql)

    def _compare(self, op: str, a: Typed, b: Typed) -> Typed:
        if a.is_null_const or b.is_null_const:
            return const(NULL_BOOL)
        # DataFusion rewrites `CAST(x AS T) <op> constant` to compare x itself
        unwrapped = self._unwrap_constant(a, b)
        if unwrapped is not None:
            a, b = a.uncast, unwrapped
        else:
            unwrapped = self._unwrap_constant(b, a)
            if unwrapped is not None:
                a, b = unwrapped, b.uncast
        target = T.comparison_type(a.type, b.type)
        nested = any(pa.types.is_nested(t) or pa.types.is_dictionary(t) for t in (a.type, b.type))
        if target is None or nested:
            raise self.bind_error(
                f"cannot compare {a.sql or 'a value'} ({a.type}) with {b.sql or 'a value'} "
                f"({b.type})"
            )
        for one, other in ((a, b), (b, a)):
            if T.is_string(one.type) and not one.const and not T.is_string(target):
                if T.is_numeric(other.type) or pa.types.is_boolean(other.type):
                    raise self.bind_error(
                        f"cannot compare string {one.sql!r} with {other.sql or 'a value'} "
                        f"({other.type}); CAST one side explicitly"
                    )
        if pa.types.is_float16(target):
            target = pa.float32()
        a, b = self._cast(a, target), self._cast(b, target)
        if T.is_float(target):
            return self._float_compare(op, a, b)
        return self._call(getattr(pc, op), [a, b], pa.bool_(), sql=f"{a.sql} {op} {b.sql}")

    def _float_compare(self, op: str, a: Typed, b: Typed) -> Typed:
        if a.const and b.const:
            x, y = a.value.as_py(), b.value.as_py()
            return const(pa.scalar(F.compare_constants(op, x, y), pa.bool_()))
        expr = F.compare(op, side(a), side(b), a.type)
        return Typed(type=pa.bool_(), expr=expr)

    def _distinct(self, a: Typed, b: Typed, negated: bool) -> Typed:
        """IS [NOT] DISTINCT FROM: equality where NULL equals NULL and never yields NULL."""
        if a.is_null_const and b.is_null_const:
            same = const(pa.scalar(True))
        elif a.is_null_const or b.is_null_const:
            other = b if a.is_null_const else a
            same = self._call(pc.is_null, [other], pa.bool_())
        else:
            equal = self._compare("equal", a, b)
            both_null = self._call(
                pc.and_kleene,
                [self._call(pc.is_null, [a]), self._call(pc.is_null, [b])],
                pa.bool_(),
            )
            same = self._call(pc.coalesce, [equal, both_null], pa.bool_())
        if negated:
            return self._call(pc.invert, [same], pa.bool_())
        return same

    def _arith(self, kind: type, a: Typed, b: Typed, node: exp.Expression) -> Typed:
        text = self._text(node)
        if T.is_null_type(a.type) and T.is_null_type(b.type):
            return const(pa.scalar(None), text)
        if T.is_null_type(a.type):
            a = self._cast(a, b.type)
        if T.is_null_type(b.type):
            b = self._cast(b, a.type)
        if not (T.is_numeric(a.type) and T.is_numeric(b.type)):
            raise self.bind_error(
                f"cannot compute {text}: arithmetic needs numbers, got {a.type} and {b.type}"
            )
        target = T.numeric_common(a.type, b.type, for_compare=False)
        if a.is_null_const or b.is_null_const:
            return const(pa.scalar(None, target), text)
        if T.is_decimal(target):
            return self._decimal_arith(kind, a, b, text)
        if pa.types.is_float16(target):
            target = pa.float32()
        a, b = self._cast(a, target), self._cast(b, target)
        return self._float_arith(kind, a, b, text)

    def _decimal_arith(self, kind: type, a: Typed, b: Typed, text: str) -> Typed:
        """Decimal arithmetic: an integer operand becomes its own decimal(n, 0) (DataFusion)
        and the operator picks the result's precision and scale; past 38 digits it is
        computed in decimal256 rather than refused."""
        a = self._cast(a, T.as_decimal_type(a.type))
        b = self._cast(b, T.as_decimal_type(b.type))
        target = T.decimal_arith_type(ARITH_SYMBOLS[kind], a.type, b.type)
        self.checked_ops.append(text)
        if kind is exp.Div and not a.const and pa.types.is_decimal128(target):
            # arrow-rs scales the dividend up by 4 + the divisor's scale digits in 128 bits
            # and fails when that overflows (even where the quotient would fit): so here
            up_scale = a.type.scale + 4 + b.type.scale
            if up_scale <= 38:
                checked = T.decimal_rescale(a.expr, a.type, pa.decimal128(38, up_scale))
                a = Typed(type=pa.decimal128(38, up_scale), expr=checked, sql=a.sql)
        if kind is exp.Div:
            # arrow-rs truncates the exact quotient at the target scale: scale the dividend up
            # so that Arrow's quotient has at least that many decimals (the cast truncates)
            more = max(0, target.scale - (a.type.scale + b.type.precision - b.type.scale + 1))
            up = pa.decimal256(min(a.type.precision + more, 76), a.type.scale + more)
            a, b = self._cast(a, up), self._cast(b, pa.decimal256(b.type.precision, b.type.scale))
        fn = ARITH_NODES[kind]
        try:
            fn(pa.array([], a.type), pa.array([], b.type))
        except ARROW_ERRORS:
            wide = [pa.decimal256(x.type.precision, x.type.scale) for x in (a, b)]
            a, b = self._cast(a, wide[0]), self._cast(b, wide[1])
        result = self._call(fn, [a, self._divisor(kind, a, b)], sql=text)
        if result.const:
            return self._cast(result, target)
        # exact to the target's scale, and an overflow of its precision fails as in pylance
        # (arrow-rs fails past 128 bits; past 38 digits is close) instead of wrapping around
        expr = T.decimal_rescale(result.expr, result.type, target)
        return Typed(type=target, expr=expr, sql=text)

    def _divisor(self, kind: type, a: Typed, b: Typed) -> Typed:
        """The divisor of an integer or decimal `/` or `%`, NULL where it is zero.

        pylance evaluates the right of AND/OR only on the rows that need it, so the usual
        guard `b <> 0 AND a / b > 1` never divides by zero there; Arrow evaluates every row
        and would fail, so a zero divisor yields NULL instead.
        """
        if kind not in (exp.Div, exp.Mod) or b.const or T.is_float(b.type):
            return b
        if not self.null_on_row_errors:
            return b  # Arrow fails on a zero divisor, as pylance does here
        zero = pc.scalar(
            pa.scalar(decimal.Decimal(0), b.type)
            if T.is_decimal(b.type)
            else pa.scalar(0, pa.int8()).cast(b.type)
        )
        expr = pc.if_else(pc.equal(b.expr, zero), pc.scalar(pa.scalar(None, b.type)), b.expr)
        return replace(b, expr=expr)

    def _float_arith(self, kind: type, a: Typed, b: Typed, text: str) -> Typed:
        """Arithmetic; for floats also track where the result is a negative NaN."""
        if not T.is_float(a.type):
            fn = ARITH_NODES[kind]
            if kind is exp.Div and pa.types.is_signed_integer(a.type):
                # pylance wraps +, - and * around but fails on MIN / -1; Arrow's unchecked
                # division would give 0 there (its checked one also fails on a zero divisor,
                # which `_divisor` makes NULL in filters, as before)
                fn = pc.divide_checked
                self.checked_ops.append(text)
            return self._call(fn, [a, self._divisor(kind, a, b)], sql=text)
        result = self._call(ARITH_NODES[kind], [a, b], sql=text)
        if result.const or not T.is_float(result.type) or a.is_null_const or b.is_null_const:
            return result
        neg_nan = F.arithmetic_neg_nan(side(a), side(b), result.expr)
        return replace(result, neg_nan=neg_nan)

    def _concat(self, a: Typed, b: Typed) -> Typed:
        sides = []
        for x in (a, b):
            if T.is_null_type(x.type):
                x = self._cast(x, pa.string())
            elif T.is_integer(x.type) or pa.types.is_boolean(x.type):
                x = self._cast(x, pa.string())
            elif not T.is_string(x.type):
                raise self.bind_error(f"cannot concatenate {x.sql or 'a value'} ({x.type}) with ||")
            sides.append(x)
        target = T.comparison_type(sides[0].type, sides[1].type) or pa.string()
        sides = [self._cast(x, target) for x in sides]
        separator = pa.scalar("", target)
        return self._call(
            lambda x, y: pc.binary_join_element_wise(x, y, separator), sides, target, sql="||"
        )

    # ------------------------------------------------------------------ predicates

    def _between(self, node: exp.Between, resolve: bool, negated: bool) -> Typed:
        x = self.bind(node.this)
        low_node, high_node = node.args.get("low"), node.args.get("high")
        if resolve and x.path is not None:
            low = self._bind_resolved(low_node, x)
            high = self._bind_resolved(high_node, x)
        else:
            low, high = self.bind(low_node), self.bind(high_node)
        if negated:
            below = self._compare("less", x, low)
            above = self._compare("greater", x, high)
            return self._logic(exp.Or, below, above)
        return self._logic(
            exp.And, self._compare("greater_equal", x, low), self._compare("less_equal", x, high)
        )

    def _in(self, node: exp.In, resolve: bool, negated: bool) -> Typed:
        for key in ("query", "unnest", "field"):
            if node.args.get(key) is not None:
                raise self.unsupported("IN with a subquery")
        x = self.bind(node.this)
        if resolve and x.path is not None and len(x.path) == 1:
            items = [self._bind_resolved(item, x) for item in node.expressions]
        else:
            items = [self.bind(item) for item in node.expressions]
        if not items:
            raise self.unsupported("an empty IN list")
        if x.uncast is not None and all(item.const for item in items):
            converted = [self._unwrap_constant(x, item) for item in items]
            if all(c is not None for c in converted):
                x, items = x.uncast, converted
        if all(item.const for item in items) and not x.is_null_const:
            result = self._in_constant_list(x, items)
        else:
            result = None
            for item in items:
                term = self._compare("equal", x, item)
                result = term if result is None else self._logic(exp.Or, result, term)
        if negated:
            return self._call(pc.invert, [result], pa.bool_())
        return result

    def _in_constant_list(self, x: Typed, items: list[Typed]) -> Typed:
        target = x.type
        for item in items:
            common = T.comparison_type(target, item.type)
            if common is None or pa.types.is_nested(common):
                raise self.bind_error(
                    f"cannot compare {x.sql or 'a value'} ({x.type}) with {item.sql} "
                    f"({item.type}) in an IN list"
                )
            target = common
        if pa.types.is_float16(target):
            target = pa.float32()
        x = self._cast(x, target)
        values = [self._cast(item, target).value for item in items]
        has_null = any(not v.is_valid for v in values)
        values = [v for v in values if v.is_valid]
        if T.is_float(target):
            # pylance matches a zero constant against both -0.0 and +0.0
            if any(v.as_py() == 0.0 for v in values):
                values += [pa.scalar(-0.0, target), pa.scalar(0.0, target)]
        if not values:
            return const(NULL_BOOL)
        value_set = pa.array(values, target)
        if x.const:
            found = pc.is_in(x.value, value_set=value_set, skip_nulls=True)
            result = const(found if x.value.is_valid else NULL_BOOL)
        else:
            expr = pc.if_else(
                pc.is_null(x.expr),
                pc.scalar(NULL_BOOL),
                pc.is_in(x.expr, value_set=value_set, skip_nulls=True),
            )
            result = Typed(type=pa.bool_(), expr=expr)
        if has_null:
            result = self._logic(exp.Or, result, const(NULL_BOOL))
        return result

    def _is(self, node: exp.Is) -> Typed:
        x = self.bind(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            if x.const:
                return const(pa.scalar(not x.value.is_valid))
            inner = unparen(node.this)
            if isinstance(inner, exp.Anonymous) and str(inner.this).lower() == "regexp_match":
                # its matches are NULL exactly where the "has a match" boolean is false
                return self._call(pc.invert, [x], pa.bool_(), sql=f"{x.sql} IS NULL")
            return Typed(type=pa.bool_(), expr=pc.is_null(x.expr))
        if isinstance(target, exp.Boolean):
            x = self._as_bool(x, "IS TRUE / IS FALSE")
            if not target.this:
                x = self._call(pc.invert, [x], pa.bool_())
            return self._call(pc.coalesce, [x, const(pa.scalar(False))], pa.bool_())
        raise self.unsupported(f"IS {self._text(target)}")

    # ------------------------------------------------------------------ casts & functions

    def _cast_node(self, node: exp.Cast) -> Typed:
        try:
            target = T.sql_type_to_arrow(node.to)
        except T.TypeRuleError as e:
            raise self.bind_error(str(e)) from None
        operand = self.bind(node.this)
        if isinstance(node, exp.TryCast):
            if not operand.const:
                raise self.unsupported("TRY_CAST of a column")
            try:
                return const(T.cast_constant(operand.value, target), self._text(node))
            except T.TypeRuleError:
                return const(pa.scalar(None, target), self._text(node))
        if T.is_null_type(operand.type):
            return const(pa.scalar(None, target), self._text(node))
        result = self._cast(operand, target, explicit=True)
        uncast = None if operand.const else replace(operand, uncast=None)
        return replace(result, literal=False, path=None, sql=self._text(node), uncast=uncast)


def _pairwise(fn: Callable, exprs: list[pc.Expression]) -> pc.Expression:
    """`fn` folded over `exprs` pairwise, so long chains stay shallow."""
    while len(exprs) > 1:
        pairs = [fn(exprs[i], exprs[i + 1]) for i in range(0, len(exprs) - 1, 2)]
        exprs = pairs + ([exprs[-1]] if len(exprs) % 2 else [])
    return exprs[0]

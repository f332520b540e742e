"""`Typed`: a bound filter node (its Arrow type and an expression or a folded constant),
and the sqlglot tree helpers the binder and its function calls share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.expr import floats as F
from quiver.format.expr.plan import Plan

ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)
NULL_BOOL = pa.scalar(None, pa.bool_())


@dataclass(frozen=True)
class Typed:
    """A bound sub-expression: Arrow type plus a runtime expression or a constant value."""

    type: pa.DataType
    expr: pc.Expression | None = None
    value: pa.Scalar | None = None
    literal: bool = False  # a bare SQL literal, which pylance converts to the column type
    path: tuple[str, ...] | None = None  # set for a column or nested field reference
    sql: str = ""
    uncast: Typed | None = None  # for an explicit CAST of a runtime value: the value before it
    neg_nan: pc.Expression | None = None  # floats: where the value is a negative NaN
    plan: Plan | None = None  # booleans: staged AND/OR evaluation, when a term could fail
    geo: str | None = None  # a geometry: its GeoArrow encoding (`format.expr.geo`)

    @property
    def const(self) -> bool:
        """True when the value is known at compile time."""
        return self.expr is None

    @property
    def is_null_const(self) -> bool:
        """True for a constant NULL (typed or not)."""
        return self.expr is None and (self.value is None or not self.value.is_valid)

    def expression(self) -> pc.Expression:
        """The runtime expression (a scalar expression for constants)."""
        return pc.scalar(self.value) if self.expr is None else self.expr


def const(value: pa.Scalar, sql: str = "", literal: bool = False) -> Typed:
    return Typed(type=value.type, value=value, literal=literal, sql=sql)


def side(x: Typed) -> F.Side:
    """A non-null float operand as a side of a total-order comparison."""
    if x.const:
        return F.constant_side(x.value)
    return F.runtime_side(x.expr, x.neg_nan)


def unparen(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


CMP_NODES: dict[type, str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
}
ARITH_NODES: dict[type, Callable] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    exp.Div: pc.divide,
    exp.Mod: pc.remainder,
}
ARITH_SYMBOLS: dict[type, str] = {
    exp.Add: "+",
    exp.Sub: "-",
    exp.Mul: "*",
    exp.Div: "/",
    exp.Mod: "%",
}
BINARY_NODES = (
    *CMP_NODES,
    *ARITH_NODES,
    exp.DPipe,
    exp.And,
    exp.Or,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
)
LITERAL_NODES = (exp.Literal, exp.Boolean, exp.Null, exp.HexString)


def flatten(node: exp.Expression, kind: type) -> list[exp.Expression]:
    """The operands of a chain of one operator (`a AND b AND c`), left to right, iteratively."""
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        current = unparen(stack.pop())
        if type(current) is kind:
            stack.append(current.expression)
            stack.append(current.this)
        else:
            out.append(current)
    return out


def is_literal_node(node: exp.Expression) -> bool:
    if isinstance(node, LITERAL_NODES):
        return True
    return (
        isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string
    )


def literal_tree(node: exp.Expression) -> bool:
    """True for a literal or arithmetic on literals only (`1 + 2.5 * 2`, not `i8 + 1.5`).

    pylance converts the literals on the right of `column <op> ...` to the column type only
    for such trees; BETWEEN bounds and IN items are converted whatever they contain.
    """
    stack = [node]
    while stack:
        current = unparen(stack.pop())
        if isinstance(current, (*ARITH_NODES, exp.DPipe)):
            stack += [current.this, current.expression]
        elif not is_literal_node(current):
            return False
    return True

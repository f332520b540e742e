"""Float comparisons the way pylance evaluates them (arrow-rs' IEEE-754 total order).

In pylance's kernels floats sort as: -NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN,
and a NaN equals a NaN of the same sign. Two details on top:

- comparing with a *constant* zero treats -0.0 and +0.0 as equal (pylance rewrites such
  comparisons), so the -0.0 < +0.0 tie-break only applies between two runtime values;
- NaNs that arithmetic creates carry a sign: negating flips it, an operation on a NaN keeps
  its operand's NaN, and an invalid operation (0/0, x % 0, inf - inf) yields the CPU's
  default NaN, which is negative on x86 (so `0.0 / 0.0 > 1` is false there).

Arrow's own kernels compare in IEEE order (NaN never equal, ±0 equal) and cannot see a
NaN's sign, so the sign is tracked symbolically next to each float expression.
"""

from __future__ import annotations

import math
import platform
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

# The default NaN of an invalid float operation is negative on x86, positive on ARM.
DEFAULT_NAN_NEGATIVE = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}

Bool = pc.Expression | bool


def and_(*terms: Bool) -> Bool:
    """Kleene AND that folds Python booleans away."""
    rest = []
    for term in terms:
        if term is False:
            return False
        if term is not True:
            rest.append(term)
    if not rest:
        return True
    out = rest[0]
    for term in rest[1:]:
        out = pc.and_kleene(out, term)
    return out


def or_(*terms: Bool) -> Bool:
    """Kleene OR that folds Python booleans away."""
    rest = []
    for term in terms:
        if term is True:
            return True
        if term is not False:
            rest.append(term)
    if not rest:
        return False
    out = rest[0]
    for term in rest[1:]:
        out = pc.or_kleene(out, term)
    return out


def not_(term: Bool) -> Bool:
    """Kleene NOT that folds Python booleans."""
    if isinstance(term, bool):
        return not term
    return pc.invert(term)


def as_expression(term: Bool) -> pc.Expression:
    """A boolean term as an expression."""
    return pc.scalar(term) if isinstance(term, bool) else term


@dataclass(frozen=True)
class Side:
    """One operand of a float comparison: value, is-NaN and is-negative-NaN."""

    expr: pc.Expression
    nan: Bool
    neg_nan: Bool
    const: bool


def constant_side(value: pa.Scalar) -> Side:
    """The side for a non-null float constant (its NaN sign is known)."""
    v = value.as_py()
    nan = math.isnan(v)
    return Side(pc.scalar(value), nan, nan and math.copysign(1.0, v) < 0, True)


def runtime_side(expr: pc.Expression, neg_nan: pc.Expression | None) -> Side:
    """The side for a runtime float expression; `neg_nan` is None when it cannot be -NaN."""
    return Side(expr, pc.is_nan(expr), False if neg_nan is None else neg_nan, False)


def _key(v: float) -> tuple[int, float, float]:
    if math.isnan(v):
        return (-1 if math.copysign(1.0, v) < 0 else 1, 0.0, 0.0)
    return (0, v, math.copysign(1.0, v))


def compare_constants(op: str, x: float | None, y: float | None) -> bool | None:
    """Compare two float constants in total order (as pylance folds constants)."""
    if x is None or y is None:
        return None
    kx, ky = _key(x), _key(y)
    return {
        "equal": kx == ky,
        "not_equal": kx != ky,
        "less": kx < ky,
        "less_equal": kx <= ky,
        "greater": kx > ky,
        "greater_equal": kx >= ky,
    }[op]


_MIRRORED = {
    "equal": "equal",
    "not_equal": "not_equal",
    "less": "greater",
    "less_equal": "greater_equal",
    "greater": "less",
    "greater_equal": "less_equal",
}


def compare(op: str, a: Side, b: Side, dtype: pa.DataType) -> pc.Expression:
    """`a <op> b` in total order; NULL when either side is NULL."""
    if a.const and not b.const and a.nan is False:
        return compare(_MIRRORED[op], b, a, dtype)
    if b.const and not a.const and b.nan is False and a.neg_nan is False:
        # against a number, a value that is no -NaN compares as in IEEE order except that
        # a NaN is greater: one comparison (`x > 1` is `NOT (x <= 1)`, true on NaN)
        x, c = a.expr, b.expr
        return {
            "equal": pc.equal(x, c),
            "not_equal": pc.invert(pc.equal(x, c)),
            "less": pc.less(x, c),
            "greater_equal": pc.invert(pc.less(x, c)),
            "greater": pc.invert(pc.less_equal(x, c)),
            "less_equal": pc.less_equal(x, c),
        }[op]
    # where one side may be -NaN, the other side's "not -NaN" must still be NULL on NULL
    if not isinstance(b.neg_nan, bool) and a.neg_nan is False and not a.const:
        a = replace(a, neg_nan=and_(a.nan, not_(a.nan)))
    if not isinstance(a.neg_nan, bool) and b.neg_nan is False and not b.const:
        b = replace(b, neg_nan=and_(b.nan, not_(b.nan)))
    pos_a, pos_b = and_(a.nan, not_(a.neg_nan)), and_(b.nan, not_(b.neg_nan))
    num_eq = pc.equal(a.expr, b.expr)
    num_lt = pc.less(a.expr, b.expr)
    num_gt = pc.greater(a.expr, b.expr)
    if not a.const and not b.const:
        # -0.0 < +0.0 between runtime values: 1/x is -inf or +inf for the two zeros
        one = pc.scalar(pa.scalar(1.0, dtype))
        inv_a, inv_b = pc.divide(one, a.expr), pc.divide(one, b.expr)
        num_lt = or_(num_lt, and_(num_eq, pc.less(inv_a, inv_b)))
        num_gt = or_(num_gt, and_(num_eq, pc.greater(inv_a, inv_b)))
        num_eq = and_(num_eq, pc.equal(inv_a, inv_b))
    equal = or_(num_eq, and_(pos_a, pos_b), and_(a.neg_nan, b.neg_nan))
    less = or_(num_lt, and_(a.neg_nan, not_(b.neg_nan)), and_(not_(pos_a), pos_b))
    greater = or_(num_gt, and_(b.neg_nan, not_(a.neg_nan)), and_(not_(pos_b), pos_a))
    result = {
        "equal": equal,
        "not_equal": not_(equal),
        "less": less,
        "greater_equal": not_(less),
        "greater": greater,
        "less_equal": not_(greater),
    }[op]
    return as_expression(result)


def negated_neg_nan(operand: Side) -> pc.Expression | None:
    """Where `-operand` is a negative NaN: where the operand is a positive NaN."""
    result = and_(operand.nan, not_(operand.neg_nan))
    return None if result is False else as_expression(result)


def arithmetic_neg_nan(a: Side, b: Side, result: pc.Expression) -> pc.Expression | None:
    """Where `a <op> b` is a negative NaN: a NaN operand's sign, else the default NaN's."""
    made = and_(not_(a.nan), not_(b.nan)) if DEFAULT_NAN_NEGATIVE else False
    term = or_(and_(a.nan, a.neg_nan), and_(not_(a.nan), b.nan, b.neg_nan), made)
    if term is False:
        return None
    return as_expression(and_(pc.is_nan(result), term))  # NULL where the result is NULL

"""Staged evaluation of AND / OR / NOT, so a term that could fail is evaluated only on the
rows that need it.

pylance (DataFusion) evaluates the right of `a AND b` lazily: where `a` is false on every
row of a batch, `b` is never evaluated, so `tz IS NULL AND CAST(s AS BIGINT) = -1` answers
even though `s` holds words. Arrow's kernels evaluate every operand on every row. A `Plan`
restores the laziness, vectorised: each staged term runs on the sub-table of rows the terms
before it left undecided (true or NULL for AND, false or NULL for OR) and its result is
scattered back. Terms that cannot fail (comparisons of columns and constants, IS NULL, IN,
LIKE, ...) are evaluated together first, in one expression, so common filters still cost
one Arrow evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

# pyarrow.acero re-exports these but also loads pyarrow.dataset (~10 MB resident)
from pyarrow._acero import Declaration, ProjectNodeOptions, TableSourceNodeOptions
from sqlglot import exp


@dataclass(frozen=True)
class Leaf:
    """One Arrow expression evaluated on every row it is given."""

    expression: pc.Expression


@dataclass(frozen=True)
class Junction:
    """`terms[0] AND terms[1] AND ...` (or OR): each term only on the rows still undecided."""

    conjunction: bool
    terms: tuple[Plan, ...]


@dataclass(frozen=True)
class Negation:
    """NOT of a staged term."""

    term: Plan


Plan = Leaf | Junction | Negation

# Nodes that never fail while evaluating, whatever the data: a term built of these alone
# can be evaluated on rows an earlier term already decided.
_NEVER_FAIL = (
    exp.Column,
    exp.Dot,
    exp.Identifier,
    exp.Star,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.HexString,
    exp.Paren,
    exp.Neg,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Escape,
    exp.IsNan,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.StartsWith,
    exp.EndsWith,
    exp.Contains,
    exp.Coalesce,
)


def may_fail(node: exp.Expression) -> bool:
    """Whether evaluating `node` could fail on some row (a CAST of text, a division, a
    function): such terms are staged behind the terms before them."""
    return any(not isinstance(n, _NEVER_FAIL) for n in node.walk())


def stage(
    conjunction: bool,
    terms: Sequence[tuple[pc.Expression, Plan | None, bool]],
    combine: Callable[[list[pc.Expression]], pc.Expression],
) -> Plan | None:
    """The plan of an AND / OR chain from its terms (expression, own plan, may fail), or
    None when one expression evaluates it as pylance would.

    Terms that cannot fail, and the first term, go first in one expression (it runs on every
    row in pylance too); each other term runs on the rows still undecided, in order."""
    first: list[pc.Expression] = []
    staged: list[Plan] = []
    for i, (expression, plan, fails) in enumerate(terms):
        if plan is not None:
            staged.append(plan)
        elif i == 0 or not fails:
            first.append(expression)
        else:
            staged.append(Leaf(expression))
    if not staged:
        return None
    head: list[Plan] = [Leaf(combine(first))] if first else []
    return Junction(conjunction, tuple(head + staged))


def evaluate(plan: Plan, table: pa.Table) -> pa.Array:
    """The boolean value of `plan` for every row of `table`, as one array."""
    if isinstance(plan, Leaf):
        return project(table, plan.expression)
    if isinstance(plan, Negation):
        return pc.invert(evaluate(plan.term, table))
    result = evaluate(plan.terms[0], table)
    for term in plan.terms[1:]:
        # rows the result does not decide yet: not FALSE for AND, not TRUE for OR
        if plan.conjunction:
            undecided = pc.fill_null(result, True)
        else:
            undecided = pc.invert(pc.fill_null(result, False))
        count = pc.sum(undecided).as_py() or 0
        if count == 0:
            break
        if count == len(result):
            value = evaluate(term, table)
        else:
            part = evaluate(term, table.filter(undecided))
            # decided rows keep their own value, which the Kleene operator below leaves alone
            value = pc.replace_with_mask(result, undecided, part)
        result = pc.and_kleene(result, value) if plan.conjunction else pc.or_kleene(result, value)
    return result


def evaluate_column(data: pa.Table | pa.RecordBatch, expression: pc.Expression) -> pa.ChunkedArray:
    """The value of `expression` for every row, computed in the calling thread.

    (`RecordBatch.filter(expression)` runs an Acero plan on the shared CPU pool: handing a
    batch to it and back costs more than evaluating it, and scans call this per batch.)"""
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    plan = Declaration.from_sequence(
        [
            Declaration("table_source", TableSourceNodeOptions(table)),
            Declaration("project", ProjectNodeOptions([expression])),
        ]
    )
    return plan.to_table(use_threads=False).column(0)


def project(data: pa.Table | pa.RecordBatch, expression: pc.Expression) -> pa.Array:
    """The value of `expression` for every row, as one array (see `evaluate_column`)."""
    column = evaluate_column(data, expression)
    if column.num_chunks == 1:
        return column.chunk(0)
    if column.num_chunks == 0:
        return pa.array([], column.type)
    return column.combine_chunks()

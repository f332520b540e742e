"""SQL function calls and LIKE in filters, bound the way pylance (DataFusion) evaluates them.

`FunctionCalls` is a part of `format.expr.bind.Binder`: its methods bind the arguments
with the binder's `bind`, `_cast` and `_call`.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.expr import types as T
from quiver.format.expr.functions_array import ArrayFunctions
from quiver.format.expr.functions_geo import GeoFunctions
from quiver.format.expr.functions_scalar import ScalarFunctions
from quiver.format.expr.tokens import contains_tokens, query_tokens
from quiver.format.expr.typed import NULL_BOOL, Typed, const


class FunctionCalls(ScalarFunctions, ArrayFunctions, GeoFunctions):
    """Binding of function calls, regular expressions, COALESCE and LIKE (a Binder part)."""

    def _like(self, node: exp.Expression, negated: bool) -> Typed:
        escape = None
        if isinstance(node, exp.Escape):
            esc = node.expression
            if not (isinstance(esc, exp.Literal) and esc.is_string and len(esc.this) == 1):
                raise self.bind_error("the ESCAPE of LIKE must be a single character string")
            escape = esc.this
            node = node.this
        if not isinstance(node, (exp.Like, exp.ILike)):
            raise self.unsupported(f"ESCAPE on {self._text(node)!r}")
        if node.args.get("negate"):
            negated = not negated
        ignore_case = isinstance(node, exp.ILike)
        x = self.bind(node.this)
        pattern = self.bind(node.expression)
        if x.is_null_const or pattern.is_null_const:
            return const(NULL_BOOL)
        if not T.is_string(x.type):
            raise self.bind_error(
                f"LIKE needs a string on its left, got {x.sql or 'a value'} ({x.type})"
            )
        if not (pattern.const and T.is_string(pattern.type)):
            raise self.bind_error("the pattern of LIKE must be a string constant")
        text = pattern.value.as_py()
        if escape is not None and escape != "\\":
            text = _translate_escape(text, escape)
        result = self._call(
            pc.match_like, [x], pa.bool_(), sql="LIKE", pattern=text, ignore_case=ignore_case
        )
        if negated:
            return self._call(pc.invert, [result], pa.bool_())
        return result

    def _string_arg(self, node: exp.Expression | None, fn: str) -> str | None:
        if node is None:
            raise self.bind_error(f"{fn} needs two arguments")
        value = self.bind(node)
        if value.is_null_const:
            return None
        if not (value.const and T.is_string(value.type)):
            raise self.bind_error(f"the second argument of {fn} must be a string constant")
        return value.value.as_py()

    def _string_operand(self, node: exp.Expression, fn: str) -> Typed:
        x = self.bind(node)
        if T.is_null_type(x.type):
            return self._cast(x, pa.string())
        if not T.is_string(x.type):
            raise self.bind_error(f"{fn} needs a string, got {x.sql or 'a value'} ({x.type})")
        return x

    def _function(self, node: exp.Expression) -> Typed:
        if isinstance(node, exp.Anonymous):
            name = str(node.this).lower()
            args = node.expressions
            if name == "is_valid" and len(args) == 1:
                x = self.bind(args[0])
                if x.const:
                    return const(pa.scalar(x.value.is_valid))
                return Typed(type=pa.bool_(), expr=pc.is_valid(x.expr))
            if name == "contains_tokens":
                return self._contains_tokens(args)
            if name == "regexp_match" and len(args) == 2 and self.regexp_match_lists:
                return self._regexp_match_list(args[0], args[1])
            if name == "regexp_match" and len(args) in (2, 3):
                # pylance turns regexp_match into "has a match": never NULL
                match = self._regexp(args[0], args[1], args[2] if len(args) == 3 else None)
                return self._call(
                    pc.coalesce, [match, const(pa.scalar(False))], pa.bool_(), sql=name
                )
            bound = self._more_functions(node)
            if bound is not None:
                return bound
            raise self.bind_error(f"unknown or unsupported function {name}()")
        if isinstance(node, exp.IsNan):
            x = self.bind(node.this)
            if T.is_null_type(x.type):
                return const(NULL_BOOL)
            if not T.is_numeric(x.type):
                raise self.bind_error(f"isnan needs a number, got {x.type}")
            if not T.is_float(x.type) or pa.types.is_float16(x.type):
                x = self._cast(x, pa.float64())
            return self._call(pc.is_nan, [x], pa.bool_(), sql="isnan")
        if isinstance(node, (exp.Lower, exp.Upper)):
            x = self._string_operand(node.this, "lower/upper")
            fn = pc.utf8_lower if isinstance(node, exp.Lower) else pc.utf8_upper
            return self._call(fn, [x], x.type, sql=self._text(node))
        if isinstance(node, exp.Length):
            x = self.bind(node.this)
            if T.is_string(x.type):
                return self._call(pc.utf8_length, [x], sql="length")
            if T.is_binary(x.type):
                return self._call(pc.binary_length, [x], sql="length")
            raise self.bind_error(f"length needs a string, got {x.type}")
        if isinstance(node, exp.Abs):
            x = self.bind(node.this)
            if not T.is_numeric(x.type):
                raise self.bind_error(f"abs needs a number, got {x.type}")
            # pylance fails on abs of a signed integer's minimum (no positive counterpart)
            checked = pa.types.is_signed_integer(x.type)
            if checked:
                self.checked_ops.append(self._text(node))
            fn = pc.abs_checked if checked else pc.abs
            return self._call(fn, [x], x.type, sql="abs")
        if isinstance(node, exp.Coalesce):
            return self._coalesce([node.this, *node.expressions])
        if isinstance(node, (exp.StartsWith, exp.EndsWith, exp.Contains)):
            fn_name = {exp.StartsWith: "starts_with", exp.EndsWith: "ends_with"}.get(
                type(node), "contains"
            )
            x = self._string_operand(node.this, fn_name)
            pattern = self._string_arg(node.expression, fn_name)
            if pattern is None or x.is_null_const:
                return const(NULL_BOOL)
            fn = {
                "starts_with": pc.starts_with,
                "ends_with": pc.ends_with,
                "contains": pc.match_substring,
            }[fn_name]
            return self._call(fn, [x], pa.bool_(), sql=fn_name, pattern=pattern)
        if isinstance(node, exp.RegexpLike):
            return self._regexp(node.this, node.expression, node.args.get("flag"))
        if isinstance(node, exp.Nullif):
            a, b = self.bind(node.this), self.bind(node.expression)
            same = self._compare("equal", a, b)
            same = self._call(pc.coalesce, [same, const(pa.scalar(False))], pa.bool_())
            if a.is_null_const:
                return a
            # DataFusion coerces both arguments to their common type: the result's type
            target = T.comparison_type(a.type, b.type)
            if target is not None and not pa.types.is_nested(target) and T.is_numeric(target):
                a = self._cast(a, target)
            return self._call(
                pc.if_else, [same, const(pa.scalar(None, a.type)), a], a.type, sql="nullif"
            )
        bound = self._more_functions(node)
        if bound is not None:
            return bound
        raise self.unsupported(f"{self._text(node)!r}")

    def _contains_tokens(self, args: list[exp.Expression]) -> Typed:
        """pylance's `contains_tokens(text, 'words')` (`format.expr.tokens`); integers are
        read as their digits, as pylance casts them."""
        if len(args) != 2:
            raise self.bind_error(f"contains_tokens needs two arguments, got {len(args)}")
        x = self.bind(args[0])
        if T.is_null_type(x.type):
            return const(NULL_BOOL)
        if T.is_integer(x.type):
            x = self._cast(x, pa.string())
        if not T.is_string(x.type):
            raise self.bind_error(
                f"contains_tokens needs a string, got {x.sql or 'a value'} ({x.type})"
            )
        tokens = query_tokens(self._string_arg(args[1], "contains_tokens"))
        return self._call(contains_tokens, [x], pa.bool_(), sql="contains_tokens", tokens=tokens)

    def _more_functions(self, node: exp.Expression) -> Typed | None:
        """DataFusion's other scalar, list and spatial functions (`functions_scalar`,
        `functions_array`, `functions_geo`), or None."""
        bound = self._scalar_function(node)
        if bound is None:
            bound = self._array_function(node)
        return bound if bound is not None else self._geo_function(node)

    def _regexp(
        self, subject: exp.Expression, pattern: exp.Expression, flags: exp.Expression | None
    ) -> Typed:
        x = self._string_operand(subject, "regexp")
        text = self._string_arg(pattern, "regexp")
        ignore_case = False
        if flags is not None:
            flag_text = self._string_arg(flags, "regexp") or ""
            if set(flag_text) - {"i"}:
                raise self.bind_error(f"unsupported regular expression flags {flag_text!r}")
            ignore_case = "i" in flag_text
        if text is None or x.is_null_const:
            return const(NULL_BOOL)
        return self._call(
            pc.match_substring_regex,
            [x],
            pa.bool_(),
            sql="regexp",
            pattern=text,
            ignore_case=ignore_case,
        )

    def _coalesce(self, nodes: list[exp.Expression]) -> Typed:
        args = [self.bind(n) for n in nodes]
        target: pa.DataType = pa.null()
        for arg in args:
            common = T.comparison_type(target, arg.type)
            if common is None:
                raise self.bind_error(f"coalesce arguments have incompatible types {arg.type}")
            target = common
        if T.is_null_type(target):
            return const(pa.scalar(None), "coalesce")
        for arg in args:
            if T.is_string(arg.type) and not arg.const and not T.is_string(target):
                raise self.bind_error(f"coalesce cannot mix string {arg.sql!r} with {target}")
        args = [self._cast(a, target) for a in args]
        return self._call(pc.coalesce, args, target, sql="coalesce")


def _translate_escape(pattern: str, escape: str) -> str:
    """Rewrite a LIKE pattern with a custom ESCAPE character to backslash escapes."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape and i + 1 < len(pattern):
            out.append("\\" + pattern[i + 1])
            i += 2
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)

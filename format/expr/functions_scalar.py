"""DataFusion's scalar functions that pylance accepts in filters and `add_columns`: math
(round, sqrt, trunc, power, exp, ln, log, signum), strings (concat, concat_ws, replace,
reverse, strpos, btrim/ltrim/rtrim, left, right, lpad/rpad, repeat, initcap, split_part,
regexp_replace, octet_length), greatest / least, and times (date_trunc, date_part).

Each binds to Arrow kernels with DataFusion's result types: math on integers is double,
float32 stays float32; date_part is int32 (epoch double); strpos counts characters from 1.
A `ScalarFunctions` is a part of `format.expr.bind.Binder`.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.expr import types as T
from quiver.format.expr.typed import Typed, const

_TRUNC_UNITS = {
    "year": "year",
    "quarter": "quarter",
    "month": "month",
    "week": "week",
    "day": "day",
    "hour": "hour",
    "minute": "minute",
    "second": "second",
    "millisecond": "millisecond",
    "microsecond": "microsecond",
}


def _int_const(x: Typed) -> int | None:
    return x.value.as_py() if x.const and T.is_integer(x.type) and x.value.is_valid else None


class ScalarFunctions:
    """Binding of DataFusion's math, string and time functions (a Binder part)."""

    def _scalar_function(self, node: exp.Expression) -> Typed | None:
        """The bound call, or None when `node` is not one of these functions."""
        name = str(node.this).lower() if isinstance(node, exp.Anonymous) else None
        args = node.expressions if isinstance(node, exp.Anonymous) else []
        if isinstance(node, exp.Round):
            return self._round(node)
        simple = {
            exp.Sqrt: pc.sqrt,
            exp.Exp: pc.exp,
            exp.Ln: pc.ln,
            exp.Sign: pc.sign,
        }
        if type(node) in simple:
            return self._float_call(simple[type(node)], node.this, type(node).__name__.lower())
        if isinstance(node, exp.Trunc):
            if node.args.get("decimals") is not None:
                raise self.unsupported("trunc with decimals")
            return self._float_call(pc.trunc, node.this, "trunc")
        if isinstance(node, exp.Pow):
            base = self._as_float(node.this, "power", wide=True)
            power = self._as_float(node.expression, "power", wide=True)
            return self._call(pc.power, [base, power], pa.float64(), sql="power")
        if isinstance(node, exp.Log):
            return self._log(node)
        if isinstance(node, exp.ConcatWs):  # (a subclass of Concat)
            sep, *rest = node.expressions
            separator = self._string_arg_value(sep, "concat_ws")
            if separator is None:
                return const(pa.scalar(None, pa.string()))
            return self._concat_all([self.bind(a) for a in rest], separator)
        if isinstance(node, exp.Concat):
            return self._concat_all([self.bind(a) for a in node.expressions], None)
        if isinstance(node, exp.Replace):
            x = self._string_operand(node.this, "replace")
            old = self._string_arg(node.expression, "replace")
            new = self._string_arg(node.args.get("replacement"), "replace")
            if old is None or new is None:
                return const(pa.scalar(None, x.type))
            return self._call(
                pc.replace_substring, [x], x.type, sql="replace", pattern=old, replacement=new
            )
        if isinstance(node, exp.Reverse):
            x = self._string_operand(node.this, "reverse")
            return self._call(pc.utf8_reverse, [x], x.type, sql="reverse")
        if isinstance(node, exp.StrPosition):
            return self._strpos(node)
        if isinstance(node, exp.Trim) or name == "btrim":
            return self._trim(node, args if name == "btrim" else None)
        if isinstance(node, (exp.Left, exp.Right)):
            return self._left_right(node)
        if isinstance(node, exp.Pad):
            return self._pad(node)
        if isinstance(node, exp.Repeat):
            x = self._string_operand(node.this, "repeat")
            times = _int_const(self.bind(node.args["times"]))
            if times is None:
                raise self.bind_error("the count of repeat must be an integer constant")
            return self._call(pc.binary_repeat, [x, const(pa.scalar(max(times, 0)))], x.type)
        if isinstance(node, exp.Initcap):
            x = self._string_operand(node.this, "initcap")
            return self._call(pc.utf8_title, [x], x.type, sql="initcap")
        if isinstance(node, exp.SplitPart):
            return self._split_part(node)
        if isinstance(node, exp.RegexpReplace):
            return self._regexp_replace(node)
        if isinstance(node, (exp.Greatest, exp.Least)):
            return self._extreme(node)
        if name == "octet_length" and len(args) == 1:
            x = self._string_operand(args[0], "octet_length")
            return self._call(pc.binary_length, [x], pa.int32(), sql=name)
        if isinstance(node, exp.DateTrunc) or name == "date_trunc":
            return self._date_trunc(node)
        if name in ("date_part", "datepart") and len(args) == 2:
            return self._date_part(args[0], args[1])
        return None

    # -------------------------------------------------------------------- math

    def _as_float(self, node: exp.Expression, fn: str, *, wide: bool = False) -> Typed:
        """A numeric argument as DataFusion's math takes it: integers (and, if `wide`,
        everything) as float64, float32 as itself."""
        x = self.bind(node)
        if T.is_null_type(x.type):
            return self._cast(x, pa.float64())
        if not T.is_numeric(x.type) or T.is_decimal(x.type):
            raise self.bind_error(f"{fn} needs a number, got {x.sql or 'a value'} ({x.type})")
        if wide or not pa.types.is_float32(x.type):
            return self._cast(x, pa.float64())
        return x

    def _float_call(self, fn, node: exp.Expression, name: str) -> Typed:
        x = self._as_float(node, name)
        return self._call(fn, [x], x.type, sql=name)

    def _round(self, node: exp.Round) -> Typed:
        x = self._as_float(node.this, "round")
        digits = 0
        if node.args.get("decimals") is not None:
            n = self.bind(node.args["decimals"])
            digits = _int_const(n)
            if digits is None:
                raise self.bind_error("the decimals of round must be an integer constant")
        # DataFusion rounds half away from zero
        return self._call(
            pc.round, [x], x.type, sql="round", ndigits=digits, round_mode="half_towards_infinity"
        )

    def _log(self, node: exp.Log) -> Typed:
        if node.expression is None:  # log(x): ln(x) / ln(10), as Rust's f64::log computes it
            x = self._as_float(node.this, "log", wide=True)
            return self._call(
                lambda v: pc.divide(pc.ln(v), math.log(10.0)), [x], pa.float64(), sql="log"
            )
        base, x = self.bind(node.this), self._as_float(node.expression, "log", wide=True)
        b = base.value.as_py() if base.const and base.value.is_valid else None
        if b == 10:  # log10(x) (sqlglot reads log(10, x) alike)
            return self._call(pc.log10, [x], pa.float64(), sql="log10")
        if b == 2:
            return self._call(pc.log2, [x], pa.float64(), sql="log2")
        base = self._as_float(node.this, "log", wide=True)
        return self._call(pc.logb, [x, base], pa.float64(), sql="log")

    # -------------------------------------------------------------------- strings

    def _string_arg_value(self, node: exp.Expression, fn: str) -> str | None:
        value = self.bind(node)
        if value.is_null_const:
            return None
        if not (value.const and T.is_string(value.type)):
            raise self.bind_error(f"the separator of {fn} must be a string constant")
        return value.value.as_py()

    def _as_text(self, x: Typed) -> Typed:
        """A value as concat spells it: strings as they are, anything else cast to text."""
        if T.is_string(x.type):
            return x
        if pa.types.is_nested(x.type) or T.is_binary(x.type):
            raise self.bind_error(f"cannot concatenate {x.sql or 'a value'} ({x.type})")
        return self._cast(x, pa.string())

    def _concat_all(self, args: list[Typed], separator: str | None) -> Typed:
        """concat (NULLs count as empty) or concat_ws (NULLs are skipped with their
        separator); a NULL separator makes NULL."""
        if not args:
            raise self.bind_error("concat needs at least one argument")
        texts = [self._as_text(a) for a in args]
        texts = [self._cast(t, pa.string()) if not pa.types.is_string(t.type) else t for t in texts]
        empty = pa.scalar("", pa.string())
        if separator is None:
            return self._call(
                lambda *xs: pc.binary_join_element_wise(
                    *xs, empty, null_handling="replace", null_replacement=""
                ),
                texts,
                pa.string(),
                sql="concat",
            )
        # each non-NULL argument behind a separator, then the first separator cut off
        # (Arrow's "skip" null handling drops rows where every argument is NULL)
        sep = pa.scalar(separator, pa.string())

        def joined(*xs):
            lazy = any(isinstance(x, pc.Expression) for x in xs)
            s_, e_ = (pc.scalar(sep), pc.scalar(empty)) if lazy else (sep, empty)
            parts = [pc.coalesce(pc.binary_join_element_wise(s_, x, e_), e_) for x in xs]
            whole = pc.binary_join_element_wise(*parts, e_)
            return pc.utf8_slice_codeunits(whole, len(separator))

        return self._call(joined, texts, pa.string(), sql="concat_ws")

    def _strpos(self, node: exp.StrPosition) -> Typed:
        """The 1-based character position of the first match, 0 where there is none."""
        x = self._string_operand(node.this, "strpos")
        needle = self._string_arg(node.args.get("substr"), "strpos")
        if needle is None or x.is_null_const:
            return const(pa.scalar(None, pa.int32()))
        if needle == "":
            found = self._call(pc.utf8_length, [x], pa.int32())
            return self._call(lambda v: pc.add(pc.multiply(v, 0), 1), [found], pa.int32())

        def position(v):
            before = pc.list_element(pc.split_pattern(v, pattern=needle, max_splits=1), 0)
            at = pc.add(pc.utf8_length(before), 1)
            return pc.if_else(pc.match_substring(v, pattern=needle), at, 0)

        return self._call(position, [x], pa.int32(), sql="strpos")

    def _trim(self, node: exp.Expression, btrim_args: list | None) -> Typed:
        if btrim_args is not None:
            subject, chars_node = btrim_args[0], btrim_args[1] if len(btrim_args) > 1 else None
            where = "BOTH"
        else:
            subject, chars_node = node.this, node.expression
            where = str(node.args.get("position") or "BOTH").upper()
            if where not in ("LEADING", "TRAILING"):
                raise self.unsupported("TRIM (pylance's planner refuses it; use btrim)")
        x = self._string_operand(subject, "trim")
        chars = " " if chars_node is None else self._string_arg(chars_node, "trim")
        if chars is None:
            return const(pa.scalar(None, x.type))
        fn = {"LEADING": pc.utf8_ltrim, "TRAILING": pc.utf8_rtrim}.get(where, pc.utf8_trim)
        return self._call(fn, [x], x.type, sql="trim", characters=chars)

    def _left_right(self, node: exp.Expression) -> Typed:
        x = self._string_operand(node.this, "left/right")
        n = _int_const(self.bind(node.expression))
        if n is None:
            raise self.bind_error("the length of left/right must be an integer constant")
        if isinstance(node, exp.Left):
            bounds = {"start": 0, "stop": n} if n != 0 else {"start": 0, "stop": 0}
        elif n > 0:
            bounds = {"start": -n}
        elif n == 0:
            bounds = {"start": 0, "stop": 0}
        else:
            bounds = {"start": -n}
        # DataFusion's left and right return string views
        return self._call(
            lambda v: pc.utf8_slice_codeunits(v, **bounds).cast(pa.string_view()),
            [x],
            pa.string_view(),
            sql="left/right",
        )

    def _pad(self, node: exp.Pad) -> Typed:
        x = self._string_operand(node.this, "lpad/rpad")
        width = _int_const(self.bind(node.expression))
        if width is None:
            raise self.bind_error("the length of lpad/rpad must be an integer constant")
        fill = " "
        if node.args.get("fill_pattern") is not None:
            fill = self._string_arg(node.args["fill_pattern"], "lpad/rpad")
            if fill is None:
                return const(pa.scalar(None, x.type))
        if len(fill) != 1:
            raise self.unsupported("lpad/rpad with a fill of more than one character")
        width = max(width, 0)
        cut = self._call(pc.utf8_slice_codeunits, [x], x.type, start=0, stop=width)
        fn = pc.utf8_lpad if node.args.get("is_left") else pc.utf8_rpad
        return self._call(fn, [cut], x.type, sql="pad", width=width, padding=fill)

    def _split_part(self, node: exp.SplitPart) -> Typed:
        x = self._string_operand(node.this, "split_part")
        delimiter = self._string_arg(node.args.get("delimiter"), "split_part")
        index = _int_const(self.bind(node.args["part_index"]))
        if index is None or index < 1:
            raise self.unsupported("split_part with a part that is not a positive constant")
        if delimiter is None:
            return const(pa.scalar(None, x.type))
        if delimiter == "":
            return self._call(
                lambda v: v if index == 1 else pc.utf8_slice_codeunits(v, 0, 0), [x], x.type
            )
        # enough trailing delimiters that the part always exists ('' past the last one)
        padding = pa.scalar(delimiter * index, x.type)

        def part(v):
            padded = pc.binary_join_element_wise(v, padding, pa.scalar("", x.type))
            return pc.list_element(pc.split_pattern(padded, pattern=delimiter), index - 1)

        return self._call(part, [x], x.type, sql="split_part")

    def _regexp_replace(self, node: exp.RegexpReplace) -> Typed:
        x = self._string_operand(node.this, "regexp_replace")
        pattern = self._string_arg(node.expression, "regexp_replace")
        replacement = self._string_arg(node.args.get("replacement"), "regexp_replace")
        flags = ""
        for key in ("modifiers", "position"):  # sqlglot keeps the 4th argument as position
            if node.args.get(key) is not None:
                flags = self._string_arg(node.args[key], "regexp_replace") or ""
        if set(flags) - {"g", "i"}:
            raise self.bind_error(f"unsupported regular expression flags {flags!r}")
        if pattern is None or replacement is None:
            return const(pa.scalar(None, x.type))
        if "i" in flags:
            pattern = "(?i)" + pattern
        return self._call(
            pc.replace_substring_regex,
            [x],
            x.type,
            sql="regexp_replace",
            pattern=pattern,
            replacement=replacement,
            max_replacements=None if "g" in flags else 1,
        )

    def _extreme(self, node: exp.Expression) -> Typed:
        """greatest / least: the largest / smallest non-NULL argument (floats in total
        order: NaN above every number)."""
        args = [self.bind(a) for a in [node.this, *node.expressions]]
        target: pa.DataType = pa.null()
        for a in args:
            common = T.comparison_type(target, a.type)
            if common is None or pa.types.is_nested(common):
                raise self.bind_error(f"greatest/least cannot mix {target} and {a.type}")
            target = common
        args = [self._cast(a, target) for a in args]
        most = isinstance(node, exp.Greatest)
        fn = pc.max_element_wise if most else pc.min_element_wise
        result = self._call(lambda *xs: fn(*xs, skip_nulls=True), args, target, sql="greatest")
        if T.is_float(target) and not result.const:
            # Arrow's kernels skip NaN; in DataFusion's total order it is the largest value
            any_nan = None
            for a in args:
                term = pc.coalesce(pc.is_nan(a.expression()), pc.scalar(False))
                any_nan = term if any_nan is None else pc.or_kleene(any_nan, term)
            if most:
                nan = pc.scalar(pa.scalar(float("nan"), target))
                return Typed(type=target, expr=pc.if_else(any_nan, nan, result.expr))
            all_nan = None
            for a in args:
                nan_here = pc.coalesce(pc.is_nan(a.expression()), pc.scalar(False))
                term = pc.or_kleene(pc.is_null(a.expression()), nan_here)
                all_nan = term if all_nan is None else pc.and_kleene(all_nan, term)
            nan = pc.scalar(pa.scalar(float("nan"), target))
            picked = pc.if_else(pc.and_kleene(all_nan, any_nan), nan, result.expr)
            return Typed(type=target, expr=picked)
        return result

    # -------------------------------------------------------------------- times

    def _temporal(self, node: exp.Expression, fn: str) -> Typed:
        x = self.bind(node)
        if not (T.is_timestamp(x.type) or T.is_date(x.type)):
            raise self.bind_error(f"{fn} needs a date or timestamp, got {x.sql or 'a value'}")
        return x

    def _date_trunc(self, node: exp.Expression) -> Typed:
        if isinstance(node, exp.Anonymous):
            unit_node, subject = node.expressions[0], node.expressions[1]
            unit = self._string_arg(unit_node, "date_trunc")
        else:
            unit_arg, subject = node.args.get("unit"), node.this
            unit = unit_arg.name if isinstance(unit_arg, (exp.Var, exp.Literal)) else None
        if unit is None or unit.lower() not in _TRUNC_UNITS:
            raise self.bind_error(f"unsupported date_trunc unit {unit!r}")
        x = self._temporal(subject, "date_trunc")
        if T.is_date(x.type):  # dates truncate as nanosecond timestamps (DataFusion)
            x = self._cast(x, pa.timestamp("ns"))
        return self._call(
            pc.floor_temporal, [x], x.type, sql="date_trunc", unit=_TRUNC_UNITS[unit.lower()]
        )

    def _date_part(self, part_node: exp.Expression, subject: exp.Expression) -> Typed:
        part = (self._string_arg(part_node, "date_part") or "").lower()
        x = self._temporal(subject, "date_part")
        if part == "epoch":
            if T.is_date(x.type):
                x = self._cast(x, pa.timestamp("s"))
            per_second = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}[x.type.unit]
            seconds = self._cast(x, pa.int64())
            return self._call(
                lambda v: pc.divide(v.cast(pa.float64()), per_second),
                [seconds],
                pa.float64(),
                sql="date_part",
            )
        single = {
            "year": pc.year,
            "quarter": pc.quarter,
            "month": pc.month,
            "week": pc.iso_week,
            "day": pc.day,
            "doy": pc.day_of_year,
            "hour": pc.hour,
            "minute": pc.minute,
            "second": pc.second,
        }
        if part == "dow":
            fn = lambda v: pc.day_of_week(v, count_from_zero=True, week_start=7)  # noqa: E731
        elif part in single:
            fn = single[part]
        elif part in ("millisecond", "microsecond", "nanosecond"):
            scale = {"millisecond": 1_000, "microsecond": 1_000_000, "nanosecond": 10**9}[part]

            def fn(v):
                whole = pc.multiply(pc.second(v), scale)
                sub = pc.add(
                    pc.multiply(pc.millisecond(v), 10**6),
                    pc.add(pc.multiply(pc.microsecond(v), 1000), pc.nanosecond(v)),
                )
                return pc.add(whole, pc.divide(sub, 10**9 // scale))
        else:
            raise self.bind_error(f"unsupported date_part part {part!r}")
        return self._call(lambda v: fn(v).cast(pa.int32()), [x], pa.int32(), sql="date_part")

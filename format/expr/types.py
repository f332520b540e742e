"""Type rules of pylance filters: SQL type names, literal coercion and implicit casts.

Two layers of rules decide the types in a pylance filter, and both are reproduced here:

- pylance's own *literal resolution*: in `column <op> literal` (and BETWEEN / IN on a
  column) a bare SQL literal is converted to the column's type or the filter is rejected
  (`i32 = 10.5`, `d = '2024-01-01'`, `i8 = 1000` are errors);
- DataFusion's *type coercion* for everything else (`i8 + 1 > 5` computes in int64,
  `NOT (i32 = 10.5)` compares as float64, `d < timestamp '...'` compares as timestamps).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from quiver.format.errors import TypeRuleError

_DT = exp.DataType.Type


# ---------------------------------------------------------------------------- predicates


def is_null_type(t: pa.DataType) -> bool:
    """True for the type of an untyped NULL literal."""
    return pa.types.is_null(t)


def is_integer(t: pa.DataType) -> bool:
    """True for signed and unsigned integer types."""
    return pa.types.is_integer(t)


def is_float(t: pa.DataType) -> bool:
    """True for float16/32/64."""
    return pa.types.is_floating(t)


def is_decimal(t: pa.DataType) -> bool:
    """True for decimal32/64/128/256."""
    return pa.types.is_decimal(t)


def is_numeric(t: pa.DataType) -> bool:
    """True for integer, floating point and decimal types."""
    return is_integer(t) or is_float(t) or is_decimal(t)


def is_string(t: pa.DataType) -> bool:
    """True for utf8, large_utf8 and utf8_view."""
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def is_binary(t: pa.DataType) -> bool:
    """True for variable and fixed size binary types."""
    return (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    )


def is_date(t: pa.DataType) -> bool:
    """True for date32 and date64."""
    return pa.types.is_date(t)


def is_timestamp(t: pa.DataType) -> bool:
    """True for timestamps of any unit and zone."""
    return pa.types.is_timestamp(t)


# ---------------------------------------------------------------------------- SQL types

_TIME_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}

_SIMPLE_SQL_TYPES: dict[Any, pa.DataType] = {
    _DT.TEXT: pa.string(),
    _DT.VARCHAR: pa.string(),
    _DT.NVARCHAR: pa.string(),
    _DT.CHAR: pa.string(),
    _DT.NCHAR: pa.string(),
    _DT.BINARY: pa.binary(),
    _DT.VARBINARY: pa.binary(),
    _DT.FLOAT: pa.float32(),
    _DT.DOUBLE: pa.float64(),
    _DT.BOOLEAN: pa.bool_(),
    _DT.TINYINT: pa.int8(),
    _DT.SMALLINT: pa.int16(),
    _DT.INT: pa.int32(),
    _DT.BIGINT: pa.int64(),
    _DT.UTINYINT: pa.uint8(),
    _DT.USMALLINT: pa.uint16(),
    _DT.UINT: pa.uint32(),
    _DT.UBIGINT: pa.uint64(),
    _DT.DATE: pa.date32(),
}


def sql_type_to_arrow(data_type: exp.DataType) -> pa.DataType:
    """Map a SQL type of CAST / typed literals to Arrow, as pylance's planner does."""
    kind = data_type.this
    params = [p.this if isinstance(p, exp.DataTypeParam) else p for p in data_type.expressions]
    values = []
    for p in params:
        if isinstance(p, exp.Literal) and not p.is_string:
            values.append(int(p.this))
        else:
            raise TypeRuleError(f"unsupported type parameter in {data_type.sql()}")
    if kind in _SIMPLE_SQL_TYPES:
        return _SIMPLE_SQL_TYPES[kind]
    if kind in (_DT.TIMESTAMP, _DT.DATETIME):
        precision = values[0] if values else 6
        if precision not in _TIME_UNITS:
            raise TypeRuleError(f"unsupported timestamp precision {precision}; use 0, 3, 6 or 9")
        return pa.timestamp(_TIME_UNITS[precision])
    if kind in (_DT.TIMESTAMPTZ, _DT.TIMESTAMPLTZ):
        raise TypeRuleError("time zones are not supported in timestamp types")
    if kind == _DT.DECIMAL:
        if len(values) != 2:
            raise TypeRuleError("decimal types need a precision and a scale: DECIMAL(p, s)")
        precision, scale = values
        if not 1 <= precision <= 76 or scale > precision:
            raise TypeRuleError(f"invalid decimal precision/scale ({precision}, {scale})")
        return pa.decimal128(precision, scale) if precision <= 38 else pa.decimal256(*values)
    raise TypeRuleError(
        f"unsupported data type {data_type.sql()}; supported: int, tinyint, smallint, bigint "
        "[unsigned], float, double, string, binary, date, timestamp(p), datetime(p), "
        "decimal(p, s), boolean"
    )


# ---------------------------------------------------------------------------- literals


def number_literal(text: str) -> pa.Scalar:
    """The scalar of a SQL number: int64 if it fits, else uint64, else float64 (as pylance)."""
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
        if -(2**63) <= value < 2**63:
            return pa.scalar(value, pa.int64())
        if 0 <= value < 2**64:
            return pa.scalar(value, pa.uint64())
    try:
        return pa.scalar(float(text), pa.float64())
    except ValueError:
        raise TypeRuleError(f"{text!r} is not a supported number") from None


def _int_range(t: pa.DataType) -> tuple[int, int]:
    bits = t.bit_width
    if pa.types.is_signed_integer(t):
        return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def resolve_literal(value: pa.Scalar, target: pa.DataType) -> pa.Scalar | None:
    """Convert a bare SQL literal to a column's type the way pylance does, or None if refused.

    Integers convert to any integer type they fit in, to floats, and (int64) to decimals;
    floats only to floats; strings only to strings; booleans to booleans; NULL to anything.
    Nothing converts to dates, timestamps or decimals from a string or a float.
    """
    if pa.types.is_dictionary(target):
        target = target.value_type
    vt = value.type
    if is_null_type(vt) or not value.is_valid:
        return pa.scalar(None, target)
    py = value.as_py()
    if pa.types.is_float16(target) and (is_integer(vt) or is_float(vt)):
        return _half_literal(float(py))
    if is_integer(vt):
        if is_integer(target):
            lo, hi = _int_range(target)
            return pa.scalar(py, target) if lo <= py <= hi else None
        if pa.types.is_float32(target) or pa.types.is_float64(target):
            return pa.scalar(float(py), target)
        if is_decimal(target) and pa.types.is_signed_integer(vt):
            try:
                return _int_to_decimal(py, target)
            except TypeRuleError:
                return None
        return None
    if is_float(vt):
        if pa.types.is_float32(target) or pa.types.is_float64(target):
            return pa.scalar(py, target)
        return None
    if is_string(vt):
        return pa.scalar(py, target) if is_string(target) else None
    if pa.types.is_boolean(vt):
        return value if pa.types.is_boolean(target) else None
    if is_binary(vt):
        if pa.types.is_fixed_size_binary(target):
            return pa.scalar(py, target) if len(py) == target.byte_width else None
        return pa.scalar(py, target) if is_binary(target) else None
    return None


def _half_literal(py: float) -> pa.Scalar | None:
    """A number as a float16 literal, rounded to nearest; None where it would overflow to
    infinity or underflow to zero (pylance refuses those)."""
    with np.errstate(over="ignore"):
        half = np.float16(py)
    if (np.isinf(half) and not math.isinf(py)) or (half == 0 and py != 0):
        return None
    return pa.scalar(half, pa.float16())


# ---------------------------------------------------------------------------- coercion


def _int_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """DataFusion's integer coercion: the narrowest type holding both ranges."""
    if a == b:
        return a
    sa, sb = pa.types.is_signed_integer(a), pa.types.is_signed_integer(b)
    if sa == sb:
        return a if a.bit_width >= b.bit_width else b
    signed, unsigned = (a, b) if sa else (b, a)
    if unsigned.bit_width < signed.bit_width:
        return signed
    if unsigned.bit_width == 64:
        # no integer type holds both: DataFusion (pylance 14) compares and computes in
        # decimal, so `u64 + i64` is decimal128(21, 0) and never wraps
        return pa.decimal128(20, 0)
    return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}[unsigned.bit_width]


def _as_decimal(t: pa.DataType) -> tuple[int, int]:
    """DataFusion's decimal stand-in for a numeric type (used when mixed with decimals)."""
    if is_decimal(t):
        return t.precision, t.scale
    if is_float(t):
        return (30, 15) if pa.types.is_float64(t) else (14, 7)
    digits = {8: 3, 16: 5, 32: 10, 64: 20}[t.bit_width]
    return digits, 0


def as_decimal_type(t: pa.DataType) -> pa.DataType:
    """The decimal type an integer operand becomes in decimal arithmetic (decimals unchanged)."""
    if is_decimal(t):
        return t
    precision, scale = _as_decimal(t)
    return pa.decimal128(precision, scale)


def decimal_arith_type(op: str, a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The result type of decimal `a <op> b` (op one of + - * / %), by arrow-rs' rules as
    DataFusion applies them: a quotient gets 4 more decimals than its dividend."""
    wide = pa.types.is_decimal256(a) or pa.types.is_decimal256(b)
    most = 76 if wide else 38
    (p1, s1), (p2, s2) = (a.precision, a.scale), (b.precision, b.scale)
    if op in "+-":
        scale = max(s1, s2)
        precision = max(p1 - s1, p2 - s2) + scale + 1
    elif op == "*":
        precision, scale = p1 + p2 + 1, s1 + s2
    elif op == "/":
        precision, scale = p1 + s2 + 4, s1 + 4
    else:
        scale = max(s1, s2)
        precision = min(p1 - s1, p2 - s2) + scale
    if scale > most:
        raise TypeRuleError(f"{a} {op} {b} needs {scale} decimals, more than {most}")
    make = pa.decimal256 if wide else pa.decimal128
    return make(min(precision, most), scale)


def numeric_common(a: pa.DataType, b: pa.DataType, *, for_compare: bool = True) -> pa.DataType:
    """The type two numeric operands are cast to before they are compared or combined."""
    if is_decimal(a) or is_decimal(b):
        # arithmetic with a float is done in float64; a comparison with a float is done in
        # decimal (so NaN and infinity fail, as in pylance)
        if not for_compare and (is_float(a) or is_float(b)):
            return pa.float64()
        (pa_, sa), (pb, sb) = _as_decimal(a), _as_decimal(b)
        scale = max(sa, sb)
        precision = max(pa_ - sa, pb - sb) + scale
        if precision <= 38 or not (pa.types.is_decimal256(a) or pa.types.is_decimal256(b)):
            return pa.decimal128(min(precision, 38), min(scale, 38))
        return pa.decimal256(min(precision, 76), scale)
    if pa.types.is_float64(a) or pa.types.is_float64(b):
        return pa.float64()
    if is_float(a) or is_float(b):
        return pa.float32()
    return _int_common(a, b)


def _string_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(a) or pa.types.is_large_string(b):
        return pa.large_string()
    return pa.string()


def _binary_common(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    if pa.types.is_large_binary(a) or pa.types.is_large_binary(b):
        return pa.large_binary()
    return pa.binary()


_UNIT_ORDER = {"s": 0, "ms": 1, "us": 2, "ns": 3}


def _temporal_common(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    if is_date(a) and is_date(b):
        return pa.date64() if pa.types.is_date64(a) or pa.types.is_date64(b) else pa.date32()
    if is_date(a) and is_timestamp(b):
        return b
    if is_timestamp(a) and is_date(b):
        return a
    if is_timestamp(a) and is_timestamp(b):
        unit = a.unit if _UNIT_ORDER[a.unit] <= _UNIT_ORDER[b.unit] else b.unit
        return pa.timestamp(unit, a.tz if a.tz is not None else b.tz)
    if pa.types.is_time(a) and pa.types.is_time(b):
        return a if _UNIT_ORDER[a.unit] <= _UNIT_ORDER[b.unit] else b
    return None


def comparison_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides of a comparison are cast to (DataFusion rules), or None."""
    if a == b:
        return a
    if is_null_type(a):
        return b
    if is_null_type(b):
        return a
    if is_numeric(a) and is_numeric(b):
        return numeric_common(a, b)
    if is_string(a) and is_string(b):
        return _string_common(a, b)
    if is_binary(a) and is_binary(b):
        return _binary_common(a, b)
    if (is_string(a) and is_binary(b)) or (is_binary(a) and is_string(b)):
        return _binary_common(a, b)
    temporal = _temporal_common(a, b)
    if temporal is not None:
        return temporal
    for s, other in ((a, b), (b, a)):
        if is_string(s) and (
            is_numeric(other) or is_date(other) or is_timestamp(other) or pa.types.is_boolean(other)
        ):
            return other
    return None


# ---------------------------------------------------------------------------- constants

_TS_RE = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|z|[+-]\d{2}(?::?\d{2})?)?\s*$"
)
_DATE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ].*)?$")
_UNIT_NS = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_EPOCH = dt.datetime(1970, 1, 1)


def _parse_timestamp_ns(text: str) -> tuple[int, bool]:
    """Parse an ISO-8601-like timestamp into (nanoseconds since epoch, has explicit offset)."""
    m = _TS_RE.match(text)
    if not m:
        raise TypeRuleError(f"cannot parse {text!r} as a timestamp")
    year, month, day, hour, minute, second, frac, offset = m.groups()
    try:
        base = dt.datetime(
            int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0)
        )
    except ValueError as e:
        raise TypeRuleError(f"cannot parse {text!r} as a timestamp: {e}") from None
    delta = base - _EPOCH
    ns = (delta.days * 86400 + delta.seconds) * 1_000_000_000
    if frac:
        ns += int(frac.ljust(9, "0"))
    if offset and offset not in ("Z", "z"):
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
        ns -= sign * minutes * 60 * 1_000_000_000
    return ns, offset is not None


def _div_trunc(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _localize(value: pa.Scalar, tz: str) -> pa.Scalar:
    """Reinterpret a naive timestamp as wall time in `tz` (Arrow's naive -> zoned cast)."""
    try:
        arr = pc.assume_timezone(
            pa.array([value], value.type), timezone=tz, ambiguous="earliest", nonexistent="earliest"
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise TypeRuleError(f"cannot place {value} in time zone {tz!r}: {e}") from None
    return arr[0]


def string_to_timestamp(text: str, target: pa.DataType) -> pa.Scalar:
    """Cast a string constant to a timestamp type with arrow-rs semantics."""
    ns, has_offset = _parse_timestamp_ns(text)
    value = pa.scalar(_div_trunc(ns, _UNIT_NS[target.unit]), pa.timestamp(target.unit))
    if target.tz is None:
        return value
    if has_offset:
        return value.cast(target)
    return _localize(value, target.tz)


def string_to_date(text: str, target: pa.DataType) -> pa.Scalar:
    """Cast a string constant to a date type."""
    m = _DATE_RE.match(text)
    if not m:
        raise TypeRuleError(f"cannot parse {text!r} as a date")
    try:
        day = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError as e:
        raise TypeRuleError(f"cannot parse {text!r} as a date: {e}") from None
    return pa.scalar(day, target)


_TRUE_STRINGS = {"true", "t", "yes", "y", "on", "1"}
_FALSE_STRINGS = {"false", "f", "no", "n", "off", "0"}


def cast_constant(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    """Cast a compile-time constant to `target`, raising TypeRuleError when it cannot."""
    source = value.type
    if source == target:
        return value
    if not value.is_valid:
        return pa.scalar(None, target)
    if pa.types.is_dictionary(target):
        target = target.value_type
    if is_string(source):
        text = value.as_py()
        if is_timestamp(target):
            return string_to_timestamp(text, target)
        if is_date(target):
            return string_to_date(text, target)
        if pa.types.is_boolean(target):
            low = text.strip().lower()
            if low in _TRUE_STRINGS or low in _FALSE_STRINGS:
                return pa.scalar(low in _TRUE_STRINGS)
            raise TypeRuleError(f"cannot cast {text!r} to boolean")
        if is_integer(target):
            stripped = text.strip()
            if not re.fullmatch(r"[+-]?\d+", stripped):
                raise TypeRuleError(f"cannot cast {text!r} to {target}")
            return _cast_int(int(stripped), target)
    if is_timestamp(source) and is_timestamp(target):
        if source.tz is None and target.tz is not None:
            value = _localize(value, target.tz)
        return _arrow_cast(value, target)
    if is_timestamp(source) and source.tz is not None and is_date(target):
        local = pc.local_timestamp(pa.array([value], source))[0]
        return _arrow_cast(local, target)
    if is_date(source) and is_timestamp(target):
        days = value.cast(pa.date32()).value
        return pa.scalar(days * 86400 * (1_000_000_000 // _UNIT_NS[target.unit]), target)
    if is_integer(source) and is_integer(target):
        return _cast_int(value.as_py(), target)
    if is_integer(source) and is_decimal(target):
        return _int_to_decimal(value.as_py(), target)
    return _arrow_cast(value, target)


def _int_to_decimal(py: int, target: pa.DataType) -> pa.Scalar:
    if abs(py) >= 10 ** (target.precision - target.scale):
        raise TypeRuleError(f"{py} does not fit in {target}")
    return pa.scalar(decimal.Decimal(py), target)


def _cast_int(py: int, target: pa.DataType) -> pa.Scalar:
    lo, hi = _int_range(target)
    if not lo <= py <= hi:
        raise TypeRuleError(f"{py} is out of range for {target}")
    return pa.scalar(py, target)


def _unwrappable(t: pa.DataType) -> bool:
    return is_integer(t) or is_decimal(t) or is_timestamp(t)


def unwrap_constant(value: pa.Scalar, source: pa.DataType) -> pa.Scalar | None:
    """The constant of `CAST(x AS T) <op> constant` in x's own type, or None (DataFusion's
    unwrap-cast rewrite, which compares x directly and so never evaluates the cast).

    Integers and decimals convert only exactly; timestamps convert with truncation.
    """
    target = value.type
    if not (_unwrappable(source) and _unwrappable(target)) or not value.is_valid:
        return None
    if is_timestamp(source) != is_timestamp(target):
        return None
    if is_timestamp(source):
        if source.tz != target.tz:
            return None
        ns = value.value * _UNIT_NS[target.unit]
        return pa.scalar(_div_trunc(ns, _UNIT_NS[source.unit]), source)
    number = decimal.Decimal(value.as_py())
    if is_integer(source):
        lo, hi = _int_range(source)
        if number != number.to_integral_value() or not lo <= number <= hi:
            return None
        return pa.scalar(int(number), source)
    quantum = decimal.Decimal(1).scaleb(-source.scale)
    try:
        exact = number.quantize(quantum)
    except decimal.InvalidOperation:
        return None
    if exact != number or len(exact.as_tuple().digits) > source.precision:
        return None
    return pa.scalar(exact, source)


def cast_options(target: pa.DataType, source: pa.DataType | None = None) -> pc.CastOptions:
    """Options of a SQL CAST: truncation of floats, decimals and times allowed, overflow
    refused, and a float NaN or infinity never silently becomes a decimal."""
    return pc.CastOptions(
        target,
        allow_int_overflow=False,
        allow_time_truncate=True,
        allow_time_overflow=False,
        allow_decimal_truncate=source is None or not is_float(source),
        allow_float_truncate=True,
        allow_invalid_utf8=False,
    )


# Arrow C++ (pyarrow 26) drops some numbers of decimal digits wrongly in a truncating cast
# (by 14, 15, 17 to 20 or 24 digits: 9223372036854775807.5 at scale 21 -> scale 4 gives
# 9223372036854156837.4803); a drop of at most 13 digits is exact, so longer ones go in steps
_EXACT_DECIMAL_DROP = 13


def decimal_rescale(
    expr: pc.Expression,
    source: pa.DataType,
    target: pa.DataType,
    *,
    round_half: bool = False,
    check: bool = True,
) -> pc.Expression:
    """A decimal runtime value as decimal `target`: the digits past its scale dropped
    (toward zero, or rounded half away from zero as arrow-rs' CAST does), then, with
    `check`, its precision checked, so that an overflow fails as in pylance rather than
    wrapping around."""
    wide = pa.types.is_decimal256(source) or pa.types.is_decimal256(target)
    make = pa.decimal256 if wide else pa.decimal128
    precision, scale = source.precision, source.scale
    if target.scale < scale:
        if round_half and precision < 76:
            # Arrow gives the sum one more digit: in decimal256 when that passes 38
            if not wide and precision + 1 > 38:
                make = pa.decimal256
                expr = expr.cast(options=cast_options(make(precision, scale)))
            half = pc.scalar(
                pa.scalar(decimal.Decimal(5).scaleb(-(target.scale + 1)), make(precision, scale))
            )
            negative = pc.less(expr, pc.scalar(pa.scalar(0, make(precision, scale))))
            expr = pc.if_else(negative, pc.subtract(expr, half), pc.add(expr, half))
            precision += 1
        while scale > target.scale:
            scale = max(target.scale, scale - _EXACT_DECIMAL_DROP)
            expr = expr.cast(options=cast_options(make(precision, scale)))
    options = cast_options(target)
    options.allow_decimal_truncate = not check
    return expr.cast(options=options)


def _arrow_cast(value: pa.Scalar, target: pa.DataType) -> pa.Scalar:
    if _formats_like_arrow_rs(value.type, target):
        return to_string_like_arrow_rs(pa.array([value], value.type))[0]
    try:
        return pc.cast(value, options=cast_options(target, value.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise TypeRuleError(f"cannot cast {value} ({value.type}) to {target}: {e}") from None


def cast_expression(
    expr: pc.Expression,
    source: pa.DataType,
    target: pa.DataType,
    *,
    null_out_of_range: bool = True,
    round_decimals: bool = False,
) -> pc.Expression:
    """Cast a runtime expression, treating naive -> zoned timestamps as local wall time;
    numbers out of an integer target's range become NULL or (if not `null_out_of_range`)
    fail the evaluation, as do (then) decimals out of a decimal target's precision. A
    decimal loses its extra digits toward zero, or rounded (`round_decimals`: a SQL CAST)."""
    if source == target:
        return expr
    if is_decimal(source) and is_decimal(target):
        return decimal_rescale(
            expr, source, target, round_half=round_decimals, check=not null_out_of_range
        )
    if pa.types.is_dictionary(target):
        target = target.value_type
    if _formats_like_arrow_rs(source, target):
        if is_timestamp(source):
            return _timestamp_text(expr.cast(pa.string()))
        return pc.Expression._call(_float_text_udf(source), [expr])
    if is_timestamp(source) and is_timestamp(target) and source.tz is None and target.tz:
        expr = pc.assume_timezone(
            expr, timezone=target.tz, ambiguous="earliest", nonexistent="earliest"
        )
        source = pa.timestamp(source.unit, target.tz)
        if source == target:
            return expr
    if is_date(source) and is_timestamp(target) and target.tz is not None:
        expr = expr.cast(options=cast_options(pa.timestamp(target.unit)))
    if is_timestamp(source) and source.tz is not None and is_date(target):
        expr = pc.local_timestamp(expr)  # arrow-rs takes the date in the column's zone
    if is_integer(source) and is_decimal(target) and as_decimal_type(source) != target:
        # Arrow checks int -> decimal precision by type; arrow-rs checks each value
        expr = expr.cast(options=cast_options(as_decimal_type(source)))
    options = cast_options(target, source)
    if is_integer(target) and (is_integer(source) or is_float(source)):
        fits = _fits(expr, source, target)
        if fits is None:
            pass
        elif null_out_of_range:
            expr = pc.if_else(fits, expr, pc.scalar(pa.scalar(None, source)))
        elif is_float(source):
            # Arrow's float truncation skips its range check: truncate the rows that fit
            # and let the checked cast fail on the others (NaN included)
            expr = pc.if_else(fits, pc.trunc(expr), expr)
            options.allow_float_truncate = False
    return expr.cast(options=options)


def _fits(expr: pc.Expression, source: pa.DataType, target: pa.DataType) -> pc.Expression | None:
    """Where a number fits the integer `target` (None: it always does).

    Filters make the others NULL so that the cast cannot fail: pylance evaluates the right of
    AND/OR only on the rows that need it, so a guarded `i64 < 1000 AND CAST(i64 AS INT) = 5`
    never casts an out-of-range value there, while Arrow evaluates every row.
    """
    lo, hi = _int_range(target)
    if is_integer(source):
        src_lo, src_hi = _int_range(source)
        if src_lo >= lo and src_hi <= hi:
            return None
        low, high = pa.scalar(max(lo, src_lo), source), pa.scalar(min(hi, src_hi), source)
        return pc.and_kleene(pc.greater_equal(expr, low), pc.less_equal(expr, high))
    # truncation toward zero keeps (lo - 1, hi + 1) exclusive in range; NaN fails
    low, high = pa.scalar(float(lo) - 1.0, source), pa.scalar(float(hi) + 1.0, source)
    return pc.and_kleene(pc.greater(expr, low), pc.less(expr, high))


# ------------------------------------------------------------- floats and times as text


def _formats_like_arrow_rs(source: pa.DataType, target: pa.DataType) -> bool:
    """True where Arrow's cast to a string spells the value unlike arrow-rs (pylance)."""
    wanted = is_string(target) or pa.types.is_dictionary(target) and is_string(target.value_type)
    return wanted and (
        pa.types.is_float32(source) or pa.types.is_float64(source) or is_timestamp(source)
    )


_Text = TypeVar("_Text", pa.Array, pc.Expression)


def to_string_like_arrow_rs(values: pa.Array) -> pa.Array:
    """Floats and timestamps as text, spelled as arrow-rs (pylance) casts them to strings."""
    text = values.cast(pa.string())
    if is_timestamp(values.type):
        return _timestamp_text(text)
    return _float_text(text, pa.types.is_float32(values.type))


def _timestamp_text(text: _Text) -> _Text:
    """Arrow's `2024-01-02 03:04:05.120000+0530` as `2024-01-02T03:04:05.120+05:30`:
    a T separator, the fraction in 0, 3, 6 or 9 digits, a colon in the offset."""
    text = pc.replace_substring(text, " ", "T", max_replacements=1)
    for pattern, repl in (
        (r"\.(\d{6})000($|[^\d])", r".\1\2"),
        (r"\.(\d{3})000($|[^\d])", r".\1\2"),
        (r"\.000($|[^\d])", r"\1"),
        (r"([+-]\d{2})(\d{2})$", r"\1:\2"),
    ):
        text = pc.replace_substring_regex(text, pattern, repl)
    return text


def _float_text(text: pa.Array, single: bool) -> pa.Array:
    """Arrow's shortest round-trip float text (`1`, `1e+20`, `nan`) respelled the way ryu
    does for arrow-rs (`1.0`, `1e20`, `NaN`): fixed notation while the decimal exponent
    fits (up to 13 digits for float32, 16 for float64), scientific beyond."""
    widest, smallest = (13, -6) if single else (16, -5)
    s = np.asarray(text.fill_null("0").to_numpy(zero_copy_only=False), dtype=np.str_)
    neg = np.strings.startswith(s, "-")
    body = np.where(neg, np.strings.slice(s, 1, None), s)
    mantissa, mark, exponent = np.strings.partition(body, "e")
    shift = np.where(mark == "e", np.where(mark == "e", exponent, "0").astype(np.int64), 0)
    whole, _, frac = np.strings.partition(mantissa, ".")
    digits = np.strings.add(whole, frac)
    trimmed = np.strings.lstrip(digits, "0")
    kk = (
        np.strings.str_len(whole)
        + shift
        - (np.strings.str_len(digits) - np.strings.str_len(trimmed))
    )
    digits = np.strings.rstrip(trimmed, "0")
    length = np.strings.str_len(digits)
    k = kk - length
    zeros = np.strings.multiply("0", np.maximum(np.maximum(k, -kk), 0))
    head = np.strings.slice(digits, 0, np.maximum(kk, 1))
    tail = np.strings.slice(digits, np.maximum(kk, 1), None)
    sci = np.strings.add(
        np.strings.add(np.strings.slice(digits, 0, 1), "."), np.strings.slice(digits, 1, None)
    )
    sci = np.where(length == 1, np.strings.slice(digits, 0, 1), sci)
    sci = np.strings.add(np.strings.add(sci, "e"), (kk - 1).astype(np.str_))
    out = np.where(
        (k >= 0) & (kk <= widest),
        np.strings.add(np.strings.add(digits, zeros), ".0"),
        np.where(
            (kk > 0) & (kk <= widest),
            np.strings.add(np.strings.add(head, "."), tail),
            np.where(
                (kk > smallest) & (kk <= 0),
                np.strings.add(np.strings.add("0.", zeros), digits),
                sci,
            ),
        ),
    )
    out = np.where(length == 0, "0.0", out)
    out = np.where(body == "nan", "NaN", np.where(body == "inf", body, out))
    out = np.where(neg, np.strings.add("-", out), out)
    return pa.array(out, pa.string(), mask=np.asarray(text.is_null()))


def _float_text_udf(source: pa.DataType) -> str:
    """The name of a compute function applying `to_string_like_arrow_rs` to `source` values,
    registered on first use so that expressions can call it."""
    name = f"quiver_{source}_text_like_arrow_rs"
    if name not in pc.list_functions():
        try:
            pc.register_scalar_function(
                lambda _ctx, values: to_string_like_arrow_rs(values),
                name,
                {"summary": f"{source} as arrow-rs spells it", "description": ""},
                {"values": source},
                pa.string(),
            )
        except pa.ArrowKeyError:  # another thread registered it first
            pass
    return name

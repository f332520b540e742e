"""Arrow type classes every data-file reader and writer asks about."""

from __future__ import annotations

import pyarrow as pa


def fixed_bits(t: pa.DataType) -> int | None:
    """Bits per value of a flat fixed-width type (None for anything else)."""
    if (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_temporal(t)
        or pa.types.is_decimal(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return t.bit_width
    return None


def is_var_binary(t: pa.DataType) -> bool:
    """Whether `t` is string, binary or their large_ variants (offsets + bytes)."""
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )

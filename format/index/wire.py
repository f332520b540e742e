"""The protobuf wire format, for the small messages index details are: varints written, and
a message read as its fields by number (pylance's details carry fields Quiver has no
generated class for, and newer ones it must skip)."""

from __future__ import annotations

from typing import Any


def varint(value: int) -> bytes:
    """`value` (>= 0) as a protobuf varint."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def fields(blob: bytes) -> dict[int, list[Any]]:
    """Field number -> its values in order: ints for varints, bytes for length-delimited
    fields (fixed-width ones are skipped). ValueError for bytes that are not a message."""
    out: dict[int, list[Any]] = {}
    at = 0

    def read_varint() -> int:
        nonlocal at
        value, shift = 0, 0
        while True:
            if at >= len(blob):
                raise ValueError("a varint runs past the end")
            byte = blob[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("a varint is too long")

    while at < len(blob):
        key = read_varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.setdefault(number, []).append(read_varint())
        elif wire == 2:
            size = read_varint()
            if size > len(blob) - at:
                raise ValueError("a field runs past the end")
            out.setdefault(number, []).append(bytes(blob[at : at + size]))
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")
    return out

"""Repetition/definition layer kinds of 2.1+ pages (`lance.encodings21.RepDefLayer`).

A leaf column's `layers` list its ancestors innermost first (the leaf item, then its
struct/list parents outwards). Definition levels are numbered from the innermost layer up:
each layer owns `def_levels_owned` consecutive numbers, 0 meaning "valid everywhere".
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum


class Layer(IntEnum):
    """One ancestor layer of a leaf column, with what the page holds at that layer."""

    ALL_VALID_ITEM = 1
    ALL_VALID_LIST = 2
    NULLABLE_ITEM = 3
    NULLABLE_LIST = 4
    EMPTYABLE_LIST = 5  # no nulls, some empty lists
    NULL_AND_EMPTY_LIST = 6  # levels L = null list, L + 1 = empty list


LIST_LAYERS = frozenset(
    {Layer.ALL_VALID_LIST, Layer.NULLABLE_LIST, Layer.EMPTYABLE_LIST, Layer.NULL_AND_EMPTY_LIST}
)


def def_levels_owned(layer: Layer) -> int:
    """How many definition-level numbers `layer` uses (0, 1 or 2)."""
    if layer in (Layer.ALL_VALID_ITEM, Layer.ALL_VALID_LIST):
        return 0
    return 2 if layer == Layer.NULL_AND_EMPTY_LIST else 1


def is_list(layer: Layer) -> bool:
    """Whether `layer` is a list layer (adds a repetition level)."""
    return layer in LIST_LAYERS


def parse_layers(raw: Sequence[int], where: str) -> list[Layer]:
    """Validated layers from a page's protobuf enum values (0 and unknown values refused)."""
    from quiver.format.errors import CorruptFileError

    out = []
    for v in raw:
        try:
            out.append(Layer(int(v)))
        except ValueError:
            raise CorruptFileError(where, f"unknown repetition/definition layer {v}") from None
    if not out:
        raise CorruptFileError(where, "page has no repetition/definition layers")
    return out


def max_rep(layers: Sequence[Layer]) -> int:
    """Number of list layers = the repetition level that starts a new top-level row."""
    return sum(1 for layer in layers if is_list(layer))


def max_def(layers: Sequence[Layer]) -> int:
    """The largest definition level a page with these layers can hold."""
    return sum(def_levels_owned(layer) for layer in layers)


def max_visible_def(layers: Sequence[Layer]) -> int:
    """Entries with a definition level at most this have a value slot ("visible"): the levels
    owned by layers inside the innermost list (all of them when there is no list)."""
    total = 0
    for layer in layers:
        if is_list(layer):
            break
        total += def_levels_owned(layer)
    return total

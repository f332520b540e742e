"""The size of the Levenshtein automaton pylance 14 builds for one fuzzy query token, and
so whether it refuses the query: more than 10,000 states fail it ("failed to construct the
fuzzy query"). Rules checked against pylance 14.0.2 on 1,639 (token, distance, prefix)
cases, the boundary included (10,000 states pass, 10,001 fail).

A state summarises where the input read so far can be in the token: a row `r` over the
token's prefixes, `r[i]` the fewest edits turning the input into `token[:i]`, capped at
`distance + 1`. Reading a character `x` gives `r'[0] = r[0] + 1` and `r'[i + 1] =
min(r'[i] + 1, r[i + 1] + 1, r[i] + (token[i] != x))`; a row whose every entry is over
the distance is dead. Every character absent from the token leads to the same row.

- An ASCII token gets the `fst` crate's automaton of the whole token (`prefix_length`
  filters the expansions afterwards, at no cost in states). Rows are not capped at their
  first entry (they also count the characters read), each distinct live row is a state,
  each live "any other character" transition adds 18 states (the UTF-8 byte sequences of
  every code point, non-final bytes each a state, made anew per row), and each live
  transition on a token character adds its UTF-8 length less one.
- Any other token gets lance's own builder over the token less its first `prefix_length`
  characters: rows capped everywhere, each distinct live row a state, 7 states of "any
  character" bytes per distinct target of an "other" transition, one per distinct proper
  byte prefix of the token characters' encodings a row moves on, and one per byte of the
  exact prefix.
"""

from __future__ import annotations

import functools

LIMIT = 10_000
_FST_ANY_CHAR = 18  # non-final bytes of the 9 UTF-8 byte sequences covering U+0000..U+10FFFF
_LANCE_ANY_CHAR = 7  # lance's shared "any character" byte states


def too_large(token: str, distance: int, prefix_length: int = 0) -> str | None:
    """pylance's refusal of a fuzzy token whose automaton passes LIMIT states (its
    message), or None."""
    if token.isascii():
        if _fst_states(token, distance) is None:
            return (
                "failed to construct the fuzzy query: Levenshtein automaton exceeds size limit "
                f"of {LIMIT} states"
            )
    elif _lance_states(token[prefix_length:], token[:prefix_length], distance) is None:
        return (
            "failed to construct the fuzzy query: Unicode Levenshtein automaton exceeds state "
            f"limit of {LIMIT}"
        )
    return None


def _step(token: str, row: tuple[int, ...], x: str | None, cap: int, capped_start: bool):
    """The row after reading `x` (None: a character the token lacks)."""
    first = row[0] + 1
    out = [min(first, cap) if capped_start else first]
    for i, c in enumerate(token):
        v = min(out[i] + 1, row[i + 1] + 1, row[i] + (c != x))
        out.append(v if v < cap else cap)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _fst_states(token: str, distance: int) -> int | None:
    """States of the `fst` crate's automaton; None past LIMIT (the count only grows, so
    stopping there is exact)."""
    cap = distance + 1
    extra = [len(c.encode("utf-8")) - 1 for c in token]
    start = tuple(range(len(token) + 1))
    seen, todo, count = {start}, [start], 1
    while todo:
        row = todo.pop()
        other = _step(token, row, None, cap, False)
        if min(other) <= distance:
            count += _FST_ANY_CHAR
            if other not in seen:
                seen.add(other)
                todo.append(other)
                count += 1
        for i, c in enumerate(token):
            if row[i] > distance:
                continue
            nxt = _step(token, row, c, cap, False)
            if min(nxt) > distance:
                continue
            count += extra[i]
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
                count += 1
        if count > LIMIT:
            return None
    return count


@functools.lru_cache(maxsize=4096)
def _lance_states(token: str, prefix: str, distance: int) -> int | None:
    """States of lance's Unicode builder for `token` after the exact `prefix`; None past
    LIMIT."""
    cap = distance + 1
    distinct = list(dict.fromkeys(token))
    start = tuple(min(i, cap) for i in range(len(token) + 1))
    rows, todo, targets, count = {start}, [start], set(), 1
    at = 0
    while at < len(todo):
        row = todo[at]
        at += 1
        other = _step(token, row, None, cap, True)
        if min(other) <= distance:
            if other not in rows:
                rows.add(other)
                todo.append(other)
                count += 1
            if other not in targets:
                targets.add(other)
                count += _LANCE_ANY_CHAR
        live = {token[i] for i in range(len(token)) if row[i] <= distance}
        prefixes: set[bytes] = set()
        for c in distinct:
            if c not in live:
                continue
            nxt = _step(token, row, c, cap, True)
            if min(nxt) > distance:
                continue
            if nxt not in rows:
                rows.add(nxt)
                todo.append(nxt)
                count += 1
            encoded = c.encode("utf-8")
            prefixes.update(encoded[:j] for j in range(1, len(encoded)))
        count += len(prefixes)
        if count > LIMIT:
            return None
    count += len(prefix.encode("utf-8"))
    return None if count > LIMIT else count

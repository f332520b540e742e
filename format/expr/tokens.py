"""pylance's `contains_tokens(text, 'words')`: whether a text holds every word of a query as
a whole token, tokens being the maximal runs of the characters Rust calls alphanumeric
(`format.alphanumeric`: what pylance's `simple` full-text tokenizer keeps), compared as
they are (case kept).

A NULL text answers NULL; a query without tokens (empty, blank, NULL) answers true for every
non-NULL text. The test is vectorised: per query token, one regular expression over the
column that finds the token between non-alphanumeric characters or the text's ends.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from quiver.format.alphanumeric import re2_class, token_pattern


def query_tokens(query: str | None) -> list[str]:
    """The distinct tokens of a `contains_tokens` query, in order."""
    return list(dict.fromkeys(token_pattern().findall(query or "")))


def contains_tokens(values: Any, tokens: list[str]) -> Any:
    """Whether each text of `values` (an Arrow array, scalar or compute expression of
    strings) holds every one of `tokens` as a whole token."""
    if not tokens:
        return pc.match_substring_regex(values, pattern="")  # true, NULL where NULL
    found = None
    separator = f"[^{re2_class()}]"  # RE2 (Arrow's regular expressions)
    for token in tokens:  # letters, digits and marks only: nothing to escape
        pattern = f"(?:^|{separator}){token}(?:$|{separator})"
        match = pc.match_substring_regex(values, pattern=pattern)
        found = match if found is None else pc.and_kleene(found, match)
    return found


def contains_tokens_udf() -> Any:
    """`contains_tokens` as a DataFusion scalar function. The query is meant to be a
    constant; as in pylance, a batch's first query applies to all of its rows."""
    from datafusion import udf

    def evaluate(texts: pa.Array, queries: pa.Array) -> pa.Array:
        query = queries[0].as_py() if len(queries) else None
        return contains_tokens(texts, query_tokens(query))

    return udf(evaluate, [pa.string(), pa.string()], pa.bool_(), "immutable", "contains_tokens")
